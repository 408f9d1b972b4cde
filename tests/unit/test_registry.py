"""The two registry modules: plain data (:mod:`alflow.plugins`) and the typed plugins (:mod:`alflow.frameworks.registry`) agree."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from alflow import plugins
from alflow.config.server import ServerBase, engine_note_of
from alflow.errors import InvalidInputError
from alflow.frameworks import registry
from alflow.frameworks.registry import Framework, frameworks, get_framework
from alflow.plugins import FrameworkSpec, PluginError, check_dialect, dialect_names, spec_of

pytestmark = pytest.mark.unit


def test_the_dialects_of_the_specs_are_the_plugins_with_a_reader_and_an_emitter() -> None:
    speaking = tuple(f.name for f in frameworks() if f.metrics is not None and f.sim is not None)
    assert dialect_names() == speaking
    assert set(speaking) == {spec.name for spec in plugins.BUILTIN if spec.dialect}
    assert check_dialect("atom") == "atom"
    with pytest.raises(InvalidInputError, match=r"dialect 'sim' is not one of vllm, sglang, trtllm, atom"):
        check_dialect("sim")


def test_an_unknown_framework_is_an_error_that_lists_the_known_ones() -> None:
    with pytest.raises(
        InvalidInputError, match=r"unknown framework 'nope'; known: vllm, sglang, trtllm, atom, sim"
    ):
        spec_of("nope")


def test_the_engine_note_is_the_config_variants() -> None:
    assert engine_note_of("vllm") is None
    sim_note = engine_note_of("sim")
    assert sim_note is not None
    assert sim_note.startswith("SIMULATED")
    for name in plugins.framework_names():
        model = plugins.config_model_of(name)
        assert issubclass(model, ServerBase)
        assert engine_note_of(name) == model.ENGINE_NOTE


@pytest.fixture
def fake_spec(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.ModuleType]:
    """A spec named ``fakeengine`` added to the registry, its plugin module in ``sys.modules`` (the test sets it)."""
    module = types.ModuleType("fake_engine_plugin")
    monkeypatch.setitem(sys.modules, "fake_engine_plugin", module)
    spec = FrameworkSpec(
        "fakeengine", "alflow.frameworks.vllm.config:VllmServer", "fake_engine_plugin:PLUGIN", dialect=True
    )
    found, broken = plugins.specs(), plugins.broken_plugins()
    monkeypatch.setattr(plugins, "_loaded", lambda: ((*found, spec), broken))
    registry.get_framework.cache_clear()
    plugins.plugin_of.cache_clear()
    yield module
    registry.get_framework.cache_clear()
    plugins.plugin_of.cache_clear()


def test_a_spec_that_says_dialect_for_a_plugin_without_a_reader_is_refused(
    fake_spec: types.ModuleType,
) -> None:
    fake_spec.PLUGIN = Framework(name="fakeengine", title="Fake", recipe=get_framework("vllm").recipe)
    with pytest.raises(
        PluginError, match=r"fakeengine.*dialect=True.*not both a metrics reader and a simulator"
    ):
        get_framework("fakeengine")


def test_a_plugin_object_that_is_not_a_framework_is_refused(fake_spec: types.ModuleType) -> None:
    fake_spec.PLUGIN = object()
    with pytest.raises(PluginError, match=r"fake_engine_plugin:PLUGIN is not a Framework named 'fakeengine'"):
        get_framework("fakeengine")


def test_every_plugin_folder_is_one_built_in_framework_and_every_built_in_one_has_its_folder() -> None:
    """A framework of alflow's own is one folder (``alflow/frameworks/<name>/plugin.py``) and one line in BUILTIN."""
    home = Path(plugins.__file__).parent / "frameworks"
    folders = {p.parent.name for p in home.glob("*/plugin.py")}
    assert folders == {spec.name for spec in plugins.BUILTIN}
    for spec in plugins.BUILTIN:
        assert spec.plugin == f"alflow.frameworks.{spec.name}.plugin:PLUGIN"
        assert spec.config.startswith(f"alflow.frameworks.{spec.name}.config:")


def test_a_plugin_whose_import_never_returns_is_left_out_after_its_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#49: an entry point whose module waits for ever (a network, a lock) hung every command; now it is refused."""
    import time

    release = tmp_path / "release"
    waits = (
        f"import pathlib, time\nwhile not pathlib.Path({str(release)!r}).exists():\n    time.sleep(0.05)\n"
    )
    (tmp_path / "sleepy_alflow_plugin.py").write_text(waits + "SPEC = None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    stdout = sys.stdout
    started = time.monotonic()
    try:
        with pytest.raises(
            PluginError, match=r"entry point 'sleepy': importing 'sleepy_alflow_plugin:SPEC' did not end"
        ):
            plugins.resolve_within("sleepy_alflow_plugin:SPEC", "entry point 'sleepy'", seconds=0.5)
        assert time.monotonic() - started < 5
        assert (
            sys.stdout is stdout
        )  # the stuck import's redirect of stdout (to stderr) does not outlive the wait
    finally:
        release.touch()  # the import ends: no thread left behind
    # a module that loads in time, and one that raises, are what they were
    assert plugins.resolve_within("os.path:join", "x") is __import__("os").path.join
    (tmp_path / "broken_alflow_plugin.py").write_text("SPEC = 1 / 0\n")
    with pytest.raises(PluginError, match="ZeroDivisionError"):
        plugins.resolve_within("broken_alflow_plugin:SPEC", "entry point 'broken'")


def test_a_plugin_loaded_from_inside_an_import_is_imported_in_that_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loaded in another thread while this one holds a module's import lock, a plugin importing that module would
    wait until the time ran out: inside an import, the plugin is imported here, as before the bound."""
    import importlib
    import time

    (tmp_path / "outer_alflow_mod.py").write_text(
        "from alflow import plugins\nX = 1\nRESULT = plugins.resolve_within('inner_alflow_mod:Y', 'w', seconds=3)\n"
    )
    (tmp_path / "inner_alflow_mod.py").write_text("import outer_alflow_mod\nY = outer_alflow_mod.X + 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    started = time.monotonic()
    outer = importlib.import_module("outer_alflow_mod")
    assert outer.RESULT == 2
    assert time.monotonic() - started < 2


def test_a_plugin_that_raises_keyboardinterrupt_or_prints_at_import_is_left_out_quietly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Hostile round 4: ``raise KeyboardInterrupt`` at import gave a traceback (a thread's, once bounded); a plugin
    printing at import broke ``alflow frameworks --json``'s output."""
    (tmp_path / "interrupting_alflow_plugin.py").write_text(
        "print('garbage')\nraise KeyboardInterrupt('x')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginError, match="KeyboardInterrupt: raised by the module"):
        plugins.resolve_within("interrupting_alflow_plugin:SPEC", "entry point 'ki'", seconds=5)
    out, err = capsys.readouterr()
    assert "garbage" not in out
    assert "garbage" in err
    assert "Traceback" not in err


def test_a_plugin_whose_metrics_reader_raises_when_read_is_refused(fake_spec: types.ModuleType) -> None:
    """Hostile round 4: a reader whose ``metrics_path`` raised gave a traceback in ``alflow frameworks`` and bench."""
    import dataclasses

    class Exploding:
        def __getattr__(self, name: str) -> object:
            raise RuntimeError(f"no {name} today")

    fake_spec.PLUGIN = dataclasses.replace(get_framework("vllm"), name="fakeengine", metrics=Exploding())
    with pytest.raises(PluginError, match=r"fake_engine_plugin:PLUGIN: RuntimeError: no name today"):
        plugins.plugin_of("fakeengine")


def test_a_metrics_reader_that_raises_while_matching_is_left_out_of_detection(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from alflow.metrics import readers
    from alflow.metrics.prometheus import parse_exposition

    vllm = readers.get_dialect("vllm")

    class Raising:
        name = "raising"
        metrics_path = "/metrics"

        def matches(self, snapshot: object) -> bool:
            raise ValueError("broken")

    monkeypatch.setattr(readers, "dialects", lambda: {"vllm": vllm, "raising": Raising()})
    text = "vllm:spec_decode_num_drafts_total 1\nvllm:spec_decode_num_draft_tokens_total 3\n"
    text += "vllm:spec_decode_num_accepted_tokens_total 2\n"
    assert readers.detect(parse_exposition(text)) is vllm
    assert "metrics reader raising left out of detection: ValueError: broken" in caplog.text
