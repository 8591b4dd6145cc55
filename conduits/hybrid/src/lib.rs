//! # gex-conduit-hybrid
//!
//! A conduit composed of two others: a *near* conduit (shared memory) between the ranks
//! of one host and a *far* conduit (a network) between hosts, transparently to gex-core,
//! gex-rma and gex-coll. `Hybrid<Smp, Ofi>` is what the facade runs for
//! `GEX_CONDUIT=ofi`; a future ibverbs conduit gets hybrid jobs by implementing the far
//! half of the contract.
//!
//! ## The contract
//! `Hybrid<N, F>` is written against the hybrid items of gex-core's SPI only
//! ([`gex_core::spi::NearConduit`], [`gex_core::spi::FarConduit`],
//! [`gex_core::spi::FarEp`], [`gex_core::spi::SharedSegments`]; listed in
//! `docs/conduit-guide.md`, "Hybrid jobs"). It depends on no conduit: the facade names
//! the pair. Both parts are type parameters, so the data path is monomorphised.
//!
//! ## How it works
//! - **Mode.** A job is hybrid when it spans several hosts and some host has several
//!   ranks (`GEX_HYBRID=auto`, the default); `1` makes it hybrid whenever a host has
//!   several ranks (also on one host), `0` never (every peer through the far
//!   conduit). Before this crate the setting was `GEX_OFI_HYBRID`; the far conduit's
//!   `GEX_<FAR>_HYBRID` is still read when `GEX_HYBRID` is unset. Every rank must
//!   decide the same (checked with one bootstrap exchange at open).
//! - **Open.** The near conduit opens for the ranks of this host
//!   ([`NearConduit::open_near`](gex_core::spi::NearConduit::open_near)); the far
//!   conduit opens on the near endpoints' segments
//!   ([`FarConduit::open_far`](gex_core::spi::FarConduit::open_far)), which it makes
//!   reachable by its native RMA: one segment is both mapped by the neighbours and a
//!   network RMA target for other hosts. Not hybrid: the far conduit opens alone and
//!   every call goes to it.
//! - **AMs.** A request to a near rank goes to the near endpoint, any other to the far
//!   one; a request is answered by the part it came through. `limits(dst)` is the
//!   part's.
//! - **RMA.** `peer_segment`, `aux` and `wake` are the near part's (`SHARED_MEMORY`):
//!   gex-rma copies directly to neighbours and gex-coll runs its shared-memory
//!   barrier and channels in the aux areas; native RMA and atomics go to the far part for every peer, neighbours
//!   included (an atomic domain uses one implementation for all its peers).
//! - **Progress.** `poll` drains the near endpoint first. The far endpoint (for tcp a
//!   `poll(2)` per read) is read on every poll while it has operations in flight and
//!   right after a request to another host; otherwise at intervals that double after
//!   each fruitless read, up to [`FAR_POLL_MAX`] polls, and reset to 1 by a read that
//!   finds a completion. Shared-memory traffic between ranks whose network is idle
//!   thus pays a network progress pass only once every 256 polls.
//! - **Waiting.** One thread cannot sleep on the near part's futex and the far part's
//!   file descriptor at once: `block` naps on the near endpoint for at most [`NAP`]
//!   (a neighbour's message wakes it at once; a far message is seen at the next poll
//!   after the nap) and yields while the far endpoint has work only its progress
//!   completes. `BLOCKING_WAIT` is not set.
//! - **Not in place.** `NP_IN_PLACE` is not set (`prepare` answers `Bounce`): the flag
//!   would have to hold for every peer.
//! - **Observability.** [`Hybrid::is_hybrid`], [`Hybrid::shared_memory_peers`],
//!   [`Hybrid::reason`], [`Hybrid::stats`] (AMs per path), and the parts through
//!   [`Hybrid::near`] and [`Hybrid::far`].
//!
//! ## What it does not do
//! A combined sleep on both parts (the near doorbell would have to be a file
//! descriptor, at the cost of a system call per wake-up); negotiated payloads in place.
//!
//! ## Words
//! *Near rank*: a rank on this rank's host (this rank included), reached through the
//! near part in a hybrid job. *Far rank*: any other.

mod conduit;
mod ep;
mod mode;
mod schedule;
mod stats;

pub use conduit::Hybrid;

use gex_core::config::EnvVar;

/// The `GEX_*` settings of the hybrid conduit.
pub const ENV_VARS: &[EnvVar] = &[
    EnvVar {
        name: "GEX_HYBRID",
        default: "auto",
        doc: "hybrid conduit (GEX_CONDUIT=ofi runs one): shared memory between ranks of one host, the network between hosts. auto: when the job spans several hosts and a host has several ranks; 1: whenever a host has several ranks; 0: never (network only). Must agree on every rank.",
    },
    EnvVar {
        name: "GEX_OFI_HYBRID",
        default: "",
        doc: "Old name of GEX_HYBRID (from when hybrid jobs were the ofi conduit's), read when GEX_HYBRID is unset.",
    },
];
pub use ep::HybridEp;
pub use schedule::{FAR_POLL_MAX, NAP};
pub use stats::HybridStats;
