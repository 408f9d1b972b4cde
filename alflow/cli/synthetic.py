"""``alflow synthetic``: a framework's synthetic-acceptance setting, and every scheme side by side."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from alflow.acceptance import synthetic as syn
from alflow.cli.common import JsonOpt, console, emit_json, handle_errors, say, say_err
from alflow.errors import InvalidInputError
from alflow.frameworks.recipe_kit import render_knobs
from alflow.util.rows import dump_row

synthetic_app = typer.Typer(
    help="Synthetic acceptance: framework knobs and scheme comparison.", no_args_is_help=True
)


def register(app: typer.Typer) -> None:
    """Add ``alflow synthetic`` to ``app``."""
    app.add_typer(synthetic_app, name="synthetic")


def parse_rates(text: str | None) -> tuple[float, ...] | None:
    """Parse ``--rates 1,0.49,0`` into floats, naming a value that is not a number."""
    if text is None:
        return None
    out = []
    for i, part in enumerate(text.split(","), start=1):
        try:
            out.append(float(part.strip()))
        except ValueError:
            raise InvalidInputError(f"--rates value {i} {part.strip()!r} is not a number") from None
    return tuple(out)


KOpt = Annotated[int, typer.Option("--k", help="Number of speculative tokens K (1..16).")]
AlOpt = Annotated[float | None, typer.Option("--al", help="Target acceptance length L (1..K+1).")]
RatesOpt = Annotated[
    str | None, typer.Option("--rates", help="Explicit unconditional per-position rates, comma-separated.")
]


def check_target_options(k: int, al: float | None, rates: tuple[float, ...] | None) -> None:
    """``--k``, ``--al`` and ``--rates`` each valid on its own; the error names the option."""
    checks: list[tuple[str, object, Callable[[], object]]] = [("--k", k, lambda: syn.validate_k(k))]
    if al is not None:
        checks.append(("--al", al, lambda: syn.validate_al(al, k)))
    if rates is not None:
        checks.append(("--rates", ",".join(f"{r:g}" for r in rates), lambda: syn.validate_rates(rates, k)))
    for option, value, check in checks:
        try:
            check()
        except InvalidInputError as exc:
            raise InvalidInputError(f"{option} {value}: {exc}") from None


@synthetic_app.command("knobs")
@handle_errors
def synthetic_knobs(
    framework: Annotated[
        str,
        typer.Option(
            "--framework", help="A framework with synthetic acceptance (alflow frameworks lists them)."
        ),
    ],
    k: KOpt,
    al: AlOpt = None,
    rates: RatesOpt = None,
    scheme: Annotated[
        str | None, typer.Option("--scheme", help="Override the framework's scheme (sglang-multinomial).")
    ] = None,
    method: Annotated[
        str | None,
        typer.Option("--method", help="Speculative method (decides TensorRT-LLM's two-model path)."),
    ] = None,
    two_model: Annotated[
        bool | None, typer.Option("--two-model/--one-model", help="TensorRT-LLM: force the path.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Print the framework's synthetic-acceptance setting for K and a target AL (or rates)."""
    check_target_options(k, al, parse_rates(rates))
    result = render_knobs(
        framework, k, al=al, rates=parse_rates(rates), scheme=scheme, method=method, two_model=two_model
    )
    if as_json:
        emit_json(dump_row(result))
        return
    table = Table(title=f"{escape(framework)} synthetic acceptance, K={k}", show_header=False)
    for name, value in result.env.items():
        table.add_row("env", Text(f"{name}={value}"))
    if result.speculative_config:
        table.add_row("--speculative-config", Text(json.dumps(result.speculative_config)))
    if result.distribution is not None:
        d = result.distribution
        table.add_row("scheme", Text(f"{result.scheme} ({d.granularity})"))
        table.add_row("expected AL", f"{d.mean:.6g} (bias {d.bias:+.4g}, variance {d.variance:.4g})")
        table.add_row("per-position rates", ", ".join(f"{p:.6g}" for p in d.per_position_rates))
    console.print(table)
    for warning in result.warnings:
        say_err(f"warning: {warning}")


@synthetic_app.command("compare")
@handle_errors
def synthetic_compare(k: KOpt, al: AlOpt = None, rates: RatesOpt = None, as_json: JsonOpt = False) -> None:
    """Compare every scheme's accept-length distribution for K and a target AL (or rates)."""
    check_target_options(k, al, parse_rates(rates))
    comparison = syn.compare_schemes(k, al=al, rates=parse_rates(rates))
    if as_json:
        emit_json(dump_row(comparison))
        return
    table = Table(title=f"Synthetic acceptance schemes for {escape(comparison.target.describe())}, K={k}")
    for col in ("scheme", "draw", "mean AL", "bias", "variance"):
        table.add_column(col, justify="left" if col in ("scheme", "draw") else "right")
    for j in range(1, k + 2):
        table.add_column(f"P(len={j})", justify="right")
    for d in comparison.schemes:
        biased = abs(d.bias) > 1e-9
        bias = f"{d.bias if biased else 0.0:+.4f}"
        style = "bold red" if biased else None
        table.add_row(
            Text(d.scheme),
            Text(d.granularity),
            f"{d.mean:.4f}",
            bias,
            f"{d.variance:.4f}",
            *(f"{p:.4f}" for p in d.pmf),
            style=style,
        )
    console.print(table)
    console.print(
        "per-batch: one draw per verify step shared by the whole batch (same mean, but batch-level "
        "variance does not average out); red: the scheme's mean differs from the target",
        highlight=False,
    )
    for name, why in comparison.skipped.items():
        say(f"skipped {name}: {why}")
