"""Hostile round 14 of issue #49: what the fourteenth round found.

R14-1: a results root or run directory of any fsspec URL (``http://``, ``ftp://``) was opened, and a server that
never answered held ``results serve`` and ``report show`` for minutes. R14-2: free text's ``NAME=value`` rule judged
names by its own list (``DB_PW=``, ``JWT=``, ``appkey=`` stored in clear). R14-3: ``extra_args`` flags and
``extra_env`` names the shared rule calls secret (``--pw``, ``--jwt``, ``DB_PW``, ``AZURE_SAS``) were accepted, and a
value shaped like a JWT too. R14-6: distinct parameter names were judged at 17 us each.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from alflow.config.server import server_config
from alflow.util.redact import redact_urls_in_text

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:9/root", "https://h/x", "ftp://h/run", "zip://a.zip", "memory://x"]
)
@pytest.mark.parametrize("command", ["show", "matrix", "serve"])
def test_r14_1_a_url_of_no_object_store_is_refused_before_any_connection(url: str, command: str) -> None:
    """Round 14: ``report show http://...`` and ``results serve http://...`` waited minutes on a silent server."""
    from typer.testing import CliRunner

    from alflow.cli import app

    args = {
        "show": ["report", "show", url],
        "matrix": ["report", "matrix", url],
        "serve": ["results", "serve", url],
    }
    result = CliRunner().invoke(app, args[command])
    assert result.exit_code == 2, result.output
    assert "a URL of this scheme is not a" in result.output
    assert "allowed:" in result.output


@pytest.mark.parametrize(
    "name", ["DB_PW", "JWT", "AUTH", "appkey", "pkey", "cred", "assertion", "AZURE_SAS", "pw"]
)
def test_r14_2_a_name_the_shared_rule_calls_secret_is_redacted_as_name_equals_value(name: str) -> None:
    said = redact_urls_in_text(f"upstream rejected: {name}=CANARY1 and http://h/?{name}=CANARY2")
    assert "CANARY" not in said
    assert f"{name}=*** and" in said


@pytest.mark.parametrize(
    "plain", ["max_tokens=5", "--max-num-batched-tokens=8192", "session_len=4", "first-pass=/loras/a", "k=3"]
)
def test_r14_2_other_assignments_stay(plain: str) -> None:
    assert redact_urls_in_text(f"ran with {plain} ok") == f"ran with {plain} ok"


def test_r14_2_a_jwt_is_redacted_by_its_shape() -> None:
    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abcdefghijklmnop"
    assert redact_urls_in_text(f"FOO={jwt} then") == "FOO=*** then"


def _server(**changes: object) -> None:
    server_config(framework="sim", model="m", **changes)


@pytest.mark.parametrize(
    "flag",
    ["--pw", "--pass", "--passphrase", "--credentials", "--bearer", "--jwt", "--cookie", "--auth", "--sas"],
)
def test_r14_3_a_flag_that_takes_a_secret_is_refused(flag: str) -> None:
    with pytest.raises(ValidationError, match="which takes a secret"):
        _server(extra_args=[flag, "CANARY23xyz"])


@pytest.mark.parametrize(
    "flag", ["--allow-credentials", "--answer-key", "--model", "--max-num-batched-tokens"]
)
def test_r14_3_other_flags_are_taken(flag: str) -> None:
    _server(extra_args=[flag])


@pytest.mark.parametrize(
    ("name", "value"),
    [("DB_PW", "x1"), ("JWT", "x2"), ("APPKEY", "x3"), ("GITHUB_AUTH", "x4"), ("AZURE_SAS", "x5"),
     ("FOO", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abcdefghijklmnop")],
)  # fmt: skip
def test_r14_3_an_environment_variable_the_shared_rule_calls_secret_is_refused(name: str, value: str) -> None:
    with pytest.raises(ValidationError, match="looks like a secret") as caught:
        _server(extra_env={name: value})
    assert value not in str(caught.value)


def test_r14_6_distinct_parameter_names_are_judged_at_the_speed_of_a_pattern() -> None:
    text = "http://h/?" + "&".join(f"n{i}x=v" for i in range(250_000)) + "&token=CANARY"
    started = time.perf_counter()
    said = redact_urls_in_text(text)
    assert time.perf_counter() - started < 10.0  # about 1 s here; 17 us a name: 4 s, 10 s under load
    assert said.endswith("&token=***")


async def test_r14_9_a_server_that_never_answers_the_probe_is_one_line() -> None:
    """``eval gsm8k`` against a server that takes the connection and never answers: a 79-line traceback."""
    import asyncio

    from alflow.errors import InvalidInputError
    from alflow.evals.run import probe_synthetic

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1 << 16)
        await asyncio.sleep(30)

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(
            InvalidInputError, match=r"^--base-url 'http://127.0.0.1:\d+': no answer within 0.5 s"
        ):
            await probe_synthetic(f"http://127.0.0.1:{port}", timeout_s=0.5)
    finally:
        server.close()


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (
            "server_args=ServerArgs(model_path='m', api_key='SGLKEY12345', host='h')",
            "api_key='***', host='h')",
        ),
        ("non-default args: {'model': 'm', 'api_key': ['VLLMKEY67890']}", "'api_key': ['***']}"),
        ("proxy config: password: YAMLPW4242 token = SPACEDTOK77", "password: *** token = ***"),
        ("cmd: vllm serve --api-key CLIKEY5555 --model m", "--api-key *** --model m"),
        ("ApiKey: CAMEL1abcdef", "ApiKey: ***"),
        ('api_key = "QUOTED1abc" ok', 'api_key = "***" ok'),
    ],
)
def test_r14_8_a_logged_secret_in_any_of_a_servers_forms_is_redacted(text: str, shown: str) -> None:
    """SGLang logs ``api_key='...'``, vLLM a dict with lists, a proxy YAML, the command line: all were kept."""
    said = redact_urls_in_text(text)
    assert "CANARY" not in said
    assert said.endswith(shown), said


@pytest.mark.parametrize(
    "prose",
    [
        "the parameter api_key: credentials in a URL are refused",
        "error: --api-key is 70,000 characters long",
        "token == x and a == b",
        "--model m --tokenizer t",
    ],
)
def test_r14_8_alflows_own_lines_are_left_as_they_are(prose: str) -> None:
    assert redact_urls_in_text(prose) == prose


@pytest.mark.parametrize(
    "url",
    [
        "https://h/a b",
        "https://h/a\tb",
        "https://ho\nst/x",
        "https://h/x\u00a0",
        "https://h/\x1b",
        "https://h:0/x",  # round 14's minors: port 0, and a URL of 100,000 characters
        "https://h:70000/x",
        "https://h/" + "a" * 100_000,
    ],
)
def test_r14_7_a_webhook_url_with_a_space_or_control_inside_is_refused(url: str) -> None:
    """``urlsplit`` drops a tab or newline inside a URL: the helper judged another URL than the one it saved."""
    from alflow_deployments import webhook

    assert not webhook._is_web_url(url)
    assert webhook._is_web_url("https://hooks.example.com/services/T/B/x")


def _report(outcome: str, metrics: list[dict[str, object]]) -> dict[str, object]:
    params = {
        "history_runs": 3,
        "min_history": 2,
        "threshold": 0.05,
        "resamples": 100,
        "confidence": 0.9,
        "seed": 0,
    }
    point = {"series": {}, "concurrency": 4, "k": 3, "outcome": outcome, "metrics": metrics}
    return {"kind": "m2", "method": "bootstrap", "parameters": params, "points": [point]}


def _metric(
    outcome: str, change: float, low: float, high: float, current: float | None = None
) -> dict[str, object]:
    """A TPOT metric of a baseline of 10 ms; its current median ``10 * (1 + change)`` unless given."""
    now = 10.0 * (1.0 + change) if current is None else current
    return {"metric": "tpot_ms", "current": now, "baseline": 10.0, "change": change, "low": low, "high": high,
            "outcome": outcome}  # fmt: skip


@pytest.mark.parametrize(
    "report",
    [
        _report(
            "unchanged", [_metric("unchanged", 0.9, 0.8, 1.0)]
        ),  # +90 % [+80 %, +100 %] is no "unchanged"
        _report("improved", []),  # no metric
        _report("improved", [_metric("regressed", 0.2, 0.1, 0.3)]),  # its one metric regressed
        _report("improved", [_metric("improved", -1.0, -1.0, -1.0, current=1e-300)]),  # -100 %
        _report("regressed", [_metric("regressed", 0.01, 0.005, 0.02)]),  # under the threshold
        _report("regressed", [_metric("regressed", 0.2, -0.1, 0.3)]),  # its interval holds 0
    ],
)
def test_r14_4_a_stored_verdict_that_contradicts_its_numbers_is_no_report(report: dict[str, object]) -> None:
    from alflow.errors import AlflowError
    from alflow.results.regression import parse_report

    with pytest.raises(AlflowError, match=r"^regression.json: not a regression report: points\.0"):
        parse_report(report, "regression.json")


def test_r14_4_a_verdict_the_check_would_make_is_read() -> None:
    from alflow.results.regression import parse_report

    ok = _report("regressed", [_metric("regressed", 0.2, 0.1, 0.3), _metric("unchanged", 0.01, -0.01, 0.03)])
    assert parse_report(ok, "regression.json").points[0].outcome == "regressed"


@pytest.mark.parametrize("kind", ["file", "under-a-file", "dev-null"])
def test_r14_10_a_cache_dir_that_is_no_folder_is_one_line_before_any_work(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``models prepare --cache-dir FILE`` (or ``$ALFLOW_CACHE_DIR``) was a ``NotADirectoryError`` traceback."""
    from typer.testing import CliRunner

    from alflow.cli import app

    (tmp_path / "afile").write_text("x")
    given = {
        "file": tmp_path / "afile",
        "under-a-file": tmp_path / "afile" / "sub",
        "dev-null": Path("/dev/null"),
    }[kind]
    result = CliRunner().invoke(app, ["models", "prepare", "smollm2", "--cache-dir", str(given)])
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"error: --cache-dir '{given}'"), result.output
    assert "not a folder" in result.output
    monkeypatch.setenv("ALFLOW_CACHE_DIR", str(given))
    result = CliRunner().invoke(app, ["models", "prepare", "smollm2"])
    assert result.exit_code == 2, result.output
    assert "the cache folder ($ALFLOW_CACHE_DIR" in result.output


@pytest.mark.parametrize(
    ("module", "owner", "attr"),
    [
        ("aiohttp", "ClientSession", "_request"),
        ("httpx", "Client", "send"),
        ("jinja2", "Environment", "__init__"),
        ("yaml", None, "safe_load"),
    ],
)
def test_r14_5_a_patched_method_of_a_library_alflow_uses_is_seen(
    module: str, owner: str | None, attr: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plugin replacing ``aiohttp.ClientSession._request`` read ``bench --api-key`` from every request, unseen."""
    import importlib

    from alflow.plugin_probe import _changes, _interpreter_state

    lib = importlib.import_module(module)
    target = getattr(lib, owner) if owner else lib
    before = _interpreter_state()
    monkeypatch.setattr(target, attr, lambda *a, **k: None)
    changed = _changes(before, _interpreter_state())  # as the probe names them (a class's methods: one entry)
    assert changed, f"{module}.{owner or ''}.{attr} replaced, and the probe saw nothing"
    assert all(attr in name for name in changed), changed


def test_r14_11_k_schedule_out_is_checked_before_the_sweep_and_named_as_given(tmp_path: Path) -> None:
    """``report k-schedule --out FOLDER`` was checked after the schedule was computed, and named ``--output``."""
    from typer.testing import CliRunner

    from alflow.cli import app

    (tmp_path / "afile").write_text("x")
    out = tmp_path / "afile" / "k.json"
    result = CliRunner().invoke(
        app, ["report", "k-schedule", str(tmp_path / "no-such-sweep"), "--out", str(out)]
    )
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: --out "), result.output  # the output first: the sweep is not read


def test_r14_8_an_env_name_before_a_reason_is_no_header() -> None:
    """``--token-env ALFLOW_SITE_TOKEN: the token has 5 characters`` lost its "the" to the header rule."""
    line = (
        "error: --token-env ALFLOW_TEST_SHORT_SITE_TOKEN: the token has 5 characters; at least 16 are needed"
    )
    assert redact_urls_in_text(line) == line
    assert (
        redact_urls_in_text("HF_TOKEN: hf12345678") == "HF_TOKEN: ***"
    )  # a credential-like value still goes


def test_r14_minor_a_folder_named_report_html_is_a_write_failure_in_one_line(short_tmp: Path) -> None:
    """``report show RUN`` read "could not read the run(s) ...: IsADirectoryError ... '.report.html.<hex>.tmp'"."""
    import shutil

    from typer.testing import CliRunner

    from alflow.cli import app

    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "4f9de94" / "m2"
    run = short_tmp / "run"
    shutil.copytree(next(fixture.iterdir()), run)
    (run / "report.html").unlink(missing_ok=True)
    (run / "report.html").mkdir()
    ran = CliRunner().invoke(app, ["report", "show", str(run)])
    assert ran.exit_code == 2, ran.output[-500:]
    assert f"error: cannot write the report '{run}/report.html': Is a directory" in ran.output
    assert "could not read" not in ran.output
    assert ".tmp" not in ran.output
    assert not [p.name for p in run.iterdir() if p.name.endswith(".tmp")]
