"""The webhook block alflow's automations notify through, and ``deployments/automations.yaml`` with its id filled in.

Team setup (from any directory; ``ALFLOW_WEBHOOK_URL`` is where the messages go, e.g. a Slack incoming webhook)::

    python -m alflow_deployments.webhook --url "$ALFLOW_WEBHOOK_URL" --out alflow-automations.yaml
    prefect --no-prompt automation create --from-file alflow-automations.yaml

Why a helper at all, from Prefect 3.9.1's source:

- an automation's notification action names its block by id only: ``block_document_id: UUID`` in
  ``prefect/events/actions.py`` (``SendNotification``, also ``CallWebhook``), and the server makes the id when
  the block is saved; ``prefect automation create --from-file`` (``prefect/cli/automation.py``) loads the file
  with ``yaml.safe_load`` and validates it as ``AutomationCore``: no templating, no lookup of a block by name;
- Prefect's CLI cannot save a block document: ``prefect block create TYPE`` prints a link to the UI's form
  (``prefect/cli/block.py``); ``prefect block register`` registers block *types*.

So the first line saves (or updates: the id stays, an automation made earlier keeps working) the Custom Webhook
block ``custom-webhook/alflow-regression`` (``prefect.blocks.notifications.CustomWebhookNotificationBlock``),
which posts the subject, a blank line and the body as ``{"text": ...}`` (``--json-data`` changes the shape) to the
URL kept among the block's secrets, and writes the automations file with every ``block_document_id`` given as a
block slug (``<block type slug>/<block name>``) replaced by that block's id; the second line is Prefect's own CLI creating the automations. Without ``--url`` the block must exist
already (made in the UI, e.g. from the link ``prefect block create custom-webhook`` prints, or another
notification block such as ``slack-webhook`` named in the file): only the ids are filled in.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit
from uuid import UUID

import httpx
import yaml
from prefect.blocks.notifications import CustomWebhookNotificationBlock
from prefect.client.orchestration import get_client
from prefect.exceptions import ObjectNotFound
from prefect.settings import get_current_settings
from prefect.utilities.templating import find_placeholders
from pydantic import ValidationError
from rich.console import Console

from alflow.errors import InvalidInputError
from alflow.reports.markdown import escape_controls
from alflow.util.names import check_output_file, shown
from alflow.util.redact import cut_middle, redact_urls_in_text, redact_values, url_syntax_problem
from alflow.util.yamlfile import MAX_DEPTH, load_yaml

AUTOMATIONS: Final = Path(__file__).resolve().with_name("automations.yaml")
"""alflow's automations, with their blocks named by slug."""
BLOCK_NAME: Final = "alflow-regression"
"""The name of the Custom Webhook block that ``deployments/automations.yaml`` names."""
JSON_DATA: Final[dict[str, Any]] = {"text": "{{subject}}\n\n{{body}}"}
"""What the block posts: ``{{subject}}`` and ``{{body}}`` are the action's rendered templates (Slack's and
Mattermost's incoming webhooks read ``text``)."""
PLACEHOLDERS: Final = ("subject", "body", "name")
"""The placeholders ``--json-data`` may hold: what the block fills in when it posts (its URL secret is not offered)."""
OUT_SUFFIXES: Final = (".yaml", ".yml", ".json")
"""The files ``prefect automation create --from-file`` reads."""
URL_SECRET: Final = "webhook_url"  # noqa: S105  (a key name, not a secret)
"""The key of the webhook URL in the block's ``secrets``."""
ACTION_LISTS: Final = ("actions", "actions_on_trigger", "actions_on_resolve")
"""The fields of ``AutomationCore`` that hold actions."""


def save_block(url: str, *, json_data: dict[str, Any] | None = None) -> UUID:
    """Save the Custom Webhook block ``custom-webhook/alflow-regression`` posting to ``url``; its id (kept on an update).

    The URL is kept among the block's secrets (a webhook URL is often its credential, e.g. Slack's): the block's
    ``url`` is the placeholder ``{{webhook_url}}``, which the block fills in from its ``secrets`` when it posts
    (``CustomWebhookNotificationBlock._build_request_args``); the API and the UI show the secret obfuscated.
    """
    block = CustomWebhookNotificationBlock(
        name=BLOCK_NAME,
        url="{{" + URL_SECRET + "}}",
        method="POST",
        json_data=JSON_DATA if json_data is None else json_data,
        secrets={URL_SECRET: url},  # type: ignore[arg-type]  # pydantic turns the dict into a SecretDict
    )
    block_id = block.save(BLOCK_NAME, overwrite=True)  # sync here: async_dispatch (prefect/blocks/core.py)
    assert isinstance(block_id, UUID), block_id
    return block_id


def load_automations(path: Path = AUTOMATIONS) -> list[dict[str, Any]]:
    """The automations of a file in ``prefect automation create``'s format (a list, or a mapping with ``automations``).

    Read with :func:`alflow.util.yamlfile.load_yaml` (a regular file of at most 1 MiB, nesting at most
    :data:`~alflow.util.yamlfile.MAX_DEPTH` levels, no key twice): every error is one line starting with the path.
    """
    data = load_yaml(path, what="Prefect automations file")
    if isinstance(data, dict) and "automations" in data:
        data = data["automations"]
    automations = data if isinstance(data, list) else [data]
    if not all(isinstance(a, dict) for a in automations):
        raise ValueError(f"{path}: not a list of automations")
    return automations


def _is_uuid(value: object) -> bool:
    try:
        UUID(str(value))
    except ValueError:
        return False
    return True


def block_slugs(automations: Sequence[dict[str, Any]]) -> set[str]:
    """The block slugs (``<block type slug>/<block name>``) that actions give as their ``block_document_id``."""
    slugs: set[str] = set()
    for automation in automations:
        for field in ACTION_LISTS:
            for action in automation.get(field) or []:
                ref = action.get("block_document_id")
                if isinstance(ref, str) and not _is_uuid(ref):
                    if ref.count("/") != 1:
                        raise ValueError(
                            f"automation {shown(str(automation.get('name')))}: block_document_id {shown(ref)} is "
                            "neither an id nor a block slug <block type slug>/<block name>"
                        )
                    slugs.add(ref)
    return slugs


class MissingBlocksError(ValueError):
    """Blocks an automations file names that the Prefect server does not have."""


def block_ids(slugs: set[str]) -> dict[str, UUID]:
    """The id of each block slug on the Prefect API (:class:`MissingBlocksError` naming those that do not exist)."""
    found: dict[str, UUID] = {}
    missing: list[str] = []
    if not slugs:  # every block named by id: no client to open
        return found
    with get_client(sync_client=True) as client:
        for slug in sorted(slugs):
            block_type, _, name = slug.partition("/")
            try:
                found[slug] = client.read_block_document_by_name(name, block_type, include_secrets=False).id
            except ObjectNotFound:
                missing.append(slug)
    if missing:
        raise MissingBlocksError(
            f"no block {', '.join(map(shown, missing))} on this Prefect server: give --url to save it, or make it in "
            "the UI"
        )
    return found


def resolve(automations: Sequence[dict[str, Any]], ids: dict[str, UUID]) -> list[dict[str, Any]]:
    """Copies of ``automations`` with every block slug in ``block_document_id`` replaced by its id."""

    def resolved(actions: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
        return [
            {**a, "block_document_id": str(ids[a["block_document_id"]])}
            if a.get("block_document_id") in ids
            else a
            for a in actions or []
        ]

    return [{**a, **{field: resolved(a[field]) for field in ACTION_LISTS if field in a}} for a in automations]


def existing(names: Sequence[str]) -> dict[str, list[UUID]]:
    """The ids of the automations already on the server under each of ``names`` (only names that have some)."""
    with get_client(sync_client=True) as client:
        found = {name: [a.id for a in client.read_automations_by_name(name)] for name in names}
    return {name: ids for name, ids in found.items() if ids}


def write(automations: list[dict[str, Any]], out: Path) -> None:
    """Write ``{"automations": [...]}`` as JSON (``.json``) or YAML (``.yaml``/``.yml``), as the CLI reads them.

    ``out`` is opened without waiting (``O_NONBLOCK``) and must be a regular file: a FIFO put there after the checks
    is an ``OSError``, never a wait for a reader.
    """
    data = {"automations": automations}
    if out.suffix.lower() not in OUT_SUFFIXES:
        raise ValueError(f"{out}: prefect automation create reads .yaml, .yml or .json files only")
    if out.suffix.lower() == ".json":
        text = json.dumps(data, indent=2) + "\n"
    else:
        text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=1000)
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK, 0o666)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{out} is not a regular file (a FIFO, socket or device)")
        file.truncate()
        file.write(text)


def _say(message: str) -> None:
    """A line for the person running the command, on stderr (stdout stays free).

    Every URL in it redacted, every control or format character (ESC, C1, RLO, a newline) written as a visible
    escape: names and paths from the command line and the automations file reach a terminal, and one line of the
    file's cannot pass for a line of the helper's.
    """
    text = escape_controls(redact_urls_in_text(message), keep="")
    Console(stderr=True, highlight=False, markup=False, soft_wrap=True).print(text)


def _reason(exc: BaseException, secret: str | None = None) -> str:
    """``Type: message`` of an exception from Prefect's client or httpx, on one line, cut in its middle.

    An HTTP error answer is named by its status and request only: its body may quote what was sent (Prefect's 422
    echoes the request, the webhook URL in it). ``secret`` (the webhook URL, whose path is its secret) is redacted
    wherever it stands, whole, by its path, or JSON-escaped.
    """
    try:
        if isinstance(exc, httpx.HTTPStatusError):
            request = exc.request
            text = f"{type(exc).__name__}: HTTP {exc.response.status_code} for {request.method} {request.url.path}"
        else:
            text = f"{type(exc).__name__}: {exc}"
    except Exception:  # a third party's __str__
        text = f"{type(exc).__name__} (its message cannot be read)"
    if secret:
        path = urlsplit(secret).path if _is_web_url(secret) else ""
        text = redact_values(text, [secret, secret.replace("/", "\\/"), *([path] if len(path) > 1 else [])])
    return cut_middle(" ".join(text.split()), 500)


def _where_to(url: str) -> str:
    """``url`` as an error may show it: its scheme and host (``'https://hooks.slack.com/...'``), never its path."""
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname or ""
    except ValueError:
        host, parts = "", urlsplit("")
    shown = f"{parts.scheme}://{host}/..." if parts.scheme and host else "(not a URL)"
    return repr(redact_urls_in_text(shown)[:200])


MAX_URL_CHARS: Final = 4096
"""The longest URL taken (a webhook's or the Prefect API's is a hundred characters or so)."""


def _is_web_url(url: str) -> bool:
    """Whether ``url`` is an ``http(s)://`` URL with a host and a port in 1-65535, at most :data:`MAX_URL_CHARS` long.

    What a Custom Webhook block can post to; no space or control character (urlsplit drops a tab or newline inside:
    round 14).
    """
    if (
        len(url) > MAX_URL_CHARS
        or any(c.isspace() or not c.isprintable() for c in url)
        or url_syntax_problem(url)
    ):
        return False
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def _nesting(data: object) -> int:
    """How deeply objects and arrays nest in ``data`` (0 for a scalar), counted without recursion.

    Counting stops one level past :data:`~alflow.util.yamlfile.MAX_DEPTH`.
    """
    deepest, stack = 0, [(data, 1)]
    while stack and deepest <= MAX_DEPTH:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is not None:
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in children)
    return deepest


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is infinity as a float")
    return value


def json_data_of(text: str) -> dict[str, Any]:
    """``--json-data`` as the block's ``json_data``, or one line naming the option (:class:`InvalidInputError`).

    A JSON object, nested at most :data:`~alflow.util.yamlfile.MAX_DEPTH` levels, whose placeholders are among
    :data:`PLACEHOLDERS` (Prefect's block refuses any other with a ``KeyError`` when it is made).
    """
    too_deep = f"--json-data: nested too deep (at most {MAX_DEPTH} levels of objects and arrays)"
    try:  # NaN, Infinity and 1e999 (a float's infinity) are no JSON a chat API takes (round 17, #49)
        data = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
    except RecursionError:  # the C decoder's own limit, far past ours
        raise InvalidInputError(too_deep) from None
    except ValueError as exc:
        raise InvalidInputError(f"--json-data is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidInputError(f"--json-data must be a JSON object, not {type(data).__name__}")
    if _nesting(data) > MAX_DEPTH:
        raise InvalidInputError(too_deep)
    unknown = sorted({p.name for p in find_placeholders(data)} - set(PLACEHOLDERS))
    if unknown:
        allowed = ", ".join("{{" + name + "}}" for name in PLACEHOLDERS)
        raise InvalidInputError(
            f"--json-data: unknown placeholder {shown('{{' + unknown[0] + '}}')}"
            + (f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else "")
            + f" (allowed: {allowed})"
        )
    return data


def _checked_out(out: Path) -> Path:
    """``--out`` before any call: a ``.yaml``/``.yml``/``.json`` file, absent or regular, in a writable folder.

    A FIFO would block the write for ever, a folder or a missing folder fail only after the Prefect work:
    :func:`alflow.util.names.check_output_file` (no ``-``: the file is for ``prefect automation create``), then its
    folder. The path to write (``~`` expanded), or :class:`InvalidInputError` naming ``--out``.
    """
    value = str(out)
    if out.suffix.lower() not in OUT_SUFFIXES:
        raise InvalidInputError(
            f"--out {shown(value)}: prefect automation create reads .yaml, .yml or .json files only"
        )
    try:
        path = check_output_file(value, what="--out", stdout=False)
    except ValueError as exc:
        raise InvalidInputError(str(exc)) from None
    real = Path(os.path.realpath(path))
    if not real.parent.is_dir():
        why = "does not exist" if not real.parent.exists() else "is not a folder"
        raise InvalidInputError(
            f"--out {shown(value)}: its folder {shown(str(real.parent))} {why}; give a file in an existing folder"
        )
    if not os.access(real if real.exists() else real.parent, os.W_OK):
        raise InvalidInputError(f"--out {shown(value)} is not writable (permission denied)")
    return path


def _checked_api_url() -> str:
    """PREFECT_API_URL before any call: set, and an ``http(s)://`` URL with a host; never shown whole.

    Else the block would go to a temporary local server, then vanish (unset), or every call fail with the same
    error. Prefect's own settings may refuse it first (``http://[::1/api``: a pydantic error of many lines).
    """
    try:
        url = get_current_settings().api.url
    except ValidationError as exc:
        [first, *_] = exc.errors()
        where = ".".join(map(str, first["loc"])) or "settings"
        raise InvalidInputError(
            f"Prefect's settings (PREFECT_API_URL, the other PREFECT_* variables, the profile) are refused: "
            f"{where}: {first['msg']}"
        ) from None
    if not url:
        raise InvalidInputError(
            "PREFECT_API_URL is not set: point it at the team's server (prefect config set PREFECT_API_URL=...)"
        )
    if not _is_web_url(url):
        raise InvalidInputError(
            f"PREFECT_API_URL {_where_to(url)}: give the Prefect server's http(s)://HOST/api URL, without spaces"
        )
    return url


def _checked(args: argparse.Namespace) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
    """Every option checked before any call to the Prefect API: ``--json-data``'s object, the automations, the API URL.

    Each error is one line naming the option (:class:`InvalidInputError`); the webhook URL is never shown whole (a
    webhook's secret is its path, Slack's /services/T/B/SECRET): only where it points. ``args.out`` becomes the
    path to write (:func:`_checked_out`).
    """
    if args.url is not None and not _is_web_url(args.url):
        raise InvalidInputError(
            f"--url {_where_to(args.url)}: give the webhook's http(s)://HOST[:PORT]/... URL, without spaces, "
            f"at most {MAX_URL_CHARS:,} characters"
        )
    json_data = json_data_of(args.json_data)
    args.out = _checked_out(args.out)
    try:
        automations = load_automations(args.automations)
    except ValueError as exc:  # InvalidInputError included: the message starts with the path
        raise InvalidInputError(f"--automations {exc}") from None
    try:
        block_slugs(automations)
    except ValueError as exc:
        raise InvalidInputError(f"--automations {args.automations}: {exc}") from None
    return json_data, automations, _checked_api_url()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m alflow_deployments.webhook",
        description="Save alflow's webhook block and write deployments/automations.yaml with its id filled in.",
    )
    parser.add_argument(
        "--url", help=f"save the Custom Webhook block custom-webhook/{BLOCK_NAME} posting here"
    )
    parser.add_argument(
        "--json-data",
        default=json.dumps(JSON_DATA),
        help="the JSON object the block posts, with {{subject}} and {{body}} (default: %(default)s)",
    )
    parser.add_argument(
        "--automations", type=Path, default=AUTOMATIONS, help="the automations file to fill in"
    )
    parser.add_argument("--out", type=Path, required=True, help="where to write it (.yaml, .yml or .json)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m alflow_deployments.webhook [--url URL] --out FILE``: save the block, write the automations file.

    Every input is checked first (exit 2); then the calls to the Prefect API, all before the file is written: any
    failure of one is one line naming PREFECT_API_URL (redacted) and what failed, exit 1, and no file.
    """
    args = _parser().parse_args(argv)
    try:
        json_data, automations, api_url = _checked(args)  # before any call to the Prefect API
    except InvalidInputError as exc:
        _say(f"error: {exc}")
        return 2
    names = [str(a.get("name")) for a in automations]
    step = "saving the block"
    try:
        if args.url:
            block_id = save_block(args.url, json_data=json_data)
            _say(f"saved block custom-webhook/{BLOCK_NAME} ({block_id})")
        step = "reading the blocks"
        ids = block_ids(block_slugs(automations))
        step = "reading the automations of the same names"
        found = existing(names)
    except MissingBlocksError as exc:
        _say(f"error: {exc}; PREFECT_API_URL is {api_url}")
        return 1
    except Exception as exc:  # httpx's, pydantic's, Prefect's errors: one line, never a traceback
        _say(
            f"error: the Prefect API at PREFECT_API_URL {api_url} failed while {step}: {_reason(exc, args.url)}"
        )
        return 1
    try:
        write(resolve(automations, ids), args.out)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        _say(f"error: --out {shown(str(args.out))}: cannot write it: {_reason(exc)}")
        return 1
    command = f"prefect --no-prompt automation create --from-file {shlex.quote(str(args.out))}"
    _say(f"wrote {shown(str(args.out))}: {', '.join(map(shown, names))}; apply it with")
    _say(f"  {command}")
    for name, ids_found in found.items():
        _say(
            f"note: automation {shown(name)} exists already ({', '.join(map(str, ids_found))}): applying the file "
            f"adds another; `prefect --no-prompt automation delete {shlex.quote(name)}` first"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
