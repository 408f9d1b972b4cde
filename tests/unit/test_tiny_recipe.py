"""The tiny recipe's Launch and the tiny server's reading of it (vLLM's --speculative-config form)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from alflow.config import ServerConfig, server_config
from alflow.errors import InvalidInputError
from alflow.frameworks.recipes import build_launch, get_recipe
from alflow.tiny.settings import resolve_spec
from alflow_infra.errors import RecipeError

pytestmark = pytest.mark.unit


def _config(**kw: object) -> ServerConfig:
    data: dict[str, object] = {
        "framework": "tiny",
        "model": "gemma-3-270m",
        "speculative": {"method": "ngram", "k": 3},
        "host": "127.0.0.1",
        "port": 8123,
    }
    data.update(kw)
    return server_config(data)


def _flag(argv: tuple[str, ...], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_launch_runs_the_tiny_server_with_vllms_speculative_config() -> None:
    launch = build_launch(_config(max_model_len=1024))
    assert launch.argv[:4] == (sys.executable, "-m", "alflow.tiny", "serve")
    assert launch.dialect == "vllm"
    assert launch.metrics_path == "/metrics"
    assert launch.model == "gemma-3-270m"
    assert _flag(launch.argv, "--served-model-name") == "gemma-3-270m"
    assert "--model" not in launch.argv  # the bundled model
    assert _flag(launch.argv, "--n-ctx") == "1024"
    spec = json.loads(_flag(launch.argv, "--speculative-config"))
    assert spec == {"method": "ngram", "num_speculative_tokens": 3}
    assert launch.synthetic is None
    # the server reads it back
    assert resolve_spec(speculative_config=_flag(launch.argv, "--speculative-config")).k == 3


def test_synthetic_knobs_take_vllms_path_and_become_min_variance_rates() -> None:
    launch = build_launch(_config(synthetic={"target_al": 2.5}))
    text = _flag(launch.argv, "--speculative-config")
    spec = json.loads(text)
    assert spec["rejection_sample_method"] == "synthetic"
    assert spec["synthetic_acceptance_length"] == 2.5
    assert launch.synthetic is not None
    tiny = resolve_spec(speculative_config=text)
    assert tiny.synthetic_rates == (1.0, 0.5, 0.0)
    assert tiny.synthetic == {"scheme": "vllm", "al": 2.5, "rates": [1.0, 0.5, 0.0]}
    assert any("n-gram" in w for w in launch.warnings)


def test_ngram_sizes_and_a_gguf_path() -> None:
    config = _config(
        model="/models/tiny.gguf",
        speculative={"method": "ngram", "k": 2, "prompt_lookup_min": 2, "prompt_lookup_max": 3},
    )
    launch = build_launch(config)
    assert _flag(launch.argv, "--model") == "/models/tiny.gguf"
    tiny = resolve_spec(speculative_config=_flag(launch.argv, "--speculative-config"))
    assert (tiny.k, tiny.ngram_min, tiny.ngram_max) == (2, 2, 3)


def test_no_speculation_is_k_zero() -> None:
    launch = build_launch(_config(speculative=None))
    assert _flag(launch.argv, "--k") == "0"
    assert resolve_spec(k=0).speculative_config() is None


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"speculative": {"method": "eagle3", "k": 3, "draft_model": "x"}}, "ngram"),
        ({"parallelism": {"tp": 2}}, "parallelism"),
        ({"enable_prefix_caching": True}, "prefix cache"),
        ({"revision": "abc"}, "revision"),
        ({"extra_args": ("--k", "4")}, "--k"),
    ],
)
def test_refusals_name_the_setting(change: dict[str, object], words: str) -> None:
    with pytest.raises(RecipeError, match=words):
        build_launch(_config(**change))


def test_recipe_is_registered_with_the_local_image_and_config_labels_the_engine() -> None:
    assert get_recipe("tiny").default_image == "alflow-sim-base:local"
    config = _config()
    assert config.simulated is False
    assert config.engine_note is not None
    assert "TINY CPU ENGINE" in config.engine_note
    assert server_config(framework="vllm", model="m").engine_note is None


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"speculative_config": '{"method":"eagle3","num_speculative_tokens":3}'}, "n-gram"),
        ({"k": 2, "speculative_config": '{"method":"ngram","num_speculative_tokens":3}'}, "--k 2"),
        ({"ngram_min": 3, "ngram_max": 2}, "--ngram-max 2"),
        ({"k": 0, "synthetic_al": 2.0}, "--k"),
        ({"k": 3, "synthetic_al": 5.0}, "synthetic"),
        ({"k": 3, "synthetic_rates": (0.5, 0.9, 0.1)}, "synthetic"),
        ({"k": 17}, "--k 17"),
        ({"speculative_config": "{not json"}, "JSON"),
    ],
)
def test_settings_errors_name_the_input(kwargs: dict[str, object], words: str) -> None:
    with pytest.raises(InvalidInputError, match=words):
        resolve_spec(**kwargs)  # type: ignore[arg-type]


def test_a_tiny_engine_run_is_labelled_in_its_reports(tmp_path: Path) -> None:
    from alflow.reports.render import render_run
    from alflow.results.store import RunWriter

    note = _config().engine_note
    assert note is not None
    with RunWriter(tmp_path, "m1", run_id="tinyrun", provenance={"engine_note": note}) as writer:
        writer.write_summary({"flow": "m1", "passed": True, "verdicts": []})
    html, md = render_run(writer.dir), render_run(writer.dir, "md")
    assert "TINY CPU ENGINE" in html
    assert "TINY CPU ENGINE" in md
    assert "SIMULATED" not in md


def test_the_bundled_tiny_prompts_are_named_as_theirs_not_speed_bench(tmp_path: Path) -> None:
    from alflow.config import SpeedBenchWorkload
    from alflow.workloads import dataset_description, speed_bench_sessions, tiny_prompts_path

    workload = SpeedBenchWorkload(path=str(tiny_prompts_path()), category="coding")
    assert dataset_description(workload)["dataset"] == "alflow-tiny"
    assert len(speed_bench_sessions(workload)) == 8
    assert len(speed_bench_sessions(workload.model_copy(update={"category": "writing"}))) == 6
    assert dataset_description(SpeedBenchWorkload())["dataset"] == "alflow-demo"
    copy = tmp_path / "tiny_prompts.jsonl"  # same name elsewhere: a user's file, not the bundled one
    copy.write_bytes(tiny_prompts_path().read_bytes())
    assert dataset_description(SpeedBenchWorkload(path=str(copy)))["dataset"] == "nvidia/SPEED-Bench"


def test_demo_params_for_the_tiny_engine() -> None:
    from pydantic import ValidationError

    from alflow.config import DemoParams

    assert DemoParams().engine == "sim"
    assert DemoParams(engine="tiny").tiny_prompts == 6
    with pytest.raises(ValidationError, match="benchmark_k=4 must be one of ks"):
        DemoParams(engine="tiny", ks=(1, 2), benchmark_k=4)
    with pytest.raises(ValidationError, match="K=0"):
        DemoParams(ks=(0, 1))
