"""The literature AL datasets: each loader on files in each published format, malformed rows, the workload."""

from __future__ import annotations

import gzip
import logging
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pytest
from pydantic import ValidationError

from alflow.config import CalibrateParams, ModelSpec, server_config
from alflow.config.workloads import LiteratureWorkload
from alflow.datasets.literature import SPECS, load_literature
from alflow.errors import InvalidInputError
from alflow.workloads import al_workload_sessions, dataset_description, reference_table_keys

pytestmark = pytest.mark.unit

ROWS: dict[str, list[dict[str, Any]]] = {
    "gsm8k": [
        {"question": "Tom has 3 apples and buys 4. How many?", "answer": "3 + 4 = <<3+4=7>>7\n#### 7"},
        {"question": "  A train goes 60 km/h for 2 h. Distance?\n", "answer": "60*2=120\n#### 1,200"},
    ],
    "math500": [
        {
            "problem": "Compute $\\sqrt{16}$.",
            "solution": "It is $4$.",
            "answer": "4",
            "subject": "Algebra",
            "level": 1,
            "unique_id": "test/algebra/1.json",
        },
        {
            "problem": "What is $2^{10}$?",
            "solution": "$1024$",
            "answer": "1024",
            "subject": "Prealgebra",
            "level": 2,
            "unique_id": "test/prealgebra/7.json",
        },
    ],
    "humaneval": [
        {
            "task_id": "HumanEval/0",
            "prompt": 'def add(a: int, b: int) -> int:\n    """Add two numbers."""\n',
            "canonical_solution": "    return a + b\n",
            "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n",
            "entry_point": "add",
        }
    ],
    "mbpp": [
        {
            "task_id": tid,
            "text": f"Write a function number {tid}.",
            "code": "def f():\n    pass",
            "test_list": ["assert f() is None"],
            "test_setup_code": "",
            "challenge_test_list": [],
        }
        for tid in (3, 11, 12, 510, 511)
    ],
    "mtbench": [
        {
            "prompt": ["Write a haiku about the sea.", "Now rewrite it as a limerick."],
            "prompt_id": 12345678,
            "category": "writing",
            "reference": [],
        }
    ],
}


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    name = path.name
    if name.endswith(".parquet"):
        pl.DataFrame(rows).write_parquet(path)
        return path
    data = b"".join(orjson.dumps(r) + b"\n" for r in rows)
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    return path


@pytest.mark.parametrize("fmt", ["jsonl", "jsonl.gz", "parquet"])
@pytest.mark.parametrize("name", sorted(ROWS))
def test_each_loader_reads_each_published_format_verbatim(tmp_path: Path, name: str, fmt: str) -> None:
    path = _write(tmp_path / f"{name}.{fmt}", ROWS[name])
    loaded = load_literature(name, path, max_tokens=77)
    field = {"gsm8k": "question", "math500": "problem", "humaneval": "prompt", "mbpp": "text"}
    if name == "mbpp":  # only the test task_ids 11..510 of mbpp.jsonl
        assert [s.session_id for s in loaded.sessions] == ["mbpp-11", "mbpp-12", "mbpp-510"]
        assert loaded.sessions[0].turns[0].prompt == "Write a function number 11."
    elif name == "mtbench":
        (session,) = loaded.sessions
        assert session.multiturn
        assert [t.prompt for t in session.turns] == ROWS[name][0]["prompt"]
        assert session.session_id == "mtbench-12345678"
        assert session.meta["category"] == "writing"
    else:
        assert [s.turns[0].prompt for s in loaded.sessions] == [r[field[name]] for r in ROWS[name]]
    assert all(t.max_tokens == 77 for s in loaded.sessions for t in s.turns)
    assert all(s.category == name and not s.prefix_messages for s in loaded.sessions)
    assert loaded.subset  # a few rows, not the published split
    assert (
        loaded.label()
        == f"{SPECS[name].source} (subset: {len(loaded.sessions)} of {SPECS[name].expected_rows} prompts)"
    )


def test_gsm8k_keeps_the_reference_number_and_math500_its_labels(tmp_path: Path) -> None:
    gsm = load_literature("gsm8k", _write(tmp_path / "g.jsonl", ROWS["gsm8k"]))
    assert [s.meta["answer"] for s in gsm.sessions] == ["7", "1200"]
    assert gsm.sessions[1].turns[0].prompt.startswith("  A train")  # whitespace kept: verbatim
    math = load_literature("math500", _write(tmp_path / "m.parquet", ROWS["math500"]))
    assert math.sessions[0].session_id == "test/algebra/1.json"
    assert math.sessions[0].meta["level"] == "1"
    assert math.sessions[0].meta["subject"] == "Algebra"


def test_fastchat_question_jsonl_spelling_of_mtbench_is_read(tmp_path: Path) -> None:
    row = {"question_id": 81, "category": "writing", "turns": ["one", "two"]}
    loaded = load_literature("mtbench", _write(tmp_path / "question.jsonl", [row]))
    assert [t.prompt for t in loaded.sessions[0].turns] == ["one", "two"]
    assert loaded.sessions[0].session_id == "mtbench-81"


def test_limit_and_count_warning_label_a_subset(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rows = [dict(ROWS["math500"][0], unique_id=f"id{i}") for i in range(500)]
    path = _write(tmp_path / "test.jsonl", rows)
    with caplog.at_level(logging.WARNING):
        full = load_literature("math500", path)
    assert not full.subset
    assert full.label() == "HuggingFaceH4/MATH-500"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    cut = load_literature("math500", path, limit=10)
    assert cut.subset
    assert len(cut.sessions) == 10
    assert cut.rows == 500
    with caplog.at_level(logging.WARNING):
        load_literature("math500", _write(tmp_path / "small.jsonl", rows[:499]))
    assert "holds 499 math500 rows; the published test split has 500" in caplog.text


@pytest.mark.parametrize(
    ("name", "line", "message"),
    [
        ("gsm8k", '{"question": "q"}', "line 2: field 'answer' is missing"),
        (
            "gsm8k",
            '{"question": "q", "answer": "no number"}',
            "line 2: field 'answer' has no '#### <number>'",
        ),
        ("math500", '{"problem": ""}', "line 2: field 'problem' is missing or not a non-empty string"),
        ("humaneval", '{"prompt": "def f():"}', "line 2: field 'task_id' is missing"),
        ("humaneval", '{"task_id": "HumanEval/1", "prompt": 5}', "line 2: field 'prompt'"),
        ("mbpp", '{"task_id": "11", "text": "x"}', "line 2: field 'task_id' is '11', expected an integer"),
        ("mbpp", '{"task_id": 11}', "line 2: field 'text' is missing"),
        ("mtbench", '{"prompt": "one string"}', "line 2: field 'prompt' (or FastChat's 'turns') is missing"),
        ("mtbench", '{"prompt": ["ok", ""]}', "line 2: field 'prompt[1]' is not a non-empty string"),
        ("mtbench", "[1, 2]", "line 2: row is a list, expected an object"),
        ("math500", "{not json", "line 2: not valid JSON"),
    ],
)
def test_malformed_row_names_file_line_and_field(tmp_path: Path, name: str, line: str, message: str) -> None:
    path = tmp_path / f"{name}.jsonl"
    path.write_bytes(orjson.dumps(ROWS[name][-1]) + b"\n" + line.encode() + b"\n")
    with pytest.raises(InvalidInputError) as err:
        load_literature(name, path)
    assert str(err.value).startswith(f"{path}:")
    assert message in str(err.value)


def test_malformed_parquet_row_names_the_row(tmp_path: Path) -> None:
    path = tmp_path / "test-00000-of-00001.parquet"
    pl.DataFrame({"task_id": ["HumanEval/0", "HumanEval/1"], "prompt": ["def f():", None]}).write_parquet(
        path
    )
    with pytest.raises(InvalidInputError, match=r"parquet:row 2: field 'prompt' is missing"):
        load_literature("humaneval", path)


def test_bad_files_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="does not exist"):
        load_literature("gsm8k", tmp_path / "missing.jsonl")
    (tmp_path / "x.csv").write_text("a,b\n")
    with pytest.raises(InvalidInputError, match=r"unknown format; allowed: \.jsonl, \.jsonl\.gz, \.parquet"):
        load_literature("gsm8k", tmp_path / "x.csv")
    (tmp_path / "bad.jsonl.gz").write_bytes(b"not gzip at all\n")
    with pytest.raises(InvalidInputError, match="cannot be read as gzip"):
        load_literature("gsm8k", tmp_path / "bad.jsonl.gz")
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 nope")
    with pytest.raises(InvalidInputError, match="not a readable parquet file"):
        load_literature("gsm8k", tmp_path / "bad.parquet")
    _write(tmp_path / "train.jsonl", [dict(ROWS["mbpp"][0], task_id=700)])
    with pytest.raises(InvalidInputError, match="holds no rows of the full/test split"):
        load_literature("mbpp", tmp_path / "train.jsonl")
    with pytest.raises(
        InvalidInputError, match="unknown literature dataset 'hellaswag'; allowed: gsm8k, math500"
    ):
        load_literature("hellaswag", tmp_path / "train.jsonl")


def test_workload_goes_through_workloads_and_m0_accepts_it(tmp_path: Path) -> None:
    path = _write(tmp_path / "mbpp.jsonl", ROWS["mbpp"])
    workload = LiteratureWorkload(dataset="mbpp", path=str(path), limit=2, max_tokens=64)
    assert [s.session_id for s in al_workload_sessions(workload)] == ["mbpp-11", "mbpp-12"]
    desc = dataset_description(workload)
    assert desc["dataset"] == "google-research-datasets/mbpp (subset: 2 of 500 prompts)"
    assert desc["subset"] == "true"
    assert desc["dataset_hash"].startswith("sha256:")
    assert desc["category"] == "mbpp"
    assert reference_table_keys(workload, desc) == ("mbpp", "full/test")

    model = ModelSpec(id="m")
    server = server_config(framework="sim", model="m")
    params = CalibrateParams(models=(model,), server=server, workload=workload)
    assert isinstance(params.workload, LiteratureWorkload)
    assert params.reference_path == "references/mbpp.yaml"  # one table per dataset by default
    # round trip through the UI's JSON form, and a dict without kind stays SPEED-Bench
    again = CalibrateParams.model_validate(params.model_dump(mode="json"))
    assert again.workload == workload
    legacy = CalibrateParams.model_validate(
        {"models": [{"id": "m"}], "server": server.model_dump(mode="json"), "workload": {"category": "math"}}
    )
    assert legacy.workload.kind == "speed-bench"
    assert legacy.reference_path == "references/speed-bench-coding.yaml"
    explicit = CalibrateParams(models=(model,), server=server, workload=workload, reference_path="r.yaml")
    assert explicit.reference_path == "r.yaml"


def test_workload_without_path_is_only_gsm8k(tmp_path: Path) -> None:
    gsm = LiteratureWorkload(dataset="gsm8k", limit=2)
    sessions = al_workload_sessions(gsm)
    assert len(sessions) == 2
    assert dataset_description(gsm)["expected_prompts"] == "1319"
    with pytest.raises(ValidationError, match="dataset='humaneval' needs path"):
        LiteratureWorkload(dataset="humaneval")
    with pytest.raises(ValidationError):
        LiteratureWorkload(dataset="hellaswag", path="x.jsonl")  # type: ignore[arg-type]
