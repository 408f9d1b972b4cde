"""Credentials in URLs are refused in configuration; what alflow hands Prefect's loggers is redacted (issue #35).

A URL carrying ``user:password@``, a user name where alflow opens the URL itself, or a credential-named
parameter (``api_key``, ``token``, ``X-Amz-Signature``...) is refused at load in any config field (one line
naming the field, the URL redacted, how to give the credential by environment variable name instead); the
log filter in front of Prefect's handlers and the flows' failure messages redact what gets through.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError
from typer.testing import CliRunner

from alflow.cli import app
from alflow.config import (
    BenchmarkParams,
    DemoParams,
    DockerOptions,
    ExternalServer,
    ServerPlacement,
    SweepParams,
    server_config,
)
from alflow.config.base import check_local_path
from alflow.util.redact import url_credentials, urls_with_credentials
from tests.bad_inputs import BASES

pytestmark = pytest.mark.unit

CANARY = "Canary-7c1e"
"""Every secret in this file holds it: a message that shows it failed to redact."""


@pytest.mark.parametrize(
    ("url", "found"),
    [
        (f"s3://AKIAEXAMPLE:{CANARY}@bucket/runs", ["a password (user:password@)"]),
        (f"https://{CANARY}@host/v1", ["a user name, which https:// sends as a credential (user@)"]),
        (f"gs://{CANARY}@bucket/x", ["a user name, which gs:// sends as a credential (user@)"]),
        (f"ftp://u:{CANARY}@host/x", ["a password (user:password@)"]),
        (f"http://h:8000/v1?api_key={CANARY}&x=1", ["the parameter api_key"]),
        (f"http://h/metrics?job=a&token={CANARY}", ["the parameter token"]),
        (
            f"https://b.s3.amazonaws.com/k?X-Amz-Credential={CANARY}&X-Amz-Signature={CANARY}&X-Amz-Date=1",
            ["the parameter X-Amz-Credential", "the parameter X-Amz-Signature"],
        ),
        (f"https://h/x?X-Amz-Security-Token={CANARY}", ["the parameter X-Amz-Security-Token"]),
        (f"https://acct.blob.core.windows.net/c?sv=1&sig={CANARY}", ["the parameter sig"]),
        (f"https://h/cb#access_token={CANARY}", ["the fragment parameter access_token"]),
        (f"http://[::1/x?secret={CANARY}", ["the parameter secret"]),  # an unparsable host: still seen
    ],
)
def test_url_credentials_names_each_credential_without_its_value(url: str, found: list[str]) -> None:
    assert url_credentials(url) == found
    assert all(CANARY not in what for what in found)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000",
        "s3://bucket/runs/m2",
        "https://h/metrics?job=vllm&instance=a",
        "http://***@h:1/metrics?token=***",  # already redacted (a stored config read back)
        "docker://user@nvcr.io#nvidia/vllm:1",  # enroot's user name: not a scheme alflow opens
        "http://h/x?token=",  # an empty parameter carries nothing
        "/local/path?token=x",  # not a URL
    ],
)
def test_url_credentials_leaves_urls_without_credentials(url: str) -> None:
    assert url_credentials(url) == []


def test_urls_with_credentials_finds_them_inside_text() -> None:
    text = f"--otlp-traces-endpoint=http://u:{CANARY}@h:4317 --x https://h/?key={CANARY} http://ok:1"
    assert urls_with_credentials(text) == [
        ("http://***@h:4317", ["a password (user:password@)"]),
        ("https://h/?key=***", ["the parameter key"]),
    ]


def _refused(build: Any) -> str:
    """The validation error of ``build()``, checked to be one line per error and free of the canary."""
    with pytest.raises(ValidationError) as info:
        build()
    text = str(info.value)
    assert CANARY not in text
    for error in info.value.errors():
        assert "\n" not in error["msg"]
        assert CANARY not in error["msg"]
    return text


def test_results_root_refuses_credentials_and_names_the_environment_variables() -> None:
    text = _refused(lambda: ServerPlacement(results_root=f"s3://AKIAEXAMPLE:{CANARY}@bucket/runs"))
    assert "results_root" in text
    assert "s3://***@bucket/runs carries a password (user:password@)" in text
    assert "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY" in text
    text = _refused(lambda: ServerPlacement(results_root=f"gs://bucket/runs?token={CANARY}"))
    assert "gs://bucket/runs?token=*** carries the parameter token" in text
    assert "GOOGLE_APPLICATION_CREDENTIALS" in text
    assert ServerPlacement(results_root="s3://bucket/runs").results_root == "s3://bucket/runs"


def test_an_external_server_refuses_credentials_in_each_of_its_urls() -> None:
    for field, value in (
        ("base_url", f"http://user:{CANARY}@10.0.0.5:8000"),
        ("base_url", f"http://10.0.0.5:8000?api_key={CANARY}"),
        ("metrics_url", f"http://prom:{CANARY}@10.0.0.5:9090/metrics"),
        ("metrics_urls", (f"http://10.0.0.5:8000/metrics?token={CANARY}",)),
    ):
        urls: dict[str, Any] = {"base_url": "http://10.0.0.5:8000", field: value}
        text = _refused(lambda urls=urls: ExternalServer(dialect="vllm", **urls))
        assert field in text
        assert "credentials in a URL are refused" in text
        assert "by environment variable name" in text
    ok = ExternalServer(
        base_url="http://10.0.0.5:8000", metrics_url="http://10.0.0.5:8000/metrics", dialect="vllm"
    )
    assert ok.base_url == "http://10.0.0.5:8000"


def test_extra_env_refuses_a_url_with_a_password_and_points_to_the_runner_secrets() -> None:
    text = _refused(
        lambda: server_config(
            framework="sim", model="m", extra_env={"HTTPS_PROXY": f"http://me:{CANARY}@proxy:3128"}
        )
    )
    assert "extra_env" in text
    assert "HTTPS_PROXY=http://***@proxy:3128 carries a password" in text
    assert "pass HTTPS_PROXY by name instead: list it in the runner's secrets" in text
    ok = server_config(framework="sim", model="m", extra_env={"HTTPS_PROXY": "http://proxy:3128"})
    assert ok.extra_env == {"HTTPS_PROXY": "http://proxy:3128"}


def test_every_other_string_field_is_checked_too() -> None:
    _refused(
        lambda: server_config(
            framework="sim", model="m", extra_args=("--otlp-traces-endpoint", f"http://u:{CANARY}@h:4317")
        )
    )
    _refused(lambda: DockerOptions(labels={"source": f"https://h/x?sig={CANARY}"}))
    _refused(lambda: DemoParams(results_root=f"s3://u:{CANARY}@bucket/demo"))
    _refused(
        lambda: SweepParams.model_validate(
            {
                "gate": BASES["m1"],
                "benchmark": {**BASES["m2"], "target_al": None, "reference_path": "references/examples.yaml"},
                "results_root": f"s3://u:{CANARY}@bucket/sweep",
            }
        )
    )


def test_flow_parameters_given_as_data_are_refused_the_same_way() -> None:
    data = copy.deepcopy(BASES["m2"])
    data["placement"] = {
        "runner": {"kind": "external", "base_url": f"http://u:{CANARY}@10.0.0.5:8000", "dialect": "vllm"}
    }
    text = _refused(lambda: BenchmarkParams.model_validate(data))
    assert "placement.runner.external.base_url" in text


def test_a_refused_path_never_echoes_the_url() -> None:
    with pytest.raises(ValueError, match="not supported here") as info:
        check_local_path(f"ftp://u:{CANARY}@h/x", remote=("s3",))
    assert CANARY not in str(info.value)
    assert "ftp://***@h/x" in str(info.value)


def _write(tmp_path: Path, changes: dict[str, Any]) -> Path:
    data = copy.deepcopy(BASES["m2"])
    for dotted, value in changes.items():
        *parents, last = dotted.split(".")
        node = data
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    path = tmp_path / "m2.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"placement.results_root": f"s3://AKIAEXAMPLE:{CANARY}@bucket/x"}, "placement.results_root"),
        (
            {
                "placement.runner": {
                    "kind": "external",
                    "base_url": f"http://u:{CANARY}@127.0.0.1:9?api_key={CANARY}",
                    "dialect": "vllm",
                }
            },
            "placement.runner.external.base_url",
        ),
        ({"server.extra_env": {"HTTP_PROXY": f"http://u:{CANARY}@proxy:3128"}}, "server.sim.extra_env"),
    ],
)
def test_alflow_run_refuses_in_one_line_with_exit_2(
    tmp_path: Path, changes: dict[str, Any], field: str
) -> None:
    result = CliRunner().invoke(app, ["run", "m2", "--config", str(_write(tmp_path, changes))])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.output
    assert f"{field}: " in errors[0]
    assert "credentials in a URL are refused" in errors[0]
    assert CANARY not in result.output
    assert "Traceback" not in result.output


def test_reference_m0_config_refuses_a_results_root_with_credentials(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    result = CliRunner().invoke(
        app,
        [
            "reference",
            "m0-config",
            "--models",
            "deepseek-ai/DeepSeek-V3.1",
            "--catalogue",
            str(root / "references" / "models.yaml"),
            "--out",
            str(tmp_path / "m0.yaml"),
            "--results-root",
            f"s3://u:{CANARY}@bucket/x",
        ],
    )
    assert result.exit_code == 2, result.output
    assert "error: placement.results_root: s3://***@bucket/x carries a password" in result.output
    assert CANARY not in result.output
    assert not (tmp_path / "m0.yaml").exists()


# --- the redactor in front of Prefect's loggers -----------------------------------------------------


def _record(msg: str, *args: object, exc: BaseException | None = None) -> logging.LogRecord:
    exc_info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    return logging.LogRecord("prefect.flow_runs", logging.INFO, __file__, 1, msg, args, exc_info)


def test_the_log_filter_redacts_messages_arguments_and_tracebacks() -> None:
    from alflow_tasks.redaction import RedactingFilter

    redact = RedactingFilter()
    record = _record("scraping %s (%d)", f"http://u:{CANARY}@h:1/metrics?token={CANARY}", 3)
    assert redact.filter(record)
    assert record.getMessage() == "scraping http://***@h:1/metrics?token=*** (3)"
    try:
        raise ConnectionError(f"cannot reach http://u:{CANARY}@h:1")
    except ConnectionError as exc:
        record = _record("failed", exc=exc)
    assert redact.filter(record)
    formatted = logging.Formatter().format(record)
    assert CANARY not in formatted
    assert "ConnectionError: cannot reach http://***@h:1" in formatted
    plain = _record("%s-%s", "a", "b")
    assert redact.filter(plain)
    assert (plain.msg, plain.args) == ("%s-%s", ("a", "b"))  # nothing to redact: the record is untouched


def test_the_log_filter_sits_on_the_run_loggers_and_prefects_handlers_once() -> None:
    from prefect.logging.handlers import APILogHandler

    import alflow_flows.common  # noqa: F401 - installs it
    from alflow_tasks.redaction import RUN_LOGGERS, RedactingFilter, install_log_redaction

    install_log_redaction()
    for name in RUN_LOGGERS:
        logger = logging.getLogger(name)
        assert sum(isinstance(f, RedactingFilter) for f in logger.filters) == 1
        api = [h for h in logger.handlers if isinstance(h, APILogHandler)]
        assert api, name
        assert all(sum(isinstance(f, RedactingFilter) for f in h.filters) == 1 for h in api)


def test_a_run_logger_record_reaches_the_handlers_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    import alflow_flows.common  # noqa: F401 - installs the filter

    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(self.format(record))

    logger = logging.getLogger("prefect.flow_runs")
    monkeypatch.setattr(logger, "propagate", False)
    monkeypatch.setattr(logger, "handlers", [Keep()])  # the logger's own filter runs before any handler
    logger.warning("server at %s", f"https://{CANARY}@h/v1?api_key={CANARY}")
    assert seen == ["server at https://***@h/v1?api_key=***"]


def test_a_flows_failure_message_and_event_are_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    from alflow_flows import common

    sent: dict[str, Any] = {}
    monkeypatch.setattr(common, "emit_event", lambda **kw: sent.update(kw))
    error = common.gate_failure(
        "m2-benchmark",
        f"K=3: the run failed: cannot reach http://u:{CANARY}@h:1",
        {"url": f"http://h/?token={CANARY}"},
    )
    assert str(error) == "K=3: the run failed: cannot reach http://***@h:1"
    assert sent["payload"] == {"message": str(error), "url": "http://h/?token=***"}
    assert CANARY not in repr(sent)


def test_an_exception_is_redacted_in_place_with_its_causes() -> None:
    from alflow_tasks.redaction import redact_exception

    try:
        try:
            raise OSError(5, f"no route to http://u:{CANARY}@h:1", f"s3://k:{CANARY}@b/f")
        except OSError as inner:
            raise ConnectionError(f"cannot reach http://u:{CANARY}@h:1/v1", 3) from inner
    except ConnectionError as exc:
        outer = exc
    redact_exception(outer)
    assert outer.args == ("cannot reach http://***@h:1/v1", 3)
    assert str(outer.__cause__) == "[Errno 5] no route to http://***@h:1: 's3://***@b/f'"
    group = ExceptionGroup("two", [ValueError(f"https://h/?token={CANARY}"), KeyError("plain")])
    redact_exception(group)
    assert str(group.exceptions[0]) == "https://h/?token=***"
    assert group.exceptions[1].args == ("plain",)


def test_a_declined_retry_redacts_the_exception_before_prefect_makes_the_state() -> None:
    from prefect.states import Failed

    from alflow.errors import InvalidInputError
    from alflow_tasks.retry import retry_transient

    exc = InvalidInputError(f"the server refused https://h/x?X-Amz-Signature={CANARY}")
    assert retry_transient(None, None, Failed(data=exc)) is False
    assert str(exc) == "the server refused https://h/x?X-Amz-Signature=***"


def test_the_log_filter_redacts_an_exception_given_as_an_argument() -> None:
    from alflow_tasks.redaction import RedactingFilter

    exc = ConnectionError(f"cannot reach http://u:{CANARY}@h:1")
    record = _record("Task run failed with exception: %r - Retry 1/2 will start", exc)
    assert RedactingFilter().filter(record)
    assert CANARY not in record.getMessage()
    assert str(exc) == "cannot reach http://***@h:1"  # Prefect's state, made next, gets the redacted text


# --- the JSON-schema form of the rule (what Prefect's server and UI check before storing a run) --------------

SCHEMA_SAMPLES = [
    ("s3://AKIA:pw@bucket/x", True),
    ("gs://bucket/x?token=abc", True),
    ("http://u:p@h:1/?api_key=k", True),
    ("https://TOKEN@host/v1", True),
    ("http://h/?mytoken=x", True),
    ("http://h/?X-Amz-Signature=abc&b=1", True),
    ("--otlp https://h:4317/?sig=1", True),
    ("http://h/#access_token=x", True),
    ("http://h/?Api-Key=x", True),
    ("http://me:Pw@proxy:3128", True),
    ("http://h/metrics", False),
    ("http://***@h/", False),
    ("s3://***@bucket/x", False),
    ("docker://user@registry/image", False),
    ("http://h/?tokenizer_path=x", False),
    ("http://h/?api_key=***", False),
    ("http://h/?keyboard=1", False),
    ("http://h/?q=key", False),
    ("plain text key=1", False),
    ("http://h/?designation=x", False),
    ("http://h/a@b", False),
    ("/models/org@main/weights", False),
]


@pytest.mark.parametrize(("text", "secret"), SCHEMA_SAMPLES)
def test_the_schema_pattern_agrees_with_the_validators(text: str, secret: bool) -> None:
    import re

    from alflow.util.redact import URL_CREDENTIALS_PATTERN, urls_with_credentials

    assert bool(urls_with_credentials(text)) is secret
    assert bool(re.search(URL_CREDENTIALS_PATTERN, text)) is secret


def test_every_string_of_the_flows_parameter_schemas_refuses_url_credentials() -> None:
    from prefect.utilities.callables import parameter_schema
    from prefect.utilities.schema_tools.validation import ValidationError as SchemaError
    from prefect.utilities.schema_tools.validation import validate

    from alflow_flows.benchmark import benchmark

    schema = parameter_schema(benchmark).model_dump_for_openapi()
    params: dict[str, Any] = {
        "params": {
            "model": {"id": "org/m"},
            "k": 3,
            "target_al": 2.5,
            "server": {"framework": "vllm", "model": "org/m", "extra_env": {"A": "1"}},
            "placement": {"results_root": "s3://bucket/x"},
        }
    }
    validate(params, schema, raise_on_error=True)
    for path, value in (
        (("placement", "results_root"), "s3://AKIA:pw@bucket/x"),
        (("server", "extra_env"), {"HTTPS_PROXY": "http://me:pw@proxy:3128"}),
        (("server", "extra_args"), ["--otlp-traces-endpoint", "https://h/?sig=abc"]),
        (("placement", "runner"), {"kind": "external", "base_url": "http://h/?token=t", "dialect": "vllm"}),
    ):
        bad = copy.deepcopy(params)
        bad["params"][path[0]][path[1]] = value
        with pytest.raises(
            SchemaError, match=r"should not be valid|not valid under any of the given schemas"
        ):
            validate(bad, schema, raise_on_error=True)
