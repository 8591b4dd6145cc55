//! # gex-rma
//!
//! The extended API of gex: one-sided remote memory access (RMA) into the segments of
//! endpoints, generic over the conduit SPI.
//!
//! - put/get: blocking ([`RmaEp::put`], [`RmaEp::get`], [`RmaEp::put_val`],
//!   [`RmaEp::get_val`], [`RmaEp::memset`]), nonblocking with explicit events
//!   ([`RmaEp::put_nb`], [`RmaEp::get_nb`], ...) and with implicit events
//!   ([`RmaEp::put_nbi`], [`RmaEp::wait_syncnbi_puts`], access regions);
//! - VIS: strided (signed strides, any number of dimensions), vector and indexed
//!   transfers ([`Vis`], [`RmaEp::put_strided`], [`RmaEp::get_vis_nb`], ...);
//! - remote atomics: [`AtomicDomain`]s over (primordial team, type, op set) for
//!   `i32`/`u32`/`i64`/`u64`/`f32`/`f64`, every GASNet-EX operation fetching and not
//!   ([`AtomicOp`]), blocking, NB ([`FetchEvent`]) and NBI
//!   ([`RmaEp::wait_syncnbi_atomics`]), with [`AtomicFlags`] for acquire/release. CPU
//!   atomics through the mapping for neighbours, AMs executing the same CPU atomics at
//!   the target otherwise (the two are coherent);
//! - a barrier on the primordial team ([`RmaEp::barrier`], [`RmaEp::barrier_nb`],
//!   split-phase [`RmaEp::barrier_notify`] / [`RmaEp::barrier_wait`] /
//!   [`RmaEp::barrier_try`] with ids, [`BarrierFlags::ANONYMOUS`] entries and
//!   [`RmaError::BarrierMismatch`] reported on every rank): a dissemination barrier over
//!   gex-rma AMs whose rounds advance inside gex-rma's waiting and testing calls.
//!
//! Three data paths, chosen per operation with no dynamic dispatch: **direct** when the
//! conduit maps the target's segment locally ([`ConduitEp::peer_segment`]: smp
//! neighbours, loopback, sim with shared memory) — a `memcpy`, complete on return —
//! **native** for other peers when the conduit offers
//! [`NATIVE_RMA`](gex_core::Capabilities::NATIVE_RMA) ([`ConduitEp::native_put`],
//! [`ConduitEp::native_get`]), and the **AM reference** path otherwise (puts of up to 48
//! bytes in the arguments of one Short AM, larger ones as acknowledged Long AMs, gets as Short
//! requests answered by Medium replies, many small VIS pieces packed into one Medium).
//! Building with `--cfg gex_force_am_rma` forces the reference path everywhere.
//!
//! ## What it does not do
//! - The barrier progresses only inside gex-rma calls that wait or test (and
//!   [`RmaEp::barrier_try`]); a rank that notified and then only calls
//!   [`Endpoint::poll`](gex_core::Endpoint::poll) delays its peers. `RmaEp::barrier`
//!   shadows [`Endpoint::barrier`](gex_core::Endpoint::barrier) (the core one is still
//!   reachable through [`RmaEp::endpoint`]); the two are independent.
//! - NIC atomics and native RMA only where the conduit offers them
//!   ([`ConduitEp::native_put`], [`ConduitEp::native_atomic`]); a domain uses NIC
//!   atomics only if the conduit offers its whole op set (see [`AtomicDomain`]).
//! - No ordering between nonblocking operations: two overlapping puts in flight at
//!   once land in an unspecified order; after a put completes (blocking return, event
//!   waited, or sync), its bytes are visible to later operations of any rank that
//!   synchronises with the initiator.
//! - No progress thread: the AM path needs the target to poll (any waiting gex call).
//! - The AM path assumes Medium limits are symmetric between two peers (a get is
//!   chunked by the initiator's `max_medium` toward the target and answered with
//!   replies of that size).
//!
//! ## Words
//! - **global pointer** ([`GlobalPtr`]): (rank, endpoint, byte offset) into that
//!   endpoint's segment, typed by the element; every access is range-checked against
//!   the published segment length ([`RmaError::OutOfSegment`]).
//! - **NB** (nonblocking, explicit event): returns an [`Event`] (or [`GetEvent`],
//!   [`PutEvent`]) to test or wait.
//! - **NBI** (implicit event): completion is tracked per endpoint and awaited by
//!   category (`wait_syncnbi_puts/gets/all`) or through an **access region**
//!   ([`RmaEp::begin_nbi_accessregion`]) that gathers the NBI operations issued inside
//!   it into one event.
//! - **LC** (local completion): the source buffer may be reused. Every put here reaches
//!   LC before it returns; remote completion (data visible at the target) is what
//!   events signal.
//!
//! ## The lifetime rule
//! An operation that may still write a local buffer after the call returns either owns
//! it (NB gets take a `Vec` and `wait` returns it; dropping or `mem::forget`-ing the
//! event leaks the buffer instead of freeing memory that data may still reach), or is
//! an `unsafe fn` whose `# Safety` section makes the caller keep the buffer alive and
//! untouched until completion (`get_nb_raw`, `get_nbi`, `get_vis_nbi`).
//!
//! ## Handler indices
//! gex-rma registers its handlers at `16..=24` (23: atomics, 24: barrier) and `30..=31`
//! (small puts in arguments) and owns `16..=47`
//! ([`FIRST_RMA_HANDLER`]..=[`LAST_RMA_HANDLER`]); `48..=127` are reserved for gex-coll.
//!
//! ## Example
//! ```
//! use gex_core::{boot::Singleton, loopback::Loopback, ClientBuilder};
//! use gex_rma::{RmaEp, Strided};
//!
//! let client = ClientBuilder::new().segment_size(1 << 16).init::<Loopback>(Box::new(Singleton::new()))?;
//! let mut rma = RmaEp::new(client.endpoint(0)?)?;
//! let me = rma.addr();
//! let p = rma.global_ptr::<u32>(me, 64);
//!
//! rma.put(p, &[1, 2, 3, 4])?;
//! let mut back = [0u32; 4];
//! rma.get(&mut back, p)?;
//! assert_eq!(back, [1, 2, 3, 4]);
//!
//! // Nonblocking get into an owned buffer.
//! let ev = rma.get_nb(vec![0u32; 2], p.add(2))?;
//! assert_eq!(rma.wait(ev), vec![3, 4]);
//!
//! // A reflection: read the four values backwards.
//! let mut rev = [0u32; 4];
//! rma.get_strided(&mut rev, p.add(3), Strided {
//!     counts: &[4], remote_strides: &[-1], local_start: 0, local_strides: &[1],
//! })?;
//! assert_eq!(rev, [4, 3, 2, 1]);
//!
//! // A split-phase barrier with an id (one rank here).
//! rma.barrier_notify(7, gex_rma::BarrierFlags::empty())?;
//! rma.barrier_wait(7, gex_rma::BarrierFlags::empty())?;
//!
//! // Out-of-segment accesses are errors, never stray writes.
//! assert!(rma.put_val(rma.global_ptr::<u64>(me, (1 << 16) - 4), 7).is_err());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![warn(missing_docs)]

mod atomic;
mod barrier;
mod ep;
mod error;
mod event;
mod ptr;
mod shmbar;

pub use atomic::{AtomicDomain, AtomicFlags, AtomicOp, AtomicOps, AtomicType};
pub use barrier::BarrierFlags;
pub use bytemuck::Pod;
pub use ep::{FIRST_RMA_HANDLER, LAST_RMA_HANDLER, RmaEp};
pub use error::RmaError;
pub use event::{Completion, Event, FetchEvent, GetEvent, PutEvent};
pub use ptr::{GlobalPtr, Strided, Vis};

#[cfg(doc)]
use gex_core::spi::ConduitEp;
