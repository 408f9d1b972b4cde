"""Headless Chromium for the browser tests: finding the binary, and reading its PNG screenshots."""

from __future__ import annotations

import base64
import json
import os
import shutil
import struct
import subprocess
import time
import urllib.request
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from websockets.sync.client import ClientConnection, connect

CHROMIUM = "/usr/bin/chromium"
HEADLESS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
)
"""Chromium's flags in every test: headless, no sandbox (root in CI), nothing fetched or synced on its own."""


def chromium_binary(what: str) -> str:
    """The Chromium binary; missing, a failure under CI (``what`` may not be skipped there), else a skip."""
    path = CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium")
    if path:
        return path
    message = "chromium is missing: install Debian's chromium package (bash scripts/ci-services.sh does)"
    if os.environ.get("CI"):
        pytest.fail(f"{message}; CI is set, so {what} may not be skipped")
    pytest.skip(message)


def decode_png(data: bytes) -> tuple[int, int, list[tuple[int, int, int]]]:
    """Width, height and the RGB pixels of an 8-bit RGB or RGBA PNG (no Pillow needed)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG file"
    pos, idat = 8, []
    width = height = ctype = depth = 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, ctype = struct.unpack(">IIBB", body[:10])
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    assert depth == 8, f"unexpected PNG bit depth {depth}"
    assert ctype in (2, 6), f"unexpected PNG colour type {ctype}"
    bpp = 3 if ctype == 2 else 4
    stride = width * bpp
    raw = zlib.decompress(b"".join(idat))
    prev = bytearray(stride)
    pixels: list[tuple[int, int, int]] = []
    i = 0
    for _ in range(height):
        kind_f = raw[i]
        line = bytearray(raw[i + 1 : i + 1 + stride])
        i += 1 + stride
        if kind_f == 1:
            for x in range(bpp, stride):
                line[x] = (line[x] + line[x - bpp]) & 255
        elif kind_f == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev, strict=True))
        elif kind_f == 3:
            for x in range(stride):
                left = line[x - bpp] if x >= bpp else 0
                line[x] = (line[x] + (left + prev[x]) // 2) & 255
        elif kind_f == 4:
            for x in range(stride):
                a = line[x - bpp] if x >= bpp else 0
                b = prev[x]
                c = prev[x - bpp] if x >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        pixels.extend(tuple(line[x : x + 3]) for x in range(0, stride, bpp))  # type: ignore[misc]
        prev = line
    return width, height, pixels


class Page:
    """One Chromium tab driven over the DevTools protocol (a websocket): navigate, evaluate, screenshot."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.calls = 0

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.calls += 1
        mine = self.calls
        self.ws.send(json.dumps({"id": mine, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv(timeout=60))
            if message.get("id") == mine:
                assert "error" not in message, f"{method}: {message['error']}"
                result: dict[str, Any] = message["result"]
                return result

    def js(self, expression: str) -> Any:
        """The JSON value of ``expression`` in the page (an exception in it fails the test)."""
        out = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in out, out["exceptionDetails"]
        return out["result"].get("value")

    def wait_for(self, expression: str, what: str, timeout_s: float = 60.0) -> Any:
        """Poll ``expression`` until it is truthy; its value."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = self.js(expression)
            if value:
                return value
            time.sleep(0.5)
        body = self.js("document.body ? document.body.innerText.slice(0, 1500) : ''")
        raise AssertionError(f"{what} within {timeout_s:.0f} s; the page shows:\n{body}")

    def viewport(self, height: int, width: int = 1400) -> None:
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )

    def screenshot(self) -> bytes:
        return base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])


@contextmanager
def chromium(profile: Path, what: str, width: int = 1400) -> Iterator[Page]:
    """Headless Chromium with a DevTools port from the OS; its first tab (``what``: the test, named when Chromium is missing)."""
    port_file = profile / "DevToolsActivePort"
    port_file.unlink(missing_ok=True)  # a profile used before holds the port of a Chromium that is gone
    proc = subprocess.Popen(
        [
            chromium_binary(what),
            *HEADLESS,
            f"--user-data-dir={profile}",
            "--remote-debugging-port=0",
            f"--window-size={width},1000",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            assert proc.poll() is None, f"chromium exited {proc.returncode}"
            assert time.monotonic() < deadline, "chromium opened no DevTools port within 60 s"
            time.sleep(0.1)
        port = port_file.read_text().split()[0]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json", timeout=10) as answer:
            targets = json.load(answer)
        tab = next(t for t in targets if t["type"] == "page")
        with connect(tab["webSocketDebuggerUrl"], max_size=2**28, open_timeout=30) as ws:
            page = Page(ws)
            page.call("Page.enable")
            yield page
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
