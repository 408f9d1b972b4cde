"""Typer commands built from a dataclass of their options: each option declared once, handed over as one value."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any, Literal, TypeVar, get_type_hints, overload

import typer

Opts = TypeVar("Opts")


@overload
def command_of(
    options: type[Opts], run: Callable[[Opts], None], *, context: Literal[False] = False
) -> Callable[..., None]: ...


@overload
def command_of(
    options: type[Opts], run: Callable[[typer.Context, Opts], None], *, context: Literal[True]
) -> Callable[..., None]: ...


def command_of(
    options: type[Opts], run: Callable[..., None], *, context: bool = False
) -> Callable[..., None]:
    """A Typer command whose options are the fields of the dataclass ``options``, handed to ``run`` as one value.

    Each option is declared once, as a field (its ``Annotated`` type carries the ``typer.Option``, its default the
    option's): the command's signature is built from the fields, in order, so Typer sees the same options as if
    they were written out as parameters. ``run``'s docstring is the command's help. ``context``: ``run`` takes the
    click context first (``run(ctx, options)``), for a command that reads its extra arguments or option sources.
    A field Typer could not show as an option (a ``default_factory``, ``init=False``, one named ``ctx``) is refused.
    """
    hints = get_type_hints(options, include_extras=True)
    fields = dataclasses.fields(options)  # type: ignore[arg-type]
    for field in fields:
        if field.default_factory is not dataclasses.MISSING or not field.init or field.name == "ctx":
            raise TypeError(
                f"{options.__name__}.{field.name}: an option needs a plain default (or none) and init; not ctx"
            )
    ctx = [inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context)]
    params = ctx[: int(context)] + [
        inspect.Parameter(
            field.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=inspect.Parameter.empty if field.default is dataclasses.MISSING else field.default,
            annotation=hints[field.name],
        )
        for field in fields
    ]

    def command(**given: Any) -> None:
        ctx_value = [given.pop("ctx")] if context else []
        run(*ctx_value, options(**given))

    command.__signature__ = inspect.Signature(params, return_annotation=None)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params} | {"return": None}
    command.__doc__ = run.__doc__
    command.__name__ = run.__name__.removeprefix("_")
    return command
