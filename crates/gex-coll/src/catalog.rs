//! The catalogue: the one table of the algorithm instances gex-coll knows. The
//! tuner of every endpoint starts from it; `gex-info coll` and `gex-tune` read it;
//! profiles name its entries.
//!
//! Adding an algorithm: a module under `algo/` that implements [`Algorithm`] (plan
//! and cost together), and one line in [`algo::messages`](crate::algo::messages)
//! (docs/coll.md, "The catalogue").

use crate::algo::Algorithm;
use std::sync::Arc;

/// The algorithm instances the autotuner considers by default: the message
/// algorithms ([`algo::messages`](crate::algo::messages)) and the placement ones.
pub fn catalog() -> Vec<Arc<dyn Algorithm>> {
    let mut all = crate::algo::messages();
    // The shared-memory and hierarchical algorithms support only teams that have a
    // channel / host sub-teams (`Query::shm`, `Query::hier`); they are part of the
    // catalogue so that profiles naming them load wherever the catalogue is used.
    all.push(Arc::new(crate::shm::Shm));
    all.push(Arc::new(crate::hier::HierAlgo));
    all
}
