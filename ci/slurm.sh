#!/usr/bin/env bash
# ci/slurm.sh — a real one-node Slurm for gex's launcher tests, runnable on a
# developer machine (as root) as well as in CI.
#
#   ci/slurm.sh test     start Slurm, run the srun tests, gex-perf and C programs under srun, stop
#   ci/slurm.sh start    start munged (if none runs), slurmctld and slurmd; wait for the
#                        node to be idle; print the SLURM_CONF to export
#   ci/slurm.sh stop     cancel every job, stop the daemons this script started, remove
#                        the state directory
#   ci/slurm.sh status   sinfo and squeue of that Slurm
#
# Slurm, munge and Open MPI come from Debian (slurmctld, slurmd, slurm-client, munge;
# `ci/test packages` installs them, and so does this script when one is missing). The
# configuration is written to $GEX_SLURM_DIR (default /tmp/gex-slurm), never to
# /etc/slurm: one node named after this host at 127.0.0.1 with as many CPUs as
# `nproc` says, one partition with oversubscription (jobs share the node; tasks
# beyond the CPUs need `srun --overcommit`), private ports 16817/16818, no cgroups
# (proctrack/linuxproc, task/none) so it also runs in containers, KillWait=3 s so a
# time limit ends a job within seconds of being hit. The daemons run as root.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

DIR="${GEX_SLURM_DIR:-/tmp/gex-slurm}"
CONF="$DIR/slurm.conf"
NODE="$(hostname -s)"
PACKAGES=(slurmctld slurmd slurm-client munge)
SLURM_TEST_TIMEOUT="${SLURM_TEST_TIMEOUT:-10m}"

log() { echo "ci/slurm.sh: $*"; }

install_missing() {
    local missing=() p
    for p in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    ((${#missing[@]} == 0)) && return 0
    ((EUID == 0)) || { log "need root to install ${missing[*]}" >&2; return 1; }
    log "installing ${missing[*]}"
    # The packages' own start scripts find no configuration and give up (or are
    # refused by policy-rc.d in containers): this script starts the daemons itself.
    DEBIAN_FRONTEND=noninteractive apt-get update -q </dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
}

write_config() {
    mkdir -p "$DIR/ctld" "$DIR/spool" "$DIR/log"
    cat >"$CONF" <<EOF
# Written by ci/slurm.sh: a one-node Slurm for gex's launcher tests.
ClusterName=gexci
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=16817
SlurmdPort=16818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$DIR/ctld
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
KillWait=3
InactiveLimit=0
MinJobAge=10
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=gex Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
EOF
}

# Processes (not zombies) named exactly one of the arguments, as "pid name" lines.
alive() {
    local name pid
    for name in "$@"; do
        for pid in $(pgrep -x "$name" || true); do
            [[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" == Z ]] && continue
            echo "$pid $name"
        done
    done
}

pid_alive() { [[ -n "${1:-}" ]] && kill -0 "$1" 2>/dev/null; }

start() {
    install_missing
    if [[ -f "$DIR/slurmctld.pid" ]] && pid_alive "$(cat "$DIR/slurmctld.pid")"; then
        log "already running (SLURM_CONF=$CONF)"
        return 0
    fi
    rm -rf "$DIR"
    write_config
    # munge: reuse a running munged (a system one), else start one and remember it.
    if [[ -z "$(alive munged)" ]]; then
        mkdir -p /run/munge && chown munge:munge /run/munge && chmod 0755 /run/munge
        [[ -f /etc/munge/munge.key ]] || mungekey --create --keyfile=/etc/munge/munge.key
        chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
        runuser -u munge -- /usr/sbin/munged
        alive munged | head -n 1 | cut -d' ' -f1 >"$DIR/munged.pid"
        log "started munged ($(cat "$DIR/munged.pid"))"
    fi
    slurmctld -f "$CONF"
    slurmd -f "$CONF" -N "$NODE"
    export SLURM_CONF="$CONF"
    local i state=""
    for i in $(seq 1 60); do
        state="$(sinfo -h -n "$NODE" -o %t 2>/dev/null || true)"
        [[ "$state" == idle ]] && break
        sleep 1
    done
    if [[ "$state" != idle ]]; then
        log "node $NODE is not idle after 60 s (state '${state:-?}'); logs:" >&2
        tail -n 20 "$DIR"/log/*.log >&2 || true
        return 1
    fi
    log "node $NODE idle with $(nproc) CPUs; srun --mpi=list:"
    srun --mpi=list 2>&1 | sed 's/^/    /'
    log "export SLURM_CONF=$CONF"
}

# Sends SIGTERM to the pid in $1 (a file), waits up to 10 s, then SIGKILL.
stop_pidfile() {
    local f="$1" pid i
    [[ -f "$f" ]] || return 0
    pid="$(cat "$f")"
    pid_alive "$pid" || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 100); do
        pid_alive "$pid" || return 0
        sleep 0.1
    done
    log "$f: $pid still running after 10 s: SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
}

stop() {
    [[ -d "$DIR" ]] || return 0
    export SLURM_CONF="$CONF"
    if [[ -f "$DIR/slurmctld.pid" ]] && pid_alive "$(cat "$DIR/slurmctld.pid")"; then
        scancel --full --quiet -u root 2>/dev/null || true
        # Give running steps KillWait to end.
        local i
        for i in $(seq 1 50); do
            [[ -z "$(squeue -h 2>/dev/null)" ]] && break
            sleep 0.2
        done
    fi
    stop_pidfile "$DIR/slurmd.pid"
    stop_pidfile "$DIR/slurmctld.pid"
    stop_pidfile "$DIR/munged.pid"
    # A step daemon outlives slurmd only while its tasks run: none should be left.
    local left
    left="$(alive slurmstepd slurmd slurmctld)"
    [[ -f "$DIR/munged.pid" ]] && left+="$(alive munged)"
    rm -rf "$DIR"
    if [[ -n "$left" ]]; then
        log "still running after stop:" >&2
        echo "$left" | sed 's/^/    /' >&2
        return 1
    fi
    log "stopped; nothing left running"
}

status() {
    export SLURM_CONF="$CONF"
    sinfo
    squeue
}

# Runs a command under `timeout`, showing it first.
run() {
    echo "+ $*" >&2
    timeout --kill-after=10s "$@"
}

# Reads gex-perf's output on stdin: at least one JSON line, every one naming 4 ranks.
check_perf_json() {
    python3 -c '
import json, sys
lines = [json.loads(l) for l in sys.stdin if l.strip()]
assert lines, "gex-perf printed no JSON line"
assert all(l["ranks"] == 4 for l in lines), [l["ranks"] for l in lines]
conduit = lines[0]["conduit"]
print(f"    {len(lines)} JSON lines from 4 ranks, conduit {conduit} ({sys.argv[1]})")
' "$1"
}

# gex-perf and the hello example under srun, with each MPI plugin. gex-perf's JSON
# lines must name 4 ranks; hello must greet from every rank.
binaries_under_srun() {
    local perf=target/release/gex-perf hello=target/release/examples/hello mpi out
    for mpi in pmi2 pmix; do
        out="$(run 120s srun --mpi="$mpi" --overcommit --kill-on-bad-exit=1 -n 4 "$perf" am --json --quick </dev/null)"
        echo "$out" | head -n 3
        check_perf_json "srun --mpi=$mpi" <<<"$out"
        out="$(run 60s srun --mpi="$mpi" --overcommit --kill-on-bad-exit=1 -n 3 "$hello" </dev/null)"
        echo "$out"
        for r in 0 1 2; do
            grep -qx "hello from rank $r of 3" <<<"$out"
        done
        out="$(run 60s srun --mpi="$mpi" --overcommit --kill-on-bad-exit=1 -n 2 target/release/gex-info boot </dev/null)"
        echo "$out"
        grep -q "^bootstrap: $mpi (detected)" <<<"$out"
        grep -qx "rank 1 of 2: bootstrap $mpi, host ids \[0, 0\]" <<<"$out"
    done
}

test_all() {
    start
    # Stop whatever happens; a stop that leaves something running fails the run.
    trap 'stop || exit 1' EXIT
    export SLURM_CONF="$CONF"
    # The launcher conformance cases (tests/common in gex-boot), PMI-2 and PMIx.
    run "$SLURM_TEST_TIMEOUT" cargo test --locked -p gex-boot --features pmix --test launch_slurm \
        -- --ignored --test-threads=1
    # Real programs: the release binaries with the PMIx client compiled in.
    run 20m cargo build --locked --release -p gex-perf -p gex -p gex-info \
        --bin gex-perf --bin gex-info --example hello --features gex-perf/pmix,gex-info/pmix
    binaries_under_srun
    # C programs on gex-capi and gex-shmem (installed with the PMIx client) under both.
    run 20m bash crates/gex-capi/tests/c_launchers.sh srun
}

case "${1:-}" in
start) start ;;
stop) stop ;;
status) status ;;
test) test_all ;;
*)
    sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
