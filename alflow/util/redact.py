"""Secrets by name, never by value: which names are secrets, and credentials stripped from URLs.

One home for the rules every layer applies before anything is stored (manifests, summaries,
snapshots, reports) or printed (errors, logs):

- :mod:`alflow.util.secret_names`: which names are secrets (an environment variable such as ``HF_TOKEN``, whose
  value must never be configured literally and is masked wherever an environment is recorded; a flag, a URL
  parameter, a body or header key).
- :func:`redact_url`: a URL without its credentials: the userinfo (``user:pass@``) and the values of
  query or fragment parameters named like a credential (``token``, ``key``, ``api_key``,
  ``password``, ``secret``, ``signature``, ``X-Amz-Security-Token``...) become ``***``.
- :func:`redact_urls_in_text` and :func:`redact_data`: the same for every URL inside free text (an
  error message) or inside JSON-ready data (a manifest), plus known secret *values* given by the caller.
- :func:`url_credentials` and :func:`urls_with_credentials`: which credentials a URL carries, named
  without their values (configuration refuses them: :mod:`alflow.config.base`).
- :func:`cut_middle`: a printed line bounded to :data:`MAX_LINE_CHARS` (its start and end kept, the cut said).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Final
from urllib.parse import unquote, urlsplit, urlunsplit

from alflow.errors import InvalidInputError
from alflow.util.free_text import (
    QUOTES,
    REDACTED,
    URL_TRAILING,
    hints_credentials,
    redact_free,
    trailing,
)
from alflow.util.names import shown
from alflow.util.secret_names import (
    SECRET_PARAM_WORDS,
    is_secret_flag,
    is_secret_key,
    is_secret_name,
    is_secret_param,
    judging,
)

MAX_LINE_CHARS: Final = 2_000
"""The longest line alflow prints from an input (an error, a plugin's warning): longer ones are cut in their middle."""


def cut_middle(line: str, limit: int = MAX_LINE_CHARS) -> str:
    """``line``, or when it is longer than ``limit``, its start and end with the number of characters cut between.

    An input of 100,000 characters (a name, an entry point's metadata) is shown by what identifies it, on one
    bounded line: the result is at most ``limit`` characters (``limit`` of 100 or more).
    """
    if len(line) <= limit:
        return line
    head, tail = limit * 3 // 4, limit // 10
    return f"{line[:head]} ... ({len(line) - head - tail:,} characters cut) ... {line[-tail:]}"


MAX_SCHEME: Final = 32
"""The longest URL scheme read in free text (RFC 3986 sets none; registered ones are under 32 characters): what comes
before a ``://`` is looked at this far back, so finding URLs stays linear in the text's length."""
_SCHEME_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")
_URL_REST: Final = re.compile(r"[^\s'\"<>`]+", re.ASCII)
"""What follows ``://`` in a URL in free text: up to ASCII whitespace, a quote, ``<``, ``>`` or a backtick (the bytes
:func:`redact_text_stream` cuts at). A password holding U+00A0 or U+3000 stays inside its URL, and is redacted."""


def url_spans(text: str) -> Iterator[tuple[int, int]]:
    """The ``(start, end)`` of every URL in free text, left to right, in time linear in ``len(text)``.

    A URL is a scheme (a letter, then letters, digits, ``+``, ``.`` or ``-``; at most :data:`MAX_SCHEME` of them),
    ``://``, then at least one character up to whitespace, a quote, ``<``, ``>`` or a backtick, less the punctuation
    that ends it (:data:`URL_TRAILING`: the ``:`` of ``URL: reason`` is shown, not redacted). No anchor before
    the scheme: it starts at the first letter that can begin one, so ``_https://u:pw@h/_`` (Markdown italics) holds
    one. Each ``://`` is found by ``str.find`` and its scheme read backwards a bounded way (a pattern that scanned
    each run of letters from every start took 11 s on a 65,000-character model id, issue #49).
    """
    end = 0
    sep = text.find("://")
    while sep != -1:
        start = sep
        floor = max(end, sep - MAX_SCHEME)
        while start > floor and text[start - 1] in _SCHEME_CHARS:
            start -= 1
        while start < sep and not text[start].isalpha():  # the scheme characters are ASCII
            start += 1
        rest = _URL_REST.match(text, sep + 3) if start < sep else None  # no scheme: no scan of what follows
        if rest is not None:
            end = rest.end()
            while end > sep + 4 and text[end - 1] in URL_TRAILING:  # "URL: reason", "(see URL)."
                end -= 1
            yield start, end
            sep = text.find("://", end)
        else:
            sep = text.find("://", sep + 1)


def _redact_params(text: str) -> str:
    parts = []
    for part in re.split(r"([&;])", text):
        name, eq, _value = part.partition("=")
        parts.append(f"{name}={REDACTED}" if eq and is_secret_param(name) else part)
    return "".join(parts)


_SECRET_PATHS: Final = {
    "hooks.slack.com": ("/services/", "/workflows/", "/triggers/"),
    "discord.com": ("/api/webhooks/",),
    "discordapp.com": ("/api/webhooks/",),
}
"""Hosts whose URLs carry their credential in the path (a Slack or Discord webhook): what follows the prefix."""


def _redact_secret_path(host: str | None, path: str) -> str:
    """``path`` with its credential ``***`` when ``host`` is one of :data:`_SECRET_PATHS` (a webhook's URL)."""
    for prefix in _SECRET_PATHS.get((host or "").rstrip(".").lower(), ()):
        if path.startswith(prefix) and len(path) > len(prefix) and path[len(prefix) :] != REDACTED:
            return f"{prefix}{REDACTED}"
    return path


def redact_url(url: str) -> str:
    """``url`` without credentials: userinfo and credential-named parameters become ``***``.

    ``http://user:pass@host:8000/metrics?token=abc&job=x`` -> ``http://***@host:8000/metrics?token=***&job=x``;
    a webhook's path (``https://hooks.slack.com/services/***``, :data:`_SECRET_PATHS`).
    Text that is not a URL with a scheme and a host comes back unchanged.
    """
    if "://" not in url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return _redact_params(re.sub(r"(://)[^/?#]*@", rf"\g<1>{REDACTED}@", url))
    if not parts.netloc:
        return url
    late = url.rfind("@")
    if "@" not in parts.netloc and late > 0 and ":" in url[url.find("://") + 3 : late]:
        # user:password holding a '/', '?' or '#' (not percent-encoded): a URL parser reads the host from it
        return f"{url[: url.find('://') + 3]}{REDACTED}{url[late:]}"
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{REDACTED}@{netloc.rpartition('@')[2]}"
    query = _redact_params(parts.query) if parts.query else parts.query
    fragment = _redact_params(parts.fragment) if "=" in parts.fragment else parts.fragment
    path = (
        _redact_params(parts.path) if ";" in parts.path else parts.path
    )  # matrix parameters: ;jsessionid=...
    path = _redact_secret_path(parts.hostname, path)
    if (netloc, path, query, fragment) == (parts.netloc, parts.path, parts.query, parts.fragment):
        return url
    return urlunsplit((parts.scheme, netloc, path, query, fragment))


OPENED_SCHEMES: Final = frozenset({"http", "https", "s3", "s3a", "gs", "gcs"})
"""URL schemes alflow opens itself: a user name alone there is sent as a credential (``https://TOKEN@host``)."""


def _secret_params(text: str) -> list[str]:
    names = []
    for part in re.split(r"[&;]", text):
        name, eq, value = part.partition("=")
        if eq and value and value != REDACTED and is_secret_param(name):
            names.append(unquote(name))
    return names


_NOT_IN_URLS: Final = re.compile(r"[\x00-\x20\x7f\"<>`\\^{}|]")
"""Characters a URL never holds as they are (RFC 3986: whitespace, controls, quotes, ``<>`\\^{}|``)."""


def url_problem(url: str) -> str | None:
    """What makes ``url`` no URL to send requests to, said without the URL itself (it may hold a password); None: fine.

    A character no URL holds raw (a space, a quote), or an ``@`` after the host: a password holding ``/``, ``?`` or
    ``#`` that was not percent-encoded, which a URL parser splits into a host and a path, showing the password.
    """
    if _NOT_IN_URLS.search(url) or not url.isprintable() or any(c.isspace() for c in url):
        return "it holds a character no URL holds as it is (a space, a quote, a control, <, >, `, \\): percent-encode it"
    try:
        parts = urlsplit(url)
    except ValueError:
        return None  # the caller's own checks say what is wrong with it
    if "@" not in parts.netloc and "@" in parts.path + parts.query + parts.fragment:
        return "'@' after the host: a user:password holding '/', '?' or '#' must percent-encode them (%2F, %3F, %23)"
    try:
        parts.netloc.rpartition("@")[0].encode(
            "latin-1"
        )  # what HTTP's Basic auth sends (a traceback beyond it)
    except UnicodeEncodeError:
        return "its user:password holds a character beyond Latin-1: percent-encode it (UTF-8)"
    return None


def url_syntax_problem(url: str) -> str | None:
    """What a URL parser refuses in ``url``, said without the URL (``not a URL (Invalid IPv6 URL)``); None: it parses.

    An unclosed or stray IPv6 bracket (``http://[::1``) made :func:`urllib.parse.urlsplit` raise, and a port out of
    range or not a number made its ``.port`` raise: a traceback where the URL was first read (round 13), or an
    error naming the URL again instead of its port.
    """
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        return f"not a URL ({exc})"
    try:
        port = parts.port
    except ValueError as exc:
        return (
            "its port is out of range (1-65535)"
            if "range" in str(exc)
            else "its port is not a number (1-65535)"
        )
    return "its port is out of range (1-65535)" if port == 0 else None


def check_url_syntax(url: str, what: str) -> str:
    """``url`` unchanged, or a one-line :class:`InvalidInputError` (a ``ValueError``) naming ``what``, the URL and why.

    ``error: --url 'http://[::1': not a URL (Invalid IPv6 URL)``; the URL is shown redacted and cut.
    """
    problem = url_syntax_problem(url)
    if problem:
        raise InvalidInputError(f"{what} {shown(redact_url(url))}: {problem}")
    return url


def check_http_url(url: str, what: str) -> str:
    """``url`` unchanged when :func:`check_url_syntax` takes it and it is ``http(s)://`` with a host, else one line.

    Round 13: ``metrics snapshot --url unix:///x.sock`` said ``cannot scrape metrics at unix:/x.sock: unix:/x.sock``.
    """
    parts = urlsplit(check_url_syntax(url, what))
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInputError(f"{what} {shown(redact_url(url))}: give an http(s)://HOST[:PORT][/PATH] URL")
    return url


def url_credentials(url: str) -> list[str]:
    """The credentials ``url`` carries, each named without its value (empty: none).

    A password in the userinfo (``user:password@``); any userinfo of a URL alflow opens (:data:`OPENED_SCHEMES`:
    a user name alone there is a token or an access key); a query or fragment parameter named like a credential
    (:func:`is_secret_param`) with a value. What :func:`redact_url` already masked (``***``) is none.
    """
    if "://" not in url:
        return []
    try:
        parts = urlsplit(url)
        netloc, query, fragment = parts.netloc, parts.query, parts.fragment
    except ValueError:  # an unparsable host (a bad IPv6 literal): look at the text around it
        scheme_rest = url.split("://", 1)[1]
        netloc = re.split(r"[/?#]", scheme_rest, maxsplit=1)[0]
        query = scheme_rest.partition("?")[2].partition("#")[0]
        fragment = scheme_rest.partition("#")[2]
    found = []
    userinfo = netloc.rpartition("@")[0] if "@" in netloc else None
    if userinfo is not None and userinfo != REDACTED:
        scheme = url.split("://", 1)[0].lower()
        if ":" in userinfo:
            found.append("a password (user:password@)")
        elif scheme in OPENED_SCHEMES:
            found.append(f"a user name, which {scheme}:// sends as a credential (user@)")
    found += [f"the parameter {name}" for name in _secret_params(query)]
    if "=" in fragment:
        found += [f"the fragment parameter {name}" for name in _secret_params(fragment)]
    return found


def urls_with_credentials(text: str) -> list[tuple[str, list[str]]]:
    """Every URL inside ``text`` that carries credentials: (the URL redacted, :func:`url_credentials`)."""
    if "://" not in text:
        return []
    found = []
    for start, end in url_spans(text):
        what = url_credentials(text[start:end])
        if what:
            found.append((redact_url(text[start:end]), what))
    return found


def redact_values(text: str, values: Iterable[str]) -> str:
    """``text`` with every occurrence of a known secret *value* (4 characters or more) replaced."""
    for value in values:
        if value and len(value) >= 4:
            text = text.replace(value, REDACTED)
    return text


def _redact_span(span: str) -> str:
    """A URL span of free text with each URL in it redacted, in one pass (linear).

    URLs joined by ``,`` ``;`` ``|`` (a list in one option), or a URL inside another's query, are several URLs,
    each from its scheme on.
    """
    parts: list[str] = []
    done, sep = 0, span.find("://")
    nested = span.find("://", sep + 3)
    while nested != -1:
        start, floor = nested, max(sep + 3, nested - MAX_SCHEME)
        while start > floor and span[start - 1] in _SCHEME_CHARS:
            start -= 1
        while start < nested and not span[start].isalpha():
            start += 1
        if sep + 3 < start < nested:  # a scheme begins there: what comes before is a URL of its own
            piece = span[done:start]
            url = piece.rstrip(",;|")  # the separator is no part of the first URL's last value
            parts += [redact_url(url), piece[len(url) :]]
            done, sep = start, nested
        nested = span.find("://", nested + 3)
    parts.append(redact_url(span[done:]))
    return "".join(parts)


_LOOSE_PARAM: Final = re.compile(r"([?&][A-Za-z0-9_.%-]{1,64})=([^\s&#'\"<>`,;|]+)")
"""A query parameter outside a URL (``/tmp/log?token=abc``): bounded name, one value, linear in the text (its
separator matched, not looked behind for: the scan then skips to each ``?`` and ``&``)."""


def redact_urls_in_text(text: str, values: Iterable[str] = ()) -> str:
    """``text`` (an error message, a log line) with every URL in it redacted, and the given secret values.

    A credential-named query parameter after a ``?`` outside any URL (a path given ``?token=...``) is redacted too.
    """
    with judging():  # the names of one text judged by their rules up to a bound, linear past it
        if "://" in text:
            parts, done = [], 0
            for start, end in url_spans(text):
                parts += [text[done:start], _redact_span(text[start:end])]
                done = end
            text = "".join([*parts, text[done:]])
        if "?" in text and "=" in text:
            text = _LOOSE_PARAM.sub(
                lambda m: f"{m[1]}={REDACTED}{trailing(m[2])}" if is_secret_param(m[1][1:]) else m[0], text
            )
        return redact_values(redact_free(text), values)


def may_hold_credentials(text: str, quotes: tuple[str, ...] = QUOTES) -> bool:
    r"""False when :func:`redact_urls_in_text` would leave ``text`` as it is (a cheap test of its hints).

    ``quotes``: what a quote inside a string looks like in ``text`` (``\"`` in a JSON document's bytes), for the
    ``"name": "value"`` pairs of :mod:`alflow.util.free_text`.
    """
    return "://" in text or "?" in text or hints_credentials(text, quotes)


MAX_HELD_BYTES: Final = 8 << 20
"""The longest line (or block of lines that must be redacted together) :func:`redact_text_stream` holds (8 MiB)."""


class RedactionError(ValueError):
    """A text that cannot be redacted in parts (a line longer than :data:`MAX_HELD_BYTES`)."""


def unescape_json(text: str) -> str:
    r"""``text`` with its JSON (and YAML) escapes ``\/`` and ``\uXXXX`` undone, so that no escape hides a URL.

    A lone surrogate's escape becomes U+FFFD (no text can hold it alone).
    """
    return _JSON_ESCAPE.sub(_unescaped, text) if "\\" in text else text


_JSON_ESCAPE: Final = re.compile(r"\\(/|u[0-9a-fA-F]{4})")


def _unescaped(m: re.Match[str]) -> str:
    code = ord("/") if m[1] == "/" else int(m[1][1:], 16)
    return "\ufffd" if 0xD800 <= code <= 0xDFFF else chr(code)


_FRESH_LINE_REVERSED: Final = re.compile(rb"[^ \t\r\n\f\v]\n")
"""A line's end and the first byte of a line that cannot continue the one before it (a YAML block scalar's value
is indented), in reversed text: the first match in the reversed text is the last one in the text."""


def _cut(data: bytes | bytearray, *, fresh: bool = True) -> int:
    """Where ``data`` may be cut so that no redaction rule needs text on both sides; 0 where nowhere.

    Just after a newline, never inside a private key block whose end is not yet read, and (``fresh``) only where
    the next line cannot continue the one before it (its first byte known and not whitespace: a YAML
    ``password: |`` block's lines are indented). Round 16 (#49): a line longer than a part was cut at a space, and a
    ``Bearer`` at the end of one part and its token at the start of the next were each left as they were.
    Linear in ``data`` (its last fresh line found in it reversed).
    """
    begin, closing = _key_block_begin(data), data.rfind(b"-----END ")
    closed = data.find(b"\n", closing) if closing > begin >= 0 else -1  # its end line read whole
    end = begin if begin >= 0 and closed < 0 else len(data)  # an open block's first byte may start a part
    if not fresh:
        cut = data.rfind(b"\n", 0, end) + 1
        return cut if not begin < cut <= closed else data.rfind(b"\n", 0, begin) + 1
    cut = _last_fresh(data[: end + 1])
    return cut if not begin < cut <= closed else _last_fresh(data[: begin + 1])  # never inside the block


_KEY_BLOCK: Final = re.compile(rb"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY")
_KEY_BLOCK_READ: Final = 65_536 + 128
"""How far past its BEGIN line the key rule reads a block (:mod:`alflow.util.free_text`'s 64 KiB body)."""


def _key_block_begin(data: bytes | bytearray) -> int:
    """Where the last private key block begins if the key rule could still read on into the next part, else -1.

    Only a private key's armour (a certificate, a public key, a log line naming ``-----BEGIN`` are not secrets), and
    only within the rule's reach: a BEGIN without END stopped every later cut, and 8 MiB later the site cut the
    download (round 17 review).
    """
    begin = data.rfind(b"-----BEGIN ")
    if begin < 0 or len(data) - begin > _KEY_BLOCK_READ or not _KEY_BLOCK.match(data, begin):
        return -1
    return begin


def _last_fresh(region: bytes | bytearray) -> int:
    """Just after the last newline of ``region`` that the next line's first byte cannot continue; 0 if none."""
    found = _FRESH_LINE_REVERSED.search(region[::-1])
    return 0 if found is None else len(region) - 1 - found.start()


def redact_text_stream(chunks: Iterable[bytes], max_held: int = MAX_HELD_BYTES) -> Iterator[bytes]:
    """The UTF-8 text read in ``chunks``, its escapes undone (:func:`unescape_json`) and redacted, in parts.

    Each part ends at a line's end where the next line starts afresh (:func:`_cut`): every rule of the redaction
    (a URL, ``Bearer`` and its token, ``"name": "value"``, a YAML block, a private key block) sees its whole text,
    so the parts joined are the whole text unescaped and redacted (bytes that are not UTF-8 are replaced, as a whole
    decode would); where no line starts afresh in half of ``max_held``, any line's end will do. Text of more than
    ``max_held`` bytes with nowhere to cut is refused (:class:`RedactionError`)
    rather than held whole or cut where a credential could be split.
    """
    held = bytearray()
    for chunk in chunks:
        held += chunk
        if b"\n" not in held[-len(chunk) - 1 :]:
            cut = 0  # no new place to cut (a line's end, or the byte after one): a long line stays linear
        else:  # a text whose every line is indented is cut at any line's end once half the bound is held
            cut = _cut(held) or (_cut(held, fresh=False) if len(held) > max_held // 2 else 0)
        if cut == 0:
            if len(held) > max_held:
                raise RedactionError(
                    f"{len(held):,} bytes without a line's end to cut at: more than the {max_held:,} that are "
                    "redacted in one part"
                )
            continue
        yield _redacted_part(bytes(held[:cut]))
        del held[:cut]
    if held:
        yield _redacted_part(bytes(held))


def _redacted_part(data: bytes) -> bytes:
    return redact_urls_in_text(unescape_json(data.decode("utf-8", errors="replace"))).encode()


_CREDENTIAL_VALUE: Final = re.compile(r"\s*(?:bearer|basic|token)\s+[A-Za-z0-9._~+/=-]{8,}\s*", re.IGNORECASE)
"""A value that is an HTTP credential whatever its key (``Bearer eyJ...``, ``Basic dXNlcjpwdw==``)."""


def redact_body(body: Mapping[str, object]) -> dict[str, object]:
    """A request body (``--extra-body``) as it may be stored or printed, without its secrets (:func:`redact_document`).

    What is sent is the body as given; only its record is redacted.
    """
    clean = redact_document(body)
    assert isinstance(clean, dict)
    return clean


def redact_document(data: object) -> object:
    """A copy of JSON-ready ``data`` (a request body, a JSON file a run lists) as it may be stored or shown.

    The value of every key naming a secret (:func:`is_secret_key`, at any depth) is ``***``, whatever it holds; a
    string that is a credential (``Bearer eyJ...``) is ``***`` under any key; every other string, and every key, has
    its URLs and credentials redacted (:func:`redact_urls_in_text`).
    """
    if isinstance(data, Mapping):
        return {
            redact_urls_in_text(k) if isinstance(k, str) else k: REDACTED
            if isinstance(k, str) and is_secret_key(k)
            else redact_document(v)
            for k, v in data.items()
        }
    if isinstance(data, list | tuple):
        return [redact_document(v) for v in data]
    if isinstance(data, str):
        return REDACTED if _CREDENTIAL_VALUE.fullmatch(data) else redact_urls_in_text(data)
    return data


def redact_data(data: object, values: Iterable[str] = ()) -> object:
    """A copy of JSON-ready ``data`` (dicts, lists, strings) with every string passed through :func:`redact_urls_in_text`.

    Keys are kept; other objects are returned as they are.
    """
    values = tuple(values)  # read once: a generator serves every string
    if isinstance(data, str):
        return redact_urls_in_text(data, values)
    if isinstance(data, Mapping):
        return {key: redact_data(value, values) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return [redact_data(item, values) for item in data]
    return data


def _any_case(word: str) -> str:
    """``word`` as a regular expression matching it in any letter case, without flags (JSON Schema's ECMA dialect)."""
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else re.escape(c) for c in word)


def _credentials_pattern() -> str:
    # ASCII whitespace only, as url_spans (a password holding U+00A0 is inside its URL)
    words = "|".join(_any_case(w) for w in sorted(SECRET_PARAM_WORDS, key=len, reverse=True))
    last_word = "|".join(_any_case(w) for w in ("token", "apikey"))
    name = r"[^=&;#\t\n\v\f\r ]"  # a character of a parameter name
    sep = r"[^A-Za-z0-9=&;#\t\n\v\f\r ]"  # a character between two words of a name
    value = r"=(?!\*\*\*(?:[&;#\t\n\v\f\r ]|$))[^&;#\t\n\v\f\r ]"  # a value, not the redacted one
    schemes = "|".join(_any_case(s) for s in sorted(OPENED_SCHEMES, key=len, reverse=True))
    return "|".join(
        (
            r"[A-Za-z][A-Za-z0-9+.\-]*://(?!\*\*\*@)[^/?#@\t\n\v\f\r ]*:[^/?#@\t\n\v\f\r ]*@",  # user:password@
            rf"(?:{schemes})://(?!\*\*\*@)[^/?#@\t\n\v\f\r ]+@",  # a user name where alflow opens the URL
            rf"://[^\t\n\v\f\r ]*[?&;#](?:{name}*{sep})?(?:{words})(?:{sep}{name}*)?{value}",  # a credential-named parameter
            rf"://[^\t\n\v\f\r ]*[?&;#](?:{name}*{sep})?[A-Za-z0-9]*(?:{last_word})[A-Za-z0-9]*{value}",
        )
    )


URL_CREDENTIALS_PATTERN: Final = _credentials_pattern()
"""A regular expression (ECMA-262 and Python alike) for a string holding a URL with credentials, as
:func:`url_credentials` reads them, for JSON schemas: Prefect's server validates a deployment run's parameters
against the flow's schema before it stores them, so a secret typed into the UI is refused there. Narrower than
:func:`url_credentials` (no percent-decoding of names): what it misses the configuration's validators refuse."""


def redact_config(data: object, key: str = "") -> object:
    """A stored configuration as it may be shown: secret flags' values and secret variables' values as ``***``.

    In a list of arguments, the value after a secret flag (``--api-key X``, :func:`is_secret_flag`) or inside one
    (``--hf-token=X``); in a mapping whose key ends in ``env`` (``extra_env``), the value of a secret name
    (:func:`is_secret_name`). alflow refuses both when it takes a configuration; a manifest written by hand or by
    another tool may hold them. Free text is redacted where it is shown (:func:`redact_urls_in_text`).
    """
    if isinstance(data, Mapping):
        env = key.lower().endswith("env")
        return {
            k: REDACTED if env and isinstance(k, str) and is_secret_name(k) else redact_config(v, str(k))
            for k, v in data.items()
        }
    if isinstance(data, list | tuple):
        out: list[object] = []
        hide = False
        for item in data:
            if hide:
                out.append(REDACTED)
                hide = False
            elif isinstance(item, str) and is_secret_flag(item):
                flag, eq, _ = item.partition("=")
                out.append(f"{flag}={REDACTED}" if eq else item)
                hide = not eq
            else:
                out.append(redact_config(item, key))
        return out
    return data


_HEADER_VALUE: Final = re.compile(
    r"(?:^|(?<=[\s,;=]))([A-Za-z][A-Za-z0-9_.-]{0,63})([ \t]*:[ \t]*)(?=[^\s/])([^,;\r\n]+)"
)
"""An HTTP header written out, ``Name: value`` (``--header 'X-Api-Key: ...'``): its name and its value (to a ``,``,
``;`` or line end). ``tcp://host:port`` is no header (``//`` follows its colon)."""


def redact_argv(args: Iterable[str]) -> list[str]:
    """A stored command line (a reference table's ``provenance.command``) as it may be kept and shown.

    :func:`redact_config`'s rule (the value after or inside a secret flag: ``--api-key X``, ``--hf-token=X``), then
    every argument's credentials (:func:`redact_urls_in_text`: URLs, ``NAME=value``, ``Bearer ...``) and a
    secret-named header's value (``X-Api-Key: X``, the name judged as a body's key is). The configuration refuses
    them all in ``server.extra_args``; a table written by hand or by another tool may hold them.
    """
    flagged = redact_config(list(args))
    assert isinstance(flagged, list)
    return [
        _HEADER_VALUE.sub(
            lambda m: f"{m[1]}{m[2]}{REDACTED}" if is_secret_key(m[1]) else m[0], redact_urls_in_text(arg)
        )
        for arg in map(str, flagged)
    ]
