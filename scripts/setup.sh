#!/usr/bin/env bash
# Set up alflow in ./.venv: a Python 3.11+ virtual environment with the pinned stack.
#   bash scripts/setup.sh          # runtime only
#   bash scripts/setup.sh --dev    # plus the test and lint tools
# Versions come from pyproject.toml, their dependencies from requirements.lock (pip constraints).
set -euo pipefail
cd "$(dirname "$0")/.."

extras=""
[ "${1:-}" = "--dev" ] && extras="[dev]"

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
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install --quiet --disable-pip-version-check -c requirements.lock -e ".${extras}"
echo "alflow installed in .venv ($(.venv/bin/alflow --version))"
