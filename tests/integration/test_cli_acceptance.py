"""The acceptance-core commands, through the installed `alflow` console script."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
ALFLOW = shutil.which("alflow", path=str(Path(sys.executable).parent)) or "alflow"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ALFLOW, *args], capture_output=True, text=True, timeout=60, check=False)


def test_trtllm_knob_json() -> None:
    out = run("synthetic", "knobs", "--framework", "trtllm", "--k", "3", "--al", "2.78", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["env"]["TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS"] == "1.78"
    assert float(data["env"]["TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS"]) == 1.78


def test_vllm_knob_rates() -> None:
    out = run("synthetic", "knobs", "--framework", "vllm", "--k", "3", "--al", "2.49", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["rates"] == [1.0, 0.49, 0.0]
    assert data["speculative_config"]["synthetic_acceptance_length"] == 2.49


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (
            ("synthetic", "knobs", "--framework", "vllm", "--k", "3", "--al", "4.5"),
            "target AL 4.5 is outside",
        ),
        (("synthetic", "knobs", "--framework", "vllm", "--k", "20", "--al", "2"), "K=20 is not allowed"),
        (("synthetic", "knobs", "--framework", "tgi", "--k", "3", "--al", "2"), "unknown framework 'tgi'"),
        (
            ("synthetic", "knobs", "--framework", "vllm", "--k", "3", "--rates", "1,x,0"),
            "--rates value 2 'x'",
        ),
        (("synthetic", "compare", "--k", "3", "--al", "0.5"), "target AL 0.5 is outside"),
        (
            ("synthetic", "knobs", "--framework", "vllm", "--k", "three", "--al", "2"),
            "Invalid value for '--k'",
        ),
    ],
)
def test_invalid_input_exits_non_zero_naming_the_value(args: tuple[str, ...], fragment: str) -> None:
    out = run(*args)
    assert out.returncode == 2
    assert fragment in " ".join(out.stderr.split())
    assert "Traceback" not in out.stderr


def test_compare_shows_multinomial_bias() -> None:
    out = run("synthetic", "compare", "--k", "3", "--al", "3.39", "--json")
    assert out.returncode == 0, out.stderr
    rows = {r["scheme"]: r for r in json.loads(out.stdout)["schemes"]}
    assert rows["sglang-multinomial"]["mean_al"] == pytest.approx(3.24, abs=0.005)
    assert rows["sglang-multinomial"]["bias"] == pytest.approx(-0.15, abs=0.005)
    assert rows["vllm"]["bias"] == 0.0
    table = run("synthetic", "compare", "--k", "1", "--al", "1.79")
    assert table.returncode == 0
    assert "sglang-multinomial" in table.stdout
    assert "-0.1759" in table.stdout


def test_reference_commands(tmp_path: Path) -> None:
    examples = ROOT / "references" / "examples.yaml"
    out = run("reference", "validate", str(examples), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"path": str(examples), "valid": True, "kind": "example", "entries": 32}
    shown = run("reference", "show", str(examples), "--model", "Qwen3.5")
    assert "3.390" in shown.stdout
    assert "example table" in shown.stdout

    data = yaml.safe_load(examples.read_text())
    data["entries"][2]["al"] = 3.5
    data["entries"] = data["entries"][:-1]
    changed = tmp_path / "new.yaml"
    changed.write_text(yaml.safe_dump(data))
    diff = run("reference", "diff", str(examples), str(changed), "--json")
    assert diff.returncode == 0, diff.stderr
    rows = [r for r in json.loads(diff.stdout)["rows"] if r["status"] != "unchanged"]
    assert [(r["model"], r["k"], r["status"]) for r in rows] == [
        ("DeepSeek-V4", 3, "changed"),
        ("Kimi-K2.5", 8, "removed"),
    ]
    assert rows[0]["delta"] == pytest.approx(3.5 - 2.49)

    data["entries"][0]["k"] = 0
    changed.write_text(yaml.safe_dump(data))
    bad = run("reference", "validate", str(changed))
    assert bad.returncode == 2
    assert str(changed) in bad.stderr
    assert "entries[0]" in bad.stderr
