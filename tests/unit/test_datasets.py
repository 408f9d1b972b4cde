"""SPEED-Bench, GSM8K and random-token workloads."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import orjson
import pytest

from alflow.datasets.custom import load_custom
from alflow.datasets.gsm8k import load_gsm8k, reference_answer
from alflow.datasets.random_tokens import random_sessions
from alflow.datasets.speed_bench import PLACEHOLDER, download_speed_bench, load_speed_bench
from alflow.errors import InvalidInputError

pytestmark = pytest.mark.unit

GSM8K = Path("/work/shared/data/gsm8k")


def row(qid: str, category: str, *turns: str, **extra: object) -> dict[str, object]:
    base: dict[str, object] = {
        "question_id": qid.ljust(32, "0"),
        "category": category,
        "sub_category": "sub",
        "source": "src",
        "src_id": "1",
        "difficulty": "easy",
        "multiturn": len(turns) > 1,
        "messages": [{"role": "user", "content": t} for t in turns],
    }
    base.update(extra)
    return base


def write(path: Path, rows: list[object]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


@pytest.fixture
def qualitative(tmp_path: Path) -> Path:
    return write(
        tmp_path / "qualitative.jsonl",
        [
            row("a", "coding", "write a sort"),
            row("b", "coding", "fix this", "now add tests"),
            row("c", "writing", "a poem"),
        ],
    )


def test_loads_rows_as_sessions_with_multi_turn(qualitative: Path) -> None:
    sessions = load_speed_bench(qualitative, max_tokens=4096)
    assert [s.category for s in sessions] == ["coding", "coding", "writing"]
    assert sessions[1].multiturn
    assert [t.prompt for t in sessions[1].turns] == ["fix this", "now add tests"]
    assert sessions[0].turns[0].max_tokens == 4096
    assert sessions[0].meta["source"] == "src"
    assert sessions[0].session_id == "a".ljust(32, "0")


def test_filters_by_category_and_rejects_unknown_ones(qualitative: Path) -> None:
    assert [s.session_id[0] for s in load_speed_bench(qualitative, categories=["coding"])] == ["a", "b"]
    with pytest.raises(
        InvalidInputError, match=r"unknown SPEED-Bench category 'cooking'.*holds: coding, writing"
    ):
        load_speed_bench(qualitative, categories=["cooking"])


def test_throughput_split_filters_by_entropy_tier(tmp_path: Path) -> None:
    f = write(
        tmp_path / "throughput_1k.jsonl",
        [row("x", "low_entropy", "aaa"), row("y", "high_entropy", "bbb"), row("z", "mixed", "ccc")],
    )
    assert [s.category for s in load_speed_bench(f, categories=["high_entropy", "mixed"])] == [
        "high_entropy",
        "mixed",
    ]


@pytest.mark.parametrize(
    ("bad", "needle"),
    [
        ({"category": "coding", "messages": [{"role": "user", "content": "x"}]}, "field 'question_id'"),
        (row("q", "coding", "x", messages=[]), "field 'messages'"),
        (row("q", "coding", "x", messages=[{"role": "assistant", "content": "x"}]), r"messages\[0\]'.role"),
        (row("q", "coding", "x", messages=[{"role": "user", "content": 3}]), r"messages\[0\]'.content"),
        (row("q", "coding", "x", multiturn="yes"), "field 'multiturn'"),
        ([1, 2], "expected a JSON object"),
    ],
)
def test_malformed_rows_name_file_line_and_field(tmp_path: Path, bad: object, needle: str) -> None:
    f = write(tmp_path / "bad.jsonl", [row("ok", "coding", "fine"), bad])
    with pytest.raises(InvalidInputError, match=needle) as info:
        load_speed_bench(f)
    assert f"{f}:2:" in str(info.value)


def test_invalid_json_and_placeholder_are_rejected(tmp_path: Path) -> None:
    f = tmp_path / "broken.jsonl"
    f.write_text('{"question_id": "x"\n')
    with pytest.raises(InvalidInputError, match=r"broken.jsonl:1: not valid JSON"):
        load_speed_bench(f)
    g = write(tmp_path / "ph.jsonl", [row("a", "qa", "fine"), row("b", "qa", "fine", f"see: {PLACEHOLDER}")])
    with pytest.raises(
        InvalidInputError, match=r"ph.jsonl:2: field 'messages\[1\]'.content holds the unresolved"
    ):
        load_speed_bench(g)


def test_empty_and_missing_files_are_clear_errors(tmp_path: Path) -> None:
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(InvalidInputError, match="holds no rows"):
        load_speed_bench(tmp_path / "empty.jsonl")
    with pytest.raises(InvalidInputError, match="does not exist"):
        load_speed_bench(tmp_path / "nope.jsonl")


def test_download_helper_says_how_to_get_datasets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # import fails as if not installed
    with pytest.raises(InvalidInputError, match="pip install datasets"):
        download_speed_bench(tmp_path)
    with pytest.raises(InvalidInputError, match="unknown SPEED-Bench split"):
        download_speed_bench(tmp_path, splits=["throughput_3k"])


def test_download_helper_writes_the_schema_with_a_stub_datasets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import types

    hub_rows = [
        {**row("a", "coding", "q1", "q2"), "extra_column": 1},
        {
            **row("b", "math", "q"),
            "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "x"}],
        },
    ]
    stub = types.ModuleType("datasets")
    stub.load_dataset = lambda name, split, token=None: {"test": hub_rows}  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "datasets", stub)
    [path] = download_speed_bench(tmp_path, splits=["qualitative"])
    sessions = load_speed_bench(path)
    assert [len(s.turns) for s in sessions] == [2, 1]
    assert "extra_column" not in orjson.loads(path.read_bytes().splitlines()[0])


def test_gsm8k_loads_the_test_split_with_reference_answers() -> None:
    sessions = load_gsm8k(GSM8K / "test.jsonl")
    assert len(sessions) == 1319
    assert sessions[0].meta["answer"] == "18"
    assert sessions[0].turns[0].prompt.startswith("Janet")
    shots = load_gsm8k(GSM8K / "test.jsonl", limit=2, num_shots=3, shots_path=GSM8K / "train.jsonl")
    assert len(shots) == 2
    assert [m["role"] for m in shots[0].prefix_messages] == ["user", "assistant"] * 3


def test_gsm8k_answer_extraction_and_errors(tmp_path: Path) -> None:
    assert reference_answer("so 3 + 4\n#### 1,234") == "1234"
    assert reference_answer("#### -5") == "-5"
    with pytest.raises(InvalidInputError, match="no '#### <number>'"):
        reference_answer("no answer here")
    f = tmp_path / "g.jsonl"
    f.write_text('{"question": "q"}\n')
    with pytest.raises(InvalidInputError, match=r"g.jsonl:1: field 'answer'"):
        load_gsm8k(f)


def test_custom_prompts_keep_file_order_and_per_row_caps_and_max_tokens_overrides_them(
    tmp_path: Path,
) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text(
        '{"prompt": "first", "output_tokens": 12}\n\n{"prompt": "second", "id": 7}\n'
        '{"prompt": "third", "output_tokens": 20}\n'
    )
    sessions = load_custom(f)
    assert [s.turns[0].prompt for s in sessions] == ["first", "second", "third"]
    assert [s.turns[0].max_tokens for s in sessions] == [12, 256, 20]
    assert [s.meta["line"] for s in sessions] == ["1", "3", "4"]
    assert {s.category for s in sessions} == {"custom"}
    assert [s.turns[0].max_tokens for s in load_custom(f, max_tokens=5)] == [5, 5, 5]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "holds no rows"),
        ("{nope\n", r"p.jsonl:1: not valid JSON"),
        ('["a list"]\n', r"p.jsonl:1: a row must be a JSON object"),
        ('{"prompt": "ok"}\n{"prompt": "  "}\n', r"p.jsonl:2: field 'prompt' is missing or not a non-empty"),
        ('{"prompt": 3}\n', r"p.jsonl:1: field 'prompt'"),
        ('{"prompt": "a", "output_tokens": 0}\n', r"'output_tokens' is 0; give a positive integer"),
        ('{"prompt": "a", "output_tokens": true}\n', r"'output_tokens' is True"),
        ('{"prompt": "a", "output_tokens": "12"}\n', r"'output_tokens' is '12'"),
    ],
)
def test_custom_prompt_file_errors_name_the_line_and_field(
    tmp_path: Path, content: str, message: str
) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text(content)
    with pytest.raises(InvalidInputError, match=message):
        load_custom(f)
    with pytest.raises(InvalidInputError, match="does not exist"):
        load_custom(tmp_path / "missing.jsonl")


def test_random_tokens_are_reproducible_and_within_the_length_range() -> None:
    a = random_sessions(50, isl=100, osl=8, range_ratio=0.8, seed=11, vocab_size=1000)
    b = random_sessions(50, isl=100, osl=8, range_ratio=0.8, seed=11, vocab_size=1000)
    c = random_sessions(50, isl=100, osl=8, range_ratio=0.8, seed=12, vocab_size=1000)
    assert a == b
    assert a != c
    lengths = [len(s.turns[0].prompt) for s in a]
    assert min(lengths) >= 80
    assert max(lengths) <= 100
    assert len(set(lengths)) > 5
    t = a[0].turns[0]
    assert (t.max_tokens, t.min_tokens, t.ignore_eos) == (8, 8, True)
    assert all(100 <= tok < 1000 for s in a for tok in s.turns[0].prompt)  # type: ignore[union-attr]
    fixed = random_sessions(5, isl=64, osl=8, range_ratio=1.0, seed=0)
    assert {len(s.turns[0].prompt) for s in fixed} == {64}
    with pytest.raises(InvalidInputError, match="range_ratio"):
        random_sessions(1, isl=10, osl=1, range_ratio=0)


@pytest.mark.parametrize("vocab_size", [20_000, 10**9])
def test_random_prompts_are_the_draws_of_randrange_and_share_one_object_per_token_id(vocab_size: int) -> None:
    """The prompts of a seed stay what they were (randrange per token); a small vocabulary's ids are shared."""
    sessions = random_sessions(30, isl=200, osl=8, seed=5, vocab_size=vocab_size)
    rng = random.Random(5)
    for session in sessions:
        n = rng.randint(160, 200)
        assert session.turns[0].prompt == tuple(rng.randrange(100, vocab_size) for _ in range(n))
    if vocab_size == 20_000:  # 6,000 draws below 19,900 ids: repeats, each the same object
        seen: dict[int, int] = {}
        for session in sessions:
            for tok in session.turns[0].prompt:
                assert seen.setdefault(tok, id(tok)) == id(tok)  # type: ignore[arg-type]
        assert len(seen) < sum(len(s.turns[0].prompt) for s in sessions)
