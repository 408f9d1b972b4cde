"""Hostile round 13 of issue #49: the plugin probe sees alflow's values (not functions) rebound or changed in place.

R13-5: a plugin rebound ``alflow.util.free_text._TOKEN_HINTS`` (a tuple) and ``_ASSIGNED_HINTS`` (since gone) and cleared
``alflow.site.guard.HEADERS`` in place; the probe compared only callables, listed the plugin as clean, and every
secret in free text was printed and stored once it loaded.
"""

from __future__ import annotations

import re
import sys
import time
import types
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit


def _changed(before: dict[str, object], after: dict[str, object]) -> list[str]:
    """What the probe's child names (as :func:`alflow.plugin_probe._child` compares)."""
    return [name for name, value in before.items() if after.get(name) != value]


@pytest.fixture
def values(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """A module of alflow's holding one value of each kind, as an imported alflow module is seen."""
    module = types.ModuleType("alflow._r13_values")
    module.HINTS = ("token=", "key=")  # type: ignore[attr-defined]
    module.WORDS = frozenset({"TOKEN", "KEY"})  # type: ignore[attr-defined]
    module.PATTERN = re.compile(r"sk-[a-z]+")  # type: ignore[attr-defined]
    module.POLICY = "default-src 'none'"  # type: ignore[attr-defined]
    module.LIMIT = 2_000  # type: ignore[attr-defined]
    module.JSON = sys.modules["json"]  # type: ignore[attr-defined]
    module.HEADERS = {"Content-Security-Policy": "default-src 'none'", "X-Frame-Options": "DENY"}  # type: ignore[attr-defined]
    module.ORDER = ["a", "b"]  # type: ignore[attr-defined]
    module.NAMES = {"a", "b"}  # type: ignore[attr-defined]
    module.RAW = bytearray(b"abc")  # type: ignore[attr-defined]
    module.NESTED = {"vllm": {"rate": 0.5}, "rows": (["x"],)}  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return module


REBOUND = {
    "HINTS": ("\x00",),
    "WORDS": frozenset(),
    "PATTERN": re.compile("(?!)"),
    "POLICY": "",
    "LIMIT": 10**9,
    "JSON": types.ModuleType("json"),
    "HEADERS": {},
}


@pytest.mark.parametrize("attr", sorted(REBOUND))
def test_a_rebound_value_of_alflow_is_named(
    attr: str, values: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tuple, a frozenset, a compiled regex, a string, an int, a module or a dict put in a value's place is seen."""
    from alflow.plugin_probe import _interpreter_state

    before = _interpreter_state()
    monkeypatch.setattr(values, attr, REBOUND[attr])
    assert _changed(before, _interpreter_state()) == [f"alflow._r13_values.{attr}"]


def _clear(m: types.ModuleType) -> None:
    m.HEADERS.clear()


def _replace_header(m: types.ModuleType) -> None:
    m.HEADERS["Content-Security-Policy"] = "default-src *"


def _append(m: types.ModuleType) -> None:
    m.ORDER.append("c")


def _reorder(m: types.ModuleType) -> None:
    m.ORDER.reverse()


def _add(m: types.ModuleType) -> None:
    m.NAMES.add("c")


def _discard(m: types.ModuleType) -> None:
    m.NAMES.discard("a")


def _overwrite(m: types.ModuleType) -> None:
    m.RAW[0] = 0


def _nested(m: types.ModuleType) -> None:
    m.NESTED["vllm"]["rate"] = 1.0


def _nested_in_tuple(m: types.ModuleType) -> None:
    m.NESTED["rows"][0].append("y")


IN_PLACE = {
    "HEADERS": (_clear, _replace_header),
    "ORDER": (_append, _reorder),
    "NAMES": (_add, _discard),
    "RAW": (_overwrite,),
    "NESTED": (_nested, _nested_in_tuple),
}


@pytest.mark.parametrize(
    ("attr", "change"), [(attr, change) for attr, changes in IN_PLACE.items() for change in changes]
)
def test_a_value_of_alflow_changed_in_place_is_named(
    attr: str, change: object, values: types.ModuleType
) -> None:
    """A dict cleared or given another value, a list grown or reordered, a set, a bytearray, a nested table."""
    from alflow.plugin_probe import _interpreter_state

    before = _interpreter_state()
    change(values)  # type: ignore[operator]
    assert _changed(before, _interpreter_state()) == [f"alflow._r13_values.{attr}"]


def test_the_real_redaction_hints_and_security_headers_are_watched(monkeypatch: pytest.MonkeyPatch) -> None:
    """The values of the report: the redaction prefilters rebound, the site's headers cleared."""
    import alflow.site.guard as guard
    import alflow.util.free_text as free_text
    import alflow.util.secret_names as secret_names
    from alflow.plugin_probe import _interpreter_state

    before = _interpreter_state()
    monkeypatch.setattr(secret_names, "_MAYBE", re.compile("\x00"))
    monkeypatch.setattr(free_text, "_TOKEN_HINTS", ("\x00",))
    monkeypatch.delitem(guard.HEADERS, "Content-Security-Policy")
    changed = _changed(before, _interpreter_state())
    assert sorted(changed) == [
        "alflow.site.guard.HEADERS",
        "alflow.util.free_text._TOKEN_HINTS",
        "alflow.util.secret_names._MAYBE",
    ]


def test_using_alflow_changes_nothing_the_probe_watches(values: types.ModuleType) -> None:
    """A plugin that only uses alflow (redacts, reads the tables, stores a row) is not blamed."""
    import dataclasses

    from alflow.plugin_probe import _interpreter_state
    from alflow.util.redact import redact_urls_in_text
    from alflow.util.rows import dump_row

    @dataclasses.dataclass
    class Row:
        a: int

    before = _interpreter_state()
    redact_urls_in_text("http://u:pw@h/ token=abc sk-abcdefghijklmnopqrstuvwxyz")
    dump_row(Row(1))  # fills alflow.util.rows' cache of adapters
    _ = values.HEADERS["X-Frame-Options"], list(values.NAMES), values.PATTERN.search("sk-x")
    assert _changed(before, _interpreter_state()) == []


def test_a_large_or_cyclic_value_costs_little(values: types.ModuleType) -> None:
    """The contents are read by identity, bounded: a 2,000,000-item list or a list holding itself is quick."""
    from alflow.plugin_probe import _interpreter_state

    values.BIG = list(range(2_000_000))  # type: ignore[attr-defined]
    values.LOOP = []  # type: ignore[attr-defined]
    values.LOOP.append(values.LOOP)  # type: ignore[attr-defined]
    values.MAP = {i: str(i) for i in range(200_000)}  # type: ignore[attr-defined]
    start = time.perf_counter()
    before = _interpreter_state()
    assert time.perf_counter() - start < 2.0
    values.LOOP.append(1)  # type: ignore[attr-defined]
    assert _changed(before, _interpreter_state()) == ["alflow._r13_values.LOOP"]


# --------------------------------------------------------------------------------------------
# R13-8: a URL no parser takes (an unclosed IPv6 bracket, a port out of range) was a traceback, or found late

NOT_A_URL = {
    "http://[::1": "not a URL (Invalid IPv6 URL)",
    "http://[::1/metrics": "not a URL (Invalid IPv6 URL)",
    "http://::1]:8000/": "not a URL (Invalid IPv6 URL)",
    "http://127.0.0.1:99999/metrics": "its port is out of range (1-65535)",
    "http://[::1]:70000": "its port is out of range (1-65535)",
    "http://127.0.0.1:0": "its port is out of range (1-65535)",
    "http://127.0.0.1:x/metrics": "its port is not a number (1-65535)",
    "http://127.0.0.1:-1": "its port is not a number (1-65535)",
}
"""URLs whose parsing fails, and what the line says of each."""


def _one_error_line(args: list[str]) -> str:
    """The command's one line on stderr (exit 2, no traceback)."""
    from typer.testing import CliRunner

    from alflow.cli import app

    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output[-2000:]
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


URL_OPTIONS = {
    "metrics snapshot --url": (["metrics", "snapshot", "--url"], [], "--url"),
    "metrics snapshot URL": (["metrics", "snapshot"], [], "URL"),
    "bench --base-url": (["bench", "--no-progress", "--base-url"], [], "--base-url"),
    "bench --metrics-url": (["bench", "--no-progress", "--metrics-url"], ["--base-url", "http://127.0.0.1:9"], "--metrics-url"),
    "bench --prometheus-url": (
        ["bench", "--no-progress", "--prometheus-url"], ["--base-url", "http://127.0.0.1:9"], "--prometheus-url"
    ),
    "eval gsm8k --base-url": (["eval", "gsm8k", "--model", "m", "--limit", "1", "--base-url"], [], "--base-url"),
}  # fmt: skip
"""Each URL option: (the command up to the option, other options, the name the line gives)."""


@pytest.mark.parametrize("url", sorted(NOT_A_URL))
@pytest.mark.parametrize("option", sorted(URL_OPTIONS))
def test_a_url_option_no_parser_takes_is_one_line_exit_2(option: str, url: str) -> None:
    """R13-8: ``metrics snapshot --url http://[::1`` (and ``bench --base-url``/``--metrics-url``, ``eval gsm8k
    --base-url``) ended in ``ValueError: Invalid IPv6 URL``; ``:99999`` said the URL again instead of its port."""
    command, others, name = URL_OPTIONS[option]
    line = _one_error_line([*command, url, *others])
    assert line == f"error: {name} {url!r}: {NOT_A_URL[url]}"


def test_a_url_no_parser_takes_is_said_without_its_password() -> None:
    """The line shows the URL as every error does: its credentials redacted."""
    line = _one_error_line(
        ["metrics", "snapshot", "--url", "http://user:SECRETPW@[::1/metrics?token=SECRETTOK"]
    )
    assert line == "error: --url 'http://***@[::1/metrics?token=***': not a URL (Invalid IPv6 URL)"


@pytest.mark.parametrize("url", ["unix:///var/run/x.sock", "127.0.0.1:8000/metrics", "http:///metrics"])
def test_metrics_snapshot_refuses_a_url_that_is_no_http_url(url: str) -> None:
    """R13-8 (minor): ``--url unix:///var/run/x.sock`` said ``cannot scrape metrics at unix:/var/run/x.sock: ...``."""
    assert _one_error_line(["metrics", "snapshot", "--url", url]) == (
        f"error: --url {url!r}: give an http(s)://HOST[:PORT][/PATH] URL"
    )


@pytest.mark.parametrize("url", sorted(NOT_A_URL))
@pytest.mark.parametrize("field", ["base_url", "metrics_url", "metrics_urls"])
def test_an_external_runners_url_no_parser_takes_is_refused_by_the_config(field: str, url: str) -> None:
    """R13-8: ``placement.runner: {kind: external, base_url: "http://[::1"}`` passed ``run m2 --dry-run``; the real
    run started Prefect and the flow, which failed with ``ValueError: Invalid IPv6 URL``."""
    from pydantic import ValidationError

    from alflow.config.runners import ExternalServer

    given: dict[str, object] = {"base_url": "http://127.0.0.1:9", "dialect": "vllm"}
    given[field] = (url,) if field == "metrics_urls" else url
    with pytest.raises(ValidationError) as caught:
        ExternalServer.model_validate(given)
    assert f"{field} {url!r}: {NOT_A_URL[url]}" in str(caught.value)


def test_run_dry_run_refuses_an_external_base_url_no_parser_takes(tmp_path: Path) -> None:
    """The plan refuses what the real run would: one line naming the field, exit 2."""
    config = tmp_path / "m2.yaml"
    config.write_text(
        "server: {framework: vllm, model: m}\nplacement:\n"
        '  runner: {kind: external, base_url: "http://[::1", dialect: vllm}\n'
        f"  results_root: {tmp_path}\nmodel: {{id: m}}\nk: 3\ntarget_al: 2.0\nconcurrencies: [2]\n",
        encoding="utf-8",
    )
    line = _one_error_line(["run", "m2", "--config", str(config), "--dry-run"])
    assert line.endswith(
        "placement.runner.external.base_url: base_url 'http://[::1': not a URL (Invalid IPv6 URL)"
    )


@pytest.mark.parametrize("url", sorted(NOT_A_URL))
def test_a_results_site_url_no_parser_takes_is_refused_as_one(url: str) -> None:
    """``$ALFLOW_RESULTS_URL=http://[::1`` raised a bare ValueError where the run's link is made (after the run)."""
    from alflow.errors import InvalidInputError
    from alflow.results.links import check_results_url

    with pytest.raises(InvalidInputError, match=re.escape(NOT_A_URL[url])):
        check_results_url(url, "$ALFLOW_RESULTS_URL")
