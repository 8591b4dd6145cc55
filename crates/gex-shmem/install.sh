#!/usr/bin/env bash
# Builds gex-shmem (OpenSHMEM 1.5 on gex) (release mode) and installs it under a prefix:
#
#   PREFIX=/opt/gex bash crates/gex-shmem/install.sh
#
#   $PREFIX/include/shmem.h                   the header (hand-written)
#   $PREFIX/lib/libgexshmem.so, libgexshmem.a the shared and the static library
#   $PREFIX/lib/pkgconfig/gexshmem.pc         for `pkg-config --cflags --libs gexshmem`
#   $PREFIX/bin/oshcc                         compiler wrapper (`oshcc prog.c -o prog`)
#   $PREFIX/bin/oshrun, gex-run               the launcher and its alias (`oshrun -n 4 ./prog`)
#
# PREFIX defaults to /usr/local. CARGO_FEATURES (e.g. "ofi") adds features of the
# gex-shmem crate (ofi: the libfabric conduit, needs the system libfabric >= 1.17).
# PROFILE=debug installs the debug build instead (what the sos step of ci/test uses: it
# shares the artefacts of the test step's builds).
# docs/shmem.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
PREFIX="${PREFIX:-/usr/local}"
features=()
[[ -n "${CARGO_FEATURES:-}" ]] && features=(--features "$CARGO_FEATURES")
PROFILE="${PROFILE:-release}"
profile=(--release)
[[ "$PROFILE" == debug ]] && profile=()
cargo build "${profile[@]}" --locked -p gex-shmem --lib "${features[@]}"
cargo build "${profile[@]}" --locked -p gex-boot --bin gex-run
target="${CARGO_TARGET_DIR:-target}/$PROFILE"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)"
install -d "$PREFIX/include" "$PREFIX/lib/pkgconfig" "$PREFIX/bin"
install -m 0644 crates/gex-shmem/include/shmem.h "$PREFIX/include/shmem.h"
install -m 0755 "$target/libgexshmem.so" "$PREFIX/lib/libgexshmem.so"
install -m 0644 "$target/libgexshmem.a" "$PREFIX/lib/libgexshmem.a"
install -m 0755 "$target/gex-run" "$PREFIX/bin/gex-run"
fill() { sed -e "s|@PREFIX@|$PREFIX|g" -e "s|@VERSION@|$version|g" "$1"; }
fill crates/gex-shmem/gexshmem.pc.in >"$PREFIX/lib/pkgconfig/gexshmem.pc"
fill crates/gex-shmem/oshcc.in >"$PREFIX/bin/oshcc"
fill crates/gex-shmem/oshrun.in >"$PREFIX/bin/oshrun"
chmod 0755 "$PREFIX/bin/oshcc" "$PREFIX/bin/oshrun"
echo "installed gex-shmem $version under $PREFIX: include/shmem.h, lib/libgexshmem.{so,a}, lib/pkgconfig/gexshmem.pc, bin/oshcc, bin/oshrun, bin/gex-run"
