"""``alflow bench`` and ``alflow metrics snapshot``: bad input gives one clear line, exit code 2."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import orjson
import polars as pl
import pytest
import typer
from typer.testing import CliRunner

from alflow.cli.bench import register
from tests.unit.loopback_http import serving

pytestmark = pytest.mark.unit

FIX = Path(__file__).parent.parent / "fixtures" / "prometheus"


def make_app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """Test root."""

    register(app)
    return app


class JsonOnly(BaseHTTPRequestHandler):
    """A server that does not stream: JSON for completions, vLLM metrics text at /metrics."""

    def _send(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self._send(200, orjson.dumps({"data": [{"id": "served-model"}]}), "application/json")
        elif self.path == "/metrics":
            self._send(200, (FIX / "vllm_after.txt").read_bytes(), "text/plain; version=0.0.4")
        else:
            self._send(404, b"Not Found", "text/plain")

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path.startswith("/v1/"):
            self._send(200, b'{"choices": [{"text": "hi"}]}', "application/json")
        else:
            self._send(404, b'{"detail": "Not Found"}', "application/json")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def json_server() -> Iterator[str]:
    with serving(JsonOnly) as url:
        yield url


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def one_error_line(result: object, code: int = 2) -> str:
    assert result.exit_code == code, result.output  # type: ignore[attr-defined]
    err = result.stderr.strip()  # type: ignore[attr-defined]
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    return lines[0]


def test_unreachable_url(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    r = CliRunner().invoke(make_app(), ["bench", "--base-url", url, "--model", "m", "--num-prompts", "2"])
    line = one_error_line(r)
    assert f"cannot reach {url}" in line


def test_non_streaming_server_aborts_and_partial_records_are_written(
    json_server: str, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    r = CliRunner().invoke(
        make_app(),
        ["bench", "--base-url", json_server, "--endpoint", "completions", "--num-prompts", "3", "--isl", "8",
         "--osl", "4", "--out", str(out)],
    )  # fmt: skip
    line = one_error_line(r)
    assert "not a text/event-stream" in line
    assert "partial records" in line
    frame = pl.read_parquet(out / "records.parquet")
    assert frame.height >= 1
    assert frame["error"].null_count() == 0


def test_wrong_endpoint(json_server: str) -> None:
    r = CliRunner().invoke(
        make_app(),
        [
            "bench",
            "--base-url",
            json_server + "/wrong",
            "--model",
            "m",
            "--num-prompts",
            "2",
            "--endpoint",
            "completions",
        ],
    )
    line = one_error_line(r)
    assert "HTTP 404" in line
    assert "/wrong/v1/completions" in line
    r = CliRunner().invoke(make_app(), ["bench", "--base-url", json_server + "/wrong", "--model", "m"])
    assert "use --endpoint completions" in one_error_line(r)


def test_empty_dataset_and_missing_input_file(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    r = CliRunner().invoke(
        make_app(), ["bench", "--base-url", "http://x", "--dataset", "gsm8k", "--input-file", str(empty)]
    )
    assert "holds no rows" in one_error_line(r)
    r = CliRunner().invoke(make_app(), ["bench", "--base-url", "http://x", "--dataset", "speed-bench"])
    assert "needs --input-file" in one_error_line(r)
    r = CliRunner().invoke(make_app(), ["bench", "--base-url", "http://x", "--extra-body", "{nope"])
    assert "--extra-body" in one_error_line(r)


def test_metrics_snapshot_reads_lifetime_counters(json_server: str) -> None:
    r = CliRunner().invoke(make_app(), ["metrics", "snapshot", json_server, "--json"])
    assert r.exit_code == 0, r.output
    data = orjson.loads(r.stdout)
    assert data["dialect"] == "vllm"
    assert data["url"] == json_server + "/metrics"
    assert data["since_server_start"]["num_drafts"] == 1_235_567 + 200
    table = CliRunner().invoke(make_app(), ["metrics", "snapshot", json_server + "/metrics"])
    assert table.exit_code == 0
    assert "AL since server start" in table.stdout


def test_metrics_snapshot_errors(json_server: str) -> None:
    r = CliRunner().invoke(make_app(), ["metrics", "snapshot", json_server + "/nothing-here"])
    assert "HTTP 404" in one_error_line(r)
    r = CliRunner().invoke(make_app(), ["metrics", "snapshot", json_server, "--dialect", "tgi"])
    assert "unknown metrics dialect" in one_error_line(r)


def test_metrics_snapshot_sums_several_endpoints_of_one_server(json_server: str) -> None:
    with serving(JsonOnly) as second:
        urls = [json_server + "/metrics", second + "/metrics"]
        r = CliRunner().invoke(make_app(), ["metrics", "snapshot", *urls, "--json"])
        assert r.exit_code == 0, r.output
        data = orjson.loads(r.stdout)
        assert data["urls"] == urls
        assert data["since_server_start"]["num_drafts"] == 2 * (1_235_567 + 200)
        r = CliRunner().invoke(make_app(), ["metrics", "snapshot", urls[0], json_server + "/nothing-here"])
        assert "HTTP 404" in one_error_line(r)
