# shellcheck shell=bash
# What c_examples.sh and c_launchers.sh share, sourced by them from the workspace root
# (not run on its own):
#
#   c_test_setup NAME   sets root (the workspace), TIMEOUT ($CAPI_TIMEOUT, default
#                       120s), work (a temporary directory, removed at exit) and prefix
#                       (an install prefix inside it); `fail` then prefixes NAME
#   fail MESSAGE...     prints the message and exits 1
#   run NAME N REGEX CMD...
#                       runs CMD (no standard input, under TIMEOUT), shows its output,
#                       and fails unless exactly N of its lines match REGEX

c_test_setup() {
    c_test_name="$1"
    root="$PWD"
    TIMEOUT="${CAPI_TIMEOUT:-120s}"
    work="$(mktemp -d "${TMPDIR:-/tmp}/gex-$1.XXXXXX")"
    trap 'rm -rf "$work"' EXIT
    prefix="$work/prefix"
}

fail() {
    echo "$c_test_name: $*" >&2
    exit 1
}

run() {
    local name="$1" want="$2" re="$3" out n
    shift 3
    echo "+ ${*#"$work/"}"
    out="$(timeout --kill-after=10s "$TIMEOUT" "$@" </dev/null)" || fail "$name: exit $?"
    echo "$out" | sed 's/^/    /'
    n="$(grep -c -E "$re" <<<"$out" || true)"
    [[ "$n" == "$want" ]] || fail "$name: $n lines match '$re', expected $want"
}
