"""Each third-party framework plugin tried in a process of its own before alflow imports it into its own.

A plugin's modules run inside the command that imports them: what they do at import (never return, call
``os._exit``, fork, write to file descriptor 1 under a command's JSON) would happen to the command, and an import
cannot be stopped from another thread (:func:`alflow.plugins.resolve_within` bounds only the spec module, and the
config module is imported where alflow's configuration builds its model of every framework). So the command line
first imports each entry point's spec, config and plugin modules here, in a child process in a session of its own
(:func:`probe`), bounded in time; a plugin whose child does not end in time, ends without saying it is done, writes
to its standard output, leaves a process behind, or changes the interpreter's shared state (a standard function
or one of alflow's replaced, a method of a watched class (alflow's, a watched library's, the standard classes a command
goes through: ``subprocess.Popen``, ``pathlib.Path``, ``http.client.HTTPConnection``, ``threading.Thread``...), a value of
alflow's rebound or changed in place, the recursion limit, the standard streams and their encoding, logging, signal handlers, resource limits,
warnings filters, the locale and time zone; an exit hook that ends the process) is
left out with that reason (one warning) and never imported by the command. The child imports alflow's configuration first with the built-in frameworks only, so a plugin is
blamed for its own modules alone.

What the probe cannot see: a thread a plugin starts that acts later than :data:`GRACE_S` after its import, a
plugin that acts only in some processes, and a module it does not watch (one of a watched library's that neither
alflow nor :data:`_WATCHED_SUBMODULES` loads first; Prefect's). It is a guard against accidental changes and common
tampering, not a sandbox: a plugin is Python code that runs with the user's rights (docs/frameworks/write-a-plugin.md).

Run as ``python -m alflow.plugin_probe REFERENCE REPORT_FILE`` by :func:`probe`.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import itertools
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import Final

from alflow.util.redact import redact_urls_in_text

PROBE_S_ENV: Final = "ALFLOW_PLUGIN_LOAD_S"
"""Environment variable that sets the bound of a plugin's import (seconds; default :data:`PLUGIN_LOAD_S`)."""
PLUGIN_LOAD_S: Final = 20.0
"""The longest a third-party plugin's modules may take to import before it is left out."""
GRACE_S: Final = 0.3
"""How long the child waits after the imports before it reports: a thread that prints at once is seen."""
_OK: Final = "ok"
_UNJUDGED: Final = "unjudged"
_CHILD_ENV: Final = "ALFLOW_PLUGIN_PROBE_CHILD"
IN_CHILD: Final = os.environ.get(_CHILD_ENV) == "1"
"""True in the probe's child (and what it starts): it imports the built-in frameworks only, never probes again
(:func:`alflow.plugins.entry_specs` reads it)."""


def printable(text: str) -> str:
    """``text`` with its control and format characters (ESC, RLO) as escapes, as ``repr`` writes them."""
    return text if text.isprintable() else repr(text)[1:-1]


def reason_of(exc: BaseException) -> str:
    """``Type: message`` of a third party's exception, on one line, 500 characters, URLs redacted, controls escaped.

    Its ``__str__`` may itself raise (then only its type is said), or carry a password in a URL.
    """
    try:
        text = f"{type(exc).__name__}: {exc}"
    except Exception:
        text = f"{type(exc).__name__} (its message cannot be read)"
    return printable(redact_urls_in_text(" ".join(text.split())))[:500]


def load_seconds() -> float:
    """The bound of a plugin's import: ``$ALFLOW_PLUGIN_LOAD_S`` when it is a number in (0, 600], else 20 s."""
    try:
        value = float(os.environ.get(PROBE_S_ENV, ""))
    except ValueError:
        return PLUGIN_LOAD_S
    return value if 0.0 < value <= 600.0 else PLUGIN_LOAD_S


def probe(reference: str, seconds: float | None = None, *, origin: str = "") -> str | None:
    """Why the entry point ``reference`` (``module:attribute``) must be left out, or None when it imports cleanly.

    A clean verdict is kept in :func:`cache_file` under the plugin's files as they are (``origin``: its
    distribution's name, version and folder; the size and time of every ``.py`` file of the top packages of the
    spec's module, of its config and plugin references and of what they import, which the child names): the next
    command does not try the same files again, and tries them again when any of them changed.
    """
    bound = load_seconds() if seconds is None else seconds
    ident = _ident(reference, origin)
    tops, kept = next(((t, k) for i, t, k in reversed(_entries()) if i == ident), ((_top(reference),), None))
    key = _signature(reference, origin, tops)
    if key is not None and key == kept:
        return None
    try:
        why, named = _probe(reference, bound)
    except OSError as exc:  # no process could start (EAGAIN under a process limit), no temporary folder
        return f"it could not be tried in a process of its own ({exc.strerror or exc}): left out to be safe"
    if why is None and named is not None:
        if named != tops:  # the first time, or the spec now names another package: signed as it is now
            key = _signature(reference, origin, named)
        if key is not None:
            _remember(ident, named, key)
    return why


MAX_SIGNED_FILES: Final = 2000
"""A plugin package with more files is tried every time (signing it would cost what the probe saves)."""


def cache_file() -> Path:
    """``$XDG_CACHE_HOME/alflow/plugin-probe.json`` (``~/.cache/...``): the plugins found clean, by signature."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "alflow" / "plugin-probe.json"


def _top(reference: str) -> str:
    return reference.partition(":")[0].partition(".")[0]


def _files_of(top: str) -> list[Path] | None:
    """The files of the top-level module or package ``top`` (found, never imported; all of a package's but caches).

    None when it cannot be found or has too many to sign; no files for a built-in module (``builtins``).
    """
    import importlib.util

    try:
        found = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if found is None:
        return None
    where = [Path(p) for p in (found.submodule_search_locations or [])]
    if where:
        # every file, not only .py: round 18 changed a data file the plugin executes and was never tried again
        files = sorted(f for d in where for f in d.rglob("*") if "__pycache__" not in f.parts and f.is_file())
    elif found.origin in (None, "built-in", "frozen"):
        return []
    else:
        files = [Path(found.origin)]
    return files if 0 < len(files) <= MAX_SIGNED_FILES else None


def _folders_of(top: str) -> list[Path] | None:
    """The folders of the package ``top`` (found, never imported), None when it is none or cannot be found."""
    import importlib.util

    try:
        found = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    folders = [Path(p) for p in (found.submodule_search_locations or [])] if found is not None else []
    return folders or None


def _signature(reference: str, origin: str, tops: tuple[str, ...]) -> str | None:
    """A digest of what the probe's verdict depends on, None when a package's files cannot be found and signed.

    ``tops``: the top-level packages of the spec's module and of its config and plugin references (round 11: a
    plugin module in a package of its own was changed, and never tried again), and of what the plugin imported
    itself (round 13: its vendor's helper package changed, and was never tried).
    """
    import hashlib

    from alflow import __version__

    try:
        stats = []
        for top in tops:
            files = _files_of(top)
            if files is None and top != _top(reference):  # a large package it imports (a vendor's SDK)
                files = _folders_of(top)  # signed by its folders: an install or upgrade makes them anew
            if files is None or (not files and top == _top(reference)):
                return None
            stats.append((top, [(str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files]))
    except OSError:
        return None
    ours = Path(__file__).stat()  # a probe that learned more judges again
    text = repr((__version__, ours.st_size, ours.st_mtime_ns, sys.executable, reference, origin, stats))
    return hashlib.sha256(text.encode()).hexdigest()


def _ident(reference: str, origin: str) -> str:
    import hashlib

    return hashlib.sha256(repr((sys.executable, reference, origin)).encode()).hexdigest()[:32]


def _entries() -> list[tuple[str, tuple[str, ...], str]]:
    """The cache's entries: (the plugin's :func:`_ident`, the top packages it was signed over, the signature)."""
    try:
        data = json.loads(cache_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [
        (e[0], tuple(e[1]), e[2])
        for e in (data if isinstance(data, list) else [])
        if isinstance(e, list) and len(e) == 3 and isinstance(e[0], str) and isinstance(e[2], str)
        and isinstance(e[1], list) and all(isinstance(t, str) for t in e[1])
    ]  # fmt: skip


def _remember(ident: str, tops: tuple[str, ...], key: str) -> None:
    from alflow.util.fsutil import atomic_write_bytes

    kept = [[i, list(t), k] for i, t, k in _entries() if i != ident][-255:]
    with contextlib.suppress(OSError):  # a cache that cannot be written: tried again next time
        cache_file().parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(cache_file(), json.dumps([*kept, [ident, list(tops), key]]).encode())


def _probe(reference: str, bound: float) -> tuple[str | None, tuple[str, ...] | None]:
    """The verdict of the child, and the top packages it imported when it found the plugin clean."""
    with tempfile.TemporaryDirectory(prefix="alflow-plugin-probe-") as tmp:
        report, out = Path(tmp) / "report", Path(tmp) / "stdout"
        with out.open("wb") as stdout:
            child = subprocess.Popen(
                [
                    sys.executable,
                    "-P",  # the working folder is not on the path: its json.py would run, as the command's would not
                    "-m",
                    "alflow.plugin_probe",
                    reference,
                    str(report),
                    str(math.ceil(bound) + 1),
                ],
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                # pydantic's own plugins are off there: an unreadable entry_points.txt makes pydantic's loader raise
                env={
                    **os.environ,
                    "PYTHONUNBUFFERED": "1",
                    _CHILD_ENV: "1",
                    "PYDANTIC_DISABLE_PLUGINS": "__all__",
                },
            )
            code: int | None = None
            try:
                code = child.wait(bound)
            except subprocess.TimeoutExpired:
                pass
            finally:  # on a timeout, and on Ctrl-C here: nothing of the child's session runs on
                left = _kill_group(child.pid)
                child.wait()
        if code is None:
            return (
                f"importing its modules did not end within {bound:g} s (tried in a process of its own)",
                None,
            )
        written = out.stat().st_size
        said = report.read_text(encoding="utf-8", errors="replace") if report.exists() else ""
    said, _, named = said.partition("\n")
    if said == _UNJUDGED:
        return None, None
    if said.startswith("error "):
        return said.removeprefix("error "), None
    if said != _OK:
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        return f"its import {how} before it ended (tried in a process of its own)", None
    if written:
        return (
            f"it writes to standard output when imported ({written} bytes): that would corrupt a command's output",
            None,
        )
    if left:
        return "it leaves a process running when imported (it forks or starts one)", None
    return None, tuple(sorted({_top(reference), *named.split()}))


def _kill_group(pid: int) -> bool:
    """Kill what is left of the child's session; whether anything was."""
    try:
        os.killpg(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    return True


def _child(reference: str, report: str, alarm_s: int) -> None:
    """Import the spec, then its config and plugin modules, and say so in ``report`` (never through stdout).

    An alarm ends the child after ``alarm_s`` even when the parent that waits for it was killed. The interpreter's
    shared state is compared before and after (:func:`_interpreter_state`), and the exit hooks the plugin left are
    run (one that ends the process is seen as such).
    """
    signal.alarm(alarm_s)
    try:  # the built-in union before a plugin's config needs it (by name: in this child only; the command's own
        _load("alflow.config.server:ServerBase")  # imports run the other way, plugins -> probe)
        _import_all_of_alflow()  # loaded first: a plugin replacing a function or a method anywhere in it is seen
        for library in (
            *_WATCHED_LIBRARIES,
            *_WATCHED_SUBMODULES,
        ):  # and the libraries watched, so that their
            with contextlib.suppress(ImportError):  # state is taken before
                importlib.import_module(library)
    except (
        BaseException
    ):  # alflow's own failure here, not the plugin's: no verdict (the command meets it itself)
        Path(report).write_text(_UNJUDGED, encoding="utf-8")
        os._exit(0)
    before = _interpreter_state()
    loaded = set(sys.modules)
    try:
        spec = _load(reference)
        parts = [
            p for p in (getattr(spec, "config", None), getattr(spec, "plugin", None)) if isinstance(p, str)
        ]
        for part in parts:
            if ":" in part:
                _load(part)
        time.sleep(GRACE_S)
        changed = _changes(before, _interpreter_state())
        more = f" and {len(changed) - 4} more" if len(changed) > 4 else ""
        said = (
            f"error it changes the interpreter when imported: {', '.join(changed[:4])}{more}"
            if changed
            else "\n".join([_OK, *{_top(p) for p in parts if ":" in p}, *_imported_tops(loaded)])
        )  # the packages its cache key signs: those named, and those the plugin imported itself (round 13)
        atexit._run_exitfuncs()
    except BaseException as exc:  # the in-process load would give the same reason: said the same way
        said = f"error cannot load {reference!r}: {reason_of(exc)}"
    Path(report).write_text(said, encoding="utf-8")
    sys.stdout.flush()
    os._exit(0)  # no plugin's thread runs on


def _imported_tops(before: set[str]) -> set[str]:
    """The top-level packages imported since ``before`` but the standard library's and alflow's (a vendor helper)."""
    return (
        {_top(name) for name in set(sys.modules) - before}
        - set(sys.stdlib_module_names)
        - {"alflow", "__main__"}
    )


def _import_all_of_alflow() -> None:
    """Every module of alflow but its ``__main__`` ones, in the child, before its state is taken (about 1.1 s).

    Only modules loaded before the plugin are compared: one the plugin imported first (``alflow.cli.bench``) and
    patched went unseen (round 9).
    """
    import importlib
    import pkgutil

    import alflow

    for found in pkgutil.walk_packages(alflow.__path__, "alflow.", onerror=lambda _: None):
        if not found.name.endswith("__main__"):
            with contextlib.suppress(ImportError):  # an extra not installed (alflow.tiny's torch): not in use
                importlib.import_module(found.name)


_WATCHED_MODULES: Final = ("builtins", "json", "os", "sys", "logging", "asyncio", "subprocess", "signal", "socket",
                           "threading", "io", "importlib", "html", "re", "urllib.parse", "markupsafe", "math",
                           "time", "statistics", "random", "hashlib", "functools", "shutil", "tempfile", "pathlib",
                           "orjson", "numpy", "polars", "aiohttp", "pydantic", "typer", "warnings", "locale")  # fmt: skip
"""The standard modules alflow relies on: a plugin that replaces one of their functions (``json.dumps``,
``html.escape``) is left out; so is one that replaces a function of any alflow module loaded before it
(``alflow.util.redact.redact_url``)."""
_WATCHED_LIBRARIES: Final = ("aiohttp", "httpx", "jinja2", "yaml", "markupsafe", "multidict", "yarl", "socket", "ssl",
                             "json", "polars", "fsspec", "rich", "numpy", "pydantic", "subprocess", "pathlib", "http",
                             "urllib", "concurrent", "shutil", "tempfile", "io", "logging", "threading")  # fmt: skip
"""Libraries whose every loaded module's functions and classes' methods are watched too (round 14: a plugin patched
``aiohttp.ClientSession._request``, ``httpx.Client.send``, ``jinja2.Environment.__init__``, ``yaml.safe_load``;
round 15: ``socket.socket.send`` read every API key, ``polars.DataFrame.write_parquet`` emptied ``records.parquet``,
``json.JSONEncoder.iterencode``, ``ssl.SSLContext.wrap_socket``, ``rich.console.Console.print``, fsspec's
``LocalFileSystem.open``; round 16: the standard classes a command goes through, ``subprocess.Popen.__init__`` and
``communicate``, ``pathlib.Path.write_text``/``open``/``read_text``, ``http.client.HTTPConnection.request`` and
``putheader``, ``concurrent.futures.ThreadPoolExecutor.submit``, with urllib's, shutil's, tempfile's, io's, logging's
and threading's). About 4,000 classes and 21,600 entries (a class's methods are one entry), about 37 ms of CPU per
state on 2 busy cores, as before round 16 added its 1,300 methods (44 ms with one entry per method)."""
_WATCHED_SUBMODULES: Final = ("json.encoder", "json.decoder", "fsspec.spec", "fsspec.implementations.local",
                              "rich.console", "rich.table", "polars.dataframe.frame", "polars.lazyframe.frame",
                              "http.client", "urllib.request", "concurrent.futures.thread", "logging.handlers")  # fmt: skip
"""Modules of the watched libraries imported before the plugin, so that their state is taken: one the plugin imported
first was not compared (fsspec's local file system, which neither alflow nor polars imports at start;
``concurrent.futures.thread``, which ``concurrent.futures`` imports on first use)."""


def _interpreter_state() -> dict[str, object]:
    """What a plugin must not change in the process that imports it, as comparable values."""
    import importlib
    import logging

    def fd_of(fd: int) -> tuple[int, int] | None:
        try:
            st = os.fstat(fd)
        except OSError:
            return None
        return st.st_dev, st.st_ino

    modules = {name: importlib.import_module(name) for name in _WATCHED_MODULES}
    modules |= {
        name: m
        for name, m in list(sys.modules.items())
        if m is not None and name.partition(".")[0] in ("alflow", *_WATCHED_LIBRARIES)
    }
    state: dict[str, object] = {
        f"{name}.{attr}": id(value)
        for name, module in modules.items()
        for attr, value in vars(module).items()
        if callable(value) and not attr.startswith("__")
    }
    state |= _alflow_values(modules)
    state |= _class_methods(modules)
    umask = os.umask(0o22)
    os.umask(umask)
    state |= _process_settings()
    state |= _runtime_settings()
    state |= {
        "the working folder": str(Path.cwd()),
        "the umask": umask,
        "the environment (a variable alflow, Prefect or a client reads, or one set before)": _environment(),
        "the recursion limit": sys.getrecursionlimit(),
        "sys.stdout, sys.stderr or sys.stdin": (id(sys.stdout), id(sys.stderr), id(sys.stdin)),
        "file descriptors 0-2": tuple(fd_of(fd) for fd in (0, 1, 2)),
        "logging (disabled or the root logger's handlers)": (
            logging.root.manager.disable, tuple(id(h) for h in logging.root.handlers), logging.root.level,
        ),
        "sys.excepthook": (id(sys.excepthook), id(sys.unraisablehook)),
    }  # fmt: skip
    return state


_IMMUTABLE_TYPE: Final = 1 << 8
"""``Py_TPFLAGS_IMMUTABLETYPE``: a class defined in C whose attributes no one can set (``_socket.socket``)."""


def _class_methods(modules: dict[str, ModuleType]) -> dict[str, object]:
    """The methods of alflow's classes and of the watched libraries' (each by ``id``), and each class's method names.

    A run writer's ``write_json`` replaced lost summaries (round 8), aiohttp's ``ClientSession._request`` read every
    API key (round 14). A class is found in any loaded module of its library and named where it is defined
    (``polars.DataFrame`` is ``polars.dataframe.frame.DataFrame``); its names (``CLASS.*``) show a method set on
    the class over one it inherits (round 15: ``socket.socket.send``, which ``_socket.socket`` defines). An alflow
    class's other attributes are compared too (a library's own caches change); classes defined in C are left out
    (no one can set their attributes).
    """
    watched = ("alflow", *_WATCHED_LIBRARIES)
    classes = {
        id(cls): cls
        for name, module in modules.items()
        if name.partition(".")[0] in watched
        for cls in list(vars(module).values())
        if isinstance(cls, type)
        and not cls.__flags__ & _IMMUTABLE_TYPE
        and isinstance(cls.__module__, str)
        and cls.__module__.partition(".")[0] in watched
    }
    state: dict[str, object] = {}
    for where, cls in _named(classes.values()):
        ours = where.startswith("alflow")
        state[f"{where}.*"] = tuple(
            (attr, id(value))
            for attr, value in list(vars(cls).items())
            if callable(value) or (ours and not attr.startswith("__"))
        )
    return state


def _named(classes: Iterable[type]) -> list[tuple[str, type]]:
    """Each class with the name it is defined under, ``NAME[2]``, ``NAME[3]``... for the others of that name.

    Round 16: ``urllib.parse.SplitResult`` subclasses a namedtuple of its own name; the two shared one name, the base's
    methods hid the subclass's, and a method set on the subclass was not seen. Of one name, a base comes before its
    subclasses (the shorter MRO first), then the order they were found in (the same before and after the plugin).
    """
    by_name: dict[str, list[type]] = {}
    for cls in classes:
        by_name.setdefault(f"{cls.__module__}.{cls.__qualname__}", []).append(cls)
    return [
        (where if n == 1 else f"{where}[{n}]", cls)
        for where, same in by_name.items()
        for n, cls in enumerate(sorted(same, key=lambda c: len(c.__mro__)), start=1)
    ]


def _changes(before: dict[str, object], after: dict[str, object]) -> list[str]:
    """The names of what differs between two :func:`_interpreter_state`, each named once.

    A class's methods (``CLASS.*``: its (name, id) pairs) that differ are said one by one, those replaced or deleted
    first, then those set (``socket.socket.send``).
    """
    named: list[str] = []
    for name, value in before.items():
        now = after.get(name)
        if now == value:
            continue
        if name.endswith(".*") and isinstance(value, tuple) and isinstance(now, tuple):
            was, has = dict(value), dict(now)
            gone = [attr for attr, ident in was.items() if has.get(attr) != ident]
            named += [f"{name[:-2]}.{attr}" for attr in (*gone, *(a for a in has if a not in was))]
        else:
            named.append(name)
    return list(dict.fromkeys(named))


_CONTENT_ITEMS: Final = 4096
"""How many items of one alflow value :func:`_contents` reads at most (its ids), nested ones included."""
_MUTABLE: Final = (dict, list, set, bytearray, MappingProxyType)
_CACHES: Final = frozenset({"alflow.util.rows._ADAPTERS"})
"""alflow's caches that any use fills (a plugin that stores a row at import): compared by ``id`` alone."""


def _alflow_values(modules: dict[str, ModuleType]) -> dict[str, object]:
    """The values of alflow's modules that are not functions: each by ``id``, a mutable container by its contents too.

    Round 13: a plugin rebound ``alflow.util.free_text._TOKEN_HINTS`` (a tuple: free-text redaction off) and cleared
    ``alflow.site.guard.HEADERS`` in place (a dict: no security headers); neither was a callable, so neither was seen.
    """
    return {
        f"{name}.{attr}": (
            id(value),
            _contents(value) if isinstance(value, _MUTABLE) and f"{name}.{attr}" not in _CACHES else None,
        )
        for name, module in modules.items()
        if name.startswith("alflow")
        for attr, value in list(vars(module).items())
        if not callable(value) and not attr.startswith("__")
    }


def _contents(value: object) -> int:
    """A fingerprint of what a container holds: the ids of its items, nested containers' too, in order.

    Read by identity (no ``repr``, no ``==``: no third party's code runs) and bounded (:data:`_CONTENT_ITEMS` items
    in all), so a cycle or a large table costs little; a set is read without its order, which adding and removing
    may change.
    """
    seen: list[int] = []
    stack = [value]
    while stack and len(seen) < _CONTENT_ITEMS:
        item = stack.pop()
        seen.append(id(item))
        try:
            if isinstance(item, bytearray):
                seen.extend((len(item), hash(bytes(item[:_CONTENT_ITEMS]))))
            elif isinstance(item, (set, frozenset)):
                seen.extend(
                    (len(item), hash(frozenset(id(i) for i in itertools.islice(item, _CONTENT_ITEMS))))
                )
            elif isinstance(item, (dict, MappingProxyType)):
                seen.append(len(item))
                stack.extend(v for pair in itertools.islice(item.items(), _CONTENT_ITEMS) for v in pair)
            elif isinstance(item, (list, tuple)):
                seen.append(len(item))
                stack.extend(itertools.islice(item, _CONTENT_ITEMS))
        except (
            RuntimeError
        ):  # a thread changes it as it is read: changed (alflow's own start none in the probe)
            seen.append(-1)
    return hash(tuple(seen))


_READ_PREFIXES: Final = ("ALFLOW_", "PREFECT_", "OPENAI_", "HF_", "HUGGING_FACE", "VLLM_", "SGLANG_", "NO_PROXY",
                         "HTTP_PROXY", "HTTPS_PROXY", "SSL_", "REQUESTS_CA", "PYTHON", "DO_NOT_TRACK", "AWS_",
                         "GOOGLE_", "AZURE_", "TZ", "LC_", "LANG", "POLARS_")  # fmt: skip
_ENV_AT_START: Final = frozenset(os.environ)


def _environment() -> tuple[tuple[str, str], ...]:
    """The variables set when the process started, and any whose name alflow or its clients read (a proxy, a key)."""
    return tuple(
        sorted(
            (name, value)
            for name, value in os.environ.items()
            if name in _ENV_AT_START or name.upper().startswith(_READ_PREFIXES)
        )
    )


def _process_settings() -> dict[str, object]:
    """What the import machinery, sockets, TLS and the runtime use process-wide.

    Round 10: a plugin put a folder first on ``sys.path`` whose ``platform.py`` wrote to stdout, replaced
    ``__import__``, set a socket timeout of 0.5 s, 64 open files, TLS unverified.
    """
    import builtins
    import gc
    import socket
    import ssl

    return {
        "sys.path": tuple(sys.path),
        "sys.meta_path or sys.path_hooks": (tuple(map(id, sys.meta_path)), tuple(map(id, sys.path_hooks))),
        "builtins.__import__": id(builtins.__import__),
        "the socket default timeout": socket.getdefaulttimeout(),
        "the thread switch interval": sys.getswitchinterval(),
        "the garbage collector": (gc.isenabled(), gc.get_threshold()),
        "TLS verification (ssl's default context)": (
            id(ssl._create_default_https_context),
            id(ssl.create_default_context),
        ),
    }


def _runtime_settings() -> dict[str, object]:
    """What else a command's output, files and errors depend on, process-wide (each named when it changes).

    Round 11: a plugin made every warning an error, numpy raise on a division, stderr ASCII-strict (an error line
    naming ``modèle`` was lost), alflow's logger disabled, files past 20,000 bytes fail (``RLIMIT_FSIZE``), SIGPIPE
    ignored, a trace function set, the time zone, locale and polars' table format changed, an S3 endpoint redirected
    (``AWS_ENDPOINT_URL``: :func:`_environment`).
    """
    import locale
    import logging
    import resource
    import threading
    import warnings

    import numpy
    import polars

    loggers = logging.root.manager.loggerDict
    named = [("root", logging.root)] + [
        (n, lg)
        for n, lg in sorted(loggers.items())
        if isinstance(lg, logging.Logger) and (n in ("alflow", "prefect") or n.startswith("alflow."))
    ]
    limits = {getattr(resource, n): n for n in sorted(dir(resource), reverse=True) if n.startswith("RLIMIT_")}
    return {
        "the warnings filters (an error, or one for every warning)": tuple(
            f for f in warnings.filters if f[0] == "error" or (f[1] is None and f[3] is None and f[2] is Warning)
        ),
        "numpy's floating-point errors (numpy.seterr)": (tuple(sorted(numpy.geterr().items())), id(numpy.geterrcall())),
        "the encoding or errors of sys.stdout, sys.stderr or sys.stdin": tuple(
            (getattr(f, "encoding", None), getattr(f, "errors", None)) for f in (sys.stdout, sys.stderr, sys.stdin)
        ),
        "the alflow, prefect or root logger's level or disabled flag": tuple(
            (n, lg.level, lg.disabled, lg.propagate)
            for n, lg in named
            if n in ("root", "alflow", "prefect") or lg.level or lg.disabled or not lg.propagate
        ),
        "sys.get_int_max_str_digits()": sys.get_int_max_str_digits(),
        **{f"the resource limit {name}": resource.getrlimit(limit) for limit, name in limits.items()},
        **{f"the {getattr(s, 'name', s)} handler": id(signal.getsignal(s)) for s in sorted(signal.valid_signals())},
        "a trace or profile function (sys.settrace, sys.setprofile)": tuple(
            id(f()) for f in (sys.gettrace, sys.getprofile, threading.gettrace, threading.getprofile)
        ),
        "the time zone (time.tzset)": (time.timezone, time.altzone, time.daylight, time.tzname),
        "the locale (locale.setlocale)": locale.setlocale(locale.LC_ALL),
        "polars' configuration (polars.Config)": tuple(sorted(map(repr, polars.Config.state().items()))),
    }  # fmt: skip


def _load(reference: str) -> object:
    import importlib

    module, _, attribute = reference.partition(":")
    return getattr(importlib.import_module(module), attribute)


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2], int(sys.argv[3]))
