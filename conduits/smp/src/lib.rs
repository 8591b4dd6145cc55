//! # gex-conduit-smp
//!
//! The shared-memory conduit: every rank of the job is a process on one host.
//!
//! ## How it works
//! - **Memory.** Each rank creates one anonymous `memfd` region holding its endpoints'
//!   doorbells, their incoming AM rings and their segments. Peers map it by opening
//!   `/proc/<pid>/fd/<fd>` during initialisation, so every rank's segment is mapped into
//!   every rank (a Long AM, and later RMA, to a neighbour is one copy). A memfd has no
//!   name: nothing is ever created in `/dev/shm`, so nothing can be left there, not even
//!   after `kill -9`; the memory goes away with the last mapping. The region is created
//!   with mode 0600 and the descriptor is closed as soon as every rank has mapped it.
//! - **Rings.** For every ordered pair (sender EP, receiver EP) there is a request ring
//!   and a reply ring ([`gex_sync::ring`]): single-producer single-consumer, lock-free,
//!   head on its own cache line, and polled through the record tag itself so a message
//!   costs the receiver one cache miss. A Medium payload is copied once into the ring and
//!   handed to the handler in place (one copy in, none out).
//! - **Waking.** Each endpoint has a [`gex_sync::wait::Doorbell`]. A sender rings it after
//!   publishing; that is one relaxed load unless the receiver may sleep (wait policy
//!   `block`/`spin-then-block`, chosen automatically when ranks outnumber cores).
//! - **Replies never block.** If a reply ring is full the reply is queued locally and
//!   requests from that peer are not drained until it has been delivered, which bounds the
//!   queue to one reply per peer and rules out request/reply deadlock.
//! - **Requests may wait at the sender before they push back** (`GEX_SMP_OVERFLOW`, off
//!   by default). With a budget of bytes, a request whose ring is full is encoded into a
//!   queue of the sender's, per destination endpoint (allocated only when used), and the
//!   injection succeeds; later requests to that destination queue behind it (order per
//!   pair is kept), and every `poll` and injection moves what the ring takes. Only a
//!   full queue reports back-pressure. Measured with more ranks than cores, it raises
//!   the AM storm's rate but makes each remaining back-pressure wait longer, and it
//!   slows 2 ranks (docs/performance.md): hence off by default. The requests move with
//!   the sender's calls: an endpoint that holds some keeps polling instead of sleeping,
//!   and dropping it waits (at most 2 s, then says what was left) until they are handed
//!   over (`ConduitEp::has_outgoing`; deferred replies too).
//!
//! - **Peers are checked, not trusted.** Before a peer's region is used, the conduit
//!   checks that the bootstrap returned one descriptor per rank, that the object it
//!   opened through `/proc` really is as long as the descriptor says, and that its
//!   header agrees with the job layout: the rank, the endpoint counts, the segment
//!   length (every Long and RMA range to that rank is validated against the layout,
//!   then written through this mapping), the auxiliary area length, a valid ring size,
//!   and a region length that matches. Any disagreement fails `open` with an error
//!   naming the rank and the field. Mediums to a neighbour are bounded by what its
//!   rings hold (its header's ring size).
//!
//! - **Liveness.** Every rank watches its neighbours through pidfds and, while it waits
//!   inside gex, notices within about 0.1 s that one has ended (even by `kill -9`),
//!   without the launcher's help: it then ends with a message naming the neighbour's
//!   rank and pid. The message path pays one counter addition per poll; the coarse
//!   clock is read after 4 empty polls, and the check (one `poll(2)` over the pidfds)
//!   runs at most every 100 ms.
//!
//! - **Endpoints made at run time** (`Client::create_endpoint`). Each rank's region
//!   reserves room for its endpoint capacity (`GEX_MAX_ENDPOINTS`, default 16, the
//!   endpoints made at init included): doorbell, auxiliary area, incoming rings from
//!   every slot of the host, and segment per slot, plus a slot table (a state word and
//!   a contacts word per slot). The region is a sparse `memfd`: the slots never used
//!   cost address space only, no memory (the rings of an endpoint made at init towards
//!   every slot of the host are initialised at open: two pages per host slot). The
//!   address space of a region is about `slots × (segment + 2 × host slots × ring size)`,
//!   and every rank of the host maps every region: lower `GEX_MAX_ENDPOINTS` for many
//!   ranks per host with large segments. A slot is
//!   initialised by its owner when it creates the endpoint and published `OPEN`
//!   (`Release`), with no collective; a peer's endpoint reads the state (`Acquire`) on
//!   its first send to it, so a send to a slot not created yet, or closed (the endpoint
//!   was dropped; indices are never reused), is `ConduitError::NoEndpoint`, never a hang.
//!   Each endpoint polls only its own rings (the AM poll mask): those from the
//!   endpoints made at init, and those from endpoints made at run time once they
//!   announce their first contact by bumping its contacts word (one load of a local word
//!   per poll otherwise).
//!
//! - **Thread ranks.** The ranks may also be threads of one process
//!   (`gex_boot::threads`), or mix: every rank creates its own region and maps every
//!   rank's region, its own process's included, so nothing changes on the data path.
//!   A neighbour of the same process is not watched through a pidfd (its process is
//!   this one); a thread rank that panics is reported by the thread launcher. The job
//!   layout says which ranks share a process (`JobLayout::same_process`).
//!
//! ## What it does not do
//! Ranks on several hosts (use a network conduit). Thread ranks of one process still
//! map each other's regions once per rank (no shared mapping per process yet).
//! In a job that spans several hosts, this conduit serves the ranks of each host as the
//! near part of gex-conduit-hybrid's `Hybrid<Smp, Far>` (it implements
//! [`NearConduit`](gex_core::spi::NearConduit)), and a network conduit the hosts.
//!
//! ## Configuration
//! `GEX_SMP_RING_SIZE` (bytes per ring, power of two, default 256 KiB),
//! `GEX_SMP_MAX_MEDIUM` (default 64 KiB) and `GEX_SMP_OVERFLOW` (bytes of requests kept
//! per destination when its ring is full, default 0: none); see `docs/env.md`.
//!
//! ## Cargo features
//! `fuzz` (off): the hidden `fuzz_api` module, through which `benches/gex-fuzz` reaches
//! the decoders of ring records and region headers. Not API: only gex-fuzz enables it.

mod live;
mod record;
mod region;
mod smp;

#[cfg(feature = "fuzz")]
#[doc(hidden)]
pub mod fuzz_api;

pub use smp::{DEFAULT_MAX_MEDIUM, DEFAULT_OVERFLOW, DEFAULT_RING_SIZE, ENV_VARS, Smp, SmpEp};
