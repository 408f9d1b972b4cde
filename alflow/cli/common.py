"""What every command group shares: the consoles, the one error exit, JSON output, option checks.

One error style for the whole command line: an alflow input error is one line on stderr
(``error: ...``, URLs without credentials, given secrets masked) and exit code 2; a command that
measured something bad (a failed gate, failed requests) exits 1 with its own message.
"""

from __future__ import annotations

import codecs
import contextlib
import functools
import io
import math
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ParamSpec, TypeVar

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape as rich_escape
from rich.table import Table

from alflow.errors import AlflowError, InvalidInputError
from alflow.reports.markdown import escape_controls
from alflow.util import jsonutil
from alflow.util.fsutil import atomic_write_bytes
from alflow.util.names import check_output_file, shown
from alflow.util.redact import MAX_LINE_CHARS, cut_middle, redact_urls_in_text

P = ParamSpec("P")
R = TypeVar("R")

console = Console(width=None if sys.stdout.isatty() else 200)
"""Human-readable output on stdout (a fixed width when piped, so lines do not wrap at 80 columns)."""
err_console = Console(stderr=True, soft_wrap=True)
"""Errors, warnings and progress on stderr."""

JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")]


MAX_ERROR_CHARS = MAX_LINE_CHARS
"""The longest line of an error: an input of 100,000 characters is shown by its start and end, the length cut said."""


def tolerant_output() -> None:
    r"""Make stdout and stderr write what their encoding cannot encode as backslash escapes (once, at start).

    A terminal or ``PYTHONIOENCODING`` of ASCII or Latin-1 cannot encode a model id ``modèle-日本``: the text is then
    written as ``mod\xe8le-\u65e5\u672c`` rather than raising half-way through a report (round 17: the error was
    blamed on the run). A stream that cannot be reconfigured (not a text file) is left as it is.
    """
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            with contextlib.suppress(ValueError, OSError, io.UnsupportedOperation):
                reconfigure(errors="backslashreplace")


def unencodable_output_line(exc: UnicodeEncodeError) -> str | None:
    """The one line for text stdout or stderr cannot encode (naming the stream and its encoding), else None.

    None: the failed encoding is not that of a standard stream that can fail (one with ``errors="strict"``): a
    file's, a request's, some other error.
    """
    for name, stream in (("stdout", sys.stdout), ("stderr", sys.stderr)):
        encoding = getattr(stream, "encoding", None)
        strict = getattr(stream, "errors", "strict") in ("strict", None)
        if encoding and strict and _codec_name(encoding) == _codec_name(exc.encoding):
            return (
                f"{name}'s encoding ({encoding}) cannot encode the text to print ({exc.reason}: "
                f"{exc.object[exc.start : exc.end]!a}): write it to a file (-o FILE where the command has it) or set "
                "PYTHONIOENCODING=utf-8"
            )
    return None


def _codec_name(encoding: str) -> str:
    """The codec's canonical name (``ASCII`` and ``646`` are ``ascii``); the text lower-cased if it is no codec."""
    try:
        return codecs.lookup(encoding).name
    except LookupError:
        return encoding.lower()


def say(text: str) -> None:
    """``text`` on stdout: no markup, no highlighting, control characters as visible escapes (newline, tab kept).

    Every line alflow prints through here (``wrote PATH``, ``Results: ROOT``) may hold a path or a name it was
    given: an ESC or RLO in a run folder's name must not drive the terminal (hostile round 18, F5).
    """
    console.print(escape_controls(text), highlight=False, markup=False)


def say_err(text: str) -> None:
    """``text`` on stderr, as :func:`say` writes it (control characters as visible escapes)."""
    err_console.print(escape_controls(text), highlight=False, markup=False)


def markup_safe(value: object) -> str:
    """``value`` for a Rich markup line: control characters as visible escapes, then markup escaped."""
    return rich_escape(escape_controls(value))


def new_table(title: str, columns: Iterable[str], **options: Any) -> Table:
    """A table titled ``title`` with ``columns``, each added with ``options`` (``justify``, ``overflow``)."""
    table = Table(title=title)
    for col in columns:
        table.add_column(col, **options)
    return table


def error_line(message: str, secrets: tuple[str | None, ...] = ()) -> str:
    """``error: MESSAGE``, each of its lines bounded.

    URLs lose their credentials, ``secrets`` values are masked, control characters (an escape sequence in a name)
    are written as visible escapes, and a line over :data:`MAX_ERROR_CHARS` is cut. A message of several lines (a
    server log's tail) keeps them, each after ``  | ``, so none can pass for an ``error:`` line of its own.
    """
    text = escape_controls(redact_urls_in_text(message, [s for s in secrets if s]), keep="\n")
    return "error: " + "\n  | ".join(cut_middle(line) for line in text.split("\n"))


def fail(message: str, code: int = 2, secrets: tuple[str | None, ...] = ()) -> typer.Exit:
    """Print :func:`error_line` on stderr and return the ``typer.Exit`` to raise (``code`` 2: bad input)."""
    say_err(error_line(message, secrets))
    return typer.Exit(code=code)


def warn(message: str) -> None:
    """``warning: MESSAGE`` on stderr."""
    say_err(f"warning: {redact_urls_in_text(message)}")


def handle_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn alflow's errors raised by a command into :func:`fail` (one line on stderr, exit code 2)."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except AlflowError as exc:
            raise fail(str(exc)) from None

    return wrapper


def checked_out_file(value: str | os.PathLike[str], what: str) -> Path:
    """An option naming a file to write (no ``-``), checked before any work: the path to write, ``~`` expanded.

    :func:`~alflow.util.names.check_output_file`: a FIFO would block the write for ever; a folder, a device or a
    path under a regular file would fail only after the work. Raises :class:`InvalidInputError` naming ``what``.
    """
    try:
        return check_output_file(os.fspath(value), what=what, stdout=False)
    except ValueError as exc:
        raise InvalidInputError(str(exc)) from None


def write_out_file(path: Path, data: bytes, what: str, *, kept: str = "") -> None:
    """Write ``data`` to ``path`` (checked by :func:`checked_out_file`) atomically, at its real location.

    A failure (disk full, permission denied, the path changed since the check) is :class:`InvalidInputError`:
    one line naming ``what``, the path and the reason; ``kept`` tells where the work's result still is.
    """
    try:
        atomic_write_bytes(os.path.realpath(path), data)
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise InvalidInputError(f"{what} {shown(str(path))}: cannot write it ({why}){kept}") from None


def emit_json(data: object, *, indent: int | None = 2) -> None:
    """Write ``data`` as strict JSON on stdout (non-finite numbers: see alflow.util.jsonutil)."""
    sys.stdout.write(jsonutil.dumps(data, indent=indent) + "\n")
    sys.stdout.flush()


def split_list(text: str, option: str) -> list[str]:
    """``a, b,c`` -> its items, stripped; an empty item (``1,,2``, ``1,``, ``,2``) is an error naming ``option``.

    Text of only commas and spaces has no items (the caller says what it needs).
    """
    parts = [p.strip() for p in text.split(",")]
    if not any(parts):
        return []
    if not all(parts):
        raise InvalidInputError(
            f"{option} {text!r}: item {parts.index('') + 1} is empty: give values separated by single commas "
            "(e.g. 1,2,3)"
        )
    return parts


def parse_floats(text: str, option: str) -> list[float]:
    """``1,2.5,3`` -> floats (:func:`split_list`); the error names ``option`` and the text."""
    parts = split_list(text, option)
    try:
        if not text.isascii() or "_" in text:  # Python reads '１６' (full-width) and '1_6' as 16
            raise ValueError(text)
        return [float(p) for p in parts]
    except ValueError:
        raise InvalidInputError(f"{option} {text!r}: expected numbers separated by commas") from None


@dataclass(frozen=True)
class Bound:
    """What an option allows: ``low`` (exclusive when ``open_low``) up to ``high`` (inclusive)."""

    low: float | None = None
    open_low: bool = False
    high: float | None = None

    def allows(self, value: float) -> bool:
        """Whether ``value`` is finite and inside the bound."""
        if not math.isfinite(value):
            return False
        if self.low is not None and (value <= self.low if self.open_low else value < self.low):
            return False
        return self.high is None or value <= self.high

    def describe(self, integer: bool) -> str:
        """What the bound allows, in words (``an integer >= 1``, ``an integer in [1, 65,536]``)."""
        what = "an integer" if integer else "a finite number"
        if self.low is not None and self.high is not None:
            return f"{what} in {'(' if self.open_low else '['}{_num(self.low)}, {_num(self.high)}]"
        if self.low is not None:
            return f"{what} {'>' if self.open_low else '>='} {_num(self.low)}"
        return what


def _num(value: float) -> str:
    """A bound or value as read: whole numbers in full with thousands separators (65,536), others as ``:g``."""
    if isinstance(value, int) or (math.isfinite(value) and value.is_integer() and abs(value) < 1e15):
        return f"{int(value):,}"
    return f"{value:g}"


AT_LEAST_1 = Bound(1)
NOT_NEGATIVE = Bound(0)
POSITIVE = Bound(0, open_low=True)


def check_options(values: dict[str, float | None], bounds: dict[str, Bound]) -> None:
    """Raise naming the first option whose value (None: not given) is outside what ``bounds`` says it allows."""
    for option, value in values.items():
        bound = bounds[option]
        if value is not None and not bound.allows(value):
            shown = str(value) if isinstance(value, int) else f"{value:g}"  # as typed, not 1e+09
            raise InvalidInputError(f"{option} {shown}: must be {bound.describe(isinstance(value, int))}")


OPTION_BOUNDS: dict[tuple[str, str], Bound] = {}
"""What a command's numeric options allow, by (command name, option): filled by the commands that check them
(:func:`register_bounds`), read by :func:`usage_error_line` so a value the parser cannot read (``1e23`` for an
integer) is answered with the same range as a value out of it."""


def register_bounds(command: str, bounds: dict[str, Bound]) -> dict[str, Bound]:
    """Record ``bounds`` (option -> what it allows) of ``command`` for the parser's errors; returns them."""
    OPTION_BOUNDS.update({(command, option): bound for option, bound in bounds.items()})
    return bounds


def usage_error_line(exc: typer.TyperException) -> str:
    """A usage error of the command line parser (bad option value, unknown option) as one line.

    A value that does not parse as the option's type names the option, the value as typed and, where the
    command registered one, what the option allows (``--concurrency '1e23': must be an integer in [1, 65,536]``).
    """
    ctx = getattr(exc, "ctx", None)
    where = f"{ctx.command_path}: " if ctx is not None else ""
    hint = f" (see {ctx.command_path} --help)" if ctx is not None else ""
    message = exc.format_message()
    unparsed = _unparsed_value(exc)
    if unparsed is not None:
        option, value, integer = unparsed
        bound = OPTION_BOUNDS.get((ctx.command.name, option)) if ctx is not None and ctx.command else None
        allowed = f"must be {bound.describe(integer)}" if bound is not None else message
        message = f"{option} {redact_urls_in_text(repr(value), [])}: {allowed}"
    return " ".join(f"{where}{message}{hint}".split())


def _unparsed_value(exc: typer.TyperException) -> tuple[str, str, bool] | None:
    """(option, value as typed, whether an integer was expected) of a value the parser could not convert."""
    cause = exc.__cause__
    opts = getattr(getattr(exc, "param", None), "opts", None)
    if not opts or not isinstance(cause, ValidationError) or not cause.errors():
        return None
    error = cause.errors()[0]
    value = error.get("input")
    if not isinstance(value, str):
        return None
    return str(opts[0]), value, str(error.get("type", "")).startswith("int")
