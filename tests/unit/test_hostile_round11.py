"""Hostile round 11 (issue #49): each bad input is one line naming it, exit 2, before any work; no traceback.

- R11-7: ``python -m alflow_deployments.webhook`` with an unknown ``{{placeholder}}`` in ``--json-data``, a
  ``--json-data`` or an ``--automations`` file nested too deep;
- R11-9: ``alflow report compare --root`` with a missing folder, a blank value, ``file://otherhost/...`` (said as
  ``alflow results serve`` says it, not as "nothing to compare") or an unsupported URL (``zip://``, ``tar://``);
- R11-11: the site logs one line, not a traceback, for a text file it cannot redact in parts (a documented cut).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import pytest
from typer.testing import CliRunner

from alflow.cli import app
from alflow.errors import InvalidInputError
from alflow.site import app as site_app
from alflow.site.app import CHUNK_BYTES
from alflow.site.server import check_root
from alflow.site.threads import PageTooSlowError
from alflow.util.redact import MAX_HELD_BYTES
from alflow.util.yamlfile import MAX_DEPTH
from tests.unit.test_site import M2, make_root, serving
from tests.unit.test_site_files import _list_file, _raw_get

pytestmark = pytest.mark.unit

SECRET_URL = "https://hooks.slack.com/services/T0/B0/XXSLACKSECRET"


# --------------------------------------------------------------------------------------------
# R11-7: the webhook helper


@pytest.fixture
def no_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any call to the Prefect API fails the test: every check must come first."""
    from alflow_deployments import webhook

    def called(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the Prefect API was called before the inputs were checked")

    for name in ("save_block", "block_ids", "existing"):
        monkeypatch.setattr(webhook, name, called)
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")


def _deep_json(depth: int) -> str:
    return '{"text": "{{body}}", "deep": ' + "[" * depth + "]" * depth + "}"


JSON_DATA = [
    ('{"text": "{{oops}}"}', "--json-data: unknown placeholder '{{oops}}' (allowed: {{subject}}, {{body}}, {{name}})"),
    ('{"text": "{{ $HOME }}"}', "--json-data: unknown placeholder '{{$HOME}}'"),
    ('{"a": ["{{body}}", {"b": "{{prefect.blocks.secret.x}}"}]}', "unknown placeholder '{{prefect.blocks.secret.x}}'"),
    ('{"text": "{{webhook_url}}"}', "unknown placeholder '{{webhook_url}}'"),  # the secret is not for the body
    ('{"t": "{{' + "x" * 5000 + '}}"}', "(5,004 characters) (allowed:"),
    (_deep_json(20_000), "--json-data: nested too deep (at most 64 levels"),  # the JSON decoder's RecursionError
    (_deep_json(MAX_DEPTH), "--json-data: nested too deep (at most 64 levels"),  # decodes, too deep for the block
]  # fmt: skip


@pytest.mark.usefixtures("no_calls")
@pytest.mark.parametrize(("data", "said"), JSON_DATA, ids=lambda v: v[:30] if isinstance(v, str) else "")
def test_a_bad_json_data_is_one_line_naming_it_before_any_call(
    data: str, said: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """R11-7: an unknown placeholder was a KeyError traceback from Prefect's block; deep nesting a RecursionError."""
    from alflow_deployments.webhook import main

    assert main(["--url", SECRET_URL, "--json-data", data, "--out", str(tmp_path / "a.yaml")]) == 2
    err = capsys.readouterr()
    said_all = err.out + err.err
    assert said in said_all
    assert len(said_all.strip().splitlines()) == 1, said_all[:500]
    assert "XXSLACKSECRET" not in said_all
    assert "Traceback" not in said_all
    assert not (tmp_path / "a.yaml").exists()


def test_the_placeholders_the_block_fills_in_and_nesting_up_to_the_limit_are_taken() -> None:
    from alflow_deployments.webhook import JSON_DATA as DEFAULT
    from alflow_deployments.webhook import json_data_of

    assert json_data_of(json.dumps(DEFAULT)) == DEFAULT
    given = {"text": "{{ subject }}: {{body}} from {{name}}", "n": [1, {"x": None}]}
    assert json_data_of(json.dumps(given)) == given
    deep = "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1)
    assert json_data_of('{"a": ' + deep + "}")["a"]
    with pytest.raises(InvalidInputError, match="nested too deep"):
        json_data_of('{"a": [' + deep + "]}")


AUTOMATIONS = [
    ("deep.yaml", "a: " + "[" * 5000 + "]" * 5000 + "\n", "line 1: nesting deeper than 64 levels"),  # was a RecursionError
    ("deep-map.yaml", "".join(" " * i + f"k{i}:\n" for i in range(100)), "nesting deeper than 64 levels"),
    ("twice.yaml", "automations: []\nautomations: []\n", "duplicate key 'automations'"),
    ("laughs.yaml", "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdef", "bcdefg", strict=True)),
     "aliases expand to more than"),
    ("missing.yaml", None, "cannot read the Prefect automations file"),
    ("folder", "", "is a directory"),
    ("slug.yaml", "- name: x\n  actions: [{block_document_id: a/b/c}]\n", "is neither an id nor a block slug"),
]  # fmt: skip


@pytest.mark.usefixtures("no_calls")
@pytest.mark.parametrize(("name", "text", "said"), AUTOMATIONS, ids=[a[0] for a in AUTOMATIONS])
def test_a_bad_automations_file_is_one_line_naming_it_before_any_call(
    name: str, text: str | None, said: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """R11-7: an automations file nested deeper than Python recurses was a RecursionError traceback (exit 1)."""
    from alflow_deployments.webhook import main

    path = tmp_path / name
    if name == "folder":
        path.mkdir()
    elif text is not None:
        path.write_text(text)
    argv = ["--url", SECRET_URL, "--automations", str(path), "--out", str(tmp_path / "a.yaml")]
    assert main(argv) == 2
    err = capsys.readouterr()
    said_all = err.out + err.err
    assert said_all.startswith(f"error: --automations {path}"), said_all[:500]
    assert said in said_all
    assert len(said_all.strip().splitlines()) == 1, said_all[:500]
    assert "XXSLACKSECRET" not in said_all


@pytest.mark.usefixtures("no_calls")
def test_an_out_file_prefect_cannot_read_is_refused_before_any_call(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The block was saved first, then ``--out x.txt`` refused: a bad input after the work."""
    from alflow_deployments.webhook import main

    assert main(["--url", SECRET_URL, "--out", str(tmp_path / "a.txt")]) == 2
    said = capsys.readouterr().err
    assert "--out" in said
    assert "reads .yaml, .yml or .json files only" in said


# --------------------------------------------------------------------------------------------
# R11-9: report compare --root


def _compare(root: str) -> str:
    """``alflow report compare --root ROOT -f json``'s one error line (exit 2, one line asserted)."""
    result = CliRunner().invoke(app, ["report", "compare", "--root", root, "-f", "json"])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output
    return lines[0]


@pytest.mark.parametrize(
    "root",
    [
        "{tmp}/nonexistent",
        "",
        " ",
        "\t",
        "file://otherhost{tmp}",
        "{tmp}/afile",
        "{tmp}/afile/x",
        "file://{tmp}/no",
    ],
)
def test_a_root_that_is_no_folder_is_said_as_the_site_says_it(tmp_path: Path, root: str) -> None:
    """R11-9: a missing root, a blank one or another host's ``file://`` said "nothing to compare"."""
    (tmp_path / "afile").write_text("x")
    root = root.format(tmp=tmp_path)
    line = _compare(root)
    with pytest.raises(InvalidInputError) as serve:
        check_root(root)
    assert line == "error: " + str(serve.value).replace("ROOT", "--root", 1)
    assert "nothing to compare" not in line
    assert "not a folder" in line or "is empty" in line


@pytest.mark.parametrize(
    "root",
    ["zip:///tmp/x.zip", "tar:///tmp/x.tar", "zip://user:pw@/x", "http://h.example/r", "s3a://b/r", "x://"],
)
def test_a_root_url_of_an_unsupported_scheme_is_refused_naming_it_and_what_is_allowed(
    root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R11-9: ``zip://`` and ``tar://`` said "cannot open results root ...: Is a directory: '<working folder>'"."""
    monkeypatch.chdir(tmp_path)
    line = _compare(root)
    assert line.startswith("error: --root '"), line
    assert "allowed: a results root folder or an s3:// / gs:// / gcs:// URL" in line
    assert str(tmp_path) not in line  # the working folder (the test's chdir)
    assert ":pw@" not in line


def test_an_existing_root_without_complete_runs_still_has_nothing_to_compare(tmp_path: Path) -> None:
    assert "nothing to compare" in _compare(str(tmp_path))
    assert "nothing to compare" in _compare(f"file://{tmp_path}")


# --------------------------------------------------------------------------------------------
# R11-11: the site's log for a documented cut


def _failing(error: BaseException) -> Any:
    def chunks(f: BinaryIO, limit: int | None = None) -> Iterator[bytes]:
        yield f.read(1000)
        raise error

    return chunks


CUTS = [
    ("no whitespace", None, "bytes without a line's end to cut at: more than the 8,388,608"),
    ("read error", OSError(5, "Input/output error"), "[Errno 5] Input/output error"),
    ("shrank", OSError("the file ended 4,096 bytes before\nthe size"), "the file ended 4,096 bytes before the size"),
    ("no slot", PageTooSlowError("/x: no file-read slot free within 20 s"), "no file-read slot free"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "error", "said"), CUTS, ids=[c[0] for c in CUTS])
async def test_a_documented_cut_is_logged_as_one_line_without_a_traceback(
    case: str,
    error: BaseException | None,
    said: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """R11-11: a text file with over 8 MiB without whitespace logged a whole RedactionError traceback per request."""
    root = make_root(tmp_path)
    if error is None:  # the real case: a file the redactor cannot cut
        _list_file(root / M2, "report.md", b"x" * (MAX_HELD_BYTES + 2 * CHUNK_BYTES))
    else:
        _list_file(root / M2, "report.md", b"some text\n" * 500)
        monkeypatch.setattr(site_app, "_chunks", _failing(error))
    with caplog.at_level(logging.WARNING, logger="alflow.site.app"):
        async with serving(root) as site:
            raw = await _raw_get(site, f"/runs/{M2}/files/report.md")
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert not body.endswith(b"0\r\n\r\n")  # cut, as documented: no last chunk
    [record] = [r for r in caplog.records if "failed part-way" in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert not record.exc_info, case  # no traceback
    message = record.getMessage()
    assert "\n" not in message
    assert said in message
    assert message.endswith("the connection is cut")


async def test_a_cut_no_check_foresaw_keeps_its_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    root = make_root(tmp_path)
    _list_file(root / M2, "report.md", b"some text\n" * 500)
    monkeypatch.setattr(site_app, "_chunks", _failing(RuntimeError("an fsspec back-end's own error")))
    with caplog.at_level(logging.WARNING, logger="alflow.site.app"):
        async with serving(root) as site:
            await _raw_get(site, f"/runs/{M2}/files/report.md")
    [record] = [r for r in caplog.records if "failed part-way" in r.getMessage()]
    assert record.exc_info
