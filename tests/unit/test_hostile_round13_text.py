"""Hostile round 13 of issue #49: secrets in a server's error text, credentials in header form, terminal controls.

Each test holds the class of input (not only the one value): an API key quoted by a server's error answer (in JSON,
without ``Bearer``), ``"name": "value"`` pairs of any secret-named key in either quote style, ``Name: value``
header arguments of any secret-named header, and every control or format character in a server's arguments and
environment.
"""

from __future__ import annotations

import json
import time

import pytest
from aiohttp import web
from pydantic import ValidationError

from alflow.config import server_config
from alflow.datasets.random_tokens import random_sessions
from alflow.errors import AlflowError
from alflow.loadgen import LoadSpec, Target, run_load
from alflow.loadgen.records import RequestRecord
from alflow.util.redact import redact_text_stream, redact_urls_in_text

pytestmark = pytest.mark.unit

KEY = "R13SECRETAPIKEY77"


async def _quoting_server(status: int) -> tuple[web.AppRunner, int]:
    """A server answering every completion ``status`` with a JSON body quoting the key it got, without ``Bearer``."""

    async def answer(request: web.Request) -> web.Response:
        got = request.headers.get("Authorization", "").removeprefix("Bearer ")
        body = {
            "error": "unauthorized",
            "got_key": got,
            "x-api-key": "R13HDRKEYVALUE9",
            "detail": f"key {got}",
        }
        return web.json_response(body, status=status)

    application = web.Application()
    application.router.add_post("/v1/completions", answer)
    runner = web.AppRunner(application, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, runner.addresses[0][1]


@pytest.mark.parametrize("transport", ["fast", "aiohttp"])
@pytest.mark.parametrize("status", [401, 500])
async def test_r13_4_a_servers_answer_quoting_the_api_key_is_stored_without_it(
    status: int, transport: str
) -> None:
    """The records' ``error`` (the parquet column, the summary's ``errors`` keys) never holds the key it sent."""
    runner, port = await _quoting_server(status)
    sink: list[RequestRecord] = []
    spec = LoadSpec(concurrency=1, transport=transport)  # type: ignore[arg-type]
    target = Target(f"http://127.0.0.1:{port}", "m", endpoint="completions", api_key=KEY)
    work = random_sessions(2, isl=4, osl=2, seed=3, vocab_size=500)
    try:
        if status == 401:  # the load stops at once: the key in no line
            with pytest.raises(AlflowError) as info:
                await run_load(work, target, spec, sink=sink)
            assert KEY not in str(info.value)
            assert "R13HDRKEYVALUE9" not in str(info.value)
        else:
            await run_load(work, target, spec, sink=sink)
    finally:
        await runner.cleanup()
    assert sink
    for record in sink:
        assert record.error is not None
        assert f"HTTP {status}" in record.error
        assert KEY not in record.error
        assert (
            "R13HDRKEYVALUE9" not in record.error
        )  # a secret-named key of the JSON answer, whatever the value


def test_r13_4_the_summarys_error_texts_lose_the_key_as_its_values_do() -> None:
    from alflow.bench import _without_secrets

    summary = {"errors": {f'answered HTTP 500: {{"k": "{KEY}"}}': 2, "answered HTTP 500: {\"k\": \"***\"}": 1},
               "aborted": f"got {KEY}"}  # fmt: skip
    clean = _without_secrets(summary, KEY)
    assert KEY not in json.dumps(clean)
    assert clean["errors"] == {'answered HTTP 500: {"k": "***"}': 3}


SECRET_KEYS = ("password", "api_key", "x-api-key", "X-Api-Key", "token", "authToken", "client_secret", "apiKey",
               "x-goog-api-key", "access_token", "session_id", "Authorization", "passphrase")  # fmt: skip


@pytest.mark.parametrize("name", SECRET_KEYS)
@pytest.mark.parametrize("form", ['"{n}": "{v}"', "'{n}': '{v}'", '"{n}" : "{v}"', '"{n}":"{v}"'])
def test_r13_4_json_form_pairs_of_a_secret_named_key_are_redacted_in_free_text(name: str, form: str) -> None:
    pair = form.format(n=name, v='R13VAL\\"UE1')  # an escaped quote inside the value
    text = f'HTTP 400: {{"error": "bad", {pair}, "model": "m"}}'
    out = redact_urls_in_text(text)
    assert "R13VAL" not in out
    assert "UE1" not in out
    assert '"error": "bad"' in out
    assert '"model": "m"' in out


@pytest.mark.parametrize(
    "text",
    ['{"model": "llama", "max_tokens": "8", "tokenizer": "t", "session_len": "4"}', "{'keyword': 'a b'}",
     '"password": "" and "password": "***"', 'say "token": 5 (a number)', '"password":\n"on the next line"'],
)  # fmt: skip
def test_r13_4_json_form_pairs_of_other_keys_stay(text: str) -> None:
    assert redact_urls_in_text(text) == text


def test_r13_4_a_streamed_text_keeps_a_lines_pairs_together() -> None:
    text = b'{"note": "x", "password": "R13STREAMPW"}\n' * 500
    parts = [text[i : i + 4096] for i in range(0, len(text), 4096)]
    assert b"R13STREAMPW" not in b"".join(redact_text_stream(parts))


@pytest.mark.parametrize(
    "shape",
    [
        '"password": "' + "a" * 2_000_000,  # a value never closed
        '"password": "x", ' * 200_000,  # 200,000 secret pairs
        '"k": "\\"' * 300_000,  # escapes, no closing quote
        "'k': \"" * 300_000,  # quote styles mixed
        '"' * 2_000_000,
        '"a":' * 500_000,
        '"' + "a" * 63 + '"' + " " * 16 + ":" + " " * 16 + '"' + "\\\\" * 1_000_000,
    ],
)
def test_r13_4_json_pair_redaction_is_linear_in_the_text(shape: str) -> None:
    started = time.perf_counter()
    out = redact_urls_in_text(f"model {shape} at http://u:pw1234@h/x")
    assert out.endswith("at http://***@h/x")
    assert time.perf_counter() - started < 10.0  # quadratic: hours at this size; linear: under a second here


HEADERS = ("api-key: R13ARG1", "X-Api-Key: R13ARG1", "x-goog-api-key: R13ARG1", "X-Auth-Token:R13ARG1",
           "Proxy-Authorization: R13ARG1", "x-session-id: R13ARG1", "Authorization:R13ARG1",
           "Accept: a, api-key: R13ARG1")  # fmt: skip


@pytest.mark.parametrize("header", HEADERS)
@pytest.mark.parametrize("shape", ["flag", "joined", "alone"])
def test_r13_7_a_secret_named_header_in_extra_args_is_refused_without_its_value(
    header: str, shape: str
) -> None:
    args = {
        "flag": ["--port-range", "1", "--header", header],
        "joined": ["--port-range", "1", f"--header={header}"],
        "alone": [header],
    }[shape]
    with pytest.raises(ValidationError) as info:
        server_config(framework="sim", model="m", extra_args=args)
    message = str(info.value)
    assert "holds a credential" in message
    assert "R13ARG1" not in message
    assert f"extra_args[{len(args) - 1}]" in message
    if shape != "alone":
        assert "'--header'" in message


@pytest.mark.parametrize("header", HEADERS)
def test_r13_7_a_secret_named_header_in_extra_env_is_refused_without_its_value(header: str) -> None:
    with pytest.raises(ValidationError) as info:
        server_config(framework="sim", model="m", extra_env={"OTEL_EXPORTER_OTLP_HEADERS": header})
    assert "OTEL_EXPORTER_OTLP_HEADERS" in str(info.value)
    assert "R13ARG1" not in str(info.value)


@pytest.mark.parametrize(
    "args",
    [["--device", "cuda:0"], ["--distributed-init-method", "tcp://127.0.0.1:29500"], ["--served-model-name", "org:m"],
     ["--chat-template", "Note: keep it short"], ["--header", "Accept: text/plain"]],
)  # fmt: skip
def test_r13_7_arguments_with_a_colon_that_are_no_credential_are_taken(args: list[str]) -> None:
    assert server_config(framework="sim", model="m", extra_args=args).extra_args == tuple(args)


CONTROLS = (
    "\x1b",
    "\x07",
    "\x1b]0;T\x07",
    "\u202e",
    "\u2066",
    "\x9b",
    "\x7f",
    "\r",
    "\u200b",
    "\u2028",
    "\x08",
)


@pytest.mark.parametrize("char", CONTROLS)
def test_r13_6_control_and_format_characters_in_extra_args_are_refused_naming_them(char: str) -> None:
    with pytest.raises(ValidationError) as info:
        server_config(framework="sim", model="m", extra_args=["--x", f"a{char}RED"])
    message = str(info.value)
    assert "extra_args[1] (the value of '--x')" in message
    for c in set(char) - set("]0;T"):
        assert f"U+{ord(c):04X}" in message
    assert char not in message
    assert len(message.splitlines()) <= 4  # pydantic: its header, the field, the one line, its link


@pytest.mark.parametrize("char", CONTROLS)
def test_r13_6_control_and_format_characters_in_extra_env_are_refused_naming_them(char: str) -> None:
    for env in ({"FOO": f"a{char}RED"}, {f"FOO{char}": "a"}):
        with pytest.raises(ValidationError) as info:
            server_config(framework="sim", model="m", extra_env=env)
        message = str(info.value)
        assert "extra_env 'FOO" in message
        assert f"U+{ord(char[-1]):04X}" in message
        assert char not in message


def test_r13_6_tab_and_newline_stay_allowed_in_arguments_and_values() -> None:
    config = server_config(
        framework="sim", model="m", extra_args=["--x", '{"a":\n\t1}\n'], extra_env={"FOO": "a\tb\nc"}
    )
    assert config.extra_args == ("--x", '{"a":\n\t1}\n')
