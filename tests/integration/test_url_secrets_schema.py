"""A URL with credentials typed as a deployment run's parameter is refused by Prefect's server before it stores it.

Prefect keeps a flow run's parameters as given, before alflow's validators run in the worker. The flows'
parameter schemas (from alflow's configuration models) carry ``"not": {"pattern": ...}`` on every string
(:func:`alflow.config.base.refuse_url_credentials_in_schema`), and the server checks a deployment run's
parameters against the schema before it creates the run (``enforce_parameter_schema``, Prefect's default). On a
real Prefect server (the test harness's): the refused run is answered 409 and no canary is in its database.
"""

from __future__ import annotations

import copy
from typing import Any

import httpx
import pytest
from prefect import get_client
from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId
from prefect.settings import PREFECT_API_DATABASE_CONNECTION_URL
from prefect.utilities.callables import parameter_schema

from alflow_flows.benchmark import benchmark
from tests.e2e.prefect_support import database_dump

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("prefect_harness")]

CANARY = "Canary-schema-7f3a"
PARAMS: dict[str, Any] = {
    "params": {
        "model": {"id": "org/m"},
        "k": 3,
        "target_al": 2.5,
        "server": {"framework": "sim", "model": "org/m"},
        "placement": {"results_root": "/tmp/alflow-results"},
    }
}


def _with(path: tuple[str, ...], value: object) -> dict[str, Any]:
    params = copy.deepcopy(PARAMS)
    node = params["params"]
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    return params


REFUSED = {
    "results_root with user:password@": _with(("placement", "results_root"), f"s3://AKIA:{CANARY}@bucket/x"),
    "results_root with a token parameter": _with(
        ("placement", "results_root"), f"gs://bucket/x?token={CANARY}"
    ),
    "extra_env value with a password": _with(
        ("server", "extra_env"), {"HTTPS_PROXY": f"http://me:{CANARY}@p:3128"}
    ),
    "external base_url with an api_key": _with(
        ("placement", "runner"),
        {"kind": "external", "base_url": f"http://h:8000/?api_key={CANARY}", "dialect": "vllm"},
    ),
}


def _dump() -> str:
    url = PREFECT_API_DATABASE_CONNECTION_URL.value()
    assert url, "no database URL"
    return database_dump(url)


def test_the_server_refuses_a_run_whose_parameters_hold_url_credentials_and_stores_none() -> None:
    schema = parameter_schema(benchmark).model_dump_for_openapi()
    with get_client(sync_client=True) as client:
        flow_id = client.create_flow(benchmark)
        deployment_id = client.create_deployment(
            flow_id, "url-secrets-schema", parameter_openapi_schema=schema, enforce_parameter_schema=True
        )
        refused = []
        for name, params in REFUSED.items():
            with pytest.raises(httpx.HTTPStatusError) as caught:
                client.create_flow_run_from_deployment(deployment_id, parameters=params)
            assert caught.value.response.status_code == 409, name
            refused.append(name)
        accepted = client.create_flow_run_from_deployment(deployment_id, parameters=PARAMS)
        # the harness's server holds the runs of the session's other tests too
        mine = DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id]))
        runs = client.read_flow_runs(deployment_filter=mine)
    assert len(refused) == len(REFUSED)
    assert [r.id for r in runs] == [accepted.id]  # the clean parameters make a run; the refused ones none
    dump = _dump()
    assert "/tmp/alflow-results" in dump  # the accepted run's parameters are in the database ...
    assert CANARY not in dump  # ... and no refused one's
