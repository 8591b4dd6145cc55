//! Delta transfers as ordinary gex-msg messages (feature `msg`): a [`DeltaBuf`] sent as
//! one tagged message carrying only what changed since its last transfer to that
//! (communicator, rank, tag), so it is ordered with the program's other messages and
//! works over any conduit.

use gex_core::Endpoint;
use gex_core::spi::Conduit;
use gex_msg::{Comm, MsgExt};

use crate::delta::{DeltaBuf, DeltaStats, Dest, wait_buf};
use crate::error::OverlapError;
use crate::layer::with;
use crate::wire::{self, DeltaStatus, apply_delta};

/// The whole-buffer threshold when the endpoint has no overlap layer (the default of
/// `GEX_OVERLAP_DELTA_WHOLE`).
const WHOLE_PCT: u32 = 50;

/// Delta transfers over gex-msg (feature `msg`): a [`DeltaBuf`] sent as one ordinary
/// tagged message ([`delta_send_msg`](Self::delta_send_msg)) that carries only what
/// changed in it since its last transfer to the same (`comm`, `dst`, `tag`), in the
/// format [`apply_delta`](crate::apply_delta) documents; the receiver applies it to its
/// copy of the buffer ([`delta_recv_msg`](Self::delta_recv_msg), or a plain
/// `MsgExt::recv` and [`apply_delta`](crate::apply_delta)). The message is an ordinary
/// gex-msg message: ordered with the program's other messages on (`comm`, source,
/// `tag`) (MPI's non-overtaking rule) and carried by any conduit.
///
/// The endpoint needs gex-msg's layer ([`gex_msg::Msg`]); the overlap layer is not
/// needed (when attached, its `GEX_OVERLAP_DELTA_WHOLE` says when the whole buffer is
/// sent; otherwise 50 %).
///
/// ```
/// use gex_core::{boot::Singleton, loopback::Loopback, ClientBuilder};
/// use gex_msg::{Comm, Msg, MsgExt};
/// use gex_overlap::{DeltaBuf, DeltaMsgExt, Tracking, page_size};
///
/// let client = ClientBuilder::new().layer::<Msg>()
///     .init::<Loopback>(Box::new(Singleton::new()))?;
/// let mut ep = client.endpoint(0)?;
/// let len = 16 * page_size();
/// let mut buf = DeltaBuf::new(len, Tracking::OsTriggered)?;
/// let mut copy = vec![0u8; len]; // the receiver's copy
/// buf.fill(1);
/// let first = ep.delta_send_msg(Comm::WORLD, 0, 5, &mut buf)?; // everything
/// assert!(first.whole);
/// ep.delta_recv_msg(Comm::WORLD, 0, 5, &mut copy)?;
/// buf[3 * page_size()] = 2; // faults once: that page changed
/// ep.send(Comm::WORLD, 0, 5, b"plain")?; // an ordinary message on the same tag
/// let next = ep.delta_send_msg(Comm::WORLD, 0, 5, &mut buf)?;
/// assert_eq!(next.bytes, page_size()); // only that page
/// let mut plain = [0u8; 5];
/// ep.recv(Comm::WORLD, Some(0), Some(5), &mut plain)?; // sent first, received first
/// let st = ep.delta_recv_msg(Comm::WORLD, 0, 5, &mut copy)?;
/// assert_eq!(st.bytes, page_size());
/// assert_eq!(&copy[..], &buf[..]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait DeltaMsgExt: MsgExt + sealed::Sealed {
    /// Sends `buf` to rank `dst` as one gex-msg message (standard mode, `comm`, `tag`)
    /// carrying only what changed since its last transfer to the same (`comm`, `dst`,
    /// `tag`): the marked ranges ([`Tracking::Annotated`](crate::Tracking::Annotated))
    /// or the written pages ([`Tracking::OsTriggered`](crate::Tracking::OsTriggered)),
    /// as (offset, length, bytes) runs; the whole buffer (one run) on the first
    /// transfer there (or after a transfer elsewhere: one destination is remembered),
    /// or when at least `GEX_OVERLAP_DELTA_WHOLE` percent changed. Returns once the
    /// message is sent (the buffer may be written again); what crossed is
    /// [`DeltaStats`] (`sends` 1). The receiver's copy must hold what the last
    /// message to it carried (nothing else may change it: nothing can check that).
    ///
    /// # Errors
    /// [`OverlapError::EpochOpen`] (an epoch of `buf` is open: end it first);
    /// [`OverlapError::Msg`] (the send failed: no such rank, a tag above
    /// `gex_msg::TAG_MAX`, no gex-msg layer, the conduit), after which the next
    /// transfer sends the whole buffer; [`OverlapError::Os`].
    fn delta_send_msg(
        &mut self,
        comm: Comm,
        dst: u32,
        tag: u32,
        buf: &mut DeltaBuf,
    ) -> Result<DeltaStats, OverlapError> {
        if buf.in_epoch() {
            return Err(OverlapError::EpochOpen);
        }
        // The last epoch's sends (to a segment) have left: the bytes are final.
        self.wait_sends(buf);
        let key = Dest::Msg(comm.id(), dst, tag);
        let (runs, whole) = buf.delta_runs(key, self.whole_pct());
        let msg = wire::encode(buf, &runs, whole);
        if let Err(e) = self.send(comm, dst, tag, &msg) {
            // Whether the receiver got it is unknown: everything goes next time.
            buf.last = None;
            return Err(OverlapError::Msg(e));
        }
        buf.sent_to(key)?;
        Ok(DeltaStats {
            bytes: runs.iter().map(|&(s, e)| e - s).sum(),
            runs: runs.len(),
            sends: 1,
            whole,
        })
    }

    /// Receives the next message from `src` on (`comm`, `tag`) with an ordinary gex-msg
    /// receive (a probe sizes it; one copy out of the message) and applies it to `buf`,
    /// this rank's copy of the sender's buffer ([`apply_delta`](crate::apply_delta)).
    ///
    /// # Errors
    /// [`OverlapError::Msg`] (the probe or the receive failed: no such rank, a tag above
    /// `gex_msg::TAG_MAX`, no gex-msg layer); as [`apply_delta`](crate::apply_delta)
    /// when the message is not a delta message that fits `buf`
    /// ([`OverlapError::NotDelta`], [`OverlapError::DeltaLength`],
    /// [`OverlapError::OutOfBuffer`]): the message is consumed and `buf` unchanged.
    fn delta_recv_msg(
        &mut self,
        comm: Comm,
        src: u32,
        tag: u32,
        buf: &mut [u8],
    ) -> Result<DeltaStatus, OverlapError> {
        let st = self
            .probe(comm, Some(src), Some(tag))
            .map_err(OverlapError::Msg)?;
        let mut msg = vec![0u8; st.len];
        let got = self
            .recv(comm, Some(src), Some(tag), &mut msg)
            .map_err(OverlapError::Msg)?;
        msg.truncate(got.len);
        apply_delta(&msg, buf)
    }
}

impl<C: Conduit> DeltaMsgExt for Endpoint<C> {}

/// What the provided methods of [`DeltaMsgExt`] need from an endpoint (sealed: only
/// gex's endpoints implement it).
mod sealed {
    use super::*;

    /// The endpoint's side of a delta message.
    pub trait Sealed {
        /// Waits until the buffer's sends of an earlier epoch have left.
        fn wait_sends(&mut self, buf: &DeltaBuf);
        /// The whole-buffer threshold (percent).
        fn whole_pct(&mut self) -> u32;
    }

    impl<C: Conduit> Sealed for Endpoint<C> {
        fn wait_sends(&mut self, buf: &DeltaBuf) {
            wait_buf(self, buf);
        }
        fn whole_pct(&mut self) -> u32 {
            with(self, |l, _| l.delta_whole).unwrap_or(WHOLE_PCT)
        }
    }
}
