"""Runner 'external': attach to a server someone else started; never stop it.

The handle comes from the configured base URL, metrics URL (or the dialect's metrics path), the
metrics URLs of a multi-endpoint server (all scraped, counters summed), dialect and the name of the
variable holding the server's API key (``api_key_env``). A Launch given to
:meth:`ExternalRunner.start` is only checked for the dialect and recorded as provenance of what the
server is believed to run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from alflow.config import ExternalServer
from alflow.frameworks.launch import Launch
from alflow.frameworks.recipes import dialect_source
from alflow.results.manifest import ServerProvenance
from alflow.util.redact import redact_url
from alflow_infra.errors import RunnerError
from alflow_infra.runners.base import LOG_TAIL_LINES, ServerHandle, handle_api_key, wait_for_health

log = logging.getLogger(__name__)


class ExternalRunner:
    """Attaches to an existing server; ``stop`` leaves it running."""

    name = "external"

    def __init__(
        self,
        options: ExternalServer,
        *,
        run_id: str | None = None,
        secret_source: Callable[[str], str | None] | None = None,  # noqa: ARG002 (uniform factory signature)
    ) -> None:
        self.options = options
        self.run_id = run_id

    def attach(self, launch: Launch | None = None) -> ServerHandle:
        """The handle of the configured server (no request is made).

        The handle carries ``api_key_env`` (the variable's name, never its value); an unset or empty variable
        fails here, before anything is measured (:func:`~alflow_infra.runners.base.handle_api_key`).
        """
        opts = self.options
        if launch is not None and launch.dialect != opts.dialect:
            raise RunnerError(
                f"external server at {redact_url(opts.base_url)} speaks {opts.dialect!r}, but the launch expects "
                f"{launch.dialect!r}"
            )
        base = opts.base_url.rstrip("/")
        metrics_url = opts.metrics_url or (
            opts.metrics_urls[0] if opts.metrics_urls else base + dialect_source(opts.dialect).metrics_path
        )
        handle = ServerHandle(
            runner=self.name,
            id=base,
            base_url=base,
            metrics_url=metrics_url,
            health_url=base + opts.health_path,
            dialect=opts.dialect,
            model=launch.model if launch is not None else "",
            readiness_timeout_s=launch.readiness_timeout_s if launch is not None else 60.0,
            name=f"external:{redact_url(base)}",
            image=launch.image if launch is not None else None,
            metrics_urls=tuple(opts.metrics_urls),
            nodes=launch.nodes if launch is not None else 1,
            provenance=(launch.provenance() if launch is not None else ServerProvenance()).amended(
                external=True
            ),
            api_key_env=opts.api_key_env,
        )
        handle_api_key(handle)  # the key's variable is set on this machine: else one line, before any request
        return handle

    def start(self, launch: Launch) -> ServerHandle:
        """Attach (nothing is started)."""
        return self.attach(launch)

    def wait_ready(self, handle: ServerHandle, timeout_s: float | None = None) -> None:
        """Poll the health URL until it answers 200."""
        wait_for_health(
            handle.health_url,
            handle.readiness_timeout_s if timeout_s is None else timeout_s,
            dead_reason=lambda: None,
            log_tail=lambda: "",
            what=f"external {handle.dialect} server",
        )

    def logs(self, handle: ServerHandle, tail: int = LOG_TAIL_LINES) -> str:  # noqa: ARG002
        """An external server's logs are not ours to read: always ''."""
        return ""

    def stop(self, handle: ServerHandle) -> None:
        """Never stops an external server (logs that it was left running)."""
        log.info("leaving external server %s running", redact_url(handle.base_url))
