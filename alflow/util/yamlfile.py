"""The one way alflow reads a user's YAML file: text checks, duplicate keys, strict model validation.

Every error names the file and says what is wrong in one line, before any work starts:

- a file that cannot be read, is binary (a NUL byte) or is not UTF-8 text (UTF-16 is named as such);
- YAML syntax errors (with the line), and a key given twice in one mapping (PyYAML would silently keep
  the last one): :class:`UniqueKeyLoader` refuses it, naming the key and both lines;
- a document that is not a mapping;
- model validation in pydantic's *strict* mode on the JSON form of the document: ``k: true`` and
  ``k: 2.5`` are refused for an integer, ``yes`` or ``1`` for a boolean, ``"3"`` for a number, and
  NaN or infinity anywhere (``.nan``, ``.inf``); lists still fill tuples and strings fill enums.

Hostile files are refused before they cost memory or time (issue #35): only a regular file is read (a FIFO
would block, ``/dev/zero`` never ends), at most :data:`MAX_FILE_BYTES`; :class:`BoundedLoader` refuses
nesting deeper than :data:`MAX_DEPTH`, an anchor used inside itself, and aliases that bring in more than
:data:`MAX_ALIAS_NODES` nodes (a "billion laughs" file); a string longer than :data:`MAX_STRING_CHARS` is
refused naming its key path.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import stat
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any, Final, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from alflow.errors import AlflowError, InvalidInputError

M = TypeVar("M", bound=BaseModel)

MAX_FILE_BYTES = 1 << 20
"""1 MiB: the most a config, preset, catalogue, thresholds file or reference table may hold. The committed
ones are 1-10 KB (a reference table of some 3,000 entries still fits); anything larger is not a
configuration, and pure-Python YAML parsing takes about a second per MiB."""

MAX_DEPTH = 64
"""Deepest nesting of mappings and lists: real configs nest 4-5 levels; Python's recursion limit (1,000)
would otherwise end a deep file in a RecursionError."""

MAX_ALIAS_NODES = 10_000
"""Nodes that aliases (``*name``, merges included) may bring in, all uses together: a shared block of a
few dozen nodes used a few dozen times fits; a "billion laughs" file (nested aliases, each level ten times
the last) expands past it in its first levels instead of exhausting memory."""

MAX_STRING_CHARS = 64 * 1024
"""64 KiB: the longest string value or key (a model id, a path, a flag is under 1 KiB); a longer one is a
mistake that would otherwise travel to Prefect (which refuses large parameters with an HTTP 422)."""


class YamlLimitError(yaml.YAMLError):
    """A YAML document beyond one of the limits above (the message says which, and where)."""


class BoundedLoader(yaml.SafeLoader):
    """:class:`UniqueKeyLoader`'s base: a safe loader that bounds depth and alias expansion, refusing recursive anchors.

    Checked while the document is composed, before any Python object is built: nesting beyond
    :data:`MAX_DEPTH`, an alias to an anchor still being composed (a recursive structure), and aliases
    bringing in more than :data:`MAX_ALIAS_NODES` nodes (each use counts the expanded size of its target).
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._open: set[str] = set()
        self._sizes: dict[int, int] = {}
        self._alias_nodes = 0

    def _size(self, node: yaml.Node) -> int:
        """The expanded size of a composed node (1 for a scalar)."""
        return self._sizes.get(id(node), 1)

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        """Compose one node within the limits (see the class docstring)."""
        event: yaml.Event = self.peek_event()  # type: ignore[no-untyped-call]
        line = event.start_mark.line + 1 if event.start_mark is not None else 0
        if isinstance(event, yaml.AliasEvent):
            if event.anchor in self._open:
                raise YamlLimitError(
                    f"line {line}: alias *{event.anchor} refers to its own anchor &{event.anchor} "
                    "(a recursive structure): write the values out"
                )
            node = super().compose_node(parent, index)
            self._alias_nodes += 0 if node is None else self._size(node)
            if self._alias_nodes > MAX_ALIAS_NODES:
                raise YamlLimitError(
                    f"line {line}: aliases expand to more than {MAX_ALIAS_NODES:,} nodes "
                    "(nested aliases, e.g. a billion-laughs file): write the values out"
                )
            return node
        if not isinstance(event, yaml.CollectionStartEvent):
            return super().compose_node(parent, index)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise YamlLimitError(f"line {line}: nesting deeper than {MAX_DEPTH} levels of mappings and lists")
        anchor = event.anchor
        if anchor is not None:
            self._open.add(anchor)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
            if anchor is not None:
                self._open.discard(anchor)
        if isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        else:
            return node
        self._sizes[id(node)] = 1 + sum(self._size(child) for child in children)
        return node


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A key given twice in one mapping (valid YAML to PyYAML, which keeps the last; a mistake to us)."""


_MAX_INT_BITS: Final = 14_000
"""The widest integer a YAML file may hold (about 4,200 decimal digits: a wider one Python cannot print)."""


class UniqueKeyLoader(BoundedLoader):
    """PyYAML's safe loader within :class:`BoundedLoader`'s limits, and a key given twice in one mapping is an error."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        """Build a mapping, raising on a duplicate key (naming the key and both lines).

        Keys brought in by a ``<<`` merge may be overridden (that is what merges are for); only keys
        written twice in the mapping itself are refused.
        """
        seen: dict[Hashable, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if isinstance(key, Hashable) and key in seen:
                raise DuplicateKeyError(
                    None,
                    None,
                    f"duplicate key {key!r} (first at line {seen[key]}, again at line {line}): keep one",
                    key_node.start_mark,
                )
            if isinstance(key, Hashable):
                seen[key] = line
        return super().construct_mapping(node, deep=deep)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        """Build one node; a scalar Python cannot hold (an integer of 5,000 digits, ``2026-02-30``) is a YAML error."""
        try:
            built = super().construct_object(node, deep=deep)
            if (
                isinstance(built, int) and built.bit_length() > _MAX_INT_BITS
            ):  # 0x..., 0b..., 1:30:00 have no limit
                raise ValueError("an integer of more than 4,200 decimal digits")
        except (ValueError, OverflowError) as exc:
            value = node.value if isinstance(node.value, str) else ""
            shown = repr(value[:40] + ("..." if len(value) > 40 else ""))
            reason = str(exc).split(";")[0]
            raise yaml.constructor.ConstructorError(
                None, None, f"{shown}: {reason}", node.start_mark
            ) from None
        return built


def _one_line(exc: yaml.YAMLError) -> str:
    """A YAML error as one line: the problem and where (line, column)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    text = f"{where}{problem}" + (f" ({context})" if context else "")
    return " ".join(text.split())


_NOT_REGULAR: tuple[tuple[Callable[[int], bool], str], ...] = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _check_regular(p: Path, mode: int, what: str) -> None:
    """Refuse anything but a regular file (a FIFO would block the read, a device may never end)."""
    if stat.S_ISREG(mode):
        return
    kind = next((name for test, name in _NOT_REGULAR if test(mode)), "not a regular file")
    raise InvalidInputError(f"{p}: is {kind}, not a {what}: give a regular file")


def _too_large(p: Path, what: str, size: str, max_bytes: int) -> InvalidInputError:
    return InvalidInputError(
        f"{p}: the {what} is {size} bytes, more than the {max_bytes:,} bytes allowed: a {what} is a small text file"
    )


def read_bounded(
    path: str | os.PathLike[str], *, what: str = "file", max_bytes: int = MAX_FILE_BYTES
) -> bytes:
    """The bytes of ``path`` when it is a regular file of at most ``max_bytes``; else one line naming it.

    Checked with ``stat`` before opening, and again on the open descriptor (opened non-blocking, so a
    FIFO swapped in between cannot block); the read itself stops after ``max_bytes`` + 1 bytes.
    """
    p = Path(path)
    try:
        _check_regular(p, p.stat().st_mode, what)
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise InvalidInputError(f"{p}: cannot read the {what}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        _check_regular(p, info.st_mode, what)
        if info.st_size > max_bytes:
            raise _too_large(p, what, f"{info.st_size:,}", max_bytes)
        chunks: list[bytes] = []
        left = max_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise InvalidInputError(f"{p}: cannot read the {what}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    raw = b"".join(chunks)
    if len(raw) > max_bytes:
        raise _too_large(p, what, f"over {max_bytes:,}", max_bytes)
    return raw


def parse_yaml(text: str, source: str) -> Any:
    """Parse YAML ``text`` with :class:`UniqueKeyLoader`; every error is one line starting with ``source``."""
    if len(text) > MAX_FILE_BYTES:
        raise InvalidInputError(
            f"{source}: {len(text):,} characters of YAML, more than the {MAX_FILE_BYTES:,} allowed"
        )
    try:
        return yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except (DuplicateKeyError, YamlLimitError) as exc:
        raise InvalidInputError(f"{source}: {_one_line(exc)}") from None
    except yaml.YAMLError as exc:
        raise InvalidInputError(f"{source}: not valid YAML: {_one_line(exc)}") from None
    except RecursionError:  # a limit above should come first; never a traceback
        raise InvalidInputError(f"{source}: nested too deeply (at most {MAX_DEPTH} levels)") from None


def load_yaml(path: str | os.PathLike[str], *, what: str = "file") -> Any:
    """Read a YAML file (:func:`read_bounded`, :func:`parse_yaml`); errors name the file (``what`` says what it is).

    The data is also checked for strings over :data:`MAX_STRING_CHARS` (naming the key path).
    """
    if not os.fspath(path).strip():  # Path("") is ".", the working folder: said as what it is
        raise InvalidInputError(f"{what} path '' is empty: give a YAML file")
    p = Path(path)
    return yaml_of_bytes(read_bounded(p, what=what), str(p))


def yaml_of_bytes(raw: bytes, source: str) -> Any:
    """The YAML in ``raw`` (a file read elsewhere, e.g. through fsspec), checked as :func:`load_yaml` checks a file.

    At most :data:`MAX_FILE_BYTES`, UTF-8, :func:`parse_yaml`'s limits, no string over :data:`MAX_STRING_CHARS`;
    each error is one line starting with ``source``.
    """
    if len(raw) > MAX_FILE_BYTES:
        raise InvalidInputError(f"{source}: {len(raw):,} bytes, more than the {MAX_FILE_BYTES:,} allowed")
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise InvalidInputError(
            f"{source}: not UTF-8 text (UTF-16, by its byte-order mark): save it as UTF-8"
        )
    if b"\x00" in raw:
        raise InvalidInputError(f"{source}: binary file (a NUL byte at offset {raw.index(0)}), not YAML text")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidInputError(
            f"{source}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}): save it as UTF-8"
        ) from None
    data = parse_yaml(text, source)
    bad = _long_string(data)
    if bad is not None:
        raise InvalidInputError(f"{source}: {_long_message(*bad)}")
    return data


def _long_message(where: str, size: int) -> str:
    return f"{where}: a string of {size:,} characters, more than the {MAX_STRING_CHARS:,} allowed"


def _long_string(data: Any, where: str = "", depth: int = 0) -> tuple[str, int] | None:
    """The dotted place and length of the first string (value or key) over :data:`MAX_STRING_CHARS`."""
    if depth > MAX_DEPTH + 1:
        raise InvalidInputError(f"{where or 'value'}: nested deeper than {MAX_DEPTH} levels")
    if isinstance(data, str):
        return (where or "value", len(data)) if len(data) > MAX_STRING_CHARS else None
    if isinstance(data, dict):
        for key, value in data.items():
            if isinstance(key, str) and len(key) > MAX_STRING_CHARS:
                return (f"{where}: a key" if where else "a key", len(key))
            found = _long_string(value, f"{where}.{key}" if where else str(key), depth + 1)
            if found:
                return found
    if isinstance(data, list | tuple):
        for i, value in enumerate(data):
            found = _long_string(value, f"{where}[{i}]", depth + 1)
            if found:
                return found
    return None


def _json_default(obj: object) -> object:
    if isinstance(obj, dt.datetime | dt.date):
        return obj.isoformat()
    if isinstance(obj, bytes | set | frozenset):
        raise TypeError(f"a YAML {type(obj).__name__} value is not allowed here")
    raise TypeError(f"a YAML value of type {type(obj).__name__} is not allowed here")


def _non_finite(data: Any, where: str = "") -> tuple[str, float] | None:
    """The dotted place and value of the first NaN or infinity in ``data`` (None when there is none)."""
    if isinstance(data, float) and not math.isfinite(data):
        return where or "value", data
    if isinstance(data, dict):
        for key, value in data.items():
            found = _non_finite(value, f"{where}.{key}" if where else str(key))
            if found:
                return found
    if isinstance(data, list):
        for i, value in enumerate(data):
            found = _non_finite(value, f"{where}[{i}]")
            if found:
                return found
    return None


def describe_validation(exc: ValidationError) -> str:
    """The first error of a validation as ``field.path: message (got value)`` plus how many more.

    A whole-model check (no field path) is its message alone, which names the fields itself.
    """
    errors = exc.errors()
    first = errors[0]
    where = ".".join(f"[{x}]" if isinstance(x, int) else str(x) for x in first["loc"]).replace(".[", "[")
    msg = str(first["msg"]).removeprefix("Value error, ")
    shown = first.get("input")
    given = (
        f" (got {shown!r})"
        if first["type"] not in ("value_error", "assertion_error", "missing")
        and not isinstance(shown, dict | list)
        else ""
    )
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {msg}{given}{more}" if where else f"{msg}{more}"


def validate_strict(
    data: Any,
    model: type[M],
    *,
    source: str,
    error: type[AlflowError] = InvalidInputError,
    describe: Callable[[ValidationError], str] = describe_validation,
) -> M:
    """Validate parsed YAML against ``model`` in strict mode (see the module docstring).

    ``source`` names the input in messages (a file path); ``describe`` words a validation error.
    """
    if data is None:
        data = {}
    if not isinstance(data, dict):
        kind = (
            "a list"
            if isinstance(data, list)
            else "a string"
            if isinstance(data, str)
            else type(data).__name__
        )
        raise error(f"{source}: expected a YAML mapping of fields, got {kind}")
    try:
        long = _long_string(data)
    except InvalidInputError as exc:
        raise error(f"{source}: {exc}") from None
    if long is not None:
        raise error(f"{source}: {_long_message(*long)}")
    bad = _non_finite(data)
    if bad is not None:
        raise error(
            f"{source}: {bad[0]}: {bad[1]!r} is not allowed: give a finite number (no NaN or infinity)"
        )
    try:
        text = json.dumps(data, default=_json_default, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise error(f"{source}: {exc}") from None
    try:
        return model.model_validate_json(text, strict=True)
    except ValidationError as exc:
        raise error(f"{source}: {describe(exc)}") from None


def load_yaml_model(
    path: str | os.PathLike[str],
    model: type[M],
    *,
    what: str = "config",
    error: type[AlflowError] = InvalidInputError,
    describe: Callable[[ValidationError], str] = describe_validation,
) -> M:
    """Read ``path`` (:func:`load_yaml`) and validate it as ``model`` in strict mode (:func:`validate_strict`).

    Every error is an ``error`` (default :class:`InvalidInputError`) whose one-line message starts
    with the file's path; an empty file is an empty mapping (the model's defaults).
    """
    try:
        data = load_yaml(path, what=what)
    except InvalidInputError as exc:
        if error is InvalidInputError:
            raise
        raise error(str(exc)) from None
    return validate_strict(data, model, source=str(path), error=error, describe=describe)
