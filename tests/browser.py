"""Headless Chromium for the browser tests: finding the binary, and reading its PNG screenshots."""

from __future__ import annotations

import os
import shutil
import struct
import zlib
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"


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
