//! Statistics: per-endpoint counters of native operations (one cache line per
//! endpoint, written only by the thread driving it), and the rank's sums with the
//! registration cache's counters ([`Ofi::stats`]). AMs per path in a hybrid job are
//! the hybrid conduit's (`Hybrid::stats`).

use crate::Ofi;
use gex_sync::atomic::{AtomicU64, Ordering};

/// Declares a struct of counters (`AtomicU64`s, `Debug`, `Default`) and its
/// `add_to(&self, &mut OfiStats)`, which adds each counter to the [`OfiStats`] field
/// it is paired with (`counter => field`).
macro_rules! counters {
    ($(#[$m:meta])* $name:ident { $($f:ident => $stat:ident),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Default)]
        pub(crate) struct $name {
            $(pub(crate) $f: gex_sync::atomic::AtomicU64,)+
        }

        impl $name {
            /// Adds these counts to the rank's sums `s`.
            pub(crate) fn add_to(&self, s: &mut $crate::stats::OfiStats) {
                $(s.$stat += self.$f.load(gex_sync::atomic::Ordering::Relaxed);)+
            }
        }
    };
}
pub(crate) use counters;

counters! {
    /// Counters of one endpoint's native operations (written only by the thread driving
    /// that endpoint; read by [`Ofi::stats`]). A cache line each, so that endpoints driven
    /// by different threads do not share one.
    #[repr(align(64))]
    EpCounters {
        puts => native_puts,
        relaxed_puts => native_relaxed_puts,
        flushes => native_flushes,
        gets => native_gets,
        put_bytes => native_put_bytes,
        get_bytes => native_get_bytes,
        atomics => native_atomics,
    }
}

impl EpCounters {
    /// Adds `n` to a counter (single writer: a load and a store suffice).
    #[inline(always)]
    pub(crate) fn bump(c: &AtomicU64, n: u64) {
        c.store(c.load(Ordering::Relaxed) + n, Ordering::Relaxed);
    }

    /// Adds one operation of `len` bytes (single writer: a load and a store suffice).
    #[inline(always)]
    pub(crate) fn add(ops: &AtomicU64, bytes: &AtomicU64, len: usize) {
        ops.store(ops.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        bytes.store(
            bytes.load(Ordering::Relaxed) + len as u64,
            Ordering::Relaxed,
        );
    }
}

/// Native RMA operations this rank's endpoints started (see [`Ofi::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OfiStats {
    /// `fi_writemsg` calls accepted by the provider (native puts).
    pub native_puts: u64,
    /// `fi_read` calls accepted by the provider (native gets).
    pub native_gets: u64,
    /// Those of `native_puts` posted transmit-complete (implicit-event puts, completed
    /// at the target by a flush; see docs/ofi.md, "Relaxed puts").
    pub native_relaxed_puts: u64,
    /// Flushes posted: one ordered `fi_read` per destination with relaxed puts, at a sync.
    pub native_flushes: u64,
    /// Bytes of those puts.
    pub native_put_bytes: u64,
    /// Bytes of those gets.
    pub native_get_bytes: u64,
    /// Native atomics (`fi_atomic`, `fi_fetch_atomic`, `fi_compare_atomic`) accepted.
    pub native_atomics: u64,
    /// Native operations whose local buffer lies outside the memory registered at open
    /// and that used a registration already in the cache (a client region's, or one an
    /// operation on the same buffer still in flight made). Only under `FI_MR_LOCAL`
    /// (the provider's, or `GEX_OFI_MR_LOCAL=1`).
    pub mr_cache_hits: u64,
    /// Client regions ([`Ofi::register`]) registered by an endpoint at its first
    /// operation from them, or again after an eviction (cache misses).
    pub mr_region_registrations: u64,
    /// Registrations made for one operation (its local buffer in no segment, pool or
    /// client region), closed when its last user completes.
    pub mr_op_registrations: u64,
    /// Idle client-region registrations closed to stay within
    /// `GEX_OFI_MR_CACHE_ENTRIES` / `GEX_OFI_MR_CACHE_BYTES`.
    pub mr_evictions: u64,
    /// Registrations of the two kinds above closed so far (completion, eviction, region
    /// dropped, endpoint closed): equal to their sum once every endpoint has closed.
    pub mr_closed: u64,
    /// On-demand registrations that failed (the operation took gex-rma's AM path).
    pub mr_failures: u64,
}

impl Ofi {
    /// Native RMA operations started so far by this rank's endpoints (summed), e.g. to
    /// check that puts took the `FI_RMA` path rather than gex-rma's AM reference path.
    pub fn stats(&self) -> OfiStats {
        let mut s = OfiStats::default();
        for c in &self.counters {
            c.add_to(&mut s);
        }
        for c in &self.mr_counters {
            c.add_to(&mut s);
        }
        s
    }
}
