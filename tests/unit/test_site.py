"""The results site's handlers over a real loopback server (port 0): confinement, escaping, token, methods, API.

Requests are written by hand on a socket, so a path reaches the server exactly as typed (no client normalizes
``..`` or percent-escapes away).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from alflow.cli.root import main
from alflow.errors import InvalidInputError
from alflow.results.catalog import Catalog
from alflow.site.app import make_app
from alflow.site.guard import check_bind, is_loopback
from alflow.site.server import run_site

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "4f9de94"
M2 = "m2/20261205T060247Z-99135e4f5ce3"
M1 = "m1/20261205T060245Z-537765be2c4d"
HOSTILE = "<script>alert(1)</script> [x](javascript:alert(1))"
HOSTILE_REL = "m2/20261206T000000Z-0badc0ffee00"
TOKEN = "s3cret-token-value"


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode()


@dataclass
class Site:
    host: str
    port: int
    root: Path
    catalog: Catalog

    async def get(
        self,
        path: str,
        *,
        method: str = "GET",
        headers: dict[str, str] | None = None,
        host: str | None = None,
    ) -> Answer:
        """One request over a fresh connection; ``host``: the Host header (default: the server's own address)."""
        reader, writer = await asyncio.open_connection(self.host, self.port)
        lines = [
            f"{method} {path} HTTP/1.1",
            f"Host: {host or f'{self.host}:{self.port}'}",
            "Connection: close",
        ]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        await writer.drain()
        raw = await reader.read()
        writer.close()
        await writer.wait_closed()
        head, _, body = raw.partition(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        hdrs: dict[str, str] = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            hdrs[name.strip().lower()] = (
                hdrs[name.strip().lower()] + ", " if name.strip().lower() in hdrs else ""
            ) + value.strip()
        if hdrs.get("transfer-encoding") == "chunked":
            body = _dechunk(body)
        return Answer(int(status_line.split()[1]), hdrs, body)


def _dechunk(data: bytes) -> bytes:
    out = b""
    while data:
        size_text, _, rest = data.partition(b"\r\n")
        size = int(size_text, 16)
        if size == 0:
            break
        out += rest[:size]
        data = rest[size + 2 :]
    return out


def make_root(tmp_path: Path) -> Path:
    root = tmp_path / "results"
    shutil.copytree(FIXTURES, root)
    hostile = root / HOSTILE_REL
    shutil.copytree(root / M2, hostile)
    manifest = json.loads((hostile / "manifest.json").read_text())
    manifest["config"]["model"]["id"] = HOSTILE
    manifest["started"] = "2026-12-06T00:00:00+00:00"
    manifest["finished"] = (
        "2026-12-06T00:05:00+00:00"  # after its start (a run that ends before it starts is none)
    )
    manifest["run_id"] = "0badc0ffee00"
    (hostile / "manifest.json").write_text(json.dumps(manifest))
    (root / M2 / "unlisted.txt").write_text("not in the manifest")
    (tmp_path / "outside.json").write_text('{"secret": "outside the root"}')
    return root


async def _start(
    root: Path, token: str | None = None, refresh_s: float = 0, catalog: Catalog | None = None
) -> tuple[Site, asyncio.Event, asyncio.Task[None]]:
    """The site over ``root`` (or over ``catalog``, e.g. of a URL root) on a free loopback port."""
    catalog = catalog or Catalog(str(root), min_refresh_s=0)
    app = make_app(catalog, token=token, refresh_s=refresh_s)
    urls: list[str] = []
    stop = asyncio.Event()
    task = asyncio.create_task(run_site(app, "127.0.0.1", 0, urls.append, stop, signals=False))
    for _ in range(200):
        if urls or task.done():
            break
        await asyncio.sleep(0.01)
    host, port = urls[0].split("//")[1].rstrip("/").rsplit(":", 1)
    return Site(host, int(port), root, catalog), stop, task


@contextlib.asynccontextmanager
async def serving(root: Path, token: str | None = None) -> AsyncIterator[Site]:
    """The site over ``root`` for the ``async with`` block, stopped after it."""
    site, stop, task = await _start(root, token)
    try:
        yield site
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


@pytest.fixture
async def site(tmp_path: Path) -> AsyncIterator[Site]:
    s, stop, task = await _start(make_root(tmp_path))
    yield s
    stop.set()
    await task


@pytest.fixture
async def token_site(tmp_path: Path) -> AsyncIterator[Site]:
    s, stop, task = await _start(make_root(tmp_path), TOKEN)
    yield s
    stop.set()
    await task


SECURITY_HEADERS = {
    "content-security-policy": "default-src 'none'; style-src 'unsafe-inline'; img-src data:",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}


def _secure(answer: Answer) -> None:
    for name, value in SECURITY_HEADERS.items():
        assert answer.headers.get(name) == value, (name, answer.headers)


@pytest.mark.parametrize(
    "path",
    [
        "/runs/m2/..%2f..%2f..%2fetc/passwd",
        "/runs/%2e%2e/%2e%2e/",
        "/runs/%2E%2E/x/",
        f"/runs/{M2}/files/..%2fmanifest.json",
        f"/runs/{M2}/files/%2e%2e%2f%2e%2e%2fetc%2fpasswd",
        f"/runs/{M2}/files/summary.json%00.txt",
        "/runs/m2/../../etc/passwd",
        f"/runs/{M2}/files/..",
        "/runs/m2/..%5c..%5cetc/passwd",
        "/%2e%2e/%2e%2e/etc/passwd",
    ],
)
async def test_traversal_attempts_are_refused_without_echoing_the_path(site: Site, path: str) -> None:
    answer = await site.get(path)
    assert answer.status in (400, 404), (path, answer.status)
    assert "passwd" not in answer.text
    assert "root:" not in answer.text
    _secure(answer)


@pytest.mark.parametrize(
    "path",
    [
        "//etc/passwd",
        "/runs//etc/passwd/",
        f"/runs/{M2}/files/unlisted.txt",  # exists, but the manifest does not list it
        f"/runs/{M2}/files/%2Fetc%2Fpasswd",
        "/runs/m2/20261205T060247Z-nope/",
        "/runs/etc/passwd/",
        f"/runs/{M2}/files/",
    ],
)
async def test_names_outside_the_catalogue_or_the_manifest_are_not_found(site: Site, path: str) -> None:
    answer = await site.get(path)
    assert answer.status in (400, 404), (path, answer.status)
    assert "not in the manifest" not in answer.text
    assert "passwd" not in answer.text


async def test_a_listed_file_that_is_a_symlink_out_of_the_root_is_refused(site: Site, tmp_path: Path) -> None:
    target = site.root / M2 / "summary.json"
    assert (await site.get(f"/runs/{M2}/files/summary.json")).status == 200
    target.unlink()
    target.symlink_to(tmp_path / "outside.json")
    answer = await site.get(f"/runs/{M2}/files/summary.json")
    assert answer.status == 404
    assert "outside the root" not in answer.text


async def test_a_symlinked_run_directory_is_listed_unreadable_and_never_read(
    site: Site, tmp_path: Path
) -> None:
    """Not followed (it may point out of the root); listed with the reason, not left out without a word (round 7)."""
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(site.root / M2, elsewhere)
    (site.root / "m2" / "20270101T000000Z-5y5y5y5y5y5y").symlink_to(elsewhere, target_is_directory=True)
    site.catalog.refresh(force=True)
    entry = site.catalog.get("m2/20270101T000000Z-5y5y5y5y5y5y")
    assert entry is not None
    assert entry.status == "unreadable"
    assert (await site.get("/runs/m2/20270101T000000Z-5y5y5y5y5y5y/files/summary.json")).status == 404
    assert (await site.get("/runs/m2/20270101T000000Z-5y5y5y5y5y5y/")).status == 404


async def test_raw_files_have_their_content_types_and_parquet_downloads(site: Site) -> None:
    manifest = await site.get(f"/runs/{M2}/files/manifest.json")
    assert manifest.status == 200
    assert manifest.headers["content-type"].startswith("application/json")
    assert json.loads(manifest.body)["run_id"] == "99135e4f5ce3"
    parquet = await site.get(f"/runs/{M2}/files/spec_stats.parquet")
    assert parquet.status == 200
    assert parquet.headers["content-type"] == "application/vnd.apache.parquet"
    assert parquet.headers["content-disposition"] == 'attachment; filename="spec_stats.parquet"'
    assert parquet.body[:4] == b"PAR1"
    _secure(parquet)


async def test_credentials_in_a_served_file_are_redacted(site: Site) -> None:
    path = site.root / M2 / "summary.json"
    data = json.loads(path.read_text())
    data["scheme"] = "see https://user:hunter2@example.com/x?token=abc123"
    path.write_text(json.dumps(data))
    answer = await site.get(f"/runs/{M2}/files/summary.json")
    assert "hunter2" not in answer.text
    assert "abc123" not in answer.text


async def test_hostile_names_are_escaped_on_every_page(site: Site) -> None:
    for path in (
        "/",
        "/?text=script",
        "/trends",
        f"/compare?run={HOSTILE_REL}&run={M2}",
        f"/runs/{HOSTILE_REL}/",
    ):
        answer = await site.get(path)
        assert answer.status == 200, path
        assert "<script>" not in answer.text, path
        assert "&lt;script&gt;" in answer.text, path
    bad = await site.get("/?sort=%3Cscript%3E")
    assert bad.status == 400
    assert "<script>" not in bad.text
    assert "query parameter sort &#39;&lt;script&gt;&#39;: must be one of date, flow" in bad.text


async def test_post_and_other_methods_are_405_and_head_works(site: Site) -> None:
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        answer = await site.get("/", method=method)
        assert answer.status == 405, method
        assert answer.headers["allow"] == "GET, HEAD"
        _secure(answer)
    assert (await site.get("/", method="HEAD")).status == 200


async def test_the_index_filters_sorts_and_pages_and_its_api_holds_the_same_rows(site: Site) -> None:
    page = await site.get("/?flow=m1&sort=date&order=asc")
    api = await site.get("/api/runs?flow=m1&sort=date&order=asc")
    linked = re.findall(
        r'<tr class="run">\s*<td><input type="checkbox" name="run" value="([^"]+)"', page.text
    )
    rows = json.loads(api.body)["rows"]
    assert linked == [r["rel"] for r in rows] == ["m1/20261205T060242Z-be4a3070b5da", M1]
    everything = json.loads((await site.get("/api/runs")).body)
    assert everything["total"] == everything["matching"] == 6
    assert everything["rows"][0]["rel"] == HOSTILE_REL  # newest first
    failed = json.loads((await site.get("/api/runs?outcome=failed")).body)
    assert [r["rel"] for r in failed["rows"]] == [M1]
    text = json.loads((await site.get("/api/runs?text=SWEEP")).body)
    assert [r["flow"] for r in text["rows"]] == ["sweep"]
    bad = await site.get("/api/runs?page=0")
    assert bad.status == 400
    assert json.loads(bad.body) == {"error": "query parameter page '0': must be an integer in [1, 1000000]"}


async def test_the_run_api_and_page(site: Site) -> None:
    api = json.loads((await site.get(f"/api/runs/{M2}")).body)
    entry = site.catalog.get(M2)
    assert entry is not None
    assert api["rel"] == M2
    assert "run_dir" not in api  # the server's own path stays on the server
    assert [p["concurrency"] for p in api["points"]] == [p.concurrency for p in entry.points]
    page = await site.get(f"/runs/{M2}/")  # the fixture has no report.html: rendered on the fly
    assert page.status == 200
    assert "M2 synthetic benchmark" in page.text
    redirect = await site.get(f"/runs/{M2}")
    assert redirect.status == 302
    assert redirect.headers["location"] == f"/runs/{M2}/"


async def test_compare_page_and_api(site: Site) -> None:
    page = await site.get(f"/compare?run={M2}&run={M1}")
    assert page.status == 200
    assert "Comparison of 2 runs" in page.text
    api = json.loads((await site.get(f"/api/compare?run={M2}&run={M1}")).body)
    assert api["runs"] == [M2, M1]
    assert api["report"]["title"] == "Comparison of 2 runs"
    assert api["report"]["sections"][0]["tables"][0]["rows"][0][1] == "m2"
    assert (await site.get("/compare")).status == 400
    assert (await site.get("/api/compare?run=m2/nope")).status == 400


async def test_trends_page_and_api_show_the_same_series(site: Site) -> None:
    page = await site.get("/trends?k=3")
    api = json.loads((await site.get("/api/trends?k=3")).body)
    labels = re.findall(r'<section class="series">\s*<h2>([^<]+?)(?: <span|</h2>)', page.text)
    assert labels == [s["label"].replace("<", "&lt;").replace(">", "&gt;") for s in api["series"]]
    assert len(api["series"]) == 6  # two models x three concurrencies
    assert page.text.count("<svg") == 4 * 6
    assert (await site.get("/trends?k=x")).status == 400


async def test_reference_page_lists_m0_history(site: Site) -> None:
    page = await site.get("/reference")
    assert page.status == 200
    api = json.loads((await site.get("/api/reference")).body)
    assert len(api["histories"]) == 3  # the demo's M0: K = 1..3
    assert all(len(h["calibrations"]) == 1 for h in api["histories"])
    assert api["histories"][0]["key"] in page.text


async def test_the_token_is_required_accepted_and_moved_into_a_cookie(
    token_site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    for path in ("/", "/api/runs", f"/runs/{M2}/files/manifest.json"):
        denied = await token_site.get(path)
        assert denied.status == 401
        _secure(denied)
    assert (await token_site.get("/", headers={"Authorization": "Bearer wrong"})).status == 401
    assert (await token_site.get("/", headers={"Authorization": f"Bearer {TOKEN}"})).status == 200
    assert (await token_site.get("/?token=wrong")).status == 401
    first = await token_site.get(f"/api/runs?flow=m1&token={TOKEN}")
    assert first.status == 303
    assert first.headers["location"] == "/api/runs?flow=m1"
    cookie = first.headers["set-cookie"]
    assert "HttpOnly" in cookie
    assert "SameSite=Strict" in cookie
    assert "Secure" not in cookie  # plain HTTP: a Secure cookie would never come back
    behind_tls = await token_site.get(f"/?token={TOKEN}", headers={"X-Forwarded-Proto": "https"})
    assert "; Secure" in behind_tls.headers["set-cookie"]
    value = cookie.split(";")[0]
    assert (await token_site.get("/api/runs?flow=m1", headers={"Cookie": value})).status == 200
    assert (await token_site.get("/", headers={"Cookie": "alflow_site_token=nope"})).status == 401
    off_site = await token_site.get(f"//evil.example/x?token={TOKEN}")
    assert off_site.status == 303
    assert off_site.headers["location"] == "/evil.example/x"  # a path on this site, never //host
    assert TOKEN not in caplog.text  # the access log leaves the query out


def test_loopback_hosts() -> None:
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "LOCALHOST"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.1", "example.com", ""))


def test_a_non_loopback_host_needs_a_set_token_env(monkeypatch: pytest.MonkeyPatch) -> None:
    assert check_bind("127.0.0.1", None) is None
    with pytest.raises(InvalidInputError, match=r"--host '0\.0\.0\.0' is not loopback"):
        check_bind("0.0.0.0", None)
    monkeypatch.delenv("ALFLOW_SITE_TEST_TOKEN", raising=False)
    with pytest.raises(InvalidInputError, match="not set or empty"):
        check_bind("0.0.0.0", "ALFLOW_SITE_TEST_TOKEN")
    monkeypatch.setenv("ALFLOW_SITE_TEST_TOKEN", "  ")
    with pytest.raises(InvalidInputError, match="not set or empty"):
        check_bind("0.0.0.0", "ALFLOW_SITE_TEST_TOKEN")
    with pytest.raises(InvalidInputError, match="must be an environment variable name"):
        check_bind("0.0.0.0", "A-B")
    monkeypatch.setenv("ALFLOW_SITE_TEST_TOKEN", "tok-0123456789a")
    with pytest.raises(InvalidInputError) as short:
        check_bind("0.0.0.0", "ALFLOW_SITE_TEST_TOKEN")
    assert str(short.value) == (
        "--token-env ALFLOW_SITE_TEST_TOKEN: the token has 15 characters; at least 16 are needed "
        "(a random one: openssl rand -hex 16)"
    )
    assert "tok-0123456789a" not in str(short.value)
    monkeypatch.setenv("ALFLOW_SITE_TEST_TOKEN", "tok-0123456789ab")
    assert check_bind("0.0.0.0", "ALFLOW_SITE_TEST_TOKEN") == "tok-0123456789ab"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--host", "0.0.0.0"],
            "error: --host '0.0.0.0' is not loopback (127.0.0.0/8, ::1, localhost): give --token-env NAME",
        ),
        (
            ["--host", "10.1.2.3", "--token-env", "ALFLOW_SITE_UNSET"],
            "error: --token-env ALFLOW_SITE_UNSET: the environment variable is not set or empty",
        ),
        (["--port", "70000"], "error: --port 70000: must be an integer in [0, 65,535]"),
    ],
)
def test_the_command_refuses_before_binding(
    args: list[str],
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ALFLOW_SITE_UNSET", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        main(["results", "serve", str(tmp_path), *args])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(message), err
    assert len(err.splitlines()) == 1


def test_the_command_refuses_a_root_that_is_not_a_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["results", "serve", str(tmp_path / "missing"), "--no-cache"])
    assert exit_info.value.code == 2
    assert "not a folder" in capsys.readouterr().err


async def test_the_site_refreshes_its_catalogue_in_the_background(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    s, stop, task = await _start(root, refresh_s=0.05)
    try:
        assert json.loads((await s.get("/api/runs")).body)["total"] == 6
        shutil.copytree(root / M2, root / "m2" / "20261208T000000Z-abcdefabcdef")
        shutil.rmtree(root / M1)
        for _ in range(100):
            await asyncio.sleep(0.05)
            rels = [r["rel"] for r in json.loads((await s.get("/api/runs")).body)["rows"]]
            if "m2/20261208T000000Z-abcdefabcdef" in rels and M1 not in rels:
                break
        assert "m2/20261208T000000Z-abcdefabcdef" in rels
        assert M1 not in rels
        assert (await s.get(f"/runs/{M1}/")).status == 404
    finally:
        stop.set()
        await task
