//! # gex-conduit-ofi
//!
//! The libfabric conduit: gex active messages over any libfabric provider that offers
//! reliable datagram endpoints (`FI_EP_RDM`) with `FI_MSG`, on one host or several.
//! Tested with `tcp;ofi_rxm` and `shm` (libfabric 1.17).
//!
//! ## How it works
//! - **Endpoints as communication domains.** Every gex endpoint opens its own libfabric
//!   domain, RDM endpoint, completion queue and address vector (`FI_THREAD_DOMAIN`), so
//!   threads that each drive their own gex endpoint share no libfabric object and no
//!   lock (seed 002). AMs may target any endpoint of any rank: every endpoint's address
//!   is in every endpoint's address vector.
//! - **Endpoints made at run time** (`Client::create_endpoint`,
//!   [`Capabilities::RUNTIME_ENDPOINTS`](gex_core::Capabilities), not with `shm` nor as
//!   the far part of a hybrid conduit) get the same: their own domain, CQ, AV and RDM
//!   endpoint, and their own segment registered in their domain (with the segments of the
//!   endpoints made at init: redundant registration). Peers find one on first contact,
//!   without a collective: a control message asks its rank's endpoint 0, whose `poll`
//!   answers from the rank's directory (so a rank's endpoint 0 must be polled for others
//!   to discover its endpoints made at run time); until the answer the request reports
//!   back-pressure, and an endpoint not created yet or closed is
//!   `ConduitError::NoEndpoint`. Endpoints of one rank of which one was made at run time
//!   talk through in-process rings. See docs/ofi.md, section 2d.
//! - **Addresses** (`fi_getname`) are exchanged through the bootstrap at open and
//!   inserted into each address vector; then every endpoint says hello to every other
//!   endpoint, so connections exist before the first AM and an unreachable peer is
//!   reported at initialisation. With the `shm` provider the names of this rank's
//!   shared-memory regions are unlinked then (every peer has mapped them), so nothing is
//!   left in /dev/shm even after `kill -9`.
//! - **AMs over `FI_MSG`.** One libfabric message per AM: a 16-byte header (handler,
//!   category, kind, argument count, source endpoint, returned credits, payload length;
//!   Long adds the destination offset), the arguments, the payload. Small messages go
//!   with `fi_inject`; others from registered bounce buffers with `fi_send`. Messages
//!   land in pre-posted receive buffers (multi-receive buffers when the provider offers
//!   `FI_MULTI_RECV`), are delivered in place, and the buffers are reposted.
//! - **Long** payloads travel inside the message and the receiver copies them into its
//!   segment before running the handler, so the largest Long payload is the largest
//!   Medium payload.
//! - **Native RMA over `FI_RMA`** ([`Capabilities::NATIVE_RMA`](gex_core::Capabilities))
//!   when the provider grants it: a put is one `fi_writemsg` with `FI_DELIVERY_COMPLETE`
//!   (complete = the bytes are at the target), a get one `fi_read`, into the target
//!   endpoint's segment as registered in its domain; completions arrive on the CQ with
//!   the AM completions and are collected by `poll`. Atomics go over `FI_ATOMIC`
//!   ([`Capabilities::NATIVE_ATOMICS`](gex_core::Capabilities)) where the provider
//!   validates them. `GEX_OFI_RMA=0` turns both off; [`Ofi::stats`] counts native
//!   operations.
//! - **Flow control.** Each ordered endpoint pair has a window of request credits
//!   (`GEX_OFI_CREDITS`); a request without a credit, or one the provider refuses with
//!   `-FI_EAGAIN`, reports `WouldBlock`. Credits come back on replies, on any message
//!   toward the requester, or on a credit-only message. **Replies never block**: one
//!   that cannot leave at once is queued and sent from `poll`, and it holds back its
//!   request's credit, so the queue is bounded by the window.
//! - **Progress** happens in `poll`: it drains the completion queue (send completions
//!   free bounce buffers; receive completions deliver), sends queued replies and owed
//!   credits. When the wait policy may block, the completion queue gets a wait object
//!   and `block` sleeps in `fi_cq_sread` (`BLOCKING_WAIT`).
//! - **Memory registration** honours the provider's `mr_mode`: `FI_MR_LOCAL` (bounce
//!   and receive buffers are registered and their descriptors passed), `FI_MR_ENDPOINT`
//!   (regions bound to the endpoint and enabled), `FI_MR_PROV_KEY` (keys read back),
//!   `FI_MR_VIRT_ADDR` (published addresses are virtual or offsets). When the provider
//!   offers `FI_RMA`, every segment of a rank is registered in every endpoint's domain
//!   (redundant registration) and keys are exchanged for native RMA. Under
//!   `FI_MR_LOCAL` a local RMA buffer outside the segments gets its descriptor from the
//!   endpoint's registration cache: a client region's registration
//!   ([`Ofi::register`], a [`MemRegion`] that owns the buffer, registered per
//!   endpoint at first use and kept within `GEX_OFI_MR_CACHE_ENTRIES` /
//!   `GEX_OFI_MR_CACHE_BYTES`), else one made for the operation and closed at its
//!   completion. A registration is only ever used while its memory provably keeps its
//!   pages (the module `mr` explains why no memory monitor is needed);
//!   `GEX_OFI_MR_LOCAL=1` makes the conduit act so on providers that do not require it.
//! - **Hybrid jobs** are gex-conduit-hybrid's: `GEX_CONDUIT=ofi` runs `Hybrid<Smp, Ofi>`,
//!   in which the ranks of one host talk through the smp conduit's shared memory and
//!   this conduit carries the traffic between hosts. For that it implements the far
//!   half of the hybrid contract ([`gex_core::spi::FarConduit`],
//!   [`gex_core::spi::FarEp`]): opened on the smp endpoints' segments, it registers
//!   them like its own, so native RMA from other hosts lands in memory the neighbours
//!   map; it opens no CQ wait object (the hybrid conduit naps on the near part), and
//!   tells the hybrid conduit when network operations are in flight, so it can read
//!   the CQ on every poll then and at doubling intervals otherwise. This crate depends
//!   on no other conduit.
//! - **Degradation.** A provider lacking `FI_RMA`, `FI_MULTI_RECV`, send-after-send
//!   ordering or a CQ wait object is still used, with the reference path for what it
//!   lacks; [`OfiReport`] (from [`Ofi::report`]) says which path each operation uses
//!   and why.
//!
//! ## Configuration
//! `GEX_OFI_PROVIDER` (default `tcp`, i.e. `tcp;ofi_rxm`; `auto` leaves the choice to
//! libfabric and its `FI_PROVIDER`), `GEX_OFI_DOMAIN`, `GEX_OFI_MAX_MEDIUM` (default
//! 8 KiB), `GEX_OFI_CREDITS` (default 64), `GEX_OFI_MULTI_RECV` (default 1),
//! `GEX_OFI_RMA` (default 1), `GEX_OFI_ATOMICS` (default 1), `GEX_OFI_RELAXED_PUTS`
//! (default 1), `GEX_OFI_MR_LOCAL` (default 0, a testing aid),
//! `GEX_OFI_MR_CACHE_ENTRIES` (default 256), `GEX_OFI_MR_CACHE_BYTES` (default 1G);
//! hybrid jobs: `GEX_HYBRID` (the hybrid conduit's; `GEX_OFI_HYBRID` is its old name).
//! See `docs/ofi.md` and `docs/env.md`.
//!
//! ## Errors and faults
//! A provider that does not exist or cannot be opened, a registration that fails, a
//! peer that cannot be reached at wire-up: `open` fails with an `InitError` naming the
//! provider and the failing libfabric call (e.g. `conduit ofi: fi_getinfo(provider=verbs,
//! FI_EP_RDM, FI_MSG): No data available ...`). A network failure after open (an error
//! completion: a peer that went away mid-transfer) makes `inject` and replies return
//! `AmError::Conduit`, and `poll`, which cannot return an error, panics with the same
//! text: the rank ends and the launcher ends the job, rather than hanging.
//!
//! ## What it does not do (yet)
//! Long payloads larger than a Medium.

//!
//! ## Cargo features
//! `fuzz` (off): the hidden `fuzz_api` module, through which `benches/gex-fuzz` reaches
//! the decoders of message headers and of the address blob. Not API: only gex-fuzz
//! enables it.
//!
//! ## Source map
//! | module | what it does |
//! |---|---|
//! | `config` | `GEX_OFI_*` settings, defaults, fixed resource sizes |
//! | `select` | provider selection (`fi_getinfo`, degradation), relaxed-put eligibility |
//! | `open` | `Conduit::open` as named steps: objects, registrations, address exchange |
//! | `wireup` | hellos between every pair of endpoints at the end of `open`; `shm` names unlinked |
//! | `runtime` | endpoints made at run time: opening, the rank's directory, discovery on first contact, closing notices |
//! | `conduit` | the conduit object [`Ofi`] and its `Conduit` implementation |
//! | `ep` | the endpoint [`OfiEp`] and its `ConduitEp` implementation |
//! | `tx` | sends, request credits, queued replies, liveness probes |
//! | `rx` | receive buffers, decoding, Long placement, delivery |
//! | `rma` | native RMA and atomics: slots, puts, gets, flushes, atomics, tickets |
//! | `progress` | `poll`, injection over libfabric, `block` |
//! | `close` | graves of dropped endpoints, served until the final barrier |
//! | `stats`, `report` | counters ([`OfiStats`]) and the path report ([`OfiReport`]) |
//! | `mem`, `mr`, `fabric`, `wire` | buffers, registration cache, libfabric wrappers, wire format |

mod close;
mod conduit;
mod config;
mod ep;
mod fabric;
#[cfg(feature = "fuzz")]
#[doc(hidden)]
pub mod fuzz_api;
mod mem;
mod mr;
mod open;
mod progress;
mod report;
mod rma;
mod runtime;
mod rx;
mod select;
mod stats;
#[cfg(test)]
mod test_hooks;
mod tx;
mod wire;
mod wireup;

pub use conduit::Ofi;
pub use config::{DEFAULT_CREDITS, DEFAULT_MAX_MEDIUM, DEFAULT_PROVIDER, ENV_VARS};
pub use ep::OfiEp;
pub use mr::{DEFAULT_MR_CACHE_BYTES, DEFAULT_MR_CACHE_ENTRIES, MemRegion};
pub use report::{OfiReport, PathChoice};
pub use stats::OfiStats;
