"""Stored rows of plain dataclasses, serialized by pydantic rather than by hand.

:func:`dump_row` is a dataclass as the JSON a run stores (tuples as lists); :func:`load_row` reads it back, checked
against the class's annotations (a row that is not one raises pydantic's ``ValidationError``, naming the field).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import TypeAdapter

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
