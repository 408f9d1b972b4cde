"""Every bad config file of the table is refused at load with one line naming the file (tests/bad_inputs.py).

Also the pieces behind it: the YAML loader (duplicate keys, encodings, strict validation), the
retry rule of the tasks, malformed Prometheus counters, the ``--out`` check of ``alflow bench``.
"""

from __future__ import annotations

import math
from pathlib import Path

import aiohttp
import pytest
import yaml

from alflow.bench import check_out_dir
from alflow.cli.run import load_params
from alflow.config import BenchmarkParams, CalibrationCatalogue
from alflow.errors import InvalidInputError
from alflow.metrics.client import check_percentiles
from alflow.metrics.prometheus import MalformedMetricsError, ScrapeError, parse_exposition
from alflow.reference import table as ref
from alflow.util.yamlfile import load_yaml, load_yaml_model
from alflow_infra.errors import RecipeError, ServerRefusedError, ServerStartError
from alflow_tasks.retry import is_transient
from tests.bad_inputs import BASES, CLI_CASES, CONFIG_CASES, ConfigCase

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def test_the_table_is_large_and_its_names_unique() -> None:
    assert len(CONFIG_CASES) + len(CLI_CASES) >= 300  # benchmarks/fault_suite.py runs them all
    names = [c.name for c in CONFIG_CASES] + [c.name for c in CLI_CASES]
    assert len(names) == len(set(names)), [n for n in names if names.count(n) > 1]


@pytest.mark.parametrize("flow", sorted(BASES))
def test_each_base_config_loads(flow: str, tmp_path: Path) -> None:
    path = tmp_path / f"{flow}.yaml"
    path.write_text(yaml.safe_dump(BASES[flow], sort_keys=False), encoding="utf-8")
    assert load_params(flow, path) is not None


@pytest.mark.parametrize("case", CONFIG_CASES, ids=lambda c: c.name)
def test_bad_config_is_refused_at_load_in_one_line(case: ConfigCase, tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_bytes(case.content)
    with pytest.raises(InvalidInputError) as info:
        load_params(case.flow, path)
    message = str(info.value)
    assert "\n" not in message, message
    assert message.startswith(f"{path}:"), message
    assert case.fragment in message, message


def test_duplicate_key_names_key_and_both_lines(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("a: 1\nb:\n  c: 2\n  c: 3\n", encoding="utf-8")
    with pytest.raises(
        InvalidInputError, match=r"line 4, column 3: duplicate key 'c' \(first at line 3, again at line 4\)"
    ):
        load_yaml(path)


def test_merge_keys_may_be_overridden(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("base: &b {x: 1, y: 2}\nother:\n  <<: *b\n  y: 3\n", encoding="utf-8")
    assert load_yaml(path)["other"] == {"x": 1, "y": 3}


def test_utf8_with_a_byte_order_mark_is_text(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes("\ufeffa: é\n".encode())
    assert load_yaml(path) == {"a": "é"}


def test_strict_load_keeps_lists_for_tuples_and_strings_for_enums(tmp_path: Path) -> None:
    path = tmp_path / "m2.yaml"
    path.write_text(yaml.safe_dump(BASES["m2"]), encoding="utf-8")
    params = load_yaml_model(path, BenchmarkParams)
    assert params.concurrencies == (4, 16)
    assert params.server.framework == "sim"
    assert params.target_al == 2.73


def test_ints_for_floats_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "m2.yaml"
    path.write_text(yaml.safe_dump({**BASES["m2"], "target_al": 3}), encoding="utf-8")
    assert load_yaml_model(path, BenchmarkParams).target_al == 3.0


def test_every_committed_yaml_file_still_loads() -> None:
    for path in sorted((ROOT / "references").glob("*.yaml")):
        if path.name == "models.yaml":
            assert load_yaml_model(path, CalibrationCatalogue).models
        else:
            assert ref.load_reference(path).entries
    data = load_yaml(ROOT / "prefect.yaml")
    assert data["deployments"]


def test_reference_errors_keep_their_entry_names(tmp_path: Path) -> None:
    text = (
        (ROOT / "references" / "examples.yaml").read_text(encoding="utf-8").replace("k: 1\n", "k: true\n", 1)
    )
    path = tmp_path / "ref.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ref.ReferenceTableError, match=r"entries\[0\]\.k \(.* K=True\): .*valid integer"):
        ref.load_reference(path)


def test_diff_tolerance_must_be_finite() -> None:
    table = ref.load_reference(ROOT / "references" / "examples.yaml")
    for bad in (math.nan, math.inf, -0.1):
        with pytest.raises(InvalidInputError, match="finite number >= 0"):
            ref.diff_tables(table, table, tolerance=bad)


@pytest.mark.parametrize("values", [(), (150.0,), (0.0,), (-1.0,), (math.nan,), (math.inf,)])
def test_percentiles_outside_0_100_are_refused(values: tuple[float, ...]) -> None:
    with pytest.raises(InvalidInputError, match="percentile"):
        check_percentiles(values, "--percentiles")


def test_percentile_100_is_the_maximum() -> None:
    assert check_percentiles([50, 100]) == (50.0, 100.0)


def test_out_dir_checks(tmp_path: Path) -> None:
    check_out_dir(tmp_path / "new" / "run")  # a directory to be made: fine, and nothing is made yet
    assert not (tmp_path / "new").exists()
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "notes.txt").write_text("mine")
    check_out_dir(tmp_path / "run")  # a directory with other files: fine
    (tmp_path / "run" / "records.parquet").write_bytes(b"")
    with pytest.raises(InvalidInputError, match="already holds a run"):
        check_out_dir(tmp_path / "run")


# --------------------------------------------------------------------------------------------
# Prometheus: impossible counter values are malformed metrics, not a restart


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("# TYPE vllm:spec_decode_num_drafts counter\nvllm:spec_decode_num_drafts_total NaN\n", "= nan"),
        ("# TYPE vllm:spec_decode_num_drafts counter\nvllm:spec_decode_num_drafts_total -4\n", "= -4.0"),
        ('# TYPE c counter\nc_total{engine="0"} +Inf\n', 'c_total{engine="0"} = inf'),
        ("sglang:num_drafts_total -1\n", "sglang:num_drafts_total = -1.0"),
        ('# TYPE h histogram\nh_bucket{le="+Inf"} NaN\nh_count 1\nh_sum 1\n', "h_bucket"),
    ],
)
def test_nan_or_negative_counters_are_malformed(text: str, shown: str) -> None:
    with pytest.raises(MalformedMetricsError, match="malformed") as info:
        parse_exposition(text, url="http://x/metrics")
    assert shown in str(info.value)
    assert "restart" not in str(info.value).replace("not a server restart", "")


def test_gauges_may_be_nan() -> None:
    snap = parse_exposition("# TYPE g gauge\ng NaN\n# TYPE h histogram\nh_sum -2\nh_count 1\n")
    assert math.isnan(snap.gauge("g") or 0.0)


# --------------------------------------------------------------------------------------------
# Retries: transient failures only


def _caused(outer: Exception, cause: BaseException) -> Exception:
    try:
        raise outer from cause
    except Exception as exc:
        return exc


@pytest.mark.parametrize(
    "exc",
    [
        TimeoutError("slow"),
        ConnectionRefusedError("refused"),
        aiohttp.ServerDisconnectedError(),
        ScrapeError("metrics answered HTTP 503", status=503),
        ScrapeError("rate limited", status=429),
        _caused(ScrapeError("cannot scrape"), aiohttp.ClientConnectionError("down")),
        _caused(ScrapeError("cannot scrape"), TimeoutError()),
        ServerStartError("not healthy after 60 s"),
    ],
    ids=repr,
)
def test_transient_failures_retry(exc: BaseException) -> None:
    assert is_transient(exc)


@pytest.mark.parametrize(
    "exc",
    [
        InvalidInputError("target AL 9 is outside"),
        RecipeError("sglang refuses"),
        ServerRefusedError("bad flag"),
        MalformedMetricsError("NaN counter"),
        ScrapeError("metrics answered HTTP 404", status=404),
        ref.ReferenceTableError("bad table"),
        _caused(InvalidInputError("bad"), TimeoutError()),
        ValueError("a bug"),
        KeyError("a bug"),
    ],
    ids=repr,
)
def test_permanent_failures_do_not_retry(exc: BaseException) -> None:
    assert not is_transient(exc)
