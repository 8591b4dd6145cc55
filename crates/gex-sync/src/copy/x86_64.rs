//! The x86-64 implementation: inline assembly that moves every byte with ordinary
//! loads and stores (general-purpose registers up to 16 bytes, inlined; then, out of
//! line, SSE2 `movdqu` up to 64 bytes and SSE2, AVX or AVX-512 vectors in the shapes
//! of glibc's `memmove-vec-unaligned-erms`, and `rep movsb` for large copies that do
//! not overlap).
//! The soundness argument is in the parent module's documentation ("Why the assembly is
//! a byte-wise atomic copy").
//!
//! # Safety
//! Every function here is `unsafe` with the contract of [`super::atomic_copy`] or
//! [`super::atomic_fill`]: the ranges are valid for the accesses for the duration of
//! the call. Each assembly block reads only `src..src + n`, writes only
//! `dst..dst + n`, uses no stack (`nostack`) and leaves the direction flag clear (the
//! Rust reference guarantees it is clear on entry).

use std::arch::asm;
use std::sync::atomic::{AtomicU8, Ordering::Relaxed};

/// A copy whose ranges do not overlap uses `rep movsb` (ERMSB/FSRM) from this many
/// vectors up (2 KiB with SSE2, 4 KiB with AVX, 8 KiB with AVX-512), below it the
/// vector loop: glibc's thresholds, confirmed by `benches/copy.rs` here (an AVX-512
/// Xeon with FSRM: `rep movsb` at 2 KiB took twice the loop's time).
const REP_MOVSB_VECTORS: usize = 128;

/// From this size up, a fill uses `rep stosb`.
const REP_STOSB_MIN: usize = 2048;

/// Copies `n` bytes from `src` to `dst` (the ranges may overlap).
///
/// # Safety
/// As [`super::atomic_copy`].
#[inline(always)]
pub(super) unsafe fn copy(src: *const u8, dst: *mut u8, n: usize) {
    // Every block below loads all the bytes it moves before it stores any (or, in the
    // loops, loads a range before it stores over it in the chosen direction), so
    // overlapping ranges are copied as `memmove` would.
    if n <= 16 {
        // SAFETY: contract of this function.
        unsafe { copy_le16(src, dst, n) }
    } else {
        // SAFETY: contract of this function; n > 16.
        unsafe { copy_gt16(src, dst, n) }
    }
}

/// A copy of more than 16 bytes, out of line (so that callers' fast paths keep few
/// values alive across it): SSE2 up to 64 bytes, beyond a direct call of the copy in
/// the widest vectors the CPU has (one relaxed load of the cached choice).
///
/// # Safety
/// As [`super::atomic_copy`], with `n > 16`.
#[inline(never)]
unsafe fn copy_gt16(src: *const u8, dst: *mut u8, n: usize) {
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
    } else if n <= 64 {
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
    } else {
        match vector_width() {
            // SAFETY: contract of this function; the CPU has AVX-512F.
            Width::Zmm => unsafe { copy_avx512(src, dst, n) },
            // SAFETY: contract of this function; the CPU has AVX.
            Width::Ymm => unsafe { copy_avx(src, dst, n) },
            // SAFETY: contract of this function.
            Width::Xmm => unsafe { copy_sse(src, dst, n) },
        }
    }
}

/// The widest vectors the CPU has.
#[derive(Clone, Copy)]
enum Width {
    Xmm,
    Ymm,
    Zmm,
}

/// The widest vectors the CPU has, detected once and cached (one relaxed load).
#[inline(always)]
fn vector_width() -> Width {
    static WIDTH: AtomicU8 = AtomicU8::new(0);
    #[cold]
    #[inline(never)]
    fn detect() -> Width {
        let w = if std::is_x86_feature_detected!("avx512f") {
            Width::Zmm
        } else if std::is_x86_feature_detected!("avx") {
            Width::Ymm
        } else {
            Width::Xmm
        };
        WIDTH.store(w as u8 + 1, Relaxed);
        w
    }
    match WIDTH.load(Relaxed) {
        3 => Width::Zmm,
        2 => Width::Ymm,
        1 => Width::Xmm,
        _ => detect(),
    }
}

/// `rep movsb` of `n` bytes.
///
/// # Safety
/// As [`super::atomic_copy`], and the ranges do not overlap.
#[inline(always)]
unsafe fn rep_movsb(src: *const u8, dst: *mut u8, n: usize) {
    // SAFETY: the ranges are valid and disjoint (contract); `rep movsb` moves exactly
    // `n` bytes forward (the direction flag is clear).
    unsafe {
        asm!(
            "rep movsb byte ptr es:[rdi], byte ptr [rsi]",
            inout("rsi") src => _,
            inout("rdi") dst => _,
            inout("rcx") n => _,
            options(nostack, preserves_flags),
        )
    }
}

/// Whether a forward copy of `n` bytes from `src` to `dst` is right: `dst` is not
/// inside `src + 1..src + n`.
#[inline(always)]
fn forward(src: *const u8, dst: *mut u8, n: usize) -> bool {
    (dst as usize).wrapping_sub(src as usize) >= n
}

/// Whether `dst` lies less than `k` bytes above `src` modulo the 4 KiB page: then a
/// forward loop's loads would meet its own recent stores at the same page offset
/// ("4K aliasing": the load waits for the store), so disjoint ranges are copied
/// backward, as glibc's `memmove` does. `k` is a power of two below 4096.
#[inline(always)]
fn near_below(src: *const u8, dst: *mut u8, k: usize) -> bool {
    (dst as usize).wrapping_sub(src as usize) & (4096 - k) == 0
}

/// Whether `n` bytes at `src` and at `dst` are disjoint.
#[inline(always)]
fn disjoint(src: *const u8, dst: *mut u8, n: usize) -> bool {
    forward(src, dst, n) && (src as usize).wrapping_sub(dst as usize) >= n
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

/// Defines `$name(src, dst, n)` for `n > 64`: the copies of one vector width `$w`
/// (`$mov` unaligned, `$mova` aligned, registers `$r0`..`$r11`), in the shapes of
/// glibc's `memmove-vec-unaligned-erms`: up to 2, 4 or 8 vectors (2 only for `$w = 64`),
/// the first and the last half loaded before anything is stored; beyond, `rep movsb` for disjoint
/// ranges of [`REP_MOVSB_VECTORS`] vectors and more, else a loop of 4 vectors with
/// `$w`-aligned stores between a head and a tail (one vector on the side the loop
/// starts from, four on the side it ends at) loaded first and stored last, forward or
/// backward: backward for `dst` inside `src + 1..src + n`, and for disjoint ranges
/// whose `dst` lies less than 8 vectors above `src` modulo 4 KiB ([`near_below`]).
macro_rules! vector_copy {
    (
        $(#[$attr:meta])* $name:ident, $w:literal, $mov:literal, $mova:literal,
        [$r0:literal, $r1:literal, $r2:literal, $r3:literal, $r4:literal, $r5:literal,
         $r6:literal, $r7:literal, $r8:literal, $r9:literal, $r10:literal, $r11:literal],
        $exit:literal
    ) => {
        $(#[$attr])*
        unsafe fn $name(src: *const u8, dst: *mut u8, n: usize) {
            if n <= 2 * $w {
                // SAFETY: w < n <= 2w (64 < n, so w = 64): the first and the last
                // vector lie inside.
                unsafe {
                    asm!(
                        concat!($mov, " ", $r0, ", [{s}]"),
                        concat!($mov, " ", $r1, ", [{s} + {n} - {w}]"),
                        concat!($mov, " [{d}], ", $r0),
                        concat!($mov, " [{d} + {n} - {w}], ", $r1),
                        $exit,
                        s = in(reg) src,
                        d = in(reg) dst,
                        n = in(reg) n,
                        w = const $w,
                        clobber_abi("C"),
                        options(nostack, preserves_flags),
                    )
                }
            } else if n <= 4 * $w {
                // SAFETY: 2w < n <= 4w: the first and the last two vectors lie inside.
                unsafe {
                    asm!(
                        concat!($mov, " ", $r0, ", [{s}]"),
                        concat!($mov, " ", $r1, ", [{s} + {w}]"),
                        concat!($mov, " ", $r2, ", [{s} + {n} - 2 * {w}]"),
                        concat!($mov, " ", $r3, ", [{s} + {n} - {w}]"),
                        concat!($mov, " [{d}], ", $r0),
                        concat!($mov, " [{d} + {w}], ", $r1),
                        concat!($mov, " [{d} + {n} - 2 * {w}], ", $r2),
                        concat!($mov, " [{d} + {n} - {w}], ", $r3),
                        $exit,
                        s = in(reg) src,
                        d = in(reg) dst,
                        n = in(reg) n,
                        w = const $w,
                        clobber_abi("C"),
                        options(nostack, preserves_flags),
                    )
                }
            } else if n <= 8 * $w {
                // SAFETY: 4w < n <= 8w: the first and the last four vectors lie inside.
                unsafe {
                    asm!(
                        concat!($mov, " ", $r0, ", [{s}]"),
                        concat!($mov, " ", $r1, ", [{s} + {w}]"),
                        concat!($mov, " ", $r2, ", [{s} + 2 * {w}]"),
                        concat!($mov, " ", $r3, ", [{s} + 3 * {w}]"),
                        concat!($mov, " ", $r4, ", [{s} + {n} - 4 * {w}]"),
                        concat!($mov, " ", $r5, ", [{s} + {n} - 3 * {w}]"),
                        concat!($mov, " ", $r6, ", [{s} + {n} - 2 * {w}]"),
                        concat!($mov, " ", $r7, ", [{s} + {n} - {w}]"),
                        concat!($mov, " [{d}], ", $r0),
                        concat!($mov, " [{d} + {w}], ", $r1),
                        concat!($mov, " [{d} + 2 * {w}], ", $r2),
                        concat!($mov, " [{d} + 3 * {w}], ", $r3),
                        concat!($mov, " [{d} + {n} - 4 * {w}], ", $r4),
                        concat!($mov, " [{d} + {n} - 3 * {w}], ", $r5),
                        concat!($mov, " [{d} + {n} - 2 * {w}], ", $r6),
                        concat!($mov, " [{d} + {n} - {w}], ", $r7),
                        $exit,
                        s = in(reg) src,
                        d = in(reg) dst,
                        n = in(reg) n,
                        w = const $w,
                        clobber_abi("C"),
                        options(nostack, preserves_flags),
                    )
                }
            } else if disjoint(src, dst, n) && n >= REP_MOVSB_VECTORS * $w {
                // SAFETY: disjoint ranges.
                unsafe { rep_movsb(src, dst, n) }
            } else if forward(src, dst, n)
                && !(disjoint(src, dst, n) && near_below(src, dst, 8 * $w))
            {
                // Blocks [i, i + 4w) from the first w-aligned i >= 1 of `dst` while
                // i < n - 4w; the head [0, w) and the tail [n - 4w, n) cover the rest.
                let skip = $w - (dst as usize & ($w - 1));
                // SAFETY: every access lies in [0, n) of its range (n > 8w); each block
                // is loaded before a store can reach it (dst below src, or disjoint).
                unsafe {
                    asm!(
                        concat!($mov, " ", $r4, ", [r8]"),
                        concat!($mov, " ", $r8, ", [r8 + r10 - 4 * {w}]"),
                        concat!($mov, " ", $r9, ", [r8 + r10 - 3 * {w}]"),
                        concat!($mov, " ", $r10, ", [r8 + r10 - 2 * {w}]"),
                        concat!($mov, " ", $r11, ", [r8 + r10 - {w}]"),
                        // rsi = src + i, rdi = dst + i, rdx = src + n - 4w (the end)
                        "lea rsi, [r8 + rcx]",
                        "lea rdi, [r9 + rcx]",
                        "lea rdx, [r8 + r10 - 4 * {w}]",
                        // At least one block: i starts below w, and n - 4w > 4w.
                        "2:",
                        concat!($mov, " ", $r0, ", [rsi]"),
                        concat!($mov, " ", $r1, ", [rsi + {w}]"),
                        concat!($mov, " ", $r2, ", [rsi + 2 * {w}]"),
                        concat!($mov, " ", $r3, ", [rsi + 3 * {w}]"),
                        concat!($mova, " [rdi], ", $r0),
                        concat!($mova, " [rdi + {w}], ", $r1),
                        concat!($mova, " [rdi + 2 * {w}], ", $r2),
                        concat!($mova, " [rdi + 3 * {w}], ", $r3),
                        "add rsi, 4 * {w}",
                        "add rdi, 4 * {w}",
                        "cmp rsi, rdx",
                        "jb 2b",
                        concat!($mov, " [r9 + r10 - 4 * {w}], ", $r8),
                        concat!($mov, " [r9 + r10 - 3 * {w}], ", $r9),
                        concat!($mov, " [r9 + r10 - 2 * {w}], ", $r10),
                        concat!($mov, " [r9 + r10 - {w}], ", $r11),
                        concat!($mov, " [r9], ", $r4),
                        $exit,
                        in("r8") src,
                        in("r9") dst,
                        in("r10") n,
                        w = const $w,
                        inout("rcx") skip => _,
                        out("rsi") _,
                        out("rdi") _,
                        out("rdx") _,
                        clobber_abi("C"),
                        options(nostack),
                    )
                }
            } else {
                // Blocks [i - 4w, i) from the last w-aligned end of `dst` down while
                // i > 4w; the head [0, 4w) and the tail [n - w, n) cover the rest.
                let top = n - 1 - ((dst as usize + n - 1) & ($w - 1));
                // SAFETY: every access lies in [0, n) of its range (n > 8w); going
                // down, each block is loaded before a store can reach it (dst above
                // src).
                unsafe {
                    asm!(
                        concat!($mov, " ", $r4, ", [r8]"),
                        concat!($mov, " ", $r5, ", [r8 + {w}]"),
                        concat!($mov, " ", $r6, ", [r8 + 2 * {w}]"),
                        concat!($mov, " ", $r7, ", [r8 + 3 * {w}]"),
                        concat!($mov, " ", $r8, ", [r8 + r10 - {w}]"),
                        // rsi = src + i, rdi = dst + i, rdx = src + 4w (the end)
                        "lea rsi, [r8 + rcx]",
                        "lea rdi, [r9 + rcx]",
                        "lea rdx, [r8 + 4 * {w}]",
                        // At least one block: i starts above n - w, and n - w > 4w.
                        "2:",
                        concat!($mov, " ", $r0, ", [rsi - {w}]"),
                        concat!($mov, " ", $r1, ", [rsi - 2 * {w}]"),
                        concat!($mov, " ", $r2, ", [rsi - 3 * {w}]"),
                        concat!($mov, " ", $r3, ", [rsi - 4 * {w}]"),
                        concat!($mova, " [rdi - {w}], ", $r0),
                        concat!($mova, " [rdi - 2 * {w}], ", $r1),
                        concat!($mova, " [rdi - 3 * {w}], ", $r2),
                        concat!($mova, " [rdi - 4 * {w}], ", $r3),
                        "sub rsi, 4 * {w}",
                        "sub rdi, 4 * {w}",
                        "cmp rsi, rdx",
                        "ja 2b",
                        concat!($mov, " [r9], ", $r4),
                        concat!($mov, " [r9 + {w}], ", $r5),
                        concat!($mov, " [r9 + 2 * {w}], ", $r6),
                        concat!($mov, " [r9 + 3 * {w}], ", $r7),
                        concat!($mov, " [r9 + r10 - {w}], ", $r8),
                        $exit,
                        in("r8") src,
                        in("r9") dst,
                        in("r10") n,
                        w = const $w,
                        inout("rcx") top => _,
                        out("rsi") _,
                        out("rdi") _,
                        out("rdx") _,
                        clobber_abi("C"),
                        options(nostack),
                    )
                }
            }
        }
    };
}

vector_copy!(
    /// `n > 64` without AVX: SSE2 `movdqu` (16 bytes).
    ///
    /// # Safety
    /// As [`super::atomic_copy`], with `n > 64`.
    #[inline(never)]
    copy_sse, 16, "movdqu", "movdqa",
    ["xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5",
     "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11"],
    ""
);

vector_copy!(
    /// `n > 64` with AVX: `vmovdqu` of `ymm` registers (32 bytes), then `vzeroupper`.
    ///
    /// # Safety
    /// As [`super::atomic_copy`], with `n > 64`; the CPU has AVX.
    #[target_feature(enable = "avx")]
    copy_avx, 32, "vmovdqu", "vmovdqa",
    ["ymm0", "ymm1", "ymm2", "ymm3", "ymm4", "ymm5",
     "ymm6", "ymm7", "ymm8", "ymm9", "ymm10", "ymm11"],
    "vzeroupper"
);

vector_copy!(
    /// `n > 64` with AVX-512: `vmovdqu64` of `zmm16`..`zmm27` (64 bytes; registers
    /// without a VEX encoding, so no `vzeroupper`), as glibc's `memcpy` does on the
    /// same CPUs.
    ///
    /// # Safety
    /// As [`super::atomic_copy`], with `n > 64`; the CPU has AVX-512F.
    #[target_feature(enable = "avx512f")]
    copy_avx512, 64, "vmovdqu64", "vmovdqa64",
    ["zmm16", "zmm17", "zmm18", "zmm19", "zmm20", "zmm21",
     "zmm22", "zmm23", "zmm24", "zmm25", "zmm26", "zmm27"],
    ""
);

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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every vector width's code (the machine's own is what `copy` picks), over the
    /// lengths around its size classes and `rep movsb`, at every alignment, disjoint
    /// and overlapping both ways.
    fn check(f: unsafe fn(*const u8, *mut u8, usize), w: usize) {
        // The vector functions are called for n > 64 only (`copy_gt16`'s size
        // classes); their first branch reads a vector (w <= 64 bytes) from each end.
        let mut lens: Vec<usize> = (65..=9 * w + 2).collect();
        for k in [128 * w - 1, 128 * w, 128 * w + 65, 300 * w + 7] {
            lens.push(k);
        }
        let pad = 2 * w + 64;
        for &len in &lens {
            let base: Vec<u8> = (0..len + 2 * pad)
                .map(|i| (i * 13 + i / 253) as u8)
                .collect();
            for so in [0usize, 1, 7, w / 2 + 1] {
                for shift in [
                    -(w as isize) - 3,
                    -1,
                    1,
                    5,
                    w as isize + 1,
                    2 * w as isize - 1,
                ] {
                    let mut buf = base.clone();
                    let mut model = base.clone();
                    let (s, d) = (pad + so, (pad as isize + so as isize + shift) as usize);
                    model.copy_within(s..s + len, d);
                    let p = buf.as_mut_ptr();
                    // SAFETY: both ranges are inside `buf`.
                    unsafe { f(p.add(s), p.add(d), len) };
                    assert!(buf == model, "w {w} len {len} so {so} shift {shift}");
                }
                let mut dst = vec![0u8; len + 2 * pad];
                // SAFETY: disjoint buffers, in bounds.
                unsafe { f(base.as_ptr().add(so), dst.as_mut_ptr().add(pad - so), len) };
                assert_eq!(&dst[pad - so..pad - so + len], &base[so..so + len]);
                assert!(
                    dst[..pad - so]
                        .iter()
                        .chain(&dst[pad - so + len..])
                        .all(|&b| b == 0)
                );
            }
        }
    }

    #[test]
    fn sse2() {
        check(copy_sse, 16);
    }

    #[test]
    fn avx() {
        if std::is_x86_feature_detected!("avx") {
            check(
                |s, d, n| {
                    // SAFETY: the CPU has AVX; `check` passes valid ranges.
                    unsafe { copy_avx(s, d, n) }
                },
                32,
            );
        }
    }

    #[test]
    fn avx512() {
        if std::is_x86_feature_detected!("avx512f") {
            check(
                |s, d, n| {
                    // SAFETY: the CPU has AVX-512F; `check` passes valid ranges.
                    unsafe { copy_avx512(s, d, n) }
                },
                64,
            );
        }
    }
}
