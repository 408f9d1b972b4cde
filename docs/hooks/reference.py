"""MkDocs hook: the command-line and configuration references, generated at build time (never hand-copied).

- ``reference/cli.md``: every command of the ``alflow`` Typer app (:data:`alflow.cli.root.app`), walked through
  ``typer.main.get_command``: its usage line, its help and a table of its arguments and options, each row the
  record ``--help`` prints (names, type, help, default).
- ``reference/config.md``: the configuration models of :mod:`alflow.config` (the flows' parameters and the
  server presets) from their pydantic JSON schema (``model_json_schema()``): one table of fields per model, and
  every nested model once, linked from the types that use it.

Both pages are added to the build as generated files (``on_files``), so ``mkdocs.yml`` lists them in ``nav``
like any page and ``mkdocs build --strict`` fails when one goes missing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import typer
import typer.main
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from pydantic import BaseModel

CLI_PAGE = "reference/cli.md"
CONFIG_PAGE = "reference/config.md"

Schema = Mapping[str, Any]
"""One JSON schema (or sub-schema) as pydantic writes it."""

_MD_SPECIAL = re.compile(r"([\\`*_\[\]|<>#])")
_ENTITIES = {"|": "&#124;", "<": "&lt;", ">": "&gt;"}


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the two generated reference pages to the build."""
    files.append(File.generated(config, CLI_PAGE, content=cli_reference()))
    files.append(File.generated(config, CONFIG_PAGE, content=config_reference()))
    return files


def text(value: str) -> str:
    """``value`` as Markdown text that shows as typed (one line; Markdown's special characters escaped)."""
    escaped = _MD_SPECIAL.sub(lambda m: _ENTITIES.get(m[1], "\\" + m[1]), value)
    return " ".join(escaped.split())


def code(value: str) -> str:
    """``value`` as inline code (HTML for one holding a pipe, so that a table cell stays one cell)."""
    if "|" in value:
        return "<code>" + "".join(_ENTITIES.get(ch, ch) for ch in value.replace("&", "&amp;")) + "</code>"
    fence = "``" if "`" in value else "`"
    pad = " " if value.startswith("`") or value.endswith("`") else ""
    return f"{fence}{pad}{value}{pad}{fence}"


def anchor(name: str) -> str:
    """The HTML id of a heading for ``name`` (lowercase letters, digits and dashes)."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


# --------------------------------------------------------------------------------------------
# The command line


def _commands(
    command: Any, ctx: typer.Context, path: tuple[str, ...]
) -> Iterator[tuple[tuple[str, ...], Any, Any]]:
    """Every visible command under ``command`` (itself first), with its words and its context, depth first."""
    yield path, command, ctx
    if not hasattr(command, "list_commands"):
        return
    for name in command.list_commands(ctx):
        sub = command.get_command(ctx, name)
        if sub is None or getattr(sub, "hidden", False):
            continue
        yield from _commands(sub, typer.Context(sub, info_name=name, parent=ctx), (*path, name))


def _help_paragraphs(help_text: str | None) -> list[str]:
    """The command's help as Markdown paragraphs (a blank line in the docstring starts a paragraph)."""
    if not help_text:
        return []
    paragraphs = re.split(r"\n\s*\n", help_text.replace("\b", "").strip())
    return [text(p) for p in paragraphs if p.strip()]


def _param_rows(command: Any, ctx: typer.Context) -> list[str]:
    """One table row per visible argument or option: what ``--help`` prints for it."""
    rows: list[str] = []
    for param in command.params:
        if getattr(param, "hidden", False):
            continue
        record = param.get_help_record(ctx)
        if record is None:
            continue
        names, help_text = record
        kind = "argument" if type(param).__name__.endswith("Argument") else "option"
        rows.append(f"| {code(names)} | {kind} | {text(help_text) or ' '} |")
    return rows


def command_section(path: tuple[str, ...], command: Any, ctx: typer.Context) -> list[str]:
    """The Markdown of one command: heading, usage, help, the parameters' table, its subcommands."""
    name = " ".join(("alflow", *path))
    level = "#" * min(2 + max(len(path) - 1, 0), 4) if path else "##"
    lines = [f"{level} `{name}` {{#{anchor('cli ' + name)}}}", ""]
    lines += ["```text", command.get_usage(ctx).strip(), "```", ""]
    for paragraph in _help_paragraphs(command.help):
        lines += [paragraph, ""]
    rows = _param_rows(command, ctx)
    if rows:
        lines += ["| name | kind | help |", "|---|---|---|", *rows, ""]
    if hasattr(command, "list_commands"):
        subs = [
            s for s in command.list_commands(ctx) if not getattr(command.get_command(ctx, s), "hidden", False)
        ]
        if subs:
            links = ", ".join(f"[`{s}`](#{anchor('cli ' + name + ' ' + s)})" for s in subs)
            lines += [f"Commands: {links}.", ""]
    return lines


def cli_reference() -> str:
    """The page ``reference/cli.md``: every command of ``alflow``, generated from the Typer app."""
    from alflow.cli.root import app

    root = typer.main.get_command(app)
    ctx = typer.Context(root, info_name="alflow")
    lines = [
        "# Command line reference",
        "",
        "Generated at build time from the `alflow` command itself (`alflow.cli.root.app`, walked through Typer): "
        "each command's usage, help and options are what its `--help` prints. The one-line overview is "
        "[The command line at a glance](index.md).",
        "",
    ]
    for path, command, cctx in _commands(root, ctx, ()):
        lines += command_section(path, command, cctx)
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# The configuration


def _config_models() -> list[tuple[str, type[BaseModel]]]:
    """The models a user writes: the flows' parameters (YAML config, Prefect form) and the server presets."""
    from alflow.config import (
        BenchmarkParams,
        CalibrateParams,
        DemoParams,
        GateParams,
        ServerPreset,
        SweepParams,
    )

    return [
        ("M0 calibration: `alflow run m0`, flow `m0-calibrate`", CalibrateParams),
        ("M1 gate: `alflow run m1`, flow `m1-gate`", GateParams),
        ("M2 benchmark: `alflow run m2`, flow `m2-benchmark`", BenchmarkParams),
        ("K sweep: `alflow run sweep`, flow `sweep`", SweepParams),
        ("The demo: `alflow demo`", DemoParams),
        ("A server preset: `presets/<name>.yaml`", ServerPreset),
    ]


def type_of(schema: Schema) -> str:
    """A field's type in words, nested models linked to their section."""
    if "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        return f"[{name}](#{anchor(name)})"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " or ".join(dict.fromkeys(type_of(s) for s in schema[key]))
    if "allOf" in schema and len(schema["allOf"]) == 1:
        return type_of(schema["allOf"][0])
    if "const" in schema:
        return code(json.dumps(schema["const"]))
    if "enum" in schema:
        return "one of " + ", ".join(code(json.dumps(v)) for v in schema["enum"])
    kind = schema.get("type")
    if kind == "array":
        if "prefixItems" in schema:
            return "tuple of (" + ", ".join(type_of(s) for s in schema["prefixItems"]) + ")"
        return "list of " + type_of(schema.get("items", {}))
    if kind == "object" and isinstance(schema.get("additionalProperties"), Mapping):
        return "map of string to " + type_of(schema["additionalProperties"])
    if isinstance(kind, str):
        return kind
    return "any"


_BOUNDS = (
    ("minimum", ">="),
    ("exclusiveMinimum", ">"),
    ("maximum", "<="),
    ("exclusiveMaximum", "<"),
    ("minLength", "length >="),
    ("maxLength", "length <="),
    ("minItems", "items >="),
    ("maxItems", "items <="),
)


def _bounds(schema: Schema) -> list[str]:
    """The numeric and length bounds of a field (also inside ``anyOf`` members such as ``X or null``)."""
    found = [f"{word} {schema[key]}" for key, word in _BOUNDS if key in schema]
    for member in schema.get("anyOf", ()):
        found += [b for b in _bounds(member) if b not in found]
    return found


def _default(field: Schema, required: bool) -> str:
    if required:
        return "required"
    if "default" not in field:
        return " "
    shown = json.dumps(field["default"], ensure_ascii=False)
    return code(shown if len(shown) <= 60 else shown[:57] + "...")


def model_table(schema: Schema) -> list[str]:
    """The fields of one object schema as a table: name, type, default, description and bounds."""
    properties: Mapping[str, Schema] = schema.get("properties", {})
    if not properties:
        return ["No fields.", ""]
    required = set(schema.get("required", ()))
    lines = ["| field | type | default | description |", "|---|---|---|---|"]
    for name, field in properties.items():
        description = text(str(field.get("description", "")))
        bounds = _bounds(field)
        if bounds:
            description = f"{description} ({text(', '.join(bounds))})".strip()
        lines.append(
            f"| {code(name)} | {type_of(field)} | {_default(field, name in required)} | {description or ' '} |"
        )
    return [*lines, ""]


def _model_section(level: str, name: str, schema: Schema, title: str | None = None) -> list[str]:
    heading = f"{level} {title or name} {{#{anchor(name)}}}"
    lines = [heading, ""]
    if title:
        lines += [f"Model `{name}`.", ""]
    if schema.get("description"):
        lines += [text(str(schema["description"])), ""]
    if schema.get("type") == "object" or "properties" in schema:
        return lines + model_table(schema)
    return [*lines, f"Type: {type_of(schema)}.", ""]


def config_reference() -> str:
    """The page ``reference/config.md``: the configuration models' JSON schemas as tables."""
    lines = [
        "# Configuration reference",
        "",
        "Generated at build time from the pydantic models of `alflow.config` (`model_json_schema()`). A config file "
        "(`alflow run m0|m1|m2|sweep --config FILE.yaml`) holds one flow's parameter model; the same fields are the "
        "Prefect UI's form of each deployment (its advanced `params`), and a preset file holds a `ServerPreset`. "
        "Every model is frozen and refuses unknown fields. Strings are also refused when they hold a credential in "
        "a URL ([Security](../running/security.md)).",
        "",
    ]
    definitions: dict[str, Schema] = {}
    models = _config_models()
    for title, model in models:
        schema = model.model_json_schema()
        for name, definition in schema.get("$defs", {}).items():
            if definitions.setdefault(name, definition) != definition:  # two models of one name: one section
                raise ValueError(f"configuration reference: two different nested models are named {name!r}")
        lines += _model_section("##", model.__name__, schema, title=title)
    lines += ["## Nested models", ""]
    top = {model.__name__ for _, model in models}  # already a section above: one anchor per model
    for name in sorted(set(definitions) - top):
        lines += _model_section("###", name, definitions[name])
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    """Print one generated page (``cli`` or ``config``): ``python docs/hooks/reference.py cli``."""
    import sys

    which = (list(argv) if argv is not None else sys.argv[1:]) or ["cli"]
    page = cli_reference() if which[0] == "cli" else config_reference()
    sys.stdout.write(page)


if __name__ == "__main__":
    main()
