"""The Prefect UI's report link opens the run's page on the results site (headless Chromium, real servers).

A team serves its results root with ``alflow results serve`` and sets the site's URL once as the Prefect
Variable ``alflow-results-url`` (``prefect variable set``, Prefect's own CLI). A sim M2 run against the
session's ``prefect server`` (PostgreSQL, tests/e2e/conftest.py) then publishes a link artifact whose target is
the run's page on the site. Chromium opens the artifact's page in the Prefect UI as a person does, reads the
link the UI renders, follows it, and the site answers with the run's report: the page's title and its
headline, with the plots drawn (pixels of the report's plot colour on the screenshot).

Chromium is Debian's ``chromium`` package (``scripts/ci-services.sh`` installs it): without it the test fails
under ``CI`` and is skipped otherwise.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from alflow.results.links import RESULTS_URL_VARIABLE
from tests.browser import chromium, decode_png
from tests.e2e.prefect_support import ROOT, api, cli
from tests.e2e.site_support import serve_results

pytestmark = pytest.mark.services

RUN_M2 = textwrap.dedent(
    """
    import json, sys
    from alflow.config import (BenchmarkParams, ModelSpec, RandomWorkload, SamplingParams, ServerPlacement,
                               server_config)
    from alflow_flows.benchmark import benchmark

    params = BenchmarkParams(
        model=ModelSpec(id="site-link-model", sampling_thinking_off=SamplingParams(temperature=0.0, max_tokens=16)),
        k=2,
        server=server_config(framework="sim", model="site-link-model", extra_args=("--time-scale", "0")),
        placement=ServerPlacement(results_root=sys.argv[1]),
        target_al=2.0,
        workload=RandomWorkload(isl=16, osl=8),
        concurrencies=(2, 4),
        prompts_per_concurrency=2,
        warmup_per_concurrency=0,
    )
    state = benchmark(params=params, return_state=True)
    assert state.is_completed(), state.message
    print(json.dumps({"flow_run_id": str(state.state_details.flow_run_id), "run_dir": state.result().run_dir}))
    """
)

LINK_TO_SITE = """((site) => {
  const a = [...document.querySelectorAll('a')].find(x => x.href && x.href.startsWith(site));
  return a ? a.href : null;
})(%s)"""
"""The href of the first link on the page that points at the site (None while the UI has not rendered it)."""


@pytest.fixture
def results_site(tmp_path: Path, prefect_server: dict[str, str]) -> Iterator[tuple[str, Path]]:
    """``alflow results serve`` over a fresh results root on a free loopback port: (its URL, the root)."""
    root = tmp_path / "results"
    root.mkdir()
    with serve_results(root, prefect_server, tmp_path / "site.log") as url:
        yield url, root


def test_the_prefect_uis_report_link_opens_the_runs_page_on_the_results_site(
    prefect_server: dict[str, str], results_site: tuple[str, Path], tmp_path: Path
) -> None:
    env = prefect_server
    site, root = results_site
    cli(env, "variable", "set", RESULTS_URL_VARIABLE, site, "--overwrite")
    try:
        done = subprocess.run(
            [sys.executable, "-c", RUN_M2, str(root)],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    finally:
        cli(env, "variable", "unset", RESULTS_URL_VARIABLE)
    assert done.returncode == 0, done.stderr[-3000:]
    run = json.loads(done.stdout.strip().splitlines()[-1])
    flow, name = Path(run["run_dir"]).parts[-2:]
    page_url = f"{site}/runs/{flow}/{name}/"

    artifacts = asyncio.run(
        api(env, "POST", "/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [run["flow_run_id"]]}}})
    )
    (link,) = [a for a in artifacts if str(a["key"]).endswith("-html")]
    assert link["data"] == f"[report on the results site]({page_url})"

    base_url = env["PREFECT_API_URL"].removesuffix("/api")
    with chromium(tmp_path / "chromium-profile", "the results-site link test") as page:
        page.viewport(1000)
        page.call("Page.navigate", url=f"{base_url}/artifacts/artifact/{link['id']}")
        href = page.wait_for(LINK_TO_SITE % json.dumps(site), "the artifact's page shows no link to the site")
        assert href == page_url
        page.call("Page.navigate", url=href)
        title = page.wait_for(
            "document.readyState === 'complete' && document.querySelector('h1') ? document.title : null",
            "the site's run page did not load",
        )
        assert "M2 synthetic benchmark" in title, title
        body = str(page.js("document.body.innerText"))
        assert "site-link-model" in body
        # the page is the run as stored now (complete), not the report.html the flow wrote before it closed
        assert "written by the run before it closed" not in body
        shot = page.screenshot()
    (tmp_path / "site-run-page.png").write_bytes(shot)
    width, height, pixels = decode_png(shot)
    assert (width, height) == (1400, 1000)
    distinct = set(pixels[:: max(1, len(pixels) // 20000)])
    assert len(distinct) > 20, "the run page rendered blank"
