"""Which alflow runs are over, for the Slurm reclaimer (``alflow_tasks.servers.flow_run_is_live``), against Prefect's API."""

from __future__ import annotations

import uuid

import pytest
from prefect import flow
from prefect.client.orchestration import get_client
from prefect.runtime import flow_run
from prefect.states import Crashed, Running

from alflow_tasks.servers import flow_run_is_live

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("prefect_harness")]


@flow(name="liveness-probe")
def probe() -> tuple[str, bool]:
    """This flow run's id and whether it counts as live from inside."""
    own = str(flow_run.get_id())
    return own, flow_run_is_live(own)


def test_finished_unknown_and_foreign_runs_are_over_while_running_ones_are_live() -> None:
    own, live_inside = probe()
    assert live_inside  # a run never reclaims its own jobs
    assert not flow_run_is_live(own)  # completed: its jobs are leftovers
    assert not flow_run_is_live(str(uuid.uuid4()))  # unknown to the API
    assert not flow_run_is_live("e2e-1234")  # not a flow run id at all
    with get_client(sync_client=True) as client:
        other = client.create_flow_run(probe, state=Running())
        assert flow_run_is_live(str(other.id))
        client.set_flow_run_state(other.id, Crashed(message="killed"), force=True)
    assert not flow_run_is_live(str(other.id))
