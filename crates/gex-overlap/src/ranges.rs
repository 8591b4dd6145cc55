//! The dirty-range bookkeeping of delta transfers: a set of byte ranges kept as
//! sorted, disjoint, non-touching runs (the paper's "range tree": a new range merges
//! with the runs it overlaps or touches), with the queries a delta send needs.

/// A set of bytes as sorted runs `[start, end)`, disjoint and not touching (two runs
/// that meet are merged).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct RangeSet {
    runs: Vec<(usize, usize)>,
}

impl RangeSet {
    pub(crate) fn new() -> RangeSet {
        RangeSet { runs: Vec::new() }
    }

    /// Adds `[start, end)` (nothing if empty), merging the runs it overlaps or touches.
    pub(crate) fn insert(&mut self, start: usize, end: usize) {
        if start >= end {
            return;
        }
        // First run that ends at or after `start` (could merge), last that starts at
        // or before `end`.
        let lo = self.runs.partition_point(|&(_, e)| e < start);
        let hi = self.runs.partition_point(|&(s, _)| s <= end);
        if lo == hi {
            self.runs.insert(lo, (start, end));
            return;
        }
        let s = start.min(self.runs[lo].0);
        let e = end.max(self.runs[hi - 1].1);
        self.runs.splice(lo..hi, std::iter::once((s, e)));
    }

    /// Removes `[start, end)` from the set.
    pub(crate) fn remove(&mut self, start: usize, end: usize) {
        if start >= end {
            return;
        }
        let lo = self.runs.partition_point(|&(_, e)| e <= start);
        let hi = self.runs.partition_point(|&(s, _)| s < end);
        if lo >= hi {
            return;
        }
        let mut keep = Vec::with_capacity(2);
        let (s0, _) = self.runs[lo];
        let (_, e1) = self.runs[hi - 1];
        if s0 < start {
            keep.push((s0, start));
        }
        if e1 > end {
            keep.push((end, e1));
        }
        self.runs.splice(lo..hi, keep);
    }

    /// The first byte of `[start, end)` in the set, if any.
    pub(crate) fn first_overlap(&self, start: usize, end: usize) -> Option<usize> {
        if start >= end {
            return None;
        }
        let i = self.runs.partition_point(|&(_, e)| e <= start);
        match self.runs.get(i) {
            Some(&(s, _)) if s < end => Some(s.max(start)),
            _ => None,
        }
    }

    /// Number of bytes in the set.
    pub(crate) fn bytes(&self) -> usize {
        self.runs.iter().map(|&(s, e)| e - s).sum()
    }

    /// The runs, in order.
    pub(crate) fn runs(&self) -> &[(usize, usize)] {
        &self.runs
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    pub(crate) fn clear(&mut self) {
        self.runs.clear();
    }

    /// The parts of `[0, len)` not in the set, as runs.
    pub(crate) fn complement(&self, len: usize) -> RangeSet {
        let mut out = RangeSet::new();
        let mut at = 0;
        for &(s, e) in &self.runs {
            if s >= len {
                break;
            }
            if s > at {
                out.runs.push((at, s));
            }
            at = at.max(e);
        }
        if at < len {
            out.runs.push((at, len));
        }
        out
    }

    /// The union of two sets.
    pub(crate) fn union(&self, other: &RangeSet) -> RangeSet {
        let mut out = self.clone();
        for &(s, e) in &other.runs {
            out.insert(s, e);
        }
        out
    }

    /// The whole pages (of `page` bytes, in a buffer of `len` bytes whose last page
    /// may be short) that the set covers entirely, as page-aligned byte runs (merged).
    pub(crate) fn whole_pages(&self, page: usize, len: usize) -> RangeSet {
        let mut out = RangeSet::new();
        for &(s, e) in &self.runs {
            let first = s.div_ceil(page) * page;
            // A run reaching the buffer's end covers the short last page.
            let last = if e >= len { len } else { e / page * page };
            if first < last {
                out.insert(first, last);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const N: usize = 96;

    #[derive(Clone, Debug)]
    enum Op {
        Insert(usize, usize),
        Remove(usize, usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0usize..N, 0usize..24).prop_map(|(a, l)| Op::Insert(a, (a + l).min(N))),
            (0usize..N, 0usize..24).prop_map(|(a, l)| Op::Remove(a, (a + l).min(N))),
        ]
    }

    fn model_runs(m: &[bool]) -> Vec<(usize, usize)> {
        let mut v = Vec::new();
        let mut i = 0;
        while i < m.len() {
            if m[i] {
                let s = i;
                while i < m.len() && m[i] {
                    i += 1;
                }
                v.push((s, i));
            } else {
                i += 1;
            }
        }
        v
    }

    proptest! {
        /// The range set against a model (one boolean per byte): after every insert
        /// and remove the runs are exactly the model's maximal runs (so sorted,
        /// disjoint and merged), and every query agrees with the model.
        #[test]
        fn range_set_matches_model(
            ops in proptest::collection::vec(op(), 1..60),
            q in (0usize..N, 0usize..N),
            page in 1usize..20,
            len in 1usize..=N,
        ) {
            let mut set = RangeSet::new();
            let mut m = [false; N];
            for op in ops {
                match op {
                    Op::Insert(s, e) => {
                        set.insert(s, e);
                        for b in &mut m[s..e.max(s)] { *b = true; }
                    }
                    Op::Remove(s, e) => {
                        set.remove(s, e);
                        for b in &mut m[s..e.max(s)] { *b = false; }
                    }
                }
                prop_assert_eq!(set.runs(), &model_runs(&m)[..]);
                prop_assert_eq!(set.bytes(), m.iter().filter(|&&b| b).count());
                prop_assert_eq!(set.is_empty(), !m.contains(&true));
            }
            let (a, b) = (q.0.min(q.1), q.0.max(q.1));
            prop_assert_eq!(set.first_overlap(a, b), (a..b).find(|&i| m[i]));
            // The complement within `len`.
            let c = set.complement(len);
            let cm: Vec<bool> = (0..len).map(|i| !m[i]).collect();
            prop_assert_eq!(c.runs(), &model_runs(&cm)[..]);
            // Union with the complement is everything up to `len` (and what lies past).
            let u = set.union(&c);
            let um: Vec<bool> = (0..N).map(|i| i < len || m[i]).collect();
            prop_assert_eq!(u.runs(), &model_runs(&um)[..]);
            // Whole pages of a `len`-byte buffer covered by the set (bytes past `len`
            // do not count).
            let w = set.whole_pages(page, len);
            let wm: Vec<bool> = (0..len)
                .map(|i| {
                    let p0 = i / page * page;
                    let p1 = (p0 + page).min(len);
                    (p0..p1).all(|j| m[j])
                })
                .collect();
            prop_assert_eq!(w.runs(), &model_runs(&wm)[..]);
        }
    }
}
