"""Hostile round 6 of issue #49: what a sixth round of hostile inputs found, each answered now."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from alflow.cli import app

pytestmark = pytest.mark.unit

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "4f9de94" / "m2"
PASSWORD = "Pw-round6-9f3a"


@pytest.fixture
def m2_with_password(tmp_path: Path) -> Path:
    """The previous release's M2 run, its model id turned into a URL with a password (the configuration allows it)."""
    run = tmp_path / "m2" / next(p.name for p in FIXTURE.iterdir())
    shutil.copytree(next(FIXTURE.iterdir()), run)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["config"]["model"]["id"] = f"https://bob:{PASSWORD}@models.example/llama"
    (run / "manifest.json").write_text(json.dumps(manifest))
    return run


@pytest.mark.parametrize("fmt", ["md", "html", "json", "csv"])
def test_a_password_in_a_stored_model_id_is_in_no_report_format(m2_with_password: Path, fmt: str) -> None:
    """F8: ``alflow report show RUN -f md|html|json|csv`` printed it (the site redacted the same run)."""
    out = m2_with_password.parent / f"out.{fmt}"
    ran = CliRunner().invoke(app, ["report", "show", str(m2_with_password), "-f", fmt, "-o", str(out)])
    assert ran.exit_code == 0, ran.output
    assert PASSWORD not in out.read_text()
    assert PASSWORD not in ran.output
    default = CliRunner().invoke(app, ["report", "show", str(m2_with_password)])  # report.html into the run
    assert default.exit_code == 0, default.output
    assert PASSWORD not in (m2_with_password / "report.html").read_text()


def test_a_report_output_that_cannot_be_a_file_is_refused_before_any_work(m2_with_password: Path) -> None:
    """F27: ``-o FIFO`` blocked until a reader came; ``-o /proc/self/mem`` failed after the work."""
    fifo = m2_with_password.parent / "fifo"
    os.mkfifo(fifo)
    for output, said in ((str(fifo), "not a regular file"), ("/proc/self/mem", "is under /proc"),
                         (str(m2_with_password), "is a folder"), ("", "is empty"),
                         ("~no-such-user-r6/x.md", "no such user's home folder")):  # fmt: skip
        ran = CliRunner().invoke(app, ["report", "show", str(m2_with_password), "-f", "md", "-o", output])
        assert ran.exit_code == 2, (output, ran.output)
        assert said in ran.output


async def test_a_bidi_override_in_a_stored_model_id_is_shown_escaped_on_every_page(tmp_path: Path) -> None:
    """F25: an RLO (U+202E) in a stored model id reached the HTML of ``/`` and ``/trends`` raw (the run page
    escaped it); the configuration refuses it now, but a root holds what other tools wrote."""
    from tests.unit.test_site import M2, make_root, serving
    from tests.unit.test_site_security import _edit_manifest

    root = make_root(tmp_path)
    _edit_manifest(root / M2, {"config.model.id": "llama\u202eexe.txt"})
    async with serving(root) as site:
        for path in ("/", "/trends", f"/runs/{M2}/", "/?text=llama"):
            answer = await site.get(path)
            assert answer.status == 200, path
            assert "\u202e" not in answer.text, path
        assert "llama\\u202eexe.txt" in (await site.get("/")).text


def _sim(*args: str) -> tuple[int, str]:
    ran = CliRunner().invoke(app, ["sim", "serve", "--port", "0", *args])
    return ran.exit_code, ran.output


def test_the_sims_own_inputs_answer_in_one_line(tmp_path: Path) -> None:
    """F22, F23, F24: ``--step-log FIFO`` blocked for good (deaf to SIGTERM), ``--log-level NOPE`` was a traceback,
    ``--model-name`` with an ESC or empty was served and logged raw."""
    fifo = tmp_path / "steps"
    os.mkfifo(fifo)
    for args, said in (
        (("--step-log", str(fifo)), "not a regular file"),
        (("--log-level", "NOPE"), "--log-level 'NOPE' is not one of: CRITICAL"),
        (("--model-name", "a\x1bb"), "control character(s) U+001B"),
        (("--model-name", ""), "is blank"),
    ):
        code, err = _sim(*args)
        assert code == 2, (args, err)
        assert "Traceback" not in err
        (line,) = err.strip().splitlines()
        assert said in line, line


async def test_folders_whose_names_are_not_utf8_are_listed_unreadable_and_the_site_answers(
    tmp_path: Path,
) -> None:
    """F1, F2: a flow folder named with a byte that is not UTF-8 made ``/``, ``/api/runs`` and ``/trends`` answer
    500; a run folder so named was left out without a word."""
    from tests.unit.test_site import make_root, serving

    root = make_root(tmp_path)
    base = os.fsencode(str(root))
    for name in (b"/fl\xffow/20261207T050005Z-abc", b"/m2/20261207T050005Z-bad\xff\xfename"):
        os.makedirs(base + name)  # noqa: PTH103 (bytes: a name that is not UTF-8)
    async with serving(root) as site:
        for path in ("/", "/api/runs?per_page=200", "/trends", "/api/trends", "/?status=unreadable"):
            answer = await site.get(path)
            assert answer.status == 200, (path, answer.status)
        runs = json.loads((await site.get("/api/runs")).body)
        listed = {r["rel"]: r for r in runs["rows"]}
        for rel in ("fl\\xffow/20261207T050005Z-abc", "m2/20261207T050005Z-bad\\xff\\xfename"):
            assert listed[rel]["status"] == "unreadable"
            assert "not UTF-8" in listed[rel]["problem"]


def test_more_inputs_answer_in_one_line_before_any_work(tmp_path: Path) -> None:
    """F10, F26, F27: a 70,000-character API key answered "give --model"; a dataset FIFO "does not exist"; an empty
    results root served the working folder; an empty --config read "."; a blank or ESC model was sent."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    url = ["--base-url", "http://127.0.0.1:9"]
    cases = [
        (["bench", *url, "--api-key", "k" * 70_000], "--api-key is 70,000 characters long: at most 4,096"),
        (["bench", *url, "--dataset", "gsm8k", "--input-file", str(fifo)], "is not a regular file (a FIFO"),
        (["bench", *url, "--dataset", "speed-bench", "--input-file", str(tmp_path)], "is a folder"),
        (["bench", *url, "--model", " "], "--model ' ' is blank"),
        (["bench", *url, "--model", "a\x1bb"], "control character(s) U+001B"),
        (["results", "serve", ""], "ROOT '' is empty"),
        (["run", "m2", "--config", "", "--dry-run"], "is a directory, not a config"),  # typer reads "" as "."
    ]
    for args, said in cases:
        ran = CliRunner().invoke(app, args)
        assert ran.exit_code == 2, (args[:4], ran.output[-500:])
        assert said in ran.output, (args[:4], ran.output[-500:])
        assert "Traceback" not in ran.output


def test_the_webhook_helper_refuses_a_url_that_is_none_before_calling_prefect(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """F27: ``--url "not a url"`` reached the Prefect API and ended with exit 1."""
    from alflow_deployments.webhook import main

    for url in ("not a url", "ftp://h/x", "https://", "http://u:pw12345@[::1"):
        assert main(["--url", url, "--out", "/tmp/never-written.yaml"]) == 2
        err = capsys.readouterr()
        assert "give the webhook's http(s)://HOST[:PORT]/... URL" in err.out + err.err
        assert "pw12345" not in err.out + err.err


def test_a_damaged_request_table_is_named_in_the_report(m2_with_password: Path) -> None:
    """F3: a truncated requests.parquet read as "No request records", as if the run had kept none."""
    (m2_with_password / "requests.parquet").write_bytes(b"PAR1" + b"\0" * 200)
    ran = CliRunner().invoke(app, ["report", "show", str(m2_with_password), "-f", "md"])
    assert ran.exit_code == 0, ran.output
    assert r"requests\.parquet cannot be read" in ran.output  # Markdown-escaped


async def test_a_listed_file_out_of_the_root_is_a_problem_on_the_index(tmp_path: Path) -> None:
    """F4: a run whose listed report.md pointed at /etc/passwd was "complete" without a problem on the index while
    its page answered 404."""
    from tests.unit.test_site import M2, make_root, serving

    root = make_root(tmp_path)
    run = root / M2
    listed = json.loads((run / "manifest.json").read_text())["files"]
    name = next(n for n in listed if n not in ("manifest.json", "summary.json", "spec_stats.parquet"))
    (run / name).unlink()
    (run / name).symlink_to("/etc/passwd")
    async with serving(root) as site:
        api = json.loads((await site.get("/api/runs?per_page=200")).body)
        (row,) = [r for r in api["rows"] if r["rel"] == M2]
        assert f"{name}: not a regular file inside the results root" in row["problem"]
        assert "not a regular file" in (await site.get("/")).text


def test_review_of_round6_fixes() -> None:
    """A review of this round's fixes: the separator of joined URLs kept, plain words after "Basic" kept, a key
    ending in "sid" but not a session kept, Docker's ASCII tags, /dev/null as an output."""
    from alflow.util.names import check_image, check_output_file
    from alflow.util.redact import redact_body, redact_urls_in_text

    assert redact_urls_in_text("http://a/?key=1,http://b/?key=2") == "http://a/?key=***,http://b/?key=***"
    assert (
        redact_urls_in_text("--metrics-url http://a/m?sig=x,http://b/m")
        == "--metrics-url http://a/m?sig=***,http://b/m"
    )
    body = {
        "guided_choice": ["Basic plan", "Token sale"],
        "x": {"consid": 1},
        "auth": "Bearer eyJhbGciOiJIUzI1NiJ9",
    }
    assert redact_body(body) == {
        "guided_choice": ["Basic plan", "Token sale"],
        "x": {"consid": 1},
        "auth": "***",
    }
    with pytest.raises(ValueError, match="not a container image reference"):
        check_image("a/b:tag\u00e9")
    assert check_output_file("/dev/null") == Path("/dev/null")


# -- round 7 ---------------------------------------------------------------------------------------------------


def _forge(run: Path) -> None:
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["config"]["model"]["id"] = (
        "EVIL\u202e\x1b[31m Bearer MODELBEARER3 https://u:PW7a@h/x?api_key=K7b"
    )
    server = manifest["config"].setdefault("server", {})
    server["extra_args"] = ["--time-scale", "0", "--api-key", "EXTRAARGKEY5", "--hf-token=HFTOK6"]
    server["extra_env"] = {"MY_PASSWD": "ENVPW7", "NCCL_DEBUG": "INFO"}
    server["image"] = "img:tag password=IMGPW4"
    (run / "manifest.json").write_text(json.dumps(manifest))


CANARIES = ("MODELBEARER3", "PW7a", "K7b", "EXTRAARGKEY5", "HFTOK6", "ENVPW7", "IMGPW4")


@pytest.mark.parametrize("fmt", ["md", "html", "json", "csv"])
def test_round7_secrets_stored_by_another_tool_are_in_no_report(m2_with_password: Path, fmt: str) -> None:
    """Round 7 (F2, F3, F4): a Bearer value in a stored model id, secret flags' values in stored extra_args, a secret
    variable in stored extra_env, password= in an image showed in reports; a CSV cell carried raw U+202E and ESC."""
    _forge(m2_with_password)
    ran = CliRunner().invoke(app, ["report", "show", str(m2_with_password), "-f", fmt, "-o", "-"])
    assert ran.exit_code == 0, ran.output
    leaked = [c for c in CANARIES if c in ran.output]
    assert leaked == []
    assert "\u202e" not in ran.output
    assert "\x1b" not in ran.output


async def test_round7_the_site_shows_no_stored_secret_and_no_raw_bidi_in_json(tmp_path: Path) -> None:
    """Round 7 (F2, F3, F6): the same forged manifest on the site's pages and JSON answers."""
    from tests.unit.test_site import M2, make_root, serving

    root = make_root(tmp_path)
    _forge(root / M2)
    async with serving(root) as site:
        for path in (
            "/",
            "/trends",
            f"/runs/{M2}/",
            "/api/runs",
            f"/api/runs/{M2}",
            "/api/runs?text=%E2%80%AE",
        ):
            answer = await site.get(path)
            # a filter holding RLO is refused since round 12 (its value shown escaped), the rest answered
            assert answer.status == (400 if "%E2%80%AE" in path else 200), path
            assert [c for c in CANARIES if c in answer.text] == [], path
            assert "\u202e" not in answer.text, path


def test_round7_inputs() -> None:
    """Round 7 (F1, F7, F8): --step-log under /proc was a traceback; a header credential in extra_args was kept;
    secret-shaped values under plain body keys were stored."""
    from pydantic import ValidationError

    from alflow.config import server_config
    from alflow.util.redact import redact_body

    ran = CliRunner().invoke(app, ["sim", "serve", "--port", "0", "--step-log", "/proc/version"])
    assert ran.exit_code == 2, ran.output
    assert "is under /proc" in ran.output
    with pytest.raises(ValidationError, match="holds a credential"):
        server_config(framework="sim", model="m", extra_args=("--header", "Authorization: Bearer CFGKEY12"))
    body = {"pw": "password=XB9", "hdr": "Authorization: Basic XB10abcd", "aws": "AKIAIOSFODNN7EXAMPLE",
            "gh": "ghp_" + "a" * 36, "priv": "-----BEGIN PRIVATE KEY-----XB11", "note": "token=XBODYSECRET3"}  # fmt: skip
    stored = json.dumps(redact_body(body))
    assert [c for c in ("XB9", "XB10", "AKIAIOSFODNN7", "ghp_", "XB11", "XBODYSECRET3") if c in stored] == []


def test_round7_a_symlinked_run_folder_is_listed_unreadable_and_small_inputs_answer(tmp_path: Path) -> None:
    """Round 7 (F11, F12, F13): a symlink in a root (a loop to its flow folder) vanished from the index; --flow m9
    and RUN_DIR '' were not named; the sim took an ESC in --framework-version and an explicit empty --api-key."""
    from alflow.results.catalog import Catalog
    from tests.unit.test_catalog import write_run

    write_run(tmp_path, "2026-01-01T00:00:00+00:00")
    (tmp_path / "m2" / "20261207T060009Z-loop").symlink_to(tmp_path / "m2")
    entry = Catalog(str(tmp_path)).get("m2/20261207T060009Z-loop")
    assert entry is not None
    assert entry.status == "unreadable"
    assert "a symlink" in (entry.problem or "")
    for args, said in (
        (["report", "compare", "--root", str(tmp_path), "--flow", "m9"], "--flow 'm9' is not one of: m0"),
        (["report", "show", ""], "RUN_DIR '' is empty"),
        (["sim", "serve", "--port", "0", "--framework-version", "v\x1b[31m"], "control character(s) U+001B"),
        (["sim", "serve", "--port", "0", "--api-key", ""], "--api-key '' is empty"),
    ):
        ran = CliRunner().invoke(app, args)
        assert ran.exit_code == 2, (args, ran.output)
        assert said in ran.output
