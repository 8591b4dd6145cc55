# Sourced by contexts.sh, inline_calls.sh and thread_levels.sh (not run by itself):
# prefix_and_configs, expect_ok, build_test, conduit_env.
#
# prefix_and_configs TAG ARGS...: the scripts' arguments, PREFIX [CONFIG...]: sets
# prefix and the array configs (default: smp smp-am ofi); exits with the usage if
# PREFIX is missing.
prefix_and_configs() {
    local tag="$1"
    shift
    [[ $# -ge 1 ]] || { echo "usage: $tag PREFIX [smp|smp-am|ofi ...]" >&2; exit 2; }
    prefix="$1"
    shift
    configs=("$@")
    [[ ${#configs[@]} -gt 0 ]] || configs=(smp smp-am ofi)
}

# expect_ok TAG NAME OUT CMD...: runs CMD under a 60 s timeout with its output in OUT;
# passes (printing TAG and the program's "NAME: ok" line) if it exits 0 and printed that
# line, else prints TAG, FAILED and the output's last lines and returns 1.
expect_ok() {
    local tag="$1" name="$2" out="$3"
    shift 3
    if timeout 60 "$@" >"$out" 2>&1 && grep -q "^$name: ok" "$out"; then
        echo "$tag: $(grep "^$name: ok" "$out")"
    else
        echo "$tag: FAILED; its output:" >&2
        tail -n 20 "$out" >&2
        return 1
    fi
}

# build_test PREFIX NAME: makes $work (a directory removed when the script exits) and
# builds tests/NAME.c into $work/NAME with PREFIX's oshcc (exits the script if that fails).
build_test() {
    local src
    src="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$2.c"
    work="$(mktemp -d "/tmp/gex-sh-$2.XXXXXX")"
    # shellcheck disable=SC2064 # $work is expanded now, on purpose
    trap "rm -rf '$work'" EXIT
    "$1/bin/oshcc" -std=c11 -O1 -g -Wall -Werror -pthread "$src" -o "$work/$2" \
        || { echo "$2.sh: oshcc failed" >&2; exit 1; }
}

# conduit_env TAG PREFIX CONFIG: sets the array cenv to the environment of a run on
# CONFIG: smp (nothing), smp-am (GEX_RMA_PATH=am: every operation through the
# endpoint) or ofi (tcp;ofi_rxm). Returns 1, saying so, for ofi when PREFIX's library
# has no ofi conduit; exits the script on an unknown configuration.
conduit_env() {
    local tag="$1" prefix="$2"
    cenv=()
    case "$3" in
    smp) ;;
    smp-am) cenv=(GEX_RMA_PATH=am) ;;
    ofi)
        # (grep without -q: nm must not die of SIGPIPE under pipefail)
        if ! nm -D "$prefix/lib/libgexshmem.so" | grep fi_fabric >/dev/null; then
            echo "$tag: ofi: skipped (the install has no ofi conduit)"
            return 1
        fi
        cenv=(GEX_CONDUIT=ofi GEX_OFI_PROVIDER=tcp) ;;
    *) echo "$tag: unknown configuration $3" >&2; exit 2 ;;
    esac
}
