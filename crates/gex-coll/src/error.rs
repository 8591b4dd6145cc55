//! The error enum of collectives and teams.

use crate::op::OpKind;
use crate::rma::RmaError;
use gex_core::{AmError, EpAddr, EventError};
use thiserror::Error;

/// Errors of collective operations, team management and configuration.
///
/// Argument errors are reported before anything is sent, on the rank that made them.
/// Of the arguments that must agree *between* members, the root (and the operation)
/// is checked ([`CollError::RootMismatch`], see [`Root`](crate::Root)) and so are the
/// names of barriers ([`CollError::BarrierMismatch`]); members that disagree on
/// counts or algorithms are not detected and may hang or corrupt data.
#[derive(Debug, Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum CollError {
    /// An active message could not be sent.
    #[error("active message failed: {0}")]
    Am(#[from] AmError),
    /// A gex-rma operation (rendezvous get) failed.
    #[error("RMA failed: {0}")]
    Rma(#[from] RmaError),
    /// Waiting on a collective's event failed (another endpoint's event, or an
    /// operation abandoned because its endpoint is closing).
    #[error(transparent)]
    Event(#[from] EventError),
    /// Members of the team named different roots for one collective (or started
    /// different collectives at the same point of the team's sequence). Which members
    /// see it is documented on [`Root`](crate::Root); on a team that runs through
    /// shared memory, every later collective of the team that has to wait for a
    /// member fails with it too (destroy the team).
    #[error(
        "members of team {team:#x} named different roots (or operations) for its collective {seq}"
    )]
    RootMismatch {
        /// Team id.
        team: u64,
        /// The collective's sequence number in the team.
        seq: u32,
    },
    /// A barrier's members entered with different names (two named ids differ), or
    /// this member waited with another name than it notified; reported by every
    /// member of the barrier (see [`CollExt::barrier_wait`](crate::CollExt::barrier_wait)).
    #[error("barrier name mismatch")]
    BarrierMismatch,
    /// [`barrier_notify`](crate::CollExt::barrier_notify) while this member's previous
    /// split-phase barrier of the team is not finished.
    #[error("a split-phase barrier of this team is already notified")]
    BarrierAlreadyNotified,
    /// [`barrier_wait`](crate::CollExt::barrier_wait) or
    /// [`barrier_try`](crate::CollExt::barrier_try) without a notify.
    #[error("no split-phase barrier of this team is notified")]
    BarrierNotNotified,
    /// The calling rank is not a member of the team, or the team was made by another
    /// client's layer (another job in the same process, or a client dropped since),
    /// whose shared memory is not this endpoint's.
    #[error("the calling rank is not a member of team {team:#x}")]
    NotMember {
        /// Team id.
        team: u64,
    },
    /// A root or member rank is outside the team.
    #[error("rank {rank} is not in a team of {size}")]
    BadRank {
        /// The rank given.
        rank: u32,
        /// Team size.
        size: u32,
    },
    /// A root named by its data ([`Root::Data`](crate::Root::Data)) points into the
    /// segment of an endpoint that is not a member of the team. (A pointer outside its
    /// owner's segment is [`CollError::Rma`] with
    /// [`RmaError::OutOfSegment`].)
    #[error("the root's data is in the segment of {owner}, not a member of team {team:#x}")]
    RootNotMember {
        /// The endpoint owning the segment the pointer points into.
        owner: EpAddr,
        /// Team id.
        team: u64,
    },
    /// A member list is empty or names a rank twice.
    #[error("bad member list: {0}")]
    BadMembers(String),
    /// A buffer has the wrong number of elements.
    #[error("{what}: expected {expected} elements, got {got}")]
    BadLength {
        /// Which buffer.
        what: &'static str,
        /// Elements expected.
        expected: usize,
        /// Elements given.
        got: usize,
    },
    /// A single-address-mode offset list or range is wrong (length, or outside the
    /// segment).
    #[error("bad single-mode address: {0}")]
    BadAddress(String),
    /// The operation needs a reduction operator that is not defined on the type.
    #[error("operator {op} is not defined on {ty}")]
    UnsupportedOp {
        /// The operator.
        op: String,
        /// The element type.
        ty: &'static str,
    },
    /// No registered algorithm implements the operation under that name.
    #[error("no algorithm named {name:?} implements {op}")]
    UnknownAlgorithm {
        /// The operation.
        op: OpKind,
        /// The name given.
        name: String,
    },
    /// The forced algorithm cannot run this call (team size, modes, operator).
    #[error("algorithm {algorithm} cannot run this {op} on {size} members")]
    Unsupported {
        /// The algorithm.
        algorithm: String,
        /// The operation.
        op: OpKind,
        /// Team size.
        size: u32,
    },
    /// No registered algorithm supports the call.
    #[error("no algorithm supports this {op} on {size} members")]
    NoAlgorithm {
        /// The operation.
        op: OpKind,
        /// Team size.
        size: u32,
    },
    /// Scratch space could not be provided (no region configured, or outside the
    /// segment).
    #[error("scratch: {0}")]
    Scratch(String),
    /// A forced algorithm moves data through the team's scratch space (local address
    /// mode with signaling put or rendezvous) and some member's is too small: every
    /// member's scratch must hold the whole output, team size × block bytes.
    #[error(
        "scratch too small: {algorithm} needs {needed} bytes of scratch space on every member ({size} members × {block}-byte blocks); the smallest has {available}"
    )]
    ScratchTooSmall {
        /// The algorithm.
        algorithm: String,
        /// Bytes needed on every member.
        needed: usize,
        /// Bytes of the smallest member's scratch space (0 without scratch).
        available: usize,
        /// Team size.
        size: u32,
        /// Bytes per block.
        block: usize,
    },
    /// A team still has collectives in flight.
    #[error("team {team:#x} has {pending} collectives in flight")]
    TeamBusy {
        /// Team id.
        team: u64,
        /// Collectives not yet complete.
        pending: usize,
    },
    /// A configuration value (environment, or an algorithm parameter such as fork
    /// tree dimensions) is malformed.
    #[error("configuration: {0}")]
    Config(String),
    /// A tuning profile (`GEX_COLL_PROFILE`) cannot be read or is malformed.
    #[error("profile {path}:{line}: {reason}")]
    Profile {
        /// The file.
        path: String,
        /// 1-based line (0: the whole file).
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// The endpoint does not carry the collectives layer ([`Coll`](crate::Coll)), or
    /// an internal collective disappeared.
    #[error("gex-coll: {0}")]
    Layer(&'static str),
}
