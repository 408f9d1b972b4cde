#!/usr/bin/env bash
# Stop the single-host Slurm cluster that scripts/slurm-up.sh started: cancel every job first (jobs
# outlive the daemons), then stop slurmd n1/n2 and slurmctld by their pid files under
# $ALFLOW_SLURM_BASE (default /var/lib/alflow-slurm). munged is left running (other programs may
# use it). Safe to run when nothing is up.
#   bash scripts/slurm-down.sh
set -uo pipefail

base="${ALFLOW_SLURM_BASE:-/var/lib/alflow-slurm}"
sudo_=""
if [ "$(id -u)" -ne 0 ]; then
  sudo_="sudo"
fi

if command -v squeue >/dev/null 2>&1 && [ -f "$base/run/slurmctld.pid" ]; then
  jobs="$(timeout 10 squeue -h -o %i 2>/dev/null)"
  if [ -n "$jobs" ]; then
    echo "slurm-down: cancelling jobs: $(echo "$jobs" | tr '\n' ' ')"
    echo "$jobs" | xargs -r timeout 10 scancel 2>/dev/null
    for _ in $(seq 1 40); do
      [ -z "$(timeout 10 squeue -h -o %i 2>/dev/null)" ] && break
      sleep 0.25
    done
  fi
fi

stop_pid_file() {
  local pid
  pid="$(cat "$1" 2>/dev/null)" || return 0
  [ -n "$pid" ] || return 0
  $sudo_ kill "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 50); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  $sudo_ kill -9 "$pid" 2>/dev/null || true
}
for node in n1 n2; do
  stop_pid_file "$base/run/slurmd-$node.pid"
done
stop_pid_file "$base/run/slurmctld.pid"
echo "slurm-down: stopped"
