"""The results site under attack: each promise of the "Security" section of docs/running/results-site.md over real HTTP.

A loopback server on port 0 over a copy of the fixture runs (:mod:`tests.unit.test_site`'s harness: requests are
written by hand on a socket, so a path reaches the server exactly as typed). Each test builds the hostile root it
needs: credentials in a run's configuration, file names that would break a header, listed files that are FIFOs or
symlinks out of the root, stored HTML, values a chart cannot place.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from alflow.site.charts import TrendMark, trend_chart
from alflow.site.guard import is_loopback
from alflow.util import fsutil
from alflow.util.fsutil import read_confined
from tests.unit.test_site import HOSTILE_REL, M1, M2, TOKEN, Answer, make_root, serving

pytestmark = pytest.mark.unit

SECRET = "hunter2-not-for-pages"
HEADERS = {
    "content-security-policy": "default-src 'none'; style-src 'unsafe-inline'; img-src data:",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cache-control": "no-store",
}
WRITTEN = "2026-12-05T06:03:43.524656+00:00"


def _secure(answer: Answer) -> None:
    for name, value in HEADERS.items():
        assert answer.headers.get(name) == value, (name, answer.headers)


def _edit_manifest(run: Path, change: dict[str, object]) -> None:
    path = run / "manifest.json"
    manifest = json.loads(path.read_text())
    for dotted, value in change.items():
        *parents, last = dotted.split(".")
        node = manifest
        for part in parents:
            node = node[part]
        node[last] = value
    path.write_text(json.dumps(manifest))


def _list_file(run: Path, name: str, data: bytes | None = b"x") -> None:
    """Add ``name`` to the run's manifest (and write it, unless ``data`` is None)."""
    path = run / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["files"][name] = {"written": WRITTEN, "rows": None}
    path.write_text(json.dumps(manifest))
    if data is not None:
        (run / name).write_bytes(data)


@contextlib.contextmanager
def _fifo(path: Path) -> Iterator[Path]:
    """A FIFO at ``path``; on the way out a writer opens and closes it, so a reader stuck on it gets EOF."""
    if path.exists():
        path.unlink()
    os.mkfifo(path)
    try:
        yield path
    finally:
        with contextlib.suppress(OSError):
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))


def _snapshot(root: Path) -> dict[str, tuple[int, int, int]]:
    return {
        str(p.relative_to(root)): (p.lstat().st_mode, p.lstat().st_size, p.lstat().st_mtime_ns)
        for p in root.rglob("*")
    }


# --------------------------------------------------------------------------------------------
# No secret of a run's configuration, and no server path, on any page or answer


async def test_credentials_in_a_runs_configuration_are_redacted_on_every_page_and_answer(
    tmp_path: Path,
) -> None:
    """A manifest not written by alflow's store (by hand, another tool) may hold credentials: none is served."""
    root = make_root(tmp_path)
    _edit_manifest(
        root / M2,
        {
            "config.server.host": f"http://bob:{SECRET}@10.0.0.1:8000/?token={SECRET}",
            "config.endpoint": f"https://bob:{SECRET}@example.com/v1",
            "config.server.extra_args": ["--url", f"https://x:{SECRET}@h/?api_key={SECRET}"],
            "config.model.id": f"https://bob:{SECRET}@hf.example/m",
            "error": f"boom at https://bob:{SECRET}@example.com/x",
        },
    )
    async with serving(root) as site:
        for path in (
            "/",
            "/?text=bob",
            "/api/runs",
            f"/runs/{M2}/",
            f"/api/runs/{M2}",
            f"/runs/{M2}/files/manifest.json",
            f"/compare?run={M2}&run={M1}",
            f"/api/compare?run={M2}&run={M1}",
            "/trends",
            "/api/trends",
        ):
            for method in ("GET", "HEAD"):
                answer = await site.get(path, method=method)
                assert answer.status == 200, (path, answer.status)
                assert SECRET not in answer.text, (path, method)
                assert SECRET not in json.dumps(answer.headers), (path, method)
        page = await site.get(f"/runs/{M2}/")
        assert "http://***@10.0.0.1:8000/?token=***" in page.text  # redacted, the rest of the page intact
        api = json.loads((await site.get(f"/api/runs/{M2}")).body)
        assert api["model"] == "https://***@hf.example/m"
        assert api["error"] == "boom at https://***@example.com/x"


async def test_the_servers_own_path_is_never_shown(tmp_path: Path) -> None:
    """Reports name a run's directory: the site shows its ``<flow>/<run dir>``, never the server's path."""
    root = make_root(tmp_path)
    where = str(tmp_path)
    async with serving(root) as site:
        for path in (
            f"/runs/{M2}/",
            f"/runs/{M1}/",
            f"/api/runs/{M2}",
            f"/compare?run={M2}&run={M1}",
            f"/api/compare?run={M2}&run={M1}",
            "/",
            "/api/runs",
            "/reference",
            "/api/reference",
            "/trends",
        ):
            answer = await site.get(path)
            assert answer.status == 200, path
            assert where not in answer.text, path
        assert M2 in (await site.get(f"/runs/{M2}/")).text
        (root / M1 / "spec_stats.parquet").write_bytes(b"not parquet")  # damaged after the catalogue read it
        for path in (f"/compare?run={M1}", f"/api/compare?run={M1}"):
            answer = await site.get(path)
            assert answer.status == 404, (path, answer.status)  # not a 500
            assert where not in answer.text, path
            assert f"{M1}/spec_stats.parquet" in answer.text, path


# --------------------------------------------------------------------------------------------
# Files: headers, FIFOs, symlinks, stored HTML


async def test_a_file_name_with_quotes_or_crlf_cannot_break_the_download_header(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    _list_file(root / M2, 'q"uote.bin')
    _list_file(root / M2, "we\r\nX-Injected: 1.bin")
    _list_file(root / M2, "caf\u00e9 \u2044.bin")
    async with serving(root) as site:
        quoted = await site.get(f"/runs/{M2}/files/q%22uote.bin")
        assert quoted.status == 200
        assert quoted.headers["content-disposition"] == (
            "attachment; filename=\"q_uote.bin\"; filename*=UTF-8''q%22uote.bin"
        )
        crlf = await site.get(f"/runs/{M2}/files/we%0D%0AX-Injected:%201.bin")
        assert crlf.status == 200
        assert "x-injected" not in crlf.headers
        assert crlf.headers["content-disposition"].endswith("filename*=UTF-8''we%0D%0AX-Injected%3A%201.bin")
        _secure(crlf)
        other = await site.get(f"/runs/{M2}/files/caf%C3%A9%20%E2%81%84.bin")
        assert other.status == 200
        assert other.headers["content-disposition"].endswith("filename*=UTF-8''caf%C3%A9%20%E2%81%84.bin")


async def test_listed_files_that_are_fifos_or_point_out_of_the_root_are_never_read(tmp_path: Path) -> None:
    """A report reads every file its run lists: a FIFO would block a thread (and the shutdown) for good."""
    root = make_root(tmp_path)
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"schema_version": 1, "passed": True, "note": SECRET}))
    async with serving(root) as site:
        with _fifo(root / M2 / "summary.json"):
            for path in (f"/runs/{M2}/files/summary.json", f"/runs/{M2}/", f"/compare?run={M2}"):
                answer = await asyncio.wait_for(site.get(path), 10)
                assert answer.status == 404, (path, answer.status)
                assert str(tmp_path) not in answer.text
            assert (
                "summary.json is not a regular file inside the results root"
                in (await site.get(f"/runs/{M2}/")).text
            )
        (root / M1 / "summary.json").unlink()
        (root / M1 / "summary.json").symlink_to(secret)
        for path in (f"/runs/{M1}/files/summary.json", f"/runs/{M1}/", f"/api/compare?run={M1}"):
            answer = await asyncio.wait_for(site.get(path), 10)
            assert answer.status == 404, (path, answer.status)
            assert SECRET not in answer.text


async def test_the_reference_page_names_no_server_path_and_reads_no_fifo(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    (root / "bad-reference.yaml").write_text("entries:\n  - bogus: 1\n")
    (root / "m0" / "linked.yaml").symlink_to(tmp_path / "outside.json")
    m0 = root / "m0" / "20261205T060239Z-eba22b44fe7c"
    async with serving(root) as site:
        with _fifo(m0 / "summary.json"):
            for path in ("/reference", "/api/reference"):
                answer = await asyncio.wait_for(site.get(path), 10)
                assert answer.status == 200, path
                assert str(tmp_path) not in answer.text, path
                assert "bad-reference.yaml: kind: Field required" in answer.text, path
                assert "summary.json is not a regular file inside the results root" in answer.text, path
                assert "outside the root" not in answer.text, path


async def test_flow_folders_with_odd_names_are_linked_and_redirected_safely(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    for flow in ("we\r\nird", "caf\u00e9 <b>", "%2e%2e"):
        shutil.copytree(root / M2, root / flow / M2.split("/")[1])
    async with serving(root) as site:
        for quoted in ("we%0D%0Aird", "caf%C3%A9%20%3Cb%3E", "%252e%252e"):
            rel = f"{quoted}/{M2.split('/')[1]}"
            redirect = await site.get(f"/runs/{rel}")
            assert redirect.status == 302, quoted
            assert redirect.headers["location"] == f"/runs/{rel}/"
            assert (await site.get(f"/runs/{rel}/")).status == 200, quoted
        index = await site.get("/")
        assert "<b>" not in index.text
        assert 'href="/runs/caf%C3%A9%20%3Cb%3E/' in index.text


async def test_a_manifest_listing_paths_out_of_the_run_serves_none_of_them(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    for name in ("../../outside.json", "/etc/passwd", "..", ".", "sub/../../x", "..\\..\\outside.json"):
        _list_file(root / M2, name, data=None)
    (root / M2 / "dev").symlink_to("/dev/zero")
    _list_file(root / M2, "dev", data=None)
    async with serving(root) as site:
        for path in (
            f"/runs/{M2}/files/..%2F..%2Foutside.json",
            f"/runs/{M2}/files/%2Fetc%2Fpasswd",
            f"/runs/{M2}/files/%252e%252e%252foutside.json",  # double-encoded: a literal name, not listed
            f"/runs/{M2}/files/%2e%2e",
            f"/runs/{M2}/files/..%5C..%5Coutside.json",
            f"/runs/{M2}/files/%EF%BC%8E%EF%BC%8E%EF%BC%8Foutside.json",
            f"/runs/{M2}/files/%E2%80%A4%E2%80%A4%2Foutside.json",  # one-dot leaders
            f"/runs/{M2}/files/%C0%AE%C0%AE%C0%AFoutside.json",  # overlong UTF-8 dots and slash
            f"/runs/{M2}/files/%u002e%u002e%u2215outside.json",  # IIS-style escapes: a literal name here
            f"/runs/{M2}/files/.%2e/outside.json",
            f"/runs/{M2}/files/%2e./outside.json",
            f"/runs/{M2}/files/..;/..;/outside.json",
            f"/runs/{M2}/files/dev",  # a listed symlink to a device
            "/runs/m2/" + "a" * 7000,
        ):
            answer = await asyncio.wait_for(site.get(path), 10)
            assert answer.status in (400, 404), (path, answer.status)
            assert "outside the root" not in answer.text
            assert "root:" not in answer.text
            assert "passwd" not in answer.text
            assert "outside.json" not in answer.text


async def test_stored_html_is_shown_sandboxed(tmp_path: Path) -> None:
    """A run's own HTML (a report written by another tool) can neither run script nor redirect nor post a form."""
    root = make_root(tmp_path)
    hostile = (
        '<meta http-equiv="refresh" content="0;url=https://evil.example/">'
        '<form action="https://evil.example/"><input name="pw"></form><base href="https://evil.example/">'
    )
    _list_file(root / M2, "notes.HTML", hostile.encode())
    async with serving(root) as site:
        answer = await site.get(f"/runs/{M2}/files/notes.HTML")
        assert answer.status == 200
        assert answer.headers["content-type"].startswith("text/html")
        policy = answer.headers["content-security-policy"]
        assert policy.startswith("default-src 'none'")
        for directive in ("sandbox", "form-action 'none'", "base-uri 'none'", "frame-ancestors 'none'"):
            assert directive in [d.strip() for d in policy.split(";")], policy
        assert answer.headers["x-content-type-options"] == "nosniff"


async def test_json_files_and_api_answers_are_never_sniffed_as_html(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    summary = json.loads((root / HOSTILE_REL / "summary.json").read_text())
    summary["weird"] = {"<b>": [float("nan"), 1e308, "<script>alert(1)</script>"]}
    (root / HOSTILE_REL / "summary.json").write_text(json.dumps(summary))
    (root / HOSTILE_REL / "regression.json").write_text(
        '{"points": [{"outcome": "regressed", "series": {"framework": "<b>", "k": 1e999}}, {"outcome": "<i>"},'
        ' {"outcome": "regressed"}], "n": NaN}'
    )
    async with serving(root) as site:
        for path in (f"/runs/{HOSTILE_REL}/files/summary.json", f"/api/runs/{HOSTILE_REL}", "/api/runs"):
            answer = await site.get(path)
            assert answer.status == 200, path
            assert answer.headers["content-type"].startswith("application/json"), path
            _secure(answer)
        api = json.loads((await site.get(f"/api/runs/{HOSTILE_REL}")).body)
        assert api["verdict"] is None  # a NaN makes regression.json no JSON: left out, nothing breaks
        for path in ("/", "/trends", f"/runs/{HOSTILE_REL}/"):
            answer = await site.get(path)
            assert answer.status == 200, path
            assert "<script>" not in answer.text, path


# --------------------------------------------------------------------------------------------
# Charts: values no chart can place


@pytest.mark.parametrize(
    "values",
    [
        [1e308, -1e308],  # their span overflows
        [1e5, math.nextafter(1e5, 2e5)],  # a span below any tick step that adds to them: an endless tick loop
        [0.0, 5e-324],
        [float("nan"), float("inf"), -float("inf")],
        [1e-320, 2e-320],
        [3.0, 3.0],
    ],
)
def test_a_trend_chart_draws_any_values_in_bounded_time(values: list[float]) -> None:
    svg = str(trend_chart("t", "u", [TrendMark(v, "2026-12-05", "tag", f"tip {v}") for v in values]))
    assert svg.startswith("<svg")
    assert svg.endswith("</svg>")
    assert "nan" not in svg.replace("tip nan", "")
    assert "inf" not in svg.replace("tip inf", "").replace("tip -inf", "")


async def test_the_trends_page_survives_extreme_and_nearly_equal_values(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    twin = root / "m2" / "20261207T000000Z-7777aaaa7777"
    shutil.copytree(root / HOSTILE_REL, twin)
    _edit_manifest(
        twin,
        {
            "run_id": "7777aaaa7777",
            "started": "2026-12-07T00:00:00+00:00",
            "finished": "2026-12-07T00:05:00+00:00",
        },
    )
    for run, throughput, tpot in ((root / HOSTILE_REL, 1e5, 1e308), (twin, math.nextafter(1e5, 2e5), -1e308)):
        table = run / "spec_stats.parquet"
        meta = pl.read_parquet_metadata(table)
        frame = pl.read_parquet(table)
        frame = frame.with_columns(
            pl.lit(throughput).alias("output_throughput_per_gpu"), pl.lit(tpot).alias("median_tpot_ms")
        )
        frame.write_parquet(table, metadata=meta)
    async with serving(root) as site:
        answer = await asyncio.wait_for(site.get("/trends"), 20)
        assert answer.status == 200
        assert answer.text.count("<svg") >= 4


# --------------------------------------------------------------------------------------------
# The token


async def test_the_token_redirect_never_leaves_the_site(tmp_path: Path) -> None:
    async with serving(make_root(tmp_path), TOKEN) as site:
        for target, location in (
            (f"//evil.example/x?token={TOKEN}", "/evil.example/x"),
            (f"///evil.example?token={TOKEN}", "/evil.example"),
            (f"http://evil.example/x?token={TOKEN}", "/http://evil.example/x"),
            (f"/%09/evil.example?token={TOKEN}", "/%09/evil.example"),
            (f"/?a=%0d%0aSet-Cookie:%20x=1&token={TOKEN}", "/?a=%0D%0ASet-Cookie%3A+x%3D1"),
        ):
            answer = await site.get(target)
            assert answer.status == 303, target
            assert answer.headers["location"] == location, target
            assert not answer.headers["location"].startswith("//")
            assert TOKEN not in answer.headers["location"]
            assert answer.headers["set-cookie"].startswith(f"alflow_site_token={TOKEN}; ")
            assert "x=1" not in answer.headers["set-cookie"]  # nothing injected
            _secure(answer)
        for target in (f"/\\evil.example?token={TOKEN}", f"/%5cevil.example?token={TOKEN}"):
            assert (await site.get(target)).status == 400, target


async def test_the_token_is_never_shown_logged_or_linked(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    cookie = {"Cookie": f"alflow_site_token={TOKEN}"}
    async with serving(make_root(tmp_path), TOKEN) as site:
        first = await site.get(f"/?text=demo&token={TOKEN}")
        set_cookie = first.headers["set-cookie"]
        assert "HttpOnly" in set_cookie
        assert "SameSite=Strict" in set_cookie
        assert "Path=/" in set_cookie
        for path in ("/?text=demo", "/api/runs", "/trends", f"/runs/{M2}/", "/nope", "/?sort=bad", "/api/x"):
            answer = await site.get(path, headers=cookie)
            assert TOKEN not in answer.text, path
            assert TOKEN not in json.dumps(answer.headers), path
            assert answer.headers["referrer-policy"] == "no-referrer"
        assert (await site.get("/", headers={"Authorization": f"bearer {TOKEN}"})).status == 200  # any case
        assert (await site.get("/", headers={"Authorization": f"BEARER  {TOKEN} "})).status == 200
        assert (await site.get("/", headers={"Authorization": f"Basic {TOKEN}"})).status == 401
        assert (await site.get("/", headers={"Authorization": f"Bearer {TOKEN}x"})).status == 401
        assert (await site.get("/", headers={"Authorization": "Bearer"})).status == 401
        assert (await site.get(f"/?token={TOKEN[:-1]}")).status == 401
        assert (await site.get("/", headers={"Cookie": f"alflow_site_token={TOKEN[:-1]}"})).status == 401
    assert TOKEN not in caplog.text


async def test_a_malformed_request_holding_the_token_does_not_log_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """aiohttp logs a request it cannot parse with its exception, whose text quotes the request line."""
    caplog.set_level(logging.DEBUG)
    async with serving(make_root(tmp_path), TOKEN) as site:
        for target in (
            f"/\xef\xbc\x8f?token={TOKEN}",  # raw UTF-8 in the request line (read as latin-1 by the harness)
            f"/?token={TOKEN}&pad=" + "a" * 9000,  # a request line over aiohttp's limit
        ):
            answer = await site.get(target.encode("latin-1").decode("latin-1"))
            assert answer.status == 400, target[:40]
    assert "Error handling request" in caplog.text  # logged, with the error's kind
    assert TOKEN not in caplog.text


async def test_without_a_token_only_loopback_host_names_are_answered(tmp_path: Path) -> None:
    """DNS rebinding: a page of evil.example re-pointed at 127.0.0.1 sends ``Host: evil.example``."""
    async with serving(make_root(tmp_path)) as site:
        for host in ("127.0.0.1:8765", "localhost:1", "LOCALHOST", "localhost.:2", "[::1]:3", "127.0.0.2"):
            answer = await site.get("/api/runs", host=host)
            assert answer.status == 200, host
        for host in (
            "evil.example",
            "evil.example:8765",
            "127.0.0.1.nip.io:8765",
            "[::ffff:7f00:1]:1",
            "0.0.0.0",
        ):
            answer = await site.get("/api/runs", host=host)
            assert answer.status == 421, host
            assert "evil" not in answer.text
            _secure(answer)
    async with serving(make_root(tmp_path / "t"), TOKEN) as site:  # a token is what guards a shared site
        auth = {"Authorization": f"Bearer {TOKEN}"}
        assert (await site.get("/api/runs", headers=auth, host="results.example:8765")).status == 200


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.255.0.9", True),
        ("::1", True),
        ("[::1]", True),
        ("0:0:0:0:0:0:0:1", True),
        ("localhost", True),
        ("::ffff:127.0.0.1", False),  # refused: a token is asked for (the safe side)
        ("127.1", False),
        ("0x7f000001", False),
        ("2130706433", False),
        ("localhost.", False),
        ("localhost.evil.example", False),
        ("0", False),
        ("0.0.0.0", False),
        ("::", False),
        ("[::]", False),
        ("", False),
        (" 127.0.0.1", False),
    ],
)
def test_only_plain_loopback_hosts_go_without_a_token(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


# --------------------------------------------------------------------------------------------
# Read-only, robust


async def test_no_method_but_get_and_head_and_errors_carry_every_header(tmp_path: Path) -> None:
    async with serving(make_root(tmp_path)) as site:
        for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "PROPFIND", "CONNECT"):
            answer = await site.get(f"/runs/{M2}/files/manifest.json", method=method)
            assert answer.status in (400, 405), method
            _secure(answer)
        for path in ("/nope", f"/runs/{M2}/files/nope", "/?page=x", "/api/runs?page=x", "/runs/%2e%2e/"):
            answer = await site.get(path)
            assert answer.status in (400, 404), path
            _secure(answer)
        for path in ("/?page=%C2%B2", "/api/runs?page=%D9%A1", "/trends?k=%C2%B3", "/api/trends?last=1e3"):
            answer = await site.get(path)
            assert answer.status == 400, path  # not a 500
            _secure(answer)
        reflected = await site.get("/compare?run=%3Cimg%20src=x%20onerror=alert(1)%3E")
        assert reflected.status == 400
        assert "<img" not in reflected.text
        assert "&lt;img src=x onerror=alert(1)&gt;" in reflected.text
        get = await site.get(f"/runs/{M2}/files/spec_stats.parquet")
        head = await site.get(f"/runs/{M2}/files/spec_stats.parquet", method="HEAD")
        assert head.status == get.status == 200
        assert head.body == b""
        assert {k: v for k, v in head.headers.items() if k != "date"} == {
            k: v for k, v in get.headers.items() if k != "date"
        }


async def test_the_site_never_writes_into_the_root_and_survives_a_flood(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    os.mkfifo(root / "m2" / "20261209T000000Z-f1f0f1f0f1f0")  # a FIFO where a run would be: never listed
    os.mkfifo(root / "fifo-flow")
    before = _snapshot(root)
    async with serving(root) as site:
        paths = [
            "/",
            "/api/runs",
            f"/runs/{M2}/",
            f"/runs/{M1}/",
            f"/runs/{M2}/files/manifest.json",
            f"/runs/{M2}/files/spec_stats.parquet",
            f"/compare?run={M2}&run={M1}",
            "/trends",
            "/reference",
            "/runs/m2/20261209T000000Z-f1f0f1f0f1f0/",
        ]
        answers = await asyncio.wait_for(
            asyncio.gather(*(site.get(paths[i % len(paths)]) for i in range(150))), 60
        )
        assert {a.status for a in answers} <= {200, 404}
        assert {a.status for a in answers[:9]} == {200}
        assert site.catalog.get("m2/20261209T000000Z-f1f0f1f0f1f0") is None
        assert (await site.get("/api/runs")).status == 200  # still answering
    assert _snapshot(root) == before
    assert not re.search(r"\.tmp|cache", " ".join(before))


def test_a_file_swapped_for_a_fifo_or_a_symlink_after_the_check_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check and the read are two steps: what the read opens is checked again (no blocking, no symlink)."""

    root = tmp_path / "root"
    root.mkdir()
    (root / "ok.txt").write_text("fine")
    (tmp_path / "outside.txt").write_text("outside")
    (root / "link.txt").symlink_to(tmp_path / "outside.txt")
    assert read_confined(root, root / "ok.txt") == b"fine"
    with _fifo(root / "fifo.txt"):
        monkeypatch.setattr(
            fsutil, "confined", lambda _root, candidate: candidate
        )  # the check passed earlier
        assert read_confined(root, root / "fifo.txt") is None  # returns at once
        assert read_confined(root, root / "link.txt") is None
        assert read_confined(root, root / "gone.txt") is None


async def test_a_long_text_is_served_in_bounded_time_and_a_long_model_id_is_an_unreadable_run(
    tmp_path: Path,
) -> None:
    """A long alphanumeric run once made each index request take 11 s (65,000 characters) or hang (2 million).

    A run's error of two million characters is served (redacted in linear time); a model id longer than an
    identifier may be (the configuration refuses one) is a hand-made folder: listed as unreadable, with the reason.
    """
    root = make_root(tmp_path)
    huge = "m" * 2_000_000
    _edit_manifest(root / M2, {"error": f"boom at https://bob:{SECRET}@example.com/x {huge}"})
    async with serving(root) as site:
        for path in ("/", "/api/runs", f"/runs/{M2}/", f"/api/runs/{M2}", "/trends"):
            started = asyncio.get_running_loop().time()
            answer = await site.get(path)
            assert answer.status == 200, (path, answer.status)
            assert SECRET not in answer.text, path
            assert asyncio.get_running_loop().time() - started < 5.0, path  # quadratic redaction: minutes
    _edit_manifest(root / M2, {"config.model.id": huge})
    async with serving(root) as site:
        listed = await site.get("/api/runs")
        assert "config.model.id is 2,000,000 characters long (at most 1,024)" in listed.text
        assert huge not in listed.text
        for path in (f"/runs/{M2}/", f"/api/runs/{M2}"):
            started = asyncio.get_running_loop().time()
            answer = await site.get(path)
            assert answer.status in (200, 404), (path, answer.status)
            assert huge not in answer.text, path
            assert asyncio.get_running_loop().time() - started < 1.0, path


async def test_a_page_that_builds_too_long_answers_503_and_the_site_answers_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pages are built in worker threads within PAGE_SECONDS: one that hangs leaves the loop, and the site, free."""
    import threading

    from alflow.site import app as site_app

    release = threading.Event()
    real = site_app.index_page

    def stuck(*args: object, **kwargs: object) -> object:
        release.wait(30)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(site_app, "index_page", stuck)
    monkeypatch.setattr(site_app, "PAGE_SECONDS", 0.5)
    root = make_root(tmp_path)
    try:
        async with serving(root) as site:
            slow = asyncio.ensure_future(site.get("/"))
            assert (await site.get(f"/api/runs/{M2}")).status == 200  # answered while the index hangs
            answer = await slow
            assert answer.status == 503, answer.status
            assert "took longer than 0.5 s" in answer.text
            api = await site.get("/api/runs")
            assert api.status == 503
            assert json.loads(api.body) == {
                "error": "this page took longer than 0.5 s to build: try again later"
            }
    finally:
        release.set()


def test_a_root_that_cannot_be_reached_is_said_at_start() -> None:
    """Hostile round 4: ``alflow results serve http://u:pw@127.0.0.1:9/x`` served "0 runs" without a word."""
    import fsspec

    from alflow.site.server import _reachable

    assert not _reachable("http://127.0.0.1:9/x")  # nothing listens there
    assert not _reachable("memory://alflow-nowhere/x")
    fsspec.filesystem("memory").pipe("memory://alflow-somewhere/m2/run/manifest.json", b"{}")
    assert _reachable("memory://alflow-somewhere")
