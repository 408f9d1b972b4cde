"""The results site's raw files: sent in parts, never read whole, redacted part by part, from a folder or a URL root.

Over real HTTP on a loopback port (:mod:`tests.unit.test_site`'s harness reads the raw answer, so a chunked body, a
Content-Length and a connection cut part-way are seen as a client sees them).
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

import fsspec
import pytest

from alflow.results.catalog import Catalog
from alflow.results.store import RunWriter
from alflow.site import app as site_app
from alflow.site.app import CHUNK_BYTES
from alflow.site.threads import IO_THREADS
from alflow.util.redact import redact_urls_in_text
from tests.unit.test_site import M2, Site, _start, make_root, serving

pytestmark = pytest.mark.unit

WRITTEN = "2026-12-05T06:03:43.524656+00:00"


def _list_file(run: Path, name: str, data: bytes) -> None:
    """Write ``name`` into the run and list it in the run's manifest."""
    path = run / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["files"][name] = {"written": WRITTEN, "rows": None}
    path.write_text(json.dumps(manifest))
    (run / name).write_bytes(data)


def _big_log(lines: int) -> bytes:
    """A server log of ``lines`` lines, each with a credential in a URL and some non-ASCII text."""
    rows = [
        f"{i:07d} caf\u00e9 GET https://user:pw{i:06d}@metrics.example:8000/metrics?token=tk{i:06d} 200\n"
        for i in range(lines)
    ]
    return "".join(rows).encode()


async def test_a_log_larger_than_a_part_is_streamed_and_redacted_as_a_whole(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    log = _big_log(40_000)
    assert len(log) > 3 * CHUNK_BYTES
    _list_file(root / M2, "server.log", log)
    async with serving(root) as site:
        answer = await site.get(f"/runs/{M2}/files/server.log")
        head = await site.get(f"/runs/{M2}/files/server.log", method="HEAD")
    assert answer.status == 200
    assert answer.headers["transfer-encoding"] == "chunked"  # sent as it is read, not read whole first
    assert answer.headers["content-type"] == "text/plain; charset=utf-8"
    assert answer.body == redact_urls_in_text(log.decode()).encode()
    assert b"pw000123" not in answer.body
    assert b"tk039999" not in answer.body
    assert answer.body.count(b"https://***@metrics.example:8000/metrics?token=***") == 40_000
    assert head.status == 200
    assert head.body == b""


async def test_a_download_larger_than_a_part_is_sent_byte_for_byte_with_its_length(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    data = random.Random(7).randbytes(2 * CHUNK_BYTES + 12_345)
    _list_file(root / M2, "profile.bin", data)
    async with serving(root) as site:
        answer = await site.get(f"/runs/{M2}/files/profile.bin")
        head = await site.get(f"/runs/{M2}/files/profile.bin", method="HEAD")
    assert answer.status == 200
    assert answer.headers["content-length"] == str(len(data))
    assert answer.headers["content-type"] == "application/octet-stream"
    assert answer.headers["content-disposition"] == 'attachment; filename="profile.bin"'
    assert answer.body == data
    assert head.headers["content-length"] == str(len(data))
    assert head.body == b""


async def _raw_get(site: Site, path: str) -> bytes:
    """A keep-alive GET read to the connection's end: only the server cutting it ends the read."""
    reader, writer = await asyncio.open_connection(site.host, site.port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: {site.host}:{site.port}\r\n\r\n".encode())
    await writer.drain()
    raw = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return raw


@pytest.mark.parametrize(
    "error",
    [OSError(5, "Input/output error"), RuntimeError("an fsspec back-end's own error")],
    ids=["read error", "other error"],
)
async def test_a_part_that_fails_cuts_the_connection_instead_of_ending_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    root = make_root(tmp_path)
    _list_file(root / M2, "server.log", _big_log(100))

    def failing(f: BinaryIO, limit: int | None = None) -> Iterator[bytes]:
        yield f.read(1000)
        raise error

    monkeypatch.setattr(site_app, "_chunks", failing)
    async with serving(root) as site:
        raw = await _raw_get(site, f"/runs/{M2}/files/server.log")
        assert (await site.get("/api/runs")).status == 200  # the site goes on
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert b"transfer-encoding: chunked" in head.lower()
    assert body
    assert not body.endswith(b"0\r\n\r\n")  # no last chunk: a client sees a broken download, not a short file
    assert b"HTTP/1.1" not in body  # and no second answer written into the body


async def test_a_download_that_shrank_after_its_size_was_taken_is_cut_not_ended_short(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_root(tmp_path)
    data = random.Random(3).randbytes(CHUNK_BYTES + 5000)
    _list_file(root / M2, "profile.bin", data)
    real_size = site_app._size
    monkeypatch.setattr(site_app, "_size", lambda f: (real_size(f) or 0) + 4096)  # as if it lost 4 KiB since
    async with serving(root) as site:
        raw = await _raw_get(site, f"/runs/{M2}/files/profile.bin")
    head, _, body = raw.partition(b"\r\n\r\n")
    assert f"Content-Length: {len(data) + 4096}".encode() in head
    assert (
        body == data
    )  # what there was, then the cut: the client knows it got 4,096 bytes less than promised


async def test_json_is_redacted_whole_and_a_json_file_too_large_for_that_is_not_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_root(tmp_path)
    escaped = b'{"url": "https:\\/\\/user:pw1234@h.example\\/m?token=tk5678"}'
    _list_file(root / M2, "small.json", escaped)
    _list_file(root / M2, "large.json", escaped + b" " * 2000)
    monkeypatch.setattr(site_app, "MAX_JSON_SHOWN", 1000)
    async with serving(root) as site:
        small = await site.get(f"/runs/{M2}/files/small.json")
        large = await site.get(f"/runs/{M2}/files/large.json")
    assert small.status == 200
    assert json.loads(small.body) == {"url": "https://***@h.example/m?token=***"}
    assert large.status == 413
    assert b"pw1234" not in large.body
    assert "large.json is a JSON file of more than 1,000 bytes: not shown" in large.text


async def test_a_url_root_serves_its_files_in_parts() -> None:
    root = f"memory://site-files-{uuid.uuid4().hex[:8]}"
    log = _big_log(20_000)
    try:
        with RunWriter(
            root, "m2", config={"model": {"id": "llama"}, "k": 3}, started=datetime(2026, 1, 1, tzinfo=UTC)
        ) as w:
            w.write_text("server.log", log.decode())
        catalog = Catalog(root, min_refresh_s=0)
        (entry,) = catalog.entries()
        site, stop, task = await _start(Path("not-used"), catalog=catalog)
        try:
            answer = await site.get(f"/runs/{entry.rel}/files/server.log")
            manifest = await site.get(f"/runs/{entry.rel}/files/manifest.json")
        finally:
            stop.set()
            await asyncio.wait_for(task, 10)
        assert answer.status == 200
        assert answer.body == redact_urls_in_text(log.decode()).encode()
        assert json.loads(manifest.body)["files"]["server.log"]
    finally:
        fsspec.filesystem("memory").rm(root.removeprefix("memory://"), recursive=True)


async def test_many_downloads_at_once_read_in_at_most_the_file_slots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#49: each part of a download was read in a thread of its own, unbounded across downloads: a thousand
    downloads held a thousand threads. Now at most IO_THREADS read at once, the rest wait their turn."""
    root = make_root(tmp_path)
    data = random.Random(5).randbytes(3 * CHUNK_BYTES)
    _list_file(root / M2, "profile.bin", data)
    real_chunks = site_app._chunks
    reading = peak = 0
    lock = threading.Lock()

    def slow_chunks(f: BinaryIO, limit: int | None = None) -> Iterator[bytes]:
        nonlocal reading, peak
        parts = real_chunks(f, limit)
        while True:
            with lock:
                reading += 1
                peak = max(peak, reading)
            try:
                time.sleep(0.02)  # a slow disk: every part's read overlaps the others'
                part = next(parts, None)
            finally:
                with lock:
                    reading -= 1
            if part is None:
                return
            yield part

    monkeypatch.setattr(site_app, "_chunks", slow_chunks)
    async with serving(root) as site:
        answers = await asyncio.gather(
            *(site.get(f"/runs/{M2}/files/profile.bin") for _ in range(3 * IO_THREADS))
        )
    assert [a.status for a in answers] == [200] * (3 * IO_THREADS)
    assert all(len(a.body) == len(data) for a in answers)
    assert IO_THREADS // 2 <= peak <= IO_THREADS  # the downloads did overlap, and no more than the slots


async def test_when_every_file_slot_is_held_by_a_read_that_does_not_end_a_download_answers_503(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review: sixteen reads that never return (a hung network file system) held every slot, and every later
    download waited for ever; now it waits PAGE_SECONDS for a slot, then answers 503."""
    from alflow.site import threads

    monkeypatch.setattr(threads, "PAGE_SECONDS", 0.5)
    root = make_root(tmp_path)
    _list_file(root / M2, "profile.bin", random.Random(6).randbytes(CHUNK_BYTES))
    release = threading.Event()
    started = threading.Semaphore(0)

    def stuck_chunks(f: BinaryIO, limit: int | None = None) -> Iterator[bytes]:
        started.release()
        release.wait(30)
        yield b""

    monkeypatch.setattr(site_app, "_chunks", stuck_chunks)
    async with serving(root) as site:
        held = [asyncio.create_task(site.get(f"/runs/{M2}/files/profile.bin")) for _ in range(IO_THREADS)]
        for _ in range(IO_THREADS):
            assert await asyncio.to_thread(started.acquire, True, 10)
        answer = await site.get(f"/runs/{M2}/files/manifest.json")
        release.set()
        await asyncio.gather(*held, return_exceptions=True)
    assert answer.status == 503, answer.text
