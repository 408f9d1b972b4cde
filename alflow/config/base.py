"""The base of every configuration model (:class:`StrictModel`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

from alflow.util.pathnames import path_name_problem
from alflow.util.redact import URL_CREDENTIALS_PATTERN, redact_url, urls_with_credentials


class StrictModel(BaseModel):
    """Base of every config model: frozen, unknown fields rejected, defaults validated.

    Validation errors never echo the input (``hide_input_in_errors``): a refused value may be a secret,
    and Prefect stores the text of a failed parameter validation. No NaN or infinity anywhere; config
    files are validated in strict mode as well (:func:`alflow.util.yamlfile.load_yaml_model`). No credentials
    in a URL anywhere (:func:`check_no_url_credentials`).
    """

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        validate_default=True,
        hide_input_in_errors=True,
        allow_inf_nan=False,
        json_schema_extra=lambda schema, _cls: refuse_url_credentials_in_schema(schema),
    )

    @field_validator("*")
    @classmethod
    def _no_url_credentials(cls, value: Any, info: ValidationInfo) -> Any:
        check_no_url_credentials(value, info.field_name or "")
        return value


# --- credentials in URLs (issue #35): refused, given by environment variable name instead ----------------------

_STORED_WHERE = "Prefect's run parameters, states, logs and events"
"""Where a configured value goes in clear: a flow's parameters are stored and shown by Prefect as given."""


def _by_name_hint(field: str, key: str | None, url: str) -> str:
    """What to do instead of a credential in a URL: give it by environment variable name."""
    if key is not None and field == "extra_env":
        return (
            f"pass {key} by name instead: list it in the runner's secrets (placement.runner.secrets; its value is "
            "read from the environment of the process that starts the server, or from a Prefect Secret block) and "
            "remove it from extra_env"
        )
    scheme = url.split("://", 1)[0].lower()
    if scheme in ("s3", "s3a"):
        return (
            "give the object store's credentials by environment variable name: AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN), or AWS_PROFILE, in the environment of the process "
            "that runs the flow"
        )
    if scheme in ("gs", "gcs"):
        return (
            "give the object store's credentials by environment variable name: GOOGLE_APPLICATION_CREDENTIALS "
            "(the path of a key file) in the environment of the process that runs the flow"
        )
    return (
        "give credentials by environment variable name, never in a URL: a server's own secrets by name in the "
        "runner's secrets (placement.runner.secrets); an external server's API key by the name of the variable "
        "holding it (placement.runner.api_key_env: sent as 'Authorization: Bearer <key>'); a metrics URL is "
        "reached without credentials (a private network, or a local proxy that adds them)"
    )


def check_no_url_credentials(value: object, field: str, key: str | None = None) -> None:
    """Raise ``ValueError`` (one line) when a string in ``value`` holds a URL carrying credentials.

    ``value`` is a field's value: a string, or tuples, lists and dicts of them (nested models check
    themselves). Credentials are what :func:`alflow.util.redact.url_credentials` names: ``user:password@``, a user
    name in an http(s):// or object-store URL, a ``token``/``api_key``/``sig``... parameter. The message shows
    the URL redacted, never the secret, and says how to give the credential by name instead.
    """
    if isinstance(value, str):
        found = urls_with_credentials(value)
        if found:
            shown, what = found[0]
            where = f"{key}=" if key is not None else ""
            raise ValueError(
                f"{where}{shown} carries {' and '.join(what)}: credentials in a URL are refused (they would be "
                f"stored in clear in {_STORED_WHERE}); {_by_name_hint(field, key, shown)}"
            )
    elif isinstance(value, Mapping):
        for item_key, item in value.items():
            check_no_url_credentials(item_key, field)
            check_no_url_credentials(item, field, str(item_key))
    elif isinstance(value, tuple | list | set | frozenset):
        for item in value:
            check_no_url_credentials(item, field, key)


def refuse_url_credentials_in_schema(schema: dict[str, Any], *, additional: bool | None = None) -> None:
    """Finish a model's JSON schema in place: no URL credentials in any string, extra properties as asked.

    Every string gets ``"not": {"pattern": URL_CREDENTIALS_PATTERN}`` (:func:`_strings_refuse_url_credentials`);
    ``additionalProperties`` is set when ``additional`` is given.
    """
    if additional is not None:
        schema["additionalProperties"] = additional
    _strings_refuse_url_credentials(schema)


def _strings_refuse_url_credentials(node: object) -> None:
    """Give every string of a JSON schema ``"not": {"pattern": URL_CREDENTIALS_PATTERN}``, in place.

    Prefect validates a deployment run's parameters against the flow's schema before it creates (and stores) the
    run (``enforce_parameter_schema``, on by default: ``create_flow_run_from_deployment`` in
    ``prefect/server/api/deployments.py``), and the UI's form checks the same schema: a URL with credentials
    typed there is refused before Prefect keeps it. Nested models get theirs through their own ``$defs`` entry.
    """
    if isinstance(node, dict):
        if node.get("type") == "string" and "not" not in node:
            node["not"] = {"pattern": URL_CREDENTIALS_PATTERN}
        for key in ("properties", "additionalProperties", "items", "prefixItems", "anyOf", "oneOf", "allOf"):
            child = node.get(key)
            if key == "properties" and isinstance(child, dict):
                for sub in child.values():
                    _strings_refuse_url_credentials(sub)
            elif child is not None:
                _strings_refuse_url_credentials(child)
    elif isinstance(node, list):
        for item in node:
            _strings_refuse_url_credentials(item)


# --- upper bounds of the size fields (issue #35): what a real run could use, and no more ----------------------

MAX_CONCURRENCY = 65_536
"""Requests in flight at one point: 64 Ki streams is far beyond what one server batches (vLLM's max_num_seqs
is 256-1024; 64 client processes of about a thousand streams each); more exhausts the client's sockets."""

MAX_SEQUENCE_TOKENS = 1_048_576
"""Input or output length in tokens (ISL, OSL, output caps): 1 Mi tokens, the longest context windows served
today; a longer prompt cannot be served, and generating it would only exhaust memory."""

MAX_CONTEXT_TOKENS = 16_777_216
"""A server's max_model_len: 16 Mi tokens, above the longest context any model advertises (10 M)."""

MAX_PROMPTS = 1_000_000
"""Prompts or warm-up requests of one point or dataset subset: a million requests is a day at 10 per second."""

MAX_PER_CONCURRENCY = 10_000
"""M2's measured (or warm-up) prompts per unit of concurrency; the product must stay within MAX_PROMPTS."""

MAX_PARALLEL = 4_096
"""One parallel dimension (TP, PP, DP, EP) of one server: the largest deployments published use EP 320 over
40 nodes (DeepSeek's); 4 Ki ranks is ten times that."""

MAX_REPEATS = 100
"""Repeats of one M2 point (``BenchmarkParams.repeats``): each is its own warm-up and window; vLLM's K choice asks
for 3, and a hundred windows per point is already days of a server."""

MAX_NODES = 4_096
"""Nodes of one server or role (and instances of a disaggregated role): 32 Ki GPUs at 8 per node."""

MAX_GPUS_PER_NODE = 64
"""GPUs of one node: 8 in today's HGX/MI300X boxes, 72 dies in one NVL72 rack is a rack, not a node."""


def check_unique(values: tuple[object, ...], name: str) -> None:
    """Raise ``ValueError`` (one line) when ``values`` names a value twice: it would be measured twice."""
    seen: set[object] = set()
    for value in values:
        if value in seen:
            shown = [str(v) for v in values]
            raise ValueError(f"{name} [{', '.join(shown)}] names {value} twice: give each once")
        seen.add(value)


def check_local_path(value: str, *, remote: tuple[str, ...] = (), why: str = "") -> str:
    """``value`` when it is a non-empty local path (or a URL of a scheme in ``remote``); else one line.

    An empty path would write into the current folder; ``file://`` is refused too (some writers would take
    it literally and make a ``file:`` folder): give the plain path. ``why`` says why other URLs do not work.
    The caller's error names the field.
    """
    if not value.strip():
        raise ValueError("the path is empty (it would be the current folder): give a path")
    if "://" not in value:
        problem = path_name_problem(value)
        if problem is not None:  # a name too long, a NUL: a traceback at the first write, after the work
            raise ValueError(f"the path {problem}")
        return value
    scheme = value.split("://", 1)[0]
    if scheme in remote:
        return value
    shown = redact_url(value)  # a refused URL may carry credentials: never echo them
    if scheme == "file":
        raise ValueError(f"{shown!r} is a file:// URL: give the plain local path, without file://")
    allowed = " or ".join(f"{r}://" for r in remote)
    other = f"give a local path or an {allowed} URL" if allowed else "only local paths are supported"
    raise ValueError(f"{shown!r} is a {scheme}:// URL, which is not supported here: {why or other}")
