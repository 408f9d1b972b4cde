"""The documentation site: ``mkdocs build --strict`` passes, and its generated references are complete.

The build runs as ``.venv/bin/mkdocs build --strict`` does (this interpreter's mkdocs, the repository's
``mkdocs.yml``), into a temporary folder. ``--strict`` fails on a broken link, a missing anchor or a page left out
of the nav; the hook ``docs/hooks/reference.py`` generates the command-line and configuration references, and the
test checks that they name every command of the ``alflow`` app and every field of every configuration model.
"""

from __future__ import annotations

import html
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
import typer.main

from alflow.config import BenchmarkParams, CalibrateParams, DemoParams, GateParams, ServerPreset, SweepParams

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _command_names() -> list[str]:
    """``alflow``, ``alflow bench``, ``alflow report show``, ...: every visible command of the app."""
    from alflow.cli.root import app

    names: list[str] = []

    def walk(command: object, ctx: typer.Context, path: tuple[str, ...]) -> None:
        names.append(" ".join(("alflow", *path)))
        if not hasattr(command, "list_commands"):
            return
        for name in command.list_commands(ctx):  # type: ignore[attr-defined]
            sub = command.get_command(ctx, name)  # type: ignore[attr-defined]
            if sub is not None and not sub.hidden:
                walk(sub, typer.Context(sub, info_name=name, parent=ctx), (*path, name))

    root = typer.main.get_command(app)
    walk(root, typer.Context(root, info_name="alflow"), ())
    return names


def test_the_site_builds_strict_with_the_generated_references(tmp_path: Path) -> None:
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    assert "WARNING" not in done.stderr, done.stderr[-4000:]

    cli = html.unescape((site / "reference" / "cli" / "index.html").read_text(encoding="utf-8"))
    names = _command_names()
    assert len(names) > 30
    missing = [name for name in names if f"Usage: {name} " not in cli and f"Usage: {name}\n" not in cli]
    assert not missing, f"commands without their usage in the CLI reference: {missing}"
    assert "--base-url" in cli  # options are listed, from --help's own records

    config = (site / "reference" / "config" / "index.html").read_text(encoding="utf-8")
    for model in (CalibrateParams, GateParams, BenchmarkParams, SweepParams, DemoParams, ServerPreset):
        assert f'id="{model.__name__.lower()}"' in config, model.__name__
        for field in model.model_fields:
            assert f"<code>{field}</code>" in config, f"{model.__name__}.{field}"

    for page in ("getting-started", "methods", "measurements", "development", "frameworks/write-a-plugin"):
        assert (site / page / "index.html").is_file(), page
