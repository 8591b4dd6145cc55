//! The symmetric heap's allocator: offsets into the gex segment.
//!
//! Every PE runs the same sequence of collective allocations, and the allocator is
//! deterministic (first fit over the free ranges, lowest offset first), so that the same
//! call returns the same offset on every PE: a symmetric object is one offset.

use std::collections::BTreeMap;

/// First-fit allocator over `0..len`.
#[derive(Debug)]
pub(crate) struct Heap {
    /// Free ranges: offset -> length.
    free: BTreeMap<usize, usize>,
    /// Allocated blocks: offset -> (block start, block length) (the block may start
    /// before the offset for alignment).
    used: BTreeMap<usize, (usize, usize)>,
}

/// The smallest alignment of a block (what `malloc` gives: any C type, and atomics).
pub(crate) const MIN_ALIGN: usize = 16;

impl Heap {
    /// An empty heap of `len` bytes.
    pub(crate) fn new(len: usize) -> Heap {
        let mut free = BTreeMap::new();
        if len > 0 {
            free.insert(0, len);
        }
        Heap {
            free,
            used: BTreeMap::new(),
        }
    }

    /// Allocates `size` bytes (at least 1) aligned to `align` (a power of two); `None`
    /// when no free range fits.
    pub(crate) fn alloc(&mut self, size: usize, align: usize) -> Option<usize> {
        if !align.is_power_of_two() {
            return None;
        }
        let align = align.max(MIN_ALIGN);
        let size = size.max(1).checked_next_multiple_of(MIN_ALIGN)?;
        let (start, flen, off) = self.free.iter().find_map(|(&s, &l)| {
            let off = s.checked_next_multiple_of(align)?;
            (off.checked_add(size)? <= s + l).then_some((s, l, off))
        })?;
        self.free.remove(&start);
        let end = off + size;
        if end < start + flen {
            self.free.insert(end, start + flen - end);
        }
        // The alignment gap stays with the block (freed with it).
        self.used.insert(off, (start, end - start));
        Some(off)
    }

    /// The usable size of the block at `off`.
    pub(crate) fn size_of(&self, off: usize) -> Option<usize> {
        self.used.get(&off).map(|&(s, l)| s + l - off)
    }

    /// Frees the block at `off`; false if there is none.
    pub(crate) fn free(&mut self, off: usize) -> bool {
        let Some((mut s, mut l)) = self.used.remove(&off) else {
            return false;
        };
        if let Some((&ps, &pl)) = self.free.range(..s).next_back() {
            if ps + pl == s {
                self.free.remove(&ps);
                s = ps;
                l += pl;
            }
        }
        if let Some(&nl) = self.free.get(&(s + l)) {
            self.free.remove(&(s + l));
            l += nl;
        }
        self.free.insert(s, l);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_is_deterministic_and_coalesces() {
        let mut h = Heap::new(1024);
        let a = h.alloc(10, 1).unwrap();
        let b = h.alloc(100, 64).unwrap();
        assert_eq!(a, 0);
        assert_eq!(b % 64, 0);
        assert!(h.size_of(b).unwrap() >= 100);
        assert!(h.free(a));
        assert!(!h.free(a));
        assert!(h.free(b));
        assert_eq!(h.free.len(), 1);
        assert_eq!(h.alloc(1024, 1), Some(0));
        assert_eq!(h.alloc(1, 1), None);
    }

    #[test]
    fn refuses_what_does_not_fit() {
        let mut h = Heap::new(256);
        assert_eq!(h.alloc(300, 1), None);
        assert_eq!(h.alloc(16, 3), None);
        assert!(h.alloc(200, 1).is_some());
        assert_eq!(h.alloc(100, 1), None);
    }
}
