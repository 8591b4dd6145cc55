//! # gex-conduit-ibv
//!
//! The ibverbs conduit: gex active messages, RMA and atomics over InfiniBand or RoCE
//! reliable-connected (RC) queue pairs, and over a software RC emulation where there is
//! no RDMA device. See docs/ibv.md.
//!
//! ## How it works
//! - **One narrow verbs interface** ([`verbs::Verbs`]): every verbs call goes through
//!   it, with two providers, libibverbs through `rdma-sys` (cargo feature `verbs`) and
//!   the emulation ([`emu::EmuVerbs`], `GEX_IBV_PROVIDER=emu`), which works across the
//!   processes of one host.
//! - **Endpoints**: each gex endpoint opens its own device context, protection domain,
//!   completion queue (with a completion channel for blocking waits), shared receive
//!   queue, a UD queue pair (the connection channel) and one RC queue pair per peer
//!   endpoint it talks with; its segment is registered once for remote read, write and
//!   atomics.
//! - **Wire-up**: segment and credit-word keys and the UD queue pair's address are
//!   exchanged through the bootstrap at open and checked against the job layout. The
//!   RC queue pair to a peer endpoint is made on first contact (`GEX_IBV_CONNECT=lazy`,
//!   the default): CONNECT, ACCEPT and READY datagrams over UD, served by a thread per
//!   endpoint (a target that never polls is still connected), retransmitted on a
//!   timer, with simultaneous connects resolved by endpoint order and a bounded wait
//!   (`GEX_IBV_CONNECT_TIMEOUT`); or all at open (`eager`: every RC queue pair's
//!   address exchanged and connected before a barrier).
//! - **AMs over SEND/RECV**: one SEND per AM (a 16-byte header, the arguments, a Medium
//!   payload), inline when it fits in 128 bytes, else from a registered send buffer;
//!   receives come from the shared receive queue and are delivered in place, then
//!   reposted. **Long** payloads are an RDMA WRITE into the target segment followed by
//!   the SEND of the header on the same queue pair (RC order: the bytes are there
//!   before the handler runs).
//! - **Flow control**: per ordered endpoint pair a window of request credits and one of
//!   reply credits (`GEX_IBV_CREDITS`); the receiver returns credits by RDMA WRITE of a
//!   cumulative count into the sender's credit words (no receive buffer used). A request
//!   without a credit reports `WouldBlock`; a reply without one is queued and sent from
//!   `poll`, holding back its request's credit, so the queue is bounded by the window.
//! - **Native RMA and atomics**: puts and gets of up to 64 KiB are one RDMA WRITE or
//!   READ through a registered bounce buffer; larger ones use the caller's buffer,
//!   registered per transfer, or cached when the application registered it
//!   ([`Ibv::register`]: the guard borrows the buffer, so a registration is never
//!   served for freed memory); 64-bit fetch-add and compare-swap (and
//!   the operations built on them: add, sub, inc, dec, get) are NIC atomics through
//!   gex-rma's native-atomics hook.
//! - **Errors**: an error completion (retry exceeded, remote access error, RNR retry
//!   exceeded, flushed) ends the rank with a message naming the peer endpoint (`poll`
//!   cannot return an error), and later sends to that peer answer
//!   [`ConduitError::PeerGone`](gex_core::spi::ConduitError).
//!
//! ## What it does not do (yet)
//! There are no endpoints made at run time, and real devices have not been tested
//! (docs/ibv.md, section 7).
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod conduit;
mod connect;
pub mod emu;
mod ep;
mod mem;
#[cfg(feature = "verbs")]
mod real;
pub mod verbs;
mod wire;

pub use conduit::{ENV_VARS, Ibv, IbvEp, IbvStats, Provider, Registered, probe};

/// The RDMA devices libibverbs sees (`ibv_get_device_list`), with their ports; an empty
/// list when there is none.
///
/// # Errors
/// [`verbs::VerbsError`] when listing fails.
#[cfg(feature = "verbs")]
pub fn real_devices() -> Result<Vec<verbs::DeviceInfo>, verbs::VerbsError> {
    <real::RdmaVerbs as verbs::Verbs>::devices()
}
