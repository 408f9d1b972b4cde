"""A flow run resolves its short form once: the run's name and its body share the parameters."""

from __future__ import annotations

import pytest

from alflow_flows import presets

pytestmark = pytest.mark.unit


def test_a_flow_run_resolves_its_short_form_once_and_each_other_run_or_form_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[str | None, int | None]] = []

    @presets.resolved_once
    def resolve(preset: str | None = None, k: int | None = None) -> object:
        calls.append((preset, k))
        return object()

    monkeypatch.setattr(presets.flow_run, "get_id", lambda: "run-1")
    body = resolve("sim", 3)  # the flow's body: positional
    assert resolve(preset="sim", k=3) is body  # the run's name: keywords, the same arguments
    assert calls == [("sim", 3)]
    assert resolve("sim", 4) is not body  # another short form
    monkeypatch.setattr(presets.flow_run, "get_id", lambda: "run-2")
    assert resolve("sim", 3) is not body  # another run
    monkeypatch.setattr(presets.flow_run, "get_id", lambda: None)
    resolve("sim", 3)
    resolve("sim", 3)  # outside a flow run (the command line): every call resolves
    assert calls == [("sim", 3), ("sim", 4), ("sim", 3), ("sim", 3), ("sim", 3)]
