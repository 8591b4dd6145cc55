//! # gex-core
//!
//! The core of gex, a communication layer for PGAS runtimes modeled on GASNet-EX:
//! the object model (client, endpoints, segments, the primordial team, tokens, events),
//! active messages (Short, Medium, Long; request and reply), the conduit SPI that
//! networks implement, the bootstrap SPI that launchers implement, wait policies and
//! configuration.
//!
//! ## What it does not do
//! - No sockets, no shared memory, no `-sys` crates: networks live in conduit crates
//!   (`gex-conduit-smp`, ...), launchers in `gex-boot`.
//! - No hidden threads: progress happens inside calls ([`Endpoint::poll`],
//!   [`Endpoint::wait_until`], injection under back-pressure).
//! - No process-global mutable state: everything hangs off a [`Client`], so several
//!   ranks can live in one process (tests, the simulator, thread ranks).
//! - One-sided RMA and collectives are the upper layers' business.
//!
//! ## Words
//! - **rank**: a member of the job, `0..size`.
//! - **endpoint (EP)**: an injection/completion domain with its own handler table and
//!   segment, addressed job-wide as [`EpAddr`] `(rank, ep)`. `Send`, not `Sync`.
//! - **segment**: memory of an endpoint that peers may write (Long AMs, RMA).
//! - **handler**: a closure registered at an index `128..=255`, identical on every rank.
//! - **token**: what a handler gets: the source, and the right to reply once.
//! - **conduit**: the network implementation ([`spi::Conduit`]).
//! - **immediate**: [`Flags::IMMEDIATE`] turns "would wait for resources" into
//!   [`Injected::WouldBlock`].
//!
//! ## Example
//! ```
//! use gex_core::{boot::Singleton, loopback::Loopback, Am, ClientBuilder, EpAddr, Flags, Token};
//! use std::sync::{Arc, atomic::{AtomicU64, Ordering}};
//!
//! let client = ClientBuilder::new().segment_size(1 << 16).init::<Loopback>(Box::new(Singleton::new()))?;
//! let mut ep = client.endpoint(0)?;
//! let got = Arc::new(AtomicU64::new(0));
//! let g = got.clone();
//! ep.register(130, |t: &mut Token<'_>, am: Am<'_>| {
//!     // Echo the payload back in a reply.
//!     t.reply_medium(131, am.args(), am.payload()).unwrap();
//! })?;
//! ep.register(131, move |_t: &mut Token<'_>, am: Am<'_>| {
//!     g.store(am.payload().len() as u64, Ordering::Relaxed);
//! })?;
//! ep.request_medium(EpAddr::rank(0), 130, &[1, 2, 3], b"hello", Flags::empty())?;
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
pub mod loopback;
pub mod spi;
mod types;

pub use client::{Client, ClientBuilder, DEFAULT_SEGMENT_SIZE, DEFAULT_YIELDS, Team};
pub use config::Config;
pub use endpoint::{Am, Endpoint, EpStats, Handler, LcEvent, Prepared, Segment, Token};
pub use error::{AmError, EpError, InitError, RegisterError};
pub use gex_sync::wait::WaitPolicy;
pub use spi::OwnedInjected;
pub use spi::{Capabilities, Limits};
pub use types::{
    Category, EpAddr, EpIndex, FIRST_CLIENT_HANDLER, Flags, HandlerIndex, Injected, Kind, Rank,
};

/// Back-compat alias used in doc examples.
#[doc(hidden)]
pub mod testing {
    pub use crate::loopback::Loopback;
}
