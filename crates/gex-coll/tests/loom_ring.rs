//! Loom model of the small-broadcast ring (`src/ring.rs`, included as is): run with
//! `RUSTFLAGS="--cfg gex_loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p gex-coll --release --test loom_ring`
//! (or `ci/loom.sh`).
//!
//! Members are threads; their areas are plain atomics ([`Model`]); a ring has one slot
//! under `gex_loom`, so every broadcast after the first reuses it, and the packed ring
//! (blocks of at most `ring::TINY` bytes) one line of two slots, so that the third
//! broadcast reuses a line the reader may still read. A member that may sleep and
//! finds nothing follows the layer's sleep protocol: it stores its `SLEEPY` word,
//! fences, and sleeps on its bell only if the member it waits for fences
//! (`Wait::sleep_safe`) and the flag is still missing; members wake the bells of the
//! sleepers their steps report. A bell is a loom mutex + condvar that remembers a
//! ring and has neither spurious wake-ups nor a timeout, so a lost wake-up is a loom
//! deadlock, and a torn or stale block fails the value checks.
//!
//! Two members only: with three, members spinning on each other's flags take loom
//! beyond minutes (several readers, rotating roots and wrap-around on 2..8 ranks
//! run for real in `tests/sim.rs` and `tests/procs.rs`).
#![cfg(gex_loom)]

#[path = "../src/ring.rs"]
#[allow(dead_code)]
mod ring;

use gex_sync::atomic::{AtomicU64, Ordering, fence};
use loom::sync::{Arc, Condvar, Mutex};
use loom::thread;
use ring::{Bcast, Fencing, Local, View, Wait, Words};

/// One member's area: its ring (one channel), check line words and sleep words.
struct Model {
    seq: Vec<AtomicU64>,
    data: Vec<AtomicU64>,
    claim: AtomicU64,
    done: AtomicU64,
    sleepy: AtomicU64,
    may_sleep: AtomicU64,
    fencing: AtomicU64,
    /// The member's bell: rung, and the condvar it sleeps on.
    bell: (Mutex<bool>, Condvar),
}

impl Model {
    fn new(team: u32) -> Model {
        let words = |n: usize| (0..n).map(|_| AtomicU64::new(0)).collect::<Vec<_>>();
        Model {
            seq: words(ring::SLOTS + ring::TSLOTS),
            data: words((ring::SLOTS + ring::TSLOTS) * ring::WORDS),
            // Claimed before the threads start (a team's members claim at creation).
            claim: AtomicU64::new(u64::from(team) | ring::VALID),
            done: AtomicU64::new(0),
            sleepy: AtomicU64::new(0),
            may_sleep: AtomicU64::new(0),
            fencing: AtomicU64::new(0),
            bell: (Mutex::new(false), Condvar::new()),
        }
    }

    fn ring_bell(&self) {
        *self.bell.0.lock().unwrap() = true;
        self.bell.1.notify_all();
    }

    fn sleep(&self) {
        let mut rung = self.bell.0.lock().unwrap();
        while !*rung {
            rung = self.bell.1.wait(rung).unwrap();
        }
        *rung = false;
    }
}

impl Words for &Model {
    fn seq(&self, _ch: usize, s: usize) -> &AtomicU64 {
        &self.seq[s]
    }
    fn data(&self, _ch: usize, s: usize, i: usize) -> &AtomicU64 {
        &self.data[s * ring::WORDS + i]
    }
    fn claim(&self, _ch: usize) -> &AtomicU64 {
        &self.claim
    }
    fn done(&self, _ch: usize) -> &AtomicU64 {
        &self.done
    }
    fn sleepy(&self) -> &AtomicU64 {
        &self.sleepy
    }
    fn may_sleep(&self) -> &AtomicU64 {
        &self.may_sleep
    }
    fn fencing(&self) -> &AtomicU64 {
        &self.fencing
    }
}

const TEAM: u32 = 0x5eed;
/// Spins (yields) while it waits.
const SPIN: Mode = Mode {
    sleeps: false,
    finishes: false,
};
/// May sleep while it waits.
const SLEEP: Mode = Mode {
    sleeps: true,
    finishes: false,
};
const BASE: u64 = 0x1234_5678_9abc_def1;

/// How a member behaves.
#[derive(Clone, Copy)]
struct Mode {
    /// It may sleep (its `MAYSLEEP` word, stored when it starts, racing with the
    /// others' first flags).
    sleeps: bool,
    /// As a reader that finds the publication after waiting for it, it completes
    /// outside the layer when it may (`Bcast::finish`: no fence, no wake), as the
    /// direct path's caller does.
    finishes: bool,
}

/// Member `me` of `areas` runs broadcasts `0..rounds` rooted at `root(k)`, each of
/// `n` bytes holding `value(k)` (in packed slots if `packed` and `n` is one word),
/// behaving as `mode` says.
fn member(
    areas: &Arc<Vec<Model>>,
    me: u32,
    rounds: u32,
    (n, packed): (usize, bool),
    root: fn(u32) -> u32,
    mode: Mode,
) {
    let Mode { sleeps, finishes } = mode;
    let view_areas: Vec<&Model> = areas.iter().collect();
    let t = View {
        areas: &view_areas,
        me,
        ch: 0,
        team: TEAM,
    };
    let own = view_areas[me as usize];
    if sleeps {
        own.may_sleep.store(1, Ordering::Relaxed);
    }
    let mut local = Local::default();
    let mut fencing = Fencing::default();
    let value = |k: u32| -> Vec<u8> { (0..n).map(|i| (k as u8) * 16 + i as u8 + 1).collect() };
    for k in 0..rounds {
        let r = root(k);
        let input = if r == me { value(k) } else { Vec::new() };
        let mut out = vec![0u8; n];
        let mut b = Bcast::new(k, BASE, r, n, packed);
        loop {
            let done = b.step(&t, &mut local, &mut fencing, &input, &mut out);
            for (q, area) in view_areas.iter().enumerate() {
                if b.wake & (1 << q) != 0 {
                    area.ring_bell();
                }
            }
            b.wake = 0;
            if done {
                break;
            }
            let w: Wait<&Model> = b.wait.expect("a pending step says what it waits for");
            if finishes && w.ready() && b.finish(own, &fencing, &mut out) {
                break;
            }
            if sleeps {
                // The layer's sleep gate: announce, fence, then look (crate::ring).
                own.sleepy.store(1, Ordering::Relaxed);
                fence(Ordering::SeqCst);
                let slept = w.sleep_safe() && !w.ready();
                if slept {
                    own.sleep();
                }
                own.sleepy.store(0, Ordering::Relaxed);
                if !slept {
                    // Awake, yielding (the endpoint's `Progress::Spinning`).
                    thread::yield_now();
                }
            } else {
                thread::yield_now();
            }
        }
        if r != me {
            assert_eq!(out, value(k), "member {me}: broadcast {k}");
        }
    }
}

fn run(p: u32, rounds: u32, n: usize, root: fn(u32) -> u32, mode: fn(u32) -> Mode) {
    run_with(p, rounds, (n, true), root, mode);
}

/// As [`run`], `packed` saying whether one-word blocks take packed slots.
fn run_with(
    p: u32,
    rounds: u32,
    (n, packed): (usize, bool),
    root: fn(u32) -> u32,
    mode: fn(u32) -> Mode,
) {
    let mut model = loom::model::Builder::new();
    // Members that spin (yield) while another is descheduled take many branches.
    model.max_branches = 100_000;
    model.check(move || {
        let areas = Arc::new((0..p).map(|_| Model::new(TEAM)).collect::<Vec<_>>());
        let others: Vec<_> = (1..p)
            .map(|me| {
                let a = areas.clone();
                thread::spawn(move || member(&a, me, rounds, (n, packed), root, mode(me)))
            })
            .collect();
        member(&areas, 0, rounds, (n, packed), root, mode(0));
        for t in others {
            t.join().unwrap();
        }
    });
}

/// Two members, three broadcasts from member 0 through one slot (each reuses it once
/// the reader's `DONE` says it read the previous one), two words each, nobody
/// sleeps: every block arrives whole.
#[test]
fn loom_ring_wraps_without_sleep() {
    run(2, 3, 12, |_| 0, |_| SPIN);
}

/// Four one-word broadcasts through the packed ring's line of two slots, nobody
/// sleeps: the third reuses the line only once the reader finished both of its
/// previous broadcasts, the fourth reuses its slot, and every block arrives whole.
/// (The tests below but the next use one-word blocks too: the packed ring.)
#[test]
fn loom_ring_packed_wraps_without_sleep() {
    run(2, 4, 8, |_| 0, |_| SPIN);
}

/// Three one-word broadcasts of a team whose one-word blocks are not packed (its
/// members have a CPU each, `ring::packs`): they take the ring's one slot in turn,
/// as larger blocks do, and every block arrives whole.
#[test]
fn loom_ring_unpacked_words_wrap_without_sleep() {
    run_with(2, 3, (8, false), |_| 0, |_| SPIN);
}

/// As the first, the reader may sleep (its `MAYSLEEP` races with the root's first
/// publication): it never sleeps through a publication.
#[test]
fn loom_ring_reader_sleeps() {
    run(2, 3, 12, |_| 0, |me| if me == 1 { SLEEP } else { SPIN });
}

/// Both may sleep: the root also sleeps when its ring is full (waiting for the
/// reader's `DONE`), and wakes when the reader catches up.
#[test]
fn loom_ring_both_sleep() {
    run(2, 3, 8, |_| 0, |_| SLEEP);
}

/// The reader completes outside the layer where it may while the root may sleep (its
/// `MAYSLEEP` races with the reader's first completions): the root, asleep on the
/// reader's `DONE` when its one slot is full, is never left asleep by a completion
/// that did not wake it.
#[test]
fn loom_ring_reader_finishes_outside_the_layer() {
    run(
        2,
        3,
        8,
        |_| 0,
        |me| {
            if me == 0 {
                SLEEP
            } else {
                Mode {
                    sleeps: false,
                    finishes: true,
                }
            }
        },
    );
}

/// Roots alternate (each member's ring serves its own broadcasts; every member's
/// `DONE` acknowledges the other's), both may sleep.
#[test]
fn loom_ring_alternating_roots() {
    run(2, 3, 8, |k| k % 2, |_| SLEEP);
}
