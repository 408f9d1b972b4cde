"""A loopback server that answers 200 on ``/health`` and 404 elsewhere (a server someone else started)."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def health_server() -> Iterator[int]:
    """The server on a free port, in a thread, for the ``with`` block: its port."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(httpd.server_address[1])
    finally:
        httpd.shutdown()
        httpd.server_close()
