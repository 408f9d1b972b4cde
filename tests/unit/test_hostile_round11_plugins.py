"""Hostile round 11 of issue #49, the plugin classes: overlong warnings, the probe's cache key, process-wide state."""

from __future__ import annotations

import contextlib
import logging
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.unit

LONG = "x" * 100_000


def _point(field: str) -> SimpleNamespace:
    """An entry point whose ``field`` (its name, its reference, its distribution's name or version) is 100,000 long."""
    values = {"name": "w", "value": "nomod2.spec:SPEC", "dist": "w", "version": "0.1"}
    values[field] = f"long{LONG}" if field != "value" else f"nomod2.{LONG}:SPEC"
    dist = SimpleNamespace(name=values["dist"], version=values["version"])
    return SimpleNamespace(name=values["name"], value=values["value"], dist=dist, group="alflow.frameworks")


@pytest.mark.parametrize("field", ["name", "value", "dist", "version"])
def test_a_left_out_plugins_warning_is_one_line_cut_to_2000_characters(
    field: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """R11-10: an entry point named ``long`` + 100,000 ``x`` gave a warning line of 100,219 characters (the docs say
    a line over 2,000 characters is cut in its middle); so did one whose distribution's metadata was that long."""
    from alflow import plugins

    point = _point(field)
    error = plugins.PluginError(f"{plugins._where(point)}: cannot load {point.value!r}: ModuleNotFoundError")  # type: ignore[arg-type]
    monkeypatch.setattr(plugins, "entry_specs", lambda: ((point, error),))
    with caplog.at_level(logging.WARNING, logger="alflow.plugins"):
        _, broken, _ = plugins._loaded.__wrapped__()
    (reason,) = broken
    (record,) = [r for r in caplog.records if "framework plugin left out" in r.getMessage()]
    for line in (reason, record.getMessage()):
        assert len(line) <= 2_000
        assert "characters cut" in line
        assert line.startswith(
            ("entry point 'w'", "entry point 'long", "framework plugin left out: entry point")
        )
        assert line.endswith(error.args[0][-50:])  # its start and its end are kept


def test_a_plugin_object_left_out_under_a_long_origin_is_cut_too(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """R11-10: the second place a plugin is left out (its plugin object does not load) names its entry point too."""
    from alflow import plugins

    def load(name: str) -> str:
        raise plugins.PluginError(f"framework {name!r}: cannot load 'nomod2.plugin:PLUGIN'")

    origins = {f"long{LONG}": plugins._where(_point("name"))}  # type: ignore[arg-type]
    monkeypatch.setattr(plugins, "_loaded", lambda: ((), (), origins))
    with caplog.at_level(logging.WARNING, logger="alflow.plugins"):
        _, broken = plugins.load_each([f"long{LONG}"], load)
    assert len(broken[0]) <= 2_000
    assert all(len(r.getMessage()) <= 2_000 for r in caplog.records)


@pytest.mark.parametrize("length", [0, 1_999, 2_000, 2_001, 100_000])
def test_cut_middle_bounds_every_length_and_keeps_a_short_line(length: int) -> None:
    """The helper the error lines and the plugin warnings share: at most 2,000 characters, a short line as given."""
    from alflow.util.redact import cut_middle

    line = "".join(chr(ord("a") + i % 26) for i in range(length))
    cut = cut_middle(line)
    assert len(cut) <= 2_000
    assert cut == line if length <= 2_000 else (cut.startswith(line[:1_000]) and cut.endswith(line[-100:]))


def _three_packages(root: Path) -> None:
    """A plugin as the report's appendix A: its spec in ``specpkg``, its config in ``cfgpkg``, its plugin in ``implpkg``."""
    for top in ("specpkg", "cfgpkg", "implpkg"):
        (root / top).mkdir(parents=True)
        (root / top / "__init__.py").write_text("")
    (root / "specpkg" / "spec.py").write_text("SPEC = None\n")
    (root / "cfgpkg" / "config.py").write_text("Server = None\n")
    (root / "implpkg" / "plugin.py").write_text("PLUGIN = None\n")


@pytest.mark.parametrize(
    "changed", ["specpkg/spec.py", "cfgpkg/config.py", "implpkg/plugin.py", "implpkg/new.py"]
)
def test_a_plugin_is_probed_again_when_a_file_of_its_config_or_plugin_package_changes(
    changed: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R11-5: the clean verdict's key signed the spec's own package alone: a plugin module in another package that
    began to print at import was never tried again (``--json`` corrupted, no warning). It signs all three now."""
    from alflow import plugin_probe

    _three_packages(tmp_path / "site")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    tried: list[str] = []

    def child(reference: str, bound: float) -> tuple[str | None, tuple[str, ...] | None]:
        tried.append(reference)  # what the child names: the top packages of the spec's three references
        return None, ("cfgpkg", "implpkg", "specpkg")

    monkeypatch.setattr(plugin_probe, "_probe", child)
    for _ in range(2):
        assert plugin_probe.probe("specpkg.spec:SPEC", origin="specpkg 0.1") is None
    assert len(tried) == 1  # the verdict is kept
    file = tmp_path / "site" / changed
    file.write_text((file.read_text() if file.exists() else "") + 'print("GARBAGE FROM PLUGIN")\n')
    assert plugin_probe.probe("specpkg.spec:SPEC", origin="specpkg 0.1") is None
    assert len(tried) == 2, f"a change to {changed} was not tried again"
    assert plugin_probe.probe("specpkg.spec:SPEC", origin="specpkg 0.1") is None
    assert len(tried) == 2  # and kept again, under the new files


def test_a_plugin_whose_other_package_is_gone_is_probed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R11-5: a package the verdict was signed over that can no longer be found is no clean verdict."""
    import shutil

    from alflow import plugin_probe

    _three_packages(tmp_path / "site")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    tried: list[str] = []
    monkeypatch.setattr(
        plugin_probe, "_probe", lambda ref, bound: (tried.append(ref), (None, ("implpkg", "specpkg")))[1]
    )
    plugin_probe.probe("specpkg.spec:SPEC")
    shutil.rmtree(tmp_path / "site" / "implpkg")
    plugin_probe.probe("specpkg.spec:SPEC")
    assert len(tried) == 2


def _change(kind: str, monkeypatch: pytest.MonkeyPatch, stack: contextlib.ExitStack) -> None:
    """Make the change of ``kind`` a plugin made at import in round 11 (undone by ``monkeypatch`` and ``stack``)."""
    import locale
    import os
    import resource
    import signal
    import threading
    import time
    import warnings

    import numpy
    import polars

    if kind.startswith("warnings"):  # pytest's own filters here start with "error" (pyproject.toml)
        stack.enter_context(warnings.catch_warnings())
        if kind.endswith("error"):
            warnings.filterwarnings("error", category=RuntimeWarning)  # numpy's warnings raised
        else:
            warnings.simplefilter("ignore")  # alflow's own warnings silenced
    elif kind == "numpy":
        stack.enter_context(numpy.errstate(all="raise"))
    elif kind == "stream":
        sys.stderr.reconfigure(errors="strict", encoding="ascii")  # type: ignore[union-attr]
    elif kind in ("alflow", "prefect", "alflow.plugins"):
        monkeypatch.setattr(logging.getLogger(kind), "disabled", True)
    elif kind == "digits":
        stack.callback(sys.set_int_max_str_digits, sys.get_int_max_str_digits())
        sys.set_int_max_str_digits(640)
    elif kind == "rlimit":
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        stack.callback(resource.setrlimit, resource.RLIMIT_FSIZE, (soft, hard))
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, hard))
    elif kind == "signal":
        stack.callback(signal.signal, signal.SIGUSR2, signal.getsignal(signal.SIGUSR2))
        signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    elif kind == "profile":
        stack.callback(threading.setprofile, None)  # type: ignore[arg-type]
        threading.setprofile(lambda *a: None)
    elif kind in ("AWS_ENDPOINT_URL", "GOOGLE_CLOUD_PROJECT", "AZURE_STORAGE_KEY", "LC_NUMERIC", "LANGUAGE"):
        monkeypatch.setenv(kind, "C" if kind.startswith("L") else "http://127.0.0.1:9")
    elif kind == "tz":
        stack.callback(time.tzset)  # after the variable is restored (last in, first out)
        stack.callback(os.environ.pop, "TZ", None)
        os.environ["TZ"] = "Asia/Kolkata"
        time.tzset()
    elif kind == "locale":
        stack.callback(locale.setlocale, locale.LC_ALL, locale.setlocale(locale.LC_ALL))
        locale.setlocale(locale.LC_NUMERIC, "C.UTF-8" if locale.setlocale(locale.LC_NUMERIC) == "C" else "C")
    elif kind == "polars":
        stack.enter_context(polars.Config(tbl_rows=1))


CHANGES = {
    "warnings": "the warnings filters",
    "warnings-error": "the warnings filters",
    "numpy": "numpy's floating-point errors",
    "stream": "the encoding or errors of sys.stdout, sys.stderr",
    "alflow": "logger's level or disabled flag",
    "prefect": "logger's level or disabled flag",
    "alflow.plugins": "logger's level or disabled flag",
    "digits": "sys.get_int_max_str_digits()",
    "rlimit": "the resource limit RLIMIT_FSIZE",
    "signal": "the SIGUSR2 handler",
    "profile": "a trace or profile function",
    "AWS_ENDPOINT_URL": "the environment",
    "GOOGLE_CLOUD_PROJECT": "the environment",
    "AZURE_STORAGE_KEY": "the environment",
    "LC_NUMERIC": "the environment",
    "LANGUAGE": "the environment",
    "tz": "the time zone",
    "locale": "the locale",
    "polars": "polars' configuration",
}


@pytest.mark.parametrize("kind", sorted(CHANGES))
def test_the_probe_sees_each_process_wide_setting_a_plugin_changed_in_round_11(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R11-6: each of these, done by a plugin's module at import, was accepted by the probe (a run failed at 20,000
    bytes, an error line was lost to an ASCII-strict stderr, alflow's warnings were silenced, s3 was redirected)."""
    import io

    from alflow import plugin_probe

    for name in (
        "AWS_ENDPOINT_URL",
        "GOOGLE_CLOUD_PROJECT",
        "AZURE_STORAGE_KEY",
        "LC_NUMERIC",
        "LANGUAGE",
        "TZ",
    ):
        monkeypatch.delenv(name, raising=False)  # a variable set when the process started is compared anyway
    monkeypatch.setattr(sys, "stderr", io.TextIOWrapper(io.BytesIO(), encoding="utf-8"))
    before = plugin_probe._interpreter_state()
    with contextlib.ExitStack() as stack:
        _change(kind, monkeypatch, stack)
        after = plugin_probe._interpreter_state()
    changed = [name for name, value in before.items() if after.get(name) != value]
    assert any(CHANGES[kind] in name for name in changed), changed
