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
        asm!(
            "movdqu {a}, xmmword ptr [{s}]",
            "movdqu {b}, xmmword ptr [{s} + 16]",
            "movdqu {c}, xmmword ptr [{s} + 32]",
            "movdqu {e}, xmmword ptr [{s} + 48]",
            "movdqu {f}, xmmword ptr [{s} + {n} - 64]",
            "movdqu {g}, xmmword ptr [{s} + {n} - 48]",
            "movdqu {h}, xmmword ptr [{s} + {n} - 32]",
            "movdqu {i}, xmmword ptr [{s} + {n} - 16]",
            "movdqu xmmword ptr [{d}], {a}",
            "movdqu xmmword ptr [{d} + 16], {b}",
            "movdqu xmmword ptr [{d} + 32], {c}",
            "movdqu xmmword ptr [{d} + 48], {e}",
            "movdqu xmmword ptr [{d} + {n} - 64], {f}",
            "movdqu xmmword ptr [{d} + {n} - 48], {g}",
            "movdqu xmmword ptr [{d} + {n} - 32], {h}",
            "movdqu xmmword ptr [{d} + {n} - 16], {i}",
            s = in(reg) src,
            d = in(reg) dst,
            n = in(reg) n,
            a = out(xmm_reg) _,
            b = out(xmm_reg) _,
            c = out(xmm_reg) _,
            e = out(xmm_reg) _,
            f = out(xmm_reg) _,
            g = out(xmm_reg) _,
            h = out(xmm_reg) _,
            i = out(xmm_reg) _,
            options(nostack, preserves_flags),
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
            asm!(
                "movdqu {a}, xmmword ptr [{s}]",
                "movdqu {b}, xmmword ptr [{s} + {n} - 16]",
                "movdqu xmmword ptr [{d}], {a}",
                "movdqu xmmword ptr [{d} + {n} - 16], {b}",
                s = in(reg) src,
                d = in(reg) dst,
                n = in(reg) n,
                a = out(xmm_reg) _,
                b = out(xmm_reg) _,
                options(nostack, preserves_flags),
            )
        }
    } else {
        // SAFETY: 32 < n <= 64: the first and the last 32 bytes lie inside the ranges.
        unsafe {
            asm!(
                "movdqu {a}, xmmword ptr [{s}]",
                "movdqu {b}, xmmword ptr [{s} + 16]",
                "movdqu {c}, xmmword ptr [{s} + {n} - 32]",
                "movdqu {e}, xmmword ptr [{s} + {n} - 16]",
                "movdqu xmmword ptr [{d}], {a}",
                "movdqu xmmword ptr [{d} + 16], {b}",
                "movdqu xmmword ptr [{d} + {n} - 32], {c}",
                "movdqu xmmword ptr [{d} + {n} - 16], {e}",
                s = in(reg) src,
                d = in(reg) dst,
                n = in(reg) n,
                a = out(xmm_reg) _,
                b = out(xmm_reg) _,
                c = out(xmm_reg) _,
                e = out(xmm_reg) _,
                options(nostack, preserves_flags),
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
            asm!(
                "mov {a}, qword ptr [{s}]",
                "mov {b}, qword ptr [{s} + {n} - 8]",
                "mov qword ptr [{d}], {a}",
                "mov qword ptr [{d} + {n} - 8], {b}",
                s = in(reg) src,
                d = in(reg) dst,
                n = in(reg) n,
                a = out(reg) _,
                b = out(reg) _,
                options(nostack, preserves_flags),
            )
        } else if n >= 4 {
            asm!(
                "mov {a:e}, dword ptr [{s}]",
                "mov {b:e}, dword ptr [{s} + {n} - 4]",
                "mov dword ptr [{d}], {a:e}",
                "mov dword ptr [{d} + {n} - 4], {b:e}",
                s = in(reg) src,
                d = in(reg) dst,
                n = in(reg) n,
                a = out(reg) _,
                b = out(reg) _,
                options(nostack, preserves_flags),
            )
        } else if n >= 2 {
            asm!(
                "movzx {a:e}, word ptr [{s}]",
                "movzx {b:e}, word ptr [{s} + {n} - 2]",
                "mov word ptr [{d}], {a:x}",
                "mov word ptr [{d} + {n} - 2], {b:x}",
                s = in(reg) src,
                d = in(reg) dst,
                n = in(reg) n,
                a = out(reg) _,
                b = out(reg) _,
                options(nostack, preserves_flags),
            )
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
            asm!(
                "mov qword ptr [{d}], {w}",
                "mov qword ptr [{d} + {n} - 8], {w}",
                d = in(reg) dst,
                n = in(reg) n,
                w = in(reg) w,
                options(nostack, preserves_flags),
            )
        } else if n >= 4 {
            asm!(
                "mov dword ptr [{d}], {w:e}",
                "mov dword ptr [{d} + {n} - 4], {w:e}",
                d = in(reg) dst,
                n = in(reg) n,
                w = in(reg) w,
                options(nostack, preserves_flags),
            )
        } else if n >= 2 {
            asm!(
                "mov word ptr [{d}], {w:x}",
                "mov word ptr [{d} + {n} - 2], {w:x}",
                d = in(reg) dst,
                n = in(reg) n,
                w = in(reg) w,
                options(nostack, preserves_flags),
            )
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
