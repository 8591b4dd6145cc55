//! The strip-mining cost model (seed 000, Table 1): how large the strips of a
//! transfer are, from measured parameters.
//!
//! Words: `N` the transfer's length, `s` a strip's length, `G` the time per byte of the
//! path (inverse bandwidth), `h` the cost each strip adds (`o`, the overhead of
//! starting one transfer, plus one protection fault `f` and one `mprotect` `m` on the
//! consumer's side). A consumer streaming through the data first waits for one strip
//! (`s·G` after the round trip), and pays `h` for each of the `N/s` strips:
//! `T(s) = RTT + s·G + (N/s)·h + …` (the terms that do not depend on `s` omitted), which
//! is least at `s* = sqrt(N·h/G)`. `s*` is rounded to whole pages and kept between one
//! page and `N`; a transfer shorter than the threshold (`min_split`), or whose `s*`
//! covers it all, is not split.

use std::time::Duration;

/// The measured parameters of the model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostParams {
    /// `o`: starting one strip's transfer (ns).
    pub overhead_ns: f64,
    /// `G`: time per byte of the path (ns/byte).
    pub gap_ns_per_byte: f64,
    /// Round trip of the path (ns); not in `s*`, reported.
    pub round_trip_ns: f64,
    /// `f`: one protection fault, handler entry and return (ns).
    pub fault_ns: f64,
    /// `m`: one `mprotect` call on one page (ns).
    pub mprotect_ns: f64,
}

impl CostParams {
    /// `h`, what each strip adds.
    pub fn per_strip_ns(&self) -> f64 {
        self.overhead_ns + self.fault_ns + self.mprotect_ns
    }

    /// The predicted time of a transfer of `len` bytes in strips of `strip` bytes
    /// before the last byte can be used by a consumer that keeps up (the terms of the
    /// model that depend on the strip size, plus the round trip and the data).
    pub fn predict(&self, len: usize, strip: usize) -> Duration {
        let strip = strip.clamp(1, len.max(1)) as f64;
        let n = (len as f64 / strip).ceil();
        let ns = self.round_trip_ns
            + strip * self.gap_ns_per_byte
            + n * self.per_strip_ns()
            + len as f64 * self.gap_ns_per_byte;
        Duration::from_nanos(ns.max(0.0) as u64)
    }
}

/// How a transfer is split (a hint that overrides the model).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Decomp {
    /// The model's `s*` (the default; `GEX_OVERLAP_STRIP=auto`).
    #[default]
    Auto,
    /// Never split: one strip.
    Unsplit,
    /// Strips of this many bytes (rounded up to whole pages).
    Bytes(usize),
    /// This many equal strips (at least one page each).
    Count(usize),
}

/// The strip length for a transfer of `len` bytes on pages of `page` bytes.
pub fn strip_len(p: &CostParams, d: Decomp, len: usize, page: usize, min_split: usize) -> usize {
    let round = |s: usize| s.div_ceil(page).max(1) * page;
    let s = match d {
        Decomp::Unsplit => return len.max(page),
        Decomp::Bytes(b) => round(b),
        Decomp::Count(n) => round(len.div_ceil(n.max(1))),
        Decomp::Auto => {
            if len < min_split {
                return len.max(page);
            }
            let g = p.gap_ns_per_byte.max(1e-6);
            let s = ((len as f64) * p.per_strip_ns().max(0.0) / g).sqrt();
            round(if s.is_finite() { s as usize } else { len })
        }
    };
    s.min(round(len))
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: CostParams = CostParams {
        overhead_ns: 5000.0,
        gap_ns_per_byte: 0.1,
        round_trip_ns: 1000.0,
        fault_ns: 1000.0,
        mprotect_ns: 1000.0,
    };

    #[test]
    fn model_picks_the_minimum_and_respects_hints() {
        let len = 4 << 20;
        let s = strip_len(&P, Decomp::Auto, len, 4096, 64 << 10);
        assert_eq!(s % 4096, 0);
        assert!(s > 4096 && s < len, "{s}");
        // s* is (within a page's rounding and one strip) no worse than its neighbours.
        for other in [s / 4, s * 4] {
            assert!(P.predict(len, s) <= P.predict(len, other));
        }
        assert_eq!(strip_len(&P, Decomp::Auto, 10_000, 4096, 64 << 10), 10_000);
        assert_eq!(strip_len(&P, Decomp::Unsplit, len, 4096, 0), len);
        assert_eq!(strip_len(&P, Decomp::Bytes(5000), len, 4096, 0), 8192);
        assert_eq!(strip_len(&P, Decomp::Count(4), len, 4096, 0), len / 4);
        assert_eq!(strip_len(&P, Decomp::Bytes(1 << 30), len, 4096, 0), len);
        // A costlier fault means larger strips.
        let slow = CostParams {
            fault_ns: 100_000.0,
            ..P
        };
        assert!(strip_len(&slow, Decomp::Auto, len, 4096, 0) > s);
    }
}
