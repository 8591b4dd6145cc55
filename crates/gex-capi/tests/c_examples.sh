#!/usr/bin/env bash
# Installs gex's C ABI under a temporary prefix (install.sh), builds the C examples of
# examples/c with the system C compiler through pkg-config, runs them under gex-run
# (and MPICH's mpiexec.hydra when it is there) and checks their output, then runs each
# under valgrind's memcheck in every rank: any invalid access or definite leak fails.
#
#   bash crates/gex-capi/tests/c_examples.sh            # everything
#   VALGRIND=0 bash crates/gex-capi/tests/c_examples.sh # without the memcheck runs
#   CAPI_OFI=1 bash crates/gex-capi/tests/c_examples.sh  # also a build with the ofi
#       conduit (its own target directory, a few minutes more), its examples run with
#       GEX_CONDUIT=ofi (not in CI yet)
#
# ci/test runs it as its `capi` step. No valgrind suppression is needed: every rank
# frees all its heap blocks by exit (docs/capi.md, "Testing").
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
# shellcheck source=crates/gex-capi/tests/common.sh
source crates/gex-capi/tests/common.sh
c_test_setup c_examples
VG_TIMEOUT="${CAPI_VALGRIND_TIMEOUT:-300s}"

echo "+ PREFIX=$prefix bash crates/gex-capi/install.sh"
PREFIX="$prefix" bash crates/gex-capi/install.sh
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
pkg-config --exists gex || fail "pkg-config does not find gex"
gexrun="$prefix/bin/gex-run"
CC="${CC:-cc}"

# The examples, through pkg-config as a user builds them; warnings are errors.
cd "$root/crates/gex-capi/examples/c"
for p in hello am_pingpong putget teams_colls atomics_long threads vis_reduce; do
    echo "+ $CC -std=c11 -Wall -Wextra -Werror $p.c \$(pkg-config --cflags --libs gex)"
    # shellcheck disable=SC2046
    "$CC" -std=c11 -Wall -Wextra -Werror "$p.c" $(pkg-config --cflags --libs gex) -o "$work/$p"
done
# The static library: no libgex.so needed at run time.
libdir="$(pkg-config --variable=libdir gex)"
# shellcheck disable=SC2046
"$CC" -std=c11 -Wall -Werror hello.c $(pkg-config --cflags gex) "$libdir/libgex.a" \
    $(pkg-config --static --libs-only-l gex | sed 's/-lgex //') -o "$work/hello_static"
if ldd "$work/hello_static" | grep -q libgex; then
    fail "hello_static links libgex.so"
fi
# The header is C++ as well.
if command -v c++ >/dev/null; then
    echo '#include <gex.h>' | c++ -x c++ -fsyntax-only -Wall -Werror $(pkg-config --cflags gex) -
fi
cd "$work"

run hello-1 1 '^hello from rank 0 of 1$' ./hello
run hello-static 2 '^hello from rank [01] of 2$' "$gexrun" -n 2 ./hello_static
for n in 2 3; do
    run "hello-$n" "$n" "^hello from rank [0-9] of $n\$" "$gexrun" -n "$n" ./hello
    run "am_pingpong-$n" "$n" "^rank [0-9] of $n: 1000 short and 1000 medium round trips ok\$" "$gexrun" -n "$n" ./am_pingpong
    run "putget-$n" "$n" "^rank [0-9] of $n: put/get/events/atomics ok, sum of ranks $((n * (n - 1) / 2))\$" "$gexrun" -n "$n" ./putget
done
run teams_colls-1 1 '^rank 0 of 1: teams/collectives/nbi/events ok$' ./teams_colls
run atomics_long-1 1 '^rank 0 of 1: long AMs and typed atomics ok$' ./atomics_long
for n in 2 4; do
    run "teams_colls-$n" "$n" "^rank [0-9] of $n: teams/collectives/nbi/events ok\$" "$gexrun" -n "$n" ./teams_colls
    run "atomics_long-$n" "$n" "^rank [0-9] of $n: long AMs and typed atomics ok\$" "$gexrun" -n "$n" ./atomics_long
done
for n in 1 3; do
    run "threads-$n" "$n" "^rank [0-9] of $n: 2 endpoints made at run time, one per thread, ok\$" "$gexrun" -n "$n" ./threads
done
for n in 1 3; do
    run "vis_reduce-$n" "$n" "^rank [0-9] of $n: vis and user reductions ok\$" "$gexrun" -n "$n" ./vis_reduce
done
run atomics_long-progress 2 '^rank [01] of 2: long AMs and typed atomics ok \(progress thread\)$' \
    "$gexrun" -n 2 ./atomics_long progress
if command -v mpiexec.hydra >/dev/null; then
    run hello-mpiexec 2 '^hello from rank [01] of 2$' mpiexec.hydra -n 2 ./hello
    run putget-mpiexec 2 '^rank [01] of 2: put/get/events/atomics ok, sum of ranks 1$' mpiexec.hydra -n 2 ./putget
    run teams_colls-mpiexec 2 '^rank [01] of 2: teams/collectives/nbi/events ok$' mpiexec.hydra -n 2 ./teams_colls
else
    echo "(no mpiexec.hydra: the MPICH runs are left out)"
fi

if [[ "${CAPI_OFI:-0}" == 1 ]]; then
    ofi="$work/ofi"
    echo "+ PREFIX=$ofi CARGO_FEATURES=ofi bash crates/gex-capi/install.sh"
    (cd "$root" && PREFIX="$ofi" CARGO_FEATURES=ofi CARGO_TARGET_DIR="$root/target/capi-ofi" \
        bash crates/gex-capi/install.sh)
    for p in am_pingpong putget teams_colls atomics_long; do
        # shellcheck disable=SC2046
        "$CC" -std=c11 -Wall -Wextra -Werror "$root/crates/gex-capi/examples/c/$p.c" \
            $(PKG_CONFIG_PATH="$ofi/lib/pkgconfig" pkg-config --cflags --libs gex) -o "$work/ofi-$p"
    done
    run am_pingpong-ofi 2 '^rank [01] of 2: 1000 short and 1000 medium round trips ok$' \
        env GEX_CONDUIT=ofi "$ofi/bin/gex-run" -n 2 ./ofi-am_pingpong
    run putget-ofi 2 '^rank [01] of 2: put/get/events/atomics ok, sum of ranks 1$' \
        env GEX_CONDUIT=ofi "$ofi/bin/gex-run" -n 2 ./ofi-putget
    run teams_colls-ofi 2 '^rank [01] of 2: teams/collectives/nbi/events ok$' \
        env GEX_CONDUIT=ofi "$ofi/bin/gex-run" -n 2 ./ofi-teams_colls
    run atomics_long-ofi 2 '^rank [01] of 2: long AMs and typed atomics ok$' \
        env GEX_CONDUIT=ofi "$ofi/bin/gex-run" -n 2 ./ofi-atomics_long
fi

if [[ "${VALGRIND:-1}" != 0 ]]; then
    command -v valgrind >/dev/null || fail "valgrind is not installed (VALGRIND=0 skips these runs)"
    for p in hello am_pingpong putget teams_colls atomics_long threads vis_reduce; do
        mkdir -p "vg-$p"
        echo "+ gex-run -n 2 valgrind --leak-check=full ... ./$p"
        rc=0
        timeout --kill-after=10s "$VG_TIMEOUT" "$gexrun" -n 2 valgrind --tool=memcheck \
            --error-exitcode=99 --leak-check=full --show-leak-kinds=definite \
            --errors-for-leak-kinds=definite --num-callers=40 --log-file="vg-$p/%p.log" \
            "./$p" </dev/null >/dev/null || rc=$?
        logs=("vg-$p"/*.log)
        [[ "${#logs[@]}" == 2 ]] || fail "$p under valgrind: ${#logs[@]} logs, expected one per rank (2)"
        bad=0
        for f in "${logs[@]}"; do
            echo "    $(grep -h 'ERROR SUMMARY' "$f" | sed 's/^==[0-9]*== //')"
            grep -q 'ERROR SUMMARY: 0 errors' "$f" || bad=1
        done
        if ((rc != 0 || bad)); then
            cat "vg-$p"/*.log >&2
            fail "$p under valgrind: exit $rc"
        fi
    done
fi
echo "c_examples: all passed"
