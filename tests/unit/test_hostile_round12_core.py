"""Hostile round 12 of issue #49: what the twelfth round found in redaction, the site's files, YAML and reports.

Each test holds the class of input (not only the one value): a server's error text stored in a run, parameter and
key names in camelCase or split, a listed JSON file the parser refuses, a detokenizer that answers no JSON,
integers of other bases, an unreadable regression file.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from alflow.datasets.random_tokens import detokenize_sessions
from alflow.datasets.types import Session, Turn
from alflow.errors import AlflowError, InvalidInputError
from alflow.loadgen.client import AiohttpTransport, stream_request
from alflow.loadgen.endpoints import CompletionsEndpoint
from alflow.loadgen.records import RequestRecord
from alflow.reports.content.regression import regression_sections
from alflow.results.catalog import Catalog
from alflow.results.manifest import SCHEMA_VERSION
from alflow.results.store import open_run
from alflow.site.app import _shown
from alflow.util.redact import redact_body, redact_url, redact_urls_in_text
from alflow.util.secret_names import is_secret_key
from alflow.util.yamlfile import load_yaml
from tests.unit.test_site import M2, make_root
from tests.unit.test_site_security import _list_file

pytestmark = pytest.mark.unit

LEAK = "http://u:R12PW@h/x?token=R12TOK"


@contextlib.asynccontextmanager
async def _answering(status: int, body: str, content_type: str = "text/plain") -> AsyncIterator[str]:
    """A server whose every POST answers ``status`` with ``body``."""

    async def handle(_: web.Request) -> web.Response:
        return web.Response(status=status, text=body, content_type=content_type)

    app = web.Application()
    app.router.add_post("/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("status", [400, 500, 503])
async def test_r12_1_a_servers_error_text_is_stored_as_it_is_printed_without_its_credentials(
    status: int,
) -> None:
    import aiohttp

    async with _answering(status, f"upstream said {LEAK} (Bearer abcdefghijklmnop)") as base:
        record = RequestRecord(request_id=0, session_id="s")
        async with aiohttp.ClientSession() as http:
            await stream_request(
                AiohttpTransport(http), f"{base}/v1/completions", b"{}", CompletionsEndpoint(), record
            )
    assert record.error is not None
    assert f"answered HTTP {status}" in record.error
    for secret in ("R12PW", "R12TOK", "abcdefghijklmnop"):
        assert (
            secret not in record.error
        )  # the records' error column and the summary's error keys are made of it


SECRET_NAMES = ("accountKey", "authKey", "sessionKey", "masterKey", "signingKey", "subscriptionKey", "privateKey",
                "privatekey", "userpass", "authkey", "authCode", "privkey", "key_id", "pass_word", "pass-word",
                "%6Bey", "to%6Ben")  # fmt: skip


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_r12_2_url_parameters_free_text_and_body_keys_agree_on_every_secret_name(name: str) -> None:
    url = f"http://127.0.0.1:9/metrics?{name}=R12CANARY"
    assert "R12CANARY" not in redact_url(url)
    assert "R12CANARY" not in redact_urls_in_text(f"GET {url}: refused")
    assert "R12CANARY" not in json.dumps(redact_body({"vllm_xargs": {name: "R12CANARY"}}))
    assert is_secret_key(name)


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("a 5,000-digit integer", b'{"url":"http:\\/\\/u:R12PW@h\\/","k":' + b"9" * 5000 + b"}"),
        ("cut short", b'{"url":"http:\\/\\/u:R12PW@h\\/","k":1'),
        ("escaped letters", b'{"url":"http:\\u002f\\u002fu:R12PW\\u0040h/"'),
        ("UTF-16", '{"url":"http://u:R12PW@h/"}'.encode("utf-16")),
        ("a lone surrogate escape", b'{"a":"\\ud800","url":"http:\\/\\/u:R12PW@h\\/"'),
    ],
)
def test_r12_3_a_listed_json_file_the_parser_refuses_is_shown_without_its_urls_password(
    name: str, data: bytes
) -> None:
    shown = _shown("data.json", data)
    assert shown is not None
    assert b"R12PW" not in shown, name
    shown.decode("utf-8")  # text a page can send


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        ("<html>log in</html>", "text/html"),
        ("data: {}\n\n", "text/event-stream"),
        ("[1, 2]", "application/json"),
    ],
)
async def test_r12_7_a_detokenizer_that_answers_no_json_object_is_one_line(
    body: str, content_type: str
) -> None:
    async with _answering(200, body, content_type) as base:
        with pytest.raises(AlflowError) as info:
            await detokenize_sessions([Session("s", (Turn((1, 2, 3)),))], base, "m", timeout_s=5)
    assert str(info.value) == f"POST {base}/detokenize returned no JSON object with a 'prompt' string"


@pytest.mark.parametrize(
    "value", ["0x" + "f" * 4000, "0b" + "1" * 16000, "0" + "7" * 5000, "1" + ":59" * 3000]
)
def test_r12_9_an_integer_of_any_base_too_wide_to_print_names_its_line(tmp_path: Path, value: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(f"model: {{id: m}}\nk: {value}\n")
    with pytest.raises(InvalidInputError) as info:
        load_yaml(path)
    assert str(info.value).startswith(f"{path}: not valid YAML: line 2, column 4: ")
    assert "an integer of more than 4,200 decimal digits" in str(info.value)
    assert "set_int_max_str_digits" not in str(info.value)


@pytest.mark.parametrize(
    "change",
    [
        {"points": [{"outcome": "Regressed"}]},
        {"parameters": {"history_runs": -5}},
        {"parameters": {"confidence": 7}},
        {"kind": "nonsense"},
    ],
)
def test_r12_8_a_regression_file_that_cannot_be_read_is_a_warning_in_the_report(
    tmp_path: Path, change: dict[str, object]
) -> None:
    run_dir = make_root(tmp_path) / M2
    stored = {
        "schema_version": SCHEMA_VERSION,
        "version": 1,
        "kind": "m2",
        "method": "bootstrap",
        "parameters": {
            "history_runs": 7,
            "min_history": 3,
            "threshold": 0.03,
            "resamples": 2000,
            "confidence": 0.95,
            "seed": 0,
        },
        "points": [],
    }
    _list_file(run_dir, "regression.json", json.dumps(stored).encode())
    assert regression_sections(open_run(str(run_dir)))[0].status != "warn"  # a good file: its verdicts
    assert Catalog(str(run_dir.parents[1]), cache_dir=None).get(M2).problem is None  # type: ignore[union-attr]
    for key, value in change.items():
        if isinstance(value, dict) and isinstance(stored.get(key), dict):
            stored[key] = {**stored[key], **value}  # type: ignore[dict-item]
        elif key == "points":
            point = {"series": {}, "concurrency": 1, "k": 1, **value[0]}  # type: ignore[index]
            stored["points"] = [point]
        else:
            stored[key] = value
    (run_dir / "regression.json").write_text(json.dumps(stored))
    (section,) = regression_sections(open_run(str(run_dir)))
    assert section.status == "warn"
    assert section.paragraphs[0].startswith("The regression verdicts cannot be read: regression.json: ")
    # the site's catalogue says so beside the run too (it read such a file tolerantly and said nothing)
    entry = Catalog(str(run_dir.parents[1]), cache_dir=None).get(M2)
    assert entry is not None
    assert entry.status == "complete"
    assert (entry.problem or "").startswith(f"{M2}/regression.json: not a regression report: "), entry.problem
