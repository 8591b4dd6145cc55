#!/usr/bin/env bash
# Builds fi-floor (the raw libfabric floor for gex-perf over ofi) into target/release/fi-floor.
#   benches/fi-floor/build.sh [output]
# Needs gcc and the system libfabric (Debian 12: libfabric-dev, pkg-config).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../../target/release/fi-floor}
mkdir -p "$(dirname "$out")"
# shellcheck disable=SC2046 # pkg-config prints several words on purpose
gcc -O2 -g -Wall -Wextra -o "$out" "$here/fi_floor.c" $(pkg-config --cflags --libs libfabric)
echo "$out"
