//! # gex-core
//!
//! The core of gex, a communication layer for PGAS runtimes modeled on GASNet-EX:
//! the object model (client, endpoints carrying their layers, segments, teams, tokens,
//! events and scopes), active messages (Short, Medium, Long; request and reply), the
//! layer contract ([`layer`]), the one progress engine ([`Endpoint::poll`] and the wait
//! loop under the wait policy; the optional progress thread; stall reports), the
//! conduit SPI that networks implement ([`spi`]), the bootstrap SPI that launchers
//! implement ([`boot`]) and configuration ([`config`]).
//!
//! ## What it does not do
//! - No sockets, no shared memory, no `-sys` crates: networks live in conduit crates
//!   (one crate per network), launchers in their own crate.
//! - No hidden threads unless asked: progress happens inside calls ([`Endpoint::poll`]
//!   and every wait), or also in a progress thread per endpoint when the client is
//!   built with [`ClientBuilder::progress_thread`].
//! - No process-global mutable state: everything hangs off a [`Client`], so several
//!   ranks can live in one process (tests, the simulator, thread ranks).
//! - It names no upper layer and no conduit: one-sided RMA, collectives and the rest
//!   are layers ([`layer`]) in their own crates; networks are conduits ([`spi`]).
//!
//! ## Words
//! - **rank**: a member of the job, `0..size`.
//! - **endpoint (EP)**: an injection/completion domain with its own handler table and
//!   segment, addressed job-wide as [`EpAddr`] `(rank, ep)`. `Send`, not `Sync`.
//! - **segment**: memory of an endpoint that peers may write (Long AMs, RMA).
//! - **handler**: a closure registered on an endpoint ([`Endpoint::register`] returns
//!   its [`HandlerId`]); tables are identical on every rank.
//! - **token**: what a handler gets: the source, and the right to reply once.
//! - **conduit**: the network implementation ([`spi::Conduit`]).
//! - **layer**: an upper layer composed into every endpoint ([`layer::Layer`]): its
//!   handlers, auxiliary slice, settings and progress hook.
//! - **event**: the completion of an operation ([`Event`]); **modes**: [`Blocking`],
//!   [`Nb`] (an event), [`Nbi`] (an implicit event).
//! - **`try_*`**: injection that returns [`Injected::WouldBlock`] instead of waiting
//!   for resources (back-pressure is a result, not an error).
//!
//! ## Example
//! ```
//! use gex_core::{boot::Singleton, loopback::Loopback, Am, Body, ClientBuilder, EpAddr, Token};
//! use std::sync::{Arc, atomic::{AtomicU64, Ordering}};
//!
//! let client = ClientBuilder::new().segment_size(1 << 16).init::<Loopback>(Box::new(Singleton::new()))?;
//! let mut ep = client.endpoint(0)?;
//! let got = Arc::new(AtomicU64::new(0));
//! let g = got.clone();
//! let done = ep.register(move |_t: &mut Token<'_>, am: Am<'_>| {
//!     g.store(am.payload().len() as u64, Ordering::Relaxed);
//! })?;
//! let echo = ep.register(move |t: &mut Token<'_>, am: Am<'_>| {
//!     // Echo the payload back in a reply.
//!     t.reply(done, Body::medium(am.args(), am.payload())).unwrap();
//! })?;
//! ep.request(EpAddr::rank(0), echo, Body::medium(&[1, 2, 3], b"hello"))?;
//! ep.wait_until(|| got.load(Ordering::Relaxed) == 5);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

/// Emits a `tracing` trace event on the AM path when the `trace-am` feature is on;
/// expands to nothing otherwise, so the data path pays nothing.
macro_rules! am_trace {
    ($what:expr, $peer:expr, $handler:expr, $cat:expr, $len:expr) => {
        #[cfg(feature = "trace-am")]
        {
            ::tracing::trace!(target: "gex::am", what = $what, peer = %$peer, handler = $handler, category = ?$cat, len = $len);
        }
    };
}

pub mod boot;
mod client;
pub mod config;
mod endpoint;
mod error;
pub mod event;
pub mod layer;
pub mod loopback;
pub mod spi;
mod team;
mod types;

pub use client::{
    Client, ClientBuilder, DEFAULT_MAX_ENDPOINTS, DEFAULT_PROGRESS_INTERVAL, DEFAULT_SEGMENT_SIZE,
    DEFAULT_SHARE_INTERVAL, DEFAULT_YIELDS, JobShape,
};
pub use config::Config;
pub use endpoint::{
    Am, Body, Endpoint, EpStats, Handler, LongPayload, OwnedEndpoint, Scope, Segment, Token,
};
pub use error::{AmError, EpError, EventError, InitError, RegisterError};
pub use event::{AnyEvent, Blocking, Event, Mode, ModeKind, Nb, Nbi};
pub use gex_sync::wait::WaitPolicy;
pub use spi::{Capabilities, Limits, OwnedInjected};
pub use team::Team;
pub use types::{
    Category, EpAddr, EpIndex, FIRST_CLIENT_HANDLER, HandlerId, HandlerIndex, Injected, Kind, Rank,
};
