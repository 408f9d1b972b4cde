"""Runtime-varying K: server options that make a verify step check fewer than K drafts (DOMAIN.md section 9).

With such an option a step may verify fewer drafts than the configured K (SGLang's adaptive steps, vLLM's
batch-size schedule and DSpark confidence-scheduled verification, TensorRT-LLM's dynamic draft length). Under
**synthetic** acceptance the forced AL is then capped below the target and the per-position rates read from
counters are biased: InferenceX and AMD's ATOM forbid forced acceptance with them, and so does alflow (refused
before any work). Under **real** acceptance (M0, M1) they are allowed, recorded in the run's provenance and
shown in its report.

This module is the pure part: the typed finding (:class:`RuntimeKKnob`), the declaration a framework makes of
its knobs (:class:`KnobSpec`), and scanners over the places a knob can hide (command-line flags in both
``--flag value`` and ``--flag=value`` forms, JSON objects inside arguments, vLLM's dotted ``--json-arg.key``
form, rendered option mappings, the environment). Which names are knobs is each framework's fact and lives in
its recipe (``alflow/frameworks/<framework>/recipe.py``); no framework is named here.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from alflow.util.rows import load_row

RUNTIME_K_REASON = (
    "steps verify fewer than K drafts: the forced AL would be capped below the target and per-position rates "
    "biased; InferenceX and ATOM forbid it"
)
"""Why a runtime-varying-K knob is refused with synthetic acceptance (issue #31 item 3)."""

NOTE_WARNING = "WARNING: "
"""How a warning inside a statistics note starts (its ``; ``-joined parts): the point's audit message repeats it
(:func:`note_warnings`), so the report shows it."""
ACTIVE_K_WARNING = NOTE_WARNING + "the active K changed during the window"
"""How :func:`active_k_changes` starts each warning (found again in a statistics note by :func:`note_warnings`)."""

KnobKind = Literal["flag", "key", "env"]

_OFF = frozenset({"", "0", "false", "no", "off", "none", "null"})
"""Values that switch a boolean or optional knob off (compared lower-case)."""


@dataclass(frozen=True)
class KnobSpec:
    """One knob a framework declares: its name, where it is spelled that way, what it does, its source.

    ``kind``: ``flag`` (a command-line flag), ``key`` (a key of a JSON/YAML options object, such as vLLM's
    ``--speculative-config`` or TensorRT-LLM's ``speculative_config``), ``env`` (an environment variable).
    ``takes_value``: a flag that reads the next argument (``--flag value``); a switch (``store_true``) does not.
    ``off_values``: values meaning "off" beyond the usual false/0/none/empty (e.g. ``static`` for a mode).
    """

    name: str
    kind: KnobKind
    effect: str
    source: str
    takes_value: bool = False
    off_values: frozenset[str] = field(default_factory=frozenset)

    def is_on(self, value: object) -> bool:
        """True when ``value`` switches the knob on (None: a bare switch, on)."""
        if value is None:
            return True
        if isinstance(value, Mapping | list | tuple) and not value:
            return False
        text = _text(value).strip().lower()
        return text not in _OFF and text not in {v.lower() for v in self.off_values}


@dataclass(frozen=True)
class RuntimeKKnob:
    """A runtime-varying-K knob found in a server configuration: what, where, its value, why it matters."""

    name: str
    where: str
    """Where it was found, e.g. ``extra_args``, ``extra_args --speculative-config.KEY``, ``extra_env``, ``the
    rendered speculative_config``."""
    value: str | None
    effect: str
    source: str

    @property
    def shown(self) -> str:
        """``name`` or ``name=value``."""
        return self.name if self.value is None else f"{self.name}={self.value}"

    def describe(self) -> str:
        """One line for provenance and reports: the knob, where, what it does, the source."""
        return f"{self.shown} (in {self.where}): {self.effect} [{self.source}]"

    def refusal(self) -> str:
        """The one-line refusal under synthetic acceptance."""
        return (
            f"runtime-varying K: {self.shown} in {self.where} ({self.effect}; {self.source}) cannot run with "
            f"synthetic acceptance: {RUNTIME_K_REASON}. Drop it for M2, or measure real acceptance (M0/M1), "
            "where it is allowed and recorded"
        )


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _found(spec: KnobSpec, where: str, value: object) -> RuntimeKKnob:
    return RuntimeKKnob(spec.name, where, None if value is None else _text(value), spec.effect, spec.source)


def _split(arg: str) -> tuple[str, str | None]:
    flag, sep, value = arg.partition("=")
    return flag, (value if sep else None)


def scan_flags(args: Sequence[str], specs: Iterable[KnobSpec], where: str) -> list[RuntimeKKnob]:
    """Flags of ``specs`` in ``args``: ``--flag``, ``--flag value`` (a flag that takes one) and ``--flag=value``."""
    flags = {s.name: s for s in specs if s.kind == "flag"}
    out: list[RuntimeKKnob] = []
    for i, arg in enumerate(args):
        flag, value = _split(arg)
        spec = flags.get(flag)
        if spec is None:
            continue
        if value is None and spec.takes_value:
            value = args[i + 1] if i + 1 < len(args) else None
        if spec.is_on(value):
            out.append(_found(spec, where, value))
    return out


def scan_mapping(data: object, specs: Iterable[KnobSpec], where: str) -> list[RuntimeKKnob]:
    """Keys of ``specs`` anywhere in a JSON/YAML options object (nested objects and lists searched too)."""
    keys = {s.name: s for s in specs if s.kind == "key"}
    out: list[RuntimeKKnob] = []

    def walk(node: object) -> None:
        if isinstance(node, Mapping):
            for key, value in node.items():
                spec = keys.get(str(key))
                if spec is not None and spec.is_on(value):
                    out.append(_found(spec, where, value))
                walk(value)
        elif isinstance(node, list | tuple):
            for item in node:
                walk(item)

    walk(data)
    return out


def scan_json_args(args: Sequence[str], specs: Sequence[KnobSpec], where: str) -> list[RuntimeKKnob]:
    """Keys of ``specs`` inside arguments: a JSON object given as a value, and the dotted ``--arg.KEY`` form.

    Covers ``--speculative-config JSON``, ``--speculative-config=JSON``, any other JSON-valued argument (e.g.
    ``--additional-config``), and ``--speculative-config.KEY VALUE`` / ``--speculative-config.KEY=VALUE``
    (vLLM's argument parser reads ``--json-arg.key value`` into the JSON argument).
    """
    keys = {s.name: s for s in specs if s.kind == "key"}
    out: list[RuntimeKKnob] = []
    for i, arg in enumerate(args):
        flag, inline = _split(arg)
        if flag.startswith("-") and "." in flag:
            parent, _, dotted = flag.partition(".")
            spec = keys.get(dotted.split(".", 1)[0])
            if spec is not None:
                raw = inline if inline is not None else (args[i + 1] if i + 1 < len(args) else None)
                value: object = raw
                if raw is not None:
                    try:
                        value = json.loads(raw)
                    except ValueError:
                        value = raw
                if spec.is_on(value):
                    out.append(_found(spec, f"{where} {parent}.{spec.name}", value))
                continue
        text = inline if inline is not None and flag.startswith("-") else arg
        if not text.lstrip().startswith("{"):
            continue
        try:
            data = json.loads(text)
        except ValueError:
            continue
        owner = flag if inline is not None else (_split(args[i - 1])[0] if i > 0 else "an argument")
        out += scan_mapping(data, specs, f"{where} {owner} JSON")
    return out


def scan_env(env: Mapping[str, str], specs: Iterable[KnobSpec], where: str) -> list[RuntimeKKnob]:
    """Environment variables of ``specs`` in ``env`` that switch the knob on."""
    return [
        _found(spec, where, env[spec.name])
        for spec in specs
        if spec.kind == "env" and spec.name in env and spec.is_on(env[spec.name])
    ]


def unique(knobs: Iterable[RuntimeKKnob]) -> tuple[RuntimeKKnob, ...]:
    """``knobs`` without repeats (the same knob found twice in the same place), in order."""
    first: dict[tuple[str, str, str | None], RuntimeKKnob] = {}
    for k in knobs:
        first.setdefault((k.name, k.where, k.value), k)
    return tuple(first.values())


def stored_knobs(stored: Sequence[Mapping[str, Any]]) -> tuple[RuntimeKKnob, ...]:
    """The runtime-varying-K knobs a launch's provenance recorded (its ``runtime_k``, as stored)."""
    return tuple(load_row(RuntimeKKnob, d) for d in stored)


def report_line(knobs: Sequence[RuntimeKKnob]) -> str | None:
    """The report's warning for a real-acceptance run with runtime-varying K (None without knobs)."""
    if not knobs:
        return None
    listed = "; ".join(k.describe() for k in knobs)
    return (
        f"Runtime-varying K: {listed}. Some verify steps checked fewer than K drafts, so the AL and "
        "per-position rates describe this schedule, not a fixed K (allowed with real acceptance; refused with "
        "synthetic acceptance)"
    )


def active_k_changes(series: Mapping[str, Sequence[tuple[float, float]]]) -> list[str]:
    """Warnings for gauges of the active K (name -> ``(time, value)`` points) that changed inside a window."""
    out: list[str] = []
    for name, points in series.items():
        values = [v for _, v in points]
        if len(set(values)) > 1:
            steps = [values[0]] + [b for a, b in itertools.pairwise(values) if b != a]
            shown = " -> ".join(f"{v:g}" for v in steps[:8]) + (" -> ..." if len(steps) > 8 else "")
            out.append(
                f"{ACTIVE_K_WARNING} ({name}: {shown}, min {min(values):g}, max {max(values):g}): "
                "runtime-varying K, some steps verified fewer drafts than configured"
            )
    return out


def note_warnings(note: str) -> list[str]:
    """The warnings inside a statistics note: its ``; ``-joined parts that start with :data:`NOTE_WARNING`.

    The active K's changes of :func:`active_k_changes`, a dialect's bias it cannot take out.
    """
    return [part for part in note.split("; ") if part.startswith(NOTE_WARNING)]
