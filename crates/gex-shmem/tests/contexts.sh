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
[[ $# -ge 1 ]] || { echo "usage: contexts.sh PREFIX [smp|smp-am|ofi ...]" >&2; exit 2; }
prefix="$1"
shift
configs=("$@")
[[ ${#configs[@]} -gt 0 ]] || configs=(smp smp-am ofi)
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=crates/gex-shmem/tests/expect.sh
source "$here/expect.sh"
build_test "$prefix" contexts
failed=0
for c in "${configs[@]}"; do
    envs=(GEX_MAX_ENDPOINTS=16)
    case "$c" in
    smp) envs+=(EXPECT_CTX_EP=0) ;;
    smp-am) envs+=(GEX_RMA_PATH=am EXPECT_CTX_EP=1) ;;
    ofi)
        if ! nm -D "$prefix/lib/libgexshmem.so" | grep fi_fabric >/dev/null; then
            echo "contexts.sh: ofi: skipped (the install has no ofi conduit)"
            continue
        fi
        envs+=(GEX_CONDUIT=ofi GEX_OFI_PROVIDER=tcp EXPECT_CTX_EP=1) ;;
    *) echo "contexts.sh: unknown configuration $c" >&2; exit 2 ;;
    esac
    expect_ok "contexts.sh: $c" contexts "$work/$c.out" \
        env "${envs[@]}" "$prefix/bin/oshrun" -n 2 "$work/contexts" || failed=1
done
exit $failed
