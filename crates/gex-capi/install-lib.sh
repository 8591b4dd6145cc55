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
# .pc file). It sets `PREFIX` and `version` (the workspace's); `fill TEMPLATE` then
# writes TEMPLATE with @PREFIX@ and @VERSION@ filled in to its standard output.

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
}

fill() {
    sed -e "s|@PREFIX@|$PREFIX|g" -e "s|@VERSION@|$version|g" "$1"
}
