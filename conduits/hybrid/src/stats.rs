//! AMs counted per path: per endpoint one cache line of counters written only by the
//! thread driving it ([`PathCounters`]), summed for the rank by `Hybrid::stats`.

use gex_sync::atomic::{AtomicU64, Ordering};

/// AMs a rank's hybrid endpoints sent and delivered, per path (see
/// [`Hybrid::stats`](crate::Hybrid::stats)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HybridStats {
    /// AM requests sent to near ranks (this host) through the near conduit; replies are
    /// not counted.
    pub near_am_requests: u64,
    /// AM requests sent through the far conduit.
    pub far_am_requests: u64,
    /// AMs (requests and replies) delivered by the near conduit.
    pub near_am_delivered: u64,
    /// AMs (requests and replies) delivered by the far conduit.
    pub far_am_delivered: u64,
}

/// Counters of one endpoint. A cache line each, so that endpoints driven by different
/// threads do not share one.
#[derive(Debug, Default)]
#[repr(align(64))]
pub(crate) struct PathCounters {
    pub(crate) near_sent: AtomicU64,
    pub(crate) far_sent: AtomicU64,
    pub(crate) near_recv: AtomicU64,
    pub(crate) far_recv: AtomicU64,
}

impl PathCounters {
    /// Adds `n` to a counter (single writer: a load and a store suffice).
    #[inline(always)]
    pub(crate) fn bump(c: &AtomicU64, n: u64) {
        c.store(c.load(Ordering::Relaxed) + n, Ordering::Relaxed);
    }

    /// Adds this endpoint's counts to `s`.
    pub(crate) fn add_to(&self, s: &mut HybridStats) {
        s.near_am_requests += self.near_sent.load(Ordering::Relaxed);
        s.far_am_requests += self.far_sent.load(Ordering::Relaxed);
        s.near_am_delivered += self.near_recv.load(Ordering::Relaxed);
        s.far_am_delivered += self.far_recv.load(Ordering::Relaxed);
    }
}
