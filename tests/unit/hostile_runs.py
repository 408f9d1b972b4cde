"""A seeded generator of hostile run folders (issue #49): what a careless teammate or an attacker leaves in a root.

:func:`hostile_root` copies the fixture runs (:func:`tests.unit.test_site.make_root`) and adds run folders, each
broken one way, chosen and mutated by a seed: impossible dates in names, integers beyond 64 bits, JSON nested
100,000 deep, bytes that are not JSON, FIFOs and ``/dev/zero`` where files should be, NaN and infinity, a model id
of a million characters, values of the wrong type. The catalogue, the site and the regression judge must take all
of it without raising, hanging or answering 500.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.unit.test_site import M2, make_root

Breaker = Callable[[Path, random.Random], None]


def _edit(run: Path, name: str, change: Callable[[dict[str, Any]], object]) -> None:
    """Change the JSON object in ``run/name`` (left alone when an earlier breaker made it something else)."""
    path = run / name
    try:
        data = json.loads(path.read_text()) if path.is_file() and not path.is_symlink() else None
    except (ValueError, RecursionError):  # an earlier breaker's work: left as it is
        return
    if isinstance(data, dict):
        change(data)
        _replace(path, json.dumps(data, allow_nan=True).encode())


def _set(data: dict[str, Any], dotted: str, value: object) -> None:
    *parents, last = dotted.split(".")
    node = data
    for part in parents:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[last] = value


HOSTILE_VALUES: tuple[object, ...] = (
    10**30, -(10**30), float("nan"), float("inf"), -1, 0, "", "x" * 1_000_000, [], {}, None, True,
    "<script>alert(1)</script>", "\x1b[31m\u202eevil", "9999-99-99T99:99:99", [[[[[]]]]], "\ud800evil",
)  # fmt: skip
MANIFEST_FIELDS = (
    "started", "finished", "run_id", "flow", "status", "error", "config.k", "config.ks", "config.thinking",
    "config.model.id", "config.server.image", "config.server.framework", "provenance.flow_run_id", "files",
)  # fmt: skip
SUMMARY_FIELDS = ("points", "passed", "partial", "verdicts", "entries", "target_al", "error")


def _mutate_manifest(run: Path, rng: random.Random) -> None:
    _edit(run, "manifest.json", lambda d: _set(d, rng.choice(MANIFEST_FIELDS), rng.choice(HOSTILE_VALUES)))


def _mutate_summary(run: Path, rng: random.Random) -> None:
    _edit(run, "summary.json", lambda d: _set(d, rng.choice(SUMMARY_FIELDS), rng.choice(HOSTILE_VALUES)))


def _mutate_point(run: Path, rng: random.Random) -> None:
    def change(data: dict[str, Any]) -> None:
        points = data.get("points")
        for point in points if isinstance(points, list) else []:
            if isinstance(point, dict) and point:
                point[rng.choice(sorted(point))] = rng.choice(HOSTILE_VALUES)

    _edit(run, "summary.json", change)


def _replace(path: Path, data: bytes) -> None:
    """``path`` as a new regular file holding ``data`` (whatever an earlier breaker left there: never opened)."""
    path.unlink(missing_ok=True)
    path.write_bytes(data)


def _deep(run: Path, rng: random.Random) -> None:
    name = rng.choice(("manifest.json", "summary.json", "regression.json"))
    _replace(run / name, b"[" * 100_000 + b"]" * 100_000)


def _not_json(run: Path, rng: random.Random) -> None:
    name = rng.choice(("manifest.json", "summary.json", "regression.json"))
    _replace(run / name, rng.choice((b"\xff\xfe\x00garbage", b"", b"{", b"null", b"[1, 2]", b'"text"')))


def _fifo(run: Path, rng: random.Random) -> None:
    name = rng.choice(("manifest.json", "summary.json", "regression.json", "requests.parquet"))
    (run / name).unlink(missing_ok=True)
    os.mkfifo(run / name)


def _device(run: Path, rng: random.Random) -> None:
    name = rng.choice(("manifest.json", "summary.json", "requests.parquet"))
    (run / name).unlink(missing_ok=True)
    (run / name).symlink_to(rng.choice(("/dev/zero", "/dev/urandom", "/etc/hostname")))


def _garbage_table(run: Path, rng: random.Random) -> None:
    _replace(
        run / rng.choice(("requests.parquet", "spec_stats.parquet")), rng.randbytes(rng.randint(0, 4096))
    )


def _text_column(run: Path, rng: random.Random) -> None:
    """A column of ``requests.parquet`` stored as text, its schema version kept (hostile round 4: every report and
    regression check of the root failed on it)."""
    import polars as pl

    path = run / "requests.parquet"
    try:
        metadata, frame = pl.read_parquet_metadata(path), pl.read_parquet(path)
    except Exception:  # an earlier breaker made it something else
        return
    column = rng.choice(("end_ns", "first_token_ns", "output_tokens", "start_ns"))
    frame.with_columns(pl.col(column).cast(pl.String)).write_parquet(path, metadata=metadata)


def _rewrite_table(run: Path, name: str, change: Callable[[Any], Any]) -> None:
    """``run/name`` (a parquet table) rewritten by ``change``, its schema version kept (left alone when unreadable)."""
    import polars as pl

    path = run / name
    try:
        metadata, frame = pl.read_parquet_metadata(path), pl.read_parquet(path)
    except Exception:  # an earlier breaker made it something else
        return
    change(frame).write_parquet(path, metadata=metadata)


def _impossible_points(run: Path, rng: random.Random) -> None:
    """``spec_stats.parquet`` holding what alflow never writes (hostile round 17, F3: shown valid, passed, trended)."""
    import polars as pl

    shapes: tuple[Callable[[pl.DataFrame], pl.DataFrame], ...] = (
        lambda f: f.with_columns(pl.lit(0).alias("k")),
        lambda f: f.with_columns(pl.lit(-4).alias("concurrency")),
        lambda f: f.with_columns(pl.lit(2**62).alias("concurrency")),
        lambda f: f.with_columns(pl.lit(-1e300).alias("output_throughput_per_gpu")),
        lambda f: f.with_columns(pl.lit(-5.0).alias("median_tpot_ms")),
        lambda f: f.with_columns(pl.lit(99.0).alias("achieved_al")),
        lambda f: pl.concat([f, f]),
        lambda f: f.with_columns(pl.lit(7).alias("valid")),
        lambda f: f.with_columns(pl.struct(a=pl.lit(1)).alias("achieved_al")),
    )
    _rewrite_table(run, "spec_stats.parquet", rng.choice(shapes))


def _wrong_type_records(run: Path, rng: random.Random) -> None:
    """A ``requests.parquet`` column of the right kind, the wrong type (round 17, M4: failed inside polars)."""
    import polars as pl

    shapes: tuple[Callable[[pl.DataFrame], pl.DataFrame], ...] = (
        lambda f: f.with_columns(pl.col("warmup").cast(pl.Int32)),
        lambda f: f.with_columns((pl.col("start_ns") > 0).alias("start_ns")),
        lambda f: f.with_columns(pl.col("chunk_ns").list.eval(pl.element() > 0)),
    )
    _rewrite_table(run, "requests.parquet", rng.choice(shapes))


def _listed_out_of_root(run: Path, rng: random.Random) -> None:
    """A file the manifest lists made a symlink out of the root (hostile round 6: the index said nothing)."""
    name = rng.choice(("requests.parquet", "server_metrics.parquet", "summary.json"))
    (run / name).unlink(missing_ok=True)
    (run / name).symlink_to("/etc/passwd")


BREAKERS: tuple[Breaker, ...] = (
    _mutate_manifest, _mutate_summary, _mutate_point, _deep, _not_json, _fifo, _device, _garbage_table, _text_column,
    _listed_out_of_root, _impossible_points, _wrong_type_records,
)  # fmt: skip


def hostile_root(tmp_path: Path, seed: int, runs: int = 12) -> tuple[Path, list[str]]:
    """A results root holding the fixture runs and ``runs`` hostile M2 run folders (their rels), made by ``seed``.

    Folders besides are always there: an empty one whose name holds an impossible date, one whose name is not a run
    folder's at all, and a flow folder and a run folder whose names are not UTF-8.
    """
    rng = random.Random(seed)
    root = make_root(tmp_path)
    rels = []
    for i in range(runs):
        rel = f"m2/20261201T{i:06d}Z-hostile{seed}x{i}"
        shutil.copytree(root / M2, root / rel)
        for breaker in rng.sample(BREAKERS, rng.randint(1, 3)):
            breaker(root / rel, rng)
        rels.append(rel)
    (root / "m2" / "20261399T250000Z-baddate").mkdir()
    (root / "m2" / "not-a-run").mkdir()
    for name in (b"/fl\xffow/20261201T000000Z-a", b"/m2/20261201T000001Z-bad\xff\xfe"):  # not UTF-8 (round 6)
        os.makedirs(os.fsencode(str(root)) + name)  # noqa: PTH103 (a name of bytes)
    rels.append("m2/20261399T250000Z-baddate")
    return root, rels


def unblock_fifos(root: Path) -> None:
    """Open each FIFO under ``root`` for writing and close it, so a reader stuck on one (a bug) gets EOF."""
    for path in root.rglob("*"):
        if path.is_fifo():
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                continue  # no reader: none is stuck
            os.close(fd)
