//! Roots of rooted collectives: by team rank, or by where the data lives.

use crate::op::OpKind;
use crate::rma::GlobalPtr;

/// The root of a rooted collective (broadcast, scatter, gather, reduce): a team rank,
/// or the place of the root's data (seed 003 §1: in a UPC broadcast "the user
/// specifies the source by providing the pointer to the shared data buffer and the
/// runtime determines the location of the data automatically").
///
/// Every rooted descriptor takes `impl Into<Root>`, so a `u32` team rank works and a
/// [`GlobalPtr`] of any element type names the root by its data:
///
/// - **`Rank(r)`**: team rank `r`.
/// - **`Data(ptr)`**: the member whose endpoint owns the segment `ptr` points into
///   ([`Team::rank_of`](gex_core::Team::rank_of) of `ptr.addr()`), which need not be
///   the same number as its job rank in a split team. `ptr` addresses the root's
///   buffer: the *source* of a broadcast or scatter, the *destination* of a gather or
///   reduce. In local address mode it only names the root (the root still passes its
///   data as an owned or borrowed buffer); in single address mode
///   ([`InSegments`](crate::InSegments)) it is also the root's offset, replacing the
///   root's entry of [`Single`](crate::Single) (`src` for broadcast and scatter, `dst`
///   for gather and reduce).
///
/// A data root is checked on every member, before anything moves, with the same
/// outcome everywhere: an owner that is not a member of the team is
/// [`CollError::RootNotMember`](crate::CollError::RootNotMember); a root buffer
/// (`count` elements per block: one block for broadcast and reduce, `P` for scatter
/// and gather) that does not fit in the owner's segment is
/// [`CollError::Rma`](crate::CollError::Rma) wrapping gex-rma's own
/// [`RmaError::OutOfSegment`](gex_rma::RmaError::OutOfSegment).
///
/// # Members that name different roots
/// Every member must name the same root (the same rank, or pointers with the same
/// owner), as every member must pass the same operation, element type, block length,
/// operator and sync modes. When they do not, every member gets
/// [`CollError::Mismatch`] (here with [`Field::Root`](crate::Field::Root), both roots
/// and the members that named them) instead of waiting forever (the agreement check, docs/coll.md).
/// Exactly:
///
/// - A member fails with `Mismatch` when its part of the collective needs data or a
///   signal from a member that runs the collective with another descriptor: it sees
///   the other's belief in the message it receives (and asks the sender which field
///   differs), or — when nothing arrives for 50 ms — by asking the members it waits
///   for (a probe over messages; their check line in shared memory). Two members
///   that each take the other for the root of a broadcast, or three members naming
///   three roots, all fail.
/// - The member that sees the mismatch tells every member of the team; each member
///   whose part has not completed then fails too.
/// - A member whose part completed without depending on a member that disagrees (a
///   broadcast or scatter root that published its data, a non-root of a gather or
///   reduce that sent its block) returns `Ok` from the call: no member can tell
///   without an agreement round in every rooted collective (an entry barrier), which
///   gex does not pay for. The team has failed all the same: that member's next
///   collective on the team returns the error (once the news reached it: at the
///   latest when that collective waits for a member that knows).
/// - The team stays failed: every later collective of it returns the error at once
///   (destroy the team). When no member saw the mismatch (every reader of a
///   broadcast read the root it named), the first later collective of a
///   shared-memory team that reuses the slot of the bad one (within 32 collectives,
///   or the next one for large blocks) fails with it on the member waiting for the
///   missing acknowledgements.
///
/// ```
/// use gex_coll::{Barrier, Broadcast, Coll, CollExt, Root};
/// use gex_core::{Blocking, ClientBuilder};
/// use gex_rma::GlobalPtr;
/// use gex_testkit::sim::{run_sim, SimConfig};
///
/// let builder = || ClientBuilder::new().layer::<gex_rma::Rma>().layer::<Coll>().segment_size(1 << 16);
/// let out = run_sim(4, SimConfig::default(), builder, |client| {
///     let mut ep = client.endpoint(0).unwrap();
///     let world = ep.world();
///     // Two teams, each in reverse job-rank order: {3, 1} and {2, 0}.
///     let me = world.rank();
///     let odd = ep.split(&world, Some(me % 2), 100 - me, Default::default()).unwrap().unwrap();
///     // The data lives at offset 256 of job rank 1's segment (endpoint 0).
///     let owner = world.member(1).unwrap();
///     let ptr = GlobalPtr::<u64>::new(owner, 256);
///     assert_eq!(Root::from(ptr), Root::Data(ptr.cast()));
///     let mut v = [u64::from(me) * 10; 2];
///     if me % 2 == 1 {
///         // The root is team rank 1.
///         ep.collective(&odd, Broadcast::in_place(ptr, &mut v), Blocking).unwrap();
///     } else {
///         // The even team, by rank: job rank 2.
///         ep.collective(&odd, Broadcast::in_place(0, &mut v), Blocking).unwrap();
///     }
///     ep.barrier(&world).unwrap();
///     v[0]
/// });
/// assert_eq!(out, vec![20, 10, 20, 10]);
/// ```
///
/// [`CollError::Mismatch`]: crate::CollError::Mismatch
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Root {
    /// The member of this team rank.
    Rank(u32),
    /// The member whose endpoint owns the segment this pointer points into, at the
    /// root's buffer (see the type's docs).
    Data(GlobalPtr<u8>),
}

impl From<u32> for Root {
    fn from(rank: u32) -> Root {
        Root::Rank(rank)
    }
}

impl<T> From<GlobalPtr<T>> for Root {
    fn from(ptr: GlobalPtr<T>) -> Root {
        Root::Data(ptr.cast())
    }
}

/// Blocks of the root's buffer that a data root points at: the input of a broadcast
/// or scatter, the output of a gather or reduce (0 for unrooted operations).
pub(crate) fn root_blocks(op: OpKind, size: u32) -> usize {
    match op {
        OpKind::Broadcast | OpKind::Reduce => 1,
        OpKind::Scatter | OpKind::Gather => size as usize,
        _ => 0,
    }
}
