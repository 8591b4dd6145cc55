#!/usr/bin/env bash
# Builds tests/inline_calls.c against an install of gex-shmem twice (shmem.h's inline
# gets, and -DGEXSHMEM_NO_INLINE: the library's calls alone) and runs both on 2 PEs
# over smp (a peer's heap is copied inline), smp with GEX_RMA_PATH=am and ofi
# (tcp;ofi_rxm) (the inline copy declines every peer: the library carries the gets).
# docs/shmem.md, "Inline calls".
#
#   bash crates/gex-shmem/tests/inline_calls.sh PREFIX [CONFIG...]
#
# PREFIX: an install of gex-shmem (sos/run makes one with ofi and runs this). CONFIG:
# any of smp, smp-am, ofi (default: all three; ofi is skipped with a message when the
# install has no ofi).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=crates/gex-shmem/tests/expect.sh
source "$here/expect.sh"
prefix_and_configs inline_calls.sh "$@"
build_test "$prefix" inline_calls
"$prefix/bin/oshcc" -std=c11 -O1 -g -Wall -Werror -DGEXSHMEM_NO_INLINE "$here/inline_calls.c" \
    -o "$work/inline_calls_noinline" || { echo "inline_calls.sh: oshcc -DGEXSHMEM_NO_INLINE failed" >&2; exit 1; }
# The inline build must reach the view (undefined, or a copy relocation: gcc's PIE
# code reads extern data PC-relative), the other must not name it.
nm "$work/inline_calls" | grep -qE ' [UB] gexshmem_view_v1$' \
    || { echo "inline_calls.sh: the inline build does not read gexshmem_view_v1" >&2; exit 1; }
if nm "$work/inline_calls_noinline" | grep -q gexshmem_view_v1; then
    echo "inline_calls.sh: the -DGEXSHMEM_NO_INLINE build reads gexshmem_view_v1" >&2
    exit 1
fi
failed=0
for c in "${configs[@]}"; do
    conduit_env inline_calls.sh "$prefix" "$c" || continue
    # Only over smp are the peers' heaps mapped here (the AM path and ofi: none).
    expect=0
    [[ $c == smp ]] && expect=1
    for b in inline_calls inline_calls_noinline; do
        expect_ok "inline_calls.sh: $c, $b" inline_calls "$work/$c.$b.out" \
            env "${cenv[@]}" EXPECT_INLINE=$expect "$prefix/bin/oshrun" -n 2 "$work/$b" || failed=1
    done
done
exit $failed
