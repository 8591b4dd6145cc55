#!/usr/bin/env bash
# Checks that every function shmem.h declares is exported by libgexshmem.so (and by
# libgexshmem.a), and that every shmem_/gexshmem_ function the library exports is
# declared in shmem.h. Functions the header defines inline (long double p/g and
# reductions, shmem_pcontrol) are not the library's and are left out of both lists.
#
#   bash crates/gex-shmem/tests/exports.sh [PREFIX]
#
# PREFIX: an install of gex-shmem (install.sh); default: build the debug library.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
if [[ $# -ge 1 ]]; then
    inc="$1/include/shmem.h" so="$1/lib/libgexshmem.so" ar="$1/lib/libgexshmem.a"
else
    cargo build --locked -q -p gex-shmem --lib
    inc=crates/gex-shmem/include/shmem.h
    so="${CARGO_TARGET_DIR:-target}/debug/libgexshmem.so" ar="${CARGO_TARGET_DIR:-target}/debug/libgexshmem.a"
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# Declarations: prototypes of the preprocessed header (C11, so that the generic
# selections are expanded too), minus the inline definitions.
cc -std=c11 -E -P -x c "$inc" | tr '\n' ' ' | sed 's/;/;\n/g; s/}/}\n/g' >"$tmp/pp"
grep -v 'static inline' "$tmp/pp" | grep -oE '\b(shmem|gexshmem)_[a-z0-9_]+[[:space:]]*\(' |
    sed 's/[[:space:]]*($//' | sort -u >"$tmp/declared"
grep -oE 'static inline [^(]*\b(shmem|gexshmem)_[a-z0-9_]+[[:space:]]*\(' "$tmp/pp" |
    grep -oE '(shmem|gexshmem)_[a-z0-9_]+[[:space:]]*\($' | sed 's/[[:space:]]*($//' | sort -u >"$tmp/inline"
nm -D --defined-only "$so" | awk '$2 == "T" {print $3}' | grep -E '^(shmem|gexshmem)_' | sort -u >"$tmp/exported"
nm --defined-only "$ar" 2>/dev/null | awk '$2 == "T" {print $3}' | grep -E '^(shmem|gexshmem)_' | sort -u >"$tmp/exported_a"
comm -23 "$tmp/declared" "$tmp/inline" >"$tmp/decl"
missing="$(comm -23 "$tmp/decl" "$tmp/exported")"
extra="$(comm -13 "$tmp/decl" "$tmp/exported")"
missing_a="$(comm -23 "$tmp/decl" "$tmp/exported_a")"
status=0
if [[ -n "$missing" ]]; then
    echo "exports: declared in shmem.h but not exported by libgexshmem.so:" >&2
    echo "$missing" | sed 's/^/  /' >&2
    status=1
fi
if [[ -n "$missing_a" ]]; then
    echo "exports: declared in shmem.h but not defined in libgexshmem.a:" >&2
    echo "$missing_a" | sed 's/^/  /' >&2
    status=1
fi
if [[ -n "$extra" ]]; then
    echo "exports: exported by libgexshmem.so but not declared in shmem.h:" >&2
    echo "$extra" | sed 's/^/  /' >&2
    status=1
fi
# Every inline call (gexshmem_fast_NAME) is reached by its OpenSHMEM name: shmem.h
# defines shmem_NAME(...) as gexshmem_fast_NAME(__VA_ARGS__), one line each.
grep -oE 'gexshmem_fast_[a-z0-9_]+' "$tmp/inline" | sed 's/^gexshmem_fast_//' | sort -u >"$tmp/fast"
grep -oE '^#define shmem_[a-z0-9_]+\(\.\.\.\) gexshmem_fast_[a-z0-9_]+\(__VA_ARGS__\)$' "$inc" |
    sed -E 's/^#define shmem_([a-z0-9_]+)\(\.\.\.\) gexshmem_fast_([a-z0-9_]+)\(__VA_ARGS__\)$/\1 \2/' |
    awk '$1 == $2 {print $1}' | sort -u >"$tmp/fast_named"
unnamed="$(comm -23 "$tmp/fast" "$tmp/fast_named")"
if [[ -n "$unnamed" ]]; then
    echo "exports: inline calls in shmem.h without their shmem_ name defined to them:" >&2
    echo "$unnamed" | sed 's/^/  gexshmem_fast_/' >&2
    status=1
fi
[[ $status == 0 ]] && echo "exports: ok ($(wc -l <"$tmp/decl") functions declared and exported, $(wc -l <"$tmp/inline") inline in the header, $(wc -l <"$tmp/fast_named") inline calls named)"
exit $status
