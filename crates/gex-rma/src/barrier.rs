//! The barrier of gex-rma on the primordial team (every rank's endpoint with the
//! `RmaEp`'s index): split-phase, with ids, anonymous entries and mismatch detection.
//!
//! It is hierarchical. Ranks whose conduit shares memory (same host, and the conduit
//! maps their auxiliary areas) form a *group*; inside a group the barrier is a counter
//! barrier in shared memory ([`crate::shmbar`]): no AM. Between groups, the group
//! leaders (lowest rank of each group; every rank is its own group when nothing is
//! shared) run a dissemination barrier over AMs: round `r` (of `ceil(log2 m)` for `m`
//! leaders) sends `(barrier number, r, merged entry)` to leader `j + 2^r` and waits for
//! the message from leader `j - 2^r`. A leader enters the rounds once its group has
//! arrived and releases its group when the rounds are over. With
//! `--cfg gex_force_am_rma` every rank is its own group (the AM path stays tested).
//!
//! An entry is (named id or none, mismatch flag): a named id wins over an anonymous
//! entry, two different named ids set the mismatch flag, and the flag is sticky. After
//! the last round every leader has merged every rank's entry and releases its group
//! with the outcome, so a mismatch is reported by every rank's
//! `barrier_wait`/`barrier_try`.
//!
//! Progress: the barrier advances inside gex-rma's waiting and testing calls (`wait`,
//! `test`, blocking operations, `wait_syncnbi_*`, `barrier_wait`, `barrier_try`), not
//! in a bare [`Endpoint::poll`]: a rank that notified must keep calling one of them (or
//! wait) for its peers to finish. While it waits for the barrier, a rank whose wait
//! policy is spin-then-block yields its core after a few fruitless polls (ranks often
//! outnumber cores then), and sleeps only after the policy's yields; the rank that
//! releases a group wakes its sleepers.

use crate::RmaEp;
use crate::RmaError;
use crate::ep::{Shared, lock};
use crate::event::Event;
use crate::shmbar::{Entry, ShmBar};
use gex_core::spi::{Conduit, ConduitEp};
use gex_core::{
    Am, Capabilities, Category, Endpoint, EpAddr, Flags, HandlerIndex, Token, WaitPolicy,
};
use std::collections::HashMap;
use std::time::Duration;

/// Polls before a barrier waiter under spin-then-block starts yielding its core.
const BARRIER_SPINS: u32 = 2;
/// Yields before it sleeps (until its group's release wakes it).
const BARRIER_YIELDS: u32 = 20_000;
/// Polls before a spinning waiter yields now and then (as the core's waits do).
const SPIN_YIELD_AFTER: u32 = 1 << 14;

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
        let (st, id) = self.entry();
        [st, id as u32, (id >> 32) as u32]
    }
    fn entry(self) -> Entry {
        let id = self.named.unwrap_or(0);
        let st =
            if self.named.is_some() { NAMED } else { 0 } | if self.mismatch { MISMATCH } else { 0 };
        (st, id)
    }
    fn from_entry((st, id): Entry) -> Acc {
        Acc {
            named: (st & NAMED != 0).then_some(id),
            mismatch: st & MISMATCH != 0,
        }
    }
}

/// Merges two encoded entries (used by the shared-memory group).
pub(crate) fn merge_entries(a: Entry, b: Entry) -> Entry {
    Acc::from_entry(a).merge(Acc::from_entry(b)).entry()
}

/// Who takes part in the inter-group rounds, and this rank's group.
#[derive(Debug, Default)]
struct Topo {
    /// Group leaders in rank order (every rank when nothing is shared).
    leaders: Vec<u32>,
    /// This rank's index in `leaders` (if it leads its group).
    me: Option<usize>,
    /// This rank's shared-memory group (`None`: a group of one).
    shm: Option<ShmBar>,
}

/// Barrier state of one endpoint (inside the shared state, so handlers see it).
#[derive(Debug, Default)]
pub(crate) struct Bar {
    /// Number of the current (or last) barrier.
    k: u64,
    round: u32,
    /// Merged entry while inter-group rounds remain.
    acc: Option<Acc>,
    /// This rank's entry (named id or anonymous) between notify and wait.
    mine: Option<Option<u64>>,
    /// Outcome once the barrier is over for this rank (mismatch or not).
    done: Option<bool>,
    /// Event op of a `barrier_nb` in progress.
    ev_op: Option<u32>,
    /// Messages received: (barrier number, round) -> entry.
    recv: HashMap<(u32, u32), Acc>,
    /// Failure of a send while advancing.
    failed: Option<RmaError>,
    /// Waiting for the group leader's release.
    wait_release: bool,
    /// Leader: waiting for the group's last arrival to hand over the merged entry.
    wait_host: bool,
    topo: Topo,
}

/// Sets up the groups: called once by `RmaEp::new`, before any barrier.
pub(crate) fn setup<C: Conduit>(ep: &mut Endpoint<C>, st: &Shared) {
    let me = ep.addr();
    let n = ep.size();
    let hosts: Vec<u32> = (0..n).map(|r| ep.host_of(r).unwrap_or(r)).collect();
    let my_host = hosts[me.rank as usize];
    let mut locals = Vec::new();
    let mut grouped = !cfg!(gex_force_am_rma)
        && ep
            .conduit_ep()
            .capabilities()
            .contains(Capabilities::SHARED_MEMORY);
    if grouped {
        for r in (0..n).filter(|&r| hosts[r as usize] == my_host) {
            let a = EpAddr::new(r, me.ep);
            match ep.conduit_ep().aux(a) {
                Some(p) => locals.push((a, p)),
                None => grouped = false,
            }
        }
    }
    let mut leaders: Vec<u32> = if grouped {
        let mut first: HashMap<u32, u32> = HashMap::new();
        for r in 0..n {
            first.entry(hosts[r as usize]).or_insert(r);
        }
        first.into_values().collect()
    } else {
        (0..n).collect()
    };
    leaders.sort_unstable();
    let shm = (grouped && locals.len() > 1).then(|| ShmBar::new(me, locals));
    let mut s = lock(st);
    if let Some(g) = &shm {
        s.bar.k = g.last_entered();
    }
    s.bar.topo = Topo {
        me: leaders.iter().position(|&r| r == me.rank),
        leaders,
        shm,
    };
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
    to: u32,
    k: u64,
    round: u32,
    acc: Acc,
) -> Result<(), RmaError> {
    let [st, lo, hi] = acc.encode();
    ep.request_reserved(
        EpAddr::new(to, ep.index()),
        Category::Short,
        H_BARRIER,
        &[k as u32, round, st, lo, hi],
        &[],
        0,
        Flags::empty(),
    )?;
    Ok(())
}

/// The leader `2^round` places after this one (inter-group rounds).
fn partner(t: &Topo, round: u32) -> u32 {
    let m = t.leaders.len();
    let j = t.me.expect("only leaders run rounds");
    t.leaders[(j + (1usize << round) % m) % m]
}

/// True if something lets the barrier advance (a round message, the group's release,
/// or, for a leader, its group's arrival).
pub(crate) fn ready(st: &Shared) -> bool {
    let s = lock(st);
    let b = &s.bar;
    (b.acc.is_some() && b.recv.contains_key(&(b.k as u32, b.round)))
        || (b.wait_release
            && b.topo
                .shm
                .as_ref()
                .is_some_and(|g| g.released(b.k).is_some()))
        || (b.wait_host
            && b.topo
                .shm
                .as_ref()
                .is_some_and(|g| g.host_entry(b.k).is_some()))
}

/// What `advance` must do outside the lock.
enum Step {
    Send(u32, u64, u32, Acc),
    Release(u64, bool),
}

/// Advances the barrier as far as shared memory and received messages allow (sends
/// the next rounds, releases the group).
pub(crate) fn advance<C: Conduit>(ep: &mut Endpoint<C>, st: &Shared) {
    loop {
        let step = {
            let mut s = lock(st);
            let b = &mut s.bar;
            if b.wait_release {
                let Some(mismatch) = b.topo.shm.as_ref().and_then(|g| g.released(b.k)) else {
                    return;
                };
                b.wait_release = false;
                finish(&mut s, mismatch);
                return;
            }
            if b.wait_host {
                let Some(e) = b.topo.shm.as_ref().and_then(|g| g.host_entry(b.k)) else {
                    return;
                };
                b.wait_host = false;
                match start_rounds(b, Acc::from_entry(e)) {
                    Some(step) => step,
                    None => continue,
                }
            } else {
                let Some(acc) = b.acc else { return };
                let key = (b.k as u32, b.round);
                let Some(m) = b.recv.remove(&key) else {
                    return;
                };
                let acc = acc.merge(m);
                b.round += 1;
                if (1usize << b.round) >= b.topo.leaders.len() {
                    b.acc = None;
                    Step::Release(b.k, acc.mismatch)
                } else {
                    b.acc = Some(acc);
                    Step::Send(partner(&b.topo, b.round), b.k, b.round, acc)
                }
            }
        };
        match step {
            Step::Send(to, k, round, acc) => {
                if let Err(e) = send(ep, to, k, round, acc) {
                    fail(ep, st, e);
                    return;
                }
            }
            Step::Release(k, mismatch) => {
                release(ep, st, k, mismatch);
                return;
            }
        }
    }
}

/// Leader with its group's entry: the first round (or, alone, the release).
fn start_rounds(b: &mut Bar, acc: Acc) -> Option<Step> {
    b.round = 0;
    if b.topo.leaders.len() == 1 {
        return Some(Step::Release(b.k, acc.mismatch));
    }
    b.acc = Some(acc);
    Some(Step::Send(partner(&b.topo, 0), b.k, 0, acc))
}

/// The end of barrier `k` for this rank, and for its group if it leads one.
fn release<C: Conduit>(ep: &mut Endpoint<C>, st: &Shared, k: u64, mismatch: bool) {
    let mut s = lock(st);
    if let Some(g) = &s.bar.topo.shm {
        for a in g.release(k, mismatch) {
            ep.conduit_ep().wake(a);
        }
    }
    finish(&mut s, mismatch);
}

fn fail<C: Conduit>(ep: &mut Endpoint<C>, st: &Shared, e: RmaError) {
    let k = {
        let mut s = lock(st);
        s.bar.failed = Some(e);
        s.bar.acc = None;
        s.bar.k
    };
    // The group must not wait for rounds that will not come: release it with a
    // mismatch (this rank reports the failure itself).
    release(ep, st, k, true);
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
        let acc = Acc {
            named,
            mismatch: false,
        };
        let step = {
            let mut s = lock(&self.st);
            if s.bar.mine.is_some() {
                return Err(RmaError::BarrierAlreadyNotified);
            }
            let b = &mut s.bar;
            b.k += 1;
            b.round = 0;
            b.mine = Some(named);
            b.failed = None;
            let k = b.k;
            match &b.topo.shm {
                Some(g) => match g.arrive(k, acc.entry()) {
                    // Not the last of the group: wait for the release (a leader of
                    // several groups waits for the group's entry first).
                    None if g.is_leader() && b.topo.leaders.len() > 1 => {
                        b.wait_host = true;
                        None
                    }
                    None => {
                        b.wait_release = true;
                        None
                    }
                    // The last arrival of the only group releases it; of one of
                    // several groups, the leader runs the rounds.
                    Some(e) if g.is_leader() || b.topo.leaders.len() == 1 => {
                        Some(Step::Release(k, Acc::from_entry(e).mismatch))
                            .filter(|_| b.topo.leaders.len() == 1)
                            .or_else(|| start_rounds(b, Acc::from_entry(e)))
                    }
                    Some(e) => {
                        g.hand_to_leader(k, e);
                        b.wait_release = true;
                        let leader = g.leader();
                        drop(s);
                        self.ep.conduit_ep().wake(leader);
                        None
                    }
                },
                None => start_rounds(b, acc),
            }
        };
        match step {
            None => {}
            Some(Step::Release(k, mismatch)) => release(&mut self.ep, &self.st, k, mismatch),
            Some(Step::Send(to, k, round, acc)) => {
                if let Err(e) = send(&mut self.ep, to, k, round, acc) {
                    let mut s = lock(&self.st);
                    s.bar.acc = None;
                    s.bar.mine = None;
                    return Err(e);
                }
            }
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
        let mut idle = 0u32;
        loop {
            self.ep.poll();
            advance(&mut self.ep, &self.st);
            if lock(&self.st).bar.done.is_some() {
                break;
            }
            idle = idle.saturating_add(1);
            match self.ep.wait_policy() {
                WaitPolicy::Spin => {
                    gex_sync::hint::spin_loop();
                    if idle >= SPIN_YIELD_AFTER && idle % 256 == 0 {
                        std::thread::yield_now();
                    }
                }
                WaitPolicy::SpinThenBlock { .. } if idle < BARRIER_SPINS => {
                    gex_sync::hint::spin_loop();
                }
                // Ranks often outnumber cores under this policy: the ranks this one
                // waits for may need its core.
                WaitPolicy::SpinThenBlock { .. } if idle < BARRIER_SPINS + BARRIER_YIELDS => {
                    std::thread::yield_now();
                }
                _ => self.sleep_in_barrier(),
            }
        }
        self.barrier_outcome(id, flags)
            .unwrap_or(Err(RmaError::BarrierNotNotified))
    }

    /// Sleeps until the group's release (or a message) may have come. A rank that
    /// waits for its group's release first says so in its area, so the releaser wakes
    /// it; other waits (rounds, a leader waiting for its group) are woken by messages
    /// or by the group's last arrival.
    fn sleep_in_barrier(&mut self) {
        let (k, waits_release) = {
            let s = lock(&self.st);
            (s.bar.k, s.bar.wait_release)
        };
        let group = if waits_release {
            let s = lock(&self.st);
            match &s.bar.topo.shm {
                Some(g) if !g.may_sleep(k) => {
                    g.awake();
                    return;
                }
                Some(_) => true,
                None => false,
            }
        } else {
            false
        };
        self.ep.conduit_ep().block(Duration::from_millis(10));
        if group {
            if let Some(g) = &lock(&self.st).bar.topo.shm {
                g.awake();
            }
        }
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
