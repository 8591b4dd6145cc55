#!/usr/bin/env bash
# ci/miri.sh — run gex's in-process tests under Miri, the interpreter that reports
# undefined behaviour: out-of-bounds and dangling accesses, invalid values, aliasing
# violations (Stacked Borrows), data races and weak-memory effects between threads,
# leaks, and wrong arguments to the system calls it emulates.
#
# What runs, in two lanes (RUNS below; docs/testing.md, "Miri", has the counts, the
# durations and the reasoned list of what is skipped):
#   gex-sync     lib tests, ring_stress
#   gex-core     lib tests, core_api, bad_input, bad_bootstrap
#   gex-rma      lib tests, layer (the RMA layer on loopback, both paths), bad_input
#   gex-coll     lib tests, bad_input, report
#   gex-msg      lib tests (the registry of lent buffers, module direct)
#   gex-testkit  conformance_loopback, sim, bad_input, long_race, lib tests;
#                conformance_sim (three of its five shapes) and faults only with
#                MIRI_FULL=1 (CI's time budget)
#   probes       gex-rma rma_race and atomic_race, gex-core long_race, gex-testkit
#                long_race and atomic_race (data races, Miri only)
# A test that cannot run under Miri is `#[cfg_attr(miri, ignore = "<reason>")]` at the
# test (it shows up as ignored, with its reason); a suite too slow for Miri runs a
# Miri-sized configuration under `cfg(miri)` (fewer iterations, ranks, smaller
# segments); what else is left out is listed in docs/testing.md.
#
# Miri is a component of a nightly toolchain, pinned here (MIRI_TOOLCHAIN) so that a
# new nightly cannot turn the step red by itself: Miri's checks change between
# nightlies (the 2026-05-19 one crashed on the ring's mixed-size accesses, a Miri bug
# fixed in July 2026). `ci/miri.sh --install` installs it (ci/test's packages step
# runs that). Its standard library for Miri (the "sysroot") is built into
# target/miri-sysroot/<toolchain>, not into ~/.cache/miri, which every other Miri
# user of the machine shares (two toolchains there rebuild it in turn).
#
# Everything is built first (both cores), then the test binaries run in two lanes at
# once: Miri interprets one thread at a time, so a lane uses one core. The build goes
# to target/miri (cargo miri's own directory, apart from the normal build).
#
# Environment:
#   MIRI_TOOLCHAIN   default nightly-2026-10-30
#   MIRIFLAGS        default -Zmiri-isolation-error=warn-nobacktrace (docs/testing.md,
#                    "Miri", says why this and nothing else)
#   MIRI_LANES       2 (default) or 1
#   MIRI_FULL        1 adds gex-testkit's conformance_sim (about 9 more minutes)
#
# Usage:
#   ci/miri.sh                                   everything
#   ci/miri.sh --install                         the toolchain with miri and rust-src
#   ci/miri.sh --toolchain                       print the toolchain's name
#   ci/miri.sh --list                            the test runs, one per line
#   ci/miri.sh -p gex-sync --lib -- ring::       one run of your own (cargo miri test
#                                                arguments), same toolchain and flags
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

MIRI_TOOLCHAIN="${MIRI_TOOLCHAIN:-nightly-2026-10-30}"
MIRI_LANES="${MIRI_LANES:-2}"
export MIRIFLAGS="${MIRIFLAGS:--Zmiri-isolation-error=warn-nobacktrace}"
export MIRI_SYSROOT="${MIRI_SYSROOT:-$PWD/target/miri-sysroot/$MIRI_TOOLCHAIN}"
# Deprecations only the nightly compiler reports (fetch_update was renamed there): gex
# builds with Rust 1.85, which has not the new name.
export RUSTFLAGS="${RUSTFLAGS:-} -A deprecated"

# The runs: lane, package, `cargo test` target selection and test filters. The lanes
# take about the same time (docs/testing.md, "Miri", lists the durations).
RUNS=(
    # The data-race probes: they prove something only under Miri (ignored natively).
    "1 gex-rma --test rma_race --test atomic_race"
    "1 gex-core --test long_race"
    "1 gex-testkit --test long_race --test atomic_race"
    "2 gex-testkit --lib --test conformance_loopback --test sim --test bad_input"
    "2 gex-sync --lib --test ring_stress"
    "2 gex-core --lib --test core_api --test bad_input --test bad_bootstrap"
    "1 gex-rma --lib --test layer --test bad_input"
    "1 gex-coll --lib --test bad_input --test report"
    # gex-msg's registry of lent buffers and the cooperative copy's protocol.
    "1 gex-msg --lib"
)
# The simulator conformance suite under Miri (three of its five shapes) takes about 9
# minutes, as much as everything else in a lane: CI's time budget leaves it out (the
# simulated NIC's unsafe code is still run by the long_race and atomic_race probes, and
# the same cases run under Miri on loopback); MIRI_FULL=1 adds it.
if [[ "${MIRI_FULL:-0}" == 1 ]]; then
    RUNS+=("2 gex-testkit --test conformance_sim --test faults")
fi

cargo_miri() {
    cargo "+$MIRI_TOOLCHAIN" miri "$@"
}

case "${1:-}" in
    --install)
        rustup toolchain install "$MIRI_TOOLCHAIN" --profile minimal --component miri,rust-src
        exit 0
        ;;
    --toolchain)
        echo "$MIRI_TOOLCHAIN"
        exit 0
        ;;
    --list)
        for r in "${RUNS[@]}"; do
            read -r lane pkg args <<<"$r"
            echo "lane $lane: cargo +$MIRI_TOOLCHAIN miri test -p $pkg $args"
        done
        exit 0
        ;;
esac

if ! cargo_miri --version >/dev/null 2>&1; then
    echo "miri: no Miri in toolchain $MIRI_TOOLCHAIN: run ci/miri.sh --install" >&2
    exit 1
fi
echo "miri: $(cargo_miri --version); MIRIFLAGS=$MIRIFLAGS; sysroot $MIRI_SYSROOT"
cargo_miri setup

if (($# > 0)); then
    exec cargo "+$MIRI_TOOLCHAIN" miri test --locked "$@"
fi

# Build every test binary first, with both cores.
t0=$SECONDS
for r in "${RUNS[@]}"; do
    read -r _ pkg args <<<"$r"
    targets="${args%% -- *}"
    # shellcheck disable=SC2086 # the target selection is words
    cargo_miri test --locked --no-run -p "$pkg" $targets
done
echo "miri: built in $((SECONDS - t0))s"

logs=target/miri-logs
rm -rf "$logs"
mkdir -p "$logs"

# Runs the runs of one lane one after the other, each into its own log.
lane() {
    local want="$1" r lane pkg args n=0 rc=0 t
    for r in "${RUNS[@]}"; do
        read -r lane pkg args <<<"$r"
        ((MIRI_LANES == 1 || lane == want)) || continue
        n=$((n + 1))
        local log="$logs/lane$want-$n-$pkg.log"
        t=$SECONDS
        # shellcheck disable=SC2086 # the target selection and filters are words
        if cargo_miri test --locked --no-fail-fast -p "$pkg" $args >"$log" 2>&1; then
            echo "miri: lane $want: ok     $((SECONDS - t))s  -p $pkg $args"
        else
            echo "miri: lane $want: FAILED $((SECONDS - t))s  -p $pkg $args (log: $log)"
            rc=1
        fi
    done
    return "$rc"
}

t0=$SECONDS
pids=()
if ((MIRI_LANES == 1)); then
    lane 1 &
    pids+=($!)
else
    lane 1 &
    pids+=($!)
    lane 2 &
    pids+=($!)
fi
rc=0
for p in "${pids[@]}"; do
    wait "$p" || rc=1
done
echo "miri: tests ran in $((SECONDS - t0))s"

# Every log (a failure's Miri report is what the reader needs), then the counts.
for log in "$logs"/*.log; do
    echo
    echo "---- $log"
    grep -v -E '^ +(Compiling|Fresh|Blocking) ' "$log" || true
done
echo
echo "miri: tests per binary:"
for log in "$logs"/*.log; do
    awk '/^ +Running / { bin = $2 } /^test result:/ { sub(/; finished in.*/, ""); printf "    %-34s %s\n", bin, $0 }' "$log"
done
if ((rc != 0)); then
    echo
    echo "miri: FAILED; digest:"
    grep -h -E "^error: (Undefined Behavior|unsupported operation)|^test .* FAILED$|panicked at" "$logs"/*.log | head -n 40 || true
fi
exit "$rc"
