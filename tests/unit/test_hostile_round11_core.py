"""Hostile round 11 of issue #49: the failures of the site, YAML readers, redaction and error reasons, mended.

Each test holds the class of input a tester found (not only the one value): integers Python refuses to convert, YAML
scalars PyYAML cannot build, undecodable credentials, secret names the redactors missed, reasons that were empty.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from alflow.bench import served_model
from alflow.errors import AlflowError, InvalidInputError
from alflow.metrics.prometheus import ScrapeError, scrape
from alflow.reference.inferencex import parse_golden
from alflow.results.catalog import Catalog
from alflow.site.reference import reference_page
from alflow.util.redact import redact_body, redact_url, redact_urls_in_text
from alflow.util.secret_names import is_secret_key
from alflow.util.yamlfile import load_yaml
from tests.unit.test_site import TOKEN, make_root, serving

pytestmark = pytest.mark.unit

HUGE = "9" * 4301  # one digit over what int() converts (sys.get_int_max_str_digits)


async def test_r11_1_an_integer_query_parameter_of_any_length_is_a_400_never_a_500(tmp_path: Path) -> None:
    async with serving(make_root(tmp_path)) as site:
        for path in ("/?page=", "/api/runs?page=", "/trends?k=", "/trends?concurrency=", "/trends?last=",
                     "/api/trends?k=", "/api/trends?concurrency=", "/api/trends?last="):  # fmt: skip
            for digits in (HUGE, "9" * 21, "0" * 5000 + "1"):
                answer = await site.get(path + digits)
                assert answer.status == 400, (path, len(digits), answer.status)
                assert "must be an integer in" in answer.text, path


async def test_r11_3_undecodable_bytes_in_the_token_header_or_cookie_are_a_401(tmp_path: Path) -> None:
    async with serving(make_root(tmp_path), TOKEN) as site:
        for bad in ("\xe9\xff", "\xff" * 40, TOKEN[:-1] + "\xff"):  # sent as these bytes: not UTF-8
            assert (await site.get("/", headers={"Authorization": f"Bearer {bad}"})).status == 401, bad
            assert (await site.get("/", headers={"Cookie": f"alflow_site_token={bad}"})).status == 401, bad
        assert (await site.get("/", headers={"Authorization": f"Bearer {TOKEN}"})).status == 200


UNBUILDABLE = {  # YAML scalars PyYAML's constructor turns into Python objects, raising ValueError on the way
    "a 4,301-digit integer": (f"k: {HUGE}\n", "4300 digits"),
    "February 30th": ("date: 2026-02-30\n", "day is out of range"),
    "month 13": ("date: 2026-13-45\n", "2026-13-45"),
    "hour 25": ("when: 2026-12-07 25:61:61\n", "2026-12-07 25:61:61"),
    "an offset of 99 hours": ("when: 2026-12-07T10:00:00+99:00\n", "+99:00"),
}


@pytest.mark.parametrize("case", sorted(UNBUILDABLE))
def test_r11_2_a_yaml_scalar_python_cannot_hold_is_one_line_naming_the_file_and_line(
    tmp_path: Path, case: str
) -> None:
    text, shown = UNBUILDABLE[case]
    path = tmp_path / "config.yaml"
    path.write_text("model: {id: m}\n" + text)
    with pytest.raises(InvalidInputError) as info:
        load_yaml(path)
    message = str(info.value)
    assert message.startswith(f"{path}: not valid YAML: line 2, column ")
    assert shown in message
    assert "\n" not in message
    assert len(message) < 400


def test_r11_2_a_golden_file_and_the_sites_reference_page_take_an_unbuildable_scalar(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match=r"^golden.yaml: not valid YAML: line 3, .*4300 digits"):
        parse_golden(f"m:\n  thinking-off:\n    1: {HUGE}\n", source="golden.yaml")
    (tmp_path / "reference-a.yaml").write_text("kind: example\ndate: 2026-13-45\nentries: []\n")
    page = reference_page(Catalog(str(tmp_path)))  # a whole root's reference page, not a 500
    (table,) = page.tables
    assert table.problem is not None
    assert "2026-13-45" in table.problem


SECRET_PARAMS = ("jwt", "bearer", "passcode", "password1", "ticket", "hmac", "otp", "AWSAccessKeyId", "sig",
                 "session_id", "sessionId", "x_jwt_v2", "client-secret2")  # fmt: skip
PLAIN_PARAMS = ("model", "page", "k", "session_len", "format", "step")


@pytest.mark.parametrize("name", SECRET_PARAMS)
def test_r11_4_both_redactors_and_body_keys_share_one_rule_for_secret_names(name: str) -> None:
    url = f"http://127.0.0.1:9/metrics?{name}=CANARY11"
    assert "CANARY11" not in redact_url(url)
    assert "CANARY11" not in redact_urls_in_text(f"scraped {url} twice")
    assert "CANARY11" not in json.dumps(redact_body({"vllm_xargs": {name: "CANARY11"}, name: "CANARY11"}))
    assert is_secret_key(name)


@pytest.mark.parametrize("name", PLAIN_PARAMS)
def test_r11_4_ordinary_names_stay_as_they_are(name: str) -> None:
    assert redact_url(f"http://h:9/m?{name}=v1") == f"http://h:9/m?{name}=v1"


@contextlib.asynccontextmanager
async def _silent_server(mode: str) -> AsyncIterator[str]:
    """A server that accepts and reads, then never answers (``silent``) or trickles a reply it never ends."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        if mode == "trickle":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100000\r\n\r\n")
            for _ in range(100):
                writer.write(b"# x\n")
                await writer.drain()
                await asyncio.sleep(0.05)
        await asyncio.sleep(60)

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()


@pytest.mark.parametrize("mode", ["silent", "trickle"])
async def test_r11_8_a_server_that_never_finishes_its_answer_gets_a_reason_not_an_empty_one(
    mode: str,
) -> None:
    async with _silent_server(mode) as base:
        with pytest.raises(ScrapeError) as scraped:
            await scrape(f"{base}/metrics", timeout_s=0.5)
        assert (
            str(scraped.value) == f"cannot scrape metrics at {base}/metrics: no complete answer within 0.5 s"
        )
        async with aiohttp.ClientSession() as http:
            with pytest.raises(AlflowError) as served:
                await served_model(http, base, None, {}, timeout_s=0.5)
        assert str(served.value) == f"GET {base}/v1/models: the server sent no complete answer within 0.5 s"
