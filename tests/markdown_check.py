"""Render Markdown as a reader's renderer does (markdown-it-py, CommonMark plus tables) and check it is inert."""

from __future__ import annotations

import html
import re

from markdown_it import MarkdownIt

_RENDERER = MarkdownIt("commonmark").enable("table").enable("strikethrough")
HOSTILE = (
    "<script>alert(1)</script>",
    "[x](javascript:alert(1))",
    "![i](http://evil/x.png)",
    "a\nb",
    "[/]",
    "[bold]x[/bold]",
    "|",
)
"""Names that must come out as typed: HTML, a link, an image, a newline, rich markup, a table pipe."""


def md_html(text: str) -> str:
    """The HTML a Markdown renderer makes of ``text``."""
    return _RENDERER.render(text)


def md_text(text: str) -> str:
    """The visible text of ``text`` rendered (tags dropped, entities decoded, white space collapsed)."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", md_html(text))).split())


def assert_inert(text: str) -> None:
    """No script, link, image or raw HTML comes out of rendering ``text``."""
    rendered = md_html(text).lower()
    for forbidden in ("<script", "<a ", "<a>", "<img", "href=", "src=", "<iframe", "<svg"):
        assert forbidden not in rendered, (forbidden, rendered)
