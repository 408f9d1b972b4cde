"""Secrets by name, never by value: secret names, URL credentials, the API key on the wire, the run store."""

from __future__ import annotations

import base64
import json
import random
import re
import time
from pathlib import Path

import polars as pl
import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from alflow.bench import served_model as _served_model
from alflow.cli import app
from alflow.config import server_config
from alflow.datasets.random_tokens import detokenize_sessions, random_sessions
from alflow.errors import InvalidInputError
from alflow.loadgen import LoadSpec, Target, run_load
from alflow.loadgen.client import auth_headers
from alflow.results.store import RunWriter, open_run
from alflow.serving.api import ApiError, check_api_key
from alflow.util.redact import (
    RedactionError,
    may_hold_credentials,
    redact_body,
    redact_data,
    redact_text_stream,
    redact_url,
    redact_urls_in_text,
    url_spans,
)
from alflow.util.secret_names import is_secret_name
from tests.unit.sse_server import SseServer, threaded_sse_server

pytestmark = pytest.mark.unit

KEY = "sk-CanaryKey-7f3a9"


@pytest.mark.parametrize(
    "name",
    [
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "API_KEY",
        "OPENAI_API_KEY",
        "VLLM_API_KEY",
        "WANDB_API_KEY",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "MY_SECRET",
        "SECRETS_FILE_CONTENT",
        "DB_PASSWORD",
        "PGPASSWORD",
        "GITHUB_TOKEN",
        "hf_token",
        "S3_ACCESS_KEY_ID",
        "AUTHORIZATION",  # hostile round 4: these were stored in clear from extra_env
        "MY_CREDS",
        "GCP_CREDENTIALS",
        "BEARER",
        "SESSION_COOKIE",
        "GPG_PASSPHRASE",
    ],
)
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "NCCL_DEBUG",
        "TOKENIZERS_PARALLELISM",
        "HF_TOKEN_PATH",
        "VLLM_CPU_KVCACHE_SPACE",
        "MAX_TOKENS",
        "HF_HOME",
    ],
)
def test_not_secret_names(name: str) -> None:
    assert not is_secret_name(name)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("http://user:pa55word@host:8000/v1", "http://***@host:8000/v1"),
        ("http://tokenonly@host/metrics", "http://***@host/metrics"),
        ("https://h/metrics?token=abc123&job=vllm", "https://h/metrics?token=***&job=vllm"),
        (
            "https://h/m?api_key=a&apikey=b&key=c&password=d&secret=e",
            "https://h/m?api_key=***&apikey=***&key=***&password=***&secret=***",
        ),
        (
            "https://b.s3.amazonaws.com/x?X-Amz-Signature=f00&X-Amz-Security-Token=ba7&X-Amz-Date=1",
            "https://b.s3.amazonaws.com/x?X-Amz-Signature=***&X-Amz-Security-Token=***&X-Amz-Date=1",
        ),
        (
            "https://acct.blob.core.windows.net/c?sv=2020&sig=abc%2Fdef",
            "https://acct.blob.core.windows.net/c?sv=2020&sig=***",
        ),
        ("https://h/cb#access_token=xyz&state=1", "https://h/cb#access_token=***&state=1"),
        ("https://h/p?access_token=xyz", "https://h/p?access_token=***"),
        ("not a url", "not a url"),
        ("/local/path?token=x", "/local/path?token=x"),
    ],
)
def test_redact_url(url: str, expected: str) -> None:
    assert redact_url(url) == expected


def test_redact_urls_in_text_and_data() -> None:
    text = "cannot reach URL('http://u:hunter22@h:1/metrics?token=tok987') after 3 tries; key sk-123456 used"
    out = redact_urls_in_text(text, ["sk-123456"])
    assert "hunter22" not in out
    assert "tok987" not in out
    assert "sk-123456" not in out
    assert "http://***@h:1/metrics?token=***" in out
    data = {"a": ["http://x:pw1234@h/", {"b": ("ok", 3, None)}], "c": 1.5}
    assert redact_data(data) == {"a": ["http://***@h/", {"b": ["ok", 3, None]}], "c": 1.5}


def test_a_text_redacted_in_parts_equals_the_text_redacted_whole_at_every_cut() -> None:
    text = (
        "GET https://u:hunter22@h.example/v1?token=tok987&x=1 200\n"
        "caf\u00e9 \u2014 http://a:pw1234@b:8/ \t s3://key:sec5678@bucket/p\r\n"
        "no-space-run:https://x:pw9999@y/z\n"
        '{"a":"https://k:pw4321@j/","b":<i>_https://m:pw5555@n/_</i>,`1gs://o:pw6666@p/`}\u00a0\u2028'
    ).encode() + b"\xe2\x82 \xff\xfe broken utf-8 http://q:pw7777@r/"
    whole = redact_urls_in_text(text.decode("utf-8", errors="replace")).encode()
    for secret in (b"hunter22", b"tok987", b"pw1234", b"sec5678", b"pw9999", b"pw4321", b"pw5555", b"pw6666"):
        assert secret not in whole
    assert b"pw7777" not in whole
    for size in range(1, len(text) + 1):  # every cut: inside a URL, a UTF-8 character, a run without space
        parts = [text[i : i + size] for i in range(0, len(text), size)]
        assert b"".join(redact_text_stream(parts)) == whole, size
    assert list(redact_text_stream([])) == []


def test_a_url_glued_to_an_underscore_or_a_digit_is_redacted() -> None:
    assert redact_urls_in_text("_https://u:pw1234@h/x_ and 1https://v:pw5678@h/") == (
        "_https://***@h/x_ and 1https://***@h/"
    )


def test_urls_in_text_are_found_as_the_unbounded_pattern_finds_them() -> None:
    """Seeded fuzz: the linear finder agrees with the plain pattern on every short text (schemes under 32 letters).

    The pattern's URLs less the punctuation that ends them (``URL: reason``), as the finder cuts them.
    """
    pattern = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]+")
    rng = random.Random(49)
    alphabet = "ab1._-+:/ @?=&'\"<>`\n#\u00e9htps"
    for _ in range(20_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))).replace("ab", "://", 1)
        assert list(url_spans(text)) == [_less_trailing(text, m) for m in pattern.finditer(text)], text


def _less_trailing(text: str, m: re.Match[str]) -> tuple[int, int]:
    """A URL's span less the punctuation that ends it (``URL: reason``), one character after ``://`` kept."""
    start, end = m.span()
    floor = start + m[0].index("://") + 4
    while end > floor and text[end - 1] in ":.,;!?)":
        end -= 1
    return start, end


@pytest.mark.parametrize(
    "shape",
    [
        "a" * 2_000_000,  # one run of scheme letters with no ://
        "a" * 1_000_000 + "://" + "b" * 1_000_000,  # a URL with a 1,000,000-letter scheme
        "a:" * 1_000_000,  # many almost-separators
        ("x" * 31 + ":/") * 60_000,
        "h://" * 500_000,  # half a million URLs
        "://" * 700_000,  # separators with no scheme (each once scanned to the next space)
        "1://" * 500_000,
        "?" + "a" * 2_000_000 + "=",  # a parameter name past the bound: no match, scanned once per start
        ("?" + "a" * 63) * 30_000 + "=",
        "?&" * 1_000_000,
        "?" + "token=b&" * 250_000,  # a quarter of a million secret parameters
    ],
)
def test_redaction_is_linear_in_the_text(shape: str) -> None:
    """A 2-million-character model id once took minutes (the pattern scanned each run from every start, #49)."""
    started = time.perf_counter()
    out = redact_urls_in_text(f"model {shape} at http://u:pw1234@h/x")
    assert out.endswith("at http://***@h/x")
    assert time.perf_counter() - started < 10.0  # quadratic: hours at this size; linear: 0.03 to 0.7 s here


def test_a_secret_parameter_outside_a_url_is_redacted() -> None:
    """Hostile round 5 (s4): ``--step-log /tmp/x?token=...`` was stored as given."""
    stored = redact_data(
        {"step_log": "/tmp/x?token=tok12345&mode=a", "note": "see ./log?a=1&api_key=key12345 now"}
    )
    assert stored == {"step_log": "/tmp/x?token=***&mode=a", "note": "see ./log?a=1&api_key=*** now"}
    for plain in ("?mode=fast&n=2", "x=1 ? y=2", "max_tokens=512 --max-num-batched-tokens=8192"):
        assert redact_urls_in_text(plain) == plain


@pytest.mark.parametrize(
    "text",
    [
        "launched with --api-key abc12345xyz",
        "Bearer abcdef123456",
        "key hf_abcdefghijklmnopqrstuvwxyz",
        "HF_TOKEN=abc12345",
        '{"api_key": "abc12345"}',
        "X-Api-Key: abc12345",
        "see ./log?api_key=key12345",
        "http://user:pw12345@host/x",
    ],
)
def test_a_text_that_redaction_changes_may_hold_credentials(text: str) -> None:
    """The site's cheap pre-test and the redaction share their hints: ``--api-key value`` alone passed the test."""
    assert redact_urls_in_text(text) != text
    assert may_hold_credentials(text)


def test_compact_json_is_redacted_in_parts_and_a_run_with_nowhere_to_cut_is_refused() -> None:
    record = b'{"url":"https://u:pw1234@h/x","n":1},'
    parts = list(
        redact_text_stream([record] * 1000)
    )  # one line: held whole (round 16: never cut inside a line)
    assert len(parts) == 1
    assert b"pw1234" not in b"".join(parts)
    with pytest.raises(
        RedactionError, match=r"^1,000 bytes without a line's end to cut at: more than the 999"
    ):
        list(redact_text_stream([b"x" * 500, b"y" * 500], max_held=999))


def test_extra_env_refuses_secret_names_and_points_to_the_runner_secrets() -> None:
    with pytest.raises(ValidationError) as info:
        server_config(
            framework="sim", model="m", extra_env={"HF_TOKEN": "hf_literalValue99", "NCCL_DEBUG": "INFO"}
        )
    message = str(info.value)
    assert "HF_TOKEN" in message
    assert "secrets" in message
    assert "Prefect Secret block" in message
    assert "hf_literalValue99" not in message  # pydantic's error does not echo the input
    for name in ("OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "MY_SECRET_THING"):
        with pytest.raises(ValidationError, match=name):
            server_config(framework="vllm", model="m", extra_env={name: "x"})
    ok = server_config(
        framework="vllm", model="m", extra_env={"TOKENIZERS_PARALLELISM": "false", "NCCL_DEBUG": "WARN"}
    )
    assert ok.extra_env["NCCL_DEBUG"] == "WARN"


@pytest.mark.parametrize(
    "args", [("--api-key", "sk-Literal-5"), ("--hf-token=hf_Literal-5",), ("--db-password", "Literal-5")]
)
def test_extra_args_refuse_secret_flags(args: tuple[str, ...]) -> None:
    with pytest.raises(ValidationError, match="runner's secrets") as info:
        server_config(framework="vllm", model="m", extra_args=args)
    assert "Literal-5" not in str(info.value)
    server_config(
        framework="vllm", model="m", extra_args=("--max-num-batched-tokens", "8192", "--tokenizer", "t")
    )


def test_run_store_strips_url_credentials_from_everything_it_writes(tmp_path: Path) -> None:
    secret_url = "http://scraper:Pw-Canary-1@10.0.0.5:8000/metrics?token=Tok-Canary-2&job=a"
    with RunWriter(
        tmp_path,
        "m2",
        run_id="r1",
        config={"placement": {"runner": {"kind": "external", "base_url": secret_url}}},
        provenance={"server": {"metrics_urls": [secret_url]}},
    ) as writer:
        writer.write_summary({"error": f"cannot scrape metrics at {secret_url}: refused"})
        writer.write_table(
            "requests", pl.DataFrame({"error": [f"POST {secret_url} failed", None], "n": [1, 2]})
        )
        writer.write_text("report.md", f"see <{secret_url}>\n")
        run_dir = writer.dir
    files = list(Path(run_dir).iterdir())
    assert {f.name for f in files} == {"manifest.json", "summary.json", "requests.parquet", "report.md"}
    for path in files:
        raw = path.read_bytes()
        assert b"Pw-Canary-1" not in raw, path.name
        assert b"Tok-Canary-2" not in raw, path.name
    run = open_run(run_dir)
    assert run.manifest.config["placement"]["runner"]["base_url"] == (
        "http://***@10.0.0.5:8000/metrics?token=***&job=a"
    )
    assert run.table("requests")["error"].to_list()[0] == (
        "POST http://***@10.0.0.5:8000/metrics?token=***&job=a failed"
    )
    assert json.loads((Path(run_dir) / "summary.json").read_text())["error"].startswith(
        "cannot scrape metrics at http://***@"
    )


def test_auth_headers_and_the_servers_check() -> None:
    assert auth_headers(None) == {}
    assert auth_headers("") == {}
    assert auth_headers(KEY) == {"Authorization": f"Bearer {KEY}"}
    for bad in ("a\r\nX-Injected: 1", "key\n", " padded ", "k\u00e9y"):
        with pytest.raises(InvalidInputError) as info:
            auth_headers(bad)
        assert bad not in str(info.value)
    check_api_key("/v1/models", None, None)  # no key configured: open
    check_api_key("/health", None, KEY)  # only /v1 is guarded (vLLM)
    check_api_key("/metrics", None, KEY)
    check_api_key("/v1/chat/completions", f"Bearer {KEY}", KEY)
    for wrong in (None, KEY, f"Bearer {KEY}x", "Bearer "):
        with pytest.raises(ApiError) as err:
            check_api_key("/v1/completions", wrong, KEY)
        assert err.value.status == 401
        assert KEY not in err.value.body().decode()


def test_target_repr_hides_the_key() -> None:
    target = Target("http://h", "m", api_key=KEY)
    assert KEY not in repr(target)
    assert target.headers == {"Authorization": f"Bearer {KEY}"}


@pytest.mark.parametrize("transport", ["fast", "aiohttp"])
async def test_the_api_key_goes_with_every_request_of_both_transports(transport: str) -> None:
    async with SseServer() as srv:
        work = random_sessions(3, isl=8, osl=4, seed=1, vocab_size=500)
        res = await run_load(
            work,
            Target(srv.base_url, "m", endpoint="completions", api_key=KEY),
            LoadSpec(concurrency=2, warmup=1, transport=transport),  # type: ignore[arg-type]
        )
        assert all(r.ok for r in res.records)
        texts = await detokenize_sessions(work, srv.base_url, "m", headers=auth_headers(KEY))
        assert all(isinstance(t.prompt, str) for s in texts for t in s.turns)
        import aiohttp

        async with aiohttp.ClientSession() as http:
            assert await _served_model(http, srv.base_url, None, auth_headers(KEY)) == "served-model"
    paths = {path for path, _, _ in srv.state.seen}
    assert {"/v1/completions", "/detokenize", "/v1/models"} <= paths
    assert len(srv.state.seen) == 4 + len(work) + 1  # 4 streams (1 warm-up), one detokenize per turn, models
    assert all(auth == f"Bearer {KEY}" for _, auth, _ in srv.state.seen)


@pytest.mark.parametrize("transport", ["fast", "aiohttp"])
async def test_url_userinfo_is_basic_auth_and_never_in_the_host_header(transport: str) -> None:
    async with SseServer() as srv:
        url = srv.base_url.replace("http://", "http://alice:s3cr%40t@")
        res = await run_load(
            random_sessions(2, isl=8, osl=3, seed=2, vocab_size=500),
            Target(url, "m", endpoint="completions"),
            LoadSpec(concurrency=1, transport=transport),  # type: ignore[arg-type]
        )
    assert all(r.ok for r in res.records)
    expected = "Basic " + base64.b64encode(b"alice:s3cr@t").decode()
    assert [(a, h) for _, a, h in srv.state.seen] == [(expected, f"127.0.0.1:{srv.port}")] * 2


async def test_a_refused_key_fails_fast_with_a_hint_and_no_credentials(tmp_path: Path) -> None:
    from aiohttp import web

    async def refuse(_request: web.Request) -> web.Response:
        return web.json_response({"error": "Unauthorized"}, status=401)

    application = web.Application()
    application.router.add_post("/v1/completions", refuse)
    runner = web.AppRunner(application, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        with pytest.raises(Exception, match="wants an API key") as info:
            await run_load(
                random_sessions(1, isl=4, osl=2, seed=3, vocab_size=500),
                Target(f"http://u:Pw-Canary-3@127.0.0.1:{port}", "m", endpoint="completions", api_key=KEY),
                LoadSpec(),
            )
    finally:
        await runner.cleanup()
    assert "Pw-Canary-3" not in str(info.value)
    assert KEY not in str(info.value)
    assert "http://***@127.0.0.1" in str(info.value)


def test_bench_help_never_shows_the_key_from_the_environment() -> None:
    result = CliRunner().invoke(app, ["bench", "--help"], env={"OPENAI_API_KEY": KEY, "COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "--api-key" in result.output
    assert KEY not in result.output


def test_bench_refuses_userinfo_together_with_an_api_key() -> None:
    result = CliRunner().invoke(
        app,
        ["bench", "--base-url", "http://u:Pw-Canary-4@127.0.0.1:9", "--no-progress"],
        env={"OPENAI_API_KEY": KEY},
    )
    assert result.exit_code == 2, result.output
    assert "one Authorization header" in result.output
    assert "Pw-Canary-4" not in result.output
    assert KEY not in result.output


def test_reports_show_the_run_directory_without_credentials(tmp_path: Path) -> None:
    from alflow.reports.content.base import base_report
    from alflow.results.store import StoredRun

    with RunWriter(tmp_path, "m1", config={}) as w:
        w.write_summary({"flow": "m1"})
    local = open_run(w.dir)
    remote = StoredRun("s3://AKIAKEY:Secret-Canary-9@bucket/m1/run", local.manifest, local.storage)
    facts = dict(base_report(remote, "M1").facts)
    assert facts["Run directory"] == "s3://***@bucket/m1/run"
    assert dict(base_report(local, "M1").facts)["Run directory"] == w.dir


def test_metrics_snapshot_prints_and_fails_without_url_credentials() -> None:
    runner = CliRunner()
    with threaded_sse_server() as server:
        server.state.metrics_text = "vllm:num_requests_running 0\n"
        url = (
            server.base_url.replace("http://", "http://scraper:Pw-Canary-6@") + "/metrics?token=Tok-Canary-6"
        )
        table = runner.invoke(app, ["metrics", "snapshot", url], env={"COLUMNS": "300"})
        as_json = runner.invoke(app, ["metrics", "snapshot", url, "--json"])
        dead = runner.invoke(app, ["metrics", "snapshot", url.replace(str(server.port), "1")])
    assert table.exit_code == 0, table.output
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout)["url"].endswith("/metrics?token=***")
    assert dead.exit_code == 2
    assert "cannot scrape metrics at http://***@127.0.0.1:1/metrics?token=***" in dead.output
    for result in (table, as_json, dead):
        assert "Canary-6" not in result.output
    assert ("Basic " + base64.b64encode(b"scraper:Pw-Canary-6").decode()) in [
        a for _, a, _ in server.state.seen
    ]


def test_secret_keys_of_a_request_body_in_any_case_style() -> None:
    from alflow.util.secret_names import is_secret_key

    for key in ("api_key", "apiKey", "x-api-key", "authToken", "accessToken", "hf_token", "Authorization",
                "Proxy-Authorization", "bearer", "password", "client_secret",
                # hostile round 4: stored in clear in summary.json
                "pAsSwOrD", "session_cookie", "X-Auth", "passphrase", "jwt", "signature"):  # fmt: skip
        assert is_secret_key(key), key
    for key in ("max_tokens", "min_tokens", "top_k", "keep_alive", "return_spec_tokens_details", "seed",
                "skip_special_tokens", "return_tokens_as_token_ids", "author", "session_id_prefix_len"):  # fmt: skip
        assert not is_secret_key(key), key


def test_bench_sends_an_extra_body_secret_but_never_stores_or_prints_it(tmp_path: Path) -> None:
    """#49: ``--extra-body '{"api_key": ...}'`` was stored in summary.json as given."""
    body = {"api_key": "Key-Canary-7", "nested": {"Authorization": "Bearer Tok-Canary-7"}, "min_p": 0.1}
    with threaded_sse_server() as server:
        result = CliRunner().invoke(
            app,
            ["bench", "--base-url", server.base_url, "--model", "m", "--num-prompts", "2", "--max-tokens", "3",
             "--extra-body", json.dumps(body), "--out", str(tmp_path), "--json", "--no-progress"],
        )  # fmt: skip
        sent = list(server.state.bodies)
    assert result.exit_code == 0, result.output
    assert any(b.get("api_key") == "Key-Canary-7" for b in sent)  # the server got it
    stored = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    assert stored  # the run was stored
    for text in (stored.decode(errors="replace"), result.output):
        assert "Canary-7" not in text
    summary = json.loads(next(tmp_path.rglob("summary.json")).read_text())
    assert summary["config"]["sampling"]["extra_body"] == {
        "api_key": "***",
        "nested": {"Authorization": "***"},
        "min_p": 0.1,
    }


def test_a_results_root_url_never_shows_its_password(tmp_path: Path) -> None:
    """#49: ``alflow results serve http://user:PASSWORD@host/...`` printed it on stderr and in every page header."""
    from alflow.site.app import _root_label

    assert _root_label("http://user:Pw-Canary-8@host") == "***@host"
    assert _root_label("s3://key:Pw-Canary-8@bucket/results/") == "results"
    # a root of no object store is refused naming it (round 14; an ftp:// one connected as it was made, to a port
    # where nothing listens, and the error named the root)
    result = CliRunner().invoke(app, ["results", "serve", "ftp://u:Pw-Canary-8@127.0.0.1:1/x", "--port", "0"])
    assert result.exit_code == 2, result.output
    assert "ROOT 'ftp://***@127.0.0.1:1/x': a URL of this scheme is not a results root" in result.output
    assert "Canary-8" not in result.output
    assert "Traceback" not in result.output  # a traceback once, from the back-end's connection error


def test_the_webhook_helper_never_prints_the_prefect_api_password(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """#49: ``python -m alflow_deployments.webhook`` printed PREFECT_API_URL with its password."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from alflow_deployments import webhook

    url = "http://admin:Pw-Canary-9@127.0.0.1:1/api"
    with temporary_settings({PREFECT_API_URL: url}):
        code = webhook.main(["--out", str(tmp_path / "a.yaml")])
    err = capsys.readouterr().err
    assert code == 1
    assert "127.0.0.1:1" in err  # it says where it failed
    assert "Canary-9" not in err


def test_a_matrix_parameter_of_a_url_path_is_redacted_and_a_secret_assignment_in_extra_args_refused() -> None:
    """Hostile round 4: ``/metrics;jsessionid=...`` was printed as it was; ``extra_args: [-e, HF_TOKEN=...]`` stored."""
    from alflow.config import server_config
    from alflow.util.redact import redact_url

    assert redact_url("http://h:1/metrics;jsessionid=Pw-Canary-11") == "http://h:1/metrics;jsessionid=***"
    assert redact_url("http://h/api/x/;session=Pw-Canary-12?a=1") == "http://h/api/x/;session=***?a=1"
    assert redact_url("http://h/a;b/c?x=1") == "http://h/a;b/c?x=1"
    assert redact_url("http://h/x?session_len=3&sid=Pw-Canary-15") == "http://h/x?session_len=3&sid=***"
    # a switch, and a LoRA named like a word of a secret, are no secrets
    server_config(
        framework="sim", model="m", extra_args=("--allow-credentials", "--lora-modules", "first-pass=/l")
    )
    with pytest.raises(
        ValueError, match=r"extra_args sets 'HF_TOKEN'=\.\.\., which looks like a secret"
    ) as info:
        server_config(framework="sim", model="m", extra_args=("-e", "HF_TOKEN=Pw-Canary-13"))
    assert "Pw-Canary-13" not in str(info.value)


def test_hostile_round6_secrets_are_redacted_or_refused() -> None:
    """Round 6: URLs joined in one option, ?passphrase= and ?PHPSESSID=, credential values under any body key,
    secret env names the heuristics missed, and a URL's user in an env value."""
    joined = {
        "http://u:P1@h/m,http://u:P2@h/m": "http://***@h/m,http://***@h/m",
        "http://u:P3@h:1/;http://u:P4@h:1/|https://u:P5@h/x": "http://***@h:1/;http://***@h:1/|https://***@h/x",
        "http://a/b?next=https://u:pw9@c/d&token=zz9": "http://a/b?next=https://***@c/d&token=***",
        "https://h/?passphrase=X1&PHPSESSID=Y1&session_len=3": "https://h/?passphrase=***&PHPSESSID=***&session_len=3",
    }
    for text, clean in joined.items():
        assert redact_urls_in_text(f"model {text} end") == f"model {clean} end"
    body = redact_body(
        {"note": "Bearer EBH-CANARY", "session": "EBC-CANARY", "x": "basic-ish", "n": {"k": "Basic dXM6cHc="}}
    )
    assert body == {"note": "***", "session": "***", "x": "basic-ish", "n": {"k": "***"}}
    for name in ("PGPASS", "NGC_API", "AWS_SESSION_TKN", "SESSION", "PRIVATE_PEM"):
        assert is_secret_name(name), name
    for name in (
        "TOKENIZERS_PARALLELISM",
        "NCCL_DEBUG",
        "VLLM_USE_V1",
        "HF_HUB_OFFLINE",
        "PYTORCH_CUDA_ALLOC_CONF",
    ):
        assert not is_secret_name(name), name
    with pytest.raises(ValidationError) as info:
        server_config(framework="sim", model="m", extra_env={"DATABASE_URL": "postgres://TOKEN99@db/x"})
    assert "DATABASE_URL" in str(info.value)
    assert "TOKEN99" not in str(info.value)
