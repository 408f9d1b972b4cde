"""A third-party framework plugin through the ``alflow.frameworks`` entry point group, installed as a distribution.

The plugin is a real package with a ``.dist-info`` (``entry_points.txt``) on ``PYTHONPATH``, read by
:mod:`importlib.metadata` in a fresh ``alflow`` process: the same path ``pip install`` takes.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from alflow.plugins import BUILTIN

pytestmark = pytest.mark.integration

BUILT_IN = [spec.name for spec in BUILTIN]
"""The built-in frameworks, in the order lists show them."""

SPEC = """
from alflow.plugins import FrameworkSpec

SPEC = FrameworkSpec("demoengine", "demo_engine_alflow.config:DemoServer", "demo_engine_alflow.plugin:PLUGIN")
"""
CONFIG = """
from typing import Literal

from pydantic import Field

from alflow.config.server import ServerBase


class DemoServer(ServerBase):
    framework: Literal["demoengine"] = Field("demoengine", description="Serving framework: demoengine.")
"""
PLUGIN = """
from dataclasses import dataclass

from alflow.frameworks.launch import Launch
from alflow.frameworks.recipe_kit import bind_host_of, resolve_port
from alflow.frameworks.registry import Framework


@dataclass(frozen=True)
class DemoRecipe:
    framework: str = "demoengine"
    default_image: str | None = "demo/engine:1.0"

    def build(self, config):
        port = resolve_port(config)
        return Launch(
            framework="demoengine",
            dialect="vllm",
            model=config.model,
            argv=("demo-serve", config.model, "--port", str(port)),
            port=port,
            host=bind_host_of(config),
            image=config.image or self.default_image,
        )


PLUGIN = Framework(name="demoengine", title="Demo Engine", recipe=DemoRecipe(), gpu="nvidia")
"""
PROBE = """
from alflow.config import server_config
from alflow.frameworks.recipes import build_launch
from alflow.plugins import framework_names

config = server_config(framework="demoengine", model="org/model")
print(type(config).__name__, build_launch(config).argv[:2], framework_names())
"""


def _install(root: Path, entry: str) -> None:
    package = root / "demo_engine_alflow"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name, text in (("spec", SPEC), ("config", CONFIG), ("plugin", PLUGIN)):
        (package / f"{name}.py").write_text(textwrap.dedent(text))
    info = root / "demo_engine_alflow-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: demo-engine-alflow\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[alflow.frameworks]\n{entry}\n")


def _run(root: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=120, check=False, cwd=cwd)


FIFTH = {
    "spec": """
        from alflow.plugins import FrameworkSpec

        SPEC = FrameworkSpec("fifth", "fifth_alflow.config:FifthServer", "fifth_alflow.plugin:PLUGIN")
    """,
    "config": """
        from typing import Literal

        from pydantic import Field

        from alflow.frameworks.sim.config import SimServer


        class FifthServer(SimServer):
            framework: Literal["fifth"] = Field("fifth", description="Serving framework: fifth.")
    """,
    "plugin": """
        from dataclasses import dataclass

        from alflow.frameworks.sim.recipe import SimRecipe
        from alflow.frameworks.registry import Framework


        @dataclass(frozen=True)
        class FifthRecipe(SimRecipe):
            framework: str = "fifth"
            default_image: str | None = "fifth/engine:1.0"


        PLUGIN = Framework(name="fifth", title="Fifth Engine", recipe=FifthRecipe())
    """,
}
"""A fifth framework as a third party writes it: alflow's simulated engine under a name of its own (it speaks vLLM's
API and metrics), in one package: its spec, its config model and its plugin."""
FIFTH_PRESET = """
description: "a fifth framework (alflow's simulated engine under its own name) as a local process"
server: {framework: fifth, model: demo-llama-70b, extra_args: ["--time-scale", "0"]}
placement: {runner: {kind: process}, results_root: results}
model: {id: demo-llama-70b}
method: mtp
k: 3
benchmark:
  workload: {kind: random, isl: 64, osl: 32}
  concurrencies: [4]
"""


def test_a_fifth_framework_is_one_package_one_entry_point_and_one_preset_and_runs_m2(tmp_path: Path) -> None:
    package = tmp_path / "fifth_alflow"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name, text in FIFTH.items():
        (package / f"{name}.py").write_text(textwrap.dedent(text))
    info = tmp_path / "fifth_alflow-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fifth-alflow\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[alflow.frameworks]\nfifth = fifth_alflow.spec:SPEC\n")
    work = tmp_path / "work"
    (work / "presets").mkdir(parents=True)
    (work / "presets" / "fifth.yaml").write_text(FIFTH_PRESET)
    run = _run(
        tmp_path, sys.executable, "-m", "alflow.cli", "run", "m2", "--preset", "fifth", "--target-al", "2.5", "--json",
        cwd=work,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    outcome = json.loads(run.stdout)
    (point,) = outcome["points"]
    assert (point["framework"], point["valid"], point["target_al"]) == ("fifth", True, 2.5)
    assert point["audit"].startswith("synthetic audit passed for fifth K=3 concurrency 4")
    assert (work / outcome["run_dir"] / "report.md").exists()


def test_a_plugin_from_an_entry_point_is_a_framework_like_the_built_in_ones(tmp_path: Path) -> None:
    _install(tmp_path, "demoengine = demo_engine_alflow.spec:SPEC")
    listed = _run(tmp_path, sys.executable, "-m", "alflow.cli", "frameworks", "--json")
    assert listed.returncode == 0, listed.stderr
    data = json.loads(listed.stdout)
    names = [f["name"] for f in data["frameworks"]]
    assert names == [*BUILT_IN, "demoengine"]
    demo = data["frameworks"][-1]
    assert demo["source"] == "demo_engine_alflow.plugin:PLUGIN"
    assert demo["title"] == "Demo Engine"
    assert data["left_out"] == []
    probe = _run(tmp_path, sys.executable, "-c", PROBE)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.startswith("DemoServer ('demo-serve', 'org/model')")


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ("demoengine = demo_engine_alflow.missing:SPEC", "No module named 'demo_engine_alflow.missing'"),
        ("other = demo_engine_alflow.spec:SPEC", "must be a FrameworkSpec named 'other'"),
        ("vllm = demo_engine_alflow.spec:SPEC", "must be a FrameworkSpec named 'vllm'"),
    ],
)
def test_a_broken_plugin_is_left_out_with_its_reason_and_the_rest_work(
    tmp_path: Path, entry: str, reason: str
) -> None:
    _install(tmp_path, entry)
    listed = _run(tmp_path, sys.executable, "-m", "alflow.cli", "frameworks", "--json")
    assert listed.returncode == 0, listed.stderr
    data = json.loads(listed.stdout)
    assert [f["name"] for f in data["frameworks"]] == BUILT_IN
    (left_out,) = data["left_out"]
    assert reason in left_out
    assert "framework plugin left out" in listed.stderr


PARTS = (
    "from alflow.plugins import FrameworkSpec\n"
    "SPEC = FrameworkSpec('evil', 'evil_alflow.config:EvilServer', 'evil_alflow.config:PLUGIN')"
)
HOSTILE = {
    "raises at import": ("SPEC = 1 / 0", "", "ZeroDivisionError: division by zero"),
    "exits at import": ("import sys\nsys.exit(3)", "", "SystemExit: 3"),
    "a config that is no server model": (
        "from alflow.plugins import FrameworkSpec\nSPEC = FrameworkSpec('evil', 'builtins:dict', 'builtins:len')",
        "",
        "builtins:dict is not a server configuration model",
    ),
    "a plugin that is no Framework": (
        "from alflow.plugins import FrameworkSpec\n"
        "SPEC = FrameworkSpec('evil', 'evil_alflow.config:EvilServer', 'builtins:len')",
        "from typing import Literal\nfrom alflow.config.server import ServerBase\n\n\n"
        "class EvilServer(ServerBase):\n    framework: Literal['evil'] = 'evil'\n",
        "builtins:len is not a Framework named 'evil'",
    ),
    # hostile round 5: what a module does to the process that imports it (tried in a process of its own first)
    "a config module that never returns": (PARTS, "import time\ntime.sleep(3600)\n", "did not end within 3 s"),
    "a config module that ends the process": (PARTS, "import os\nos._exit(7)\n", "exited with code 7"),
    "a config module that writes to fd 1": (
        PARTS, "import os\nos.write(1, b'{not json')\nEvilServer = PLUGIN = 1\n", "writes to standard output"
    ),
    "a config module that prints from a thread": (
        PARTS,
        "import threading\nthreading.Timer(0.05, print, ('late',)).start()\nEvilServer = PLUGIN = 1\n",
        "writes to standard output",
    ),
    "a config module that forks": (
        PARTS,
        "import os, time\nif os.fork() == 0:\n    time.sleep(60)\n    os._exit(0)\nEvilServer = PLUGIN = 1\n",
        "leaves a process running",
    ),
    # hostile round 6: a module that changes the interpreter the command runs in
    "a config module that replaces json.dumps": (
        PARTS, "import json\njson.dumps = len\nEvilServer = PLUGIN = 1\n", "changes the interpreter when imported: json.dumps"
    ),
    "a config module that lowers the recursion limit": (
        PARTS, "import sys\nsys.setrecursionlimit(30)\nEvilServer = PLUGIN = 1\n", "the recursion limit"
    ),
    "a config module whose exit hook ends the process": (
        PARTS, "import atexit, os\natexit.register(os._exit, 0)\nEvilServer = PLUGIN = 1\n", "exited with code 0"
    ),
    "a config module that silences stderr": (
        PARTS, "import os, sys\nsys.stderr = open(os.devnull, 'w')\nEvilServer = PLUGIN = 1\n", "sys.stdout, sys.stderr"
    ),
    # hostile round 7: left out, yet imported into the command, it switched escaping and redaction off there
    "a config module that patches html.escape and alflow's redaction": (
        PARTS,
        "import html, alflow.util.redact as r\nhtml.escape = str\nr.redact_url = str\nEvilServer = PLUGIN = 1\n",
        "html.escape, alflow.util.redact.redact_url",
    ),
    "a config module that closes fd 1": (PARTS, "import os\nos.close(1)\nEvilServer = PLUGIN = 1\n", "file descriptors 0-2"),
    # hostile round 8: what the probe did not compare (a run wrote its files elsewhere, world-writable, or none)
    "a config module that changes the working folder": (
        PARTS, "import os\nos.chdir('/')\nEvilServer = PLUGIN = 1\n", "the working folder"
    ),
    "a config module that clears the umask": (PARTS, "import os\nos.umask(0)\nEvilServer = PLUGIN = 1\n", "the umask"),
    "a config module that sets a client's key": (
        PARTS, "import os\nos.environ['OPENAI_API_KEY'] = 'x'\nEvilServer = PLUGIN = 1\n", "the environment"
    ),
    "a config module that replaces a method of the run store": (
        PARTS,
        "import alflow.results.store as s\ns.RunWriter.write_json = lambda *a: None\nEvilServer = PLUGIN = 1\n",
        "alflow.results.store.RunWriter.write_json",
    ),
    # hostile round 9: a module of alflow's that the plugin imported first, and a standard module not watched before
    "a config module that imports and patches alflow's CLI": (
        PARTS, "import alflow.cli.bench as b\nb.redact_url = str\nEvilServer = PLUGIN = 1\n", "alflow.cli.bench.redact_url"
    ),
    "a config module that replaces math.isfinite": (
        PARTS, "import math\nmath.isfinite = bool\nEvilServer = PLUGIN = 1\n", "math.isfinite"
    ),
    # hostile round 10: the import machinery and process-wide settings
    "a config module that puts a folder first on sys.path": (
        PARTS, "import sys\nsys.path.insert(0, '/nonexistent-r10')\nEvilServer = PLUGIN = 1\n", "sys.path"
    ),
    "a config module that sets a socket timeout": (
        PARTS, "import socket\nsocket.setdefaulttimeout(0.5)\nEvilServer = PLUGIN = 1\n", "the socket default timeout"
    ),
    # hostile round 11: process-wide settings the probe did not compare (a run's files cut at 20,000 bytes, an error
    # line lost to an ASCII-strict stderr, alflow's warnings silenced, an s3:// results root redirected)
    "a config module that makes every warning an error": (
        PARTS, "import warnings\nwarnings.simplefilter('error')\nEvilServer = PLUGIN = 1\n", "the warnings filters"
    ),
    "a config module that makes stderr ASCII-strict": (
        PARTS, "import sys\nsys.stderr.reconfigure(errors='strict', encoding='ascii')\nEvilServer = PLUGIN = 1\n",
        "the encoding or errors of sys.stdout, sys.stderr",
    ),
    "a config module that disables alflow's logger": (
        PARTS, "import logging\nlogging.getLogger('alflow').disabled = True\nEvilServer = PLUGIN = 1\n",
        "logger's level or disabled flag",
    ),
    "a config module that limits the size of a file": (
        PARTS, "import resource\nresource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))\nEvilServer = PLUGIN = 1\n",
        "the resource limit RLIMIT_FSIZE",
    ),
    "a config module that restores SIGPIPE's default": (
        PARTS, "import signal\nsignal.signal(signal.SIGPIPE, signal.SIG_DFL)\nEvilServer = PLUGIN = 1\n",
        "the SIGPIPE handler",
    ),
    "a config module that sets a trace function": (
        PARTS, "import sys\nsys.settrace(lambda *a: None)\nEvilServer = PLUGIN = 1\n", "a trace or profile function"
    ),
    "a config module that redirects S3": (
        PARTS, "import os\nos.environ['AWS_ENDPOINT_URL'] = 'http://127.0.0.1:9'\nEvilServer = PLUGIN = 1\n",
        "the environment",
    ),
    "a config module that sets numpy to raise and the locale": (
        PARTS,
        "import locale, numpy\nnumpy.seterr(all='raise')\nlocale.setlocale(locale.LC_NUMERIC, 'C.UTF-8')\n"
        "EvilServer = PLUGIN = 1\n",
        "numpy's floating-point errors (numpy.seterr), the locale",
    ),
    # hostile round 13: a value of alflow's, not a function, rebound or changed in place (redaction and the site's
    # security headers silently off)
    "a config module that rebinds alflow's redaction hints (a tuple)": (
        PARTS, "import alflow.util.free_text as r\nr._TOKEN_HINTS = ('\\x00',)\nEvilServer = PLUGIN = 1\n",
        "changes the interpreter when imported: alflow.util.free_text._TOKEN_HINTS",
    ),
    "a config module that rebinds alflow's redaction pattern (a compiled regex)": (
        PARTS, "import re, alflow.util.free_text as r\nr._AUTH_VALUE = re.compile('(?!)')\nEvilServer = PLUGIN = 1\n",
        "changes the interpreter when imported: alflow.util.free_text._AUTH_VALUE",
    ),
    "a config module that clears the site's security headers in place (a dict)": (
        PARTS, "import alflow.site.guard as g\ng.HEADERS.clear()\nEvilServer = PLUGIN = 1\n",
        "changes the interpreter when imported: alflow.site.guard.HEADERS",
    ),
    # hostile round 15: a class's method of a watched library replaced (socket's read every API key, polars' emptied
    # records.parquet), or set over an inherited one (socket.socket.send, LocalFileSystem.open)
    **{
        f"a config module that patches {where}.{attr}": (
            PARTS,
            f"import {module}\n_o = {module}.{owner}.{attr}\n"
            f"def _p(self, *a, **k):\n    return _o(self, *a, **k)\n{module}.{owner}.{attr} = _p\nEvilServer = PLUGIN = 1\n",
            f"changes the interpreter when imported: {where}.{attr}",
        )
        for module, owner, attr, where in (
            ("socket", "socket", "send", "socket.socket"),
            ("polars", "DataFrame", "write_parquet", "polars.dataframe.frame.DataFrame"),
            ("json", "JSONEncoder", "iterencode", "json.encoder.JSONEncoder"),
            ("ssl", "SSLContext", "wrap_socket", "ssl.SSLContext"),
            ("rich.console", "Console", "print", "rich.console.Console"),
            ("fsspec.implementations.local", "LocalFileSystem", "open", "fsspec.implementations.local.LocalFileSystem"),
        )
    },
}  # fmt: skip
"""Third-party plugins that break as they load: (the spec module, its config module, the reason listed)."""


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_plugin_is_left_out_once_and_never_stops_a_command(
    tmp_path: Path, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Round 3 of #49: a plugin that raised or exited on import broke every command, even ``alflow --version``."""
    spec, config, reason = HOSTILE[case]
    # only the plugin that never returns waits out the bound; the others get one a loaded CI machine never reaches
    # (the probe's cold import of alflow takes ~3 s on 2 busy cores: a 3 s bound made a slow probe read as a hang)
    monkeypatch.setenv("ALFLOW_PLUGIN_LOAD_S", "3" if "did not end within" in reason else "60")
    package = tmp_path / "evil_alflow"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "spec.py").write_text(spec + "\n")
    (package / "config.py").write_text(config)
    info = tmp_path / "evil_alflow-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: evil-alflow\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[alflow.frameworks]\nevil = evil_alflow.spec:SPEC\n")
    alflow = [sys.executable, "-m", "alflow.cli"]
    for quiet in (["--version"], ["--help"], ["run", "m2", "--help"]):  # these load no plugin at all
        answer = _run(tmp_path, *alflow, *quiet)
        assert answer.returncode == 0, (quiet, answer.stderr[-800:])
        assert answer.stderr == "", quiet
    listed = _run(tmp_path, *alflow, "frameworks", "--json")
    assert listed.returncode == 0, listed.stderr[-800:]
    data = json.loads(listed.stdout)
    assert [f["name"] for f in data["frameworks"]] == BUILT_IN
    (left_out,) = data["left_out"]
    assert reason in left_out
    assert "evil-alflow 0.1" in left_out  # the distribution to blame
    warnings = [line for line in listed.stderr.splitlines() if "framework plugin left out" in line]
    assert len(warnings) == 1, listed.stderr
    dry = _run(tmp_path, *alflow, "run", "m2", "--preset", "sim", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr[-800:]
    json.loads(dry.stdout)  # nothing the plugin wrote reached the command's output
    assert _probes_of(tmp_path) == [], "the probe left a process behind"


def _probes_of(root: Path) -> list[int]:
    """The plugin probes still running for the plugin at ``root`` (other tests' probes run beside, on xdist)."""
    found = subprocess.run(
        ["pgrep", "-f", "alflow.plugin_probe"], capture_output=True, text=True, check=False
    )
    mine = []
    for pid in found.stdout.split():
        with contextlib.suppress(OSError):  # ended meanwhile
            if str(root).encode() in Path(f"/proc/{pid}/environ").read_bytes():  # its PYTHONPATH
                mine.append(int(pid))
    return mine


def test_an_unparsable_entry_points_file_leaves_plugins_out_with_one_warning_and_every_command_answers(
    tmp_path: Path,
) -> None:
    """Hostile round 4: a distribution whose entry_points.txt has a line without ``=`` made ``--help`` and every
    command a traceback (Python's reader, and pydantic's plugin loader reading the same file)."""
    _install(tmp_path, "demoengine = demo_engine_alflow.spec:SPEC")  # a good plugin beside it still loads
    info = tmp_path / "bad_alflow-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: bad-alflow\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[alflow.frameworks]\nthis line has no equals sign\n")
    for args in (("--help",), ("frameworks", "--json")):
        ran = _run(tmp_path, sys.executable, "-m", "alflow.cli", *args)
        assert ran.returncode == 0, ran.stderr[-1500:]
        assert "Traceback" not in ran.stderr
        (warning,) = [line for line in ran.stderr.splitlines() if "cannot be read" in line]
        assert warning.startswith("the entry points of bad-alflow 0.1 (")
    assert [f["name"] for f in json.loads(ran.stdout)["frameworks"]] == [*BUILT_IN, "demoengine"]


def test_a_plugin_whose_modules_live_in_another_package_is_tried_again_when_they_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hostile round 11 (R11-5): the probe's kept verdict signed the spec's own package alone; a plugin module in
    another package that began to print at import was imported unprobed, and its text led ``--json`` output."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for top in ("specpkg", "implpkg"):
        (tmp_path / top).mkdir()
        (tmp_path / top / "__init__.py").write_text("")
    (tmp_path / "specpkg" / "spec.py").write_text(SPEC.replace("demo_engine_alflow.", "implpkg."))
    (tmp_path / "implpkg" / "config.py").write_text(textwrap.dedent(CONFIG))
    (tmp_path / "implpkg" / "plugin.py").write_text(textwrap.dedent(PLUGIN))
    info = tmp_path / "specpkg-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: specpkg\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[alflow.frameworks]\ndemoengine = specpkg.spec:SPEC\n")
    listed = _run(tmp_path, sys.executable, "-m", "alflow.cli", "frameworks", "--json")
    assert json.loads(listed.stdout)["frameworks"][-1]["name"] == "demoengine", listed.stderr[-800:]
    with (tmp_path / "implpkg" / "plugin.py").open("a") as plugin:
        plugin.write('print("GARBAGE FROM PLUGIN")\n')
    listed = _run(tmp_path, sys.executable, "-m", "alflow.cli", "frameworks", "--json")
    data = json.loads(listed.stdout)  # nothing the changed module prints reaches it
    assert [f["name"] for f in data["frameworks"]] == BUILT_IN
    (left_out,) = data["left_out"]
    assert "writes to standard output" in left_out
