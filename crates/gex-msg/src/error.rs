//! The error enum of every messaging operation.

use gex_core::{AmError, EventError};
use thiserror::Error;

/// Errors of the messaging layer's operations and events.
///
/// A send or receive that returns a validation error ([`NoLayer`](Self::NoLayer),
/// [`BadRank`](Self::BadRank), [`TagOutOfRange`](Self::TagOutOfRange)) did nothing: no
/// message left, no receive was posted.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MsgError {
    /// The endpoint does not carry the messaging layer (build the client with
    /// `ClientBuilder::layer::<gex_msg::Msg>()`).
    #[error(
        "the endpoint does not carry the msg layer (add ClientBuilder::layer::<gex_msg::Msg>())"
    )]
    NoLayer,
    /// The destination or source rank is not in the job.
    #[error("no such rank {rank} (job has {size} ranks)")]
    BadRank {
        /// The rank given.
        rank: u32,
        /// Ranks in the job.
        size: u32,
    },
    /// A tag above [`TAG_MAX`](crate::TAG_MAX) (a send's tag, or a receive's or
    /// probe's tag when it is not a wildcard).
    #[error("tag {tag} is out of range (0..={max})")]
    TagOutOfRange {
        /// The tag given.
        tag: u32,
        /// The largest valid tag, [`TAG_MAX`](crate::TAG_MAX).
        max: u32,
    },
    /// The matched message is longer than the receive buffer. The message is
    /// **consumed** (matched, and removed from the queues: a later receive does not
    /// see it) and none of its bytes is delivered; its sender completes normally.
    #[error(
        "message of {len} bytes from rank {source_rank} (tag {tag}) does not fit the {capacity}-byte receive buffer"
    )]
    Truncated {
        /// The message's length in bytes.
        len: usize,
        /// The receive buffer's length in bytes.
        capacity: usize,
        /// The sending rank.
        source_rank: u32,
        /// The message's tag.
        tag: u32,
    },
    /// Injecting a message failed (a conduit error, a peer that left).
    #[error("active message: {0}")]
    Am(#[from] AmError),
    /// Waiting for the operation's event failed (abandoned: the endpoint was dropped;
    /// or waited on another endpoint).
    #[error("event: {0}")]
    Event(#[from] EventError),
}
