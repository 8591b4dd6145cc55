#!/usr/bin/env bash
# ci/loom.sh — model-check gex's lock-free code with loom.
#
# Runs every `crates/*/tests/loom_*.rs` test of the workspace with `--cfg gex_loom`,
# which swaps gex-sync's atomics shim for loom's types. Today:
#   gex-sync: loom_ring, loom_doorbell, loom_slot (the rings, the doorbell, the
#             completion slots);
#   gex-coll: loom_barrier (the flag and counter barriers), loom_channel (the slot
#             protocol POST/REF/ACK), loom_sleep (the sleep protocol of shared-memory
#             waits), all driving the real code through gex-coll's `loomkit`;
#             loom_ring (the small-broadcast ring's publication, slot reuse and
#             sleep protocol, src/ring.rs included as is);
#   gex-msg:  loom_near (the near path's per-pair queues: FIFO through a full queue,
#             any-source probing of two queues, full-queue fallback in order);
#             loom_coop (the cooperative copy's loan block: claim, shared chunk
#             counter, withdrawal, failure, stale requests).
# docs/testing.md, "loom", lists what each model checks and how long it runs.
# The build goes to its own target directory (target/loom) so it does not invalidate
# the normal build, and runs in release mode because loom explores many interleavings.
#
# Environment:
#   LOOM_MAX_PREEMPTIONS   bound on preemptions per execution (default 2; 3 is much slower)
#   CARGO_TARGET_DIR       default target/loom
#
# Usage: ci/loom.sh [extra cargo test arguments, e.g. -- --nocapture]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

export RUSTFLAGS="${RUSTFLAGS:-} --cfg gex_loom"
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-2}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/loom}"

found=0
for dir in crates/*/ conduits/*/; do
    [[ -f "$dir/Cargo.toml" && -d "$dir/tests" ]] || continue
    tests=()
    for t in "$dir"tests/loom_*.rs; do
        [[ -e "$t" ]] || continue
        name="$(basename "$t" .rs)"
        tests+=(--test "$name")
    done
    ((${#tests[@]})) || continue
    pkg="$(sed -n 's/^name *= *"\(.*\)"/\1/p' "$dir/Cargo.toml" | head -n1)"
    echo "loom: $pkg: ${tests[*]} (LOOM_MAX_PREEMPTIONS=$LOOM_MAX_PREEMPTIONS)"
    cargo test --locked -p "$pkg" --release "${tests[@]}" "$@"
    found=$((found + ${#tests[@]} / 2))
done

if ((found == 0)); then
    echo "loom: no tests/loom_*.rs found in any crate; nothing was model-checked" >&2
    exit 1
fi
echo "loom: ok ($found test file(s))"
