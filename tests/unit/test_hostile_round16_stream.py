"""Hostile round 16 of issue #49: a text redacted in parts never splits what one rule must see whole.

The site streams a run's text files in parts of 1 MiB. A line longer than a part was cut at its last space, so
``Authorization: Bearer`` at the end of one part and its token at the start of the next were each redacted alone,
and the token was served. A part now ends only at a line's end whose next line starts afresh (not indented: a
YAML block's lines continue the key above them), never inside a private key block.
"""

from __future__ import annotations

import contextlib
import time

import pytest

from alflow.site.app import CHUNK_BYTES
from alflow.util.redact import RedactionError, redact_text_stream, redact_urls_in_text

pytestmark = pytest.mark.unit


def _streamed(text: bytes, size: int = CHUNK_BYTES, max_held: int | None = None) -> bytes:
    parts = [text[i : i + size] for i in range(0, len(text), size)]
    held = {} if max_held is None else {"max_held": max_held}
    return b"".join(redact_text_stream(parts, **held))


@pytest.mark.parametrize(
    "tail",
    [
        b"Authorization: Bearer R16STRADDLE0123456789",
        b"token=R16STRADDLE0123456789",
        b"https://u:R16STRADDLE01@h/",
    ],
)
def test_a_credential_straddling_a_part_of_a_long_line_is_redacted(tail: bytes) -> None:
    for shift in (0, 1, 7, len(tail) // 2, len(tail) - 1, len(tail)):  # the part's end across the credential
        head = b"w " * ((CHUNK_BYTES - shift) // 2) + b"x" * ((CHUNK_BYTES - shift) % 2)
        out = _streamed(head + tail + b" more\nnext line\n")
        assert b"R16STRADDLE01" not in out, shift
        assert out.endswith(b" more\nnext line\n")


def test_a_yaml_block_and_a_private_key_block_are_never_split() -> None:
    text = (
        b"a: 1\npassword: |\n  R16BLOCKLINE1\n  R16BLOCKLINE2\nb: 2\n"
        b"-----BEGIN RSA PRIVATE KEY-----\nR16KEYBODY1\nR16KEYBODY2\n-----END RSA PRIVATE KEY-----\nc: 3\n"
    )
    whole = redact_urls_in_text(text.decode()).encode()
    for secret in (b"R16KEYBODY1", b"R16KEYBODY2"):
        assert secret not in whole
    for size in range(1, len(text) + 1):
        assert _streamed(text, size) == whole, size


def test_a_text_whose_every_line_is_indented_is_cut_at_any_lines_end_past_half_the_bound() -> None:
    text = b"  indented line\n" * 20_000  # 320 kB, no line starts afresh
    out = _streamed(text, size=4096, max_held=64 * 1024)
    assert out == text


def test_a_line_longer_than_the_bound_is_refused_not_cut_at_a_space() -> None:
    with pytest.raises(
        RedactionError, match=r"^2,000 bytes without a line's end to cut at: more than the 1,999"
    ):
        _streamed(b"a b " * 500, size=100, max_held=1999)


@pytest.mark.parametrize("line", [b"\n ", b"\na", b"-----BEGIN \n", b"\n\t-----END x\n"])
def test_finding_a_cut_is_linear(line: bytes) -> None:
    """Short lines by the million (each a place a cut is looked for) stream in a time linear in the text."""
    times = []
    for mib in (2, 4):
        text = line * ((mib << 20) // len(line))
        start = time.perf_counter()
        with contextlib.suppress(
            RedactionError
        ):  # a key block with no end in 8 MiB is refused: timed all the same
            _streamed(text)
        times.append(time.perf_counter() - start)
    assert times[1] < 3 * times[0] + 0.2, times


@pytest.mark.parametrize(
    "line",
    [b"log: -----BEGIN CERTIFICATE----- (truncated)\n", b"-----BEGIN PUBLIC KEY-----\n", b"a -----BEGIN x\n"],
)
def test_an_armour_that_is_no_private_key_never_stops_the_cuts(line: bytes) -> None:
    """Review of round 17: any ``-----BEGIN`` without an END held every later line, and past 8 MiB the site cut the
    download; only a private key's block holds the cut, and only as far as the key rule reads."""
    text = line + b"ordinary line\n" * 700_000  # 9.8 MB
    assert _streamed(text) == text


def test_a_private_key_block_holds_the_cut_only_as_far_as_the_key_rule_reads() -> None:
    text = b"x\n-----BEGIN RSA PRIVATE KEY-----\n" + b"MIIEaaaa\n" * 20_000 + b"ordinary\n" * 1_000_000
    whole = redact_urls_in_text(text.decode()).encode()
    assert _streamed(text) == whole  # 180 kB of block: the rule redacts its first 64 KiB, in parts as whole
