//! The node-local shared-memory machinery as a library, for hybrid jobs.
//!
//! A network conduit that runs jobs spanning several hosts can carry the traffic
//! between ranks of one host through shared memory with exactly the smp conduit's
//! mechanisms (one `memfd` region per rank mapped by every rank of its host, an SPSC
//! request ring and reply ring per ordered endpoint pair, futex doorbells, auxiliary
//! areas; nothing ever named in `/dev/shm`). [`open`] builds them for the ranks that
//! share this rank's host id (`JobLayout::host`) and returns the same [`Smp`] and
//! [`SmpEp`] objects as the smp conduit. The caller drives each [`SmpEp`] through its
//! [`ConduitEp`](gex_core::spi::ConduitEp) methods for neighbours only:
//!
//! - `inject`, `poll`, `has_incoming`, `block`, `prepare`/`commit`/`cancel`, `limits`:
//!   AMs to and from ranks of this host (a request from a neighbour is answered through
//!   the rings by the `ReplyTx` that `poll` hands to the handler);
//! - `local_segment`: this endpoint's segment, inside the shared region (zero-filled),
//!   which the caller uses as the endpoint's segment for every peer (a network conduit
//!   registers it with its NIC);
//! - `peer_segment`, `aux`, `wake`: the mapped neighbourhood (`None` / nothing for ranks
//!   of other hosts).
//!
//! Addressing a rank of another host through an [`SmpEp`] is a caller bug (checked in
//! debug builds); [`Smp::is_neighbour`] tells which ranks it serves. The gex-conduit-ofi
//! crate uses this module for its hybrid mode (`docs/ofi.md`); the layer rules allow a
//! conduit to depend on gex-conduit-smp for this (rule L3 in `docs/architecture.md`).
//!
//! Settings come from the caller's configuration snapshot as for the smp conduit:
//! `GEX_SMP_RING_SIZE`, `GEX_SMP_MAX_MEDIUM`.

use crate::smp::{Smp, SmpEp};
use gex_core::InitError;
use gex_core::boot::Bootstrap;
use gex_core::spi::OpenParams;
use std::sync::Arc;

/// Opens the shared-memory part of a job for the ranks of this rank's host.
///
/// Collective over **every** rank of the job, on every host (one bootstrap exchange
/// and one barrier), including ranks alone on their host (they get rings to
/// themselves). Returns this rank's endpoints in index order, each with its segment of
/// `params.layout.seg_len[rank]` bytes. Errors as the smp conduit's `open`
/// (`InitError::Config` naming `GEX_SMP_*`, `InitError::Os` for a failed mapping).
pub fn open(
    boot: &mut dyn Bootstrap,
    params: &OpenParams<'_>,
) -> Result<(Arc<Smp>, Vec<SmpEp>), InitError> {
    Smp::open_node(boot, params)
}
