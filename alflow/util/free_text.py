"""Credentials written in free text outside a URL: a header's value, a known token, a secret assignment.

:func:`redact_free` applies :data:`FREE_RULES` in order, each a cheap hint and the redaction it allows, each pattern
on a bounded prefix (linear in the text): ``Authorization: <scheme> <credential>`` and ``Bearer <credential>`` (any
spaces between, Unicode ones too), tokens of a well-known shape and private key blocks (PEM, OpenSSH, PGP),
``NAME=value`` (also ``NAME := value``, ``NAME => value``, ``NAME=['value']``, shell's ``NAME=$'value'``),
``"name": "value"`` (either quote for each, also ``'name' => 'value'`` and ``"name" = "value"``), YAML's block
scalars (``password: |`` and its indented lines), ``Name: value`` (quoted or not, a space after the colon or none, a
YAML tag or anchor before the value), ``--flag value`` (quoted or not, ``$'value'``, ``--api_key`` too),
``<name>value</name>`` and ``user:password@host`` without a scheme (``user:pw@[::1]`` too). Which names are secrets:
:mod:`alflow.util.secret_names` (bounded per text: :func:`~alflow.util.secret_names.judging`). URLs are
:mod:`alflow.util.redact`'s.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Final

from alflow.util.secret_names import (
    is_secret_flag,
    is_secret_key_cached,
    is_secret_name,
    judged,
    maybe_secret,
)

REDACTED: Final = "***"
"""What a secret value is replaced with."""
URL_TRAILING: Final = frozenset(":.,;!?)")
"""Punctuation that ends a sentence or a clause rather than a URL or a value (``URL: reason``): kept outside."""

_SCHEMES: Final = (
    "basic|bearer|token|digest|negotiate|ntlm|oauth|dpop|gnap|hoba|mutual|privatetoken|concealed|scram-sha-1"
    "|scram-sha-256|vapid|apikey|api-key|key|ssws|aws4-hmac-sha256|splunk|geniekey|sharedkey|sharedaccesssignature"
)
"""HTTP authentication schemes (IANA's registry and common vendors' own: ``ApiKey``, Okta's ``SSWS``, AWS's)."""
HSPACE: Final = "[ \t\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]"
"""A space within a line: a blank, a tab or a Unicode space (a no-break space, an em space, an ideographic space)."""
_AUTH_VALUE: Final = re.compile(
    rf"\b((?i:bearer){HSPACE}+|(?i:(?:proxy-)?authorization{HSPACE}*[:=]{HSPACE}*(?:{_SCHEMES}){HSPACE}+)"
    rf"|(?:Proxy-)?Authorization{HSPACE}*:{HSPACE}*[A-Za-z][A-Za-z0-9_-]{{0,31}}{HSPACE}+)"
    rf"(?!(?i:{_SCHEMES})\b)[A-Za-z0-9._~+/=-]{{6,}}"
)
"""A credential written out: ``Bearer eyJ...``, ``Authorization: Basic dXM6cHc=``, any scheme after a header's
``Authorization:`` (``ApiKey``, ``SSWS``), a registered one after ``authorization:`` in any case; the scheme kept.
Spaces of any kind and number (:data:`HSPACE`: a no-break space after ``Bearer``): each run read once, after the
word that starts its match (linear)."""
_TOKENS: Final[tuple[tuple[tuple[str, ...], str], ...]] = (
    (("akia",), r"\bAKIA[0-9A-Z]{16}"),
    (("asia",), r"\bASIA[0-9A-Z]{16}"),  # an AWS temporary (STS) access key id
    (("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), r"\bgh[pousr]_[A-Za-z0-9]{20,}"),
    (("github_pat_",), r"\bgithub_pat_[A-Za-z0-9_]{20,}"),
    (("hf_",), r"\bhf_[A-Za-z0-9]{20,}"),
    (("sk-",), r"\bsk-[A-Za-z0-9_-]{20,}"),  # OpenAI's, Anthropic's sk-ant-...
    (("xox",), r"\bxox[abprs]-[A-Za-z0-9-]{10,}"),
    (("glpat-",), r"\bglpat-[A-Za-z0-9_-]{20,}"),
    (("aiza",), r"\bAIza[0-9A-Za-z_-]{35}"),
    (("eyj",), r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
    (("nvapi-",), r"\bnvapi-[A-Za-z0-9_-]{40,}"),
    (
        ("sk_live_", "rk_live_", "sk_test_", "rk_test_"),
        r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}",
    ),  # Stripe's secret and restricted keys
    (("npm_",), r"\bnpm_[A-Za-z0-9]{36,}"),
    (("pypi-",), r"\bpypi-AgE[A-Za-z0-9_-]{50,}"),
    (
        ("private key",),
        r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----(?:[^-]|-(?!----)){0,65536}"
        r"(?:-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----)?",
    ),
)
"""Tokens of a well-known shape, each with the lower-case texts one of which its match holds (its hints): an AWS
access key id (long-term or temporary), GitHub, Hugging Face, OpenAI and Anthropic, Slack, GitLab, Google API, NVIDIA,
Stripe, npm and PyPI tokens, a JWT, and a private key block (PEM, OpenSSH, PGP's ``PRIVATE KEY BLOCK``): secrets
wherever they stand. A block is taken whole to its ``-----END ...-----`` line, or to the next ``-----`` (another
block) or 64 KiB where it has none; every part of each pattern is bounded or scanned once."""
_KNOWN_TOKENS: Final = tuple((hints, re.compile(pattern)) for hints, pattern in _TOKENS)
_TOKEN_HINTS: Final = tuple(dict.fromkeys(hint for hints, _ in _TOKENS for hint in hints))
"""Lower-case text one of :data:`_TOKENS`' matches must hold: a text without any is not scanned for them."""


def _redact_known_tokens(text: str) -> str:
    """``text`` with each token of :data:`_TOKENS` ``***``: only the patterns whose hints it holds, each a scan."""
    lower = text.lower()
    for hints, pattern in _KNOWN_TOKENS:
        if any(hint in lower for hint in hints):
            text = pattern.sub(REDACTED, text)
    return text


_SPACE: Final = rf"{HSPACE}{{0,4}}"
_OPEN_QUOTE: Final = r"""(?:\$?['"])?"""
"""An opening quote, if any: shell's ANSI-C ``$'...'`` and locale ``$"..."`` quotes too."""
_ASSIGNED: Final = re.compile(
    rf"(?<![A-Za-z0-9_.%-])(-{{0,2}}[A-Za-z][A-Za-z0-9_.-]{{0,63}})({_SPACE}(?::=|=>|=|%3[dD]){_SPACE}\[?{_OPEN_QUOTE})"
    r"([^\s&#'\"<>`,;|\]]+)"
)
"""``NAME=value`` in free text (``password=...``, ``--api-key=...``, ``HF_TOKEN=...``, SGLang's logged
``api_key='...'``, argparse's ``Namespace(api_key=['...'])``, ``token = ...``, ``API_KEY := ...``,
``password => "..."``, ``password%3D...``, shell's ``PASSWORD=$'...'``): the value of a secret name is redacted."""


def _assigned(m: re.Match[str]) -> str:
    """One ``NAME=value`` of :data:`_ASSIGNED`: redacted for a secret name, unless the value is a path.

    A LoRA named ``first-pass=/loras/a`` holds no secret; ``/x`` or ``~x`` alone (base64 may start so) may.
    """
    name, gap, value = m[1].lstrip("-"), m[2], m[3]
    if value.startswith("="):  # "token == x": a comparison, no assignment
        return m[0]
    secret = judged(name, _secret_assigned) and not _path_like(value)
    return f"{m[1]}{gap}{REDACTED}{trailing(value)}" if secret else m[0]


@functools.lru_cache(maxsize=4096)  # names are at most 64 characters; a log repeats a few of them
def _secret_assigned(name: str) -> bool:
    return is_secret_name(name.replace("-", "_")) or is_secret_key_cached(name)


def _path_like(value: str) -> bool:
    """A file's path rather than a secret.

    ``./x``, ``../x``, ``~/x``, ``/`` with a folder (``/loras/a``), or ``/x`` where ``x`` does not look like a
    credential (:func:`_credential_like`: ``/CANARY42`` may be base64).
    """
    return value.startswith(("./", "../", "~/")) or (
        value.startswith("/") and (value.count("/") >= 2 or not _credential_like(value[1:]))
    )


def trailing(value: str) -> str:
    """The punctuation that ends ``value`` (:data:`URL_TRAILING`: ``token=X: reason``), kept outside a redaction."""
    return value[len(value.rstrip("".join(URL_TRAILING))) :] if value[-1:] in URL_TRAILING else ""


_QUOTED_PAIR: Final = re.compile(
    r"""(["'])([A-Za-z_][A-Za-z0-9_.-]{0,63})\1([ \t]{0,16}(?::|=>|=)[ \t]{0,16}\[?[ \t]{0,4}[bBrRuU]{0,2})"""
    r"""(?:"([^"\\\n]*(?:\\.[^"\\\n]*)*)"|'([^'\\\n]*(?:\\.[^'\\\n]*)*)')"""
)
"""``"name": "value"`` or ``'name': 'value'`` in free text (a server's JSON error answer, a Python dict's repr, whose
value may be quoted the other way, ``{'password': "pa'ss"}``, or be bytes, ``b'...'``), also PHP's and Perl's ``'name' => 'value'`` and TOML's
``"name" = "value"``: the value of a secret-named key is redacted. Name and spaces bounded, the value scanned once up
to its closing quote (backslash escapes skipped) or the line's end: linear in the text."""


def _quoted_pair(m: re.Match[str]) -> str:
    """One pair of :data:`_QUOTED_PAIR`: its value ``***`` when its key names a secret, quotes and spaces kept."""
    key_quote, name, gap = m.group(1, 2, 3)
    value, value_quote = (m[4], '"') if m[4] is not None else (m[5], "'")
    if not value or value == REDACTED or not is_secret_key_cached(name):
        return m[0]
    return f"{key_quote}{name}{key_quote}{gap}{value_quote}{REDACTED}{value_quote}"


_HEADER_PAIR: Final = re.compile(
    rf"(?<![A-Za-z0-9_.-])([A-Za-z][A-Za-z0-9_-]{{0,63}}):"
    rf"({HSPACE}{{1,16}}(?:[!&][^\s'\"<>`,;]{{1,64}}{HSPACE}{{1,16}}){{0,2}})({_OPEN_QUOTE})(?=([^\s'\"<>`,;]+))"
)
"""``Name: value`` in free text (a header a server's error quotes, ``X-Api-Key: ...``; a log's ``password: ...``,
YAML's ``api_key: "..."``, ``password: !!str ...``, ``password: &anchor ...``: a tag or an anchor is kept and
counts as a quote), the value looked at ahead (not taken: ``upstream: X-Api-Key: v`` holds two). A space
after the colon (not ``http://``, not ``12:30``); linear (each value starts after its own run of spaces)."""
_TIGHT_HEADER_PAIR: Final = re.compile(
    r"(?<![A-Za-z0-9_.-])([A-Za-z][A-Za-z0-9]{0,31}[_-][A-Za-z0-9_-]{0,31}):()(['\"]?)(?=([^\s'\"<>`,;:]+))"
)
"""``X-API-KEY:value`` or ``client_secret:value``: no space after the colon, a name of two words or more; the value
ends at a colon (``a:a:a:...`` stays linear)."""


def _redact_header_pairs(text: str, pattern: re.Pattern[str] = _HEADER_PAIR) -> str:
    """``text`` with the value of each secret pair of ``pattern`` redacted (:func:`_secret_header`)."""
    out, done = [], 0
    for m in pattern.finditer(text):
        start, value = m.end(), m[4]
        if text.startswith(f" {REDACTED}", start + len(value)):  # a scheme before its redacted credential
            continue
        quoted = bool(m[3]) or not m[2].isspace()  # a quote, a YAML tag or anchor
        if start >= done and _secret_header(m[1], value, spaced=bool(m[2]), quoted=quoted):
            out += [text[done:start], REDACTED]
            done = start + len(value)
    return "".join([*out, text[done:]]) if out else text


def _secret_header(name: str, value: str, *, spaced: bool, quoted: bool) -> bool:
    """Whether ``Name: value`` holds a secret: a secret-named key (:func:`is_secret_key`) with a value of its own.

    A quoted value, or a header's name (a hyphen, a capital: ``X-Api-Key``, ``Password``, ``Cookie``) with a space
    after its colon, with any value; alflow's own ``field_name: reason`` and ``ENV_NAME: reason`` lines hold a
    lower-case or upper-case name, so such a name (or any name without a space after its colon) counts only before
    a value that looks like a credential (a digit in six characters or more: ``password: hunter42``).
    """
    if value == REDACTED or (value.lower() in _AUTH_SCHEMES and not quoted) or not is_secret_key_cached(name):
        return False  # an authorization scheme's name is no secret: its credential after it is (_AUTH_VALUE)
    capitalized = (
        name[:1].isupper() and not name.isupper()
    )  # Password, ApiKey; not an ENV_NAME ("HF_TOKEN: x")
    return quoted or (spaced and ("-" in name or capitalized)) or _credential_like(value)


_FLAG_VALUE: Final = re.compile(
    rf"(?<!\S)(--[A-Za-z][A-Za-z0-9_-]{{0,63}})({HSPACE}{{1,4}})({_OPEN_QUOTE})([^\s'\"<>`,;|-][^\s'\"<>`,;|]*)"
)
"""``--flag value`` in free text (a logged command line; ``--api_key X``, ``--password $'X'``): the value of a flag
that takes a secret (:func:`is_secret_flag`)."""


_secret_flag: Final = functools.lru_cache(maxsize=4096)(is_secret_flag)


def _flag_value(m: re.Match[str]) -> str:
    # alflow's own lines say "--api-key is ...": a bare value counts when it looks like a credential, a quoted one always
    secret = judged(m[1], _secret_flag) and (bool(m[3]) or _credential_like(m[4]))
    return f"{m[1]}{m[2]}{m[3]}{REDACTED}" if secret else m[0]


_BLOCK_SCALAR: Final = re.compile(
    r"""^([ \t]{0,64})(?:-[ \t]{1,8})?([A-Za-z_][A-Za-z0-9_.-]{0,63}|"[^"\n]{1,64}"|'[^'\n]{1,64}')[ \t]{0,16}:"""
    r"[ \t]{1,16}(?:[!&][^\s]{1,64}[ \t]{1,16}){0,2}[|>][-+0-9]{0,2}[ \t]{0,16}(?:#[^\n]{0,256})?$",
    re.MULTILINE,
)
"""A YAML block scalar's first line (``password: |``, ``token: >-``, a tag or an anchor before its ``|``): the
indented lines after it are its value. Indentation, name and comment bounded, anchored at a line's start."""


def _redact_block_scalars(text: str) -> str:
    """``text`` with each line of a secret-named YAML block scalar's value ``***`` (its indentation kept).

    The value is every line after the first that is blank or indented deeper than the key's line
    (:func:`_block_body`), read once: a block inside a redacted one is skipped, so the text is read in linear time.
    """
    out, done = [], 0
    for m in _BLOCK_SCALAR.finditer(text):
        if m.start() < done or not is_secret_key_cached(m[2].strip("'\"")):
            continue
        body = _block_body(len(m[1])).match(text, m.end())
        if body is not None and body.end() > m.end():
            out += [text[done : m.end()], _BODY_LINE.sub(_redacted_line, body[0])]
            done = body.end()
    return "".join([*out, text[done:]]) if out else text


@functools.cache  # 65 depths at most
def _block_body(depth: int) -> re.Pattern[str]:
    """The lines of a block scalar whose key is indented ``depth`` (at most 64): blank, or indented deeper."""
    return re.compile(rf"(?:\n(?:[ \t]*(?=\n|\Z)|[ \t]{{{depth + 1}}}[^\n]*))*")


_BODY_LINE: Final = re.compile(r"(\n[ \t]*)[^\s][^\n]*")


def _redacted_line(m: re.Match[str]) -> str:
    return m[1] + REDACTED


_XML_ELEMENT: Final = re.compile(r"<([A-Za-z][A-Za-z0-9_.-]{0,63})>([^<\s]{1,4096})</\1>")
"""``<password>value</password>`` (an XML answer or configuration): the text of a secret-named element."""


def _xml_element(m: re.Match[str]) -> str:
    return f"<{m[1]}>{REDACTED}</{m[1]}>" if m[2] != REDACTED and is_secret_key_cached(m[1]) else m[0]


_BARE_USERINFO: Final = re.compile(
    r"(?<![A-Za-z0-9._~%/:@-])([A-Za-z0-9._~%-]{1,64}):([^\s@/:'\"<>`]{1,256})@(?=[A-Za-z0-9]|\[[0-9A-Fa-f]{0,4}:[0-9A-Fa-f:.]{1,45}(?:%[A-Za-z0-9._~-]{1,32})?\])"
)
"""``user:password@host`` without a scheme (a proxy's setting in a log: ``user:pw@proxy:8080``, an IPv6 literal's
``user:pw@[::1]:8000``): the password."""


def _credential_like(value: str) -> bool:
    """A word that may be a credential rather than prose: six characters or more, a digit among them."""
    return value != REDACTED and len(value) >= 6 and any(c.isdigit() for c in value)


_HEADER_HINT: Final = re.compile(f":{HSPACE}")
_AUTH_SCHEMES: Final = frozenset({"bearer", "basic", "token", "digest", "negotiate"})
QUOTES: Final = ('"', "'")
FREE_RULES: Final[tuple[tuple[Callable[[str, str, tuple[str, ...]], bool], Callable[[str], str]], ...]] = (
    (
        lambda _t, low, _q: "bearer" in low or "authorization" in low,
        lambda t: _AUTH_VALUE.sub(rf"\1{REDACTED}", t),
    ),
    (lambda _t, low, _q: any(hint in low for hint in _TOKEN_HINTS), _redact_known_tokens),
    (
        lambda t, low, _q: ("=" in t or "%3d" in low) and maybe_secret(low),
        lambda t: _ASSIGNED.sub(_assigned, t),
    ),
    (
        lambda t, _low, q: (":" in t or "=" in t) and any(c in t for c in q),
        lambda t: _QUOTED_PAIR.sub(_quoted_pair, t),
    ),
    (lambda t, _low, _q: "\n" in t and ("|" in t or ">" in t) and ":" in t, _redact_block_scalars),
    (lambda t, _low, _q: _HEADER_HINT.search(t) is not None, _redact_header_pairs),
    (
        lambda t, low, _q: ":" in t and maybe_secret(low),
        lambda t: _redact_header_pairs(t, _TIGHT_HEADER_PAIR),
    ),
    (lambda t, _low, _q: "--" in t, lambda t: _FLAG_VALUE.sub(_flag_value, t)),
    (lambda t, _low, _q: "</" in t, lambda t: _XML_ELEMENT.sub(_xml_element, t)),
    (lambda t, _low, _q: "@" in t and ":" in t, lambda t: _BARE_USERINFO.sub(rf"\1:{REDACTED}@", t)),
)
"""The free-text rules, in order, each a cheap hint (the text, its lower case as given, what a quote looks like in
it) and the redaction it allows."""


def hints_credentials(text: str, quotes: tuple[str, ...] = QUOTES) -> bool:
    """Whether any rule of :data:`FREE_RULES` may find something in ``text`` (False: :func:`redact_free` keeps it)."""
    lower = text.lower()
    return any(hint(text, lower, quotes) for hint, _ in FREE_RULES)


def redact_free(text: str) -> str:
    """``text`` without credentials written outside a URL (:data:`FREE_RULES`, in order)."""
    lower = text.lower()
    for hint, redact in FREE_RULES:
        if hint(text, lower, QUOTES):
            text = redact(text)
    return text
