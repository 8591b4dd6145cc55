#!/usr/bin/env bash
# Builds tests/contexts.c against an install of gex-shmem and runs it on 2 PEs over smp
# (direct path: contexts need no endpoint), smp with GEX_RMA_PATH=am and ofi
# (tcp;ofi_rxm) (both: every context operation through the context's own endpoint,
# which the program checks). docs/shmem.md, "Contexts".
#
#   bash crates/gex-shmem/tests/contexts.sh PREFIX [CONFIG...]
#
# PREFIX: an install of gex-shmem with the ofi conduit (install.sh with
# CARGO_FEATURES=ofi; sos/run makes one and runs this). CONFIG: any of smp, smp-am, ofi
# (default: all three; ofi is skipped with a message when the install has no ofi).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=crates/gex-shmem/tests/expect.sh
source "$here/expect.sh"
prefix_and_configs contexts.sh "$@"
build_test "$prefix" contexts
failed=0
for c in "${configs[@]}"; do
    conduit_env contexts.sh "$prefix" "$c" || continue
    # Over smp contexts need no endpoint; through the AM path and ofi they have their own.
    expect=1
    [[ $c == smp ]] && expect=0
    expect_ok "contexts.sh: $c" contexts "$work/$c.out" \
        env GEX_MAX_ENDPOINTS=16 "${cenv[@]}" EXPECT_CTX_EP=$expect "$prefix/bin/oshrun" -n 2 "$work/contexts" || failed=1
done
exit $failed
