//! The barrier of gex-rma: a dissemination barrier over gex-rma AMs on the primordial
//! team (every rank's endpoint with the `RmaEp`'s index), split-phase, with ids,
//! anonymous entries and mismatch detection.
//!
//! Round `r` (of `ceil(log2 n)`) sends `(barrier number, r, merged state)` to rank
//! `me + 2^r` and waits for the message from `me - 2^r`. The merged state is
//! (named id or none, mismatch flag): a named id wins over an anonymous entry, two
//! different named ids set the mismatch flag, and the flag is sticky. After the last
//! round every rank has merged every rank's entry, so a mismatch is reported by every
//! rank's `barrier_wait`/`barrier_try`.
//!
//! Progress: rounds advance inside gex-rma's waiting and testing calls (`wait`, `test`,
//! blocking operations, `wait_syncnbi_*`, `barrier_wait`, `barrier_try`), not in a bare
//! [`Endpoint::poll`]: a rank that notified must keep calling one of them (or wait) for
//! its peers to finish.

use crate::RmaEp;
use crate::RmaError;
use crate::ep::{Shared, lock};
use crate::event::Event;
use gex_core::spi::Conduit;
use gex_core::{Am, Category, Endpoint, EpAddr, Flags, HandlerIndex, Token};
use std::collections::HashMap;

/// Handler of barrier messages: `[barrier number, round, state, id lo, id hi]`.
pub(crate) const H_BARRIER: HandlerIndex = 24;

const NAMED: u32 = 1;
const MISMATCH: u32 = 2;

bitflags::bitflags! {
    /// Flags of the split-phase barrier calls.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct BarrierFlags: u32 {
        /// An anonymous entry: matches any id (the id argument is ignored).
        const ANONYMOUS = 1;
    }
}

/// Merged barrier state: the named id seen (if any) and the mismatch flag.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Acc {
    named: Option<u64>,
    mismatch: bool,
}

impl Acc {
    fn merge(self, o: Acc) -> Acc {
        let clash = matches!((self.named, o.named), (Some(a), Some(b)) if a != b);
        Acc {
            named: self.named.or(o.named),
            mismatch: self.mismatch || o.mismatch || clash,
        }
    }
    fn encode(self) -> [u32; 3] {
        let id = self.named.unwrap_or(0);
        let st =
            if self.named.is_some() { NAMED } else { 0 } | if self.mismatch { MISMATCH } else { 0 };
        [st, id as u32, (id >> 32) as u32]
    }
}

/// Barrier state of one endpoint (inside the shared state, so handlers see it).
#[derive(Debug, Default)]
pub(crate) struct Bar {
    /// Number of the current (or last) barrier.
    epoch: u32,
    round: u32,
    /// Merged state while rounds remain.
    acc: Option<Acc>,
    /// This rank's entry (named id or anonymous) between notify and wait.
    mine: Option<Option<u64>>,
    /// Outcome once every round is done (mismatch or not).
    done: Option<bool>,
    /// Event op of a `barrier_nb` in progress.
    ev_op: Option<u32>,
    /// Messages received: (barrier number, round) -> state.
    recv: HashMap<(u32, u32), Acc>,
    /// Failure of a send while advancing.
    failed: Option<RmaError>,
}

pub(crate) fn register<C: Conduit>(ep: &mut Endpoint<C>, st: Shared) -> Result<(), RmaError> {
    ep.register_reserved(H_BARRIER, move |_t: &mut Token<'_>, am: Am<'_>| {
        let a = am.args();
        let mut s = lock(&st);
        if a.len() < 5 {
            s.dropped += 1;
            return;
        }
        let acc = Acc {
            named: (a[2] & NAMED != 0).then(|| (u64::from(a[4]) << 32) | u64::from(a[3])),
            mismatch: a[2] & MISMATCH != 0,
        };
        let e = s.bar.recv.entry((a[0], a[1])).or_default();
        *e = e.merge(acc);
    })?;
    Ok(())
}

fn send<C: Conduit>(
    ep: &mut Endpoint<C>,
    epoch: u32,
    round: u32,
    acc: Acc,
) -> Result<(), RmaError> {
    let (me, n) = (ep.addr(), ep.size());
    let to = EpAddr::new((me.rank + (1u32 << round) % n) % n, me.ep);
    let [st, lo, hi] = acc.encode();
    ep.request_reserved(
        to,
        Category::Short,
        H_BARRIER,
        &[epoch, round, st, lo, hi],
        &[],
        0,
        Flags::empty(),
    )?;
    Ok(())
}

/// True if a received message lets the barrier advance.
pub(crate) fn ready(st: &Shared) -> bool {
    let s = lock(st);
    s.bar.acc.is_some() && s.bar.recv.contains_key(&(s.bar.epoch, s.bar.round))
}

/// Advances the barrier as far as received messages allow (sends the next rounds).
pub(crate) fn advance<C: Conduit>(ep: &mut Endpoint<C>, st: &Shared) {
    let n = u64::from(ep.size());
    loop {
        let (epoch, round, acc) = {
            let mut s = lock(st);
            let Some(acc) = s.bar.acc else { return };
            let key = (s.bar.epoch, s.bar.round);
            let Some(m) = s.bar.recv.remove(&key) else {
                return;
            };
            let acc = acc.merge(m);
            s.bar.round += 1;
            if (1u64 << s.bar.round) >= n {
                finish(&mut s, acc.mismatch);
                return;
            }
            s.bar.acc = Some(acc);
            (s.bar.epoch, s.bar.round, acc)
        };
        if let Err(e) = send(ep, epoch, round, acc) {
            let mut s = lock(st);
            s.bar.failed = Some(e);
            finish(&mut s, true);
            return;
        }
    }
}

fn finish(s: &mut crate::ep::State, mismatch: bool) {
    s.bar.acc = None;
    if let Some(id) = s.bar.ev_op.take() {
        // barrier_nb: complete its event; the outcome is not reported.
        if let Some(op) = s.ops.get_mut(&id) {
            op.remaining = 0;
        }
        s.bar.mine = None;
        s.bar.done = None;
    } else {
        s.bar.done = Some(mismatch);
    }
}

impl<C: Conduit> RmaEp<C> {
    /// Notifies the split-phase barrier with `id` (ignored with
    /// [`BarrierFlags::ANONYMOUS`]). Collective over the primordial team; must be
    /// followed by [`barrier_wait`](Self::barrier_wait) or successful
    /// [`barrier_try`](Self::barrier_try) calls before the next notify.
    ///
    /// # Errors
    /// [`RmaError::BarrierAlreadyNotified`] if a barrier is in progress;
    /// [`RmaError::Am`] if sending failed.
    pub fn barrier_notify(&mut self, id: u64, flags: BarrierFlags) -> Result<(), RmaError> {
        let named = (!flags.contains(BarrierFlags::ANONYMOUS)).then_some(id);
        let epoch = {
            let mut s = lock(&self.st);
            if s.bar.mine.is_some() {
                return Err(RmaError::BarrierAlreadyNotified);
            }
            s.bar.epoch = s.bar.epoch.wrapping_add(1);
            s.bar.round = 0;
            s.bar.mine = Some(named);
            s.bar.failed = None;
            let acc = Acc {
                named,
                mismatch: false,
            };
            if self.ep.size() == 1 {
                s.bar.done = Some(false);
                return Ok(());
            }
            s.bar.acc = Some(acc);
            s.bar.epoch
        };
        if let Err(e) = send(
            &mut self.ep,
            epoch,
            0,
            Acc {
                named,
                mismatch: false,
            },
        ) {
            let mut s = lock(&self.st);
            s.bar.acc = None;
            s.bar.mine = None;
            return Err(e);
        }
        Ok(())
    }

    /// The outcome if the barrier is complete (and resets it), else `None`.
    fn barrier_outcome(&mut self, id: u64, flags: BarrierFlags) -> Option<Result<(), RmaError>> {
        let mut s = lock(&self.st);
        let mismatch = s.bar.done.take()?;
        let mine = s.bar.mine.take().flatten();
        if let Some(e) = s.bar.failed.take() {
            return Some(Err(e));
        }
        let named = (!flags.contains(BarrierFlags::ANONYMOUS)).then_some(id);
        if mismatch || named != mine {
            return Some(Err(RmaError::BarrierMismatch));
        }
        Some(Ok(()))
    }

    fn check_notified(&self) -> Result<(), RmaError> {
        let s = lock(&self.st);
        if s.bar.mine.is_none() || s.bar.ev_op.is_some() {
            return Err(RmaError::BarrierNotNotified);
        }
        Ok(())
    }

    /// Waits for the barrier notified by [`barrier_notify`](Self::barrier_notify);
    /// `id` and `flags` must be those of the notify.
    ///
    /// # Errors
    /// [`RmaError::BarrierMismatch`] (on every rank) if two ranks notified different
    /// named ids, or if `id`/`flags` differ from this rank's notify;
    /// [`RmaError::BarrierNotNotified`] without a notify; [`RmaError::Am`] if sending
    /// failed.
    pub fn barrier_wait(&mut self, id: u64, flags: BarrierFlags) -> Result<(), RmaError> {
        self.check_notified()?;
        let st = &self.st;
        crate::ep::drive(&mut self.ep, st, || lock(st).bar.done.is_some());
        self.barrier_outcome(id, flags)
            .unwrap_or(Err(RmaError::BarrierNotNotified))
    }

    /// Polls once and advances the barrier; `Ok(true)` once it is complete (the
    /// barrier is then over), `Ok(false)` while it is not.
    ///
    /// # Errors
    /// As [`barrier_wait`](Self::barrier_wait) (an error also ends the barrier).
    pub fn barrier_try(&mut self, id: u64, flags: BarrierFlags) -> Result<bool, RmaError> {
        self.check_notified()?;
        self.ep.poll();
        advance(&mut self.ep, &self.st);
        match self.barrier_outcome(id, flags) {
            None => Ok(false),
            Some(r) => r.map(|()| true),
        }
    }

    /// Blocking anonymous barrier (notify + wait).
    ///
    /// # Errors
    /// As [`barrier_wait`](Self::barrier_wait) (a mismatch happens when another rank
    /// enters the same barrier with a named id that differs from a third rank's).
    pub fn barrier(&mut self) -> Result<(), RmaError> {
        self.barrier_notify(0, BarrierFlags::ANONYMOUS)?;
        self.barrier_wait(0, BarrierFlags::ANONYMOUS)
    }

    /// Nonblocking anonymous barrier: the event completes when every rank has entered
    /// it (a mismatch, caused by named entries elsewhere, is not reported).
    ///
    /// # Errors
    /// As [`barrier_notify`](Self::barrier_notify).
    pub fn barrier_nb(&mut self) -> Result<Event, RmaError> {
        self.barrier_notify(0, BarrierFlags::ANONYMOUS)?;
        if self.barrier_outcome(0, BarrierFlags::ANONYMOUS).is_some() {
            return Ok(Event::done());
        }
        let id = self.new_op(1, std::ptr::null_mut(), 0);
        let mut s = lock(&self.st);
        s.bar.ev_op = Some(id);
        // A barrier that completed between notify and here.
        if s.bar.done.take().is_some() {
            s.bar.ev_op = None;
            s.bar.mine = None;
            s.ops.remove(&id);
            return Ok(Event::done());
        }
        Ok(Event { ids: vec![id] })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_rules() {
        let anon = Acc::default();
        let a = Acc {
            named: Some(1),
            mismatch: false,
        };
        let b = Acc {
            named: Some(2),
            mismatch: false,
        };
        assert_eq!(anon.merge(a), a);
        assert_eq!(a.merge(anon), a);
        assert_eq!(a.merge(a), a);
        assert!(a.merge(b).mismatch && b.merge(a).mismatch);
        assert!(a.merge(b).merge(anon).merge(a).mismatch);
        let [st, lo, hi] = Acc {
            named: Some(u64::MAX - 1),
            mismatch: true,
        }
        .encode();
        assert_eq!((st, lo, hi), (NAMED | MISMATCH, u32::MAX - 1, u32::MAX));
    }
}
