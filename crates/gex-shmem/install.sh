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
# PREFIX defaults to /usr/local. CARGO_FEATURES (e.g. "ofi pmix") adds features of the
# gex-shmem crate: ofi, the libfabric conduit (needs the system libfabric >= 1.17); pmix,
# gex-boot's PMIx client, for Open MPI's mpirun, prterun and srun --mpi=pmix (needs the
# system libpmix >= 4: libpmix-dev). mpiexec (MPICH's hydra), srun --mpi=pmi2 and
# gex-run need no feature.
# PROFILE=debug installs the debug build instead (what the sos step of ci/test uses: it
# shares the artefacts of the test step's builds). The steps are gex-capi's
# install-lib.sh, shared with crates/gex-capi/install.sh.
# docs/shmem.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
# shellcheck source=crates/gex-capi/install-lib.sh
source crates/gex-capi/install-lib.sh
install_lib gex-shmem gexshmem crates/gex-shmem/include/shmem.h
fill crates/gex-shmem/gexshmem.pc.in >"$PREFIX/lib/pkgconfig/gexshmem.pc"
fill crates/gex-shmem/oshcc.in >"$PREFIX/bin/oshcc"
fill crates/gex-shmem/oshrun.in >"$PREFIX/bin/oshrun"
chmod 0755 "$PREFIX/bin/oshcc" "$PREFIX/bin/oshrun"
echo "installed gex-shmem $version under $PREFIX: include/shmem.h, lib/libgexshmem.{so,a}, lib/pkgconfig/gexshmem.pc, bin/oshcc, bin/oshrun, bin/gex-run"
