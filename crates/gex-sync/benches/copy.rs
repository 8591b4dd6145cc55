//! `gex_sync::copy` against `ptr::copy_nonoverlapping` (`memcpy`) and the word-wise
//! relaxed-atomic loop it replaced, 8 B to 16 MiB, measured side by side in one run:
//! every sample runs the three copies back to back (rotating which goes first), and
//! the figures are medians over the samples, with the median of the per-sample ratios
//! to `memcpy`. No dependencies (not criterion: the samples of the contenders must be
//! interleaved on a noisy shared machine, which criterion does not do).
//!
//! ```text
//! cargo bench -p gex-sync --bench copy            # all sizes
//! cargo bench -p gex-sync --bench copy -- 64 4096  # some sizes
//! cargo bench -p gex-sync --bench copy -- --offset=3 64  # misaligned by 3 bytes (0-63)
//! ```
#![allow(unsafe_code, missing_docs)]

use std::hint::black_box;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering::Relaxed};
use std::time::Instant;

/// The word-wise copy before (shared source, private destination).
///
/// # Safety
/// `src..src + out.len()` is valid for reads.
#[inline(never)]
unsafe fn old_atomic_read(src: *const u8, out: &mut [u8]) {
    let n = out.len();
    let mut i = 0;
    while i < n && (src as usize + i) % 8 != 0 {
        // SAFETY: in bounds.
        out[i] = unsafe { AtomicU8::from_ptr(src.add(i).cast_mut()) }.load(Relaxed);
        i += 1;
    }
    while i + 8 <= n {
        // SAFETY: in bounds and aligned.
        let w = unsafe { AtomicU64::from_ptr(src.add(i).cast::<u64>().cast_mut()) }.load(Relaxed);
        out[i..i + 8].copy_from_slice(&w.to_ne_bytes());
        i += 8;
    }
    while i < n {
        // SAFETY: in bounds.
        out[i] = unsafe { AtomicU8::from_ptr(src.add(i).cast_mut()) }.load(Relaxed);
        i += 1;
    }
}

fn sizes() -> Vec<usize> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    if !args.is_empty() {
        return args;
    }
    let mut v = vec![
        8, 12, 16, 24, 32, 48, 64, 100, 128, 256, 512, 1024, 2048, 4096,
    ];
    v.extend([
        8 << 10,
        16 << 10,
        64 << 10,
        256 << 10,
        1 << 20,
        4 << 20,
        16 << 20,
    ]);
    v
}

fn main() {
    let off: usize =
        match std::env::args().find_map(|a| a.strip_prefix("--offset=").map(str::to_owned)) {
            None => 0,
            Some(v) => match v.parse() {
                Ok(off) if off < 64 => off,
                _ => {
                    eprintln!("copy bench: --offset takes 0 to 63, not {v:?}");
                    std::process::exit(2);
                }
            },
        };
    let samples = 15;
    println!(
        "offset {off}; medians of {samples} interleaved samples; ratio = median of per-sample ratios to memcpy"
    );
    println!(
        "{:>9} {:>11} {:>11} {:>11} {:>8} {:>8}",
        "bytes", "memcpy ns", "atomic ns", "old ns", "atomic/", "old/"
    );
    for n in sizes() {
        let src: Vec<u8> = (0..n + 64).map(|i| i as u8).collect();
        let mut dst = vec![0u8; n + 64];
        // About 2 ms per sample.
        let iters = (2_000_000 / (n / 8 + 20)).max(3);
        let (s, d) = (
            src.as_ptr().wrapping_add(off),
            dst.as_mut_ptr().wrapping_add(off),
        );
        let mut t = [[0f64; 3]; 0].to_vec();
        for k in 0..samples {
            let mut r = [0f64; 3];
            for j in 0..3 {
                let which = (j + k) % 3;
                let start = Instant::now();
                for _ in 0..iters {
                    let len = black_box(n);
                    // SAFETY: both buffers have n + 64 bytes; off < 64.
                    unsafe {
                        match which {
                            0 => std::ptr::copy_nonoverlapping(black_box(s), black_box(d), len),
                            1 => gex_sync::copy::atomic_copy(black_box(s), black_box(d), len),
                            _ => old_atomic_read(
                                black_box(s),
                                std::slice::from_raw_parts_mut(black_box(d), len),
                            ),
                        }
                    }
                }
                r[which] = start.elapsed().as_nanos() as f64 / iters as f64;
            }
            t.push(r);
        }
        assert_eq!(&dst[off..off + n], &src[off..off + n]);
        let med = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let col = |i: usize| med(t.iter().map(|r| r[i]).collect());
        let ratio = |i: usize| med(t.iter().map(|r| r[i] / r[0]).collect());
        println!(
            "{:>9} {:>11.1} {:>11.1} {:>11.1} {:>8.2} {:>8.2}",
            n,
            col(0),
            col(1),
            col(2),
            ratio(1),
            ratio(2)
        );
    }
}
