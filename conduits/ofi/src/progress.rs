//! Progress and waiting: `poll` (send queued replies, repost buffers, read the
//! completion queue in batches and process each completion, return owed credits,
//! probe silent peers), request injection over libfabric, and `block` (sleep in the
//! CQ's wait object when nothing only this endpoint can complete is pending). What a
//! hybrid conduit needs to schedule this endpoint's progress (`FarEp`) is `net_busy`
//! and the `active` flag of a progress pass.

use crate::config::PROBE_AFTER;
use crate::ep::OfiEp;
use crate::fabric::{CQ_BATCH, Completion, Errno, flags};
use crate::runtime::Reach;
use crate::rx::Done;
use gex_core::spi::{Capabilities, ConduitError, Deliver, FarPoll, OutMsg};
use gex_core::{EpAddr, Injected};
use std::time::Duration;

impl OfiEp {
    #[cold]
    pub(crate) fn die(&mut self, what: String) -> ! {
        let msg = format!("{}: {what}", self.tx.who);
        self.tx.fatal.get_or_insert(msg.clone());
        // poll cannot return an error: end this rank with the reason; the launcher ends
        // the job (docs/ofi.md, "Faults").
        panic!("gex {msg}");
    }

    /// Reads and processes completions: returns the messages delivered, and whether
    /// any completion was found.
    pub(crate) fn progress<D: Deliver>(&mut self, d: &mut D, budget: usize) -> FarPoll {
        if let Some(f) = self.tx.fatal.clone() {
            panic!("gex {f}");
        }
        if self.tx.nqueued > 0 {
            if let Err(e) = self.tx.flush() {
                self.die(format!("sending a queued reply: {e}"));
            }
        }
        if !self.tx.ctl.is_empty() {
            if let Err(e) = self.tx.flush_ctl() {
                self.die(format!("sending a control message: {e}"));
            }
        }
        if !self.rx.repost.is_empty() {
            if let Err(e) = self.rx.repost_pending() {
                self.die(format!("fi_recvmsg (repost): {e}"));
            }
        }
        let mut n = 0;
        let mut seen = !self.rx.stash.is_empty();
        while let Some(c) = self.rx.stash.pop_front() {
            if let Done::Delivered = self.complete(c, d) {
                n += 1;
            }
        }
        while n < budget {
            let k = match self.objs.cq.read(&mut self.rx.comps) {
                Ok(0) => break,
                Ok(k) => k,
                Err(Errno::AVAIL) => {
                    let e = match self.objs.cq.read_error() {
                        Ok(e) => e,
                        Err(e) => self.die(format!("fi_cq_readerr: {e}")),
                    };
                    let what = if self.tx.pool.index_of(e.ctx).is_some() {
                        "send"
                    } else if self.rma.index_of(e.ctx).is_some() {
                        "native RMA or atomic"
                    } else if e.flags & flags::RECV != 0 {
                        "receive"
                    } else {
                        "operation"
                    };
                    self.die(format!(
                        "{what} completed in error: {} (a peer may have exited)",
                        e.text
                    ));
                }
                Err(e) => self.die(format!("fi_cq_read: {e}")),
            };
            seen |= k > 0;
            for j in 0..k {
                let c = self.rx.comps[j];
                if let Done::Delivered = self.complete(c, d) {
                    n += 1;
                }
            }
            // A short batch drained the queue. Reading again would cost a whole provider
            // progress pass (tcp: a poll(2) over every socket plus the read of its
            // signal fd) between a reply's arrival and the caller seeing it: on the
            // round trip's critical path.
            if k < CQ_BATCH {
                break;
            }
        }
        if self.rx.has_local() {
            let k = self.drain_local(d, budget.saturating_sub(n).max(1));
            n += k;
            seen |= k > 0;
        }
        if !self.tx.due.is_empty() {
            if let Err(e) = self.tx.return_credits() {
                self.die(format!("returning credits: {e}"));
            }
        }
        if seen {
            self.tx.idle = 0;
        } else if self.tx.probing {
            self.tx.idle += 1;
            if self.tx.idle >= PROBE_AFTER {
                self.idle_probe();
            }
        }
        FarPoll {
            delivered: n,
            active: seen,
        }
    }

    /// Injects a request through libfabric (credits, then `fi_inject` or `fi_send`).
    #[inline]
    pub(crate) fn inject_net(
        &mut self,
        msg: &OutMsg<'_>,
        imm: bool,
    ) -> Result<Injected, ConduitError> {
        if let Some(f) = &self.tx.fatal {
            return Err(ConduitError::Network(f.clone()));
        }
        if self.tx.nqueued > 0 {
            self.tx.flush()?;
        }
        let g = self.tx.g(msg.dst());
        if self.tx.reach[g] != Reach::Ready && !self.reach_slow(g, msg.dst(), imm)? {
            return Ok(Injected::WouldBlock);
        }
        if !self.tx.queued[g].is_empty() || !self.tx.credits.take(g) {
            return Ok(Injected::WouldBlock);
        }
        match self.tx.send_msg(g, msg) {
            Ok(true) => Ok(Injected::Sent),
            Ok(false) => {
                self.tx.credits.untake(g);
                Ok(Injected::WouldBlock)
            }
            Err(e) => {
                self.tx.credits.untake(g);
                Err(e)
            }
        }
    }

    /// Whether network operations of this endpoint are in flight, whose completions
    /// only a CQ read collects: send buffers, native RMA and atomics, queued replies,
    /// receive buffers to repost, stashed completions.
    #[inline(always)]
    pub(crate) fn net_busy(&self) -> bool {
        !self.tx.all_sent()
            || self.rma.free.len() < self.rma.state.len()
            || self.tx.nqueued > 0
            || !self.tx.ctl.is_empty()
            || !self.rx.repost.is_empty()
            || !self.rx.stash.is_empty()
    }

    #[cold]
    fn idle_probe(&mut self) {
        self.tx.idle = 0;
        let own = self.tx.g(EpAddr::new(self.tx.rank, self.index));
        if let Err(e) = self.tx.probe(own) {
            let msg = match e {
                ConduitError::Network(m) => m,
                e => format!("{}: probing a silent peer: {e}", self.tx.who),
            };
            self.tx.fatal.get_or_insert(msg.clone());
            panic!("gex {msg}");
        }
    }

    /// `ConduitEp::block`: sleeps in the CQ's wait object when there is one and nothing
    /// only this endpoint's progress completes is pending; otherwise yields.
    pub(crate) fn block_for(&mut self, timeout: Duration) {
        if !self.caps.contains(Capabilities::BLOCKING_WAIT)
            || self.tx.nqueued > 0
            || !self.tx.ctl.is_empty()
            || self.tx.credits_due()
            || !self.rx.repost.is_empty()
            || !self.rx.stash.is_empty()
        {
            // Work only this endpoint's progress completes, or no wait object: stay awake.
            std::thread::yield_now();
            return;
        }
        let mut ms = timeout.as_millis().clamp(1, i32::MAX as u128) as i32;
        if self.rx.has_local() {
            // A message through an in-process ring does not signal the CQ's wait
            // object: nap briefly instead.
            ms = ms.min(1);
        }
        let mut comps = [Completion::EMPTY; CQ_BATCH];
        // Timed out, interrupted, or an error completion (`poll` reports errors): return.
        if let Ok(k) = self.objs.cq.sread(&mut comps, ms) {
            if k == 0 {
                // A fruitless sleep weighs as much as many fruitless polls.
                self.tx.idle = self.tx.idle.saturating_add(PROBE_AFTER / 64);
            }
            for c in comps.iter().take(k) {
                // Send and RMA completions only free a bounce buffer or mark an
                // operation done: do it now. Receives wait for `poll`, which delivers
                // them.
                if let Some(i) = self.tx.pool.index_of(c.ctx) {
                    self.tx.sent(i);
                } else if let Some(i) = self.rma.index_of(c.ctx) {
                    self.rma_completed(i);
                } else {
                    self.rx.stash.push_back(*c);
                }
            }
        }
    }
}
