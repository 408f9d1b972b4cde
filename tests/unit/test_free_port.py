"""``alflow.frameworks.launch.free_port``: blocks of free ports, chosen below the kernel's ephemeral range.

A Slurm job binds its ports seconds after they are picked; a port from the ephemeral range can be
taken by any outgoing connection in between (a two-node sim job on one host once failed so).
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from alflow.config import Parallelism, SpeculativeConfig, server_config
from alflow.frameworks import launch
from alflow.frameworks.launch import LISTEN_PORT_FLOOR, ephemeral_range, free_port
from alflow.frameworks.recipes import build_launch
from alflow_infra.errors import RunnerError

pytestmark = pytest.mark.unit


def bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_ephemeral_range_reads_the_kernel_file_and_refuses_garbage(tmp_path: Path) -> None:
    good = tmp_path / "range"
    good.write_text("32768\t60999\n")
    assert ephemeral_range(str(good)) == (32768, 60999)
    bad = tmp_path / "bad"
    bad.write_text("not numbers\n")
    assert ephemeral_range(str(bad)) is None
    assert ephemeral_range(str(tmp_path / "missing")) is None


def test_a_block_of_ports_is_free_and_below_the_ephemeral_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launch, "ephemeral_range", lambda: (32768, 60999))
    for _ in range(20):
        first = free_port("127.0.0.1", 3)
        assert first >= LISTEN_PORT_FLOOR
        assert first + 2 < 32768
        assert all(bindable(p) for p in range(first, first + 3))


def test_a_taken_port_is_never_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the whole allowed range a single taken port, the picker falls back to a kernel port."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setattr(launch, "LISTEN_PORT_FLOOR", port - 1)
        monkeypatch.setattr(launch, "ephemeral_range", lambda: (port + 2, 60999))
        for _ in range(10):
            first = free_port("127.0.0.1", 2)  # only port-1..port is below the range: never free as a block
            assert port not in range(first, first + 2)


def test_without_a_readable_range_the_kernel_picks_and_the_block_is_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(launch, "ephemeral_range", lambda: None)
    first = free_port("0.0.0.0", 2)
    assert all(bindable(p) for p in (first, first + 1))


def test_a_count_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="count must be at least 1, not 0"):
        free_port(count=0)


def test_no_free_block_is_a_named_runner_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launch, "ephemeral_range", lambda: None)
    monkeypatch.setattr(launch, "_all_free", lambda *_: False)
    with pytest.raises(RunnerError, match=r"no 2 consecutive free TCP port\(s\) on 127.0.0.1"):
        free_port("127.0.0.1", 2)


def test_a_two_node_sim_launch_gets_a_free_block_for_both_nodes_and_the_join_port() -> None:
    config = server_config(
        framework="sim",
        model="m",
        nodes=2,
        parallelism=Parallelism(dp=2),
        speculative=SpeculativeConfig(method="mtp", k=3),
    )
    built = build_launch(config)
    assert all(bindable(p) for p in (built.port, built.port + 1, built.port + 2))
    assert f"{built.port + 2}" in built.argv


def test_a_port_handed_out_lately_is_not_handed_out_again_on_this_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two alflow processes picking at once: the second never gets the first's ports (CI once ran two sims on one
    port, each run measuring the other's server)."""
    monkeypatch.setattr(launch, "RECENT_PORTS", tmp_path / "recent")
    assert launch._reserve(25000, 2, now=1000.0)
    assert not launch._reserve(25001, 1, now=1001.0)  # overlaps the block handed out a second ago
    assert launch._reserve(25002, 1, now=1001.0)
    assert launch._reserve(
        25000, 1, now=1000.0 + launch.RECENT_PORTS_S + 1
    )  # reserved long enough ago: free again
    monkeypatch.setattr(launch, "ephemeral_range", lambda: (25004, 60999))
    monkeypatch.setattr(launch, "LISTEN_PORT_FLOOR", 24990)
    picked = {free_port("127.0.0.1") for _ in range(10)}
    assert len(picked) == 10  # ten picks, ten ports: none repeats while reserved
    monkeypatch.setattr(launch, "RECENT_PORTS", tmp_path / "missing-folder" / "recent")
    assert launch._reserve(25000, 1)  # a file that cannot be used refuses nothing
