//! The receiving side of an endpoint: finding senders made at run time and draining
//! the rings into the core.

use super::*;

impl Rx {
    /// Whether a sender made at run time announced a first contact not seen yet.
    #[inline(always)]
    pub(super) fn contacted(&self) -> bool {
        self.contacts
            .get()
            .load(gex_sync::atomic::Ordering::Acquire)
            != self.seen_contacts
    }

    /// Starts polling every sender slot made at run time that has been opened (its
    /// state word is no longer `UNUSED`) and is not polled yet.
    #[cold]
    #[inline(never)]
    pub(super) fn rescan(&mut self, c: &Smp) {
        self.seen_contacts = self
            .contacts
            .get()
            .load(gex_sync::atomic::Ordering::Acquire);
        for (li, l) in c.layouts.iter().enumerate() {
            let base = c.g_base[c.ranks[li] as usize];
            for de in l.eps..l.slots {
                let g = base + de;
                if !self.is_active[g]
                    && c.maps[li]
                        .state(l, de)
                        .load(gex_sync::atomic::Ordering::Acquire)
                        != region::UNUSED
                {
                    self.is_active[g] = true;
                    self.active.push(g);
                }
            }
        }
    }
}

/// Delivers up to `budget` records of one ring.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn drain<D: Deliver>(
    c: &mut Consumer,
    src: EpAddr,
    g: usize,
    seg: Seg,
    kind: Kind,
    d: &mut D,
    tx: &mut Tx,
    budget: usize,
) -> usize {
    let mut n = 0;
    while n < budget {
        let (user, body) = match c.try_peek() {
            Ok(Some(r)) => r,
            Ok(None) => break,
            // poll cannot return an error: end this rank naming the sender; the
            // launcher ends the job.
            Err(e) => panic!("gex smp: {src} corrupted the {kind:?} ring to this rank: {e}"),
        };
        let rec = match record::decode(user, body, kind, seg.len) {
            Ok(r) => r,
            Err(e) => panic!(
                "gex smp: corrupt {kind:?} record from {src} (user word {user:#010x}, {} bytes): {e}",
                body.len()
            ),
        };
        // Long payloads are described, not lent: the core reads them from the segment.
        let (category, payload, offset, len): (Category, &[u8], usize, usize) = match rec.body {
            Body::Short => (Category::Short, &[], 0, 0),
            Body::Medium(p) => (Category::Medium, p, 0, 0),
            Body::Long { offset, len } => (Category::Long, &[], offset, len),
        };
        let args = rec.args;
        debug_assert_eq!(category, rec.category());
        let inc = Incoming {
            src,
            handler: rec.handler,
            kind,
            category,
            args,
            payload,
            offset,
            len,
        };
        d.deliver(&inc, tx);
        c.pop();
        n += 1;
        if kind == Kind::Request && tx.npending != 0 && !tx.pending[g].is_empty() {
            break;
        }
    }
    n
}

impl SmpEp {
    pub(super) fn dst_g(&self, dst: EpAddr) -> usize {
        self.tx.g(dst)
    }

    /// Ends this rank if a neighbour has ended; at most one `poll(2)` per
    /// `live::CHECK_INTERVAL` (see the `live` module).
    #[cold]
    #[inline(never)]
    pub(super) fn check_peers(&mut self) {
        if self.watch.due() {
            let ended = self.conduit.peers.ended();
            if !ended.is_empty() {
                self.conduit.peers.fail(&ended);
            }
        }
    }

    /// The body of `poll`: flushes deferred replies, drains the reply rings, then the
    /// request rings, up to about `budget` messages.
    #[inline(always)]
    pub(super) fn drain_rings<D: Deliver>(&mut self, d: &mut D, budget: usize) -> usize {
        if self.tx.npending > 0 {
            self.tx.flush();
        }
        if self.tx.novf > 0 {
            self.tx.flush_all_ovf();
        }
        if self.rx.contacted() {
            self.rx.rescan(&self.conduit);
        }
        let mut n = 0;
        let rx = &mut self.rx;
        for i in 0..rx.active.len() {
            let g = rx.active[i];
            if n >= budget {
                return n;
            }
            n += drain(
                &mut rx.rep[g],
                rx.src[g],
                g,
                rx.seg,
                Kind::Reply,
                d,
                &mut self.tx,
                budget - n,
            );
        }
        for i in 0..rx.active.len() {
            let g = rx.active[i];
            if n >= budget {
                return n;
            }
            if self.tx.npending != 0 && !self.tx.pending[g].is_empty() {
                continue;
            }
            n += drain(
                &mut rx.req[g],
                rx.src[g],
                g,
                rx.seg,
                Kind::Request,
                d,
                &mut self.tx,
                budget - n,
            );
        }
        n
    }
}
