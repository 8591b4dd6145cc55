//! The error enum of collectives and teams.

use crate::op::{OpKind, SyncMode, elem_name, reduce_name};
use crate::rma::RmaError;
use gex_core::{AmError, EpAddr, EventError};
use thiserror::Error;

/// Errors of collective operations, team management and configuration.
///
/// Argument errors are reported before anything is sent, on the rank that made them.
/// The arguments that must agree *between* members are checked as the collective
/// runs: the operation, root, element type, block length, reduction operator and
/// sync modes ([`CollError::Mismatch`]), and the names of barriers
/// ([`CollError::BarrierMismatch`]). Members that force different algorithms are not
/// detected.
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
    /// Members of the team called one collective (the team's collective `seq`) with
    /// descriptors that differ in a field every member must agree on: the operation,
    /// the root, the element type, the block length, the reduction operator or the
    /// sync modes ([`Field`]). `found` names the field, both values and the members
    /// (`None` where no member could tell which field: a member went past the
    /// collective without publishing for the others, or the team failed earlier).
    ///
    /// Every member of the team gets it: a member whose part depends on another's
    /// from the call, a member whose part completed before anyone could tell (a
    /// broadcast root that published, a gather member that sent its block) from its
    /// next collective on the team. The team stays failed: every later collective of
    /// it returns this error at once (destroy it; see docs/coll.md, section 2).
    #[error(
        "members of team {team:#x} called its collective {seq} differently: {}",
        found_text(found)
    )]
    Mismatch {
        /// Team id.
        team: u64,
        /// The collective's sequence number in the team.
        seq: u32,
        /// Which field differs, its values and the members that passed them.
        found: Option<Disagreement>,
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

/// A field of a collective's descriptor that every member must pass alike
/// ([`CollError::Mismatch`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Field {
    /// The operation ([`OpKind`]; values: its index in [`OpKind::ALL`]).
    Operation,
    /// The root of a rooted operation (values: team ranks).
    Root,
    /// The element type (values: 1 + its index among `u8, u16, u32, u64, u128,
    /// usize, i8, i16, i32, i64, i128, isize, f32, f64`; 0 for any other type).
    ElementType,
    /// The size of an element in bytes (of types outside the primitive ones).
    ElementSize,
    /// The length of a block in bytes (elements per block × element size).
    BlockBytes,
    /// The reduction operator (values: 1 + its index in
    /// [`BuiltinOp::ALL`](crate::BuiltinOp::ALL), then 5 + its index in
    /// [`BitOp::ALL`](crate::BitOp::ALL); 10 a commutative user operator, 11 a
    /// non-commutative one; 0 none).
    Reduction,
    /// The entry and exit sync modes (values: `3 × in + out`, each 0 for
    /// [`SyncMode::No`], 1 for `My`, 2 for `All`).
    Sync,
    /// For a stage of a hierarchical collective: which collective of the parent team
    /// it belongs to (values: digests). Members ran the parent team's collectives in
    /// different orders.
    Stage,
}

/// Every field, in the order members compare them.
pub(crate) const FIELDS: [Field; 8] = [
    Field::Operation,
    Field::Root,
    Field::ElementType,
    Field::ElementSize,
    Field::BlockBytes,
    Field::Reduction,
    Field::Sync,
    Field::Stage,
];

impl Field {
    /// The field's name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Field::Operation => "operation",
            Field::Root => "root",
            Field::ElementType => "element type",
            Field::ElementSize => "element size",
            Field::BlockBytes => "block length",
            Field::Reduction => "reduction operator",
            Field::Sync => "sync modes",
            Field::Stage => "parent collective",
        }
    }

    /// `value` of this field, in words.
    pub fn show(self, value: u64) -> String {
        let mode = |m: u64| match m {
            0 => "no",
            1 => "my",
            _ => "all",
        };
        match self {
            Field::Operation => OpKind::ALL
                .get(value as usize)
                .map_or_else(|| format!("operation {value}"), |k| k.name().to_string()),
            Field::Root => format!("member {value}"),
            Field::ElementType => elem_name(value),
            Field::ElementSize | Field::BlockBytes => format!("{value} bytes"),
            Field::Reduction => reduce_name(value),
            Field::Sync => format!("in-{} out-{}", mode(value / 3), mode(value % 3)),
            Field::Stage => format!("{value:#x}"),
        }
    }
}

impl std::fmt::Display for Field {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The code of a sync mode in [`Field::Sync`]'s values (its declaration order).
#[inline(always)]
pub(crate) fn sync_code(m: SyncMode) -> u64 {
    const _: () =
        assert!(SyncMode::No as u64 == 0 && SyncMode::My as u64 == 1 && SyncMode::All as u64 == 2);
    m as u64
}

/// Two members' values of one field of a collective's descriptor
/// ([`CollError::Mismatch`]). Every member that reports a disagreement found by
/// another reports that member's finding, so the members of a team name the same
/// one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Disagreement {
    /// The field that differs (the first in [`Field`]'s order).
    pub field: Field,
    /// A member (team rank) and its value of the field.
    pub member: u32,
    /// Its value (see [`Field`] for the encoding; [`Field::show`] in words).
    pub value: u64,
    /// Another member (team rank) that passed another value.
    pub other: u32,
    /// That member's value.
    pub other_value: u64,
}

impl std::fmt::Display for Disagreement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: member {} passed {}, member {} passed {}",
            self.field,
            self.member,
            self.field.show(self.value),
            self.other,
            self.field.show(self.other_value)
        )
    }
}

fn found_text(found: &Option<Disagreement>) -> String {
    match found {
        Some(d) => d.to_string(),
        None => "a member ran another collective at this point of the team's sequence \
                 (which field differs was not seen here)"
            .to_string(),
    }
}
