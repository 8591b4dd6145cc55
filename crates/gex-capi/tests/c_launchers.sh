#!/usr/bin/env bash
# gex's C libraries under the launchers clusters have: installs gex-capi and gex-shmem
# with gex-boot's PMIx client (install.sh, CARGO_FEATURES=pmix) under a temporary
# prefix, builds C programs against them as a user does (pkg-config, oshcc, and the
# static libgex.a through `pkg-config --static`), and runs them under
#
#   bash crates/gex-capi/tests/c_launchers.sh mpirun   # Open MPI's mpirun (PMIx)
#   bash crates/gex-capi/tests/c_launchers.sh srun     # srun --mpi=pmi2 and --mpi=pmix
#
# checking every rank's line of output (the programs check their own results: gex-capi's
# hello.c and putget.c, gex-shmem's examples/c/ring.c). `srun` needs a running Slurm
# (ci/slurm.sh starts one and runs this); gex-run and MPICH's mpiexec are
# c_examples.sh's and sos/run's. ci/test runs the mpirun form in its `mpirun` step and
# the srun form in its `slurm` step (docs/capi.md, docs/shmem.md).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
mode="${1:-}"
case "$mode" in
mpirun) command -v mpirun.openmpi >/dev/null || { echo "c_launchers: mpirun.openmpi is not installed (Debian: openmpi-bin)" >&2; exit 1; } ;;
srun) command -v srun >/dev/null || { echo "c_launchers: srun is not installed (Debian: slurm-wlm)" >&2; exit 1; } ;;
*)
    sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
# shellcheck source=crates/gex-capi/tests/common.sh
source crates/gex-capi/tests/common.sh
c_test_setup c_launchers

for lib in gex-capi gex-shmem; do
    echo "+ CARGO_FEATURES=pmix PREFIX=$prefix bash crates/$lib/install.sh"
    CARGO_FEATURES=pmix PREFIX="$prefix" bash "crates/$lib/install.sh"
done
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
CC="${CC:-cc}"
cd "$work"
for p in hello putget; do
    # shellcheck disable=SC2046
    "$CC" -std=c11 -Wall -Wextra -Werror "$root/crates/gex-capi/examples/c/$p.c" \
        $(pkg-config --cflags --libs gex) -o "$p"
done
# The static library with the PMIx client: pkg-config --static names libpmix too.
libdir="$(pkg-config --variable=libdir gex)"
# shellcheck disable=SC2046
"$CC" -std=c11 -Wall -Werror "$root/crates/gex-capi/examples/c/hello.c" $(pkg-config --cflags gex) \
    "$libdir/libgex.a" $(pkg-config --static --libs gex | sed 's/-lgex //') \
    -o hello_static
ldd hello_static | grep -q libgex && fail "hello_static links libgex.so"
"$prefix/bin/oshcc" -std=c11 -Wall -Wextra -Werror "$root/crates/gex-shmem/examples/c/ring.c" -o ring

# The three programs on N ranks under the launcher command LAUNCH... (its -n is added).
programs() {
    local what="$1"
    shift
    run "hello ($what)" 3 '^hello from rank [0-2] of 3$' "$@" -n 3 ./hello
    run "hello_static ($what)" 2 '^hello from rank [01] of 2$' "$@" -n 2 ./hello_static
    run "putget ($what)" 2 '^rank [01] of 2: put/get/events/atomics ok, sum of ranks 1$' "$@" -n 2 ./putget
    run "ring ($what)" 3 '^PE [0-2] of 3: put, atomic, reduce and broadcast ok$' "$@" -n 3 ./ring
}

case "$mode" in
mpirun)
    programs "mpirun" mpirun.openmpi --allow-run-as-root --oversubscribe
    ;;
srun)
    for mpi in pmi2 pmix; do
        programs "srun --mpi=$mpi" srun --mpi="$mpi" --overcommit --kill-on-bad-exit=1
    done
    ;;
esac
echo "c_launchers: every C program ran under $mode"
