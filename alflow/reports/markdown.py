r"""Markdown that no user value can shape: the escaping filters, the environment, the flows' summaries.

Every Markdown text alflow writes (``report.md`` and the Prefect markdown artifacts of the M0, M1 and
M2 flows) is rendered here from a jinja2 template. User-supplied values (model names, labels,
categories, error messages, URLs, paths) go through :func:`escape_md`:

- Markdown's special characters (``\ ` * _ { } [ ] < > ( ) # + - . ! | ~``) are backslash-escaped,
  so no value opens a link, an image, emphasis, a heading, a list or a table cell;
- HTML is inert: ``&``, ``<`` and ``>`` become entities (``<script>`` is text);
- newlines and runs of white space become one space (a value stays on its line, in its cell);
- control and format characters (:func:`escape_controls`: ESC, NUL, DEL, C1, bidi overrides, zero-width
  characters) are written as visible ``\xNN`` / ``\uNNNN`` text, so no value can drive a terminal that
  shows the file or reorder what a reader sees.

The environment escapes by default as well: any ``{{ value }}`` that is not already escaped
(:class:`markupsafe.Markup`) or a number is passed through :func:`escape_md`, so a template that
forgets the filter is still safe. User values are never put in code spans (backslash escapes do not
work there) and never become a link or image target.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

import jinja2
from markupsafe import Markup

from alflow.redact import redact_url

MD_SPECIAL: Final = frozenset("\\`*_{}[]<>()#+-.!|~")
"""Characters backslash-escaped in user text (``<`` and ``>`` become entities instead)."""
_ENTITIES: Final = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_PLAIN_NUMBER: Final = re.compile(r"[0-9 .,:%/+\-]*")
"""A cell made only of digits and number punctuation (``2.5000``, ``-``, ``12 / 3``): literal in a cell."""


CONTROL_CATEGORIES: Final = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
"""Unicode categories :func:`escape_controls` writes as escapes: controls (C0, DEL, C1), format characters
(bidi embeddings, overrides and isolates U+202A-E, U+2066-9, marks U+200E/F, zero-width characters), lone
surrogates, and the line and paragraph separators U+2028/9."""
_NOT_PRINTABLE_ASCII: Final = re.compile(r"[^\x20-\x7e]")
_KEEP_WHITESPACE: Final = "\n\t"


def _escaped(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def escape_controls(value: object, keep: str = _KEEP_WHITESPACE) -> str:
    r"""``value`` as text with every control or format character written as visible ``\xNN``, ``\uNNNN`` text.

    Escaped: every character of :data:`CONTROL_CATEGORIES` (ESC ``\x1b``, NUL ``\x00``, CR ``\r``, BEL, DEL
    ``\x7f``, C1 ``\x9b``, RLO ``\u202e``, ...) except those in ``keep`` (by default newline and tab, which a
    terminal, an HTML page or a Markdown renderer only lays out). Everything else, non-ASCII letters included,
    is left as it is. The one escaping function of alflow's reports and CLI tables: a model name such as
    ``"\x1b]0;pwned\x07"`` can neither retitle nor clear a terminal that shows it.
    """
    text = str(value)

    def swap(match: re.Match[str]) -> str:
        char = match.group()
        if char in keep or unicodedata.category(char) not in CONTROL_CATEGORIES:
            return char
        return _escaped(char)

    return _NOT_PRINTABLE_ASCII.sub(swap, text)


def _one_line(value: object) -> str:
    """``value`` with controls escaped (CR, LF and tab kept) and each run of white space one space."""
    return " ".join(escape_controls(value, keep="\t\n\r").split())


def escape_md(value: object) -> Markup:
    """``value`` as inert Markdown text: specials escaped, HTML entities, one line (see the module doc)."""
    text = _one_line(value)
    out = [_ENTITIES.get(c) or (f"\\{c}" if c in MD_SPECIAL else c) for c in text]
    return Markup("".join(out))  # noqa: S704 (escaped above)


def md_cell(value: object) -> Markup:
    """A table cell: :func:`escape_md` (pipes included), a formatted number as it is, never empty."""
    text = _one_line(value)
    if not text:
        return Markup(" ")
    if _PLAIN_NUMBER.fullmatch(text):
        return Markup(text)  # noqa: S704 (digits and number punctuation only)
    return escape_md(text)


def _finalize(value: object) -> object:
    """Escape every expression's value unless it is escaped already (Markup) or a number."""
    if isinstance(value, Markup):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    return escape_md("" if value is None else value)


def markdown_environment() -> jinja2.Environment:
    """The jinja2 environment of Markdown templates: escapes by default, strict undefined, ``md`` and ``cell``."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("alflow.reports", "templates"),
        autoescape=False,  # noqa: S701 (Markdown: _finalize and the filters escape; HTML escaping would not)
        finalize=_finalize,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["md"] = escape_md
    env.filters["cell"] = md_cell
    return env


MARKDOWN_ENV: Final = markdown_environment()


def render_markdown(template: str, **context: object) -> str:
    """Render Markdown template ``template`` with ``context``."""
    return MARKDOWN_ENV.get_template(template).render(**context)


def num(value: object, digits: int = 2) -> str:
    """A number with ``digits`` decimals, '' when missing (the flows' tables)."""
    if value is None or isinstance(value, bool):
        return ""
    try:
        return f"{float(str(value)):.{digits}f}"
    except ValueError:
        return ""


# --------------------------------------------------------------------------------------------
# What the flows publish: typed summaries, rendered by one template each


@dataclass(frozen=True)
class FlowSummary:
    """Base of a flow's Markdown summary: title, the engine's label, where the run is stored."""

    template: ClassVar[str] = ""
    title: ClassVar[str] = ""
    run_dir: str
    engine_note: str | None

    def markdown(self) -> str:
        """The whole artifact text (also saved as ``report.md``); the run directory without credentials."""
        return render_markdown(self.template, s=self, title=self.title, run_dir=redact_url(self.run_dir))


@dataclass(frozen=True)
class M0Row:
    """One calibrated point of the M0 table."""

    model: str
    thinking: str
    k: int
    al: float
    num_drafts: int | None


@dataclass(frozen=True)
class M0Summary(FlowSummary):
    """M0 calibration: the reference table written and what changed."""

    template: ClassVar[str] = "flow_m0.md.j2"
    title: ClassVar[str] = "M0 calibration"
    reference_path: str
    kind: str
    dataset: str
    category: str
    rows: Sequence[M0Row]
    cached_points: Sequence[str] = ()
    changed: int | None = None
    """Points changed or added against the previous table (None: there was none)."""
    failures: Sequence[str] = ()
    """Why the run failed (a point aborted mid-way is PARTIAL); the reference table was then not updated."""


@dataclass(frozen=True)
class M1Verdict:
    """One gate of M1 and its message."""

    gate: str
    passed: bool
    message: str


@dataclass(frozen=True)
class M1Summary(FlowSummary):
    """M1 evaluation gate: the verdicts and the prompts used."""

    template: ClassVar[str] = "flow_m1.md.j2"
    title: ClassVar[str] = "M1 evaluation gate"
    subject: str
    passed: bool
    verdicts: Sequence[M1Verdict]
    dataset: str
    category: str
    sessions: int
    partial: str | None = None
    """Why the run's measurement is partial (a point aborted, the run failed mid-way), None when whole."""


@dataclass(frozen=True)
class M2Summary(FlowSummary):
    """M2 synthetic benchmark: one row per concurrency, and the failures."""

    template: ClassVar[str] = "flow_m2.md.j2"
    title: ClassVar[str] = "M2 synthetic benchmark"
    model: str
    framework: str
    k: int
    target_al: float
    scheme: str | None
    granularity: str
    gpus: int
    nodes: int
    points: Sequence[Mapping[str, Any]]
    failures: Sequence[str] = field(default_factory=tuple)

    def table(self) -> list[tuple[str, str, str, str, str, str, str, str]]:
        """Formatted cells: concurrency, tok/s/GPU, interactivity, TPOT, achieved AL, AL source, shape p, valid."""
        return [
            (
                str(p.get("concurrency")),
                num(p.get("output_throughput_per_gpu"), 1),
                num(p.get("median_interactivity_tokens_per_s"), 1),
                num(p.get("median_tpot_ms")),
                num(p.get("achieved_al"), 4),
                str(p.get("al_source") or "-"),
                _p_value(p.get("fit_p_value")),
                "yes" if p.get("valid") else "NO, partial" if p.get("partial") else "NO",
            )
            for p in self.points
        ]


def _p_value(value: object) -> str:
    """A shape test's p with 3 significant digits, ``-`` when the point was not tested."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "-"
    return f"{value:.3g}"


@dataclass(frozen=True)
class SweepSummary(FlowSummary):
    """The K sweep: each K's M1 and M2 (child run, node, state), the best K per concurrency, failures."""

    template: ClassVar[str] = "flow_sweep.md.j2"
    title: ClassVar[str] = "K sweep"
    model: str
    framework: str
    mode: str
    per_k: Sequence[Mapping[str, Any]]
    best_k: Sequence[Mapping[str, Any]]
    failures: Sequence[str] = field(default_factory=tuple)
    lost_nodes: Sequence[str] = field(default_factory=tuple)
    k_choice: Sequence[Mapping[str, Any]] = field(default_factory=tuple)
    """:meth:`alflow.kchoice.KChoice.to_dict` per objective and concurrency."""
    spread: Sequence[Mapping[str, Any]] = field(default_factory=tuple)
    """:func:`alflow.kchoice.spread_rows`: per (concurrency, K) the repeats' median, MAD, min and max."""
    repeats: int = 1
    rule: str = ""
    """How K was chosen (:data:`alflow.kchoice.RULE`)."""

    def spread_table(self) -> list[tuple[str, ...]]:
        """Formatted cells: concurrency, K, valid/stored repeats, then per objective median, MAD, min..max, score."""
        out: list[tuple[str, ...]] = []
        for r in self.spread:
            cells = [str(r.get("concurrency")), str(r.get("k")), f"{r.get('n')}/{r.get('repeats')}"]
            for name, digits in (("throughput", 1), ("interactivity", 1)):
                low, high = num(r.get(f"{name}_min"), digits), num(r.get(f"{name}_max"), digits)
                cells += [
                    num(r.get(f"{name}_median"), digits) or "-",
                    num(r.get(f"{name}_mad"), digits) or "-",
                    f"{low}..{high}" if low else "-",
                    num(r.get(f"{name}_score"), digits) or "-",
                ]
            out.append(tuple(cells))
        return out

    def choice_table(self) -> list[tuple[str, ...]]:
        """Formatted cells: concurrency, objective, chosen K, its score, median ± MAD, ties, best-score K, runner-up."""
        out: list[tuple[str, ...]] = []
        for c in self.k_choice:
            runner = c.get("runner_up_k")
            out.append(
                (
                    str(c.get("concurrency")),
                    str(c.get("objective")),
                    str(c.get("chosen_k")),
                    num(c.get("chosen_score"), 1),
                    f"{num(c.get('chosen_median'), 1)} +- {num(c.get('chosen_mad'), 1)}",
                    ", ".join(str(k) for k in c.get("ties") or []),
                    f"{c.get('best_score_k')} ({num(c.get('best_score'), 1)})",
                    "-" if runner is None else f"{runner} ({num(c.get('runner_up_score'), 1)})",
                )
            )
        return out

    def table(self) -> list[tuple[str, str, str, str, str, str]]:
        """Formatted cells: K, node, M1 result (state, run), M2 result (state, run), cached steps."""

        def step(row: Mapping[str, Any], name: str) -> str:
            result = row.get(name)
            if result is None:
                return "not run"
            run = row.get(f"{name}_run")
            state = row.get(f"{name}_state")
            return f"{result} ({state}{', ' + str(run) if run else ''})"

        return [
            (
                str(r.get("k")),
                str(r.get("node") or "this process"),
                step(r, "gate"),
                step(r, "benchmark"),
                ", ".join(
                    n for n, c in (("M1", r.get("gate_cached")), ("M2", r.get("benchmark_cached"))) if c
                )
                or "-",
                str(r.get("benchmark_dir") or "-"),
            )
            for r in self.per_k
        ]

    def best_table(self) -> list[tuple[str, str, str, str, str]]:
        """Formatted cells: concurrency, best K by throughput/GPU and its figure, by interactivity and its figure."""
        return [
            (
                str(b.get("concurrency")),
                str(b.get("best_k_throughput") or "-"),
                num(b.get("output_throughput_per_gpu"), 1),
                str(b.get("best_k_interactivity") or "-"),
                num(b.get("median_interactivity_tokens_per_s"), 1),
            )
            for b in self.best_k
        ]
