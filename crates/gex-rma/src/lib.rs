//! # gex-rma
//!
//! The one-sided layer of gex: remote memory access (RMA) into the segments of
//! endpoints, as a [layer](gex_core::layer) composed into every endpoint of a client,
//! generic over the conduit SPI.
//!
//! - put/get, value put/get, memset: one method per operation on the endpoint
//!   ([`RmaExt`]), with the completion mode as a parameter: [`Blocking`](gex_core::Blocking),
//!   [`Nb`](gex_core::Nb) (an [`Event`](gex_core::Event)) or [`Nbi`](gex_core::Nbi)
//!   (implicit, synced by category with [`RmaExt::sync_nbi`]);
//! - VIS: strided (signed strides, any number of dimensions), vector and indexed
//!   transfers ([`Vis`], [`RmaExt::put_strided`], ...);
//! - remote atomics: [`AtomicDomain`]s over (team, type, op set), created collectively
//!   with an agreed op set and one implementation (NIC or CPU) for every member, for
//!   `i32`/`u32`/`i64`/`u64`/`f32`/`f64`, every GASNet-EX operation fetching and not
//!   ([`AtomicOp`]), with [`AtomicFlags`] for acquire/release;
//! - borrowed buffers for nonblocking transfers only inside a
//!   [scope](gex_core::Endpoint::scope) ([`ScopeRmaExt`]);
//! - a non-waiting get for other layers' progress hooks ([`try_get_owned`]).
//!
//! Three data paths, chosen per operation by a pure function of the target, the size
//! and the conduit's capabilities (module `path`), with no dynamic dispatch:
//! **direct** when the conduit maps the target's segment locally (smp neighbours,
//! loopback, sim with shared memory) — a `memcpy`, complete on return, no event slot —
//! **native** for other peers when the conduit offers
//! [`NATIVE_RMA`](gex_core::Capabilities::NATIVE_RMA) (and NIC atomics for domains that
//! agreed on them), and the **AM reference** path otherwise (puts of up to 52 bytes in
//! the arguments of one Short AM, larger ones as acknowledged Long AMs, gets as Short
//! requests answered by Medium replies, many small VIS pieces packed into one Medium).
//! `--cfg gex_force_am_rma` (build) or `GEX_RMA_PATH=am` (job) forces the reference
//! path everywhere.
//!
//! ## Using it
//! Build the client with the layer (the `gex` facade does by default), then call the
//! operations on the endpoint:
//! ```
//! use gex_core::{boot::Singleton, loopback::Loopback, Blocking, ClientBuilder, Nb};
//! use gex_rma::{GlobalPtr, Rma, RmaExt};
//!
//! let client = ClientBuilder::new().layer::<Rma>().segment_size(1 << 16)
//!     .init::<Loopback>(Box::new(Singleton::new()))?;
//! let mut ep = client.endpoint(0)?;
//! let p = GlobalPtr::<u32>::new(ep.addr(), 64);
//! ep.put(p, &[1, 2, 3, 4], Blocking)?;
//! let ev = ep.get(vec![0u32; 4], p, Nb)?;
//! assert_eq!(ep.wait(ev)?, [1, 2, 3, 4]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## What it does not do
//! - No barrier: synchronisation between ranks is the collectives layer's (gex-coll).
//! - NIC atomics and native RMA only where the conduit offers them
//!   ([`ConduitEp::native_put`](gex_core::spi::ConduitEp::native_put),
//!   [`ConduitEp::native_atomic`](gex_core::spi::ConduitEp::native_atomic)).
//! - No ordering between nonblocking operations: two overlapping puts in flight at
//!   once land in an unspecified order; after a put completes (blocking return, event
//!   waited, or sync), its bytes are visible to later operations of any rank that
//!   synchronises with the initiator.
//! - The AM path needs the target to make progress: any gex call that polls or waits
//!   on it, or its progress thread (`ClientBuilder::progress_thread`,
//!   `GEX_PROGRESS_THREAD`).
//! - The AM path assumes Medium limits are symmetric between two peers.
//!
//! ## Words
//! - **global pointer** ([`GlobalPtr`]): (rank, endpoint, byte offset) into that
//!   endpoint's segment, typed by the element; every access is range-checked against
//!   the published segment length ([`RmaError::OutOfSegment`]).
//! - **modes**: blocking (complete on return), NB (an explicit event), NBI (an implicit
//!   event: counted per category, synced with [`RmaExt::sync_nbi`]).
//! - **LC** (local completion): the source buffer may be reused. A put from a `&[T]`
//!   reaches LC before it returns, in every mode: a blocking put is complete (its
//!   bytes are at the target); an `Nb` or `Nbi` put hands a native transfer a copy of
//!   the source (held until the network is done with it), and the AM path has copied
//!   every piece into its message by the time the call returns (it keeps injecting
//!   under back-pressure until the last one is sent). Only [`ScopeRmaExt::put_from`]
//!   lends its source for longer (no copy; the scope waits for it).
//!   **Remote completion** (bytes at the target) is what a blocking return, an event or
//!   a sync signals; NBI puts over a network are *relaxed*: complete locally at once,
//!   at their targets at the next [`sync_nbi`](RmaExt::sync_nbi) of puts, which flushes
//!   them.
//!
//! ## The lifetime rule
//! An operation that may write a local buffer after the call returns either owns it
//! (a get into a `Vec<T>`: the event holds it and gives it back; dropping or
//! `mem::forget`-ing the event keeps the buffer alive until the transfer is done with
//! it), or borrows it for a [scope](gex_core::Endpoint::scope) ([`ScopeRmaExt`]), which
//! waits for the transfer before the borrow ends. A borrowed destination with a
//! nonblocking mode outside a scope does not compile ([`GetDst`]). No operation is an
//! `unsafe fn`.
//!
//! ## Settings
//! [`ENV_VARS`]: `GEX_RMA_PATH` (`auto` | `am`).
#![warn(missing_docs)]

mod am;
mod aop;
mod atomic;
mod direct;
mod drive;
mod engine;
mod error;
mod ext;
mod job;
mod layer;
mod native;
mod nbi;
mod ops;
mod path;
mod ptr;
mod scope;
mod served;
mod state;
mod target;
mod vis;

pub use aop::{AtomicFlags, AtomicOp, AtomicOps, AtomicType};
pub use atomic::AtomicDomain;
pub use bytemuck::Pod;
pub use engine::{OwnedGet, try_get_owned};
pub use error::RmaError;
pub use ext::{BorrowedDstMode, GetDst, RmaExt, Source};
pub use nbi::NbiCategories;
pub use ptr::{GlobalPtr, Strided, Vis};
pub use scope::ScopeRmaExt;
pub use state::Rma;

/// The `GEX_*` settings of the RMA layer ([`Layer::ENV_VARS`](gex_core::layer::Layer::ENV_VARS)
/// of [`Rma`]), collected into the registry that `GEX_VERBOSEENV=1` and `gex-info env`
/// print.
pub const ENV_VARS: &[gex_core::config::EnvVar] = &[gex_core::config::EnvVar {
    name: "GEX_RMA_PATH",
    default: "auto",
    doc: "gex-rma: `auto` picks the direct, native or AM path per operation; `am` forces the AM reference path for every RMA operation and atomic of the job (as the build-time --cfg gex_force_am_rma).",
}];
