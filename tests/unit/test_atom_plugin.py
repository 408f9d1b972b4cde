"""AMD's ATOM through the framework seam: recipe, release gate, knobs, metrics reader, the sim's ATOM dialect, GPUs.

The metrics fixtures (``tests/fixtures/prometheus/atom_*.txt``) were rendered with prometheus_client from collectors
built as ATOM's ``atom/entrypoints/openai/metrics.py`` builds its families (ROCm/ATOM ffdf3bb5dd): K = 3, the window
holds 600 sequence-steps accepting 0/1/2/3 drafts 50/100/200/250 times.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from alflow.acceptance.knobs import DRAWS_NOTE
from alflow.acceptance.synthetic import SyntheticAcceptanceError
from alflow.config import DockerOptions, server_config
from alflow.errors import InvalidInputError, RecipeError
from alflow.frameworks.atom import metrics as atom_metrics
from alflow.frameworks.atom.knobs import FIXED_SEED
from alflow.frameworks.atom.recipe import synthetic_gate
from alflow.frameworks.atom.sim import AtomEmitter, read_args
from alflow.frameworks.recipe_kit import render_knobs
from alflow.frameworks.recipes import build_launch
from alflow.frameworks.registry import get_framework
from alflow.frameworks.versions import CapabilityError
from alflow.metrics.dialects import MissingMetricsError
from alflow.metrics.prometheus import SnapshotWindow, parse_exposition
from alflow.metrics.readers import detect, get_dialect
from alflow.sim.config import SimConfig
from alflow.sim.stats import EngineStats
from alflow_infra.runners.docker import container_spec

pytestmark = pytest.mark.unit

FIX = Path(__file__).parent.parent / "fixtures" / "prometheus"
NIGHTLY = "rocm/atom-dev:nightly_202609011348"


def atom(**fields: object) -> object:
    base: dict[str, object] = {
        "framework": "atom",
        "model": "deepseek-ai/DeepSeek-R1-0528",
        "image": NIGHTLY,
        "speculative": {"method": "mtp", "k": 3},
        "parallelism": {"tp": 8},
    }
    return server_config({**base, **fields})


def test_the_recipe_renders_atoms_own_flags() -> None:
    launch = build_launch(atom(synthetic={"target_al": 2.4}))  # type: ignore[arg-type]
    argv = list(launch.argv)
    assert argv[:3] == ["python", "-m", "atom.entrypoints.openai_server"]
    assert argv[argv.index("--server-port") + 1] == str(launch.port)  # --port is ATOM's internal engine port
    assert "--port" not in argv
    assert argv[argv.index("-tp") + 1] == "8"
    assert "--no-enable_prefix_caching" in argv  # ATOM caches prefixes unless told not to
    assert argv[-6:] == [
        "--method",
        "mtp",
        "--num-speculative-tokens",
        "3",
        "--spec-decode-acceptance-length",
        "2.4",
    ]
    assert launch.framework == launch.dialect == "atom"
    assert launch.version_paths == ()  # ATOM has no version endpoint
    # the nightly's build stamp is after PR #1948: no gate warning; the fixed-seed note every report states
    assert launch.warnings == (DRAWS_NOTE + FIXED_SEED,)
    assert launch.synthetic is not None
    assert launch.synthetic["scheme"] == "vllm"
    assert launch.gpus_per_node == 8


def test_eagle3_takes_the_drafter_and_mtp_takes_none() -> None:
    launch = build_launch(atom(speculative={"method": "eagle3", "k": 2, "draft_model": "org/eagle3"}))  # type: ignore[arg-type]
    assert launch.argv[-6:] == (
        "--method",
        "eagle3",
        "--num-speculative-tokens",
        "2",
        "--draft-model",
        "org/eagle3",
    )
    with pytest.raises(RecipeError, match="takes no draft_model"):
        build_launch(atom(speculative={"method": "mtp", "k": 2, "draft_model": "org/x"}))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"speculative": {"method": "ngram", "k": 3}}, "ATOM has no speculative method 'ngram'"),
        ({"nodes": 2, "parallelism": {"tp": 16}}, "multi-node ATOM is not wired"),
        ({"revision": "abc"}, "ATOM has no --revision"),
        ({"extra_args": ["--server-port", "9000"]}, "extra_args repeats '--server-port'"),
        ({"parallelism": {"tp": 8, "ep": 4}}, "expert parallelism is a switch over TP x DP = 8"),
    ],
)
def test_what_atom_cannot_do_is_refused_before_launch(fields: dict[str, object], message: str) -> None:
    with pytest.raises(RecipeError, match=message):
        build_launch(atom(**fields))  # type: ignore[arg-type]


def test_the_release_gate_reads_the_nightly_build_stamp_or_the_release() -> None:
    assert synthetic_gate(NIGHTLY) == ()
    assert synthetic_gate("rocm/atom-dev:nightly_202608200819") == ()  # the merge minute of PR #1948
    with pytest.raises(CapabilityError, match=r"built at 202608150000 UTC, before .*PR #1948"):
        synthetic_gate("rocm/atom-dev:nightly_202608150000")
    with pytest.raises(CapabilityError, match=r"no ATOM release up to v0\.1\.6"):
        synthetic_gate("rocm/atom:v0.1.5")
    (warning,) = synthetic_gate("rocm/atom:latest")
    assert "ATOM version unknown" in warning
    assert "no version endpoint" in warning
    with pytest.raises(CapabilityError):
        build_launch(atom(image="rocm/atom:v0.1.4", synthetic={"target_al": 2.0}))  # type: ignore[arg-type]
    # real acceptance needs no gate
    assert build_launch(atom(image="rocm/atom:v0.1.4")).warnings == ()  # type: ignore[arg-type]


def test_the_knob_is_the_length_and_rates_only_as_a_min_variance_schedule() -> None:
    knobs = render_knobs("atom", 3, al=2.4)
    assert knobs.args == ("--spec-decode-acceptance-length", "2.4")
    assert knobs.env == {}
    assert knobs.speculative_config == {}
    assert knobs.distribution is not None
    assert knobs.distribution.mean == pytest.approx(2.4)
    assert render_knobs("atom", 3, rates=[1.0, 0.4, 0.0]).args == ("--spec-decode-acceptance-length", "2.4")
    assert render_knobs("atom", 2, al=3.0).args[-1] == "3"
    with pytest.raises(SyntheticAcceptanceError, match="not a minimum-variance schedule"):
        render_knobs("atom", 3, rates=[0.7, 0.5, 0.3])
    with pytest.raises(SyntheticAcceptanceError, match="cannot realise scheme 'sglang-multinomial'"):
        render_knobs("atom", 3, al=2.0, scheme="sglang-multinomial")


def window() -> SnapshotWindow:
    before = parse_exposition((FIX / "atom_before.txt").read_text(), mono_ns=1)
    after = parse_exposition((FIX / "atom_after.txt").read_text(), mono_ns=2)
    return SnapshotWindow(before, after)


def test_the_reader_counts_sequence_steps_by_accepted_drafts() -> None:
    stats = get_dialect("atom").spec_stats(window(), k=3)
    assert stats.num_drafts == 600
    assert stats.accepted_tokens == 1250  # 100 x 1 + 200 x 2 + 250 x 3
    assert stats.draft_tokens == 1800
    assert stats.al == pytest.approx(1 + 1250 / 600)
    assert stats.per_position_rates == pytest.approx((550 / 600, 450 / 600, 250 / 600))
    assert "snapshot" in stats.note
    # without K the labels give it
    assert get_dialect("atom").spec_stats(window()).k == 3


def test_the_reader_is_detected_and_refuses_without_the_steps() -> None:
    after = parse_exposition((FIX / "atom_after.txt").read_text(), mono_ns=2)
    assert detect(after).name == "atom"
    bare = "# TYPE atom:requests_running gauge\natom:requests_running 0.0\n"
    empty = SnapshotWindow(parse_exposition(bare, mono_ns=1), parse_exposition(bare, mono_ns=2))
    with pytest.raises(MissingMetricsError, match=r"--method .* PR #1877"):
        get_dialect("atom").spec_stats(empty)


def test_the_snapshot_lag_is_atoms_refresh_and_can_be_set(monkeypatch: pytest.MonkeyPatch) -> None:
    assert get_dialect("atom").snapshot_lag_s == atom_metrics.SNAPSHOT_LAG_S == 11.0
    assert get_dialect("vllm").snapshot_lag_s == 0.0
    monkeypatch.setenv(atom_metrics.LAG_ENV, "2.5")
    assert get_dialect("atom").snapshot_lag_s == 2.5
    monkeypatch.setenv(atom_metrics.LAG_ENV, "soon")
    with pytest.raises(InvalidInputError, match="ALFLOW_ATOM_METRICS_LAG_S='soon' must be"):
        _ = get_dialect("atom").snapshot_lag_s


def test_the_sim_reads_atoms_flags_with_atoms_rules() -> None:
    found = read_args(["--num-speculative-tokens", "3", "--spec-decode-acceptance-length=2.4"])
    assert (found.k, found.al, found.scheme) == (3, 2.4, "vllm")
    assert read_args(["--num-speculative-tokens", "4", "--spec-decode-acceptance-rate", "0.5"]).al == 3.0
    for args, message in [
        (["--spec-decode-acceptance-length", "2", "--spec-decode-acceptance-rate", "0.5"], "set at most one"),
        (["--num-speculative-tokens", "2", "--spec-decode-acceptance-length", "3.5"], r"must be in \[1, 3\]"),
        (["--spec-decode-acceptance-rate", "1.5"], r"must be in \[0, 1\]"),
        (["--num-speculative-tokens", "0"], "at least 1"),
        (["--bogus", "1"], "unknown argument '--bogus'"),
        (["--spec-decode-acceptance-length"], "needs a value"),
    ]:
        with pytest.raises(InvalidInputError, match=message):
            read_args(args)


def test_the_sims_atom_metrics_read_back_to_its_own_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    from prometheus_client import generate_latest

    from alflow.sim.dialects import make_registry

    stats = EngineStats(k=3)
    config = SimConfig(dialect="atom", k=3)
    registry = make_registry(AtomEmitter(), stats, config)
    before = parse_exposition(generate_latest(registry).decode(), mono_ns=1)
    stats.accept_hist[:] = [5, 10, 20, 15]
    stats.num_drafts, stats.draft_tokens, stats.accepted_tokens = 50, 150, 10 + 40 + 45
    after = parse_exposition(generate_latest(registry).decode(), mono_ns=2)
    assert "atom:mtp_draft_tokens_created" not in generate_latest(registry).decode()  # ATOM sends no _created
    found = get_dialect("atom").spec_stats(SnapshotWindow(before, after), k=3)
    assert (found.num_drafts, found.accepted_tokens, found.draft_tokens) == (50, 95, 150)
    # with a refresh period the sim serves a held snapshot, as ATOM does
    monkeypatch.setenv("ALFLOW_SIM_ATOM_REFRESH_S", "3600")
    emitter = AtomEmitter()
    held = parse_exposition(generate_latest(make_registry(emitter, stats, config)).decode(), mono_ns=3)
    stats.accept_hist[3] += 100
    again = parse_exposition(generate_latest(make_registry(emitter, stats, config)).decode(), mono_ns=4)
    assert SnapshotWindow(held, again).increase(atom_metrics.MTP_DECODE_STEPS) == 0


def test_the_sim_speaks_atom_through_the_recipe() -> None:
    config = server_config(
        framework="sim",
        model="m",
        sim_dialect="atom",
        speculative={"method": "mtp", "k": 3},
        synthetic={"target_al": 2.4},
    )
    argv = list(build_launch(config).argv)
    assert argv[argv.index("--dialect") + 1] == "atom"
    assert argv[-4:] == ["--num-speculative-tokens", "3", "--spec-decode-acceptance-length", "2.4"]
    with pytest.raises(ValueError, match="dialect 'nope' is not one of vllm, sglang, trtllm, atom"):
        server_config(framework="sim", model="m", sim_dialect="nope")


def test_a_container_of_atom_gets_amd_gpus() -> None:
    launch = build_launch(atom())  # type: ignore[arg-type]

    def spec(gpus: object) -> dict[str, object]:
        return container_spec(
            launch,
            DockerOptions(gpus=gpus),  # type: ignore[arg-type]
            image=NIGHTLY,
            run_id="r",
            secrets={},
            created_s=0,
            name="n",
        )

    every = spec("all")
    assert every["devices"] == ["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"]
    assert every["group_add"] == ["video"]
    assert "device_requests" not in every
    some = spec(("0", "1"))
    assert some["environment"] == {"ROCR_VISIBLE_DEVICES": "0,1"}  # type: ignore[comparison-overlap]
    assert "devices" not in spec("none")
    assert get_framework("atom").gpu == "amd"
    assert get_framework("vllm").gpu == "nvidia"


def test_random_prompts_go_to_atom_as_words_because_its_completions_take_text_only() -> None:
    from alflow.config import RandomWorkload
    from alflow.datasets.random_tokens import TEXT_WORDS
    from alflow.workloads import random_workload_sessions

    workload = RandomWorkload(isl=32, osl=8, seed=3)
    ids = random_workload_sessions(workload, 4, framework="vllm")
    words = random_workload_sessions(workload, 4, framework="atom")
    assert get_framework("atom").token_id_prompts is False
    for as_ids, as_words in zip(ids, words, strict=True):
        tokens, text = as_ids.turns[0].prompt, as_words.turns[0].prompt
        assert not isinstance(tokens, str)
        assert isinstance(text, str)
        assert text.split() == [
            TEXT_WORDS[t % len(TEXT_WORDS)] for t in tokens
        ]  # the same draws, one word each
        assert as_words.turns[0].max_tokens == 8
    assert random_workload_sessions(workload, 4, framework="atom") == words  # seeded


def test_a_launch_of_no_registered_framework_gets_the_default_gpu_request() -> None:
    """A hand-built launch (a probe in the runner's own tests) is no framework's: the runner does not refuse it."""
    from dataclasses import replace

    from alflow_infra.runners.docker import gpu_vendor

    launch = replace(build_launch(atom()), framework="probe")  # type: ignore[arg-type]
    assert gpu_vendor("probe") is None
    spec = container_spec(
        launch, DockerOptions(gpus="all"), image=NIGHTLY, run_id="r", secrets={}, created_s=0, name="n"
    )
    assert "devices" not in spec
    assert len(spec["device_requests"]) == 1
