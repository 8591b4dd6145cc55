//! Error types, one enum per operation family. Every variant is documented; the enums
//! are `#[non_exhaustive]` so new conduits can add failure modes without breaking users.

use crate::boot::BootError;
use crate::types::{EpAddr, HandlerIndex};
use thiserror::Error;

/// Errors from active-message injection (requests and replies).
///
/// Back-pressure is not an error: see [`crate::Injected::WouldBlock`] (the `try_*`
/// forms).
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AmError {
    /// The destination rank is not in the job.
    #[error("no such rank {rank} (job has {size} ranks)")]
    BadRank {
        /// The rank given.
        rank: u32,
        /// Ranks in the job.
        size: u32,
    },
    /// The destination rank has no endpoint with that index.
    #[error("{dst} does not exist (that rank has {eps} endpoint indices)")]
    BadEndpoint {
        /// The address given.
        dst: EpAddr,
        /// Endpoint indices the rank has: its endpoints made at init, or its capacity
        /// (`JobLayout::max_eps`) when the conduit makes endpoints at run time.
        eps: u16,
    },
    /// More arguments than [`crate::Limits::max_args`].
    #[error("{given} AM arguments exceed the maximum of {max}")]
    TooManyArgs {
        /// Arguments given.
        given: usize,
        /// The maximum.
        max: usize,
    },
    /// The payload is larger than the maximum for this category and peer.
    #[error("payload of {len} bytes exceeds the maximum of {max} for this AM category and peer")]
    PayloadTooLarge {
        /// Payload length given.
        len: usize,
        /// The maximum.
        max: usize,
    },
    /// No handler is registered at this index on the sending endpoint (handler tables
    /// must be identical on every rank, so the sender's table is authoritative).
    #[error("no handler registered at index {0}")]
    UnregisteredHandler(HandlerIndex),
    /// The handler index is reserved for gex's own layers (clients use `128..=255`).
    #[error("handler index {0} is reserved for gex (clients use 128..=255)")]
    ReservedHandler(HandlerIndex),
    /// A Long payload's destination range is not inside the target's segment.
    #[error(
        "Long destination [{offset}, {offset}+{len}) is outside the {seg_len}-byte segment of {dst}"
    )]
    OutOfSegment {
        /// Target endpoint.
        dst: EpAddr,
        /// Offset given.
        offset: usize,
        /// Payload length.
        len: usize,
        /// Length of the target's segment.
        seg_len: usize,
    },
    /// A second reply from the same request handler.
    #[error("a request handler may reply at most once")]
    AlreadyReplied,
    /// A reply attempted from a reply handler.
    #[error("a reply handler may not reply")]
    ReplyFromReply,
    /// A prepared (negotiated-payload) message was committed with more bytes than prepared.
    #[error("commit of {len} bytes exceeds the {prepared} bytes prepared")]
    CommitTooLarge {
        /// Length committed.
        len: usize,
        /// Length prepared.
        prepared: usize,
    },
    /// The conduit failed (the peer or the network is gone).
    #[error(transparent)]
    Conduit(#[from] crate::spi::ConduitError),
    /// Waiting on an event failed (see [`EventError`]).
    #[error(transparent)]
    Event(#[from] EventError),
    /// [`Token::deliver_client`](crate::Token::deliver_client) from a client
    /// handler's token: only a layer's handler may run a client handler on its message.
    #[error("only a layer's handler may deliver a message to a client handler")]
    NotFromLayer,
    /// [`Token::deliver_client`](crate::Token::deliver_client) with a Long body: a Long
    /// payload lands in the segment before its handler runs, which a forwarded message
    /// cannot do (forward a Short or a Medium).
    #[error("a Long message cannot be delivered to a client handler by a layer")]
    LongDelivered,
    /// The endpoint has no team member at this address (see [`crate::Team`]).
    #[error("{0} is not a member of the team")]
    NotMember(EpAddr),
    /// A member's exchange on the team is for something else: the members are not at
    /// the same point of the program ([`crate::Endpoint::exchange_tagged`]).
    #[error(
        "{peer} is in another exchange (tag {theirs:#x}) than this one (tag {ours:#x}): the members disagree on the order of their collective calls"
    )]
    ExchangeMismatch {
        /// The member whose part has another tag.
        peer: EpAddr,
        /// This member's tag.
        ours: u32,
        /// The other member's tag.
        theirs: u32,
    },
}

/// Errors of waiting on an [`Event`](crate::Event), converted into each operation
/// family's error type (every family has a variant for it).
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventError {
    /// The event belongs to another endpoint: an event is bound to the endpoint that
    /// started its operation, and only that endpoint's progress completes it.
    #[error(
        "the event belongs to another endpoint (waited on {waited_on}, started on {started_on})"
    )]
    WrongEndpoint {
        /// The endpoint that started the operation.
        started_on: EpAddr,
        /// The endpoint the wait was called on.
        waited_on: EpAddr,
    },
    /// The operation was abandoned without completing (its layer dropped it, e.g. the
    /// endpoint is closing).
    #[error("the operation was abandoned before it completed")]
    Abandoned,
    /// The operation failed with an error of another family than the one waited for.
    #[error("the operation failed: {0}")]
    Failed(String),
}

/// Errors from handler registration.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegisterError {
    /// Index 0 is never valid.
    #[error("handler index 0 is invalid")]
    Zero,
    /// Indices below [`crate::FIRST_CLIENT_HANDLER`] are reserved for gex's layers.
    #[error("handler index {0} is reserved for gex (clients use 128..=255)")]
    Reserved(HandlerIndex),
    /// A handler is already registered at this index.
    #[error("a handler is already registered at index {0}")]
    AlreadyRegistered(HandlerIndex),
    /// Every client index (`128..=255`) is taken.
    #[error("all 128 client handler indices are registered")]
    Full,
}

/// Errors from client initialisation and endpoint creation.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum InitError {
    /// The bootstrap failed.
    #[error(transparent)]
    Boot(#[from] BootError),
    /// A configuration value (builder or `GEX_*` variable) is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The conduit could not be opened.
    #[error("conduit {conduit}: {msg}")]
    Conduit {
        /// Conduit name.
        conduit: &'static str,
        /// What failed.
        msg: String,
    },
    /// A layer could not attach to an endpoint.
    #[error("layer {layer}: {msg}")]
    Layer {
        /// Layer name.
        layer: &'static str,
        /// What failed.
        msg: String,
    },
    /// An operating-system call failed.
    #[error("{what}: {err}")]
    Os {
        /// What was being done.
        what: String,
        /// The OS error.
        err: std::io::Error,
    },
}

/// Errors from taking an endpoint from a client.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EpError {
    /// The index is at or above the number of endpoints the client was built with.
    #[error(
        "endpoint {index} does not exist (client has {count}; raise ClientBuilder::endpoints or GEX_ENDPOINTS)"
    )]
    NoSuchEndpoint {
        /// Index asked for.
        index: u16,
        /// Endpoints provisioned.
        count: u16,
    },
    /// The endpoint was already taken.
    #[error("endpoint {0} was already taken")]
    Taken(u16),
    /// A layer could not attach to the endpoint.
    #[error("{0}")]
    Layer(String),
    /// [`Client::create_endpoint`](crate::Client::create_endpoint): every index of the
    /// rank's capacity has been handed out (indices are never reused).
    #[error(
        "no endpoint index left: capacity {capacity} ({init} made at init; raise GEX_MAX_ENDPOINTS)"
    )]
    Full {
        /// The rank's endpoint capacity (`JobLayout::max_eps`).
        capacity: u16,
        /// Endpoints made at initialisation.
        init: u16,
    },
    /// The conduit refused to open the endpoint (for example
    /// [`ConduitError::Unsupported`](crate::spi::ConduitError::Unsupported): it cannot
    /// make endpoints at run time).
    #[error("{0}")]
    Conduit(crate::spi::ConduitError),
}
