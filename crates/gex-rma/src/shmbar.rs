//! The host-local half of the barrier: a counter barrier in the auxiliary areas
//! ([`ConduitEp::aux`](gex_core::spi::ConduitEp::aux), the [`AUX_RMA`] part) of the
//! ranks that share memory.
//!
//! Every rank of a host group writes its entry (barrier number, named id or anonymous)
//! into its own area, then increments the arrival counter in the group leader's area
//! (the lowest rank). The arrival that completes barrier `k` (the counter reaches
//! `k × group size`) merges every entry and either releases the group (one group in
//! the job) or hands the merged entry to the leader, which runs the inter-host rounds
//! and then releases. Releasing stores the outcome and the barrier number in the
//! leader's area and wakes sleepers ([`ConduitEp::wake`](gex_core::spi::ConduitEp::wake)).
//! Waiters poll the release word; no AM crosses the host.
//!
//! Written by hand: it lives in memory the conduit maps into several processes, where
//! only atomics on fixed offsets work (no crate offers a cross-process barrier in
//! caller-provided memory).
//!
//! # Safety
//! [`Area`] turns the base of an auxiliary area into `&AtomicU64`s at fixed offsets
//! inside [`AUX_RMA`] (8-byte aligned: the area is 64-byte aligned). The conduit keeps
//! the area mapped for the life of the conduit, which the endpoint (and so the
//! `RmaEp` holding this state) keeps alive; every access to these words, from every
//! process, is atomic.
#![allow(unsafe_code)]

use gex_core::EpAddr;
use gex_core::spi::AUX_RMA;
use gex_sync::atomic::{AtomicU64, Ordering, fence};
use std::ptr::NonNull;

/// Leader's area: arrivals counted so far (all barriers).
const ARRIVALS: usize = 0;
/// Leader's area: number of the last released barrier.
const RELEASED: usize = 64;
/// Leader's area: outcome of the last released barrier (1: mismatch).
const OUTCOME: usize = 72;
/// Leader's area: number of the last barrier whose host phase is complete (set by a
/// last arrival that is not the leader, in jobs with several groups).
const HOST_DONE: usize = 128;
/// Leader's area: merged entry of that barrier (state, id).
const HOST_STATE: usize = 136;
const HOST_ID: usize = 144;
/// Every rank's own area: its entry (barrier number, state, id).
const SLOT_EPOCH: usize = 192;
const SLOT_STATE: usize = 200;
const SLOT_ID: usize = 208;
/// Every rank's own area: 1 while it may sleep in `block` waiting for a release (the
/// releaser wakes only those).
const SLEEPY: usize = 256;
const _: () = assert!(SLEEPY + 8 <= AUX_RMA.end - AUX_RMA.start);

/// The gex-rma part of one auxiliary area.
#[derive(Clone, Copy, Debug)]
struct Area(NonNull<u8>);

// SAFETY: an address in memory shared between processes and threads, only accessed
// through atomics (module `# Safety`).
unsafe impl Send for Area {}
// SAFETY: as above.
unsafe impl Sync for Area {}

impl Area {
    fn new(aux: NonNull<u8>) -> Area {
        // SAFETY: AUX_RMA lies inside the AUX_LEN-byte area.
        Area(unsafe { aux.add(AUX_RMA.start) })
    }
    fn word(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off % 8 == 0 && off + 8 <= AUX_RMA.end - AUX_RMA.start);
        // SAFETY: in bounds and aligned (constant offsets, checked above); mapped for
        // the life of the conduit; only ever accessed atomically (module `# Safety`).
        unsafe { &*self.0.as_ptr().add(off).cast::<AtomicU64>() }
    }
}

/// An entry: state bits (`NAMED`, `MISMATCH` of the barrier module) and the id.
pub(crate) type Entry = (u32, u64);

/// The host group of one endpoint.
#[derive(Debug)]
pub(crate) struct ShmBar {
    own: Area,
    leader: Area,
    /// Every member of the group (this rank included), in rank order.
    members: Vec<(EpAddr, Area)>,
    me: EpAddr,
    leader_addr: EpAddr,
}

impl ShmBar {
    /// The group of the endpoints `members` (this rank's included, lowest first), whose
    /// auxiliary areas are `areas`.
    pub(crate) fn new(me: EpAddr, members: Vec<(EpAddr, NonNull<u8>)>) -> ShmBar {
        let members: Vec<(EpAddr, Area)> = members
            .into_iter()
            .map(|(a, p)| (a, Area::new(p)))
            .collect();
        let own = members
            .iter()
            .find(|(a, _)| *a == me)
            .map(|&(_, p)| p)
            .expect("the group contains this rank");
        let (leader_addr, leader) = members[0];
        ShmBar {
            own,
            leader,
            members,
            me,
            leader_addr,
        }
    }

    /// True if this rank leads its group.
    pub(crate) fn is_leader(&self) -> bool {
        self.me == self.leader_addr
    }

    /// The group leader.
    pub(crate) fn leader(&self) -> EpAddr {
        self.leader_addr
    }

    /// Number of the last barrier this rank entered on this endpoint (0 if none): a new
    /// `RmaEp` on the same endpoint continues the numbering.
    pub(crate) fn last_entered(&self) -> u64 {
        self.own.word(SLOT_EPOCH).load(Ordering::Relaxed)
    }

    /// Enters barrier `k` with `entry`. Returns the merged entry of the whole group if
    /// this was the group's last arrival.
    pub(crate) fn arrive(&self, k: u64, entry: Entry) -> Option<Entry> {
        self.own
            .word(SLOT_STATE)
            .store(u64::from(entry.0), Ordering::Relaxed);
        self.own.word(SLOT_ID).store(entry.1, Ordering::Relaxed);
        self.own.word(SLOT_EPOCH).store(k, Ordering::Relaxed);
        // AcqRel: publishes this entry, and the last arrival sees every entry (each
        // arrival's release is in the counter's release sequence).
        let before = self.leader.word(ARRIVALS).fetch_add(1, Ordering::AcqRel);
        let n = self.members.len() as u64;
        (before + 1 == k * n).then(|| {
            self.members.iter().fold((0, 0), |acc, (_, a)| {
                debug_assert_eq!(a.word(SLOT_EPOCH).load(Ordering::Relaxed), k);
                let e = (
                    a.word(SLOT_STATE).load(Ordering::Relaxed) as u32,
                    a.word(SLOT_ID).load(Ordering::Relaxed),
                );
                crate::barrier::merge_entries(acc, e)
            })
        })
    }

    /// Last arrival, not the leader, of a job with several groups: hands the merged
    /// entry of barrier `k` to the leader; the caller wakes it.
    pub(crate) fn hand_to_leader(&self, k: u64, entry: Entry) {
        self.leader
            .word(HOST_STATE)
            .store(u64::from(entry.0), Ordering::Relaxed);
        self.leader.word(HOST_ID).store(entry.1, Ordering::Relaxed);
        self.leader.word(HOST_DONE).store(k, Ordering::Release);
    }

    /// Leader: the merged entry of the group for barrier `k`, once handed over.
    pub(crate) fn host_entry(&self, k: u64) -> Option<Entry> {
        (self.leader.word(HOST_DONE).load(Ordering::Acquire) >= k).then(|| {
            (
                self.leader.word(HOST_STATE).load(Ordering::Relaxed) as u32,
                self.leader.word(HOST_ID).load(Ordering::Relaxed),
            )
        })
    }

    /// Releases barrier `k` with its outcome; returns the members to wake (those that
    /// announced they may sleep).
    pub(crate) fn release(&self, k: u64, mismatch: bool) -> impl Iterator<Item = EpAddr> + '_ {
        self.leader
            .word(OUTCOME)
            .store(u64::from(mismatch), Ordering::Relaxed);
        self.leader.word(RELEASED).store(k, Ordering::Release);
        // Pairs with the fence in `may_sleep`: either the sleeper sees the release
        // before it sleeps, or this sees its flag.
        fence(Ordering::SeqCst);
        self.members
            .iter()
            .filter(move |&&(a, p)| a != self.me && p.word(SLEEPY).load(Ordering::Relaxed) != 0)
            .map(|&(a, _)| a)
    }

    /// Announces that this rank may sleep until barrier `k` is released; false if it
    /// is released already (then it must not sleep). Call [`awake`](Self::awake) after.
    pub(crate) fn may_sleep(&self, k: u64) -> bool {
        self.own.word(SLEEPY).store(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        self.released(k).is_none()
    }

    /// Withdraws [`may_sleep`](Self::may_sleep).
    pub(crate) fn awake(&self) {
        self.own.word(SLEEPY).store(0, Ordering::Relaxed);
    }

    /// The outcome of barrier `k` (true: mismatch) once it is released.
    pub(crate) fn released(&self, k: u64) -> Option<bool> {
        (self.leader.word(RELEASED).load(Ordering::Acquire) >= k)
            .then(|| self.leader.word(OUTCOME).load(Ordering::Relaxed) != 0)
    }
}
