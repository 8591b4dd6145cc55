# shellcheck shell=bash
# The install steps shared by crates/gex-capi/install.sh and crates/gex-shmem/install.sh,
# sourced by them from the workspace root (not run on its own):
#
#   install_lib CRATE LIB HEADER
#
# builds the library crate CRATE (lib$LIB.so, lib$LIB.a) and gex-boot's gex-run in the
# profile $PROFILE (release unless PROFILE=debug) with the crate's features
# $CARGO_FEATURES, and installs under $PREFIX (default /usr/local): HEADER to include/,
# the two libraries to lib/ and gex-run to bin/ (lib/pkgconfig is made for the caller's
# .pc file). It sets `PREFIX`, `version` (the workspace's) and `system_libs` (what the
# static library needs of the system for the features asked for: libfabric for `ofi`,
# libpmix for `pmix`, as pkg-config gives them or, with a run path, LIBFABRIC_DIR /
# LIBPMIX_DIR; the shared library records its own); `fill TEMPLATE` then writes TEMPLATE with
# @PREFIX@, @VERSION@ and @SYSTEM_LIBS@ filled in to its standard output.

install_lib() {
    local crate="$1" lib="$2" header="$3"
    PREFIX="${PREFIX:-/usr/local}"
    local features=() profile=(--release)
    [[ -n "${CARGO_FEATURES:-}" ]] && features=(--features "$CARGO_FEATURES")
    [[ "${PROFILE:-release}" == debug ]] && profile=()
    cargo build "${profile[@]}" --locked -p "$crate" --lib "${features[@]}"
    cargo build "${profile[@]}" --locked -p gex-boot --bin gex-run
    local target
    target="${CARGO_TARGET_DIR:-target}/${PROFILE:-release}"
    version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)"
    install -d "$PREFIX/include" "$PREFIX/lib/pkgconfig" "$PREFIX/bin"
    install -m 0644 "$header" "$PREFIX/include/${header##*/}"
    install -m 0755 "$target/lib$lib.so" "$PREFIX/lib/lib$lib.so"
    install -m 0644 "$target/lib$lib.a" "$PREFIX/lib/lib$lib.a"
    install -m 0755 "$target/gex-run" "$PREFIX/bin/gex-run"
    system_libs="$(features_system_libs)"
}

# The system libraries of the features in $CARGO_FEATURES (space- or comma-separated),
# as linker arguments on one line.
features_system_libs() {
    local f=" ${CARGO_FEATURES:-} " libs=()
    f="${f//,/ }"
    [[ "$f" == *" ofi "* ]] && system_lib fabric libfabric "${LIBFABRIC_DIR:-}"
    [[ "$f" == *" pmix "* ]] && system_lib pmix pmix "${LIBPMIX_DIR:-}"
    echo "${libs[*]}"
}

# system_lib LIB PCNAME DIR: appends to the caller's `libs` the arguments that link
# -lLIB: from DIR's lib/ or lib64/ (with a run path) when DIR is set, else pkg-config's.
system_lib() {
    local d fl=()
    if [[ -n "$3" ]]; then
        for d in lib lib64; do
            [[ -d "$3/$d" ]] && libs+=("-L$3/$d" "-Wl,-rpath,$3/$d")
        done
        libs+=("-l$1")
    else
        read -ra fl <<<"$(pkg-config --libs "$2")"
        libs+=("${fl[@]}")
    fi
}

fill() {
    sed -e "s|@PREFIX@|$PREFIX|g" -e "s|@VERSION@|$version|g" \
        -e "s|@SYSTEM_LIBS@|$system_libs|g" "$1"
}
