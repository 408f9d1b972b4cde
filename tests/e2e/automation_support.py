"""alflow's regression notification set up on a real ``prefect server`` as the docs' team setup says (docs/running/regression.md).

:func:`readme_automation` runs :data:`README_AUTOMATION_LINES` through bash as written, from a scratch directory,
with ``ALFLOW_WEBHOOK_URL`` pointing at a webhook receiver of this process (:func:`webhook_receiver`), and deletes
the automation and its block with Prefect's CLI before and after (the tests that use it name them alike, which
``deployments/webhook.py`` fixes, so either order works).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.e2e.prefect_support import PREFECT, ROOT, api

AUTOMATION_PAGE = ROOT / "docs" / "running" / "regression.md"
"""The docs page holding the notification's team setup."""
README_AUTOMATION_LINES = (
    'python -m alflow_deployments.webhook --url "$ALFLOW_WEBHOOK_URL" --out alflow-automations.yaml',
    "prefect --no-prompt automation create --from-file alflow-automations.yaml",
)
"""The team setup of the notification in docs/running/regression.md, as written (run here through bash)."""
AUTOMATION = "alflow-regression-notify"
BLOCK = "custom-webhook/alflow-regression"


@dataclass
class Receiver:
    """What a webhook receiver got: (method, path, headers, body) per request."""

    url: str
    requests: list[tuple[str, str, dict[str, str], bytes]] = field(default_factory=list)
    arrived: threading.Condition = field(default_factory=threading.Condition)

    def wait(self, count: int, timeout_s: float) -> bool:
        """Whether ``count`` requests arrived within ``timeout_s``."""
        with self.arrived:
            return self.arrived.wait_for(lambda: len(self.requests) >= count, timeout=timeout_s)


@contextmanager
def webhook_receiver() -> Iterator[Receiver]:
    """An HTTP server on 127.0.0.1 (port 0) in a thread that records every request and answers 200."""
    holder: list[Receiver] = []

    class Handler(BaseHTTPRequestHandler):
        def _record(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            receiver = holder[0]
            with receiver.arrived:
                receiver.requests.append((self.command, self.path, dict(self.headers.items()), body))
                receiver.arrived.notify_all()
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        do_POST = do_PUT = do_GET = _record

        def log_message(self, fmt: str, *args: Any) -> None:  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    holder.append(Receiver(url=f"http://127.0.0.1:{server.server_address[1]}/alflow-hook"))
    thread = threading.Thread(target=server.serve_forever, name="webhook-receiver", daemon=True)
    thread.start()
    try:
        yield holder[0]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def automations(env: dict[str, str]) -> list[dict[str, Any]]:
    body = {"automations": {"name": {"any_": [AUTOMATION]}}}
    found: list[dict[str, Any]] = asyncio.run(api(env, "POST", "/automations/filter", body))
    return found


def cleanup(env: dict[str, str]) -> None:
    """Delete the automation(s) and the block with Prefect's CLI (whatever of them exists)."""
    for automation in automations(env):
        subprocess.run([PREFECT, "--no-prompt", "automation", "delete", "--id", automation["id"]],
                       env=env, cwd=ROOT, capture_output=True, timeout=120, check=False)  # fmt: skip
    subprocess.run([PREFECT, "--no-prompt", "block", "delete", BLOCK],
                   env=env, cwd=ROOT, capture_output=True, timeout=120, check=False)  # fmt: skip


@contextmanager
def readme_automation(prefect_server: dict[str, str], cwd: Path) -> Iterator[tuple[Receiver, dict[str, str]]]:
    """The README's team setup applied toward a local receiver; the receiver and the environment the lines ran in.

    Whatever an earlier test left is deleted first; the automation and the block are deleted at the end.
    """
    cleanup(prefect_server)
    with webhook_receiver() as receiver:
        env = {
            **prefect_server,
            "ALFLOW_WEBHOOK_URL": receiver.url,
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), prefect_server.get("PATH", "")]),
        }
        try:
            for line in README_AUTOMATION_LINES:
                done = subprocess.run(["bash", "-c", line], env=env, cwd=cwd,
                                      capture_output=True, text=True, timeout=180, check=False)  # fmt: skip
                assert done.returncode == 0, f"{line}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            yield receiver, env
        finally:
            cleanup(prefect_server)
