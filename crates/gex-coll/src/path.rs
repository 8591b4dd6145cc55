//! The path a call takes: which mechanism runs a collective once the tuner chose its
//! algorithm. One decision for the runtime (the direct path of blocking calls, the
//! engine) and for what `gex-info coll` shows ([`Tuner::table_on`](crate::Tuner::table_on)).

use crate::algo::{Algorithm, Query};
use crate::op::{AddrMode, OpKind, SyncMode, SyncModes};
use crate::ring;

/// True if a `shm` collective runs through the small-broadcast ring
/// ([`crate::ring`]): a broadcast of at most [`ring::CAP`] bytes without entry or exit
/// synchronisation `All`. The same on every member (it depends on the call alone),
/// whether it runs directly or in the layer's table.
#[inline]
pub(crate) fn ring_eligible(kind: OpKind, n: usize, sync: SyncModes) -> bool {
    kind == OpKind::Broadcast
        && n <= ring::CAP
        && sync.input != SyncMode::All
        && sync.output != SyncMode::All
}

/// How a blocking call of `q` runs when the tuner chose `a` (what `gex-info coll`
/// prints in its `path` column):
/// - `shm-ring`: the small-broadcast ring, directly in the caller (no operation
///   record);
/// - `shm-direct`: the shared-memory slots, directly in the caller (local address
///   mode);
/// - `shm-channel`: the shared-memory slots through the layer's table (single address
///   mode);
/// - `hier`: host and leader stages;
/// - `messages`: the schedule engine over active messages (and gets, puts).
pub(crate) fn blocking_path(a: &dyn Algorithm, q: &Query) -> &'static str {
    if a.is_shared_memory() {
        if ring_eligible(q.op, q.bytes, q.sync) {
            "shm-ring"
        } else if q.addr == AddrMode::Local {
            "shm-direct"
        } else {
            "shm-channel"
        }
    } else if a.is_hierarchical() {
        "hier"
    } else {
        "messages"
    }
}
