"""The command lines of the README's and the docs pages' fenced code blocks, as a reader would type them.

The files are README.md and every ``docs/**/*.md`` page (:func:`markdown_files`); in each:

- ``bash`` (also ``sh``, ``shell``) blocks: every line that is not blank and not a comment;
- ``console`` blocks: the lines that start with a ``$ `` prompt (the prompt stripped; other lines are
  output);
- a line ending in ``\\`` continues on the next one (joined with one space);
- a trailing ``# comment`` (a ``#`` after whitespace, outside quotes) is removed;
- ``a && b`` is two commands.

Every bash or console block is runnable: its lines must each have a row in the table of
``tests/integration/test_readme_commands.py``. Blocks in any other language (``text``, ``yaml``, or none: the
layout tree) are illustration, not commands; :data:`PROSE_LANGUAGES` lists the ones a page may have, so that a new
kind of block is noticed rather than skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"

COMMAND_LANGUAGES = frozenset({"bash", "sh", "shell", "console"})
PROSE_LANGUAGES = frozenset({"", "text", "yaml", "json", "toml", "python"})
"""Fenced blocks that hold no command lines (``""``: a block without a language, such as the layout)."""

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")


@dataclass(frozen=True)
class Block:
    """One fenced code block: its language (first word of the info string), first line number, text."""

    language: str
    line: int
    text: str


@dataclass(frozen=True)
class Command:
    """One command line of a block: the text as a reader runs it, and the file and line where it starts."""

    text: str
    line: int
    language: str
    path: Path = README

    @property
    def where(self) -> str:
        """``README.md line 12`` or ``docs/running/prefect.md line 30``, for messages."""
        return f"{_shown(self.path)} line {self.line}"


def _shown(path: Path) -> str:
    """``path`` relative to the checkout when it is inside it."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _closes(line: str, fence: str) -> bool:
    """Whether ``line`` closes a block opened by ``fence`` (the same character, at least as many)."""
    text = line.strip()
    return len(text) >= len(fence) and set(text) == {fence[0]}


def fenced_blocks(markdown: str, source: str = "README") -> list[Block]:
    """Every fenced code block of ``markdown`` (an unclosed fence is an error naming ``source``: the page is broken)."""
    blocks: list[Block] = []
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        fence = match["fence"]
        info = match["info"].strip()
        language = info.split()[0].lower() if info else ""
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not _closes(lines[j], fence):
            body.append(lines[j])
            j += 1
        if j == len(lines):
            raise ValueError(f"{source} line {i + 1}: fenced block never closed")
        blocks.append(Block(language, i + 2, "\n".join(body)))
        i = j + 1
    return blocks


def strip_comment(line: str) -> str:
    """``line`` without a trailing ``# comment`` (a ``#`` at the start or after whitespace, outside quotes)."""
    quote = ""
    escaped = False
    for i, ch in enumerate(line):
        if escaped:
            escaped = False
        elif ch == "\\" and quote != "'":
            escaped = True
        elif quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def split_and(line: str) -> list[str]:
    """``a && b`` as ``[a, b]`` (``&&`` inside quotes is text)."""
    parts: list[str] = []
    quote = ""
    start = 0
    i = 0
    while i < len(line):
        ch = line[i]
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif line.startswith("&&", i):
            parts.append(line[start:i].strip())
            start = i + 2
            i += 1
        i += 1
    parts.append(line[start:].strip())
    return [p for p in parts if p]


def block_commands(block: Block, path: Path = README) -> list[Command]:
    """The command lines of one block of the file ``path`` (none for a block that is not bash or console)."""
    if block.language not in COMMAND_LANGUAGES:
        return []
    console = block.language == "console"
    out: list[Command] = []
    pending: list[str] = []
    pending_line = 0
    for offset, raw in enumerate(block.text.splitlines()):
        line = raw.strip()
        if not pending:
            if console:
                if not raw.startswith("$ "):
                    continue  # output of the command above
                line = raw[2:].strip()
            if not line or line.startswith("#"):
                continue
            pending_line = block.line + offset
        if line.endswith("\\"):
            pending.append(line[:-1].strip())
            continue
        pending.append(line)
        joined = " ".join(p for p in pending if p)
        pending = []
        out.extend(Command(c, pending_line, block.language, path) for c in split_and(strip_comment(joined)))
    if pending:
        raise ValueError(f"{_shown(path)} line {pending_line}: a continued line ends the block")
    return out


def markdown_files(root: Path = ROOT) -> list[Path]:
    """README.md, then every page under ``docs/`` (sorted): the files whose bash and console blocks are commands."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def file_blocks(path: Path) -> list[Block]:
    """Every fenced code block of the Markdown file ``path``."""
    return fenced_blocks(path.read_text(encoding="utf-8"), _shown(path))


def file_commands(path: Path, markdown: str | None = None) -> list[Command]:
    """Every command line of one Markdown file's code blocks, in order (``markdown``: its text, when given)."""
    text = path.read_text(encoding="utf-8") if markdown is None else markdown
    return [c for block in fenced_blocks(text, _shown(path)) for c in block_commands(block, path)]


def readme_commands(markdown: str | None = None) -> list[Command]:
    """Every command line of the README's code blocks, in order (``markdown``: a README's text, when given)."""
    return file_commands(README, markdown)


def doc_commands(paths: list[Path] | None = None) -> list[Command]:
    """Every command line of the README and of every docs page (or of ``paths``), file by file, in order."""
    return [c for path in (markdown_files() if paths is None else paths) for c in file_commands(path)]
