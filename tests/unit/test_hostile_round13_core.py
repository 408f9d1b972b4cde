"""Hostile round 13 of issue #49: the webhook helper's error answers (R13-1) and the site's view of listed files
(R13-2, R13-3).

R13-1: a Prefect API answering 422 echoes the request, and so the webhook URL whose path is its secret, in the error
the helper printed. R13-2: a listed ``data.JSON`` (upper-case suffix) was served without undoing its ``\\/`` escapes,
so ``http:\\/\\/u:PW@h`` passed the redaction. R13-3: the JSON view redacted values only: a URL as a key, a bearer
token as a key and the values of secret-named keys (``password``, ``api_key``) were served as stored.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from prefect.exceptions import PrefectHTTPStatusError

from alflow_deployments import webhook
from tests.unit.test_hostile_round12_webhook import _api_url, _automations
from tests.unit.test_site import M2, make_root, serving
from tests.unit.test_site_security import _edit_manifest, _list_file

pytestmark = pytest.mark.unit

HOOK = "https://chat.example/hooks/T000/B000/WEBHOOKSECRET42"


def _echo(body: str) -> PrefectHTTPStatusError:
    request = httpx.Request("POST", "http://127.0.0.1:9/api/block_documents/")
    response = httpx.Response(422, request=request, text=body)
    return PrefectHTTPStatusError.from_httpx_error(
        httpx.HTTPStatusError(f"Client error '422' - Response: {body}", request=request, response=response)
    )


ECHOES: list[Callable[[], BaseException]] = [
    lambda: _echo(json.dumps({"exception_detail": [{"input": {"webhook_url": HOOK}}]})),
    lambda: _echo(json.dumps({"request_body": {"data": {"url": HOOK}}}).replace("/", "\\/")),
    lambda: _echo("x" * 40 + HOOK),  # where a cut in the middle would not fall on it
    lambda: RuntimeError(f"refused {HOOK.split('://', 1)[1]}"),
    lambda: ValueError(f"bad path {HOOK.split('chat.example', 1)[1]}"),
]


@pytest.mark.parametrize("failure", ECHOES)
def test_r13_1_an_api_error_quoting_the_webhook_url_never_prints_it(
    failure: Callable[[], BaseException],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    def fails(*args: Any, **kwargs: Any) -> Any:
        raise failure()

    monkeypatch.setattr(webhook, "save_block", fails)
    _api_url(monkeypatch)
    argv = ["--url", HOOK, "--out", str(tmp_path / "out.yaml")]
    assert webhook.main([*argv, "--automations", str(_automations(tmp_path, ["a"]))]) == 1
    said = capsys.readouterr().err
    assert "failed while saving the block" in said
    assert "WEBHOOKSECRET42" not in said
    assert "B000" not in said  # the path is the secret, every part of it


FILES: dict[str, bytes] = {
    "data.JSON": b'{"url": "http:\\/\\/u:CANARY1@h\\/"}',
    "data.Json": b'{"u": "http:\\/\\/u:CANARY2@h\\/x?token=CANARY3"}',
    "keys.json": b'{"http://u:CANARY4@h/x?token=CANARY5": 1, "ok": "http://u:CANARY6@h/"}',
    "kd.json": b'{"Authorization: Bearer CANARY7abcdefgh": 1, "sk-CANARY8abcdefghijklmnopqrstu": 2}',
    "bk.json": b'{"api_key": "CANARY9", "password": "CANARYA", "nested": {"authToken": "CANARYB", "n": 1}}',
    "list.json": b'[{"secret": "CANARYC"}, {"x-api-key": ["CANARYD"]}]',
}


async def test_r13_2_and_3_a_listed_json_file_is_redacted_in_its_keys_and_secret_named_values(
    tmp_path: Path,
) -> None:
    root = make_root(tmp_path)
    for name, data in FILES.items():
        _list_file(root / M2, name, data)
    async with serving(root) as site:
        for name in FILES:
            answer = await site.get(f"/runs/{M2}/files/{name}")
            assert answer.status == 200, name
            assert "CANARY" not in answer.text, (name, answer.text)
            assert answer.headers["content-type"].startswith("application/json"), name
            json.loads(answer.text)  # still JSON
        shown = json.loads((await site.get(f"/runs/{M2}/files/bk.json")).text)
        assert shown["nested"]["n"] == 1  # what is not secret is kept
        assert shown["api_key"] == "***"


@pytest.mark.parametrize("name", ["notes.yaml", "run.log", "data.txt"])
async def test_r13_2_escapes_in_a_listed_text_file_do_not_hide_a_url(tmp_path: Path, name: str) -> None:
    """A YAML double-quoted string (or any text) may write ``/`` as ``\\/`` and ``@`` as ``\\u0040``."""
    root = make_root(tmp_path)
    _list_file(
        root / M2, name, b'url: "http:\\/\\/u:CANARY1\\u0040h\\/x"\nother: "http:\\/\\/v:CANARY2@h\\/"\n' * 3
    )
    async with serving(root) as site:
        answer = await site.get(f"/runs/{M2}/files/{name}")
    assert answer.status == 200
    assert "CANARY" not in answer.text
    assert answer.text.count("http://***@h/") == 6


def test_r13_9_a_text_dense_in_url_parameters_is_redacted_at_the_speed_of_other_text() -> None:
    """A log of URLs repeats a few parameter names a million times: each was judged anew (17 us: 10 s for 2 MiB)."""
    from alflow.util import redact, secret_names

    secret_names._judged_param.cache_clear()
    line = "GET http://h/?" + "a=b&c=d&" * 125 + "token=SECRET1\n"
    started = time.perf_counter()
    out = redact.redact_urls_in_text(line * 1000)  # 2 MB, 250,000 parameters
    assert time.perf_counter() - started < 5.0  # about 0.5 s here; judged anew 10 s
    assert "SECRET1" not in out
    assert out.count("token=***") == 1000
    assert (
        secret_names._judged_param.cache_info().misses <= 4
    )  # a, c, token (and nothing else) judged once each


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("upstream: X-Api-Key: HDRVAL8 rejected", "upstream: X-Api-Key: *** rejected"),
        ("x-goog-api-key:\tZZ9", "x-goog-api-key:\t***"),
        ("Cookie: session=abc", "Cookie: ***"),
        ("Authorization: Bearer abcdefghij", "Authorization: Bearer ***"),
        ("the parameter api_key: credentials in a URL", None),  # alflow's own "field: reason" is no header
        ("at 12:30 error: cannot connect: refused", None),
    ],
)
def test_r13_15_a_secret_header_in_free_text_is_redacted(text: str, shown: str | None) -> None:
    from alflow.util.redact import redact_urls_in_text

    assert redact_urls_in_text(text) == (text if shown is None else shown)


async def test_r13_15_the_sites_json_answers_redact_free_text_without_a_url(tmp_path: Path) -> None:
    """The answers were redacted only when they held ``://`` or ``?``: a run's error went out as stored."""
    root = make_root(tmp_path)
    error = 'boom HF_TOKEN=hf_abcdefghijklmnopqrstuv Bearer xyz1234567 {"api_key": "JSONKEYVAL"} X-Api-Key: HDRVAL8'
    _edit_manifest(root / M2, {"error": error})
    async with serving(root) as site:
        for path in (f"/api/runs/{M2}", "/api/runs?text=boom", f"/runs/{M2}/", "/?text=boom"):
            answer = await site.get(path)
            assert answer.status == 200, path
            for secret in ("hf_abcdefghijklmnopqrstuv", "xyz1234567", "JSONKEYVAL", "HDRVAL8"):
                assert secret not in answer.text, (path, secret)
        api = json.loads((await site.get(f"/api/runs/{M2}")).text)
    assert api["error"].startswith("boom HF_TOKEN=*** Bearer ***")


@pytest.mark.parametrize(
    "metric",
    [
        {"current": -5.0, "baseline": 0.0, "change": float("nan"), "low": float("-inf"), "high": 1e308},
        {"current": 9.0, "baseline": 0.0, "change": 0.1},
        {"current": 9.0, "baseline": 10.0, "change": float("inf")},
        {"current": 9.0, "baseline": 10.0, "change": -0.1, "low": 0.2, "high": -0.2},
    ],
)
def test_r13_16_a_stored_verdict_of_impossible_values_is_a_warning_not_a_verdict(
    tmp_path: Path, metric: dict[str, float]
) -> None:
    from alflow.reports.content.regression import regression_sections
    from alflow.results.manifest import SCHEMA_VERSION
    from alflow.results.store import open_run

    run_dir = make_root(tmp_path) / M2
    point = {"series": {}, "concurrency": 4, "k": 3, "outcome": "improved"}
    stored = {
        "schema_version": SCHEMA_VERSION,
        "version": 1,
        "kind": "m2",
        "method": "bootstrap",
        "points": [point],
    }
    good = {"metric": "tpot_ms", "current": 9.0, "baseline": 10.0, "change": -0.1, "low": -0.15, "high": -0.05,
            "outcome": "improved"}  # fmt: skip
    _list_file(
        run_dir, "regression.json", json.dumps({**stored, "points": [{**point, "metrics": [good]}]}).encode()
    )
    assert regression_sections(open_run(str(run_dir)))[0].status != "warn"
    bad = {**point, "metrics": [{**good, **metric}]}
    (run_dir / "regression.json").write_text(json.dumps({**stored, "points": [bad]}))
    (section,) = regression_sections(open_run(str(run_dir)))
    assert section.status == "warn"
    assert "points.0.metrics.0" in section.paragraphs[0]


def test_r13_10_the_probe_names_the_packages_a_plugin_imported_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A vendor's helper package the plugin imports was not signed: changed, it was loaded without a probe."""
    import importlib
    import sys

    from alflow import plugin_probe

    (tmp_path / "r13helper").mkdir()
    (tmp_path / "r13helper" / "__init__.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules) - {"json", "json.decoder", "alflow.util.redact"}
    monkeypatch.delitem(sys.modules, "r13helper", raising=False)
    importlib.import_module("r13helper")
    assert plugin_probe._imported_tops(before) >= {"r13helper"}
    assert not plugin_probe._imported_tops(before) & {
        "json",
        "alflow",
    }  # the standard library's and ours: not


@pytest.mark.parametrize(
    "limit", [2000, 1]
)  # signed by its files; a package too large to sign: by its folders
def test_r13_10_a_changed_helper_package_is_probed_again(
    limit: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    from alflow import plugin_probe

    site = tmp_path / "site"
    for top, text in (("r13spec", "SPEC = None\n"), ("r13vendor", "X = 1\n")):
        (site / top).mkdir(parents=True)
        (site / top / "__init__.py").write_text(text)
    (site / "r13vendor" / "more.py").write_text("Y = 2\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(plugin_probe, "MAX_SIGNED_FILES", limit)
    tried: list[str] = []
    monkeypatch.setattr(
        plugin_probe, "_probe", lambda ref, bound: (tried.append(ref), (None, ("r13spec", "r13vendor")))[1]
    )
    for _ in range(2):
        assert plugin_probe.probe("r13spec:SPEC", origin="r13 0.1") is None
    assert len(tried) == 1  # kept
    shutil.rmtree(site / "r13vendor")  # a new version installed
    (site / "r13vendor").mkdir()
    (site / "r13vendor" / "__init__.py").write_text(
        "import os\nos.environ['HTTPS_PROXY'] = 'http://127.0.0.1:9'\n"
    )
    assert plugin_probe.probe("r13spec:SPEC", origin="r13 0.1") is None
    assert len(tried) == 2, "the helper package changed and the verdict was kept"


def test_r13_17_a_run_stopped_by_a_signal_says_so_in_its_error() -> None:
    """A run stopped by SIGTERM was stored with the error ``TerminationSignal: `` (Prefect raises it by keyword)."""
    import asyncio
    import signal

    from prefect.exceptions import TerminationSignal

    from alflow.results.store import error_text

    assert error_text(TerminationSignal(signal=signal.SIGTERM)) == (
        "TerminationSignal: the run was stopped by SIGTERM (signal 15)"
    )
    assert error_text(KeyboardInterrupt()) == "KeyboardInterrupt: the run was stopped (Ctrl-C, SIGINT)"
    assert error_text(asyncio.CancelledError()) == "CancelledError: the run was cancelled"
    assert error_text(ValueError("bad K")) == "ValueError: bad K"
    assert error_text(RuntimeError()) == "RuntimeError: (no message)"
