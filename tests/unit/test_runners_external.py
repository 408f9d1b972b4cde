"""External runner: attach to a server someone else started (a loopback server here); never stop it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from alflow.config import ExternalServer, server_config
from alflow.frameworks.recipes import build_launch
from alflow.frameworks.sglang.names import SGLANG_METRICS_PATH
from alflow.frameworks.trtllm.names import TRTLLM_METRICS_PATH
from alflow_infra.errors import RunnerError, ServerStartError
from alflow_infra.runners import ExternalRunner, make_runner, running_server
from alflow_infra.runners.base import health_ok
from tests.unit.loopback_http import Health, serving

pytestmark = pytest.mark.unit


@pytest.fixture
def server() -> Iterator[str]:
    with serving(Health) as url:
        yield url


def test_attach_wait_and_never_stop(server: str) -> None:
    runner = make_runner(ExternalServer(base_url=server + "/", dialect="trtllm"))
    assert isinstance(runner, ExternalRunner)
    launch = build_launch(server_config(framework="trtllm", model="m", port=1234))
    with running_server(runner, launch, timeout_s=5) as handle:
        assert handle.base_url == server
        assert handle.metrics_url == server + TRTLLM_METRICS_PATH
        assert handle.health_url == server + "/health"
        assert handle.id == server
        assert handle.provenance.external is True
        assert runner.logs(handle) == ""
    # still running after stop
    assert health_ok(server + "/health")


def test_explicit_metrics_url_and_dialect_mismatch(server: str) -> None:
    runner = ExternalRunner(
        ExternalServer(base_url=server, dialect="sglang", metrics_url="http://prom:9090/x")
    )
    assert runner.attach().metrics_url == "http://prom:9090/x"
    assert ExternalRunner(ExternalServer(base_url=server, dialect="sglang")).attach().metrics_url == (
        server + SGLANG_METRICS_PATH
    )
    with pytest.raises(RunnerError, match="speaks 'sglang'"):
        runner.start(build_launch(server_config(framework="vllm", model="m", port=1234)))


def test_unhealthy_external_server_times_out(server: str) -> None:
    runner = ExternalRunner(ExternalServer(base_url=server, dialect="vllm", health_path="/nope"))
    with pytest.raises(ServerStartError, match="not healthy"):
        runner.wait_ready(runner.attach(), timeout_s=0.5)
