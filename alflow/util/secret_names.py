"""Which names are secrets: environment variables, command-line flags, URL parameters and body or header keys.

The rules :mod:`alflow.util.redact` applies (one rule for URL parameters, body keys and headers: their words split at
separators and camelCase, a secret word, a secret part wherever it stands), kept apart from the redaction itself.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Final
from urllib.parse import unquote

_NAME_PARTS: Final = re.compile(r"[^A-Z0-9]+")
_SECRET_NAME_LAST: Final = frozenset({"TOKEN", "TKN", "KEY", "APIKEY", "PWD", "PASS", "PAT"})
"""A name whose last word is one of these is a secret (``HF_TOKEN``, ``OPENAI_API_KEY``, ``DB_PWD``)."""
_SECRET_NAME_INSIDE: Final = (
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "API_KEY",
    "APIKEY",
    "ACCESS_KEY",
    "PRIVATE_KEY",
    "AUTH_TOKEN",
    "ACCESS_TOKEN",
)
"""A name holding one of these anywhere is a secret (``AWS_SECRET_ACCESS_KEY``, ``PGPASSWORD``)."""
_SECRET_ENV_INSIDE: Final = ("PASSPHRASE", "AUTHORIZATION", "BEARER", "COOKIE", "PRIVATE")
_SECRET_ENV_LAST: Final = frozenset({"CREDS", "CREDENTIAL", "CREDENTIALS", "SESSION", "API", "PEM"})
"""Variables (not flags: vLLM's ``--allow-credentials`` is a switch) holding these are secrets too (``MY_CREDS``)."""
_PATH_NAMES: Final = frozenset({"GOOGLE_APPLICATION_CREDENTIALS"})
"""Variables whose value is the path of a secret file, not the secret (as any ``*_FILE``, ``*_PATH``, ``*_DIR``)."""
SECRET_PARAM_WORDS: Final = frozenset(
    {
        "token",
        "key",
        "apikey",
        "password",
        "passwd",
        "pwd",
        "pass",
        "secret",
        "signature",
        "sig",
        "auth",
        "authorization",
        "credential",
        "credentials",
        "jsessionid",
        "sessionid",
        "cookie",
        "passphrase",
        "passcode",
        "jwt",
        "bearer",
        "hmac",
        "otp",
        "ticket",
    }
)
"""A URL parameter with one of these words in its name (``api_key``, ``X-Amz-Signature``) is a credential."""


def is_secret_name(name: str) -> bool:
    """True when an environment variable name looks like a secret.

    Its last word is TOKEN, KEY, APIKEY, PWD, PASS or PAT (``HF_TOKEN``, ``VLLM_API_KEY``), or it holds
    SECRET, PASSWORD, PASSWD, API_KEY, ACCESS_KEY, PRIVATE_KEY, AUTH_TOKEN or ACCESS_TOKEN anywhere.
    ``TOKENIZERS_PARALLELISM`` or ``HF_TOKEN_PATH`` are not secrets.
    """
    upper = name.upper()
    words = [w for w in _NAME_PARTS.split(upper) if w]
    if upper in _PATH_NAMES or (words and words[-1] in ("FILE", "PATH", "DIR")):
        return False
    if words and (words[-1] in _SECRET_NAME_LAST | _SECRET_ENV_LAST or words[-1].endswith("PASS")):
        return True  # PGPASS too
    return any(hint in upper for hint in (*_SECRET_NAME_INSIDE, *_SECRET_ENV_INSIDE))


MAYBE_PARTS: Final = (
    "tok|tkn|key|pw|pass|pat|cred|sess|sid|api|pem|secret|auth|bearer|cookie|priv|sig|otp|hmac|ticket|code|jwt"
    "|assertion|sas|verifier|saml"
)
_MAYBE: Final = re.compile(MAYBE_PARTS)
"""A part every secret name holds somewhere (lower case), whichever rule calls it secret: a name without any is none
(a text of 250,000 distinct parameter names is judged at the speed of one pattern, round 14)."""


def maybe_secret(name: str) -> bool:
    """False when no rule of this module can call ``name`` (any case, percent-encoded or not) a secret."""
    return _MAYBE.search(unquote(name).lower()) is not None


def is_secret_flag(arg: str) -> bool:
    """True when a command-line argument is a flag that takes a secret (``--api-key``, ``--hf-token=...``).

    Stricter than :func:`is_secret_name`: a flag merely ending in ``-key`` (the sim's ``--answer-key``,
    a file) is not one; ``token``, ``api-key``, ``secret`` and ``password`` flags are.
    """
    if not arg.startswith("--"):
        return False
    name = arg[2:].split("=", 1)[0].replace("-", "_").upper()
    words = [w for w in _NAME_PARTS.split(name) if w]
    return (bool(words) and (words[-1] in _SECRET_FLAG_LAST or words == ["CREDENTIALS"])) or any(
        hint in name for hint in _SECRET_NAME_INSIDE
    )


_SECRET_FLAG_LAST: Final = frozenset(
    {"TOKEN", "PW", "PWD", "PASS", "PASSPHRASE", "PASSCODE", "BEARER", "JWT", "COOKIE", "AUTH", "SAS", "SIGNATURE",
     "CREDENTIAL", "APIKEY"}
)  # fmt: skip
"""A flag whose last word is one of these takes a secret (``--pw``, ``--db-pass``, ``--jwt``); ``--credentials``
alone too, not vLLM's switch ``--allow-credentials``, nor a ``-key`` flag such as the sim's ``--answer-key``."""


MAX_NAMES_JUDGED: Final = 2048
"""The distinct names one text's redaction judges by the rules; past them, a name :func:`maybe_secret` finds is
taken for a secret without its rules (:func:`judging`)."""
_JUDGED: ContextVar[set[str] | None] = ContextVar("alflow_names_judged", default=None)


@contextmanager
def judging() -> Iterator[None]:
    """Bound the names judged inside (one text's redaction) to :data:`MAX_NAMES_JUDGED` distinct ones.

    A name is judged in microseconds; a text of 200,000 distinct secret-looking names (``tok0=``, ``tok1=``...)
    took seconds (round 15). Past the bound, each further name that :func:`maybe_secret` finds is called a secret:
    its value is redacted (over-redaction, in linear time), the same for the same text whatever was judged before.
    """
    if _JUDGED.get() is not None:
        yield
        return
    token = _JUDGED.set(set())
    try:
        yield
    finally:
        _JUDGED.reset(token)


def judged(name: str, rule: Callable[[str], bool]) -> bool:
    """``rule(name)``, or :func:`maybe_secret` once the text being redacted has named too many (:func:`judging`)."""
    seen = _JUDGED.get()
    if seen is not None and name not in seen:
        if len(seen) >= MAX_NAMES_JUDGED:
            return maybe_secret(name)
        seen.add(name)
    return rule(name)


def is_secret_param(name: str) -> bool:
    """True when a URL query or fragment parameter name reads like a credential (``token``, ``api_key``).

    Its words split at separators and camelCase (``accountKey``): a secret word, or a name
    :func:`is_secret_name` would call a secret (what free text's ``NAME=value`` is judged by), or the shared parts.
    A short name is judged once (a log of URLs repeats a few names a million times: 17 us each, round 13).
    """
    return judged(name, _judged_param if len(name) <= 128 else _judge_param)


@functools.lru_cache(maxsize=4096)
def _judged_param(name: str) -> bool:
    return _judge_param(name)


def _judge_param(name: str) -> bool:
    if not maybe_secret(name):  # most names (``a``, ``model``, ``max_tokens``...): no rule below can hold
        return False
    words = _words(name)
    return (
        any(w in SECRET_PARAM_WORDS for w in words)
        or _secret_parts(words)
        or is_secret_name("_".join(words))
        or "token" in words[-1]
        or "apikey" in words[-1]
        or words[-1] in ("session", "sid", "code")  # ?session=..., ?code= (OAuth), but not ?session_len=
    )


def _words(name: str) -> list[str]:
    """A parameter's or key's words, lower case: percent-decoded, split at non-alphanumerics and camelCase humps."""
    plain = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", unquote(name))
    return re.split(r"[^a-z0-9]+", plain.lower())


def _secret_parts(words: list[str]) -> bool:
    """The rule URL parameters and body keys share: a secret last word, a session or key id, a secret part."""
    joined = "".join(words)
    return (
        words[-1] in ("sig", "otp", "hmac", "ticket", "passcode", "jwt")
        or any(w in _SECRET_SHARED_WORDS for w in words)
        or joined.endswith(("sessid", "sessionid", "keyid"))  # ?PHPSESSID=, ?session_id=, key_id
        or any(hint in joined for hint in _SECRET_PARAM_HINTS)  # ?password1=, pass_word, ?AWSAccessKeyId=
    )


_SECRET_SHARED_WORDS: Final = frozenset(
    {"pw", "appkey", "pkey", "cred", "creds", "assertion", "sas", "verifier"}
)
"""Words of a parameter or body key that make it a credential (``?pw=``, ``client_assertion``, OAuth's
``code_verifier``, an Azure ``sas`` token): round 13 found them stored in clear."""
_SECRET_PARAM_HINTS: Final = ("password", "passwd", "passcode", "passphrase", "secret", "signature", "accesskey",
                              "credential", "bearer", "jwt", "hmac", "cookie", "authkey", "privkey", "privatekey",
                              "authcode", "samlresponse")  # fmt: skip
"""Parts of a parameter or body key that make it a credential wherever they stand in its name (separators dropped:
``pass_word``, ``AWSAccessKeyId``)."""


_SECRET_BODY_KEYS: Final = frozenset({"authorization", "auth", "credential", "credentials", "cookie"})


def is_secret_key(key: str) -> bool:
    """True when a request body's key names a secret (``api_key``, ``authToken``, ``password``, ``authorization``)."""
    key = unquote(key)  # as a URL's parameter is read (%6Bey)
    if not maybe_secret(key):
        return False
    words = _words(key)  # camelCase too: authToken -> auth, token
    lower = key.lower()
    return (
        is_secret_name("_".join(words))
        or is_secret_name(lower)
        or lower in _SECRET_BODY_KEYS
        or words[-1] in ("session", "sid", "sessionid")
        or "sessionid" in lower  # X-SessionId-v, not session_id_prefix_len
        or lower.endswith(("token", "authorization", "bearer", "auth"))
        or _secret_parts(words)  # the rule of a URL's parameters too (sig, otp, session_id, key_id, password)
    )


def is_secret_key_cached(key: str) -> bool:
    """:func:`is_secret_key`, remembered, bounded per text (:func:`judged`).

    A text of a quarter of a million JSON pairs names few keys.
    """
    return judged(key, _secret_key_remembered)


@functools.lru_cache(maxsize=4096)
def _secret_key_remembered(key: str) -> bool:
    return is_secret_key(key)
