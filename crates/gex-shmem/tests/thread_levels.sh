#!/usr/bin/env bash
# Builds tests/thread_levels.c against an install of gex-shmem and runs its three cases
# on 2 PEs over smp: FUNNELED (the initialising thread's state, a worker's direct put),
# SERIALIZED (calls from a worker thread and the main thread in turn) and a call from
# another thread at SINGLE (refused: the job must end with the library's message).
# docs/shmem.md, "Threads".
#
#   bash crates/gex-shmem/tests/thread_levels.sh PREFIX
set -uo pipefail
[[ $# -eq 1 ]] || { echo "usage: thread_levels.sh PREFIX" >&2; exit 2; }
prefix="$1"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=crates/gex-shmem/tests/expect.sh
source "$here/expect.sh"
build_test "$prefix" thread_levels
failed=0
for mode in funneled serialized; do
    expect_ok "thread_levels.sh: $mode" thread_levels "$work/$mode.out" \
        "$prefix/bin/oshrun" -n 2 "$work/thread_levels" "$mode" || failed=1
done
# The intruder must fail, with the library's message (not a hang, not a crash).
timeout 60 "$prefix/bin/oshrun" -n 2 "$work/thread_levels" intruder >"$work/intruder.out" 2>&1
rc=$?
want='gex-shmem: shmem_barrier_all: called from a thread other than the one that called shmem_init, at thread level SHMEM_THREAD_SINGLE'
if [[ $rc -ne 0 && $rc -ne 124 ]] && grep -qF "$want" "$work/intruder.out"; then
    echo "thread_levels.sh: intruder: refused (exit code $rc) with the library's message"
else
    echo "thread_levels.sh: intruder: FAILED (exit code $rc; expected a failure with: $want); its output:" >&2
    tail -n 20 "$work/intruder.out" >&2
    failed=1
fi
exit $failed
