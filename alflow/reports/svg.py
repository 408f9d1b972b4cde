"""Plots as inline SVG, written by hand (no plotting library, no script, no external resource).

Every chart is a ``<svg>`` element with a ``viewBox`` (it scales with the page), a title, axes
with ticks, one polyline per series, markers, optional vertical error bars (a confidence interval
or an allowed spread) and a legend; a :class:`BarChart` draws grouped bars instead (one group per
category, one bar per :class:`Bars` in it, each bar with a tooltip giving its value). Every piece of text (titles, labels, series names) goes
through :func:`markupsafe.escape`, so a model name such as ``<script>`` stays text. Non-finite
values (``inf``, ``nan``, ``None``) are left out of a series rather than drawn.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

from markupsafe import Markup, escape

PALETTE: Final = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#7f7f7f",
    "#bcbd22",
)


@dataclass(frozen=True)
class Series:
    """One curve: ``points`` (x, y); optional per-point ``errors`` (low, high) and ``labels``."""

    name: str
    points: Sequence[tuple[float | None, float | None]]
    errors: Sequence[tuple[float | None, float | None] | None] | None = None
    labels: Sequence[str] | None = None
    dashed: bool = False
    line: bool = True
    color: str | None = None


@dataclass(frozen=True)
class HLine:
    """A horizontal reference line across the plot (e.g. a threshold), with a label."""

    y: float
    label: str
    color: str = "#555555"


@dataclass(frozen=True)
class Chart:
    """A line chart: series over numeric x; ``log_x`` uses a base-2 axis (concurrency sweeps)."""

    title: str
    x_label: str
    y_label: str
    series: Sequence[Series]
    hlines: Sequence[HLine] = ()
    log_x: bool = False
    x_ticks: Sequence[float] | None = None
    y_zero: bool = False
    width: int = 680
    height: int = 380
    notes: Sequence[str] = field(default_factory=tuple)


@dataclass(frozen=True)
class Bars:
    """One bar per category of a :class:`BarChart` (``values[i]`` for ``categories[i]``; None draws no bar)."""

    name: str
    values: Sequence[float | None]
    color: str | None = None
    outline: bool = False
    """Draw the bar as an outline (an expected value) rather than filled (an observed one)."""


@dataclass(frozen=True)
class BarChart:
    """A grouped bar chart: for each category, the bars of every :class:`Bars` side by side, y from 0."""

    title: str
    x_label: str
    y_label: str
    categories: Sequence[str]
    bars: Sequence[Bars]
    width: int = 520
    height: int = 320


def finite(value: object) -> float | None:
    """``value`` as a float when it is a finite number, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    f = float(value)
    return f if math.isfinite(f) else None


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About ``count`` round tick values covering ``[low, high]`` (steps of 1, 2, 2.5 or 5 x 10^n)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return []
    if high < low:
        low, high = high, low
    # equal, or closer than ticks can tell apart (one float step, or a range that underflows)
    if high - low <= max(max(abs(low), abs(high)) * 1e-9, 1e-300):
        pad = abs(low) * 0.1 or 1.0
        low, high = low - pad, high + pad
    raw = (high - low) / max(1, count)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(low / step) * step
    ticks: list[float] = []
    t = start
    while t <= high + step * 1e-9 and len(ticks) <= 4 * max(1, count) + 2:  # bounded whatever the floats do
        ticks.append(round(t, 12))
        t += step
    if ticks[-1] < high:
        ticks.append(round(t, 12))
    return ticks


def fmt_tick(value: float) -> str:
    """Short tick text: integers without decimals, else up to 3 significant decimals."""
    if abs(value - round(value)) < 1e-9:
        return f"{round(value):,}".replace(",", "\u2009")
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.3g}"


def _clean(series: Series) -> list[tuple[int, float, float]]:
    out = []
    for i, (x, y) in enumerate(series.points):
        fx, fy = finite(x), finite(y)
        if fx is not None and fy is not None:
            out.append((i, fx, fy))
    return out


def _err(series: Series, i: int) -> tuple[float, float] | None:
    if series.errors is None or i >= len(series.errors):
        return None
    e = series.errors[i]
    if e is None:
        return None
    lo, hi = finite(e[0]), finite(e[1])
    return None if lo is None or hi is None else (lo, hi)


def render(chart: Chart | BarChart) -> Markup:
    """The chart as an ``<svg>`` element (safe markup; all text escaped)."""
    if isinstance(chart, BarChart):
        return _render_bars(chart)
    w, h = chart.width, chart.height
    left, top, pw, ph = _area(w, h, len(chart.series))
    parts: list[str] = frame(chart.title, w, h)
    cleaned = [_clean(s) for s in chart.series]
    xs, ys = _extent(chart, cleaned)
    if not xs:  # the series are still named: which curves had no finite point is part of the report
        parts.append(no_data(w, h))
    else:
        plot, x_ticks, y_ticks = _plot_area(chart, xs, ys, left, top, pw, ph)
        parts += _axes(chart, plot, x_ticks, y_ticks)
        parts += _hlines(chart, plot)
        for n, (s, all_pts) in enumerate(zip(chart.series, cleaned, strict=True)):
            parts += _series(chart, plot, n, s, all_pts)
    parts += _legend(chart, left, top + ph + 50, pw)
    parts.append("</svg>")
    return Markup("".join(parts))  # noqa: S704 - every text above is escaped


def _area(w: int, h: int, legends: int) -> tuple[int, int, int, int]:
    """The plot area (left, top, width, height) under the title, above the axis labels and the legend's rows."""
    left, right, top = 74, 16, 34
    legend_rows = max(1, math.ceil(legends / 3)) if legends else 0
    return left, top, w - left - right, h - top - (52 + 18 * legend_rows)


def no_data(w: int, h: int, text: str = "no data to plot") -> str:
    """The grey line a chart without a value to place shows in its middle."""
    return f'<text x="{w / 2:.1f}" y="{h / 2:.1f}" text-anchor="middle" fill="#888888">{text}</text>'


@dataclass(frozen=True)
class _Plot:
    """The plot area of a line chart and its data ranges: where a value lands in pixels."""

    left: float
    top: float
    pw: float
    ph: float
    x_lo: float
    x_hi: float
    y_lo: float
    y_hi: float
    log_x: bool

    def tx(self, v: float) -> float:
        return math.log2(v) if self.log_x else v

    def px(self, v: float) -> float:
        return self.left + (self.tx(v) - self.x_lo) / (self.x_hi - self.x_lo) * self.pw

    def py(self, v: float) -> float:
        return self.top + self.ph - (v - self.y_lo) / (self.y_hi - self.y_lo) * self.ph


def _extent(chart: Chart, cleaned: list[list[tuple[int, float, float]]]) -> tuple[list[float], list[float]]:
    """Every plotted x, and every y (points, error bars, horizontal lines) the y range must hold."""
    xs: list[float] = []
    ys: list[float] = []
    for s, pts in zip(chart.series, cleaned, strict=True):
        for i, x, y in pts:
            if chart.log_x and x <= 0:
                continue
            xs.append(x)
            ys.append(y)
            e = _err(s, i)
            if e is not None:
                ys.extend(e)
    ys.extend(hl.y for hl in chart.hlines if finite(hl.y) is not None)
    return xs, ys


def _plot_area(
    chart: Chart, xs: list[float], ys: list[float], left: float, top: float, pw: float, ph: float
) -> tuple[_Plot, list[float], list[float]]:
    """The ranges (rounded out to the ticks, padded where the x ticks are given or log) and the ticks."""
    tx = math.log2 if chart.log_x else (lambda v: v)
    x_ticks = list(chart.x_ticks) if chart.x_ticks else (sorted(set(xs)) if chart.log_x else [])
    x_lo, x_hi = min(tx(x) for x in xs), max(tx(x) for x in xs)
    if not chart.log_x and not x_ticks:
        x_ticks = nice_ticks(x_lo, x_hi)
        x_lo, x_hi = min(x_lo, x_ticks[0]), max(x_hi, x_ticks[-1])
    if x_hi == x_lo:
        x_lo, x_hi = x_lo - 1, x_hi + 1
    pad_x = (x_hi - x_lo) * (0.05 if chart.log_x or chart.x_ticks else 0.0)
    x_lo, x_hi = x_lo - pad_x, x_hi + pad_x
    y_lo, y_hi = min(ys), max(ys)
    if chart.y_zero:
        y_lo = min(0.0, y_lo)
    y_ticks = nice_ticks(y_lo, y_hi)
    y_lo, y_hi = min(y_lo, y_ticks[0]), max(y_hi, y_ticks[-1])
    return _Plot(left, top, pw, ph, x_lo, x_hi, y_lo, y_hi, chart.log_x), x_ticks, y_ticks


def y_grid(
    left: float, top: float, pw: float, ph: float, y_ticks: list[float], py: Callable[[float], float]
) -> list[str]:
    """The plot area's frame and its horizontal grid lines with the y tick labels (line and bar charts)."""
    parts = [f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#cccccc"/>']
    for t in y_ticks:
        y = py(t)
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" stroke="#eeeeee"/>')
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{escape(fmt_tick(t))}</text>')
    return parts


def _axis_labels(chart: Chart | BarChart, left: float, top: float, pw: float, ph: float) -> list[str]:
    """The x axis label under the plot area and the y axis label turned up beside it (escaped)."""
    return [
        f'<text x="{left + pw / 2:.1f}" y="{top + ph + 34}" text-anchor="middle">{escape(chart.x_label)}</text>',
        f'<text x="16" y="{top + ph / 2:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 16 {top + ph / 2:.1f})">{escape(chart.y_label)}</text>',
    ]


def _axes(chart: Chart, plot: _Plot, x_ticks: list[float], y_ticks: list[float]) -> list[str]:
    """The frame, grid lines, tick labels and axis labels."""
    left, top, pw, ph = plot.left, plot.top, plot.pw, plot.ph
    parts = y_grid(left, top, pw, ph, y_ticks, plot.py)
    for t in x_ticks:
        if chart.log_x and t <= 0:
            continue
        x = plot.px(t)
        if not left - 0.5 <= x <= left + pw + 0.5:
            continue
        parts.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + ph}" stroke="#eeeeee"/>')
        parts.append(
            f'<text x="{x:.1f}" y="{top + ph + 16}" text-anchor="middle">{escape(fmt_tick(t))}</text>'
        )
    return parts + _axis_labels(chart, left, top, pw, ph)


def _hlines(chart: Chart, plot: _Plot) -> list[str]:
    """The dashed horizontal reference lines (thresholds, targets) with their labels."""
    parts: list[str] = []
    for hl in chart.hlines:
        if finite(hl.y) is None:
            continue
        y = plot.py(hl.y)
        parts.append(
            f'<line x1="{plot.left}" y1="{y:.1f}" x2="{plot.left + plot.pw}" y2="{y:.1f}" '
            f'stroke="{escape(hl.color)}" stroke-dasharray="6 4" stroke-width="1.5"/>'
        )
        parts.append(
            f'<text x="{plot.left + plot.pw - 4}" y="{y - 4:.1f}" text-anchor="end" fill="{escape(hl.color)}">'
            f"{escape(hl.label)}</text>"
        )
    return parts


def _series(
    chart: Chart, plot: _Plot, n: int, s: Series, all_pts: list[tuple[int, float, float]]
) -> list[str]:
    """One series: its line, error bars, points and point labels."""
    px, py = plot.px, plot.py
    parts: list[str] = []
    color = escape(s.color or PALETTE[n % len(PALETTE)])
    pts = [p for p in all_pts if not (chart.log_x and p[1] <= 0)]
    if s.line and len(pts) > 1:
        coords = " ".join(f"{px(x):.1f},{py(y):.1f}" for _, x, y in pts)
        dash = ' stroke-dasharray="5 4"' if s.dashed else ""
        parts.append(
            f'<polyline class="series" points="{coords}" fill="none" stroke="{color}" stroke-width="2"{dash}/>'
        )
    for i, x, y in pts:
        e = _err(s, i)
        if e is not None:
            x0, y0, y1 = px(x), py(e[0]), py(e[1])
            parts.append(
                f'<path d="M{x0:.1f},{y0:.1f}V{y1:.1f}M{x0 - 4:.1f},{y0:.1f}h8M{x0 - 4:.1f},{y1:.1f}h8" '
                f'stroke="{color}" stroke-width="1.5" fill="none"/>'
            )
        parts.append(f'<circle class="point" cx="{px(x):.1f}" cy="{py(y):.1f}" r="3.5" fill="{color}"/>')
        if s.labels is not None and i < len(s.labels) and s.labels[i]:
            parts.append(
                f'<text x="{px(x) + 6:.1f}" y="{py(y) - 6:.1f}" font-size="10" fill="{color}">'
                f"{escape(s.labels[i])}</text>"
            )
    return parts


def frame(
    title: str, w: int, h: int, kind: str = "chart", fonts: tuple[int, int, int] = (12, 14, 20)
) -> list[str]:
    """The opening of a chart's ``<svg>``: size, accessible name, background and title (escaped).

    ``fonts``: the text's size, the title's size and the title's baseline.
    """
    size, title_size, title_y = fonts
    return [
        f'<svg class="{kind}" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" '
        f'aria-label="{escape(title)}" font-family="sans-serif" font-size="{size}">',
        f"<title>{escape(title)}</title>",
        f'<rect x="0" y="0" width="{w}" height="{h}" fill="#ffffff"/>',
        f'<text x="{w / 2:.1f}" y="{title_y}" text-anchor="middle" font-size="{title_size}" font-weight="bold">'
        f"{escape(title)}</text>",
    ]


def _render_bars(chart: BarChart) -> Markup:
    """A grouped bar chart: y axis from 0 with round ticks, one group per category, a legend of the bar sets."""
    w, h = chart.width, chart.height
    left, top, pw, ph = _area(w, h, len(chart.bars))
    parts = frame(chart.title, w, h)
    values = [v for b in chart.bars for v in (finite(x) for x in b.values) if v is not None]
    if not chart.categories or not values:
        parts.append(no_data(w, h))
    else:
        y_ticks = nice_ticks(min(0.0, *values), max(values))
        y_lo, y_hi = y_ticks[0], y_ticks[-1]

        def py(v: float) -> float:
            return top + ph - (v - y_lo) / (y_hi - y_lo) * ph

        parts += y_grid(left, top, pw, ph, y_ticks, py)
        group = pw / len(chart.categories)
        bar_w = group * 0.8 / max(1, len(chart.bars))
        for c, category in enumerate(chart.categories):
            x0 = left + c * group + group * 0.1
            parts.append(
                f'<text x="{left + (c + 0.5) * group:.1f}" y="{top + ph + 16}" text-anchor="middle">'
                f"{escape(category)}</text>"
            )
            for n, bars in enumerate(chart.bars):
                v = finite(bars.values[c]) if c < len(bars.values) else None
                if v is None:
                    continue
                color = escape(bars.color or PALETTE[n % len(PALETTE)])
                y_top, y_base = py(max(v, 0.0)), py(min(v, 0.0))
                fill = f'fill="none" stroke="{color}" stroke-width="2"' if bars.outline else f'fill="{color}"'
                parts.append(
                    f'<rect class="bar" x="{x0 + n * bar_w:.1f}" y="{y_top:.1f}" width="{bar_w:.1f}" '
                    f'height="{max(y_base - y_top, 0.0):.1f}" {fill}><title>'
                    f"{escape(f'{category}, {bars.name}: {fmt_tick(v)}')}</title></rect>"
                )
    parts += _axis_labels(chart, left, top, pw, ph)
    for n, bars in enumerate(chart.bars):
        color = escape(bars.color or PALETTE[n % len(PALETTE)])
        col, row = n % 3, n // 3
        lx, ly = left + col * (pw / 3), top + ph + 50 + row * 18
        fill = f'fill="none" stroke="{color}" stroke-width="2"' if bars.outline else f'fill="{color}"'
        parts.append(f'<rect x="{lx:.1f}" y="{ly - 10:.1f}" width="14" height="10" {fill}/>')
        parts.append(f'<text x="{lx + 20:.1f}" y="{ly:.1f}">{escape(_short(bars.name, 38))}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))  # noqa: S704 - every text above is escaped


def _legend(chart: Chart, left: float, top: float, width: float) -> list[str]:
    """One legend entry per series, three to a row from (``left``, ``top``); every name escaped."""
    parts: list[str] = []
    for n, s in enumerate(chart.series):
        color = escape(s.color or PALETTE[n % len(PALETTE)])
        col, row = n % 3, n // 3
        lx, ly = left + col * (width / 3), top + row * 18
        dash = ' stroke-dasharray="5 4"' if s.dashed else ""
        parts.append(
            f'<line x1="{lx:.1f}" y1="{ly - 4:.1f}" x2="{lx + 18:.1f}" y2="{ly - 4:.1f}" stroke="{color}" '
            f'stroke-width="2"{dash}/>'
        )
        parts.append(f'<text x="{lx + 24:.1f}" y="{ly:.1f}">{escape(_short(s.name, 38))}</text>')
    return parts


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"
