"""Hostile round 12 of issue #49, the webhook helper (``python -m alflow_deployments.webhook``): R12-4 to R12-6.

R12-4: an API call after the file was written (the check for automations of the same names) was outside the
``try``: a refused connection, a timeout, a 401 was an ``httpx`` traceback. R12-5: automation names from the file
reached the terminal with ESC, OSC and RLO in the ``wrote`` line. R12-6: ``--out`` as a FIFO blocked for ever, a
folder was found only after the Prefect work (exit 1, without naming ``--out``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import unicodedata
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
import pytest
from prefect.exceptions import ObjectNotFound, PrefectHTTPStatusError
from prefect.settings import PREFECT_API_URL, Settings, temporary_settings
from pydantic import BaseModel, ValidationError

from alflow_deployments import webhook

pytestmark = pytest.mark.unit

API_URL = "http://admin:Pw-Canary-R12@127.0.0.1:9/api"
"""PREFECT_API_URL with a password: shown only redacted."""
BLOCK_ID = "3fa85f64-5717-4562-b3fc-2c963f66afa6"


def _automations(tmp_path: Path, names: list[str], block: str = BLOCK_ID) -> Path:
    """An automations file naming its block by ``block`` (an id: no call is needed to fill it in)."""
    path = tmp_path / "automations.json"  # JSON is YAML: any character, escaped
    action = {"type": "send-notification", "block_document_id": block, "subject": "x", "body": "y"}
    trigger = {"type": "event", "expect": ["alflow.regression.*"], "posture": "Reactive", "threshold": 1}
    path.write_text(json.dumps([{"name": n, "trigger": trigger, "actions": [action]} for n in names]))
    return path


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    """What the helper said: one line (stdout empty), the password of PREFECT_API_URL never in it."""
    said = capsys.readouterr()
    assert said.out == ""
    lines = said.err.strip().splitlines()
    assert len(lines) == 1, said.err[:2000]
    assert "Pw-Canary-R12" not in said.err
    assert "Traceback" not in said.err
    return lines[0]


def _api_url(monkeypatch: pytest.MonkeyPatch, url: str | None = API_URL) -> None:
    """PREFECT_API_URL as the helper reads it: Prefect's settings made from the environment.

    As at the helper's start; in this process Prefect made its settings when it was imported, before the test.
    """
    if url is None:
        monkeypatch.delenv("PREFECT_API_URL", raising=False)
    else:
        monkeypatch.setenv("PREFECT_API_URL", url)
    monkeypatch.setattr(webhook, "get_current_settings", Settings)


@pytest.fixture
def no_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any call to the Prefect API fails the test: every check must come first."""

    def called(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the Prefect API was called before the inputs were checked")

    for name in ("save_block", "block_ids", "existing"):
        monkeypatch.setattr(webhook, name, called)
    _api_url(monkeypatch)


# --------------------------------------------------------------------------------------------
# R12-4: the Prefect API failing at any call


def _status_error(code: int) -> PrefectHTTPStatusError:
    request = httpx.Request("GET", "http://127.0.0.1:9/api/automations/filter")
    response = httpx.Response(code, request=request, text="nope")
    return PrefectHTTPStatusError.from_httpx_error(
        httpx.HTTPStatusError(f"{code} for url {request.url}", request=request, response=response)
    )


def _validation_error() -> ValidationError:
    class Automation(BaseModel):
        id: uuid.UUID

    try:
        Automation.model_validate({"id": "not\nan id"})
    except ValidationError as exc:
        return exc
    raise AssertionError("validated")


FAILURES: list[tuple[str, Callable[[], BaseException]]] = [
    ("refused", lambda: httpx.ConnectError("[Errno 111] Connection refused")),
    ("timeout", lambda: httpx.ReadTimeout("timed out")),
    ("401", lambda: _status_error(401)),
    ("500", lambda: _status_error(500)),
    ("version", lambda: RuntimeError("Failed to reach API at http://127.0.0.1:9/api")),
    ("not-json", lambda: json.JSONDecodeError("Expecting value", "<html>\n</html>", 0)),
    ("bad-shape", _validation_error),  # a server that answers 200 with something else
    ("bad-url", lambda: httpx.InvalidURL("Invalid non-printable ASCII character in URL")),
]


@pytest.mark.parametrize("step", ["save_block", "block_ids", "existing"])
@pytest.mark.parametrize(("kind", "failure"), FAILURES, ids=[f[0] for f in FAILURES])
def test_an_api_that_fails_at_any_call_is_one_line_naming_prefect_api_url_and_no_file(
    step: str,
    kind: str,
    failure: Callable[[], BaseException],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """R12-4: ``existing`` (the last call, after the file was written) was outside the ``try``: a traceback."""

    def fails(*args: Any, **kwargs: Any) -> Any:
        raise failure()

    monkeypatch.setattr(webhook, "save_block", lambda *a, **k: uuid.uuid4())
    monkeypatch.setattr(webhook, "block_ids", lambda slugs: {})
    monkeypatch.setattr(webhook, "existing", lambda names: {})
    monkeypatch.setattr(webhook, step, fails)
    _api_url(monkeypatch)
    out = tmp_path / "out.yaml"
    argv = ["--url", "https://hooks.example.com/services/XXSECRET", "--out", str(out)]
    assert webhook.main([*argv, "--automations", str(_automations(tmp_path, ["a"]))]) == 1
    said = capsys.readouterr()
    lines = said.err.strip().splitlines()
    assert len(lines) == 1 + (step != "save_block"), said.err  # "saved block ..." once saved
    assert lines[-1].startswith(
        "error: the Prefect API at PREFECT_API_URL http://***@127.0.0.1:9/api failed while"
    )
    assert type(failure()).__name__ in lines[-1]
    assert "Pw-Canary-R12" not in said.err
    assert "XXSECRET" not in said.err
    assert not out.exists()  # every call comes before the file is written


def test_an_unreachable_api_with_blocks_named_by_id_is_one_line_exit_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """R12-4 as reported: no block slug, so the first request was the unguarded one (port 9 refuses at once)."""
    out = tmp_path / "out.yaml"
    with temporary_settings({PREFECT_API_URL: API_URL}):  # what Prefect's client reads too
        assert webhook.main(["--automations", str(_automations(tmp_path, ["a"])), "--out", str(out)]) == 1
    line = _one_line(capsys)
    assert line.startswith(
        "error: the Prefect API at PREFECT_API_URL http://***@127.0.0.1:9/api failed while"
    )
    assert "ConnectError" in line
    assert not out.exists()


@pytest.mark.usefixtures("no_calls")
@pytest.mark.parametrize(
    ("value", "said"),
    [
        (None, "PREFECT_API_URL is not set"),
        ("", "PREFECT_API_URL is not set"),
        ("not a url", "PREFECT_API_URL '(not a URL)': give the Prefect server's http(s)://HOST/api URL"),
        ("ftp://admin:Pw-Canary-R12@files/api", "PREFECT_API_URL 'ftp://files/...': give"),
        ("http:///api", "PREFECT_API_URL '(not a URL)'"),
        ("http://[::1/api", "Prefect's settings (PREFECT_API_URL, "),  # Prefect's own settings refuse it
    ],
)
def test_a_prefect_api_url_that_is_no_web_url_is_a_configuration_error_before_any_call(
    value: str | None,
    said: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """R12-4: a configuration problem is exit 2 before any call (it was exit 1 unset, a traceback otherwise)."""
    _api_url(monkeypatch, value)
    out = tmp_path / "out.yaml"
    assert webhook.main(["--automations", str(_automations(tmp_path, ["a"])), "--out", str(out)]) == 2
    line = _one_line(capsys)
    assert line.startswith("error: ")
    assert said in line
    assert not out.exists()


# --------------------------------------------------------------------------------------------
# R12-5: user strings reach the terminal escaped

HOSTILE = [
    "evil\x1b]0;TITLE\x07\x1b[31mRED\x1b[0m\u202eabc",  # the report's: OSC title, SGR colour, RLO
    "csi\x9b31mC1",  # C1 CSI
    "del\x7fbs\x08cr\rnul\x00",
    "iso\u2066late\u2069 zw\u200bj",
    "line\nbreak\u2028sep",
]


def _raw_controls(text: str) -> list[str]:
    """The control and format characters in ``text`` but the newline."""
    return [hex(ord(c)) for c in text if c != "\n" and unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")]


@pytest.mark.parametrize("name", HOSTILE, ids=range(len(HOSTILE)))
def test_automation_names_and_the_out_path_reach_the_terminal_escaped(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """R12-5: the ``wrote`` line joined the names raw; the ``note`` of an existing automation is escaped too."""
    _api_url(monkeypatch)
    monkeypatch.setattr(webhook, "block_ids", lambda slugs: {})
    monkeypatch.setattr(webhook, "existing", lambda names: {n: [uuid.uuid4()] for n in names})
    folder = tmp_path / f"out{name.replace(chr(0), '').replace('/', '')}"
    folder.mkdir()
    out = folder / "a.yaml"
    assert webhook.main(["--automations", str(_automations(tmp_path, [name, "ok"])), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert not _raw_controls(err), err
    assert len(err.splitlines()) == 4, (
        err
    )  # wrote, the command, a note per name: a newline in a name is escaped
    assert err.startswith("wrote ")
    assert "'ok'" in err
    assert "note: automation " in err
    assert "\\x1b" in err or "\\x9b" in err or "\\x7f" in err or "\\u2066" in err or "\\u2028" in err
    assert webhook.load_automations(out)[0]["name"] == name  # the file keeps the name as it is


@pytest.mark.parametrize("name", HOSTILE, ids=range(len(HOSTILE)))
def test_a_missing_block_named_with_controls_is_shown_escaped(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """R12-5: the error for blocks the server lacks joined their slugs raw."""

    class Client:
        def __enter__(self) -> Client:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def read_block_document_by_name(self, *args: Any, **kwargs: Any) -> Any:
            raise ObjectNotFound(http_exc=RuntimeError("404"))

    _api_url(monkeypatch)
    monkeypatch.setattr(webhook, "get_client", lambda **kwargs: Client())
    monkeypatch.setattr(webhook, "existing", lambda names: {})
    slug = "custom-webhook/" + name.replace("/", "")
    argv = [
        "--automations",
        str(_automations(tmp_path, ["a"], block=slug)),
        "--out",
        str(tmp_path / "a.yaml"),
    ]
    assert webhook.main(argv) == 1
    line = _one_line(capsys)
    assert line.startswith("error: no block 'custom-webhook/")
    assert not _raw_controls(line), line


# --------------------------------------------------------------------------------------------
# R12-6: --out checked before any call


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo.yaml"
    os.mkfifo(path)
    return path


@pytest.fixture
def unix_socket(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "s.yaml"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
        yield path


OUTS: list[tuple[str, str]] = [
    ("fifo", "is not a regular file (a FIFO, socket or device): give a regular file's path"),
    ("socket", "is not a regular file (a FIFO, socket or device)"),
    ("link-to-fifo", "is not a regular file (a FIFO, socket or device)"),
    ("folder", "is a folder: give a regular file's path"),
    ("no-folder", "its folder '{tmp}/none' does not exist; give a file in an existing folder"),
    ("file-folder", "its folder '{tmp}/file.txt' is not a folder"),
    ("dev", "is under /dev: give a file on a disk"),
    ("proc", "is under /proc: give a file on a disk"),
]


@pytest.mark.usefixtures("no_calls")
@pytest.mark.parametrize(("kind", "said"), OUTS, ids=[o[0] for o in OUTS])
def test_an_out_that_is_no_regular_file_in_a_folder_is_one_line_exit_2_before_any_call(
    kind: str, said: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """R12-6: a FIFO blocked the write for ever; a folder was found after the Prefect work, exit 1."""
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "folder.yaml").mkdir()
    paths = {
        "fifo": lambda: request.getfixturevalue("fifo"),
        "socket": lambda: request.getfixturevalue("unix_socket"),
        "link-to-fifo": lambda: _linked(tmp_path / "link.yaml", request.getfixturevalue("fifo")),
        "folder": lambda: tmp_path / "folder.yaml",
        "no-folder": lambda: tmp_path / "none" / "a.yaml",
        "file-folder": lambda: tmp_path / "file.txt" / "a.yaml",
        "dev": lambda: Path("/dev/null.yaml"),
        "proc": lambda: Path("/proc/self/x.yaml"),
    }
    out = paths[kind]()
    assert webhook.main(["--automations", str(_automations(tmp_path, ["a"])), "--out", str(out)]) == 2
    line = _one_line(capsys)
    assert line.startswith(f"error: --out '{str(out)[:60]}"), line  # a long path is cut after 80 characters
    assert said.format(tmp=tmp_path).rsplit("'", 1)[-1] in line  # what follows a path (a path may be cut)


def _linked(link: Path, target: Path) -> Path:
    link.symlink_to(target)
    return link


@pytest.mark.usefixtures("no_calls")
def test_an_out_in_a_folder_that_is_not_writable_is_refused_before_any_call(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr(os, "access", lambda *args, **kwargs: False)  # root may write anywhere
    out = tmp_path / "a.yaml"
    assert webhook.main(["--automations", str(_automations(tmp_path, ["a"])), "--out", str(out)]) == 2
    assert _one_line(capsys) == f"error: --out {str(out)!r} is not writable (permission denied)"


def test_writing_to_a_fifo_put_there_after_the_checks_fails_at_once(fifo: Path) -> None:
    """The check and the write are two steps: the write itself never waits for a reader (nor truncates a FIFO)."""

    def late(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError("write() waited for a reader")

    previous = signal.signal(signal.SIGALRM, late)
    signal.setitimer(signal.ITIMER_REAL, 5.0)
    try:
        with pytest.raises(OSError, match=r"No such device or address|not a regular file"):
            webhook.write([{"name": "a"}], fifo)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_an_out_with_a_tilde_is_written_in_the_home_folder(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The path checked is the path written: ``~`` expanded once, for both."""
    monkeypatch.setenv("HOME", str(tmp_path))
    _api_url(monkeypatch)
    monkeypatch.setattr(webhook, "block_ids", lambda slugs: {})
    monkeypatch.setattr(webhook, "existing", lambda names: {})
    assert webhook.main(["--automations", str(_automations(tmp_path, ["a"])), "--out", "~/a.yaml"]) == 0
    assert webhook.load_automations(tmp_path / "a.yaml")[0]["name"] == "a"
    assert "prefect --no-prompt automation create --from-file" in capsys.readouterr().err
