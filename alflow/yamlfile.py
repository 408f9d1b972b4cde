"""The one way alflow reads a user's YAML file: text checks, duplicate keys, strict model validation.

Every error names the file and says what is wrong in one line, before any work starts:

- a file that cannot be read, is binary (a NUL byte) or is not UTF-8 text (UTF-16 is named as such);
- YAML syntax errors (with the line), and a key given twice in one mapping (PyYAML would silently keep
  the last one): :class:`UniqueKeyLoader` refuses it, naming the key and both lines;
- a document that is not a mapping;
- model validation in pydantic's *strict* mode on the JSON form of the document: ``k: true`` and
  ``k: 2.5`` are refused for an integer, ``yes`` or ``1`` for a boolean, ``"3"`` for a number, and
  NaN or infinity anywhere (``.nan``, ``.inf``); lists still fill tuples and strings fill enums.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from alflow.errors import AlflowError, InvalidInputError

M = TypeVar("M", bound=BaseModel)


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A key given twice in one mapping (valid YAML to PyYAML, which keeps the last; a mistake to us)."""


class UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key given twice in one mapping is an error."""

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


def _text(path: Path, raw: bytes) -> str:
    """``raw`` as UTF-8 text, or an error naming the file as binary or not UTF-8."""
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise InvalidInputError(f"{path}: not UTF-8 text (UTF-16, by its byte-order mark): save it as UTF-8")
    if b"\x00" in raw:
        offset = raw.index(b"\x00")
        raise InvalidInputError(f"{path}: binary file (a NUL byte at offset {offset}), not YAML text")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidInputError(
            f"{path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}): save it as UTF-8"
        ) from None


def _one_line(exc: yaml.YAMLError) -> str:
    """A YAML error as one line: the problem and where (line, column)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    text = f"{where}{problem}" + (f" ({context})" if context else "")
    return " ".join(text.split())


def load_yaml(path: str | os.PathLike[str], *, what: str = "file") -> Any:
    """Read a YAML file with :class:`UniqueKeyLoader`; errors name the file (``what`` says what it is)."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except IsADirectoryError:
        raise InvalidInputError(f"{p}: is a directory, not a {what}") from None
    except OSError as exc:
        raise InvalidInputError(f"{p}: cannot read the {what}: {exc.strerror or exc}") from None
    text = _text(p, raw)
    try:
        return yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except DuplicateKeyError as exc:
        raise InvalidInputError(f"{p}: {_one_line(exc)}") from None
    except yaml.YAMLError as exc:
        raise InvalidInputError(f"{p}: not valid YAML: {_one_line(exc)}") from None


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
        raise error(f"{source}: expected a YAML mapping of fields, got {_kind(data)}")
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


def _kind(data: object) -> str:
    if isinstance(data, list):
        return "a list"
    if isinstance(data, str):
        return "a string"
    return type(data).__name__


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
