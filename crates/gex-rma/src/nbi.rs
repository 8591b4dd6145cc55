//! Implicit-event (NBI) tracking: operations in mode [`Nbi`](gex_core::Nbi) are counted
//! per category instead of carrying one event each, and relaxed native puts (complete
//! locally, see [`ConduitEp::native_put_relaxed`](gex_core::spi::ConduitEp::native_put_relaxed))
//! are remembered by destination until a sync flushes them.
//!
//! [`RmaExt::sync_nbi`](crate::RmaExt::sync_nbi) of a set of [`NbiCategories`] starts a
//! flush of every unflushed destination (puts), then waits, through the endpoint, until
//! the counters of the categories are zero. A counted get into an owned buffer keeps
//! the buffer in its entry until it completes.

use gex_core::EpAddr;
use std::collections::HashSet;

bitflags::bitflags! {
    /// Categories of implicit-event operations, for [`RmaExt::sync_nbi`](crate::RmaExt::sync_nbi)
    /// and [`RmaExt::test_nbi`](crate::RmaExt::test_nbi).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct NbiCategories: u32 {
        /// Puts and memsets (relaxed native puts are flushed first).
        const PUTS = 1;
        /// Gets.
        const GETS = 2;
        /// Atomics.
        const ATOMICS = 4;
        /// Every category.
        const ALL = 7;
    }
}

/// One category (index into the counters).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cat {
    Puts = 0,
    Gets = 1,
    Atomics = 2,
}

/// The implicit-event tag under which the layer would hand events to the core (only
/// complete ones, which the core drops: NBI operations are counted here instead).
/// Outside the scope tags (high bit clear) and the core's (0).
pub(crate) const TAG: u32 = 0x726d_6100;

impl NbiCategories {
    /// The categories, as counter indices.
    pub(crate) fn cats(self) -> impl Iterator<Item = usize> {
        [Self::PUTS, Self::GETS, Self::ATOMICS]
            .into_iter()
            .enumerate()
            .filter(move |(_, c)| self.contains(*c))
            .map(|(i, _)| i)
    }
}

/// The relaxed-put state of one endpoint (the counters of implicit-event operations
/// are the op table's: [`OpTable::counted`](crate::ops::OpTable)).
#[derive(Debug, Default)]
pub(crate) struct Nbi {
    /// Destinations of relaxed native puts not flushed yet.
    pub(crate) unflushed: HashSet<EpAddr>,
    /// The flush in progress (kept to reuse its allocation).
    pub(crate) flushing: Vec<EpAddr>,
    /// The last destination recorded: a flood to one peer hashes once per sync, not
    /// once per put. Cleared by the flush.
    pub(crate) last_dirty: Option<EpAddr>,
}

impl Nbi {
    /// Records a relaxed put to `dst`.
    #[inline]
    pub(crate) fn dirty(&mut self, dst: EpAddr) {
        if self.last_dirty == Some(dst) {
            return;
        }
        self.last_dirty = Some(dst);
        self.unflushed.insert(dst);
    }

    /// True when nothing counted in `cats` is in flight (`counted`: the op table's
    /// counters) and nothing is left to flush (for puts).
    pub(crate) fn quiet(&self, cats: NbiCategories, counted: &[usize; 3]) -> bool {
        cats.cats().all(|c| counted[c] == 0)
            && (!cats.contains(NbiCategories::PUTS)
                || (self.unflushed.is_empty() && self.flushing.is_empty()))
    }
}
