"""Hostile round 17 of issue #49: a ``--host`` to listen on that no resolver takes, holding a control character, or
blank.

``alflow sim serve --host a..b`` (also ``.x``, a 64-character label, RLO) and ``alflow results serve --host a..b
--token-env T`` ended in a ``UnicodeError`` traceback from the bind; ``--host $'\\x1b]0;pwned\\x07'`` was printed raw
in the sim's "cannot listen" line (a newline split it in two); ``--host ''`` (an unset ``$HOST``) bound every
interface. Every serving command now checks its host as the configuration does (:func:`alflow.util.names.check_host`):
one line naming ``--host``, the value escaped, exit 2, before anything binds or loads.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from alflow.cli import app, main

pytestmark = pytest.mark.unit

BAD_HOSTS = ["a..b", ".x", "a" * 64, "\u202elocalhost", "\x1b]0;pwned\x07\x1b[31mred", "127.0.0.1\n", ""]


def _line(output: str) -> str:
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    assert "\x1b" not in lines[0], lines[0]
    assert "\u202e" not in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("host", BAD_HOSTS)
def test_sim_serve_refuses_a_host_no_resolver_takes_in_one_line(host: str) -> None:
    ran = CliRunner().invoke(app, ["sim", "serve", "--port", "0", "--host", host])
    assert ran.exit_code == 2, ran.output
    assert _line(ran.output).startswith("error: --host "), ran.output
    assert "neither an IP address nor a host name" in ran.output


@pytest.mark.parametrize("host", BAD_HOSTS)
def test_results_serve_refuses_it_with_a_token_too(
    host: str, tmp_path: object, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("R17_TOKEN", "abcdefabcdefabcdef12")
    with pytest.raises(SystemExit) as exit_info:
        main(["results", "serve", str(tmp_path), "--host", host, "--token-env", "R17_TOKEN", "--no-cache"])
    assert exit_info.value.code == 2
    assert "--host " in _line(capsys.readouterr().err)


@pytest.mark.parametrize("host", ["a..b", "\x1b[2J", ""])
def test_tiny_serve_refuses_it_before_the_engine_loads(host: str) -> None:
    pytest.importorskip("numpy")  # the tiny engine's module
    ran = CliRunner().invoke(app, ["tiny", "serve", "--port", "0", "--host", host])
    assert ran.exit_code == 2, ran.output
    assert _line(ran.output).startswith("error: --host "), ran.output
