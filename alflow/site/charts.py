"""Trend charts: one metric of one trend line over its runs, as inline SVG (no script, no external resource).

The x axis is the run order (one slot per point, oldest left) labelled with the run date and the image tag;
a point whose regression verdict is ``regressed`` is drawn larger in :data:`REGRESSED` with a ring, and the
legend says so. Every text goes through :func:`markupsafe.escape` (a model name such as ``<script>`` stays
text); tick values come from :func:`alflow.reports.svg.nice_ticks`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Final

from markupsafe import Markup, escape

from alflow.reports.svg import frame, nice_ticks, no_data, y_grid

LINE: Final = "#1f77b4"
REGRESSED: Final = "#e8112d"
"""The colour of a regressed point (and its legend entry); no other mark on a trend chart uses it."""
INVALID: Final = "#999999"
WIDTH: Final = 640
HEIGHT: Final = 300
_LEFT, _RIGHT, _TOP, _BOTTOM = 70, 44, 30, 78
MAX_X_LABELS: Final = 6
MAX_PLOTTED: Final = 1e15
"""The largest value a chart places (a larger or non-finite one is drawn as not measured; its tooltip keeps it)."""


@dataclass(frozen=True)
class TrendMark:
    """One run on a chart: its value (None: not measured), x label parts, tooltip and marks."""

    value: float | None
    date: str
    tag: str
    tooltip: str
    regressed: bool = False
    good: bool = True


def trend_chart(title: str, y_label: str, marks: Sequence[TrendMark]) -> Markup:
    """The chart of ``marks`` (oldest first) as an ``<svg>`` element."""
    w, h = WIDTH, HEIGHT
    pw, ph = w - _LEFT - _RIGHT, h - _TOP - _BOTTOM
    parts = frame(title, w, h, "trend", (11, 13, 18))
    marks = [m if _plottable(m.value) else replace(m, value=None) for m in marks]
    values = [m.value for m in marks if m.value is not None]
    if not values:
        parts.append(no_data(w, h, "no data"))
        return Markup("".join([*parts, "</svg>"]))  # noqa: S704 - every text is escaped
    ticks = _ticks(min(values), max(values))
    lo, hi = min(ticks[0], *values), max(ticks[-1], *values)
    n = len(marks)

    def px(i: int) -> float:
        return _LEFT + (pw / 2 if n == 1 else i * pw / (n - 1))

    def py(v: float) -> float:
        return _TOP + ph - (v - lo) / ((hi - lo) or 1.0) * ph

    parts += y_grid(_LEFT, _TOP, pw, ph, ticks, py)
    step = max(1, -(-n // MAX_X_LABELS))
    for i in range(0, n, step):
        x = px(i)
        parts.append(
            f'<text x="{x:.1f}" y="{_TOP + ph + 15}" text-anchor="middle">{escape(marks[i].date)}</text>'
        )
        parts.append(
            f'<text x="{x:.1f}" y="{_TOP + ph + 28}" text-anchor="middle" fill="#555555">{escape(marks[i].tag)}</text>'
        )
    parts.append(
        f'<text x="14" y="{_TOP + ph / 2:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 14 {_TOP + ph / 2:.1f})">{escape(y_label)}</text>'
    )
    coords = " ".join(f"{px(i):.1f},{py(m.value):.1f}" for i, m in enumerate(marks) if m.value is not None)
    parts.append(f'<polyline points="{coords}" fill="none" stroke="{LINE}" stroke-width="1.5"/>')
    parts += _marks(marks, px, py)
    parts += _legend(h, any(m.regressed for m in marks))
    parts.append("</svg>")
    return Markup("".join(parts))  # noqa: S704 - every text is escaped


def _plottable(value: float | None) -> bool:
    """A value the chart can place: finite and at most :data:`MAX_PLOTTED` in size (others: not measured)."""
    return value is not None and math.isfinite(value) and abs(value) <= MAX_PLOTTED


def _ticks(low: float, high: float) -> list[float]:
    """:func:`nice_ticks` of ``[low, high]``, a span below the chart's precision taken as one value.

    Two values a few ulps apart (``1e5`` and the next float) would otherwise get a tick step too small to add to
    them: a tick loop that never ends.
    """
    if high - low <= max(abs(low), abs(high), 1e-12) * 1e-9:
        low = high = (low + high) / 2
    return nice_ticks(low, high)


def _marks(marks: Sequence[TrendMark], px: Callable[[int], float], py: Callable[[float], float]) -> list[str]:
    """The point markers: regressed ones large and red with a ring, others small (grey when not good)."""
    out: list[str] = []
    for i, m in enumerate(marks):
        if m.value is None:
            continue
        x, y = px(i), py(m.value)
        tip = f"<title>{escape(m.tooltip)}</title>"
        if m.regressed:
            out.append(
                f'<circle class="regressed" cx="{x:.1f}" cy="{y:.1f}" r="7" fill="{REGRESSED}" '
                f'stroke="#7a0010" stroke-width="1.5">{tip}</circle>'
            )
        else:
            color = LINE if m.good else INVALID
            out.append(
                f'<circle class="point" cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{color}">{tip}</circle>'
            )
    return out


def _legend(h: int, regressed: bool) -> list[str]:
    """The legend: run values, not-good points, and regressed points (only when the chart has one)."""
    y = h - 14
    out = [
        f'<line x1="{_LEFT}" y1="{y - 4}" x2="{_LEFT + 18}" y2="{y - 4}" stroke="{LINE}" stroke-width="2"/>',
        f'<text x="{_LEFT + 24}" y="{y}">run</text>',
        f'<circle cx="{_LEFT + 80}" cy="{y - 4}" r="3.5" fill="{INVALID}"/>',
        f'<text x="{_LEFT + 90}" y="{y}">invalid, partial or client-bound</text>',
    ]
    if regressed:
        out += [
            f'<circle cx="{_LEFT + 310}" cy="{y - 4}" r="6" fill="{REGRESSED}" stroke="#7a0010"/>',
            f'<text x="{_LEFT + 322}" y="{y}">regressed (regression.json)</text>',
        ]
    return out
