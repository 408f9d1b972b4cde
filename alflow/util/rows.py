"""Stored rows of plain dataclasses, serialized by pydantic rather than by hand.

:func:`dump_row` is a dataclass as the JSON a run stores (tuples as lists); :func:`load_row` reads it back, checked
against the class's annotations (a row that is not one raises pydantic's ``ValidationError``, naming the field);
:func:`load_checked` reads a row from a file a user may have written, with a one-line error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError

from alflow.errors import InvalidInputError

T = TypeVar("T")


_ADAPTERS: dict[type[Any], TypeAdapter[Any]] = {}


def _adapter(cls: type[Any]) -> TypeAdapter[Any]:
    if cls not in _ADAPTERS:
        _ADAPTERS[cls] = TypeAdapter(cls)
    return _ADAPTERS[cls]


def dump_row(value: object) -> dict[str, Any]:
    """``value`` (a dataclass) as its stored JSON row."""
    row: dict[str, Any] = _adapter(type(value)).dump_python(value, mode="json")
    return row


def load_row(cls: type[T], data: Mapping[str, Any]) -> T:
    """The ``cls`` a stored row holds (keys it does not know are ignored)."""
    loaded: T = _adapter(cls).validate_python(dict(data))
    return loaded


def load_checked(cls: type[T], data: object, what: str) -> T:
    """The ``cls`` a stored JSON object holds (a field the class declares strict takes exactly its type).

    Raises :class:`InvalidInputError` naming ``what``, the first bad field, its value and what it must be.
    """
    if not isinstance(data, Mapping):
        raise InvalidInputError(
            f"{what} {data!r:.120}: expected a JSON object with the fields of {cls.__name__}"
        )
    try:
        loaded: T = _adapter(cls).validate_python(dict(data))
    except ValidationError as e:
        err = e.errors()[0]
        name = ".".join(str(part) for part in err["loc"])
        if err["type"] == "missing":
            raise InvalidInputError(f"{what} field {name}: missing, required") from None
        must = err["msg"].replace("Input should be", "must be")
        raise InvalidInputError(f"{what} field {name} {err['input']!r:.80}: {must}") from None
    return loaded
