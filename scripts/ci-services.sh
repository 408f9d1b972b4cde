#!/usr/bin/env bash
# Start the services the e2e tests need: a Docker engine (Debian's docker.io) and a single-host Slurm
# cluster (scripts/slurm-up.sh: slurmctld plus slurmd nodes n1 and n2 on 127.0.0.1); also install
# Debian's chromium for the HTML report test (tests/integration/test_report_browser.py).
# Idempotent: installs chromium only when /usr/bin/chromium is missing, docker.io only when dockerd
# is missing, starts dockerd only when no daemon answers. The daemon runs with --iptables=false
# --bridge=none (containers use host networking), logs to $ALFLOW_DOCKERD_LOG (default
# /tmp/alflow-dockerd.log) and must answer `docker info` within $ALFLOW_DOCKERD_TIMEOUT seconds
# (default 60).
#   bash scripts/ci-services.sh
set -euo pipefail

log="${ALFLOW_DOCKERD_LOG:-/tmp/alflow-dockerd.log}"
timeout_s="${ALFLOW_DOCKERD_TIMEOUT:-60}"

sudo_=""
if [ "$(id -u)" -ne 0 ]; then
  sudo_="sudo"
fi

# Headless Chromium for the HTML report test (tests/integration/test_report_browser.py).
if [ ! -x /usr/bin/chromium ]; then
  echo "ci-services: installing chromium (/usr/bin/chromium not found)"
  $sudo_ env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi

if ! command -v dockerd >/dev/null 2>&1; then
  echo "ci-services: installing docker.io (dockerd not found)"
  $sudo_ env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null
fi

if ! command -v docker >/dev/null 2>&1; then
  echo "ci-services: error: the docker client is missing after installing docker.io" >&2
  exit 1
fi

# Slurm for tests/e2e/test_slurm_*.py (idempotent; installs slurm-wlm when missing).
bash "$(dirname "$0")/slurm-up.sh"

if docker info >/dev/null 2>&1; then
  echo "ci-services: dockerd already running"
  exit 0
fi

echo "ci-services: starting dockerd (log: $log)"
# setsid: the daemon outlives this script and is not in the caller's process group.
$sudo_ setsid dockerd --iptables=false --bridge=none >"$log" 2>&1 </dev/null &

deadline=$((SECONDS + timeout_s))
until docker info >/dev/null 2>&1; do
  if [ "$SECONDS" -ge "$deadline" ]; then
    echo "ci-services: error: dockerd did not answer 'docker info' within ${timeout_s}s; last log lines:" >&2
    tail -n 30 "$log" >&2 || true
    exit 1
  fi
  sleep 0.5
done
echo "ci-services: dockerd ready ($(docker version --format '{{.Server.Version}}'))"
