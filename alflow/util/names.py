"""Names are data, keys are derived: ASCII keys built from user strings, and the identifier check.

A model id, a served name or a dataset name is data: it is stored and shown as typed (escaped where it is
rendered). Wherever alflow needs a *key* built from such a string (a Prefect artifact key, which allows
lowercase letters, digits and dashes only; a flow run name; a file name) it uses :func:`safe_key`: an ASCII
slug of the text plus a short hash of the original, so that two names which slug alike (``Qwen/Qwen3`` and
``qwen-qwen3``, or two Japanese names that slug to nothing) never share a key.

:func:`check_identifier` is the load-time check of identifiers: not blank, at most :data:`MAX_IDENTIFIER` characters,
no control character (a NUL cannot reach a command line or a file name; a newline or an escape sequence would forge
log lines and terminal output).
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import re
import unicodedata
from pathlib import Path
from typing import Final

from alflow.util.pathnames import path_name_problem

HASH_LEN: Final = 8
"""Hex digits of the original's sha256 that every key ends with."""
DEFAULT_MAX_LEN: Final = 64
"""Default longest key (Prefect's artifact keys and file names take it comfortably)."""
_NOT_SLUG = re.compile(r"[^a-z0-9]+")
_SLUG = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")


def safe_key(text: str, *, max_len: int = DEFAULT_MAX_LEN, always_hash: bool = True) -> str:
    """An ASCII key for ``text``: its slug (``[a-z0-9-]``, dashes collapsed) plus ``-`` and 8 hex of its sha256.

    Accented Latin letters keep their base letter (``é`` -> ``e``); every other character (Japanese, a bidi
    control, a NUL, punctuation) becomes a dash, and runs of dashes collapse to one. The hash is of the
    original text (UTF-8, control characters and all), so distinct texts give distinct keys even where their
    slugs agree. The result matches ``^[a-z0-9]+(-[a-z0-9]+)*$``, never starts or ends with a dash, and is at
    most ``max_len`` characters (at least 9 + 1 are needed: the slug is cut, never the hash). A text whose
    slug is empty (only Japanese, say) gives ``x-<hash>``.

    ``always_hash=False`` (for names people read, such as flow run names) leaves a text that already is
    its own slug as it is (``demo-llama-70b``) and hashes only the others.

    >>> safe_key("Qwen/Qwen3-8B")
    'qwen-qwen3-8b-a82fd547'
    """
    if max_len < HASH_LEN + 2:
        raise ValueError(f"max_len {max_len} is too short: a key needs at least {HASH_LEN + 2} characters")
    if not always_hash and len(text) <= max_len and _SLUG.fullmatch(text):
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:HASH_LEN]
    bare = "".join(c for c in unicodedata.normalize("NFKD", text) if unicodedata.category(c) != "Mn")
    slug = _NOT_SLUG.sub("-", bare.lower()).strip("-")
    slug = slug[: max_len - HASH_LEN - 1].rstrip("-") or "x"
    return f"{slug}-{digest}"


BIDI_CONTROLS: Final = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
"""The bidirectional formatting characters (an override, an isolate, a mark): refused in identifiers, where they would
reorder what a page or a terminal shows ("Trojan source", CVE-2021-42574)."""
MAX_IDENTIFIER: Final = 1024
"""The longest identifier (a model id or path, a served name, an image reference) alflow takes: a Hugging Face repo id
is at most 96 characters and a Docker reference about 400 (a 255-character name, a 128-character tag, a digest), a path
in a container rarely more; a longer one is refused at the configuration rather than carried into every page, log
and file name (a 2-million-character id once reached the results site, issue #49)."""


def shown(value: str, limit: int = 80) -> str:
    """``repr(value)``, cut to about ``limit`` characters with the full length said (an error line stays one line)."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}... ({len(value):,} characters)"


_CONTROL_CATEGORIES: Final = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
"""Controls (C0, DEL, C1), format characters (bidi overrides, zero-width), lone surrogates, line and paragraph
separators: what :func:`alflow.reports.markdown.escape_controls` writes as escapes."""


def control_characters(value: str, keep: str = "\t\n") -> list[str]:
    """The control and format characters of ``value`` but those in ``keep``, as sorted ``U+XXXX`` names (empty: none).

    For text that reaches a terminal as it is (a server's arguments and environment in ``run --dry-run``'s plan):
    ESC, BEL and an OSC would drive the terminal, RLO reorder the line.
    """
    return sorted(
        {f"U+{ord(c):04X}" for c in value if c not in keep and unicodedata.category(c) in _CONTROL_CATEGORIES}
    )


_EMOJI_BEFORE_JOINER: Final = frozenset({"So", "Sk", "Mn"})  # a pictograph, a skin tone, a variation selector
_JOINERS: Final = frozenset("\u200c\u200d")
_TAGS: Final = range(0xE0020, 0xE0080)
"""Tag characters: after a black flag (U+1F3F4) they spell a subdivision's flag (England's, Scotland's)."""


def _script_letter(c: str) -> bool:
    """A letter or mark of a script that joins (Arabic, Indic...): not Latin, where a joiner would only hide."""
    return unicodedata.category(c)[0] in "LM" and not unicodedata.name(c, "LATIN").startswith("LATIN")


def _invisible(value: str, i: int) -> bool:
    """Whether ``value[i]`` is a format character (Cf) an identifier may not hold.

    All but what draws text of a script as it is written: a zero-width joiner inside an emoji sequence
    (``\U0001f468\u200d\U0001f4bb``), a zero-width (non-)joiner between two letters of a script that joins (Persian's
    ``\u0645\u06cc\u200c\u062e``, a Devanagari conjunct), a flag's tag characters. Between Latin letters, or
    alone, it only hides (``llama\u200b-70b``).
    """
    c = value[i]
    if unicodedata.category(c) != "Cf":
        return False
    before = value[i - 1] if i > 0 else ""
    after = value[i + 1] if i < len(value) - 1 else ""
    if c in _JOINERS and before and after:
        if _script_letter(before) and _script_letter(after):
            return False
        if (
            c == "\u200d"
            and unicodedata.category(before) in _EMOJI_BEFORE_JOINER
            and unicodedata.category(after) == "So"
        ):
            return False
    return not (ord(c) in _TAGS and before and (before == "\U0001f3f4" or ord(before) in _TAGS))


def check_identifier(value: str, *, what: str = "an identifier") -> str:
    """``value`` unchanged, or a one-line ``ValueError``: blank, too long, or holding control characters.

    Longer than :data:`MAX_IDENTIFIER` is too long; the control characters are named. For a pydantic field validator: the error names the field, the value (``repr``, cut) and what is allowed.
    """
    if not "".join(
        c for c in value if unicodedata.category(c) != "Cf"
    ).strip():  # zero-width only is blank too
        raise ValueError(f"{what} {shown(value)} is blank: give a name (e.g. a Hugging Face repo id)")
    if len(value) > MAX_IDENTIFIER:
        raise ValueError(
            f"{what} {shown(value)} is longer than the {MAX_IDENTIFIER:,} characters an identifier may have"
        )
    # the control characters (Unicode Cc: C0, DEL and C1), then the format ones (Cf: bidi, zero-width, soft hyphen,
    # BOM), as U+XXXX names: round 17 (#49), 'llama\u200b-70b' looked like llama-70b and started its own history
    bad = [
        *sorted({f"U+{ord(c):04X}" for c in value if unicodedata.category(c) == "Cc"}),
        *sorted({f"U+{ord(c):04X}" for i, c in enumerate(value) if _invisible(value, i)}),
    ]
    if bad:
        raise ValueError(
            f"{what} {shown(value)} holds the control character(s) {', '.join(bad)}: an identifier may hold any "
            "printable character (letters of any script, digits, punctuation, spaces) but no control, "
            "bidirectional formatting or invisible (zero-width, soft hyphen, BOM) character"
        )
    return value


_HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")


def check_host(value: str | None, *, what: str = "host") -> str | None:
    """``value`` when it is an IP address or a host name (RFC 1123 labels), else a one-line ``ValueError``.

    ``256.1.1.1`` (all digits and dots, yet no IPv4 address) once reached the socket as a 53-line ``gaierror``.
    """
    if value is None:
        return None
    candidate = value[1:-1] if value.startswith("[") and value.endswith("]") else value
    try:
        ipaddress.ip_address(candidate)
    except ValueError:
        pass
    else:
        return value
    numeric = all(part.isdigit() for part in candidate.split("."))
    labels = candidate.rstrip(".").split(".")
    if (
        numeric
        or ":" in candidate
        or len(candidate) > 253
        or not all(_HOST_LABEL.fullmatch(x) for x in labels)
    ):
        raise ValueError(
            f"{what} {shown(value)} is neither an IP address nor a host name (letters, digits and '-' in dot-separated "
            "labels, e.g. 127.0.0.1, ::1, 0.0.0.0 or node-1.cluster)"
        )
    return value


def check_path_name(value: str | os.PathLike[str], *, what: str) -> str:
    """``value`` as text when a system call can take it as a path, else a one-line ``ValueError``.

    For every path a user names (an output, a folder, an input file): a name longer than the file system allows, a
    path longer than ``PATH_MAX``, a NUL or bytes that are not UTF-8
    (:func:`~alflow.util.pathnames.path_name_problem`) are refused here, naming ``what`` (the option), the path (cut)
    and what is allowed, instead of as an ``OSError`` traceback from the first system call.
    """
    text = os.fspath(value)
    problem = path_name_problem(text)
    if problem is not None:
        raise ValueError(f"{what} {shown(text)} {problem}")
    return text


def check_log_dir(value: str | None) -> str | None:
    """A server log folder that can be a folder: not an existing file, not under /proc, /sys or /dev (but /dev/shm)."""
    if value is None:
        return None
    if not value.strip():
        raise ValueError("log_dir '' is empty: give a folder, or leave it out for a temporary one")
    check_path_name(value, what="log_dir")
    try:
        _check_folder(value)
    except OSError as exc:  # a folder without search permission on the way
        raise ValueError(f"log_dir {shown(value)}: {exc.strerror or type(exc).__name__}") from None
    return value


def _check_folder(value: str) -> None:
    """:func:`check_log_dir` of a path system calls take (an ``OSError`` of a folder it cannot look in passes)."""
    try:
        path = Path(value).expanduser()
    except RuntimeError:  # ~user of no such user
        raise ValueError(f"log_dir {shown(value)}: no such user's home folder") from None
    top = _special_top(Path(os.path.realpath(path)))
    if top is not None:
        raise ValueError(f"log_dir {shown(value)} is under {top}: give a folder on a disk")
    for folder in (path, *path.parents):  # the first that exists must be a folder: none under a file
        if folder.exists():
            if not folder.is_dir():
                where = "is a file" if folder == path else f"is under the file {shown(str(folder))}"
                raise ValueError(
                    f"log_dir {shown(value)} {where}, not a folder: give a folder (created if missing)"
                )
            break


def _special_top(real: Path) -> str | None:
    """``/proc``, ``/sys`` or ``/dev`` when ``real`` is under one (``/dev/shm`` is memory-backed files: none)."""
    if Path("/dev/shm") in (real, *real.parents):  # noqa: S108  (a check of the path, nothing is written there)
        return None
    return next(
        (top for top in ("/proc", "/sys", "/dev") if real == Path(top) or Path(top) in real.parents), None
    )


_STANDARD_FILES: Final = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr"})


def check_output_file(value: str, *, what: str = "--output", stdout: bool = True) -> Path:
    """A file alflow may write: not empty, not under /proc, /sys or /dev, a regular file (or none) in a folder.

    The first of its folders that exists must be a folder (a path under a regular file fails only at the write,
    after the work); missing folders are the writer's to create. A FIFO would block the write until a reader
    came; ``/proc/self/mem`` would fail after the work was done. With ``stdout`` false (a command that has no ``-``), /dev/null, /dev/stdout and /dev/stderr are refused too and the
    messages do not offer ``-``.
    """
    give = "give a file path (or - for standard output)" if stdout else "give a regular file's path"
    if not value.strip():
        raise ValueError(f"{what} '' is empty: {give}")
    if stdout and value in _STANDARD_FILES:
        return Path(value)
    check_path_name(value, what=what)
    try:
        return _check_file(value, what=what, stdout=stdout, give=give)
    except OSError as exc:  # a folder without search permission on the way
        raise ValueError(f"{what} {shown(value)}: {exc.strerror or type(exc).__name__}") from None


def _check_file(value: str, *, what: str, stdout: bool, give: str) -> Path:
    """:func:`check_output_file` of a path system calls take (an ``OSError`` of a folder it cannot look in passes)."""
    try:
        path = Path(value).expanduser()
    except RuntimeError:  # ~user of no such user
        raise ValueError(f"{what} {shown(value)}: no such user's home folder") from None
    real = Path(os.path.realpath(path))
    top = _special_top(real)
    if top is not None:
        on_disk = "give a file on a disk" + (" (or - for standard output)" if stdout else "")
        raise ValueError(f"{what} {shown(value)} is under {top}: {on_disk}")
    if real.exists() and not real.is_file():
        kind = "a folder" if real.is_dir() else "not a regular file (a FIFO, socket or device)"
        raise ValueError(f"{what} {shown(value)} is {kind}: {give}")
    folder = next((f for f in real.parents if f.exists()), None)  # the first that exists: a folder, no file
    if folder is not None and not folder.is_dir():
        where = ": its folder {} is" if folder == real.parent else " is under {}, which is"
        raise ValueError(f"{what} {shown(value)}{where.format(shown(str(folder)))} not a folder: {give}")
    return path


def check_env_names(names: object) -> None:
    """Raise ``ValueError`` for an environment variable name that is empty or holds ``=`` or a NUL.

    ``os.environ`` and ``execve`` cannot carry such a name: the server's start would fail with a traceback.
    """
    for name in names if isinstance(names, dict | list | tuple) else ():
        if not isinstance(name, str):
            continue
        if not name or "=" in name or "\0" in name:
            raise ValueError(
                f"extra_env name {name!r} is not an environment variable name: it must be non-empty and "
                "hold no '=' and no NUL (e.g. VLLM_LOGGING_LEVEL)"
            )


_PORTABLE_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_secret_env_name(name: str, *, what: str) -> str:
    """``name`` unchanged when it is a portable environment variable name (``[A-Za-z_][A-Za-z0-9_]*``), else one line.

    For a field that names the variable holding a secret (never the secret): a stricter :func:`check_env_names`
    (no ``=``, no NUL, not empty, and no ``-``, dot, space or control character), so a key pasted where its
    variable's name belongs (``sk-...``, ``KEY=value``) is refused. The message never shows the value: it may be
    the secret itself.
    """
    if not _PORTABLE_ENV_NAME.fullmatch(name):
        raise ValueError(
            f"{what} must be the NAME of an environment variable (letters, digits and '_', not starting with a "
            "digit, e.g. VLLM_API_KEY), never the secret itself; the value given is not such a name (not shown: "
            "it may be the secret)"
        )
    return name


_ALNUM = r"[a-z0-9]+"
_PATH_PART = rf"{_ALNUM}(?:(?:[._]|__|-+){_ALNUM})*"
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*|\[[0-9a-fA-F:.]+\])(?::[0-9]+)?"
IMAGE_REFERENCE: Final = re.compile(
    rf"(?:{_DOMAIN}/)?{_PATH_PART}(?:/{_PATH_PART})*(?::[\w][\w.-]{{0,127}})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?",
    re.ASCII,  # Docker's \w is ASCII: a tag of other letters or digits is refused by it
)
"""A container image reference as Docker reads it (``distribution/reference``'s ``ReferenceRegexp``): an optional
registry host and port, lower-case path components, an optional tag, an optional digest."""
MAX_IMAGE_NAME: Final = 255
"""The longest repository name (registry and path) Docker takes (``distribution/reference``'s ``NameTotalLengthMax``)."""


def check_image(value: str, *, what: str = "image") -> str:
    """``value`` when it is an image reference Docker can pull (``vllm/vllm-openai:v0.11.0``, ``host:5000/a/b@sha256:..``).

    Anything else answers before any work starts, rather than as a docker error after the run began.
    """
    check_identifier(value, what=what)
    name = value.partition("@")[0]
    slash = name.rfind("/")
    repo = name[: slash + 1 + name[slash + 1 :].find(":")] if ":" in name[slash + 1 :] else name
    if not IMAGE_REFERENCE.fullmatch(value) or len(repo) > MAX_IMAGE_NAME:
        raise ValueError(
            f"{what} {shown(value)} is not a container image reference: [registry[:port]/]path[:tag][@digest], "
            f"the path lower-case letters, digits and . _ - separators, the name at most {MAX_IMAGE_NAME} characters "
            "(e.g. vllm/vllm-openai:v0.11.0)"
        )
    return value
