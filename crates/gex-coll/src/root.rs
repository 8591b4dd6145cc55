//! Roots of rooted collectives: by team rank, or by where the data lives.

use crate::op::OpKind;
use crate::rma::GlobalPtr;

/// The root of a rooted collective (broadcast, scatter, gather, reduce): a team rank,
/// or the place of the root's data (seed 003 §1: in a UPC broadcast "the user
/// specifies the source by providing the pointer to the shared data buffer and the
/// runtime determines the location of the data automatically").
///
/// Every rooted call takes `impl Into<Root>`, so a `u32` team rank works as before
/// and a [`GlobalPtr`] of any element type names the root by its data:
///
/// - **`Rank(r)`**: team rank `r`.
/// - **`Data(ptr)`**: the member whose endpoint owns the segment `ptr` points into
///   ([`Team::rank_of`](crate::Team::rank_of) of `ptr.addr()`), which need not be
///   the same number as its job rank in a split team. `ptr` addresses the root's
///   buffer: the *source* of a broadcast or scatter, the *destination* of a gather or
///   reduce. In local address mode it only names the root (the root still passes its
///   data as an owned or borrowed buffer); in single address mode
///   ([`CollEp::start_single`](crate::CollEp::start_single)) it is also the root's
///   offset, replacing the root's entry of [`Single`](crate::Single) (`src` for
///   broadcast and scatter, `dst` for gather and reduce).
///
/// A data root is checked on every member, before anything moves, with the same
/// outcome everywhere: an owner that is not a member of the team is
/// [`CollError::RootNotMember`](crate::CollError::RootNotMember); a root buffer
/// (`count` elements per block: one block for broadcast and reduce, `P` for scatter
/// and gather) that does not fit in the owner's segment is
/// [`CollError::Rma`](crate::CollError::Rma) wrapping gex-rma's own
/// [`RmaError::OutOfSegment`](gex_rma::RmaError::OutOfSegment).
///
/// **Every member must name the same root**: the same rank, or the same pointer
/// (its owner decides the root, and every member checks its range, so pointers that
/// differ in offset alone could fail on some members and start on others). As with
/// differing rank roots, a disagreement is not
/// detected: detecting it needs every member's choice before data moves, that is an
/// agreement round inside every rooted `*_nb` start (which would make each one an
/// entry barrier, against the in-no/in-my modes) or a root field in every message
/// header (and the `shm` algorithm sends no messages); the members would then run
/// different trees and may hang or deliver wrong data.
///
/// Why `impl Into<Root>` rather than separate `*_from` calls: one entry point per
/// operation keeps the API as small as it was, existing `u32` callers compile
/// unchanged, and a runtime that tracks its data by global pointer passes the
/// pointer where it would pass a rank.
///
/// ```
/// use gex_coll::{CollEp, Opts, Root};
/// use gex_core::ClientBuilder;
/// use gex_rma::RmaEp;
/// use gex_testkit::sim::{run_sim, SimConfig};
///
/// let out = run_sim(4, SimConfig::default(), || ClientBuilder::new().segment_size(1 << 16), |client| {
///     let mut coll = CollEp::new(RmaEp::new(client.endpoint(0).unwrap()).unwrap()).unwrap();
///     let world = coll.world().clone();
///     // Two teams, each in reverse job-rank order: {3, 1} and {2, 0}.
///     let me = world.rank();
///     let odd = coll.split(&world, Some(me % 2), 100 - me, Default::default()).unwrap().unwrap();
///     // The data lives at offset 256 of job rank 1's segment (endpoint 0).
///     let owner = world.member(1).unwrap();
///     let ptr = coll.rma().global_ptr::<u64>(owner, 256);
///     assert_eq!(Root::from(ptr), Root::Data(ptr.cast()));
///     let mut v = [u64::from(me) * 10; 2];
///     if me % 2 == 1 {
///         coll.broadcast(&odd, ptr, &mut v).unwrap(); // the root is team rank 1
///     } else {
///         coll.broadcast(&odd, 0, &mut v).unwrap(); // the even team, by rank: job rank 2
///     }
///     coll.barrier(&world).unwrap();
///     v[0]
/// });
/// assert_eq!(out, vec![20, 10, 20, 10]);
/// ```
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
