"""Credentials written in free text outside a URL: a header's value, a known token, a secret assignment.

:func:`redact_free` applies :data:`FREE_RULES` in order, each a cheap hint and the redaction it allows, each pattern
on a bounded prefix (linear in the text): ``Authorization: <scheme> <credential>``, tokens of a well-known shape,
``NAME=value`` (also ``NAME := value``, ``NAME => value``, ``NAME=['value']``), ``"name": "value"``,
``Name: value`` (quoted or not, a space after the colon or none), ``--flag value`` (quoted or not),
``<name>value</name>`` and ``user:password@host`` without a scheme. Which names are secrets:
:mod:`alflow.util.secret_names` (bounded per text: :func:`~alflow.util.secret_names.judging`). URLs are
:mod:`alflow.util.redact`'s.
"""

from __future__ import annotations

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
_AUTH_VALUE: Final = re.compile(
    rf"\b((?i:bearer)[ \t]+|(?i:(?:proxy-)?authorization[ \t]*[:=][ \t]*(?:{_SCHEMES})[ \t]+)"
    r"|(?:Proxy-)?Authorization[ \t]*:[ \t]*[A-Za-z][A-Za-z0-9_-]{0,31}[ \t]+)"
    rf"(?!(?i:{_SCHEMES})\b)[A-Za-z0-9._~+/=-]{{6,}}"
)
"""A credential written out: ``Bearer eyJ...``, ``Authorization: Basic dXM6cHc=``, any scheme after a header's
``Authorization:`` (``ApiKey``, ``SSWS``), a registered one after ``authorization:`` in any case; the scheme kept."""
_KNOWN_TOKEN: Final = re.compile(
    r"\b(?:AKIA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|hf_[A-Za-z0-9]{20,}"
    r"|sk-[A-Za-z0-9_-]{20,}|xox[abprs]-[A-Za-z0-9-]{10,}|glpat-[A-Za-z0-9_-]{20,}|AIza[0-9A-Za-z_-]{35}"
    r"|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})"
    r"|-----BEGIN [A-Z ]{0,40}PRIVATE KEY-----[^-]*(?:-----END [A-Z ]{0,40}PRIVATE KEY-----)?"
)
"""Tokens of a well-known shape (an AWS access key id, GitHub, Hugging Face, OpenAI, Slack, GitLab and Google API
tokens, a private key block): secrets wherever they stand."""
_TOKEN_HINTS: Final = ("akia", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "hf_", "sk-", "xox", "eyj",
                       "glpat-", "aiza", "private key")  # fmt: skip
"""Lower-case text one of :data:`_KNOWN_TOKEN`'s matches must hold: a text without any is not scanned by it."""

_SPACE: Final = r"[ \t\u00a0]{0,4}"
_ASSIGNED: Final = re.compile(
    rf"(?<![A-Za-z0-9_.%-])(-{{0,2}}[A-Za-z][A-Za-z0-9_.-]{{0,63}})({_SPACE}(?::=|=>|=|%3[dD]){_SPACE}\[?['\"]?)"
    r"([^\s&#'\"<>`,;|\]]+)"
)
"""``NAME=value`` in free text (``password=...``, ``--api-key=...``, ``HF_TOKEN=...``, SGLang's logged
``api_key='...'``, argparse's ``Namespace(api_key=['...'])``, ``token = ...``, ``API_KEY := ...``,
``password => "..."``, ``password%3D...``): the value of a secret name is redacted."""


def _assigned(m: re.Match[str]) -> str:
    """One ``NAME=value`` of :data:`_ASSIGNED`: redacted for a secret name, unless the value is a path.

    A LoRA named ``first-pass=/loras/a`` holds no secret; ``/x`` or ``~x`` alone (base64 may start so) may.
    """
    name, gap, value = m[1].lstrip("-"), m[2], m[3]
    if value.startswith("="):  # "token == x": a comparison, no assignment
        return m[0]
    secret = judged(name, _secret_assigned) and not _path_like(value)
    return f"{m[1]}{gap}{REDACTED}{trailing(value)}" if secret else m[0]


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
    r'"([A-Za-z_][A-Za-z0-9_.-]{0,63})"([ \t]{0,16}:[ \t]{0,16}\[?[ \t]{0,4})"([^"\\\n]*(?:\\.[^"\\\n]*)*)"'
    r"|'([A-Za-z_][A-Za-z0-9_.-]{0,63})'([ \t]{0,16}:[ \t]{0,16}\[?[ \t]{0,4})'([^'\\\n]*(?:\\.[^'\\\n]*)*)'"
)
"""``"name": "value"`` or ``'name': 'value'`` in free text (a server's JSON error answer, a Python dict's repr): the
value of a secret-named key is redacted. Name and spaces bounded, the value scanned once up to its closing quote
(backslash escapes skipped) or the line's end: linear in the text."""


def _quoted_pair(m: re.Match[str]) -> str:
    """One pair of :data:`_QUOTED_PAIR`: its value ``***`` when its key names a secret, quotes and spaces kept."""
    quote, (name, gap, value) = ('"', m.group(1, 2, 3)) if m[1] is not None else ("'", m.group(4, 5, 6))
    if not value or value == REDACTED or not is_secret_key_cached(name):
        return m[0]
    return f"{quote}{name}{quote}{gap}{quote}{REDACTED}{quote}"


_HEADER_PAIR: Final = re.compile(
    r"(?<![A-Za-z0-9_.-])([A-Za-z][A-Za-z0-9_-]{0,63}):([ \t]{1,16})(['\"]?)(?=([^\s'\"<>`,;]+))"
)
"""``Name: value`` in free text (a header a server's error quotes, ``X-Api-Key: ...``; a log's ``password: ...``,
YAML's ``api_key: "..."``), the value looked at ahead (not taken: ``upstream: X-Api-Key: v`` holds two). A space
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
        if start >= done and _secret_header(m[1], value, spaced=bool(m[2]), quoted=bool(m[3])):
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
    r"(?<!\S)(--[A-Za-z][A-Za-z0-9-]{0,63})([ \t]{1,4})(['\"]?)([^\s'\"<>`,;|-][^\s'\"<>`,;|]*)"
)
"""``--flag value`` in free text (a logged command line): the value of a flag that takes a secret (:func:`is_secret_flag`)."""


def _flag_value(m: re.Match[str]) -> str:
    # alflow's own lines say "--api-key is ...": a bare value counts when it looks like a credential, a quoted one always
    secret = judged(m[1], is_secret_flag) and (bool(m[3]) or _credential_like(m[4]))
    return f"{m[1]}{m[2]}{m[3]}{REDACTED}" if secret else m[0]


_XML_ELEMENT: Final = re.compile(r"<([A-Za-z][A-Za-z0-9_.-]{0,63})>([^<\s]{1,4096})</\1>")
"""``<password>value</password>`` (an XML answer or configuration): the text of a secret-named element."""


def _xml_element(m: re.Match[str]) -> str:
    return f"<{m[1]}>{REDACTED}</{m[1]}>" if m[2] != REDACTED and is_secret_key_cached(m[1]) else m[0]


_BARE_USERINFO: Final = re.compile(
    r"(?<![A-Za-z0-9._~%/:@-])([A-Za-z0-9._~%-]{1,64}):([^\s@/:'\"<>`]{1,256})@(?=[A-Za-z0-9][A-Za-z0-9.-]{0,253})"
)
"""``user:password@host`` without a scheme (a proxy's setting in a log: ``user:pw@proxy:8080``): the password."""


def _credential_like(value: str) -> bool:
    """A word that may be a credential rather than prose: six characters or more, a digit among them."""
    return value != REDACTED and len(value) >= 6 and any(c.isdigit() for c in value)


_AUTH_SCHEMES: Final = frozenset({"bearer", "basic", "token", "digest", "negotiate"})
QUOTES: Final = ('"', "'")
FREE_RULES: Final[tuple[tuple[Callable[[str, str, tuple[str, ...]], bool], Callable[[str], str]], ...]] = (
    (
        lambda _t, low, _q: "bearer" in low or "authorization" in low,
        lambda t: _AUTH_VALUE.sub(rf"\1{REDACTED}", t),
    ),
    (lambda _t, low, _q: any(hint in low for hint in _TOKEN_HINTS), lambda t: _KNOWN_TOKEN.sub(REDACTED, t)),
    (
        lambda t, low, _q: ("=" in t or "%3d" in low) and maybe_secret(low),
        lambda t: _ASSIGNED.sub(_assigned, t),
    ),
    (lambda t, _low, q: ":" in t and any(c in t for c in q), lambda t: _QUOTED_PAIR.sub(_quoted_pair, t)),
    (lambda t, _low, _q: ": " in t or ":\t" in t, _redact_header_pairs),
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
