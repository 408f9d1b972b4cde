"""The catalogue of a results root: entries, refresh by mtime, damaged runs, history rules, the disk cache."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import fsspec
import pytest

from alflow.errors import InvalidInputError
from alflow.results.catalog import Catalog, read_verdicts
from alflow.results.series import SeriesKey, split_image
from alflow.results.store import RunWriter
from alflow.site.pages import RunRow, TrendQuery, trends_page
from alflow.util.rows import dump_row, load_checked
from tests.regression_reports import m2_report

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "4f9de94"


def point(concurrency: int, **changes: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "concurrency": concurrency,
        "k": 3,
        "framework": "vllm",
        "target_al": 2.5,
        "achieved_al": 2.5,
        "valid": True,
        "partial": False,
        "audit": "ok",
        "output_throughput_per_gpu": 100.0 * concurrency,
        "median_tpot_ms": 5.0,
        "median_interactivity_tokens_per_s": 200.0,
        "duration_s": 1.0,
        "client_verdict": "ok",
    }
    return {**row, **changes}


def write_run(
    root: Path,
    started: str,
    *,
    flow: str = "m2",
    model: str = "llama",
    framework: str = "vllm",
    image: str | None = "vllm/vllm-openai:v0.11.0",
    thinking: str = "off",
    status: str = "complete",
    points: list[dict[str, Any]] | None = None,
    regression: object = None,
    summary: dict[str, Any] | None = None,
) -> Path:
    """A run directory written as the store writes one (manifest, summary.json), no parquet: fast."""
    when = datetime.fromisoformat(started)
    run_id = uuid.uuid4().hex[:12]
    run_dir = root / flow / f"{when.strftime('%Y%m%dT%H%M%SZ')}-{run_id}"
    run_dir.mkdir(parents=True)
    pts = [point(4)] if points is None else points
    data = summary if summary is not None else {"flow": flow, "target_al": 2.5, "scheme": None, "points": pts}
    (run_dir / "summary.json").write_text(json.dumps({"schema_version": 1, **data}))
    manifest = {
        "schema_version": 1,
        "flow": flow,
        "run_id": run_id,
        "status": status,
        "simulated": True,
        "started": when.isoformat(),
        "finished": when.isoformat(),
        "config": {
            "model": {"id": model},
            "k": 3,
            "thinking": thinking,
            "server": {"framework": framework, "image": image},
        },
        "files": {"summary.json": {"written": when.isoformat()}},
    }
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    if regression is not None:
        text = regression if isinstance(regression, str) else json.dumps(regression)
        (run_dir / "regression.json").write_text(text)
    return run_dir


def key(concurrency: int = 4, **changes: Any) -> SeriesKey:
    base = {
        "framework": "vllm",
        "image": "vllm/vllm-openai",
        "model": "llama",
        "k": 3,
        "concurrency": concurrency,
        "thinking": "off",
        "target_al": "2.5000",  # point()'s target
    }
    return SeriesKey(**{**base, **changes})


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("vllm/vllm-openai:v0.11.0", ("vllm/vllm-openai", "v0.11.0")),
        ("localhost:5000/vllm/vllm-openai:v0.11.0", ("localhost:5000/vllm/vllm-openai", "v0.11.0")),
        ("localhost:5000/vllm/vllm-openai", ("localhost:5000/vllm/vllm-openai", "")),
        ("repo@sha256:abcd", ("repo", "sha256:abcd")),
        ("registry:443/repo:tag@sha256:abcd", ("registry:443/repo", "tag")),
        ("ubuntu", ("ubuntu", "")),
        ("", ("", "")),
        (None, ("", "")),
    ],
)
def test_split_image(image: str | None, expected: tuple[str, str]) -> None:
    assert split_image(image) == expected


def test_series_key_round_trips_and_refuses_bad_data() -> None:
    k = key(16, thinking="")
    assert load_checked(SeriesKey, json.loads(json.dumps(dump_row(k))), "series") == k
    assert k.label() == "vllm vllm/vllm-openai llama K=3 c=16 target AL 2.5000"
    assert key(16, thinking="", scheme="vllm").label().endswith("target AL 2.5000 (vllm)")
    before = {name: v for name, v in dump_row(k).items() if name not in ("target_al", "scheme", "workload")}
    older = {**before, "target_al": "", "scheme": "", "workload": ""}
    assert load_checked(SeriesKey, before, "series") == load_checked(
        SeriesKey, older, "series"
    )  # older files
    with pytest.raises(InvalidInputError, match="series field k 'x': must be a valid integer"):
        load_checked(SeriesKey, {**dump_row(k), "k": "x"}, "series")
    with pytest.raises(InvalidInputError, match="series field k '3': must be a valid integer"):
        load_checked(SeriesKey, {**dump_row(k), "k": "3"}, "series")  # no coercion
    with pytest.raises(InvalidInputError, match="series field concurrency True: must be a valid integer"):
        load_checked(SeriesKey, {**dump_row(k), "concurrency": True}, "series")
    with pytest.raises(InvalidInputError, match="series field model: missing, required"):
        load_checked(SeriesKey, {key_: v for key_, v in dump_row(k).items() if key_ != "model"}, "series")
    with pytest.raises(InvalidInputError, match="series field thinking 1: must be a valid string"):
        load_checked(SeriesKey, {**dump_row(k), "thinking": 1}, "series")
    with pytest.raises(InvalidInputError, match="expected a JSON object"):
        load_checked(SeriesKey, [1, 2], "series")


def _served_by_process(run_dir: Path, framework: str, launch_image: str | None) -> None:
    """Give ``run_dir``'s manifest the server record of a process-run server (live version 0.32.0)."""
    manifest = json.loads((run_dir / "manifest.json").read_text())
    provenance = {"framework": framework, "framework_version": "0.32.0"}
    if launch_image is not None:
        provenance["image"] = launch_image
    manifest["provenance"] = {"server": {"runner": "process", "provenance": provenance}}
    (run_dir / "manifest.json").write_text(json.dumps(manifest))


def test_a_process_run_server_lists_what_served_it_never_the_configured_image(tmp_path: Path) -> None:
    vllm = write_run(tmp_path, "2026-01-01T00:00:00+00:00", image="vllm/vllm-openai:latest")
    _served_by_process(vllm, "vllm", None)  # the configuration names an image; the process runner used none
    sim = write_run(tmp_path, "2026-01-02T00:00:00+00:00", framework="sim", image=None)
    _served_by_process(sim, "sim", "alflow-sim:nightly-2")  # the sim's image is its label, kept by its launch
    catalog = Catalog(str(tmp_path))
    by_rel = {e.rel: e for e in catalog.entries()}
    real, label = by_rel[f"m2/{vllm.name}"], by_rel[f"m2/{sim.name}"]
    assert (real.image, real.image_tag, real.served) == (None, None, "vllm 0.32.0 (process)")
    assert RunRow.of(real).image == "vllm 0.32.0 (process)"
    assert [k.image for k, _ in real.series()] == [""]
    assert (label.image, label.image_tag, label.served) == ("alflow-sim:nightly-2", "nightly-2", None)


def test_the_fixture_runs_are_catalogued_newest_first_with_their_facts() -> None:
    catalog = Catalog(str(FIXTURES))
    entries = catalog.entries()
    assert [e.flow for e in entries] == ["sweep", "m2", "m1", "m1", "m0"]
    m2 = entries[1]
    assert (m2.model, m2.framework, m2.image_tag, m2.ks, m2.thinking) == (
        "demo-llama-70b",
        "sim",
        "local",
        (3,),
        "off",
    )
    assert [p.concurrency for p in m2.points] == [4, 8, 16]
    assert m2.outcome == "passed"
    assert entries[2].outcome == "failed"  # the degraded M1 run
    assert entries[4].ks == (1, 2, 3)
    assert entries[4].thinking == "on,off"
    assert catalog.get(m2.rel) is m2
    assert catalog.get("m2/nothing") is None
    assert [k.concurrency for k, _ in m2.series()] == [4, 8, 16]
    assert m2.series()[0][0].image == "alflow-sim-base"


def test_refresh_rereads_only_changed_runs_and_sees_new_and_removed_ones(tmp_path: Path) -> None:
    a = write_run(tmp_path, "2026-01-01T00:00:00+00:00")
    b = write_run(tmp_path, "2026-01-02T00:00:00+00:00")
    catalog = Catalog(str(tmp_path), min_refresh_s=3600)
    assert catalog.reads == 2
    catalog.refresh(force=True)
    assert catalog.reads == 2  # nothing changed: nothing read
    manifest = json.loads((a / "manifest.json").read_text())
    manifest["status"] = "failed"
    (a / "manifest.json").write_text(json.dumps(manifest))
    st = (a / "manifest.json").stat()
    os.utime(a / "manifest.json", ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    catalog.refresh()  # throttled: min_refresh_s has not passed
    assert catalog.reads == 2
    catalog.refresh(force=True)
    assert catalog.reads == 3
    assert catalog.get(f"m2/{a.name}").status == "failed"  # type: ignore[union-attr]
    c = write_run(tmp_path, "2026-01-03T00:00:00+00:00")
    shutil.rmtree(b)
    catalog.refresh(force=True)
    assert catalog.reads == 4
    assert [e.rel for e in catalog.entries()] == [f"m2/{c.name}", f"m2/{a.name}"]


def test_a_new_regression_json_is_picked_up_without_a_manifest_change(tmp_path: Path) -> None:
    a = write_run(tmp_path, "2026-01-01T00:00:00+00:00")
    catalog = Catalog(str(tmp_path))
    assert catalog.entries()[0].verdict is None
    (a / "regression.json").write_text(json.dumps(m2_report([(key(), "regressed")])))
    catalog.refresh(force=True)
    entry = catalog.entries()[0]
    assert entry.verdict == "regressed"
    assert entry.verdict_of(key()) == "regressed"
    assert entry.verdict_of(key(8)) is None


def test_damaged_runs_are_listed_as_unreadable_with_the_reason(tmp_path: Path) -> None:
    good = write_run(tmp_path, "2026-01-01T00:00:00+00:00")
    bad_json = write_run(tmp_path, "2026-01-02T00:00:00+00:00")
    (bad_json / "manifest.json").write_text("{not json")
    no_manifest = tmp_path / "m2" / "20260103T000000Z-deadbeef0000"
    no_manifest.mkdir()
    other_version = write_run(tmp_path, "2026-01-04T00:00:00+00:00")
    data = json.loads((other_version / "manifest.json").read_text())
    (other_version / "manifest.json").write_text(json.dumps({**data, "schema_version": 99}))
    (tmp_path / "m2" / "not-a-run-dir").mkdir()  # not a run directory's name: not listed
    catalog = Catalog(str(tmp_path))
    by_rel = {e.rel: e for e in catalog.entries()}
    assert len(by_rel) == 4
    assert by_rel[f"m2/{good.name}"].status == "complete"
    assert by_rel[f"m2/{bad_json.name}"].status == "unreadable"
    assert "not readable JSON" in (by_rel[f"m2/{bad_json.name}"].problem or "")
    assert "does not exist" in (by_rel[f"m2/{no_manifest.name}"].problem or "")
    assert (
        by_rel[f"m2/{no_manifest.name}"].started == "2026-01-03T00:00:00+00:00"
    )  # from the directory's name
    assert "schema version 99" in (by_rel[f"m2/{other_version.name}"].problem or "")
    assert by_rel[f"m2/{other_version.name}"].outcome == "unreadable"
    assert not any(str(tmp_path) in (e.problem or "") for e in by_rel.values())  # named by rel, not by path


def test_outcomes_of_runs(tmp_path: Path) -> None:
    write_run(tmp_path, "2026-01-01T00:00:00+00:00", points=[point(4, partial=True, valid=False)])
    write_run(tmp_path, "2026-01-02T00:00:00+00:00", points=[point(4, valid=False)])
    write_run(tmp_path, "2026-01-03T00:00:00+00:00", status="running")
    write_run(
        tmp_path,
        "2026-01-04T00:00:00+00:00",
        flow="m1",
        summary={"flow": "m1", "subject": "x", "passed": False},
    )
    write_run(tmp_path, "2026-01-05T00:00:00+00:00")
    outcomes = [e.outcome for e in Catalog(str(tmp_path)).entries()]
    assert outcomes == ["passed", "failed", "running", "failed", "partial"]


def test_runs_at_two_target_als_are_two_series_and_never_each_others_history(tmp_path: Path) -> None:
    at = {
        2.587: write_run(tmp_path, "2026-01-01T00:00:00+00:00", points=[point(4, target_al=2.587)]),
        1.5: write_run(
            tmp_path, "2026-01-02T00:00:00+00:00", points=[point(4, target_al=1.5, scheme="vllm")]
        ),
    }
    catalog = Catalog(str(tmp_path))
    keys = catalog.series_keys()
    assert [(k.target_al, k.scheme) for k in keys] == [("1.5000", "vllm"), ("2.5870", "")]
    page = trends_page(catalog, TrendQuery())
    assert [s.label for s in page.series] == [
        "vllm vllm/vllm-openai llama K=3 c=4 thinking=off target AL 1.5000 (vllm)",
        "vllm vllm/vllm-openai llama K=3 c=4 thinking=off target AL 2.5870",
    ]
    for series in page.series:
        assert len(series.points) == 1
    history = catalog.history(key(target_al="2.5870"), before="2026-01-03", n=10)
    assert [e.rel for e, _ in history] == [f"m2/{at[2.587].name}"]


def test_history_keeps_only_good_runs_before_the_date_newest_first(tmp_path: Path) -> None:
    runs = {
        "old": write_run(tmp_path, "2026-01-01T00:00:00+00:00"),
        "good": write_run(tmp_path, "2026-01-02T00:00:00+00:00", points=[point(4), point(8)]),
        "invalid": write_run(tmp_path, "2026-01-03T00:00:00+00:00", points=[point(4, valid=False)]),
        "partial": write_run(tmp_path, "2026-01-04T00:00:00+00:00", points=[point(4, partial=True)]),
        "client": write_run(
            tmp_path, "2026-01-05T00:00:00+00:00", points=[point(4, client_verdict="client-bound")]
        ),
        "failed": write_run(tmp_path, "2026-01-06T00:00:00+00:00", status="failed"),
        "running": write_run(tmp_path, "2026-01-07T00:00:00+00:00", status="running"),
        "other image": write_run(tmp_path, "2026-01-08T00:00:00+00:00", image="lmsysorg/sglang:v1"),
        "latest": write_run(tmp_path, "2026-01-09T00:00:00+00:00"),
        "after": write_run(tmp_path, "2026-01-20T00:00:00+00:00"),
    }
    rel = {name: f"m2/{d.name}" for name, d in runs.items()}
    catalog = Catalog(str(tmp_path))
    got = catalog.history(key(), before="2026-01-10T00:00:00+00:00", n=10)
    assert [e.rel for e, _ in got] == [rel["latest"], rel["good"], rel["old"]]
    assert [e.rel for e, _ in catalog.history(key(), before="2026-01-10", n=2)] == [
        rel["latest"],
        rel["good"],
    ]
    assert [
        e.rel for e, _ in catalog.history(key(), before="2026-01-10", n=2, exclude_rel=rel["latest"])
    ] == [
        rel["good"],
        rel["old"],
    ]
    assert [e.rel for e, _ in catalog.history(key(8), before="2026-02-01", n=5)] == [rel["good"]]
    assert catalog.history(key(), before="2026-01-01T00:00:00+00:00", n=5) == []  # strictly before
    with pytest.raises(InvalidInputError, match="before 'yesterday': not an ISO 8601 time"):
        catalog.history(key(), before="yesterday", n=5)
    assert [e.rel for e, _ in catalog.history(key(image="lmsysorg/sglang"), before="2026-02-01", n=5)] == [
        rel["other image"]
    ]


def test_history_returns_every_repeat_of_a_run_and_counts_runs(tmp_path: Path) -> None:
    write_run(tmp_path, "2026-01-01T00:00:00+00:00")
    two = write_run(tmp_path, "2026-01-02T00:00:00+00:00", points=[point(4, repeat=0), point(4, repeat=1)])
    got = Catalog(str(tmp_path)).history(key(), before="2026-02-01", n=1)
    assert [(e.rel, p.repeat) for e, p in got] == [(f"m2/{two.name}", 0), (f"m2/{two.name}", 1)]


def test_regression_json_is_read_tolerantly() -> None:
    good = {"outcome": "improved", "concurrency": 4, "series": dump_row(key())}
    series_without_concurrency = {k: v for k, v in dump_row(key(8)).items() if k != "concurrency"}
    data = {
        "points": [
            good,
            {"outcome": "unchanged", "concurrency": 8, "series": series_without_concurrency},
            {"outcome": "exploded", "series": dump_row(key())},
            {"outcome": "regressed", "series": {"k": "three"}},
            "garbage",
        ]
    }
    verdict, per = read_verdicts(data)
    assert verdict == "improved"
    assert per == ((key(), "improved"), (key(8), "unchanged"))
    reference = {
        "points": [{"outcome": "unchanged", "series": {}}, {"outcome": "moved", "reference": "llama K=1"}]
    }
    assert read_verdicts(reference) == ("moved", ())  # no series, still the run's verdict
    assert read_verdicts({"points": "x"}) == (None, ())
    assert read_verdicts([1]) == (None, ())
    assert read_verdicts(None) == (None, ())


def test_a_garbage_regression_json_leaves_the_run_readable(tmp_path: Path) -> None:
    write_run(tmp_path, "2026-01-01T00:00:00+00:00", regression="{oops")
    (entry,) = Catalog(str(tmp_path)).entries()
    assert entry.status == "complete"
    assert entry.verdict is None


@pytest.mark.timeout(30)
def test_a_fifo_or_a_symlink_out_of_the_root_is_not_read(tmp_path: Path) -> None:
    root = tmp_path / "root"
    fifo_run = write_run(root, "2026-01-01T00:00:00+00:00")
    os.mkfifo(fifo_run / "regression.json")  # opening it for reading would block for good
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"points": [{"outcome": "regressed", "series": dump_row(key())}]}))
    link_run = write_run(root, "2026-01-02T00:00:00+00:00")
    (link_run / "regression.json").symlink_to(outside)
    fine = write_run(root, "2026-01-03T00:00:00+00:00")
    entries = {e.rel: e for e in Catalog(str(root)).entries()}
    for run in (fifo_run, link_run):
        entry = entries[f"m2/{run.name}"]
        assert entry.status == "unreadable"
        assert entry.verdict is None
        assert entry.problem == f"m2/{run.name}/regression.json: not a regular file inside the results root"
        assert str(tmp_path) not in str(entry.problem)
    assert entries[f"m2/{fine.name}"].status == "complete"


def test_the_disk_cache_makes_a_cold_start_read_nothing_and_stays_out_of_the_root(tmp_path: Path) -> None:
    root, cache = tmp_path / "root", tmp_path / "cache"
    a = write_run(
        root,
        "2026-01-01T00:00:00+00:00",
        regression=m2_report([(key(), "regressed")]),
    )
    write_run(root, "2026-01-02T00:00:00+00:00")
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    first = Catalog(str(root), cache_dir=cache)
    assert first.reads == 2
    second = Catalog(str(root), cache_dir=cache)
    assert second.reads == 0
    assert second.entries() == first.entries()
    assert second.entries()[1].verdict_of(key()) == "regressed"
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before  # nothing written into the root
    assert len(list(cache.iterdir())) == 1
    manifest = a / "manifest.json"
    os.utime(manifest, ns=(manifest.stat().st_atime_ns, manifest.stat().st_mtime_ns + 10**9))
    third = Catalog(str(root), cache_dir=cache)
    assert third.reads == 1
    next(cache.iterdir()).write_text("{broken")
    assert Catalog(str(root), cache_dir=cache).reads == 2  # a broken cache is ignored


def test_a_memory_url_root_is_catalogued_and_refreshed() -> None:
    root = f"memory://catalog-{uuid.uuid4().hex[:8]}"
    try:
        with RunWriter(
            root, "m2", config={"model": {"id": "llama"}, "k": 3}, started=datetime(2026, 1, 1, tzinfo=UTC)
        ) as w:
            w.write_summary({"flow": "m2", "target_al": 2.5, "scheme": None, "points": [point(4)]})
        catalog = Catalog(root, min_refresh_s=0)
        (entry,) = catalog.entries()
        assert entry.rel.startswith("m2/20260101T000000Z-")
        assert [p.concurrency for p in entry.points] == [4]
        assert catalog.reads == 1
        catalog.refresh(force=True)
        assert catalog.reads == 1  # fs.info says nothing changed
        with RunWriter(
            root, "m2", config={"model": {"id": "llama"}, "k": 3}, started=datetime(2026, 1, 2, tzinfo=UTC)
        ):
            pass
        catalog.refresh(force=True)
        assert len(catalog.entries()) == 2
        assert catalog.reads == 2
    finally:
        fsspec.filesystem("memory").rm(root.removeprefix("memory://"), recursive=True)


def test_copies_of_one_run_are_one_history_run_and_none_when_they_copy_the_judged_one(tmp_path: Path) -> None:
    """Hostile round 4: four folders of one run (one run id) were four independent history runs."""
    import shutil

    first = write_run(tmp_path, "2026-01-01T00:00:00+00:00")
    judged = write_run(tmp_path, "2026-01-05T00:00:00+00:00")
    for i in (1, 2, 3):
        shutil.copytree(first, first.parent / f"20260102T00000{i}Z-copy{i}")
    shutil.copytree(judged, judged.parent / "20260103T000000Z-copy-of-judged")
    catalog = Catalog(str(tmp_path))
    got = catalog.history(key(), before="2026-01-10T00:00:00+00:00", n=10, exclude_rel=f"m2/{judged.name}")
    assert (
        len(got) == 1
    )  # one run: the first and its three copies; the judged run's copy is not its own history
    assert {e.run_id for e, _ in got} == {catalog.get(f"m2/{first.name}").run_id}  # type: ignore[union-attr]


def test_a_copy_under_another_run_id_is_the_same_measurement(tmp_path: Path) -> None:
    """Hostile round 5 (R1): a folder copied with its run id rewritten counted as a second history run."""
    import shutil

    first = write_run(tmp_path, "2026-01-01T00:00:00+00:00")
    judged = write_run(tmp_path, "2026-01-05T00:00:00+00:00")
    for i, source in enumerate((first, first, judged)):
        copy = source.parent / f"2026010{2 + i}T000000Z-renamed{i}"
        shutil.copytree(source, copy)
        manifest = json.loads((copy / "manifest.json").read_text())
        manifest["run_id"] = f"renamed{i}"
        (copy / "manifest.json").write_text(json.dumps(manifest))
    catalog = Catalog(str(tmp_path))
    assert {e.run_id for e in catalog.entries()} >= {"renamed0", "renamed1", "renamed2"}
    got = catalog.history(key(), before="2026-01-10T00:00:00+00:00", n=10, exclude_rel=f"m2/{judged.name}")
    original = catalog.get(f"m2/{first.name}")
    assert original is not None
    assert [e.measured for e, _ in got] == [original.measured]  # one of the three folders stands for the run
    other = write_run(tmp_path, "2026-01-06T00:00:00+00:00")  # a real second run of the series still counts
    catalog.refresh(force=True)
    got = catalog.history(key(), before="2026-01-10T00:00:00+00:00", n=10, exclude_rel=f"m2/{judged.name}")
    assert len(got) == 2
    assert f"m2/{other.name}" in {e.rel for e, _ in got}


def test_impossible_runs_are_no_history(tmp_path: Path) -> None:
    """Hostile round 5 (R11, R17, R19): an epoch start, an end before the start, a valid point of 0 requests."""
    good = write_run(tmp_path, "2026-01-01T00:00:00+00:00")
    write_run(tmp_path, "1970-01-01T00:00:01+00:00")
    write_run(tmp_path, "2026-01-02T00:00:00+00:00", points=[point(4, completed=0)])
    backwards = write_run(tmp_path, "2026-01-03T00:00:00+00:00")
    manifest = json.loads((backwards / "manifest.json").read_text())
    manifest["finished"] = "2025-12-31T00:00:00+00:00"
    (backwards / "manifest.json").write_text(json.dumps(manifest))
    catalog = Catalog(str(tmp_path))
    assert len(catalog.entries()) == 4  # listed (the site shows them); only history leaves them out
    got = catalog.history(key(), before="2026-01-10T00:00:00+00:00", n=10)
    assert [e.rel for e, _ in got] == [f"m2/{good.name}"]
