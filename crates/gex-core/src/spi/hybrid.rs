//! The hybrid contract: what a conduit composed of a *near* part (shared memory between
//! the ranks of one host) and a *far* part (a network between hosts) needs from each.
//!
//! The hybrid conduit (`Hybrid<Near, Far>`, its own crate) is written against these items only, so any
//! network conduit that implements [`FarConduit`] runs hybrid jobs with any
//! [`NearConduit`], monomorphised: no dynamic dispatch on the data path.
//! `docs/conduit-guide.md` ("Hybrid jobs") lists every item with its semantics; in
//! short:
//!
//! | item | implemented by | promise |
//! |---|---|---|
//! | [`NearConduit::open_near`] | the near conduit (shared memory) | collective over every rank of the job; endpoints that serve the ranks of this host ([`JobLayout::neighbours`](super::JobLayout::neighbours)), with `SHARED_MEMORY` behaviour for them and a `block` that their messages wake |
//! | [`NearConduit::is_near`], [`NearConduit::near_ranks`] | near | which ranks the near endpoints serve |
//! | [`SharedSegments::of`] | gex-core | this rank's segments, in the near conduit's memory, kept mapped while the value lives |
//! | [`FarConduit::open_far`] | the far conduit (a network) | opens on those segments: they are its endpoints' segments, reachable by its native RMA from every rank; the hybrid conduit never calls the far endpoints' `block` |
//! | [`FarEp::in_flight`], [`FarEp::wants_progress`] | far | whether network operations are in flight / whether sleeping now could stall this endpoint |
//! | [`FarEp::poll_far`] | far | `poll` that also says whether it found any completion ([`FarPoll`]) |
//!
//! The hybrid conduit routes by rank: AMs to a rank the near part serves go through
//! the near endpoint, all others through the far one; `peer_segment`, `aux` and `wake`
//! are the near part's; native RMA and atomics are the far part's for every peer (one
//! atomic implementation per domain, see [`ConduitEp::native_atomic_supported`]).
//!
//! # Safety
//! [`SharedSegments`] carries raw segment addresses across threads; it never reads or
//! writes through them, and keeps the memory they name alive (see its `Send`/`Sync`
//! implementations). [`NearConduit`], [`FarConduit`] and [`FarEp`] are `unsafe trait`s
//! (the hybrid conduit's memory accesses rest on their promises, as on
//! [`Conduit`]'s). This module has no unsafe block.
#![allow(unsafe_code)]

use super::{Conduit, ConduitEp, Deliver, OpenParams};
use crate::boot::Bootstrap;
use crate::error::InitError;
use std::any::Any;
use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

/// A conduit that can be the near (shared-memory) part of a hybrid conduit: it opens
/// for the ranks of this rank's host only.
///
/// Its endpoints, driven by the hybrid conduit for near ranks only (a call naming a
/// rank that [`is_near`](NearConduit::is_near) denies is a caller bug):
/// - `inject`, `poll`, `has_incoming`, `limits`: AMs to and from near ranks; a request
///   from a near rank is answered through the `ReplyTx` that `poll` hands to the
///   handler;
/// - `block` sleeps until a near rank's message (or `wake`) may have arrived
///   (`BLOCKING_WAIT` behaviour); the hybrid conduit naps in it for short intervals;
/// - `local_segment`: the endpoint's segment, zero-filled, in memory that every near
///   rank maps, valid for the life of the conduit (also after the endpoint is
///   dropped); it becomes the hybrid endpoint's segment for every peer;
/// - `peer_segment`, `aux`, `wake`: the mapped neighbourhood (`SHARED_MEMORY`), for
///   near ranks.
///
/// # Safety
/// Besides [`Conduit`]'s promises: [`is_near`](Self::is_near) and
/// [`near_ranks`](Self::near_ranks) name exactly the ranks its endpoints serve (the
/// hybrid conduit routes by them), and its endpoints are sound for any message to
/// those ranks.
pub unsafe trait NearConduit: Conduit {
    /// Opens the near part: endpoints serving the ranks that share this rank's host
    /// (`params.layout.neighbours(params.rank)`), each with its segment of
    /// `params.layout.seg_len[rank]` bytes. Collective over **every** rank of the job,
    /// on every host, including ranks alone on theirs (the bootstrap's collectives are
    /// job-wide).
    ///
    /// # Errors
    /// [`InitError`] naming the conduit and what failed.
    fn open_near(
        boot: &mut dyn Bootstrap,
        params: &OpenParams<'_>,
    ) -> Result<(Arc<Self>, Vec<Self::Ep>), InitError>;

    /// Whether the near endpoints serve `rank` (it shares this rank's host). False for
    /// ranks outside the job. On the injection path: keep it cheap.
    fn is_near(&self, rank: u32) -> bool;

    /// The ranks the near endpoints serve, this rank included, in rank order.
    fn near_ranks(&self) -> &[u32];
}

/// A conduit that can be the far (network) part of a hybrid conduit: it opens on
/// segments that live in the near part's shared memory.
///
/// # Safety
/// Besides [`Conduit`]'s promises: the endpoints of [`open_far`](Self::open_far) use
/// `segments` as their segments as described there, and keep `segments` alive while
/// anything of theirs may still refer to that memory.
pub unsafe trait FarConduit: Conduit<Ep: FarEp> {
    /// Opens like [`Conduit::open`] (collective over every rank, endpoints for every
    /// peer, near ranks included), except that:
    /// - endpoint `i`'s segment is `segments.segment(i)` (zero-filled, already mapped
    ///   by the near ranks) instead of memory of its own: the far conduit makes it
    ///   reachable by its native RMA and atomics from every rank (registers it with its
    ///   network), so RMA from other hosts lands in memory the near ranks read
    ///   directly. It keeps `segments` (which keeps the memory mapped) at least until
    ///   it has released everything that refers to that memory;
    /// - the hybrid conduit never calls the endpoints' `block` (it naps on the near
    ///   endpoint instead), so the far conduit need not set up a wait object, and need
    ///   not set `BLOCKING_WAIT`;
    /// - `SHARED_MEMORY`, `peer_segment`, `aux` and `wake` are the near part's business:
    ///   the far endpoints answer as for peers they do not share memory with.
    ///
    /// # Errors
    /// [`InitError`] naming the conduit and what failed.
    fn open_far(
        boot: &mut dyn Bootstrap,
        params: &OpenParams<'_>,
        segments: SharedSegments,
    ) -> Result<(Arc<Self>, Vec<Self::Ep>), InitError>;
}

/// What the hybrid conduit needs to know of a far endpoint to schedule its progress:
/// a network's progress pass can cost a system call, so while nothing is in flight
/// the hybrid conduit reads it only at growing intervals, and naps on the near
/// endpoint's wait object instead of the network's.
///
/// # Safety
/// As [`ConduitEp`]; [`poll_far`](Self::poll_far) delivers as
/// [`poll`](ConduitEp::poll) does.
pub unsafe trait FarEp: ConduitEp {
    /// Whether operations of this endpoint are in flight whose completions only its
    /// progress collects (sends not locally complete, native RMA or atomics, replies
    /// waiting to be sent, receive buffers waiting to be reposted, completions read
    /// but not processed). While true the hybrid conduit polls it on every poll.
    fn in_flight(&self) -> bool;

    /// Whether sleeping now could stall this endpoint: [`in_flight`](FarEp::in_flight),
    /// or work that only its progress does and no arriving message prompts (credits it
    /// owes peers). While true the hybrid conduit's `block` yields instead of napping.
    fn wants_progress(&self) -> bool;

    /// [`ConduitEp::poll`], also telling whether the pass found any completion at all
    /// (a send, an RMA operation, a message, returned credits), not only deliveries:
    /// the hybrid conduit reads the network at doubling intervals while passes find
    /// nothing, and on every poll again once one does.
    fn poll_far<D: Deliver>(&mut self, d: &mut D, budget: usize) -> FarPoll;
}

/// The outcome of [`FarEp::poll_far`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FarPoll {
    /// Messages delivered (what [`ConduitEp::poll`] returns).
    pub delivered: usize,
    /// Whether the pass found any completion.
    pub active: bool,
}

/// This rank's segments in a near conduit's shared memory, handed to the far conduit
/// ([`FarConduit::open_far`]). It holds the near conduit, so the memory stays mapped
/// while this value (or a clone) lives.
#[derive(Clone)]
pub struct SharedSegments {
    /// Base and length of every endpoint's segment, by endpoint index.
    segs: Vec<(NonNull<u8>, usize)>,
    /// The ranks that map them (the near ranks).
    ranks: Vec<u32>,
    /// Keeps the memory mapped.
    _owner: Arc<dyn Any + Send + Sync>,
}

// SAFETY: the pointers are addresses of memory that `_owner` keeps mapped; this type
// never reads or writes through them (whoever does follows the conduit contract of
// segment memory, which other ranks access concurrently anyway).
unsafe impl Send for SharedSegments {}
// SAFETY: as above: shared access only hands out the addresses.
unsafe impl Sync for SharedSegments {}

impl SharedSegments {
    /// The segments of `eps` (in endpoint order), which `near` opened with
    /// [`NearConduit::open_near`]. Each is the endpoint's
    /// [`local_segment`](ConduitEp::local_segment), valid for the life of `near`,
    /// which the value keeps.
    pub fn of<N: NearConduit>(near: &Arc<N>, eps: &[N::Ep]) -> SharedSegments {
        SharedSegments {
            segs: eps.iter().map(ConduitEp::local_segment).collect(),
            ranks: near.near_ranks().to_vec(),
            _owner: near.clone(),
        }
    }

    /// Number of segments (this rank's endpoints).
    pub fn len(&self) -> usize {
        self.segs.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.segs.is_empty()
    }

    /// Base and length of endpoint `ep`'s segment.
    ///
    /// # Panics
    /// If `ep >= self.len()`.
    pub fn segment(&self, ep: usize) -> (NonNull<u8>, usize) {
        self.segs[ep]
    }

    /// The ranks that map these segments (the near ranks, this rank included), in
    /// rank order.
    pub fn near_ranks(&self) -> &[u32] {
        &self.ranks
    }
}

impl fmt::Debug for SharedSegments {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedSegments")
            .field("segs", &self.segs)
            .field("ranks", &self.ranks)
            .finish_non_exhaustive()
    }
}
