//! The error enum of every RMA operation.

use gex_core::{AmError, EpAddr, EventError, Rank};
use thiserror::Error;

/// Errors of RMA operations, atomic domains and RMA events.
///
/// Every operation validates all of its arguments before moving any byte, so an
/// operation that returns a validation error has written nothing (local or remote).
/// Back-pressure is not an error: [`try_get_owned`](crate::try_get_owned)
/// reports it as a result.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RmaError {
    /// The endpoint does not carry the RMA layer (build the client with
    /// `ClientBuilder::layer::<gex_rma::Rma>()`; the `gex` facade does by default).
    #[error(
        "the endpoint does not carry the rma layer (add ClientBuilder::layer::<gex_rma::Rma>())"
    )]
    NoLayer,
    /// The target rank is not in the job.
    #[error("no such rank {rank} (job has {size} ranks)")]
    BadRank {
        /// The rank given.
        rank: u32,
        /// Ranks in the job.
        size: u32,
    },
    /// The target rank has no endpoint with that index: the index is at or above
    /// the rank's capacity (`JobLayout::max_eps` when the conduit makes endpoints at
    /// run time, `JobLayout::eps` otherwise; `Client::endpoint_capacity`).
    #[error("{dst} does not exist")]
    BadEndpoint {
        /// The address given.
        dst: EpAddr,
    },
    /// The target is an index within its rank's capacity whose endpoint is not open:
    /// an endpoint made at run time (`Client::create_endpoint`) that its rank has not
    /// created yet, or has dropped (closed; indices are never reused). Nothing was
    /// moved. From the conduit's `ConduitError::NoEndpoint`: the direct path asks the
    /// conduit before using its mapping of the segment, the AM path gets it from the
    /// conduit when it sends.
    #[error("{dst} is not open ({state})")]
    NoEndpoint {
        /// The address given.
        dst: EpAddr,
        /// `"not created yet"` or `"closed"`.
        state: &'static str,
    },
    /// The remote range `[offset, offset + len)` (bytes) is not inside the target's
    /// published segment, or computing it overflowed (then `len` is the length of the
    /// piece that failed and `offset` the global pointer's offset, or `usize::MAX` when
    /// a strided offset went negative).
    #[error(
        "remote range [{offset}, {offset}+{len}) is outside the {seg_len}-byte segment of {dst}"
    )]
    OutOfSegment {
        /// Target endpoint.
        dst: EpAddr,
        /// Byte offset of the range.
        offset: usize,
        /// Byte length of the range.
        len: usize,
        /// Length of the target's segment.
        seg_len: usize,
    },
    /// A local element index (VIS local side) is outside the local slice.
    #[error(
        "local element range [{start}, {start}+{len}) is outside the {slice_len}-element buffer"
    )]
    LocalOutOfBounds {
        /// First element index of the piece.
        start: usize,
        /// Elements of the piece.
        len: usize,
        /// Length of the local buffer.
        slice_len: usize,
    },
    /// The arguments of a VIS operation do not describe one shape (e.g. stride and
    /// count lists of different lengths, or list lengths that do not add up to the
    /// local buffer's length).
    #[error("inconsistent shape: {0}")]
    ShapeMismatch(String),
    /// A vector or indexed operation names more than one target endpoint (each VIS
    /// operation targets exactly one endpoint).
    #[error("VIS operation targets both {first} and {other}")]
    MixedTargets {
        /// The first target.
        first: EpAddr,
        /// Another target found in the list.
        other: EpAddr,
    },
    /// An atomic operation's word is not naturally aligned (offset, or the address in
    /// the target's segment, not a multiple of the element size).
    #[error("atomic word at offset {offset} of {dst} is not {align}-byte aligned")]
    Misaligned {
        /// Target endpoint.
        dst: EpAddr,
        /// Byte offset of the word.
        offset: usize,
        /// Required alignment (the element size).
        align: usize,
    },
    /// The atomic operation is not in the domain's agreed op set.
    #[error("atomic operation {op:?} is not in the domain's op set")]
    OpNotInDomain {
        /// The operation's bit in the op set (its fetching or non-fetching form:
        /// [`AtomicOp::flag`](crate::AtomicOp::flag),
        /// [`AtomicOp::fetch_flag`](crate::AtomicOp::fetch_flag)).
        op: crate::AtomicOps,
    },
    /// An atomic targets an endpoint that is not a member of the domain's team.
    #[error("{dst} is not a member of the atomic domain's team")]
    NotInTeam {
        /// The target.
        dst: EpAddr,
    },
    /// An atomic domain's op set has operations its type does not support (bitwise
    /// operations on a float type).
    #[error("operations {ops:?} are not supported by the domain's type")]
    BadOpSet {
        /// The unsupported operations.
        ops: crate::AtomicOps,
    },
    /// The members of a team asked for atomic domains of different types or op sets
    /// (reported by every member: the ranks named are those whose request differs from
    /// team rank 0's).
    #[error(
        "atomic domain requests differ between members: job ranks {ranks:?} differ from team rank 0"
    )]
    DomainMismatch {
        /// Job ranks whose type or op set differs from team rank 0's.
        ranks: Vec<Rank>,
    },
    /// Waiting on an RMA event failed: it belongs to another endpoint, or its operation
    /// was abandoned (see [`EventError`]).
    #[error(transparent)]
    Event(#[from] EventError),
    /// The AM layer failed (reference path, exchanges), e.g. the conduit failed.
    /// (A conduit's `NoEndpoint` is [`RmaError::NoEndpoint`] instead.)
    #[error(transparent)]
    Am(AmError),
}

impl From<AmError> for RmaError {
    /// `AmError::Conduit(ConduitError::NoEndpoint { .. })` becomes
    /// [`RmaError::NoEndpoint`]; any other error [`RmaError::Am`].
    fn from(e: AmError) -> Self {
        match e {
            AmError::Conduit(c) => c.into(),
            e => RmaError::Am(e),
        }
    }
}

impl From<gex_core::spi::ConduitError> for RmaError {
    /// `ConduitError::NoEndpoint` becomes [`RmaError::NoEndpoint`]; any other error
    /// `RmaError::Am(AmError::Conduit(..))`.
    fn from(e: gex_core::spi::ConduitError) -> Self {
        match e {
            gex_core::spi::ConduitError::NoEndpoint { dst, state } => {
                RmaError::NoEndpoint { dst, state }
            }
            e => RmaError::Am(AmError::Conduit(e)),
        }
    }
}
