//! The error enum of collectives and teams.

use crate::op::OpKind;
use gex_core::{AmError, EpAddr, RegisterError};
use gex_rma::RmaError;
use thiserror::Error;

/// Errors of collective operations, team management and configuration.
///
/// Argument errors are reported before anything is sent, on the rank that made them;
/// a collective whose arguments are inconsistent *between* ranks (different counts,
/// roots or algorithms) is not detected and may hang or corrupt data.
#[derive(Debug, Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum CollError {
    /// An active message could not be sent.
    #[error("active message failed: {0}")]
    Am(#[from] AmError),
    /// A gex-rma operation (rendezvous get) failed.
    #[error("RMA failed: {0}")]
    Rma(#[from] RmaError),
    /// gex-coll's handlers could not be registered (indices 48..=53 taken).
    #[error("handler registration failed: {0}")]
    Register(#[from] RegisterError),
    /// The calling rank is not a member of the team.
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
    /// [`RmaError::OutOfSegment`](gex_rma::RmaError::OutOfSegment).)
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
    /// Scratch space could not be provided (no region configured, or too little).
    #[error("scratch: {0}")]
    Scratch(String),
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
    /// The handle does not belong to this endpoint or was already completed.
    #[error("unknown collective handle {0}")]
    BadHandle(u64),
}
