//! The strip-mining cost model (seed 000, Table 1): how a transfer is cut into strips,
//! from measured parameters.
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
//!
//! **Variable strips** (seed 000 after Iancu et al.): a small first strip (`h/G`, the
//! least that pays for its own cost, at most `s*` and an eighth of `N`) so that the consumer starts early,
//! then strips that grow (each at least twice the last, more when the consumer's work
//! per byte `c` leaves time: `(s·c − o − m)/G`) so that each lands while the consumer
//! works on the one before. [`plan`] compares the two plans with [`predict_plan`], a
//! simulation of the mover and the consumer strip by strip, and takes the variable one
//! only when it predicts a gain. With no work per byte given the consumer is taken to
//! keep up with the data (`c = G`): then every strip is waited for, the last strip's
//! length and the number of strips are what count, and equal strips win; growing
//! strips gain when the consumer is slower than the data. The layer gives `c` from
//! the program ([`OverlapExt::set_consume_cost`](crate::OverlapExt::set_consume_cost))
//! or from its statistics ([`slower_than_data`]: `2·G` after a get whose consumer
//! rarely waited).

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
#[derive(Clone, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Decomp {
    /// The model's choice between equal strips of `s*` and variable strips (the
    /// default; `GEX_OVERLAP_STRIP=auto`); below the threshold, not split.
    #[default]
    Auto,
    /// The model's equal strips (`s*`) always (`GEX_OVERLAP_STRIP=equal`).
    Equal,
    /// The model's variable strips always: a small first strip, then growing ones
    /// (`GEX_OVERLAP_STRIP=variable`).
    Variable,
    /// Never split: one strip.
    Unsplit,
    /// Strips of this many bytes (rounded up to whole pages).
    Bytes(usize),
    /// This many equal strips (at least one page each).
    Count(usize),
    /// Strips of these lengths in this order (each rounded up to whole pages; the
    /// last length repeats until the transfer is covered, the last strip is cut at
    /// its end; an empty list or a zero length counts as one page).
    Sizes(Vec<usize>),
}

/// The strips of one transfer of `len` bytes: where each begins, relative to the
/// transfer's first byte. Every strip begins on a page boundary (every strip but the
/// last is whole pages long); together they cover `0..len` exactly, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StripPlan {
    len: usize,
    starts: Vec<usize>,
}

impl StripPlan {
    /// Strips of `strip` bytes (a multiple of the page size, not zero), the last
    /// shorter when `len` is not a multiple.
    pub fn equal(len: usize, strip: usize) -> StripPlan {
        let strip = strip.max(1);
        StripPlan {
            len,
            starts: (0..len.div_ceil(strip)).map(|i| i * strip).collect(),
        }
    }

    /// Strips of the given lengths, in order, cut at `len`; the last length repeats
    /// if they do not reach it. Lengths are used as given (the caller rounds them to
    /// pages); a zero length is skipped.
    fn from_lens(len: usize, lens: impl IntoIterator<Item = usize>, repeat: usize) -> StripPlan {
        let mut starts = Vec::new();
        let mut off = 0;
        let mut lens = lens.into_iter().filter(|&l| l > 0);
        while off < len {
            starts.push(off);
            off = off.saturating_add(lens.next().unwrap_or(repeat.max(1)));
        }
        StripPlan { len, starts }
    }

    /// Bytes covered.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it covers nothing.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of strips.
    pub fn count(&self) -> usize {
        self.starts.len()
    }

    /// Strip `i`: (offset from the transfer's first byte, length).
    ///
    /// # Panics
    /// If `i >= self.count()`.
    pub fn strip(&self, i: usize) -> (usize, usize) {
        let s = self.starts[i];
        let e = self.starts.get(i + 1).copied().unwrap_or(self.len);
        (s, e - s)
    }

    /// The strips in order: (offset, length).
    pub fn iter(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        (0..self.count()).map(|i| self.strip(i))
    }

    /// The index of the strip holding byte `off` (`off < len`).
    pub fn index_of(&self, off: usize) -> usize {
        self.starts.partition_point(|&s| s <= off).saturating_sub(1)
    }

    /// Whether every strip but the last has the first strip's length.
    pub fn is_equal(&self) -> bool {
        let n = self.count();
        n <= 1 || (1..n - 1).all(|i| self.strip(i).1 == self.strip(0).1)
    }
}

/// The strip length for a transfer of `len` bytes on pages of `page` bytes: the
/// length of equal strips ([`Decomp::Auto`], [`Decomp::Equal`] and [`Decomp::Variable`]
/// give the model's `s*`; [`Decomp::Sizes`] its first length).
pub fn strip_len(p: &CostParams, d: &Decomp, len: usize, page: usize, min_split: usize) -> usize {
    let round = |s: usize| s.div_ceil(page).max(1) * page;
    let s = match d {
        Decomp::Unsplit => return len.max(page),
        Decomp::Bytes(b) => round(*b),
        Decomp::Count(n) => round(len.div_ceil((*n).max(1))),
        Decomp::Sizes(v) => round(v.first().copied().unwrap_or(page)),
        Decomp::Auto | Decomp::Equal | Decomp::Variable => {
            if len < min_split && *d == Decomp::Auto {
                return len.max(page);
            }
            let g = p.gap_ns_per_byte.max(1e-6);
            let s = ((len as f64) * p.per_strip_ns().max(0.0) / g).sqrt();
            round(if s.is_finite() { s as usize } else { len })
        }
    };
    s.min(round(len))
}

/// The model's variable plan for `len` bytes: a first strip of `h/G` (at least a
/// page, at most `s*` and an eighth of `len`), then each strip at least twice the one before, longer when
/// the consumer's work per byte `consume` (ns; `None`: `G`) leaves time for it to
/// land while the one before is used. A last piece shorter than the strip before it
/// shares its bytes with that strip (or joins it), so lengths never decrease.
pub fn variable_plan(p: &CostParams, len: usize, page: usize, consume: Option<f64>) -> StripPlan {
    let round = |s: f64| {
        let s = if s.is_finite() && s > 0.0 {
            s.min(len as f64) as usize
        } else {
            page
        };
        s.div_ceil(page).max(1) * page
    };
    let g = p.gap_ns_per_byte.max(1e-6);
    let c = consume.unwrap_or(g).max(0.0);
    let eq = strip_len(p, &Decomp::Equal, len, page, 0);
    let mut s = round(p.per_strip_ns().max(0.0) / g)
        .min(eq)
        .min(round((len / 8) as f64));
    let mut lens = Vec::new();
    let mut rest = len;
    while rest > 0 {
        let take = s.min(rest);
        lens.push(take);
        rest -= take;
        let grown = round((s as f64 * c - p.overhead_ns - p.mprotect_ns) / g);
        s = s.saturating_mul(2).max(grown);
    }
    // A last piece shorter than the strip before it: the two share their bytes
    // (halves, the first rounded down to pages, not below the strip before them), or
    // become one strip when that cannot keep the lengths from decreasing.
    let n = lens.len();
    if n >= 2 && lens[n - 1] < lens[n - 2] {
        let total = lens[n - 2] + lens[n - 1];
        let before = if n >= 3 { lens[n - 3] } else { page };
        let a = (total / 2 / page * page).max(before);
        if a < total && total - a >= a {
            lens[n - 2] = a;
            lens[n - 1] = total - a;
        } else {
            lens.pop();
            lens[n - 2] = total;
        }
    }
    StripPlan::from_lens(len, lens, len)
}

/// The strips of a transfer of `len` bytes as `d` asks, on pages of `page` bytes;
/// `min_split` is [`Decomp::Auto`]'s threshold, `consume` the consumer's work per
/// byte (ns) if known. [`Decomp::Auto`] takes [`variable_plan`] when
/// [`predict_plan`] says it ends sooner than equal strips of `s*`, else the equal
/// ones.
pub fn plan(
    p: &CostParams,
    d: &Decomp,
    len: usize,
    page: usize,
    min_split: usize,
    consume: Option<f64>,
) -> StripPlan {
    let round = |s: usize| s.div_ceil(page).max(1) * page;
    match d {
        Decomp::Variable => variable_plan(p, len, page, consume),
        Decomp::Sizes(v) => {
            let last = v.last().copied().unwrap_or(page);
            StripPlan::from_lens(len, v.iter().map(|&s| round(s)), round(last))
        }
        Decomp::Auto => {
            let eq = StripPlan::equal(len, strip_len(p, d, len, page, min_split));
            if len < min_split || eq.count() < 2 {
                return eq;
            }
            let var = variable_plan(p, len, page, consume);
            if predict_plan(p, &var, consume) < predict_plan(p, &eq, consume) {
                var
            } else {
                eq
            }
        }
        _ => StripPlan::equal(len, strip_len(p, d, len, page, min_split)),
    }
}

/// The layer's statistics (seed 000: "the runtime maintains statistics ... to guide
/// the decomposition"): a get's consumer that waited in the fault handler for at most
/// a quarter of its `strips` found the rest landed, so it is slower than the data.
/// The layer then plans the next gets for a consumer working `2·G` per byte (unless
/// the program said how long it works, `set_consume_cost`).
pub fn slower_than_data(waited: u64, strips: usize) -> bool {
    waited.saturating_mul(4) <= strips as u64
}

/// The predicted time until a consumer that works `consume` ns per byte (`None`:
/// `G`, it keeps up with the data) has used the last byte of a transfer in strips
/// `plan`: the mover lands strip after strip (`o + s·G + m` each, after the round
/// trip); the consumer, at a strip not landed yet, faults (`f`) and waits for it, then
/// works through it.
pub fn predict_plan(p: &CostParams, plan: &StripPlan, consume: Option<f64>) -> Duration {
    let c = consume.unwrap_or(p.gap_ns_per_byte).max(0.0);
    let mut land = p.round_trip_ns;
    let mut t = 0.0f64;
    for (_, s) in plan.iter() {
        let s = s as f64;
        land += p.overhead_ns + s * p.gap_ns_per_byte + p.mprotect_ns;
        if t < land {
            t = land + p.fault_ns;
        }
        t += s * c;
    }
    Duration::from_nanos(t.max(0.0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
        let s = strip_len(&P, &Decomp::Auto, len, 4096, 64 << 10);
        assert_eq!(s % 4096, 0);
        assert!(s > 4096 && s < len, "{s}");
        // s* is (within a page's rounding and one strip) no worse than its neighbours.
        for other in [s / 4, s * 4] {
            assert!(P.predict(len, s) <= P.predict(len, other));
        }
        assert_eq!(strip_len(&P, &Decomp::Auto, 10_000, 4096, 64 << 10), 10_000);
        assert_eq!(strip_len(&P, &Decomp::Unsplit, len, 4096, 0), len);
        assert_eq!(strip_len(&P, &Decomp::Bytes(5000), len, 4096, 0), 8192);
        assert_eq!(strip_len(&P, &Decomp::Count(4), len, 4096, 0), len / 4);
        assert_eq!(strip_len(&P, &Decomp::Bytes(1 << 30), len, 4096, 0), len);
        // A costlier fault means larger strips.
        let slow = CostParams {
            fault_ns: 100_000.0,
            ..P
        };
        assert!(strip_len(&slow, &Decomp::Auto, len, 4096, 0) > s);
    }

    #[test]
    fn variable_strips_only_when_the_model_predicts_a_gain() {
        let (len, page) = (4 << 20, 4096);
        // A consumer that keeps up (c = G): every strip is waited for, equal wins.
        let keeps_up = plan(&P, &Decomp::Auto, len, page, 0, None);
        assert!(keeps_up.is_equal());
        assert_eq!(
            keeps_up.strip(0).1,
            strip_len(&P, &Decomp::Auto, len, page, 0)
        );
        // A consumer ten times slower than the data: a small first strip, growing
        // ones, and a predicted gain over equal strips.
        let c = Some(10.0 * P.gap_ns_per_byte);
        let slow = plan(&P, &Decomp::Auto, len, page, 0, c);
        let eq = StripPlan::equal(len, strip_len(&P, &Decomp::Equal, len, page, 0));
        assert!(!slow.is_equal(), "{slow:?}");
        assert!(slow.strip(0).1 < eq.strip(0).1);
        assert!(predict_plan(&P, &slow, c) < predict_plan(&P, &eq, c));
        // The hints override the model either way.
        assert!(!plan(&P, &Decomp::Variable, len, page, 0, None).is_equal());
        assert!(plan(&P, &Decomp::Equal, len, page, 0, c).is_equal());
        let sizes = plan(
            &P,
            &Decomp::Sizes(vec![1, 3 * page, 0]),
            6 * page + 1,
            page,
            0,
            None,
        );
        let lens: Vec<usize> = sizes.iter().map(|s| s.1).collect();
        assert_eq!(lens, [page, 3 * page, page, page, 1]);
        // Below the threshold: one strip.
        assert_eq!(
            plan(&P, &Decomp::Auto, 1 << 16, page, 1 << 20, c).count(),
            1
        );
    }

    #[test]
    fn a_consumer_that_rarely_waits_is_slower_than_the_data() {
        assert!(slower_than_data(0, 13));
        assert!(slower_than_data(3, 13));
        assert!(!slower_than_data(4, 13));
        assert!(!slower_than_data(13, 13));
        assert!(!slower_than_data(u64::MAX, 4));
        // And the model then prefers growing strips (c = 2·G).
        let c = Some(2.0 * P.gap_ns_per_byte);
        assert!(!plan(&P, &Decomp::Auto, 4 << 20, 4096, 0, c).is_equal());
    }

    fn decomp() -> impl Strategy<Value = Decomp> {
        prop_oneof![
            Just(Decomp::Auto),
            Just(Decomp::Equal),
            Just(Decomp::Variable),
            Just(Decomp::Unsplit),
            (0usize..100_000).prop_map(Decomp::Bytes),
            (0usize..40).prop_map(Decomp::Count),
            proptest::collection::vec(0usize..50_000, 0..6).prop_map(Decomp::Sizes),
        ]
    }

    fn params() -> impl Strategy<Value = CostParams> {
        (
            0.0f64..1e5,
            1e-3f64..10.0,
            0.0f64..1e5,
            0.0f64..1e5,
            0.0f64..1e4,
        )
            .prop_map(|(o, g, r, f, m)| CostParams {
                overhead_ns: o,
                gap_ns_per_byte: g,
                round_trip_ns: r,
                fault_ns: f,
                mprotect_ns: m,
            })
    }

    proptest! {
        /// Every plan covers its range exactly, in order, with strips beginning on
        /// page boundaries; the model's variable plans never shrink; explicit sizes
        /// are kept (rounded to pages).
        #[test]
        fn strip_plans_cover_the_range(
            p in params(),
            d in decomp(),
            len in 0usize..(3 << 20),
            page_shift in 12u32..15,
            min_split in 0usize..(1 << 20),
            consume in proptest::option::of(0.0f64..100.0),
        ) {
            let page = 1usize << page_shift;
            let plan = plan(&p, &d, len, page, min_split, consume);
            prop_assert_eq!(plan.len(), len);
            let mut next = 0;
            for (i, (off, l)) in plan.iter().enumerate() {
                prop_assert_eq!(off, next);
                prop_assert_eq!(off % page, 0);
                prop_assert!(l > 0);
                prop_assert_eq!(plan.index_of(off), i);
                prop_assert_eq!(plan.index_of(off + l - 1), i);
                next = off + l;
            }
            prop_assert_eq!(next, len);
            prop_assert_eq!(plan.count() == 0, len == 0);
            match &d {
                Decomp::Variable => {
                    let lens: Vec<usize> = plan.iter().map(|s| s.1).collect();
                    prop_assert!(lens.windows(2).all(|w| w[0] <= w[1]), "{:?}", lens);
                }
                Decomp::Sizes(v) => {
                    let r = |s: usize| s.div_ceil(page).max(1) * page;
                    let want: Vec<usize> = v.iter().map(|&s| r(s)).collect();
                    for (i, (_, l)) in plan.iter().enumerate() {
                        let w = want.get(i).copied()
                            .unwrap_or_else(|| r(v.last().copied().unwrap_or(page)));
                        if i + 1 < plan.count() { prop_assert_eq!(l, w); } else { prop_assert!(l <= w); }
                    }
                }
                Decomp::Unsplit => prop_assert!(plan.count() <= 1),
                _ => prop_assert!(plan.is_equal() || d == Decomp::Auto),
            }
        }
    }
}
