"""Literature AL datasets on the sim: MT-Bench's second turn carries the live reply; M0 on two datasets,
then ``alflow report matrix`` over both runs."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
import orjson
import pytest
from typer.testing import CliRunner

from alflow.cli.root import app
from alflow.config import (
    CalibrateParams,
    LoadConfig,
    ModelSpec,
    SamplingParams,
    ServerPlacement,
    server_config,
)
from alflow.config.workloads import LiteratureWorkload
from alflow.datasets.literature import load_literature
from alflow.loadgen import LoadSpec, Target, run_load
from alflow.reference.table import load_reference
from alflow.sim.process import SimProcess

pytestmark = pytest.mark.integration

MT_ROWS = [
    {
        "prompt": ["Write a function that adds two numbers.", "Now add type hints."],
        "prompt_id": 1,
        "category": "coding",
    },
    {"prompt": ["Name three rivers.", "Which is the longest?"], "prompt_id": 2, "category": "stem"},
]


def _mtbench(tmp_path: Path) -> Path:
    path = tmp_path / "question.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in MT_ROWS))
    return path


async def test_mtbench_second_turn_carries_the_live_reply(tmp_path: Path) -> None:
    sessions = load_literature("mtbench", _mtbench(tmp_path), limit=1, max_tokens=30).sessions
    args = ["--dialect", "vllm", "--k", "3", "--synthetic-al", "2.5", "--time-scale", "0"]
    with SimProcess([*args, "--step-log", str(tmp_path / "s.jsonl")]) as sim:
        res = await run_load(
            list(sessions), Target(sim.base_url, "sim/llama-3.3-70b"), LoadSpec(concurrency=1)
        )
        first, second = res.records
        assert first.ok
        assert second.ok
        assert first.text
        history = [
            {"role": "user", "content": MT_ROWS[0]["prompt"][0]},
            {"role": "assistant", "content": first.text},
            {"role": "user", "content": MT_ROWS[0]["prompt"][1]},
        ]
        async with aiohttp.ClientSession() as http:
            body = orjson.dumps({"model": "sim/llama-3.3-70b", "messages": history})
            async with http.post(sim.base_url + "/tokenize", data=body) as resp:
                expected = orjson.loads(await resp.read())["count"]
    assert second.input_tokens == expected  # turn 1, the live reply, turn 2: exactly those tokens


@pytest.mark.usefixtures("prefect_harness")
def test_m0_on_two_datasets_then_report_matrix(tmp_path: Path) -> None:
    from alflow_flows.calibrate import calibrate

    model = ModelSpec(id="test-llama", sampling_thinking_off=SamplingParams(temperature=0.0, max_tokens=64))
    server = server_config(framework="sim", model=model.id, extra_args=("--time-scale", "0", "--seed", "5"))
    runs = []
    for workload in (
        LiteratureWorkload(dataset="gsm8k", limit=6, max_tokens=64),
        LiteratureWorkload(dataset="mtbench", path=str(_mtbench(tmp_path)), max_tokens=64),
    ):
        params = CalibrateParams(
            models=(model,),
            ks=(3,),
            server=server,
            placement=ServerPlacement(results_root=str(tmp_path / "results")),
            workload=workload,
            load=LoadConfig(concurrency=2),
            cache_days=0,
            preflight=False,
            reference_path=str(tmp_path / f"{workload.dataset}.yaml"),
        )
        out = calibrate(params=params)
        runs.append(out.run_dir)
        table = load_reference(tmp_path / f"{workload.dataset}.yaml")
        assert table.dataset == workload.dataset
        entry = table.entries[0]
        assert entry.provenance is not None
        assert entry.provenance.dataset.startswith(
            ("openai/gsm8k (subset: 6 of 1319", "HuggingFaceH4/mt_bench")
        )
        assert entry.provenance.prompt_count == (6 if workload.dataset == "gsm8k" else 2)

    # one table per dataset: the MT-Bench table refuses GSM8K values
    with pytest.raises(Exception, match="one table per dataset"):
        calibrate(
            params=CalibrateParams(
                models=(model,),
                ks=(3,),
                server=server,
                placement=ServerPlacement(results_root=str(tmp_path / "results")),
                workload=LiteratureWorkload(dataset="gsm8k", limit=2),
                reference_path=str(tmp_path / "mtbench.yaml"),
            )
        )

    runner = CliRunner()
    shown = runner.invoke(app, ["report", "matrix", *runs])
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    assert lines[1].split() == ["Model", "gsm8k", "mtbench", "Overall"]
    assert lines[3].startswith("test-llama [sim mtp K=3 thinking=off]")
    assert "gsm8k: openai/gsm8k (subset: 6 of 1319 prompts)" in shown.stdout
    data = json.loads(runner.invoke(app, ["report", "matrix", *runs, "--json"]).stdout)
    (row,) = data["rows"]
    gsm, mt = row["values"]["gsm8k"], row["values"]["mtbench"]
    assert 1.0 <= gsm <= 4.0
    assert 1.0 <= mt <= 4.0
    assert row["overall"] == pytest.approx((gsm + mt) / 2)
    tput = json.loads(
        runner.invoke(app, ["report", "matrix", *runs, "--metric", "throughput", "--json"]).stdout
    )
    assert all(v > 0 for v in tput["rows"][0]["values"].values())
