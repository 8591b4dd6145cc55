//! # gex-msg
//!
//! Two-sided tagged messaging for gex, MPI style, as a [layer](gex_core::layer)
//! composed into every endpoint of a client: [`MsgExt`] offers send/recv,
//! isend/irecv (events), ssend/issend (synchronous: complete once matched),
//! rsend (ready mode), persistent requests, probe/iprobe and sendrecv, with any-source and any-tag wildcards and MPI's
//! non-overtaking order per (source, tag, context).
//!
//! ```
//! use gex_core::{boot::Singleton, loopback::Loopback, ClientBuilder};
//! use gex_msg::{Comm, Msg, MsgExt};
//!
//! let client = ClientBuilder::new().layer::<Msg>()
//!     .init::<Loopback>(Box::new(Singleton::new()))?;
//! let mut ep = client.endpoint(0)?;
//! let me = ep.addr().rank;
//! let big = vec![7u8; 100_000]; // above the eager threshold: rendezvous
//! let ev = ep.isend(Comm::WORLD, me, 1, &big)?;
//! let got = ep.irecv(Comm::WORLD, Some(me), Some(1), vec![0; 1 << 17])?;
//! let got = ep.wait(got)?;
//! ep.wait(ev)?;
//! assert_eq!(got.data, big);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Protocols
//! - **Eager** (messages up to `GEX_MSG_EAGER_MAX` bytes, default 8 KiB, and never
//!   more than the conduit's Medium limit toward the peer): one Medium AM carrying the
//!   envelope and the bytes. The send is complete once the AM is injected (the
//!   conduit has copied it). At the receiver, a message that finds a posted receive is
//!   copied from the network's buffer straight into it; otherwise its bytes are copied
//!   into the **unexpected queue** (the one allocation of the receive path) until a
//!   receive takes them.
//! - **Nonblocking eager** (an `isend` of up to `GEX_MSG_NB_EAGER_MAX` bytes, default
//!   64 KiB, to another process of the same host): eager as above if the conduit
//!   takes the message at once, the rendezvous otherwise. Such a send copies the
//!   caller's bytes anyway; two copies through the ring cost less than the
//!   rendezvous's copy plus a CMA read by the receiver.
//! - **Rendezvous** (larger messages): the sender copies the bytes into a buffer of
//!   the layer and sends a request to send (RTS, a Short AM with size and tag); when a
//!   receive matches it, the receiver answers clear-to-send (CTS) naming its receive,
//!   and the sender streams the bytes as Medium AMs straight into the receive buffer.
//!   A standard send is complete once the layer has its copy (it never waits for the
//!   receiver, so two ranks sending each other large messages before receiving do not
//!   deadlock); unexpected large messages cost the receiver no memory. Its bytes move
//!   while the sender's endpoint is polled (any call that polls or waits on it, or its
//!   progress thread; [`Msg::sends_in_flight`] counts what is left). Chosen over a
//!   pull with gex-rma (sender stages into its segment, receiver gets): the segment belongs to
//!   the program, and the layer would need an allocator in it and a free protocol; the
//!   chunked path works on every conduit, has flow control built in (only matched
//!   data moves), and needs no other layer.
//! - **Single-copy rendezvous** (larger messages to a thread rank of the same process,
//!   or to a process of the same host when CMA is allowed; `GEX_MSG_SINGLE_COPY`,
//!   default on): the same RTS names the sender's buffer by a key; the receiver, once
//!   a receive matched it, copies the message itself from the sender's buffer and
//!   answers `DONE` (one round trip, no chunks). Between thread ranks the key is an id
//!   in a process-wide registry of lent buffers, checked against the lender,
//!   destination and length (a lying peer cannot make the receiver read anything else);
//!   between processes it is an address read with `process_vm_readv` (a bad one is an
//!   error of the kernel, never UB). Whenever the receiver cannot (a refused key, CMA
//!   refused), it answers CTS and the chunks come. docs/msg.md says why it is sound.
//! - **Cooperative single copy** (a blocking standard [`send`](MsgExt::send) of a
//!   rendezvous message to a process of the same host, with CMA): the send lends the
//!   caller's slice instead of copying it, and while the receiver copies chunks of it
//!   with `process_vm_readv`, the sender (waiting in its call anyway) writes other
//!   chunks into the receiver's buffer with `process_vm_writev`: on two cores, half
//!   the time of one copy ([`coop`]). The loan ends, and the call returns, when every
//!   chunk is copied, or it is withdrawn into a copy of the layer's if no receiver
//!   claimed it within the send's budget (a receiver that comes later asks where the
//!   copy is and reads it with CMA).
//! - **Synchronous** sends ([`MsgExt::ssend`]): an eager message carries a flag and
//!   the receiver acknowledges the match; a rendezvous send is matched when its CTS
//!   or `DONE` comes. Ready sends ([`MsgExt::rsend`]) are standard sends.
//! - **Near path** (standard sends of up to [`near::PAYLOAD_MAX`] = 104 bytes to a
//!   rank of the same host whose auxiliary area the conduit maps): a slot of the pair's
//!   single-producer single-consumer queue in the receiver's auxiliary area ([`near`]),
//!   probed by the receives that can match it (enqueue-and-probe); a blocking receive
//!   copies from the slot straight into its buffer. A full queue sends by AM; both
//!   paths share the pair's sequence numbers, so order holds across them.
//!
//! A send tries the near path first (small standard sends to a same-host rank), then
//! eager, then the rendezvous (whose single copy is offered to same-host ranks);
//! the receiver takes whatever comes by any of them.
//!
//! ## Matching
//! The matching engine ([`engine`]) is protocol logic without I/O: posted receives
//! and unexpected messages in per-source queues plus an any-source queue, with post
//! and arrival numbers that keep MPI's order between wildcard and specific receives.
//! Senders number their messages per destination, and the receiver restores that
//! order ([`engine::Reorder`]) before matching, so conduits that reorder (the
//! simulated fabric with reordering) still give MPI order. No locks: the engine is the
//! endpoint's layer state, driven by one thread (an endpoint is `Send`, not `Sync`).
//!
//! ## The lifetime rule
//! No operation lends a caller's buffer to the network beyond the call: sends copy
//! (near path: into the queue's slot; eager: into the AM; rendezvous: into the
//! layer's buffer, which the layer owns until the receiver is done with it); a
//! nonblocking receive takes an owned `Vec<u8>` which its event gives back, so dropping or forgetting the
//! event is harmless; the blocking [`recv`](MsgExt::recv) into `&mut [u8]` waits for a
//! matching message and copies it straight into the slice (a near-path one from the
//! queue's slot, an eager one from the unexpected queue, or from the network's buffer
//! if it comes while the call waits, a single-copy rendezvous one
//! from the sender's buffer), or receives chunks into a buffer of its own and copies
//! when the receive is complete.
//! The one exception, within the call: a blocking [`send`](MsgExt::send) of a rendezvous
//! message to a thread rank of the same process, or to a process of the same host,
//! lends the caller's slice to the receiver for the duration of the call (the receiver
//! copies straight from it, the only copy; a process receiver with the sender's help,
//! module [`coop`]), and does not return, or unwind, while the receiver reads it; if no
//! receiver took it within a short wait it is withdrawn into a copy of the layer's
//! (modules `direct` and [`coop`]). The other exception: while a blocking
//! [`recv`](MsgExt::recv) waits with nothing queued that it matches, the handler of the
//! first eager message it matches copies the message straight into the caller's slice
//! (module `landing`; the receive takes the landing back before it returns, or
//! unwinds). The crate's `unsafe` is the thread loan's read, the
//! sender's `process_vm_writev` into the receiver's published buffer (module `direct`),
//! the landing's copy (module `landing`) and the view of the auxiliary areas as atomic
//! words (module `area`); all are in docs/soundness.md's ledger.
//!
//! ## What it does not do (yet)
//! - Buffered mode, cancel, matched probe (`mprobe`).
//! - Teams: ranks are world ranks; a [`Comm`] is only a context id.
//! - Lock-free matching inside one endpoint: each endpoint's engine is driven by the
//!   thread that drives the endpoint (threads that message concurrently use endpoints
//!   of their own); what is lock-free is the near path between ranks.
//! - A sender that lends the caller's buffer beyond a blocking send (nonblocking sends
//!   copy at the sender).
//!
//! ## Words
//! - **envelope**: (source, tag, context) of a message.
//! - **unexpected message**: one that arrived before a receive matched it.
//! - **truncation**: a matched message longer than the receive buffer:
//!   [`MsgError::Truncated`], the message is consumed.
//!
//! ## Settings
//! [`ENV_VARS`]: `GEX_MSG_EAGER_MAX`, `GEX_MSG_NB_EAGER_MAX`, `GEX_MSG_SINGLE_COPY`,
//! `GEX_MSG_LEND_WAIT`, `GEX_MSG_NEAR`.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod area;
pub mod coop;
mod direct;
pub mod engine;
mod error;
mod ext;
mod landing;
mod layer;
pub mod near;
mod pair;
mod stage;

pub use error::MsgError;
pub use ext::{Comm, MsgExt, PersistentRecv, PersistentSend, Received, TAG_MAX};
pub use layer::{Msg, MsgStats, Status};

use gex_core::config::EnvVar;

/// The `GEX_*` settings of the messaging layer ([`Layer::ENV_VARS`](gex_core::layer::Layer::ENV_VARS)
/// of [`Msg`]), collected into the registry that `GEX_VERBOSEENV=1` and `gex-info env`
/// print.
pub const ENV_VARS: &[EnvVar] = &[
    EnvVar {
        name: "GEX_MSG_EAGER_MAX",
        default: "8192",
        doc: "gex-msg: largest message (bytes) sent eagerly in one Medium AM (also bounded by the conduit's Medium limit toward the peer); larger messages use the rendezvous protocol (request to send, then a single copy by the receiver or chunks).",
    },
    EnvVar {
        name: "GEX_MSG_NB_EAGER_MAX",
        default: "65536",
        doc: "gex-msg: largest message (bytes) a nonblocking standard send (isend, a started persistent send) to another process of the same host sends eagerly when the conduit takes it at once (otherwise it goes by rendezvous); a value at or below GEX_MSG_EAGER_MAX changes nothing. Such sends must copy the caller's bytes anyway, and two copies through the AM ring cost less than the rendezvous's copy plus the receiver's CMA read.",
    },
    EnvVar {
        name: "GEX_MSG_SINGLE_COPY",
        default: "1",
        doc: "gex-msg: 1 lets the receiver of a rendezvous message copy it straight from the sender's buffer when the sender is a thread rank of its process or (with CMA, process_vm_readv) a process of its host; 0 always streams chunks as Medium AMs (as between hosts).",
    },
    EnvVar {
        name: "GEX_MSG_LEND_WAIT",
        default: "20",
        doc: "gex-msg: microseconds a blocking send of a rendezvous message to a thread rank of its process or a process of its host lends the caller's buffer to a receiver that has not taken it yet (plus about the time a copy of the message takes), before it copies the message and returns.",
    },
    EnvVar {
        name: "GEX_MSG_NEAR",
        default: "1",
        doc: "gex-msg: send small standard messages (up to 104 bytes) to same-host ranks through per-pair queues in the receiver's auxiliary area (the near path); 0 sends everything by AM (receivers still take what the queues hold, so ranks may differ).",
    },
];
