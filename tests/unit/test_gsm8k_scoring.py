"""GSM8K extraction and scoring, matching lm-evaluation-harness's gsm8k filters and exact_match."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from alflow.errors import InvalidInputError
from alflow.evals import gsm8k as g
from alflow.evals.lm_eval_backend import LmEvalError, lm_eval_command, parse_results
from alflow.evals.run import synthetic_evidence
from alflow.evals.thresholds import load_thresholds
from alflow.gates import AccuracyDetails, accuracy_gate

pytestmark = pytest.mark.unit

SOLUTION_72 = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 72"


@pytest.mark.parametrize(
    ("reply", "strict", "flexible"),
    [
        ("She pays 3 * 24 = 72.\n#### 72", "72", "72"),
        ("#### 1,000", "1,000", "1,000"),
        ("The loss is #### -5", "-5", "-5"),
        ("#### 2.5", "2.5", "2.5"),
        ("So the total is $18.", None, "$18."),
        ("The answer is 42.", None, "42."),
        ("first 12 then 7 apples and 100 pears", None, "100"),
        ("no number here", None, None),
        ("step: #### 10 is a guess; final #### 12", "10", "12"),
        ("####72", None, "72"),
        ("The answer is 5", None, "5"),
    ],
)
def test_extraction_like_the_harness(reply: str, strict: str | None, flexible: str | None) -> None:
    assert g.extract_strict(reply) == strict
    assert g.extract_flexible(reply) == flexible


@pytest.mark.parametrize(
    ("prediction", "solution", "correct"),
    [
        ("72", SOLUTION_72, True),
        ("1,000", "... #### 1000", True),
        ("$18.", "... #### 18", True),
        ("18.00", "... #### 18", False),
        ("-5", "... #### -5", True),
        ("5", "... #### -5", False),
        (None, SOLUTION_72, False),
        ("72.", SOLUTION_72, True),
    ],
)
def test_exact_match_normalisation(prediction: str | None, solution: str, correct: bool) -> None:
    assert g.is_correct(prediction, solution) is correct


def test_score_reply_counts_failures_as_wrong() -> None:
    problem = g.Problem("test-1", "q", SOLUTION_72)
    ok = g.score_reply(problem, "#### 72")
    assert ok.strict_correct
    assert ok.flexible_correct
    failed = g.score_reply(problem, "#### 72", error="HTTP 500")
    assert not failed.strict_correct
    assert not failed.flexible_correct


def test_prompts_are_seeded_multiturn_fewshot() -> None:
    shots = [g.Problem(f"train-{i}", f"shot question {i}", f"work {i}\n#### {i}") for i in range(50)]
    problems = [g.Problem("test-1", "How many?", SOLUTION_72), g.Problem("test-2", "How much?", SOLUTION_72)]
    a = g.build_sessions(problems, shots, g.PromptConfig(num_shots=5, seed=7, instruction="Solve it."))
    b = g.build_sessions(problems, shots, g.PromptConfig(num_shots=5, seed=7, instruction="Solve it."))
    c = g.build_sessions(problems, shots, g.PromptConfig(num_shots=5, seed=8))
    assert a == b
    assert a[0].prefix_messages != c[0].prefix_messages
    msgs = a[0].prefix_messages
    assert msgs[0] == {"role": "system", "content": "Solve it."}
    assert [m["role"] for m in msgs[1:]] == ["user", "assistant"] * 5
    assert msgs[1]["content"].startswith("Question: shot question ")
    assert msgs[1]["content"].endswith("\nAnswer:")
    assert msgs[2]["content"].endswith("#### " + msgs[1]["content"].split()[3].removesuffix("\nAnswer:"))
    assert a[0].turns[0].prompt == "Question: How many?\nAnswer:"
    assert a[0].prefix_messages != a[1].prefix_messages  # a fresh draw per question
    with pytest.raises(InvalidInputError, match="num_shots=60 but the few-shot pool holds only 50"):
        g.build_sessions(problems, shots, g.PromptConfig(num_shots=60))


def test_subset_is_seeded_and_ordered() -> None:
    problems = [g.Problem(f"t-{i}", str(i), f"#### {i}") for i in range(100)]
    a = g.select_subset(problems, 10, 3)
    assert a == g.select_subset(problems, 10, 3)
    assert a != g.select_subset(problems, 10, 4)
    assert [int(p.question) for p in a] == sorted(int(p.question) for p in a)
    assert g.select_subset(problems, None, 3) == problems
    with pytest.raises(InvalidInputError, match="limit=0"):
        g.select_subset(problems, 0, 3)


def test_read_problems_errors_name_file_line_and_field(tmp_path: Path) -> None:
    f = tmp_path / "test.jsonl"
    f.write_text('{"question": "q", "answer": "#### 1"}\n{"question": "q2"}\n')
    with pytest.raises(InvalidInputError, match=r"test.jsonl:2: field 'answer' is missing"):
        g.read_problems(f)
    f.write_text('{"question": "q", "answer": "no marker"}\n')
    with pytest.raises(InvalidInputError, match=r"test.jsonl:1: field 'answer' has no '#### <number>'"):
        g.read_problems(f)
    f.write_text("")
    with pytest.raises(InvalidInputError, match="holds no rows"):
        g.read_problems(f)


def _result(
    strict: int, flexible: int, total: int = 100, errors: int = 0, population: int = 100
) -> g.EvalResult:
    rows = []
    for i in range(total):
        rows.append(
            g.QuestionResult(
                f"t-{i}",
                "1",
                "x",
                "1",
                "1",
                i < strict,
                i < flexible,
                "HTTP 500" if i >= total - errors else None,
            )
        )
    return g.EvalResult("m", tuple(rows), 5, 1, None if population == total else total, population, 1.0)


def test_accuracy_gate_names_the_failing_score() -> None:
    passed = accuracy_gate(_result(95, 93), 0.90)
    assert passed.passed
    failed = accuracy_gate(_result(95, 85), 0.90)
    assert not failed.passed
    assert "flexible-extract 0.8500 < threshold 0.9000" in failed.message
    assert "strict-match" not in failed.message.split("FAILED")[1].split("(")[0]
    assert isinstance(failed.details, AccuracyDetails)
    assert failed.details.failing == ("flexible-extract",)
    assert failed.model_dump()["failing"] == ("flexible-extract",)
    errored = accuracy_gate(_result(95, 95, errors=2), 0.90)
    assert not errored.passed
    assert "2 of 100 requests failed" in errored.message
    subset = accuracy_gate(_result(95, 95, population=1319), 0.90)
    assert "seeded subset of 100 of 1319 questions" in subset.message


def test_wilson_interval() -> None:
    s = g.Score("strict-match", 90, 100)
    low, high = s.interval
    assert low == pytest.approx(0.8256, abs=1e-3)
    assert high == pytest.approx(0.9448, abs=1e-3)


def test_thresholds_file(tmp_path: Path) -> None:
    assert load_thresholds(None).for_model("anything") == 0.90
    f = tmp_path / "t.yaml"
    f.write_text("default: 0.85\nmodels:\n  deepseek-ai/DeepSeek-R1: 0.94\n")
    t = load_thresholds(f)
    assert t.for_model("deepseek-ai/DeepSeek-R1") == 0.94
    assert t.for_model("other") == 0.85
    f.write_text("default: 1.5\n")
    with pytest.raises(
        InvalidInputError, match=r"t.yaml: default: threshold 1.5: must be a finite number in \[0, 1\]"
    ):
        load_thresholds(f)
    f.write_text("defualt: 0.9\n")
    with pytest.raises(InvalidInputError, match="defualt"):
        load_thresholds(f)


@pytest.mark.parametrize(
    ("info", "found"),
    [
        ({"synthetic_acceptance": {"scheme": "vllm", "al": 2.5}}, "synthetic_acceptance"),
        ({"synthetic_acceptance": None}, None),
        (
            {"vllm_config": "speculative_config=SpeculativeConfig(rejection_sample_method='synthetic')"},
            "vllm_config",
        ),
        ({"env": {"SGLANG_SIMULATE_ACC_LEN": "2.4"}}, "env.SGLANG_SIMULATE_ACC_LEN"),
        ({"env": {"SGLANG_SIMULATE_ACC_LEN": "-1"}}, None),
        (
            {"TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS": "1.78"},
            "TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS",
        ),
        ({"speculative_config": {"rejection_sample_method": "standard"}}, None),
        ({"a": [{"rejection_sample_method": "synthetic"}]}, "a[0].rejection_sample_method"),
    ],
)
def test_synthetic_evidence(info: object, found: str | None) -> None:
    assert synthetic_evidence(info) == found


def test_lm_eval_command_and_results(tmp_path: Path) -> None:
    cmd = lm_eval_command("http://h:1/", "m", tmp_path, limit=50)
    assert cmd[:3] == ["lm_eval", "--model", "local-chat-completions"]
    assert "base_url=http://h:1/v1/chat/completions" in cmd[4]
    assert "--apply_chat_template" in cmd
    assert "--fewshot_as_multiturn" in cmd
    assert cmd[-2:] == ["--limit", "50"]
    with pytest.raises(LmEvalError, match="wrote no results"):
        parse_results(tmp_path)
    run_dir = tmp_path / "m"
    run_dir.mkdir()
    (run_dir / "results_2026-11-30T05-00-00.json").write_text(
        json.dumps(
            {
                "results": {
                    "gsm8k": {
                        "alias": "gsm8k",
                        "exact_match,strict-match": 0.8423,
                        "exact_match_stderr,strict-match": 0.01,
                        "exact_match,flexible-extract": 0.8514,
                    }
                },
                "n-samples": {"gsm8k": {"original": 1319, "effective": 1319}},
            }
        )
    )
    scores = parse_results(tmp_path)
    assert (scores.strict_match, scores.flexible_extract, scores.samples) == (0.8423, 0.8514, 1319)
