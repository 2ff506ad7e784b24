#!/usr/bin/env bash
# Starts a single-node Slurm (Debian's slurm-wlm 22.05 with munge) on this machine for the
# job-array test of `loom sweep` (tests/cli/sweep_slurm_test.cpp). Run as root; .ci/run
# calls it before the test suite, the test calls it with --no-install.
#
# It never fails the caller: when Slurm cannot start it says why on stderr and in
# $LOOM_SLURM_STATUS (default /tmp/loom-slurm-status: "ok" or "unavailable: <why>") and
# exits 0, and the Slurm test is skipped with that reason. Installs slurm-wlm and munge
# with apt only when they are missing (not with --no-install). Idempotent: a running
# Slurm is left as it is.
#
# The setup that works in a container without systemd or cgroups: slurmctld and slurmd as
# root on this host, proctrack/linuxproc, task/none, no accounting.
set -u
status_file=${LOOM_SLURM_STATUS:-/tmp/loom-slurm-status}
install=1
[ "${1:-}" = "--no-install" ] && install=0

fail() {
  echo "start_slurm: Slurm is not available: $*" >&2
  echo "unavailable: $*" >"$status_file"
  exit 0
}

up() { timeout 10 sinfo -h -o %T 2>/dev/null | grep -Eq '^(idle|mixed|allocated)'; }

[ "$(id -u)" = 0 ] || fail "needs root (slurmctld and slurmd run as root here)"
if command -v sinfo >/dev/null && up; then
  echo ok >"$status_file"
  exit 0
fi
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null ||
  ! command -v munged >/dev/null; then
  [ "$install" = 1 ] || fail "slurm-wlm and munge are not installed (run scripts/start_slurm.sh as root)"
  command -v apt-get >/dev/null || fail "slurm-wlm is not installed and there is no apt-get"
  log=/tmp/loom-slurm-apt.log
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y --no-install-recommends slurm-wlm munge >"$log" 2>&1; then
    apt-get update >>"$log" 2>&1
    apt-get install -y --no-install-recommends slurm-wlm munge >>"$log" 2>&1 ||
      fail "apt-get install slurm-wlm munge failed (see $log)"
  fi
fi

# munge: a key, its directories, the daemon.
if [ ! -s /etc/munge/munge.key ]; then
  mkdir -p /etc/munge
  if command -v mungekey >/dev/null; then
    mungekey --create --force >/dev/null 2>&1
  else
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 2>/dev/null
  fi
fi
mkdir -p /run/munge /var/lib/munge /var/log/munge
chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge 2>/dev/null
chmod 0700 /etc/munge
chmod 0400 /etc/munge/munge.key
if ! pgrep -x munged >/dev/null; then
  runuser -u munge -- /usr/sbin/munged >/dev/null 2>&1 || /usr/sbin/munged --force ||
    fail "munged did not start"
fi
munge -n 2>/dev/null | unmunge >/dev/null 2>&1 || fail "munge does not authenticate (munge -n | unmunge)"

# slurm.conf for this one host.
host=$(hostname -s)
cpus=$(nproc)
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
cat >/etc/slurm/slurm.conf <<CONF
# Written by scripts/start_slurm.sh: one node, everything as root, no cgroups.
ClusterName=loom
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
NodeName=$host CPUs=$cpus RealMemory=1000 State=UNKNOWN
PartitionName=loom Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF

pgrep -x slurmctld >/dev/null || /usr/sbin/slurmctld -i ||
  fail "slurmctld did not start (see /var/log/slurm/slurmctld.log)"
pgrep -x slurmd >/dev/null || /usr/sbin/slurmd ||
  fail "slurmd did not start (see /var/log/slurm/slurmd.log)"
for _ in $(seq 1 30); do
  if up; then
    echo ok >"$status_file"
    echo "start_slurm: Slurm is up on $host ($cpus CPUs)" >&2
    exit 0
  fi
  scontrol update nodename="$host" state=resume >/dev/null 2>&1
  sleep 1
done
fail "the node did not become idle in 30 s (sinfo: $(sinfo -h -o '%T %E' 2>&1 | head -1))"
