"""The M2 custom-run form in the real Prefect UI (headless Chromium), then a run with its parameters (issue 19, item 5).

``m2-benchmark`` is deployed from prefect.yaml to the session's ``prefect server`` (PostgreSQL,
tests/e2e/conftest.py). Chromium opens the deployment's page, follows its "Custom run" link (the
form pre-filled with the deployment's parameters, as a person sees it) and, through the DevTools
protocol, waits until the form has rendered the short-form fields (not a loading screen) and keeps
its DOM. The page's height at 1,400 px width is measured twice, independently:

- by layout: the UI scrolls its content inside ``.app-router-view``; its top plus its scroll height;
- by pixels: a screenshot of a viewport taller than that, and the last row of the main column (right
  of the sidebar) that differs from the page's background.

The screenshot at 1,400 x that height is kept under the test's tmp dir (``m2-custom-run.png``) with
the DOM (``m2-custom-run.html``), and the height must be at most 2,500 px (the form with the whole
configuration in one nested object measured 7,311 px this way). Then a run is created through the
REST API with the same parameters, a process worker runs it (``--run-once``), and it completes.

Chromium is Debian's ``chromium`` package (``scripts/ci-services.sh`` installs it): without it the
test fails under ``CI`` and is skipped otherwise.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from alflow.results.store import find_run
from tests.browser import Page, chromium, decode_png
from tests.e2e.prefect_support import PREFECT, ROOT, api, cli, ensure_pool

pytestmark = pytest.mark.services

WIDTH = 1400
MAX_HEIGHT = 2500
SHORT_FORM = ("preset", "model", "k", "target_al", "concurrencies", "dry_run", "params")
"""The form's fields, in order: the short form, the dry-run switch, then the advanced full configuration."""


OPEN_RUN_MENU = """(() => {
  const link = [...document.querySelectorAll('a')].find(a => a.innerText.trim() === 'Custom run');
  if (link) return link.href;
  const run = [...document.querySelectorAll('button')].find(b => b.innerText.trim() === 'Run');
  if (run) run.click();
  return null;
})()"""
"""The deployment page's "Custom run" link (its Run menu opened first): the href the UI builds for it."""

FORM_FIELDS = """(() => {
  const form = document.querySelector('form');
  if (!form) return null;
  const labels = [...form.querySelectorAll('label')].map(l => l.innerText.split('\\n')[0].trim());
  return labels;
})()"""
"""The first line of every label of the page's form (None while there is no form)."""

LAYOUT = """(() => {
  const view = document.querySelector('.app-router-view');
  const form = document.querySelector('form');
  return {top: view.getBoundingClientRect().top, height: view.scrollHeight,
          form_right: form.getBoundingClientRect().right};
})()"""
"""The scrolling content's top and full height, and the form's right edge."""


def content_height(page: Page) -> tuple[int, float]:
    """The page's full height by layout at 1,400 px, and the form's right edge.

    Measured in a short viewport (600 px), where the content overflows the scrolling view: its scroll
    height is then the content's (in a taller viewport the view fills the viewport instead). Read until
    two reads agree.
    """
    page.viewport(600)
    previous = -1
    for _ in range(20):
        time.sleep(1.0)
        layout = page.js(LAYOUT)
        height = int(layout["top"] + layout["height"])
        if height == previous:
            return height, float(layout["form_right"])
        previous = height
    raise AssertionError(f"the page's height does not settle: {previous}")


def last_content_row(png: bytes, right: int) -> int:
    """Height of the screenshot's content: one past the last row where the form's column is not the background.

    The column is the 400 px left of the form's right edge: the sidebar's decorative pixel grid, drawn at
    the bottom left of the viewport, reaches into the main column's left half.
    """
    width, height, pixels = decode_png(png)
    background = pixels[(height - 1) * width + right - 200]
    for y in range(height - 1, -1, -1):
        row = pixels[y * width + right - 400 : y * width + right]
        if any(max(abs(a - b) for a, b in zip(p, background, strict=True)) > 8 for p in row):
            return y + 1
    return 0


def measure_custom_run_form(base_url: str, deployment_id: str, out: Path) -> tuple[int, int, str]:
    """Open the deployment's Custom run form; (height by layout, height by pixels, the DOM). Screenshot -> ``out``."""
    with chromium(out.parent / "chromium-profile", "the UI form test", WIDTH) as page:
        page.viewport(1000)
        page.call("Page.navigate", url=f"{base_url}/deployments/deployment/{deployment_id}")
        href = page.wait_for(OPEN_RUN_MENU, "no 'Custom run' in the Run menu of the deployment's page")
        assert f"/deployments/deployment/{deployment_id}/run" in href, href
        page.call("Page.navigate", url=href)
        labels = page.wait_for(
            f"(() => {{ const l = {FORM_FIELDS}; return l && l.some(x => x.startsWith('params')) ? l : null; }})()",
            "the custom-run form did not render its parameters",
        )
        time.sleep(2.0)  # late layout (fonts, the run-name generator)
        dom = str(page.js("document.documentElement.outerHTML"))
        fields = [label.split(" ")[0] for label in page.js(FORM_FIELDS) if label]
        assert [f for f in fields if f in SHORT_FORM] == list(SHORT_FORM), (labels, fields)
        by_layout, right = content_height(page)
        page.viewport(by_layout + 400)
        time.sleep(1.0)
        by_pixels = last_content_row(page.screenshot(), int(right) - 1)
        page.viewport(by_layout)
        time.sleep(1.0)
        out.write_bytes(page.screenshot())
        return by_layout, by_pixels, dom


def test_the_m2_custom_run_form_is_short_and_a_run_with_its_parameters_completes(
    prefect_server: dict[str, str], tmp_path: Path
) -> None:
    env = prefect_server
    ensure_pool(env, "local", "process")
    cli(env, "deploy", "--name", "m2-benchmark")
    deployment = asyncio.run(api(env, "GET", "/deployments/name/m2-benchmark/m2-benchmark"))
    parameters: dict[str, Any] = deployment["parameters"]
    assert set(parameters) <= set(SHORT_FORM) - {"params"}, parameters  # the advanced params stays empty
    assert parameters["preset"] == "sim"
    schema = deployment["parameter_openapi_schema"]["properties"]
    assert sorted(schema, key=lambda name: schema[name]["position"]) == list(SHORT_FORM)  # the form's order
    assert all(str(schema[name].get("description") or "").strip() for name in SHORT_FORM), schema

    base_url = env["PREFECT_API_URL"].removesuffix("/api")
    shot = tmp_path / "m2-custom-run.png"
    by_layout, by_pixels, dom = measure_custom_run_form(base_url, deployment["id"], shot)
    (tmp_path / "m2-custom-run.html").write_text(dom, encoding="utf-8")
    print(f"M2 custom-run form at {WIDTH} px: {by_layout} px by layout, {by_pixels} px by pixels; {shot}")
    width, height, _ = decode_png(shot.read_bytes())
    assert (width, height) == (WIDTH, by_layout)
    assert abs(by_pixels - by_layout) <= 40, (by_layout, by_pixels)  # the card ends where the layout ends
    assert "Server preset by name" in dom  # the parameters' descriptions are shown
    assert max(by_layout, by_pixels) <= MAX_HEIGHT, f"the form is {by_layout} px tall (limit {MAX_HEIGHT})"

    # the same parameters through the API (what the form's Submit sends), run by a process worker
    run = asyncio.run(
        api(
            env,
            "POST",
            f"/deployments/{deployment['id']}/create_flow_run",
            {"parameters": parameters, "state": {"type": "SCHEDULED"}},
        )
    )
    try:
        worker = subprocess.run(
            [PREFECT, "worker", "start", "--pool", "local", "--run-once"],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        state = asyncio.run(api(env, "GET", f"/flow_runs/{run['id']}"))["state"]
        assert state["type"] == "COMPLETED", f"{state}\n{worker.stdout[-3000:]}\n{worker.stderr[-3000:]}"
        stored = find_run(ROOT / "results", "m2", run["id"])  # the preset's run store, under ALFLOW_HOME
        assert stored is not None
        assert stored.status == "complete"
        assert stored.manifest.config["k"] == 3
        assert stored.manifest.config["target_al"] == 2.73
        assert list(stored.manifest.config["concurrencies"]) == [4, 16]
        assert stored.manifest.config["server"]["framework"] == "sim"
    finally:
        found = find_run(ROOT / "results", "m2", run["id"])
        if found is not None:
            shutil.rmtree(found.dir, ignore_errors=True)
