#!/usr/bin/env bash
# A one-node Slurm cluster (Debian's slurmctld and slurmd, AuthType=auth/none) with cuquota's
# SPANK plugin, run by tests/integration/slurm.rs inside `unshare -m -n`: a network namespace
# with loopback alone (nothing listens anywhere else) and a mount namespace in which
# /etc/ld.so.preload names the test build of libcuquota.so (an overlay on /etc: the
# machine's own /etc is never written). Every wait is bounded; the daemons are stopped and
# their cgroups removed on the way out, whatever happens. Prints `slurm-test:` lines and each
# job's output; the Rust test asserts on them.
# With the README's whole set-up (jobs A, B, C), then with one piece taken away at a time
# (jobs D: no site policy, E: a site policy naming no jobs directory, F: no
# /etc/ld.so.preload, G: no job cgroup, the cluster restarted with proctrack/linuxproc), each
# of which the plugin must refuse.
# Usage: run.sh PLUGIN LIBRARY CLIENT SHIM_DIR DIR POLICY
set -euo pipefail
plugin=$1 library=$2 client=$3 shim=$4 dir=$5 policy=$6
say() { echo "slurm-test: $*"; }
now() { date +%s.%N; }
t0=$(now)
# Loopback, plus an address of its own on it: getaddrinfo's AI_ADDRCONFIG (slurmd's listen
# address) finds no IPv4 family with 127.0.0.1 alone. Nothing leaves the namespace.
{ ip link set lo up && ip addr add 10.254.254.1/32 dev lo; } ||
    { say "FAIL: cannot bring loopback up in the network namespace"; exit 3; }
mkdir -p "$dir"/{etc-upper,etc-work,state,spool,log,run}
echo "$library" >"$dir/etc-upper/ld.so.preload"
mount -t overlay overlay -o "lowerdir=/etc,upperdir=$dir/etc-upper,workdir=$dir/etc-work" /etc ||
    { say "FAIL: cannot mount an overlay on /etc (needs CAP_SYS_ADMIN)"; exit 3; }
mem=$(awk '/MemTotal/ { print int($2 / 1024 / 2) }' /proc/meminfo)
# slurm.conf with ProctrackType=$1.
configure() {
    cat >"$dir/slurm.conf" <<EOF
ClusterName=cuquotatest
SlurmctldHost=localhost
SlurmctldPort=6817
SlurmdPort=6818
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
ProctrackType=$1
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SchedulerParameters=batch_sched_delay=0
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
PlugStackConfig=$dir/plugstack.conf
NodeName=localhost CPUs=4 RealMemory=$mem State=UNKNOWN
PartitionName=test Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
}
printf 'CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\n' >"$dir/cgroup.conf"
echo "required $plugin jobs=$dir/jobs state_dir=$dir/cq policy=$policy" >"$dir/plugstack.conf"
export SLURM_CONF=$dir/slurm.conf
pids=()
stop() {
    # slurmd first (it tells slurmctld it is going, and waits on it if slurmctld is gone
    # already), each given 5 s before SIGKILL.
    local i p
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
        p=${pids[i]}
        kill "$p" 2>/dev/null || true
        for _ in $(seq 50); do
            kill -0 "$p" 2>/dev/null || break
            sleep 0.1
        done
        kill -9 "$p" 2>/dev/null || true
    done
    pids=()
    # proctrack/cgroup's hierarchy, deepest first.
    find /sys/fs/cgroup/freezer/slurm_localhost -depth -type d -exec rmdir {} + 2>/dev/null || true
}
trap stop EXIT
# Starts both daemons with ProctrackType=$1 and waits (bounded) until the node is idle.
start() {
    configure "$1"
    slurmctld -D >>"$dir/log/slurmctld.out" 2>&1 &
    pids+=($!)
    slurmd -D >>"$dir/log/slurmd.out" 2>&1 &
    pids+=($!)
    local ready=0 deadline=$(($(date +%s) + 15))
    while [ "$(date +%s)" -lt $deadline ]; do
        if timeout 2 scontrol ping 2>/dev/null | grep -q UP &&
            [ "$(timeout 2 sinfo -h -o %t 2>/dev/null)" = idle ]; then
            ready=1
            break
        fi
        sleep 0.1
    done
    if [ $ready = 0 ]; then
        say "FAIL: Slurm ($1) did not come up within 15 s; its logs:"
        tail -n 20 "$dir"/log/*
        exit 3
    fi
    say "up with $1 in $(awk "BEGIN { printf \"%.2f\", $(now) - $t0 }") s"
}
# Waits (bounded) until every job's epilog has removed its policy and group state.
drained() {
    for _ in $(seq 100); do
        [ -z "$(ls -A "$dir/jobs" 2>/dev/null)" ] && [ -z "$(ls -A "$dir/cq/groups" 2>/dev/null)" ] && break
        sleep 0.1
    done
}
# A job asking --gpu-mem=1GiB (two tasks, each trying 3 × 512 MiB) on a node missing piece
# $2: srun's exit status, stderr and stdout apart, as job $1.
refused_job() {
    local rc=0
    timeout 60 srun -n2 --gpu-mem=1GiB "$client" init info alloc:512M alloc:512M alloc:512M \
        >"$dir/$1.out" 2>"$dir/$1.err" || rc=$?
    say "job $1 ($2) rc=$rc"
}
start proctrack/cgroup
srun --help 2>&1 | grep -A1 -- '--gpu-mem' | sed 's/^/srun --help: /'

# Job A: two tasks share 1 GiB; each takes 64 MiB pieces until refused, then holds them
# until the flag goes.
flag=$dir/hold
touch "$flag"
allocs=$(printf 'alloc:64M %.0s' $(seq 20))
export LD_LIBRARY_PATH=$shim CUDA_SHIM_MEMORY=4GiB
# shellcheck disable=SC2086
timeout 60 srun -n2 --label --gpu-mem=1GiB "$client" init info $allocs "waitgone:$flag" \
    >"$dir/a.out" 2>&1 &
job_a=$!
for _ in $(seq 300); do
    [ "$(grep -c ': alloc ' "$dir/a.out" || true)" -ge 40 ] && break
    sleep 0.1
done
# Job B, while A holds its gigabyte: every variable gone (SLURM_JOB_ID and LD_PRELOAD too),
# hostile CUQUOTA_* values set; the task is governed by its job's policy alone.
timeout 60 srun -n1 --gpu-mem=512MiB env -i LD_LIBRARY_PATH="$shim" CUDA_SHIM_MEMORY=4GiB \
    CUQUOTA_LIMIT=8GiB CUQUOTA_MODE=observe CUQUOTA_GROUP=mine CUQUOTA_STATE_DIR="$dir/mine" \
    "$client" init info alloc:512M alloc:1 >"$dir/b.out" 2>&1 || say "job B failed: $?"
rm -f "$flag"
wait $job_a || say "job A failed: $?"
# Job C: no --gpu-mem, so no policy of its own: the main one alone (no limit).
timeout 60 srun -n1 "$client" init info >"$dir/c.out" 2>&1 || say "job C failed: $?"

# Job D: no site policy (moved aside and back).
mv "$policy" "$policy.away"
refused_job d "no site policy"
mv "$policy.away" "$policy"
# Job E: the site policy without its `jobs` line (the same file mode and owner).
cp -p "$policy" "$policy.away"
sed -i '/^jobs *=/d' "$policy"
refused_job e "no jobs directory"
mv "$policy.away" "$policy"
# Job F: no /etc/ld.so.preload (in this namespace's overlay only).
rm /etc/ld.so.preload
refused_job f "no ld.so.preload"
echo "$library" >/etc/ld.so.preload
# Job G: no job cgroup, Slurm restarted with proctrack/linuxproc.
drained
stop
start proctrack/linuxproc
refused_job g "no job cgroup"
# At each job's end the epilog removes its policy and group (bounded wait).
drained
say "left in the jobs directory: [$(ls -A "$dir/jobs" 2>/dev/null | tr '\n' ' ')]"
say "left in the groups directory: [$(ls -A "$dir/cq/groups" 2>/dev/null | tr '\n' ' ')]"
for j in a b c d e f g; do sed "s/^/job $j: /" "$dir/$j.out"; done
for j in d e f g; do sed "s/^/job $j err: /" "$dir/$j.err"; done
say "done in $(awk "BEGIN { printf \"%.2f\", $(now) - $t0 }") s"
