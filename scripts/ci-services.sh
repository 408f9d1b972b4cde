#!/usr/bin/env bash
# Start the services the e2e tests need: a Docker engine (Debian's docker.io), a single-host Slurm
# cluster (scripts/slurm-up.sh: slurmctld plus slurmd nodes n1 and n2 on 127.0.0.1) and PostgreSQL
# (Debian's postgresql, the database of the e2e tests' `prefect server`); also install Debian's
# chromium for the HTML report test (tests/integration/test_report_browser.py) and Debian's
# prometheus for the real-Prometheus test (tests/e2e/test_prometheus_real.py), which runs its own
# `prometheus` process (own configuration, temporary storage, a free port on 127.0.0.1) and stops it.
# Idempotent: installs chromium only when /usr/bin/chromium is missing, prometheus only when no
# `prometheus` binary is on PATH, docker.io only when dockerd is missing, postgresql only when no
# /usr/lib/postgresql/<version>/bin/postgres is there; starts dockerd only when no daemon answers and
# the PostgreSQL cluster only when it is down. The packaged prometheus service is never started: the
# install runs under a policy-rc.d that denies service starts (unless the host has its own), without
# the recommended node exporter, and a systemd host's prometheus unit is stopped and disabled after it.
# The daemon runs with --iptables=false --bridge=none (containers use host networking), logs to
# $ALFLOW_DOCKERD_LOG (default /tmp/alflow-dockerd.log) and must answer `docker info` within
# $ALFLOW_DOCKERD_TIMEOUT seconds (default 60).
# PostgreSQL: the newest installed version's cluster "main" (created when missing) is started with
# pg_ctlcluster and must answer pg_isready within $ALFLOW_POSTGRES_TIMEOUT seconds (default 60; else
# the last lines of its log are printed). The role and database of $ALFLOW_E2E_POSTGRES_URL (default
# postgresql+asyncpg://alflow:alflow@127.0.0.1:5432/prefect_e2e) are created when missing; the role
# gets that password, LOGIN and CREATEDB (the tests create a fresh database per test session in it,
# see tests/e2e/prefect_support.py). A URL whose host is not this machine is left alone.
#   bash scripts/ci-services.sh
set -euo pipefail

log="${ALFLOW_DOCKERD_LOG:-/tmp/alflow-dockerd.log}"
timeout_s="${ALFLOW_DOCKERD_TIMEOUT:-60}"
pg_url="${ALFLOW_E2E_POSTGRES_URL:-postgresql+asyncpg://alflow:alflow@127.0.0.1:5432/prefect_e2e}"
pg_timeout_s="${ALFLOW_POSTGRES_TIMEOUT:-60}"

sudo_=""
if [ "$(id -u)" -ne 0 ]; then
  sudo_="sudo"
fi

# $ALFLOW_E2E_POSTGRES_URL, checked before anything is installed or started
pg_re='^postgresql(\+[a-z0-9]+)?://([A-Za-z0-9_]+):([A-Za-z0-9_.~-]*)@([^:/@]+):([0-9]+)/([A-Za-z0-9_]+)$'
if [[ ! "$pg_url" =~ $pg_re ]]; then
  echo "ci-services: error: ALFLOW_E2E_POSTGRES_URL=$pg_url is not postgresql+asyncpg://USER:PASSWORD@HOST:PORT/DATABASE" \
    "(letters, digits and _ in names)" >&2
  exit 1
fi
pg_user="${BASH_REMATCH[2]}" pg_pass="${BASH_REMATCH[3]}" pg_host="${BASH_REMATCH[4]}"
pg_port="${BASH_REMATCH[5]}" pg_db="${BASH_REMATCH[6]}"

# Headless Chromium for the HTML report test (tests/integration/test_report_browser.py).
if [ ! -x /usr/bin/chromium ]; then
  echo "ci-services: installing chromium (/usr/bin/chromium not found)"
  $sudo_ env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi

# Prometheus for tests/e2e/test_prometheus_real.py: the binary only, no system-wide service.
if ! command -v prometheus >/dev/null 2>&1; then
  echo "ci-services: installing prometheus (no prometheus on PATH)"
  own_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then  # deny the package's service start (invoke-rc.d, deb-systemd-invoke)
    printf '#!/bin/sh\nexit 101\n' | $sudo_ tee /usr/sbin/policy-rc.d >/dev/null
    $sudo_ chmod 755 /usr/sbin/policy-rc.d
    own_policy=1
    trap '$sudo_ rm -f /usr/sbin/policy-rc.d' EXIT  # also when interrupted
  fi
  install_rc=0
  $sudo_ env DEBIAN_FRONTEND=noninteractive apt-get update -qq || install_rc=$?
  if [ "$install_rc" = 0 ]; then
    $sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null \
      || install_rc=$?
  fi
  if [ "$own_policy" = 1 ]; then
    $sudo_ rm -f /usr/sbin/policy-rc.d
    trap - EXIT
  fi
  if [ "$install_rc" != 0 ]; then
    echo "ci-services: error: installing prometheus failed (apt-get exit $install_rc)" >&2
    exit 1
  fi
  if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
    $sudo_ systemctl disable --now prometheus.service >/dev/null 2>&1 || true
  fi
fi
if ! command -v prometheus >/dev/null 2>&1; then
  echo "ci-services: error: no prometheus on PATH after installing prometheus" >&2
  exit 1
fi
echo "ci-services: $(prometheus --version 2>&1 | head -n 1)"

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

# PostgreSQL for the e2e tests' `prefect server` (tests/e2e/prefect_support.py).
case "$pg_host" in
  127.0.0.1 | localhost | ::1) pg_local=1 ;;
  *) pg_local=0; echo "ci-services: ALFLOW_E2E_POSTGRES_URL points at $pg_host: no local PostgreSQL started" ;;
esac
if [ "$pg_local" = 1 ]; then
  if ! compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null || ! command -v pg_ctlcluster >/dev/null 2>&1; then
    echo "ci-services: installing postgresql (no /usr/lib/postgresql/<version>/bin/postgres)"
    $sudo_ env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  fi
  pg_ver="$(find /usr/lib/postgresql -mindepth 3 -maxdepth 3 -path '*/bin/postgres' | cut -d/ -f5 | sort -V | tail -n 1)"
  if [ -z "$pg_ver" ]; then
    echo "ci-services: error: no PostgreSQL server under /usr/lib/postgresql after installing postgresql" >&2
    exit 1
  fi
  as_postgres() {  # run a command as the postgres superuser (peer authentication on the local socket)
    if [ "$(id -u)" -eq 0 ]; then (cd / && runuser -u postgres -- "$@"); else (cd / && sudo -u postgres "$@"); fi
  }
  if ! pg_lsclusters -h | awk -v v="$pg_ver" '$1 == v && $2 == "main" { found = 1 } END { exit !found }'; then
    echo "ci-services: creating the PostgreSQL $pg_ver cluster main (port $pg_port)"
    $sudo_ pg_createcluster --port "$pg_port" "$pg_ver" main >/dev/null
  fi
  read -r cl_port cl_status cl_log < <(pg_lsclusters -h | awk -v v="$pg_ver" '$1 == v && $2 == "main" { print $3, $4, $7 }')
  if [ "$cl_port" != "$pg_port" ]; then
    echo "ci-services: error: the PostgreSQL $pg_ver cluster main listens on port $cl_port, ALFLOW_E2E_POSTGRES_URL says $pg_port" >&2
    exit 1
  fi
  if [ "$cl_status" != "online" ]; then
    echo "ci-services: starting PostgreSQL $pg_ver (cluster main, port $pg_port, log: $cl_log)"
    if ! $sudo_ pg_ctlcluster "$pg_ver" main start; then
      echo "ci-services: error: pg_ctlcluster $pg_ver main start failed; last log lines:" >&2
      $sudo_ tail -n 30 "$cl_log" >&2 || true
      exit 1
    fi
  fi
  deadline=$((SECONDS + pg_timeout_s))
  until pg_isready -q -h "$pg_host" -p "$pg_port"; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "ci-services: error: PostgreSQL did not answer pg_isready on $pg_host:$pg_port within ${pg_timeout_s}s; last log lines:" >&2
      $sudo_ tail -n 30 "$cl_log" >&2 || true
      exit 1
    fi
    sleep 0.5
  done
  psql_su=(psql -X -q -t -A -v ON_ERROR_STOP=1 -p "$pg_port" -d postgres -v user="$pg_user" -v pass="$pg_pass" -v db="$pg_db")
  if [ "$(as_postgres "${psql_su[@]}" <<<"SELECT 1 FROM pg_roles WHERE rolname = :'user'")" = 1 ]; then
    as_postgres "${psql_su[@]}" <<<"ALTER ROLE :\"user\" LOGIN CREATEDB PASSWORD :'pass'"
  else
    echo "ci-services: creating the PostgreSQL role $pg_user (LOGIN CREATEDB)"
    as_postgres "${psql_su[@]}" <<<"CREATE ROLE :\"user\" LOGIN CREATEDB PASSWORD :'pass'"
  fi
  if [ "$(as_postgres "${psql_su[@]}" <<<"SELECT 1 FROM pg_database WHERE datname = :'db'")" != 1 ]; then
    echo "ci-services: creating the PostgreSQL database $pg_db (owner $pg_user)"
    as_postgres "${psql_su[@]}" <<<'CREATE DATABASE :"db" OWNER :"user"'
  fi
  # the tests' way in: password authentication over TCP as that role
  if ! PGPASSWORD="$pg_pass" PGCONNECT_TIMEOUT=10 psql -X -q -t -A -h "$pg_host" -p "$pg_port" -U "$pg_user" -d "$pg_db" -c 'SELECT 1' >/dev/null; then
    echo "ci-services: error: cannot log in as $pg_user to $pg_db on $pg_host:$pg_port with the password of ALFLOW_E2E_POSTGRES_URL" >&2
    exit 1
  fi
  echo "ci-services: PostgreSQL $pg_ver ready (postgresql+asyncpg://$pg_user:***@$pg_host:$pg_port/$pg_db)"
fi

if docker info >/dev/null 2>&1; then
  echo "ci-services: dockerd already running"
  echo "ci-services: every service ready in ${SECONDS} s"
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
echo "ci-services: every service ready in ${SECONDS} s"
