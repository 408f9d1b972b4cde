"""Strict JSON for everything alflow writes or prints (run manifests, summaries, ``--json`` output).

Python's ``json`` writes ``NaN`` and ``Infinity``, which are not JSON (``jq``, browsers and most
parsers reject them). One scheme, used by every writer through :func:`dumps`:

- a non-finite float (``nan``, ``inf``, ``-inf``) becomes ``null``;
- in a mapping, the reason goes beside it under ``"<field>_note"``: ``"not finite: inf"`` by
  default, or the domain reason a producer set there first with :func:`note_nonfinite` (for
  example ``"not finite: tpot_ms = 0 ..."``); an existing ``<field>_note`` is never overwritten;
- inside a list, the element becomes ``null`` and the mapping field that holds the list gets the
  note with the positions (``"not finite at [2]: nan"``);
- a bare list or number at the top level has nowhere to put a note: only the ``null`` remains.

Tuples are written as lists; other values JSON does not know (paths, datetimes) as ``str(value)``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any

NOTE_SUFFIX = "_note"


def _word(x: float) -> str:
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def _is_bad(value: object) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


def _clean(value: Any, where: str, bad: list[str]) -> Any:
    """``value`` with non-finite floats as None (in a list: added to ``bad`` as ``[2]: nan``; in a mapping: noted)."""
    if _is_bad(value):
        bad.append(f"{where}: {_word(value)}")
        return None
    if isinstance(value, list | tuple):
        return [_clean(item, f"{where}[{i}]", bad) for i, item in enumerate(value)]
    if not isinstance(value, Mapping):
        return value
    out: dict[Any, Any] = {}
    notes: dict[str, str] = {}
    for key, item in value.items():
        found: list[str] = []
        out[key] = _clean(item, "", found)
        if _is_bad(item):
            notes[f"{key}{NOTE_SUFFIX}"] = f"not finite: {_word(item)}"
        elif found:
            notes[f"{key}{NOTE_SUFFIX}"] = "not finite at " + ", ".join(found)
    for note_key, note in notes.items():
        out.setdefault(note_key, note)
    return out


def finite(data: Any) -> Any:
    """A copy of ``data`` in which every non-finite float is ``None``, with notes as the module says."""
    return _clean(data, "", [])


def note_nonfinite(data: MutableMapping[str, Any], reason: str, keys: Iterable[str] | None = None) -> None:
    """Set ``"<key>_note": "not finite: <reason>"`` beside each non-finite value (of ``keys``, or all)."""
    for key in list(data if keys is None else keys):
        if _is_bad(data.get(key)):
            data.setdefault(f"{key}{NOTE_SUFFIX}", f"not finite: {reason}")


def dumps(data: Any, *, indent: int | None = 2) -> str:
    """Strict JSON text of ``data`` (see the module docstring); never ``NaN`` or ``Infinity``."""
    return json.dumps(finite(data), indent=indent, default=str, allow_nan=False)


def dumps_bytes(data: Any, *, indent: int | None = 2) -> bytes:
    """:func:`dumps` as UTF-8 bytes with a final newline (the form of every JSON file alflow writes)."""
    return (dumps(data, indent=indent) + "\n").encode()
