#!/usr/bin/env bash
# Side by side: the anchors of ../shared/anchors and gex-perf, interleaved, 3 rounds.
# Run from the repository root after `cargo build --release -p gex-perf`; prints raw lines
# (anchor lines and gex-perf JSON). Keep the machine otherwise idle (or run under nice -n -20).
cd "$(dirname "$0")/../.." || exit 1
P=target/release/gex-perf
A=${ANCHORS_BUILD:-/tmp/gex-anchors}
bash ../shared/anchors/run.sh phys >/dev/null 2>&1  # builds the anchor programs
for round in 1 2 3; do
  echo "### round $round $(date +%T)"
  $A/pingpong proc 2000000 0 1 | tail -1
  taskset -c 0 $A/memcpy_bw 1048576 0.3 | tail -1
  bash ../shared/anchors/run.sh ucx 2>/dev/null | grep ANCHOR
  $P -n 2 am --json --test am_short_rtt --test am_medium_rtt --test am_short_flood --test am_long_flood_bw --sizes 8,4096,1048576 2>/dev/null
  $P -n 8 am --json --test am_short_rtt 2>/dev/null
  $A/pingpong proc 2000000 0 1 | tail -1
done
