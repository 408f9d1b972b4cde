"""Hostile round 17 of issue #49: identifiers with invisible characters, and reference tables' model ids.

A zero-width space was accepted in a model id while RLO was refused: ``llama\\u200b-70b`` looks like ``llama-70b`` and
started its own trend and regression history. A reference table's model id with ESC or RLO passed ``alflow
reference validate`` while the configuration refused it. Every format character (Unicode Cf: bidi, zero-width,
soft hyphen, BOM) is now refused in an identifier, and a table's model and draft model ids take the same check.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from alflow.cli import app
from alflow.util.names import check_identifier

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
INVISIBLE = [
    "llama\u200b-70b",
    "llama\u200c-70b",
    "llama\u200d-70b",
    "lla\u00adma",
    "\ufeffllama",
    "llama\u2060",
]


@pytest.mark.parametrize("value", INVISIBLE)
def test_an_identifier_with_an_invisible_character_is_refused_naming_it(value: str) -> None:
    with pytest.raises(
        ValueError, match=r"holds the control character\(s\) U\+(200B|200C|200D|00AD|FEFF|2060)"
    ):
        check_identifier(value, what="model id")


@pytest.mark.parametrize(
    "value",
    [
        "meta-llama/Llama-3.3-70B-Instruct",
        "Qwen/Qwen3.5 (日本語)",
        "模型-1",
        "emoji \U0001f468\u200d\U0001f4bb",
    ],
)
def test_an_identifier_of_any_script_is_kept(value: str) -> None:
    assert check_identifier(value, what="model id") == value


@pytest.mark.parametrize("model", ["demo\x1b[2J", "demo\u202e70b", "demo\u200b"])
@pytest.mark.parametrize("field", ["model", "draft_model"])
def test_a_reference_tables_model_id_takes_the_configurations_check(
    model: str, field: str, tmp_path: Path
) -> None:
    table = yaml.safe_load((REPO / "references" / "examples.yaml").read_text(encoding="utf-8"))
    entry = table["entries"][0]
    if field == "draft_model":
        entry["method"] = "draft_model"
    entry[field] = model
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(table), encoding="utf-8")
    ran = CliRunner().invoke(app, ["reference", "validate", str(path)])
    assert ran.exit_code == 2, ran.output
    lines = ran.output.strip().splitlines()
    assert len(lines) == 1, ran.output
    assert f"entries[0].{field}" in lines[0], lines[0]
    assert "control character(s)" in lines[0], lines[0]
    assert "\x1b" not in lines[0]
    assert "\u202e" not in lines[0]


def test_the_examples_table_still_validates() -> None:
    ran = CliRunner().invoke(app, ["reference", "validate", str(REPO / "references" / "examples.yaml")])
    assert ran.exit_code == 0, ran.output
