//! Cache-padded statistics counters.

use crate::CachePadded;
use crate::atomic::{AtomicU64, Ordering};

/// A statistics counter on its own cache line.
///
/// All accesses are `Relaxed`: a counter orders nothing and is meant for observability
/// (messages sent, bytes received, stalls), not for synchronisation. [`Counter::add`] is an
/// atomic read-modify-write, so several threads may add to the same counter without losing
/// counts; the padding keeps a hot counter from sharing a cache line with its neighbours.
///
/// # Example
///
/// ```
/// use gex_sync::counter::Counter;
///
/// let sent = Counter::new();
/// sent.add(3);
/// sent.add(4);
/// assert_eq!(sent.get(), 7);
/// ```
#[derive(Debug, Default)]
pub struct Counter {
    value: CachePadded<AtomicU64>,
}

impl Counter {
    /// Creates a counter holding zero.
    pub fn new() -> Self {
        Self {
            value: CachePadded::new(AtomicU64::new(0)),
        }
    }

    /// Adds `n` (wrapping on overflow).
    #[inline]
    pub fn add(&self, n: u64) {
        self.value.fetch_add(n, Ordering::Relaxed);
    }

    /// Returns the current value.
    #[inline]
    pub fn get(&self) -> u64 {
        self.value.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::Counter;

    #[test]
    fn adds_and_reads() {
        let c = Counter::new();
        assert_eq!(c.get(), 0);
        c.add(5);
        c.add(u64::MAX);
        assert_eq!(c.get(), 4);
    }
}
