"""Hostile inputs that would exhaust memory or hang, and duplicates and empties (issue #35 items 5 and 7).

Config files: only a regular file of at most 1 MiB is read, the YAML loader bounds nesting and alias
expansion and refuses recursive anchors, long strings are refused naming their key path; each fails
fast with one line. Config models: upper bounds on sizes, no value given twice, no empty list or path,
no URL scheme the store does not support. Command lines: malformed comma lists. Every refusal through
``alflow run`` is exit code 2 and one line, without a traceback.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, ValidationError
from typer.testing import CliRunner

from alflow.acceptance.synthetic import K_MAX
from alflow.cli import app
from alflow.cli.common import parse_floats, split_list
from alflow.config import BenchmarkParams, CalibrateParams, GateParams, SweepParams
from alflow.config.base import (
    MAX_CONCURRENCY,
    MAX_GPUS_PER_NODE,
    MAX_NODES,
    MAX_PARALLEL,
    MAX_SEQUENCE_TOKENS,
)
from alflow.config.flows import ServerPlacement
from alflow.config.presets import PresetBenchmark, PresetCalibrate, preset_from_data
from alflow.config.runners import SlurmOptions
from alflow.config.server import DisaggregatedRole, Parallelism
from alflow.config.workloads import LoadConfig, RandomWorkload
from alflow.errors import InvalidInputError
from alflow.util.yamlfile import (
    MAX_ALIAS_NODES,
    MAX_DEPTH,
    MAX_FILE_BYTES,
    MAX_STRING_CHARS,
    load_yaml,
    parse_yaml,
    validate_strict,
)
from tests.bad_inputs import BASES, _with

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
FAST_S = 3.0
"""Every hostile file is refused within this many seconds (the probe saw 8 GB read, a hang, 120 s)."""


def _refused(load: Callable[[], object], fragment: str) -> str:
    """Run ``load``; it must raise one line containing ``fragment`` within :data:`FAST_S`."""
    start = time.monotonic()
    with pytest.raises(InvalidInputError) as info:
        load()
    elapsed = time.monotonic() - start
    message = str(info.value)
    assert elapsed < FAST_S, f"{elapsed:.1f} s: {message}"
    assert "\n" not in message, message
    assert fragment in message, message
    return message


def _billion_laughs() -> str:
    text = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        text += f"{name}: &{name} [{', '.join(['*' + prev] * 10)}]\n"
    return text


# --------------------------------------------------------------------------------------------
# The file: what it is and how large


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    message = _refused(lambda: load_yaml(fifo, what="config"), "is a FIFO (named pipe), not a config")
    assert message == f"{fifo}: is a FIFO (named pipe), not a config: give a regular file"


def test_dev_zero_is_refused_without_reading() -> None:
    _refused(lambda: load_yaml("/dev/zero", what="config"), "/dev/zero: is a character device, not a config")


def test_a_directory_is_refused(tmp_path: Path) -> None:
    _refused(lambda: load_yaml(tmp_path, what="preset"), f"{tmp_path}: is a directory, not a preset")


def test_a_2_mb_file_is_refused_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("a: [" + "1, " * 700_000 + "1]\n", encoding="utf-8")
    assert path.stat().st_size > 2_000_000
    message = _refused(
        lambda: load_yaml(path, what="config"), f"more than the {MAX_FILE_BYTES:,} bytes allowed"
    )
    assert message.startswith(f"{path}: the config is 2,")


def test_a_file_at_the_limit_is_read(tmp_path: Path) -> None:
    path = tmp_path / "ok.yaml"
    line = "# " + "x" * 1000 + "\n"
    path.write_text(line * (MAX_FILE_BYTES // len(line)) + "a: 1\n", encoding="utf-8")
    assert path.stat().st_size <= MAX_FILE_BYTES
    assert load_yaml(path) == {"a": 1}


# --------------------------------------------------------------------------------------------
# The YAML: nesting, aliases, strings


def test_5000_deep_flow_nesting_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text("a: " + "[" * 5000 + "]" * 5000 + "\n", encoding="utf-8")
    message = _refused(lambda: load_yaml(path), f"nesting deeper than {MAX_DEPTH} levels")
    assert message == f"{path}: line 1: nesting deeper than {MAX_DEPTH} levels of mappings and lists"


def test_deep_block_nesting_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text("".join(" " * i + f"k{i}:\n" for i in range(200)) + " " * 200 + "v\n", encoding="utf-8")
    _refused(lambda: load_yaml(path), f"nesting deeper than {MAX_DEPTH} levels")


def test_nesting_at_the_limit_loads(tmp_path: Path) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text("[" * MAX_DEPTH + "]" * MAX_DEPTH + "\n", encoding="utf-8")
    data = load_yaml(path)
    for _ in range(MAX_DEPTH - 1):
        data = data[0]
    assert data == []


@pytest.mark.parametrize(
    "text",
    ["a: &x [1, *x]\n", "a: &x {b: *x}\n", "a: &x {<<: *x}\n", "a: &x [[[*x]]]\n"],
    ids=["list", "mapping", "merge", "nested"],
)
def test_a_recursive_anchor_is_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "rec.yaml"
    path.write_text(text, encoding="utf-8")
    message = _refused(lambda: load_yaml(path), "alias *x refers to its own anchor &x")
    assert message == (
        f"{path}: line 1: alias *x refers to its own anchor &x (a recursive structure): write the values out"
    )


def test_billion_laughs_is_refused_fast(tmp_path: Path) -> None:
    path = tmp_path / "lol.yaml"
    path.write_text(_billion_laughs(), encoding="utf-8")
    _refused(lambda: load_yaml(path), f"aliases expand to more than {MAX_ALIAS_NODES:,} nodes")


def test_ordinary_anchors_and_merges_still_load(tmp_path: Path) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text(
        "base: &b {x: 1, y: [1, 2, 3]}\n" + "".join(f"n{i}:\n  <<: *b\n  y: {i}\n" for i in range(50)),
        encoding="utf-8",
    )
    data = load_yaml(path)
    assert data["n49"] == {"x": 1, "y": 49}


def test_a_long_string_is_refused_naming_its_key_path(tmp_path: Path) -> None:
    path = tmp_path / "long.yaml"
    path.write_text(f"server:\n  extra_args: [--a, '{'x' * (MAX_STRING_CHARS + 1)}']\n", encoding="utf-8")
    message = _refused(lambda: load_yaml(path), "server.extra_args[1]: a string of 65,537 characters")
    assert message.endswith(f"more than the {MAX_STRING_CHARS:,} allowed")


def test_a_5_mb_string_is_refused_as_too_large_a_file(tmp_path: Path) -> None:
    path = tmp_path / "long.yaml"
    path.write_text("model: {id: '" + "m" * 5_000_000 + "'}\n", encoding="utf-8")
    _refused(lambda: load_yaml(path), "more than the 1,048,576 bytes allowed")


def test_a_long_key_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "long.yaml"
    path.write_text(f"a:\n  ? {'k' * (MAX_STRING_CHARS + 1)}\n  : 1\n", encoding="utf-8")
    _refused(lambda: load_yaml(path), "a: a key: a string of 65,537 characters")


def test_a_prefect_variables_yaml_text_has_the_same_limits() -> None:
    _refused(lambda: preset_from_data("a: &x [*x]\n", "alflow-preset-x"), "alflow-preset-x: line 1: alias *x")
    _refused(lambda: preset_from_data(_billion_laughs(), "alflow-preset-x"), "aliases expand")
    _refused(lambda: parse_yaml("a: " + "[" * 5000 + "]" * 5000, "v"), "nesting deeper")


def test_deep_json_data_is_refused_in_one_line() -> None:
    data: dict[str, Any] = {}
    node = data
    for _ in range(5000):
        node["a"] = {}
        node = node["a"]
    _refused(
        lambda: validate_strict(data, BenchmarkParams, source="variable"), "nested deeper than 64 levels"
    )
    long = {**BASES["m2"], "model": {"id": "m" * 100_000}}
    _refused(
        lambda: validate_strict(long, BenchmarkParams, source="variable"), "variable: model.id: a string"
    )


# --------------------------------------------------------------------------------------------
# Upper bounds of the size fields


def _error(build: Callable[[], object]) -> str:
    with pytest.raises(ValidationError) as info:
        build()
    return str(info.value)


def _m2(**changes: Any) -> BenchmarkParams:
    return BenchmarkParams.model_validate({**BASES["m2"], **changes})


def test_sizes_have_upper_bounds() -> None:
    assert "less than or equal to 65536" in _error(lambda: LoadConfig(concurrency=100_000))
    assert "less than or equal to 1000000" in _error(lambda: LoadConfig(num_prompts=10**9))
    assert "less than or equal to 1000000" in _error(lambda: LoadConfig(warmup=10**9))
    assert "less than or equal to 1048576" in _error(lambda: RandomWorkload(isl=10**9))
    assert "less than or equal to 1048576" in _error(lambda: RandomWorkload(osl=10**9))
    assert "must all be <= 65,536" in _error(lambda: _m2(concurrencies=[100_000]))
    assert "less than or equal to 10000" in _error(lambda: _m2(prompts_per_concurrency=10**6))
    assert "less than or equal to 100" in _error(lambda: _m2(repeats=101))
    assert "more than 1,000,000 a point may send" in _error(
        lambda: _m2(prompts_per_concurrency=2000, concurrencies=[1000])
    )
    assert "must all be in [1, 65,536]" in _error(lambda: PresetBenchmark(concurrencies=(10**6,)))


def test_the_bounds_themselves_are_allowed() -> None:
    assert LoadConfig(concurrency=MAX_CONCURRENCY).concurrency == MAX_CONCURRENCY
    assert RandomWorkload(isl=MAX_SEQUENCE_TOKENS, osl=MAX_SEQUENCE_TOKENS).isl == MAX_SEQUENCE_TOKENS
    assert _m2(concurrencies=[MAX_CONCURRENCY], prompts_per_concurrency=15).concurrencies == (
        MAX_CONCURRENCY,
    )


def test_isl_plus_osl_must_fit_a_known_context() -> None:
    server = {**BASES["m2"]["server"], "max_model_len": 32_768}
    message = _error(lambda: _m2(server=server, workload={"kind": "random", "isl": 10**6, "osl": 64}))
    assert "workload.isl=1000000 + workload.osl=64 is more than server.max_model_len=32768" in message
    fits = _m2(server=server, workload={"kind": "random", "isl": 32_704, "osl": 64})
    assert fits.workload.isl == 32_704


# --------------------------------------------------------------------------------------------
# Duplicates and empties


def _m0(**changes: Any) -> CalibrateParams:
    return CalibrateParams.model_validate({**BASES["m0"], **changes})


def test_values_given_twice_are_refused() -> None:
    assert "ks [1, 2, 1] names 1 twice: give each once" in _error(lambda: _m0(ks=[1, 2, 1]))
    model = BASES["m0"]["models"][0]
    assert "models (by id) [demo-llama-70b, demo-llama-70b] names demo-llama-70b twice" in _error(
        lambda: _m0(models=[model, model])
    )
    assert "thinking [off, off] names off twice" in _error(lambda: _m0(thinking=["off", "off"]))
    assert "concurrencies [4, 8, 4] names 4 twice" in _error(lambda: _m2(concurrencies=[4, 8, 4]))
    assert "ks (2, 2) name a K twice" in _error(
        lambda: SweepParams.model_validate({**BASES["sweep"], "ks": [2, 2]})
    )
    assert "names 3 twice" in _error(lambda: PresetCalibrate(ks=(3, 3)))
    assert "names 8 twice" in _error(lambda: PresetBenchmark(concurrencies=(8, 8)))


def test_empty_lists_are_refused() -> None:
    assert "thinking is empty: give on, off or both" in _error(lambda: _m0(thinking=[]))
    assert "ks is empty: give at least one K" in _error(lambda: _m0(ks=[]))
    assert "at least 1 item" in _error(lambda: _m2(concurrencies=[]))


@pytest.mark.parametrize(
    ("root", "fragment"),
    [
        ("", "the path is empty (it would be the current folder): give a path"),
        ("  ", "the path is empty"),
        ("file:///tmp/results", "'file:///tmp/results' is a file:// URL: give the plain local path"),
        ("ftp://host/results", "'ftp://host/results' is a ftp:// URL, which is not supported here"),
        ("http://host/results", "give a local path or an s3:// or gs:// or gcs:// URL"),
    ],
)
def test_results_root_must_be_a_path_or_a_store_url(root: str, fragment: str) -> None:
    assert fragment in _error(lambda: ServerPlacement(results_root=root))
    assert fragment in _error(lambda: SweepParams.model_validate({**BASES["sweep"], "results_root": root}))


def test_results_root_takes_local_paths_and_object_stores() -> None:
    for root in ("results", "/tmp/r", "s3://bucket/alflow", "gs://bucket/alflow"):
        assert ServerPlacement(results_root=root).results_root == root


@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        ("", "the path is empty"),
        ("file:///tmp/ref.yaml", "give the plain local path, without file://"),
        ("s3://b/ref.yaml", "is a s3:// URL: reference tables are local files"),
        ("ftp://h/ref.yaml", "is a ftp:// URL: reference tables are local files"),
    ],
)
def test_reference_path_must_be_a_local_path(path: str, fragment: str) -> None:
    assert fragment in _error(lambda: _m0(reference_path=path))
    assert fragment in _error(lambda: GateParams.model_validate({**BASES["m1"], "reference_path": path}))
    m2 = {**BASES["m2"], "target_al": None, "reference_path": path}
    assert fragment in _error(lambda: BenchmarkParams.model_validate(m2))
    assert fragment in _error(lambda: PresetCalibrate(reference_path=path))


# --------------------------------------------------------------------------------------------
# Comma lists on the command line


@pytest.mark.parametrize(("text", "item"), [("1,,2", 2), ("1,", 2), (",2", 1), ("1, ,2", 2)])
def test_an_empty_item_is_refused(text: str, item: int) -> None:
    with pytest.raises(InvalidInputError) as info:
        split_list(text, "--ks")
    assert str(info.value) == (
        f"--ks {text!r}: item {item} is empty: give values separated by single commas (e.g. 1,2,3)"
    )
    with pytest.raises(InvalidInputError, match="is empty"):
        parse_floats(text, "--ks")


def test_comma_lists_that_are_well_formed() -> None:
    assert split_list(" a , b,c ", "--models") == ["a", "b", "c"]
    assert split_list(",", "--ks") == []  # nothing given: the caller says what it needs
    assert parse_floats("1, 2.5", "--x") == [1.0, 2.5]


# --------------------------------------------------------------------------------------------
# Through the command: exit 2, one line, no traceback


@pytest.fixture
def project(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALFLOW_HOME", str(ROOT))  # presets/ of this project
    monkeypatch.delenv("PREFECT_API_URL", raising=False)


def _run(*args: str) -> str:
    start = time.monotonic()
    result = CliRunner().invoke(app, ["run", *args], env={"COLUMNS": "400"})
    assert time.monotonic() - start < 10 * FAST_S
    output = result.output
    assert result.exit_code == 2, output
    assert "Traceback" not in output, output
    assert output.count("\n") == 1, output
    assert output.startswith("error: "), output
    return output.strip()


@pytest.mark.usefixtures("project")
def test_run_refuses_hostile_config_files_in_one_line(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    assert _run("m0", "--config", str(fifo)) == (
        f"error: {fifo}: is a FIFO (named pipe), not a config: give a regular file"
    )
    assert "/dev/zero: is a character device" in _run("m1", "--config", "/dev/zero")
    lol = tmp_path / "lol.yaml"
    lol.write_text(_billion_laughs(), encoding="utf-8")
    assert "aliases expand to more than 10,000 nodes" in _run("m2", "--config", str(lol))
    deep = tmp_path / "deep.yaml"
    deep.write_text("model: " + "[" * 5000 + "]" * 5000 + "\n", encoding="utf-8")
    assert "nesting deeper than 64 levels" in _run("m2", "--config", str(deep))
    rec = tmp_path / "rec.yaml"
    rec.write_text("model: &m {id: x, more: *m}\n", encoding="utf-8")
    assert "refers to its own anchor &m" in _run("m2", "--config", str(rec))
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * 2_000_000)
    assert "more than the 1,048,576 bytes allowed" in _run("m2", "--config", str(big))
    long = tmp_path / "long.yaml"
    long.write_bytes(_with("m2", {"model.id": "m" * 100_000}))
    assert "model.id: a string of 100,000 characters" in _run("m2", "--config", str(long))


@pytest.mark.usefixtures("project")
def test_run_refuses_absurd_sizes_duplicates_and_empties(tmp_path: Path) -> None:
    config = tmp_path / "m2.yaml"
    config.write_text(yaml.safe_dump({**BASES["m2"], "concurrencies": [4, 100_000]}), encoding="utf-8")
    assert "concurrencies (4, 100000) must all be <= 65,536" in _run("m2", "--config", str(config))
    config.write_bytes(_with("m2", {"placement.results_root": ""}))
    assert "placement.results_root: the path is empty" in _run("m2", "--config", str(config))
    config.write_bytes(_with("m2", {"placement.results_root": "file:///tmp/r"}))
    assert "give the plain local path" in _run("m2", "--config", str(config))
    m0 = tmp_path / "m0.yaml"
    m0.write_bytes(_with("m0", {"thinking": []}))
    assert "thinking is empty" in _run("m0", "--config", str(m0))
    m0.write_bytes(_with("m0", {"ks": [1, 1]}))
    assert "ks [1, 1] names 1 twice" in _run("m0", "--config", str(m0))


@pytest.mark.usefixtures("project")
@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ("m0", "--preset", "sim", "--ks", "1,,2"),
            "error: --ks '1,,2': item 2 is empty: give values separated by single commas (e.g. 1,2,3)",
        ),
        (("m0", "--preset", "sim", "--ks", "1,"), "error: --ks '1,': item 2 is empty"),
        (
            ("m0", "--preset", "sim", "--ks", ","),
            "error: --ks ',': expected whole numbers separated by commas",
        ),
        (
            ("m0", "--preset", "sim", "--ks", "2,2"),
            "error: --ks '2,2': 2 is given twice: give each value once",
        ),
        (("m0", "--preset", "sim", "--models", "a,,b"), "error: --models 'a,,b': item 2 is empty"),
        (("m0", "--preset", "sim", "--models", "a,a"), "error: --models 'a,a': a is given twice"),
        (
            ("m2", "--preset", "sim", "--concurrencies", "4,,8"),
            "error: --concurrencies '4,,8': item 2 is empty",
        ),
        (("m2", "--preset", "sim", "--concurrencies", "inf"), "expected whole numbers separated by commas"),
        (("m2", "--preset", "sim", "--concurrencies", "1e23"), "must all be <= 65,536"),
        (
            ("m2", "--preset", "sim", "--concurrencies", "8,8"),
            "error: --concurrencies '8,8': 8 is given twice",
        ),
    ],
)
def test_run_refuses_malformed_comma_lists(args: tuple[str, ...], line: str) -> None:
    assert line in _run(*args)


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda v: LoadConfig(timeout_s=v), "timeout_s"),
        (lambda v: LoadConfig(stall_timeout_s=v), "stall_timeout_s"),
        (lambda v: LoadConfig(request_rate=v), "request_rate"),
        (lambda v: RandomWorkload(vocab_size=int(v)), "vocab_size"),
    ],
)
def test_times_rates_and_token_ids_have_upper_bounds_in_the_config(
    build: Callable[[float], object], field: str
) -> None:
    """Seconds beyond the 64-bit nanosecond clock, rates beyond one start per ns, ids beyond 32 bits: refused
    at load, naming the field (a 1e300 stall timeout used to fail at the point, after the server was up)."""
    with pytest.raises(ValidationError, match=field):
        build(1e300 if field != "vocab_size" else 2**40)
    build(600.0 if field != "vocab_size" else 32_000)


@pytest.mark.parametrize(
    ("build", "bound"),
    [
        (lambda v: Parallelism(tp=v), MAX_PARALLEL),
        (lambda v: Parallelism(pp=v), MAX_PARALLEL),
        (lambda v: Parallelism(dp=v), MAX_PARALLEL),
        (lambda v: Parallelism(ep=v), MAX_PARALLEL),
        (lambda v: DisaggregatedRole(nodes=v), MAX_NODES),
        (lambda v: DisaggregatedRole(replicas=v), MAX_NODES),
        (lambda v: SlurmOptions(nodes=v), MAX_NODES),
        (lambda v: SlurmOptions(gpus_per_node=v), MAX_GPUS_PER_NODE),
        (lambda v: _m2(server={**BASES["m2"]["server"], "nodes": v}), MAX_NODES),
        (lambda v: _m2(target_al=float(v)), K_MAX + 1),
    ],
)
def test_parallel_sizes_nodes_and_targets_have_upper_bounds(
    build: Callable[[int], object], bound: int
) -> None:
    """tp/pp/dp/ep, nodes, replicas and GPUs per node beyond any real deployment (10**9 nodes used to reach the
    Slurm script), and a target AL beyond K_MAX + 1: refused at load, naming the bound; the bound itself loads."""
    assert f"less than or equal to {bound}" in _error(lambda: build(bound + 1))
    at_bound = ""
    try:
        build(bound)
    except (
        ValidationError
    ) as exc:  # another rule may refuse the bound (e.g. nodes vs the runner): not this one
        at_bound = str(exc)
    assert f"less than or equal to {bound}" not in at_bound


def test_m2_refuses_random_prompts_that_would_not_fit_in_memory() -> None:
    """The largest point's prompts (measured and warm-up) against the memory available: 65,536 x 15 x 1 Mi tokens
    used to be drawn at the point (an out-of-memory kill after the server started)."""
    from alflow.workloads import check_m2_prompt_memory

    huge = _m2(
        concurrencies=[4, 65_536], prompts_per_concurrency=13, workload={"kind": "random", "isl": 1_048_576}
    )
    with pytest.raises(InvalidInputError) as info:
        check_m2_prompt_memory(huge, available=64 * 2**30)
    message = str(info.value)
    assert "concurrency 65,536: 851,968 measured and 131,072 warm-up random prompts" in message
    assert "workload.isl=1,048,576" in message
    assert "more than half of the 68.7 GB" in message
    assert "\n" not in message
    check_m2_prompt_memory(_m2(), available=64 * 2**30)  # the defaults fit easily


def test_run_m2_refuses_prompts_beyond_memory_before_starting(tmp_path: Path) -> None:
    config = tmp_path / "m2.yaml"
    data = {**BASES["m2"], "concurrencies": [65_536], "prompts_per_concurrency": 13}
    data["workload"] = {"kind": "random", "isl": 1_048_576}
    config.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(app, ["run", "m2", "--config", str(config)])
    assert result.exit_code == 2, result.output
    assert "random prompts" in result.output
    assert "in memory" in result.output


class _Doc(BaseModel):
    """A small strict model for :func:`validate_strict`'s refusals."""

    when: str = ""
    values: list[float] = []


def test_validate_strict_refuses_in_one_line_naming_the_source(tmp_path: Path) -> None:
    from alflow.errors import RunnerError
    from alflow.util.yamlfile import load_yaml_model, parse_yaml, validate_strict

    # a YAML date is handed on as its ISO text, which the model then takes or refuses by its own rules
    assert (
        validate_strict(parse_yaml("when: 2026-12-06\n", "d.yaml"), _Doc, source="d.yaml").when
        == "2026-12-06"
    )
    for data, words in (
        ("just words", "expected a YAML mapping of fields, got a string"),
        (5, "expected a YAML mapping of fields, got int"),
        ({"values": [1.0, float("nan")]}, "values[1]: nan is not allowed: give a finite number"),
        ({"when": {1, 2}}, "a YAML set value is not allowed here"),
    ):
        with pytest.raises(InvalidInputError) as caught:
            validate_strict(data, _Doc, source="d.yaml")
        message = str(caught.value)
        assert message.startswith("d.yaml: "), message
        assert words in message, message
    with pytest.raises(InvalidInputError, match=r"^s\.yaml: .* characters of YAML, more than the"):
        parse_yaml("x" * (MAX_FILE_BYTES + 1), "s.yaml")
    missing = tmp_path / "missing.yaml"
    with pytest.raises(RunnerError, match=f"^{missing}"):  # the caller's own error class, the same one line
        load_yaml_model(missing, _Doc, error=RunnerError)
