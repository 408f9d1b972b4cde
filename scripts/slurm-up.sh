#!/usr/bin/env bash
# A single-host Slurm cluster for the e2e tests (issue 10): Debian's slurm-wlm, munge, one slurmctld
# and two slurmd "nodes" n1 and n2 on 127.0.0.1 (slurmd -N n1 / -N n2 on ports 6818 and 6819), so a
# 2-node job (srun -N2) spans both. No systemd: the daemons are started directly.
#
# - installs slurm-wlm (slurmctld, slurmd, client, munge) when slurmctld is missing;
# - writes /etc/slurm/slurm.conf (client commands read it there; a file not written by this script is
#   kept as slurm.conf.alflow-backup once); state, pid files and logs live under $ALFLOW_SLURM_BASE
#   (default /var/lib/alflow-slurm);
# - declares $ALFLOW_SLURM_CPUS CPUs per node (default 8, SlurmdParameters=config_overrides), more
#   than the machine has, so several 1-CPU test jobs run at once instead of queueing forever;
# - idempotent: when the cluster already answers with this configuration (slurmctld up, n1 and n2
#   idle or running jobs) it does nothing, so running jobs survive; otherwise it stops the daemons it
#   started before (pid files), rewrites the configuration and starts them again with a clean state.
#   A stale configuration (e.g. one that points at a deleted directory) is simply replaced.
# - waits up to $ALFLOW_SLURM_TIMEOUT seconds (default 60) for `srun -N2 true`; on failure prints
#   the daemons' log tails and exits 1.
#   bash scripts/slurm-up.sh          (scripts/slurm-down.sh stops it)
set -euo pipefail

base="${ALFLOW_SLURM_BASE:-/var/lib/alflow-slurm}"
cpus="${ALFLOW_SLURM_CPUS:-8}"
timeout_s="${ALFLOW_SLURM_TIMEOUT:-60}"
conf=/etc/slurm/slurm.conf
marker="# written by alflow scripts/slurm-up.sh"
nodes=(n1 n2)

sudo_=""
if [ "$(id -u)" -ne 0 ]; then
  sudo_="sudo"
fi

say() { echo "slurm-up: $*"; }

if ! command -v slurmctld >/dev/null 2>&1 || ! command -v slurmd >/dev/null 2>&1 \
  || ! command -v sbatch >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; then
  say "installing slurm-wlm (slurmctld, slurmd, slurm-client, munge)"
  $sudo_ env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm >/dev/null
fi

host="$(hostname -s)"
wanted="$(cat <<CONF
$marker
ClusterName=alflow-ci
SlurmctldHost=${host}(127.0.0.1)
SlurmUser=root
SlurmctldPort=6817
AuthType=auth/munge
StateSaveLocation=$base/state/ctld
SlurmdSpoolDir=$base/state/slurmd-%n
SlurmctldPidFile=$base/run/slurmctld.pid
SlurmdPidFile=$base/run/slurmd-%n.pid
SlurmctldLogFile=$base/log/slurmctld.log
SlurmdLogFile=$base/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=300
SlurmdParameters=config_overrides
NodeName=n1 NodeAddr=127.0.0.1 NodeHostname=${host} Port=6818 CPUs=${cpus} RealMemory=2000 State=UNKNOWN
NodeName=n2 NodeAddr=127.0.0.1 NodeHostname=${host} Port=6819 CPUs=${cpus} RealMemory=2000 State=UNKNOWN
PartitionName=debug Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP
CONF
)"

# Both nodes answer and take work (idle, or busy with jobs: a running cluster is never restarted).
answering() {
  local states
  timeout 10 scontrol ping 2>/dev/null | grep -q "is UP" || return 1
  states="$(timeout 10 sinfo -h -N -o '%N %T' 2>/dev/null | sort | tr '\n' ' ')" || return 1
  [[ "$states" =~ ^n1\ (idle|mixed|allocated|completing)\ n2\ (idle|mixed|allocated|completing)\ $ ]]
}
# A real 2-node job step: both slurmd accept work (sinfo alone can report idle for a dead slurmd).
usable() {
  answering && timeout 15 srun -N2 -n2 -t 1 true >/dev/null 2>&1
}

if [ -f "$conf" ] && [ "$(cat "$conf")" = "$wanted" ] && answering; then
  say "cluster already up (nodes n1 n2 answer, config $conf)"
  exit 0
fi

# Stop what an earlier run of this script started (pid files under $base), nothing else.
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
for node in "${nodes[@]}"; do
  stop_pid_file "$base/run/slurmd-$node.pid"
done
stop_pid_file "$base/run/slurmctld.pid"

if [ -f "$conf" ] && ! head -n 1 "$conf" | grep -qxF "$marker" && [ ! -f "$conf.alflow-backup" ]; then
  say "keeping the existing $conf as $conf.alflow-backup"
  $sudo_ cp "$conf" "$conf.alflow-backup"
fi
$sudo_ mkdir -p /etc/slurm "$base/state/ctld" "$base/run" "$base/log"
for node in "${nodes[@]}"; do
  $sudo_ mkdir -p "$base/state/slurmd-$node"
done
printf '%s\n' "$wanted" | $sudo_ tee "$conf" >/dev/null
say "wrote $conf (state, pids and logs under $base)"

# munge: Debian's postinst creates the key; /run/munge is normally made by systemd.
if [ ! -s /etc/munge/munge.key ]; then
  $sudo_ mungekey --create --keyfile=/etc/munge/munge.key
  $sudo_ chown munge:munge /etc/munge/munge.key
  $sudo_ chmod 400 /etc/munge/munge.key
fi
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  say "starting munged"
  $sudo_ install -d -o munge -g munge -m 0755 /run/munge
  $sudo_ runuser -u munge -- /usr/sbin/munged
  for _ in $(seq 1 50); do
    munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break
    sleep 0.1
  done
fi

# -c: start clean (no jobs or node states from an earlier configuration).
say "starting slurmctld and slurmd ${nodes[*]}"
$sudo_ slurmctld -c
for node in "${nodes[@]}"; do
  $sudo_ slurmd -N "$node"
done

deadline=$((SECONDS + timeout_s))
until usable; do
  if [ "$SECONDS" -ge "$deadline" ]; then
    echo "slurm-up: error: the cluster did not run a 2-node job step within ${timeout_s}s" >&2
    sinfo -N 2>&1 | sed 's/^/slurm-up:   /' >&2 || true
    for f in "$base"/log/*.log; do
      echo "slurm-up: --- last lines of $f" >&2
      tail -n 20 "$f" >&2 || true
    done
    exit 1
  fi
  sleep 0.5
done
say "ready: nodes ${nodes[*]} on 127.0.0.1, $cpus CPUs each ($(sinfo -V 2>/dev/null || echo slurm))"
