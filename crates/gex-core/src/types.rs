//! Small value types shared by every layer: ranks, endpoint addresses, AM kinds.

/// A process (or thread) rank in the job, `0..size`.
pub type Rank = u32;

/// Index of an endpoint within its rank; EP 0 exists from initialisation.
pub type EpIndex = u16;

/// Index into an endpoint's handler table. Indices are identical on every rank.
///
/// `0` is never valid; `1..=127` are reserved for gex's own layers;
/// `128..=255` belong to the client (as in GASNet-EX).
pub type HandlerIndex = u8;

/// First handler index available to clients.
pub const FIRST_CLIENT_HANDLER: HandlerIndex = 128;

/// Job-wide address of an endpoint: (rank, endpoint index). AMs and RMA may target any EP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct EpAddr {
    /// The rank that owns the endpoint.
    pub rank: Rank,
    /// The endpoint's index within that rank.
    pub ep: EpIndex,
}

impl EpAddr {
    /// Address of endpoint `ep` of `rank`.
    pub const fn new(rank: Rank, ep: EpIndex) -> Self {
        EpAddr { rank, ep }
    }
    /// Address of EP 0 of `rank` (the primordial endpoint).
    pub const fn rank(rank: Rank) -> Self {
        EpAddr { rank, ep: 0 }
    }
}

impl std::fmt::Display for EpAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "rank {} ep {}", self.rank, self.ep)
    }
}

/// Active-message category.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Category {
    /// Arguments only.
    Short,
    /// Arguments and a payload delivered in a temporary buffer valid during the handler.
    Medium,
    /// Arguments and a payload written into the target endpoint's segment, at an offset
    /// the sender chooses, before the handler runs.
    Long,
}

/// Whether a message is a request or a reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A request: its handler may reply at most once.
    Request,
    /// A reply: its handler may not reply.
    Reply,
}

/// A registered AM handler: what [`Endpoint::register`](crate::Endpoint::register)
/// returns and what requests and replies name. Ids come from registrations (or, for a
/// layer, from its handler block), so ids of different handlers cannot collide;
/// [`HandlerId::at`] names a fixed index for runtimes that keep GASNet-style numbered
/// tables (and register with [`register_at`](crate::Endpoint::register_at)). Every
/// send checks the index against the endpoint's table, so an id that names nothing
/// registered is an error ([`AmError::UnregisteredHandler`](crate::AmError)), never a
/// message to the wrong handler.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HandlerId(HandlerIndex);

impl HandlerId {
    pub(crate) const fn new(index: HandlerIndex) -> Self {
        HandlerId(index)
    }
    /// The id of the client handler at `index` (see the type's documentation), for a
    /// constant: `index` must be a client index ([`FIRST_CLIENT_HANDLER`]`..=255`).
    ///
    /// ```
    /// const PING: gex_core::HandlerId = gex_core::HandlerId::at(200);
    /// assert_eq!(PING.index(), 200);
    /// ```
    /// A reserved index does not compile in a constant:
    /// ```compile_fail
    /// const BAD: gex_core::HandlerId = gex_core::HandlerId::at(16); // gex's layers' block
    /// ```
    ///
    /// # Panics
    /// If `index` is below [`FIRST_CLIENT_HANDLER`] (in a `const`, a compile error). For
    /// an index known only at run time, [`try_at`](Self::try_at) answers an error.
    pub const fn at(index: HandlerIndex) -> Self {
        assert!(
            index >= FIRST_CLIENT_HANDLER,
            "HandlerId::at: indices below 128 are reserved for gex's layers"
        );
        HandlerId(index)
    }
    /// As [`at`](Self::at) for an index known at run time.
    ///
    /// ```
    /// use gex_core::{AmError, HandlerId};
    /// assert_eq!(HandlerId::try_at(130).map(HandlerId::index), Ok(130));
    /// assert_eq!(HandlerId::try_at(16), Err(AmError::ReservedHandler(16)));
    /// ```
    ///
    /// # Errors
    /// [`AmError::ReservedHandler`](crate::AmError::ReservedHandler) for an index below
    /// [`FIRST_CLIENT_HANDLER`] (0 included).
    pub const fn try_at(index: HandlerIndex) -> Result<Self, crate::AmError> {
        if index < FIRST_CLIENT_HANDLER {
            return Err(crate::AmError::ReservedHandler(index));
        }
        Ok(HandlerId(index))
    }
    /// Any index, reserved ones included: for test suites that check that sends
    /// refuse reserved and unregistered ids (feature `test-support`; programs use
    /// [`at`](Self::at) or [`try_at`](Self::try_at)).
    #[cfg(feature = "test-support")]
    pub const fn at_any(index: HandlerIndex) -> Self {
        HandlerId(index)
    }
    /// The index in the handler table (identical on every rank that registered the
    /// same handlers in the same order).
    pub const fn index(self) -> HandlerIndex {
        self.0
    }
}

impl std::fmt::Display for HandlerId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "handler {}", self.0)
    }
}

/// Outcome of an injection that did not fail.
///
/// Back-pressure is a result, not an error: the `try_*` forms of injection return
/// `WouldBlock` instead of waiting for resources (nothing was sent; poll and try
/// again); the other forms wait and never return it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Injected {
    /// The message was injected (and its payload source may be reused).
    Sent,
    /// Resources were not available and the call was a `try_*` form (which does not
    /// wait); nothing was sent.
    WouldBlock,
}

impl Injected {
    /// True if the message was sent.
    pub fn is_sent(self) -> bool {
        self == Injected::Sent
    }
}
