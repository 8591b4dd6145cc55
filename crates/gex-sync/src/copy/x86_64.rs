//! The x86-64 implementation: up to 128 bytes, inline assembly that moves every byte
//! with ordinary loads and stores (general-purpose registers up to 16 bytes, SSE2
//! `movdqu` up to 128 bytes; all inlined); beyond, the C library's `memmove`,
//! called through a pointer the compiler cannot see through (glibc's
//! `memmove-vec-unaligned-erms` on Linux: the widest vectors the CPU has, `rep movsb`
//! for large copies).
//! The soundness argument is in the parent module's documentation ("Why the assembly is
//! a byte-wise atomic copy", "Why `memmove` is too").
//!
//! # Safety
//! Every function here is `unsafe` with the contract of [`super::atomic_copy`] or
//! [`super::atomic_fill`]: the ranges are valid for the accesses for the duration of
//! the call. Each assembly block reads only `src..src + n`, writes only
//! `dst..dst + n`, uses no stack (`nostack`) and leaves the direction flag clear (the
//! Rust reference guarantees it is clear on entry); `memmove` reads only
//! `src..src + n` and writes only `dst..dst + n` (its C contract).

use std::arch::asm;

unsafe extern "C" {
    /// The C library's `memmove` (`string.h`), which std links on every x86-64
    /// target. Called only through [`opaque_memmove`].
    fn memmove(dst: *mut u8, src: *const u8, n: usize) -> *mut u8;
}

/// The signature of `memmove`.
type Memmove = unsafe extern "C" fn(*mut u8, *const u8, usize) -> *mut u8;

/// [`memmove`]'s address, passed through an empty assembly block so that the compiler
/// cannot tell which function a call through it reaches: it cannot treat the call as
/// its own `memmove` builtin (a non-atomic copy it could reason about, split, merge or
/// inline), only as a foreign function that may read and write the memory it is given.
/// `pure` and `nomem`: the block only returns its input, so the compiler may hoist it
/// out of loops.
#[inline(always)]
#[allow(clippy::pointers_in_nomem_asm_block)] // the block reads nothing through it
fn opaque_memmove() -> Memmove {
    let mut f: Memmove = memmove;
    // SAFETY: the block is empty: it returns `f` unchanged and touches nothing.
    unsafe {
        asm!(
            "/* {f} */",
            f = inout(reg) f,
            options(pure, nomem, nostack, preserves_flags)
        )
    };
    f
}

/// A copy as loads of the first and the last bytes of `src..src + n` into the named
/// registers (class `$class`), then stores of them at the same places of `dst`: each
/// `$head` register moves `$ptr` bytes at `$hoff` from the start (`""` or `" + 16"`,
/// ...), each `$tail` register those at `$toff` before the end (`"8"`: `n - 8`). `$load`
/// and `$store` are the instructions, `$lm` and `$sm` the register modifiers of their
/// register operand (`":e"`, `":x"` or `""`). Every load precedes every store, so
/// overlapping ranges are copied as `memmove` would. Expands to the `asm!` block
/// alone: its caller's `unsafe` block states why the places lie inside the ranges.
macro_rules! copy_ends {
    (
        $src:expr, $dst:expr, $n:expr, $class:ident,
        $load:literal $lm:literal, $store:literal $sm:literal, $ptr:literal;
        $($head:ident $hoff:literal),+;
        $($tail:ident $toff:literal),+
    ) => {
        asm!(
            $(concat!($load, " {", stringify!($head), $lm, "}, ", $ptr, " ptr [{s}", $hoff, "]"),)+
            $(concat!($load, " {", stringify!($tail), $lm, "}, ", $ptr, " ptr [{s} + {n} - ", $toff, "]"),)+
            $(concat!($store, " ", $ptr, " ptr [{d}", $hoff, "], {", stringify!($head), $sm, "}"),)+
            $(concat!($store, " ", $ptr, " ptr [{d} + {n} - ", $toff, "], {", stringify!($tail), $sm, "}"),)+
            s = in(reg) $src,
            d = in(reg) $dst,
            n = in(reg) $n,
            $($head = out($class) _,)+
            $($tail = out($class) _,)+
            options(nostack, preserves_flags),
        )
    };
}

/// A fill as two stores of the low `$ptr`-sized part (register modifier `$wm`) of `w`:
/// the first and the last `$size` bytes of `dst..dst + n`. Expands to the `asm!` block
/// alone (see [`copy_ends!`]).
macro_rules! fill_ends {
    ($dst:expr, $n:expr, $w:expr, $ptr:literal $wm:literal, $size:literal) => {
        asm!(
            concat!("mov ", $ptr, " ptr [{d}], {w", $wm, "}"),
            concat!("mov ", $ptr, " ptr [{d} + {n} - ", $size, "], {w", $wm, "}"),
            d = in(reg) $dst,
            n = in(reg) $n,
            w = in(reg) $w,
            options(nostack, preserves_flags),
        )
    };
}

/// A fill uses `rep stosb` from this size up.
const REP_STOSB_MIN: usize = 2048;

/// Copies `n` bytes from `src` to `dst` (the ranges may overlap).
///
/// # Safety
/// As [`super::atomic_copy`].
#[inline(always)]
pub(super) unsafe fn copy(src: *const u8, dst: *mut u8, n: usize) {
    // The blocks below load all the bytes they move before they store any, so
    // overlapping ranges are copied as `memmove` would (which copies the rest).
    // Every size up to 128 bytes inline, beyond a call of `memmove` straight from the
    // caller: no call (and so no value of the caller's loop saved across one) below
    // 129 bytes, one comparison before the call above (through an out-of-line
    // dispatcher, blocking gets of 64-128 bytes took 0.5-1.5 ns longer than with
    // `std::ptr::copy`; docs/performance.md).
    if n > 128 {
        // SAFETY: the ranges are valid for `n` bytes (contract); `memmove` copies them
        // (overlap allowed) with plain loads and stores (parent module, "Why `memmove`
        // is too").
        unsafe { opaque_memmove()(dst, src, n) };
    } else if n <= 16 {
        // SAFETY: contract of this function.
        unsafe { copy_le16(src, dst, n) }
    } else if n <= 64 {
        // SAFETY: contract of this function; 16 < n <= 64.
        unsafe { copy_17_64(src, dst, n) }
    } else {
        // SAFETY: contract of this function; 64 < n <= 128.
        unsafe { copy_65_128(src, dst, n) }
    }
}

/// A copy of 65 to 128 bytes: eight SSE2 `movdqu` loads, the first and the last 64
/// bytes, then eight stores.
///
/// # Safety
/// As [`super::atomic_copy`], with `64 < n <= 128`.
#[inline(always)]
unsafe fn copy_65_128(src: *const u8, dst: *mut u8, n: usize) {
    // SAFETY: 64 < n <= 128: the first and the last 64 bytes lie inside the ranges;
    // every load precedes every store.
    unsafe {
        copy_ends!(
            src, dst, n, xmm_reg, "movdqu" "", "movdqu" "", "xmmword";
            a "", b " + 16", c " + 32", e " + 48";
            f "64", g "48", h "32", i "16"
        )
    }
}

/// A copy of 17 to 64 bytes: two groups of SSE2 `movdqu`, the first and the last 16
/// or 32 bytes.
///
/// # Safety
/// As [`super::atomic_copy`], with `16 < n <= 64`.
#[inline(always)]
unsafe fn copy_17_64(src: *const u8, dst: *mut u8, n: usize) {
    if n <= 32 {
        // SAFETY: 16 < n <= 32: both 16-byte halves (which overlap when n < 32) lie
        // inside the ranges.
        unsafe {
            copy_ends!(
                src, dst, n, xmm_reg, "movdqu" "", "movdqu" "", "xmmword";
                a "";
                b "16"
            )
        }
    } else {
        // SAFETY: 32 < n <= 64: the first and the last 32 bytes lie inside the ranges.
        unsafe {
            copy_ends!(
                src, dst, n, xmm_reg, "movdqu" "", "movdqu" "", "xmmword";
                a "", b " + 16";
                c "32", e "16"
            )
        }
    }
}

/// `n <= 16`: two (possibly overlapping) loads of the largest power of two that fits.
///
/// # Safety
/// As [`super::atomic_copy`], with `n <= 16`.
#[inline(always)]
unsafe fn copy_le16(src: *const u8, dst: *mut u8, n: usize) {
    // SAFETY: in every block, the two accesses cover `[0, w)` and `[n - w, n)` of each
    // range with `w <= n`, so they stay inside it.
    unsafe {
        if n >= 8 {
            copy_ends!(src, dst, n, reg, "mov" "", "mov" "", "qword"; a ""; b "8")
        } else if n >= 4 {
            copy_ends!(src, dst, n, reg, "mov" ":e", "mov" ":e", "dword"; a ""; b "4")
        } else if n >= 2 {
            copy_ends!(src, dst, n, reg, "movzx" ":e", "mov" ":x", "word"; a ""; b "2")
        } else if n == 1 {
            asm!(
                "movzx {a:e}, byte ptr [{s}]",
                "mov byte ptr [{d}], {a:l}",
                s = in(reg) src,
                d = in(reg) dst,
                a = out(reg) _,
                options(nostack, preserves_flags),
            )
        }
    }
}

/// Sets `n` bytes at `dst` to `byte`.
///
/// # Safety
/// As [`super::atomic_fill`].
#[inline(always)]
pub(super) unsafe fn fill(dst: *mut u8, byte: u8, n: usize) {
    let w = u64::from(byte) * 0x0101_0101_0101_0101;
    // SAFETY: in every block, the two stores cover `[0, k)` and `[n - k, n)` with
    // `k <= n`.
    unsafe {
        if n > 16 {
            fill_gt16(dst, w, n)
        } else if n >= 8 {
            fill_ends!(dst, n, w, "qword" "", "8")
        } else if n >= 4 {
            fill_ends!(dst, n, w, "dword" ":e", "4")
        } else if n >= 2 {
            fill_ends!(dst, n, w, "word" ":x", "2")
        } else if n == 1 {
            asm!(
                "mov byte ptr [{d}], {w:l}",
                d = in(reg) dst,
                w = in(reg) w,
                options(nostack, preserves_flags),
            )
        }
    }
}

/// `n > 16`, out of line: 16-byte stores of the pattern `w` (the first and last 16,
/// 32 or 64 bytes and a 64-byte-aligned loop in between), or `rep stosb`.
///
/// # Safety
/// As [`super::atomic_fill`], with `n > 16`.
#[inline(never)]
unsafe fn fill_gt16(dst: *mut u8, w: u64, n: usize) {
    if n >= REP_STOSB_MIN {
        // SAFETY: `rep stosb` stores exactly `n` bytes forward from `dst` (direction
        // flag clear).
        unsafe {
            asm!(
                "rep stosb byte ptr es:[rdi], al",
                inout("rdi") dst => _,
                inout("rcx") n => _,
                in("rax") w,
                options(nostack, preserves_flags),
            )
        }
        return;
    }
    let skip = 64 - (dst as usize & 63);
    // SAFETY: every store is inside [0, n): [0, 16) and [n - 16, n) always; [16, 32)
    // and [n - 32, n - 16) when n > 32; [0, 64) and [n - 64, n) and the loop's blocks
    // [i, i + 64) with i + 64 < n when n > 64.
    unsafe {
        asm!(
            "movq xmm0, {w}",
            "punpcklqdq xmm0, xmm0",
            "movdqu xmmword ptr [{d}], xmm0",
            "movdqu xmmword ptr [{d} + {n} - 16], xmm0",
            "cmp {n}, 32",
            "jbe 4f",
            "movdqu xmmword ptr [{d} + 16], xmm0",
            "movdqu xmmword ptr [{d} + {n} - 32], xmm0",
            "cmp {n}, 64",
            "jbe 4f",
            "movdqu xmmword ptr [{d} + 32], xmm0",
            "movdqu xmmword ptr [{d} + 48], xmm0",
            "movdqu xmmword ptr [{d} + {n} - 64], xmm0",
            "movdqu xmmword ptr [{d} + {n} - 48], xmm0",
            "lea {end}, [{n} - 64]",
            "2:",
            "cmp {i}, {end}",
            "jae 4f",
            "movdqa xmmword ptr [{d} + {i}], xmm0",
            "movdqa xmmword ptr [{d} + {i} + 16], xmm0",
            "movdqa xmmword ptr [{d} + {i} + 32], xmm0",
            "movdqa xmmword ptr [{d} + {i} + 48], xmm0",
            "add {i}, 64",
            "jmp 2b",
            "4:",
            d = in(reg) dst,
            n = in(reg) n,
            w = in(reg) w,
            i = inout(reg) skip => _,
            end = out(reg) _,
            out("xmm0") _,
            options(nostack),
        )
    }
}
