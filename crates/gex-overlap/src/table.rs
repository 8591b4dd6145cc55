//! The page table of one buffer: one atomic state per page, lock-free, read by the
//! fault handler and written by the code that claims pages (the issuing thread) and
//! retires them (the mover). Also the conversion of a byte range to pages with its
//! checks.

use gex_sync::atomic::{AtomicU32, Ordering};

/// Retired: the user view has its normal protection.
pub(crate) const READY: u32 = 0;
/// Claimed by a transfer in flight: a get's destination (no access) or a put's
/// source (read only).
pub(crate) const PENDING: u32 = 1;
/// Protected for the calibration of the fault cost: the handler unprotects it itself.
pub(crate) const CALIBRATE: u32 = 2;
/// A page of a [`DeltaBuf`](crate::DeltaBuf) in OS-triggered mode unchanged since its
/// last transfer: read-only; the first write faults and the handler makes it writable
/// and [`READY`] (changed: part of the next transfer).
pub(crate) const CLEAN: u32 = 3;
/// A page of a [`DeltaBuf`](crate::DeltaBuf) already sent in the open epoch: read-only;
/// a write to it is a misuse the handler records (then the page is writable and
/// [`READY`], so it is sent again).
pub(crate) const SENT: u32 = 4;

/// Page states of one buffer.
#[derive(Debug)]
pub(crate) struct PageTable {
    pages: Box<[AtomicU32]>,
}

impl PageTable {
    pub(crate) fn new(n: usize) -> PageTable {
        PageTable {
            pages: (0..n).map(|_| AtomicU32::new(READY)).collect(),
        }
    }

    /// Claims pages `first..first+n` for a transfer (`to` is [`PENDING`] or
    /// [`CALIBRATE`]): all of them or none. `Err(page)` names the first page already
    /// claimed (an overlapping pending range).
    pub(crate) fn claim(&self, first: usize, n: usize, to: u32) -> Result<(), usize> {
        for i in first..first + n {
            if self.pages[i]
                .compare_exchange(READY, to, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                for j in first..i {
                    self.pages[j].store(READY, Ordering::Release);
                }
                return Err(i);
            }
        }
        Ok(())
    }

    /// Claims pages `first..first+n` whose states all satisfy `from` (moving them to
    /// [`PENDING`]): all of them or none (each page back to the state it had).
    /// `Err(page)` names the first page that does not.
    pub(crate) fn claim_from(
        &self,
        first: usize,
        n: usize,
        from: impl Fn(u32) -> bool,
    ) -> Result<(), usize> {
        let mut old = Vec::with_capacity(n);
        for i in first..first + n {
            let cur = self.pages[i].load(Ordering::Acquire);
            if !from(cur)
                || self.pages[i]
                    .compare_exchange(cur, PENDING, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
            {
                for (j, &o) in (first..i).zip(&old) {
                    self.pages[j].store(o, Ordering::Release);
                }
                return Err(i);
            }
            old.push(cur);
        }
        Ok(())
    }

    /// Retires pages `first..first+n` (after their user view is unprotected).
    pub(crate) fn retire(&self, first: usize, n: usize) {
        self.set(first, n, READY);
    }

    /// Stores `state` in pages `first..first+n` (`Release`).
    pub(crate) fn set(&self, first: usize, n: usize, state: u32) {
        for p in &self.pages[first..first + n] {
            p.store(state, Ordering::Release);
        }
    }

    /// The runs `(first, count)` of pages in state `state`.
    pub(crate) fn runs_in(&self, state: u32) -> Vec<(usize, usize)> {
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for (i, p) in self.pages.iter().enumerate() {
            if p.load(Ordering::Acquire) == state {
                match runs.last_mut() {
                    Some((f, c)) if *f + *c == i => *c += 1,
                    _ => runs.push((i, 1)),
                }
            }
        }
        runs
    }

    /// Number of pages.
    #[cfg(test)]
    pub(crate) fn pages(&self) -> usize {
        self.pages.len()
    }

    /// Moves `page` from `from` to `to` (whether it was in `from`).
    pub(crate) fn cas(&self, page: usize, from: u32, to: u32) -> bool {
        self.pages[page]
            .compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The state of `page` (`Acquire`: the bytes of a retired page are visible).
    pub(crate) fn state(&self, page: usize) -> u32 {
        self.pages[page].load(Ordering::Acquire)
    }

    /// Whether any page of `first..first+n` is still claimed by a transfer.
    pub(crate) fn any_pending(&self, first: usize, n: usize) -> bool {
        self.pages[first..first + n]
            .iter()
            .any(|p| matches!(p.load(Ordering::Acquire), PENDING | CALIBRATE))
    }
}

/// Why a byte range cannot be the range of a transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RangeError {
    /// The offset is not a multiple of the page size.
    Unaligned,
    /// The range does not lie in the buffer.
    OutOfBuffer,
}

/// The pages `(first, count)` covering bytes `[offset, offset+len)` of a buffer of
/// `buf_len` bytes; `offset` must be page-aligned when `aligned` is asked. An empty
/// range covers no page.
pub(crate) fn pages_of(
    offset: usize,
    len: usize,
    buf_len: usize,
    page: usize,
    aligned: bool,
) -> Result<(usize, usize), RangeError> {
    let end = offset.checked_add(len).ok_or(RangeError::OutOfBuffer)?;
    if end > buf_len {
        return Err(RangeError::OutOfBuffer);
    }
    if aligned && offset % page != 0 {
        return Err(RangeError::Unaligned);
    }
    if len == 0 {
        return Ok((offset / page, 0));
    }
    let first = offset / page;
    Ok((first, end.div_ceil(page) - first))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        Claim(usize, usize),
        Retire(usize, usize),
        Range(usize, usize, bool),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0usize..40, 0usize..12).prop_map(|(a, b)| Op::Claim(a, b)),
            (0usize..40, 0usize..12).prop_map(|(a, b)| Op::Retire(a, b)),
            (0usize..200, 0usize..200, any::<bool>()).prop_map(|(a, b, c)| Op::Range(a, b, c)),
        ]
    }

    proptest! {
        /// The page table and the range checks against a model: a vector of booleans,
        /// and arithmetic on plain integers.
        #[test]
        fn page_table_matches_model(ops in proptest::collection::vec(op(), 1..80)) {
            const N: usize = 32;
            const PAGE: usize = 8;
            let t = PageTable::new(N);
            let mut model = [false; N];
            for op in ops {
                match op {
                    Op::Claim(first, n) => {
                        if first + n > N { continue; }
                        let want = (first..first + n).find(|&i| model[i]);
                        let got = t.claim(first, n, PENDING);
                        match want {
                            Some(i) => prop_assert_eq!(got, Err(i)),
                            None => {
                                prop_assert_eq!(got, Ok(()));
                                for m in &mut model[first..first + n] { *m = true; }
                            }
                        }
                    }
                    Op::Retire(first, n) => {
                        if first + n > N { continue; }
                        t.retire(first, n);
                        for m in &mut model[first..first + n] { *m = false; }
                    }
                    Op::Range(off, len, aligned) => {
                        let buf = N * PAGE;
                        let got = pages_of(off, len, buf, PAGE, aligned);
                        if off + len > buf {
                            prop_assert_eq!(got, Err(RangeError::OutOfBuffer));
                        } else if aligned && off % PAGE != 0 {
                            prop_assert_eq!(got, Err(RangeError::Unaligned));
                        } else {
                            let (first, n) = got.unwrap();
                            // Every byte of the range is on one of the pages, and the
                            // first and last pages hold a byte of it.
                            for b in off..off + len {
                                prop_assert!(b / PAGE >= first && b / PAGE < first + n);
                            }
                            if len > 0 {
                                prop_assert_eq!(first, off / PAGE);
                                prop_assert_eq!(first + n - 1, (off + len - 1) / PAGE);
                            } else {
                                prop_assert_eq!(n, 0);
                            }
                        }
                    }
                }
                for (i, &m) in model.iter().enumerate() {
                    prop_assert_eq!(t.state(i) == PENDING, m);
                }
                prop_assert_eq!(t.any_pending(0, t.pages()), model.iter().any(|&m| m));
            }
        }
    }
}
