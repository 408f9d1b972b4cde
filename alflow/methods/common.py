"""What every method's procedure shares: the engine's label of a run."""

from __future__ import annotations

from collections.abc import Mapping

from alflow.config import ServerConfig


def engine_note_of(server: ServerConfig, provenance: Mapping[str, object]) -> str | None:
    """The run's engine label: the config's (simulated, tiny engine, its label) and what the launch added.

    A launch adds a note when the install changes what the numbers are (vLLM's CPU build with alflow's synthetic
    port: ``Launch.engine_note``, in the server's provenance).
    """
    launched = provenance.get("engine_note")
    notes = [n for n in (server.engine_note, launched if isinstance(launched, str) else None) if n]
    return " ".join(notes) or None
