"""Each third-party framework plugin tried in a process of its own before alflow imports it into its own.

A plugin's modules run inside the command that imports them: what they do at import (never return, call
``os._exit``, fork, write to file descriptor 1 under a command's JSON) would happen to the command, and an import
cannot be stopped from another thread (:func:`alflow.plugins.resolve_within` bounds only the spec module, and the
config module is imported where alflow's configuration builds its model of every framework). So the command line
first imports each entry point's spec, config and plugin modules here, in a child process in a session of its own
(:func:`probe`), bounded in time; a plugin whose child does not end in time, ends without saying it is done, writes
to its standard output, leaves a process behind, or changes the interpreter's shared state (a standard function
replaced, the recursion limit, the standard streams, logging, signal handlers; an exit hook that ends the process) is
left out with that reason (one warning) and never imported by the command. The child imports alflow's configuration first with the built-in frameworks only, so a plugin is
blamed for its own modules alone.

What the probe cannot see: a thread a plugin starts that acts later than :data:`GRACE_S` after its import, and a
plugin that acts only in some processes.

Run as ``python -m alflow.plugin_probe REFERENCE REPORT_FILE`` by :func:`probe`.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
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
    distribution's name, version and folder; the size and time of every ``.py`` file of the spec's top package):
    the next command does not try the same files again.
    """
    bound = load_seconds() if seconds is None else seconds
    key = _signature(reference, origin)
    if key is not None and key in _cached():
        return None
    try:
        why = _probe(reference, bound)
    except OSError as exc:  # no process could start (EAGAIN under a process limit), no temporary folder
        return f"it could not be tried in a process of its own ({exc.strerror or exc}): left out to be safe"
    if why is None and key is not None:
        _remember(key)
    return why


MAX_SIGNED_FILES: Final = 2000
"""A plugin package with more ``.py`` files is tried every time (signing it would cost what the probe saves)."""


def cache_file() -> Path:
    """``$XDG_CACHE_HOME/alflow/plugin-probe.json`` (``~/.cache/...``): the plugins found clean, by signature."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "alflow" / "plugin-probe.json"


def _signature(reference: str, origin: str) -> str | None:
    """A digest of what the probe's verdict depends on, None when the spec's files cannot be found and signed."""
    import hashlib
    import importlib.util

    from alflow import __version__

    top = reference.partition(":")[0].partition(".")[0]
    try:
        found = importlib.util.find_spec(top)  # a top-level name: found, never imported
        where = [Path(p) for p in (found.submodule_search_locations or [])] if found is not None else []
        files = sorted(f for d in where for f in d.rglob("*.py")) if where else []
        if found is not None and found.origin and not where:
            files = [Path(found.origin)]
        if not files or len(files) > MAX_SIGNED_FILES:
            return None
        stats = [(str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files]
    except (ImportError, ValueError, OSError):
        return None
    ours = Path(__file__).stat()  # a probe that learned more judges again
    text = repr((__version__, ours.st_size, ours.st_mtime_ns, sys.executable, reference, origin, stats))
    return hashlib.sha256(text.encode()).hexdigest()


def _cached() -> set[str]:
    try:
        data = json.loads(cache_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    return {k for k in data if isinstance(k, str)} if isinstance(data, list) else set()


def _remember(key: str) -> None:
    from alflow.util.fsutil import atomic_write_bytes

    keys = [*[k for k in _cached() if k != key][-255:], key]
    with contextlib.suppress(OSError):  # a cache that cannot be written: tried again next time
        cache_file().parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(cache_file(), json.dumps(keys).encode())


def _probe(reference: str, bound: float) -> str | None:
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
            return f"importing its modules did not end within {bound:g} s (tried in a process of its own)"
        written = out.stat().st_size
        said = report.read_text(encoding="utf-8", errors="replace") if report.exists() else ""
    if said == _UNJUDGED:
        return None
    if said.startswith("error "):
        return said.removeprefix("error ")
    if said != _OK:
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        return f"its import {how} before it ended (tried in a process of its own)"
    if written:
        return f"it writes to standard output when imported ({written} bytes): that would corrupt a command's output"
    if left:
        return "it leaves a process running when imported (it forks or starts one)"
    return None


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
    except (
        BaseException
    ):  # alflow's own failure here, not the plugin's: no verdict (the command meets it itself)
        Path(report).write_text(_UNJUDGED, encoding="utf-8")
        os._exit(0)
    before = _interpreter_state()
    try:
        spec = _load(reference)
        for part in (getattr(spec, "config", None), getattr(spec, "plugin", None)):
            if isinstance(part, str) and ":" in part:
                _load(part)
        time.sleep(GRACE_S)
        after = _interpreter_state()
        changed = [name for name, value in before.items() if after.get(name) != value]
        more = f" and {len(changed) - 4} more" if len(changed) > 4 else ""
        said = (
            f"error it changes the interpreter when imported: {', '.join(changed[:4])}{more}"
            if changed
            else _OK
        )
        atexit._run_exitfuncs()
    except BaseException as exc:  # the in-process load would give the same reason: said the same way
        said = f"error cannot load {reference!r}: {reason_of(exc)}"
    Path(report).write_text(said, encoding="utf-8")
    sys.stdout.flush()
    os._exit(0)  # no plugin's thread runs on


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
                           "orjson", "numpy", "polars", "aiohttp", "pydantic", "typer")  # fmt: skip
"""The standard modules alflow relies on: a plugin that replaces one of their functions (``json.dumps``,
``html.escape``) is left out; so is one that replaces a function of any alflow module loaded before it
(``alflow.util.redact.redact_url``)."""


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
        name: m for name, m in list(sys.modules.items()) if name.startswith("alflow") and m is not None
    }
    state: dict[str, object] = {
        f"{name}.{attr}": id(value)
        for name, module in modules.items()
        for attr, value in vars(module).items()
        if callable(value) and not attr.startswith("__")
    }
    state |= {  # the methods of alflow's own classes (a run writer's write_json replaced lost summaries)
        f"{name}.{cls.__name__}.{attr}": id(value)
        for name, module in modules.items()
        if name.startswith("alflow")
        for cls in list(vars(module).values())
        if isinstance(cls, type) and cls.__module__ == name
        for attr, value in list(vars(cls).items())
        if not attr.startswith("__")
    }
    umask = os.umask(0o22)
    os.umask(umask)
    state |= _process_settings()
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
        "signal handlers": tuple(
            id(signal.getsignal(s)) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD)
        ),
        "sys.excepthook": (id(sys.excepthook), id(sys.unraisablehook)),
    }  # fmt: skip
    return state


_READ_PREFIXES: Final = ("ALFLOW_", "PREFECT_", "OPENAI_", "HF_", "HUGGING_FACE", "VLLM_", "SGLANG_", "NO_PROXY",
                         "HTTP_PROXY", "HTTPS_PROXY", "SSL_", "REQUESTS_CA", "PYTHON", "DO_NOT_TRACK")  # fmt: skip
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
    import resource
    import socket
    import ssl

    return {
        "sys.path": tuple(sys.path),
        "sys.meta_path or sys.path_hooks": (tuple(map(id, sys.meta_path)), tuple(map(id, sys.path_hooks))),
        "builtins.__import__": id(builtins.__import__),
        "the socket default timeout": socket.getdefaulttimeout(),
        "the open-file limit": resource.getrlimit(resource.RLIMIT_NOFILE),
        "the thread switch interval": sys.getswitchinterval(),
        "the garbage collector": (gc.isenabled(), gc.get_threshold()),
        "TLS verification (ssl's default context)": (
            id(ssl._create_default_https_context),
            id(ssl.create_default_context),
        ),
    }


def _load(reference: str) -> object:
    import importlib

    module, _, attribute = reference.partition(":")
    return getattr(importlib.import_module(module), attribute)


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2], int(sys.argv[3]))
