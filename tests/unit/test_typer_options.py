"""Typer commands built from a dataclass of their options (alflow.util.typer_options.command_of)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

from alflow.util.typer_options import command_of

pytestmark = pytest.mark.unit


@dataclass(frozen=True)
class Opts:
    url: Annotated[str, typer.Option(help="Where.")]
    count: Annotated[int, typer.Option(help="How many.")] = 2
    key: Annotated[str | None, typer.Option(envvar="ALFLOW_TEST_KEY", help="A key.")] = field(
        default=None, repr=False
    )


def test_the_options_are_the_fields_with_their_defaults_help_and_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    got: list[Opts] = []

    def _go(o: Opts) -> None:
        """Do it."""
        got.append(o)

    app = typer.Typer()
    app.command("go")(command_of(Opts, _go))
    app.command("other")(lambda: None)  # two commands: the group keeps "go" as a subcommand
    monkeypatch.setenv("ALFLOW_TEST_KEY", "k1")
    result = CliRunner().invoke(app, ["go", "--url", "http://x"])
    assert result.exit_code == 0, result.output
    assert got == [Opts(url="http://x", count=2, key="k1")]
    assert "k1" not in repr(got[0])
    missing = CliRunner().invoke(app, ["go"])
    assert missing.exit_code == 2
    assert "--url" in missing.output
    helped = CliRunner().invoke(app, ["go", "--help"])
    assert "Do it." in helped.output
    assert "How many." in helped.output


def test_with_the_context_the_command_hands_it_over_first() -> None:
    seen: list[tuple[list[str], Opts]] = []

    def _go(ctx: typer.Context, o: Opts) -> None:
        seen.append((list(ctx.args), o))

    app = typer.Typer()
    app.command("go", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(
        command_of(Opts, _go, context=True)
    )
    app.command("other")(lambda: None)
    result = CliRunner().invoke(app, ["go", "--url", "u", "--count", "5", "--own-flag", "1"])
    assert result.exit_code == 0, result.output
    assert seen == [(["--own-flag", "1"], Opts(url="u", count=5))]


def test_a_field_typer_cannot_show_as_an_option_is_refused() -> None:
    @dataclass(frozen=True)
    class Listed:
        xs: Annotated[list[str], typer.Option()] = field(default_factory=list)

    with pytest.raises(TypeError, match=r"Listed\.xs: an option needs a plain default"):
        command_of(Listed, lambda o: None)
