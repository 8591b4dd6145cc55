//! Loom models of the sleep protocol of shared-memory waits (`src/shm/`, module
//! docs, *Sleeping*): run with
//! `RUSTFLAGS="--cfg gex_loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p gex-coll --release --test loom_sleep`
//! (or `ci/loom.sh`).
//!
//! Members are threads running the real barrier and channel code (`gex_coll::loomkit`);
//! writers wake with the real `ShmOp::wake_members` (publications: a fence and every
//! announced sleeper's `SLEEPY` word once the writer fences, `Fencing::after_store`;
//! acknowledgements: `ShmTeam::wake_fenced`) or `ShmTeam::wake_fenced` (the barriers:
//! the sequentially consistent swap of the flag is meant as the fence). The sleeper's side lives in
//! the layer's progress hook, which needs an endpoint; it is **mirrored** here, line
//! for line, in [`wait`]:
//! - `shmpath.rs`, `ShmPath::sleep_gate`: `own.sleepy().store(1, Relaxed)` (once per
//!   announcement);
//! - `layer.rs`, `Coll::progress`: `fence(SeqCst)`, then every flag waited for is
//!   looked at once more (`advance_all`, `direct_ready_now`: `WaitOn::ready`);
//! - the endpoint then blocks in the conduit until woken (`Cx::wake` of a writer);
//! - `shmdrive.rs`, `Coll::calm`: once the wait is over, `sleepy().store(0, Relaxed)`.
//!
//! A bell is a loom mutex + condvar that remembers a ring (as the conduit's futex
//! word does) and has neither spurious wake-ups nor a timeout (the conduit's block
//! times out after 10 ms; a lost wake-up there is a 10 ms stall), so a lost wake-up
//! is a loom deadlock.
//!
//! **The models fail when the code is broken** (mutations tried by hand, each one
//! reverted; loom reported `deadlock; threads = [(Id(0), Blocked..), (Id(1),
//! Blocked..)]`, a lost wake-up, for each):
//! - `Fencing::after_store` (a publication's wake) without its fence: the channel
//!   models (and `tests/loom_ring.rs`);
//! - the sleeper's fence removed from [`wait`]: `loom_sleep_channel`,
//!   `loom_sleep_flag_barrier`;
//! - the reader ignoring `WaitOn::sleep_safe` (sleeping while the root it waits for
//!   does not fence yet): `loom_sleep_channel_reader_of_a_spinning_root`;
//! - `ShmOp::wake_members`' quick look at `MAYSLEEP` after acknowledgements without
//!   its fence: `loom_sleep_by_reference_acknowledgements`;
//! - `ShmTeam::wake_fenced` without a fence: `loom_sleep_flag_barrier`,
//!   `loom_sleep_counter_barrier`. That was the code before these models: a real
//!   bug (a `SeqCst` swap does not order the relaxed `SLEEPY` loads after it), fixed
//!   in `wake_fenced` (see its docs).
#![cfg(gex_loom)]

use gex_coll::loomkit::{BYREF_MIN, Member, Shared};
use gex_coll::{OpKind, SyncModes};
use gex_sync::atomic::{Ordering, fence};
use loom::sync::{Arc, Condvar, Mutex};
use loom::thread;

/// Every member's bell: rung, and the condvar its owner sleeps on.
struct Bells(Vec<(Mutex<bool>, Condvar)>);

impl Bells {
    fn new(p: usize) -> Arc<Bells> {
        Arc::new(Bells(
            (0..p)
                .map(|_| (Mutex::new(false), Condvar::new()))
                .collect(),
        ))
    }

    /// `Cx::wake` of member `q`.
    fn ring(&self, q: u32) {
        let (m, cv) = &self.0[q as usize];
        *m.lock().unwrap() = true;
        cv.notify_all();
    }

    /// The conduit's block, without a timeout: returns once rung (since the last
    /// return).
    fn sleep(&self, q: u32) {
        let (m, cv) = &self.0[q as usize];
        let mut rung = m.lock().unwrap();
        while !*rung {
            rung = cv.wait(rung).unwrap();
        }
        *rung = false;
    }
}

/// Waits until `ready()` as a member whose wait policy is `Block` (it sleeps at the
/// first fruitless look): the layer's side of the protocol, mirrored (module docs).
/// `safe()` is `WaitOn::sleep_safe` of the wait (`Coll::waits_sleep_safe`): false
/// while the publisher waited for does not fence yet; the member then stays awake,
/// yielding (`Progress::Spinning`).
fn wait(m: &Member, bells: &Bells, ready: &dyn Fn() -> bool, safe: &dyn Fn() -> bool) {
    let mut sleepy = false;
    while !ready() {
        // shmpath.rs, ShmPath::sleep_gate: announce (`MAYSLEEP` first, once: at once under
        // `Block`, `ShmPath::note_policy`; at the first sleep under spin-then-block,
        // `ShmPath::may_sleep_now`).
        if !sleepy {
            m.set_may_sleep();
            m.sleepy().store(1, Ordering::Relaxed);
            sleepy = true;
        }
        // layer.rs, Coll::progress: fence, then the writer's `FENCING` (stay awake,
        // yielding, while it does not fence), then look once more.
        fence(Ordering::SeqCst);
        if !safe() {
            thread::yield_now();
            continue;
        }
        if ready() {
            break;
        }
        bells.sleep(m.me());
    }
    // shmdrive.rs, Coll::calm.
    if sleepy {
        m.sleepy().store(0, Ordering::Relaxed);
    }
}

/// Runs `body(member, bells)` on two members (rank 1 on a new thread).
fn two(body: fn(Member, &Bells)) {
    let shared = Shared::new(2, 0);
    let bells = Bells::new(2);
    let m0 = Member::new(&shared, 0);
    let m1 = Member::new(&shared, 1);
    let b1 = bells.clone();
    let h = thread::spawn(move || body(m1, &b1));
    body(m0, &bells);
    h.join().unwrap();
}

/// A slot collective (a gather_all of 8 bytes, twice: small slots, inline) between
/// members that may sleep (`MAYSLEEP` set, as under `Block`): the writer of `POST`
/// wakes through the publications' protocol (`Fencing::after_store`: it starts
/// fencing once it sees a reader's `MAYSLEEP`, then fence and `SLEEPY`), the writer of
/// `ACK` through `ShmTeam::wake_fenced`; a reader sleeps only once the publisher fences
/// (`WaitOn::sleep_safe`).
#[test]
fn loom_sleep_channel() {
    loom::model(|| two(|m, bells| channel(m, bells, true)));
}

/// As [`loom_sleep_channel`], between members under spin-then-block: each announces
/// `MAYSLEEP` only at its first sleep (`ShmPath::may_sleep_now`, mirrored in
/// [`wait`]), racing with the writer's look at it after a publication or an
/// acknowledgement (`ShmOp::wake_members`, which skips the wake checks while no
/// member it stored for announced `MAYSLEEP`).
#[test]
fn loom_sleep_channel_announced_at_the_first_sleep() {
    loom::model(|| two(|m, bells| channel(m, bells, false)));
}

/// Two gather_alls between members that may sleep (`MAYSLEEP` set up front if
/// `eager`, else at the first sleep).
fn channel(mut m: Member, bells: &Bells, eager: bool) {
    if eager {
        m.set_may_sleep();
    }
    for seq in 0..2 {
        let me = m.me();
        let inp = [me as u8 + 10 * seq as u8; 8];
        let mut out = [0u8; 16];
        let mut c = m.collective(OpKind::GatherAll, 8, SyncModes::default(), seq);
        c.keep_own(&inp, &mut out);
        loop {
            let done = c.step(&mut m, &inp, &mut out);
            // shmdrive.rs, Coll::direct_step: `op.wake_members(t, ...)`.
            c.wake_members(&mut m, &mut |q| bells.ring(q));
            if done {
                break;
            }
            wait(&m, bells, &|| c.ready(), &|| c.sleep_safe());
        }
        assert_eq!(
            out.to_vec(),
            [[10 * seq as u8; 8], [1 + 10 * seq as u8; 8]].concat()
        );
    }
}

/// A gather_all of `BYREF_MIN`-byte blocks published by reference between members
/// under spin-then-block (`MAYSLEEP` announced at the first sleep): a publisher
/// completes only once its reader acknowledged, so it may sleep waiting for the
/// acknowledgement, and the reader wakes it through `ShmOp::wake_members`'s
/// acknowledgement path (its quick look at `MAYSLEEP`, after the fence loom needs).
#[test]
fn loom_sleep_by_reference_acknowledgements() {
    loom::model(|| {
        let shared = Shared::new(2, BYREF_MIN);
        let bells = Bells::new(2);
        let (s1, b1) = (shared.clone(), bells.clone());
        let h = thread::spawn(move || by_reference(&s1, Member::new(&s1, 1), &b1));
        by_reference(&shared, Member::new(&shared, 0), &bells);
        h.join().unwrap();
    });
}

/// One member of [`loom_sleep_by_reference_acknowledgements`].
fn by_reference(shared: &Shared, mut m: Member, bells: &Bells) {
    let (me, n) = (m.me(), BYREF_MIN);
    shared.write_segment(me, 0, &vec![me as u8 + 1; n]);
    // SAFETY: this member's own segment, which nothing writes while the slice lives.
    #[allow(unsafe_code)]
    let inp = unsafe { shared.segment(me, 0, n) };
    let mut out = vec![0u8; 2 * n];
    let mut c = m.collective(OpKind::GatherAll, n, SyncModes::default(), 0);
    assert!(
        c.publish_by_reference(&m, inp),
        "a segment input goes by reference"
    );
    c.keep_own(inp, &mut out);
    loop {
        let done = c.step(&mut m, inp, &mut out);
        c.wake_members(&mut m, &mut |q| bells.ring(q));
        if done {
            break;
        }
        wait(&m, bells, &|| c.ready(), &|| c.sleep_safe());
    }
    assert!(out[..n].iter().all(|&b| b == 1) && out[n..].iter().all(|&b| b == 2));
}

/// Broadcasts (two, small slots) from a root that never sleeps (`Spin`: no
/// `MAYSLEEP`) to a reader that may: the reader's only wake-up can come from the
/// root's publication, so it may sleep only once the root fences (it starts when it
/// sees the reader's `MAYSLEEP`, which it may not have at its first publication).
/// Fails (a lost wake-up) if the reader ignores `WaitOn::sleep_safe`.
#[test]
fn loom_sleep_channel_reader_of_a_spinning_root() {
    loom::model(|| {
        two(|mut m, bells| {
            let me = m.me();
            if me == 1 {
                m.set_may_sleep();
            }
            for seq in 0..2 {
                let inp = [7 + seq as u8; 8];
                let mut out = [0u8; 8];
                let mut c = m.collective(OpKind::Broadcast, 8, SyncModes::default(), seq);
                let (input, output): (&[u8], &mut [u8]) = if me == 0 {
                    (&inp, &mut [])
                } else {
                    (&[], &mut out)
                };
                c.keep_own(input, output);
                loop {
                    let done = c.step(&mut m, input, output);
                    c.wake_members(&mut m, &mut |q| bells.ring(q));
                    if done {
                        break;
                    }
                    if me == 0 {
                        // Spin: never sleeps.
                        thread::yield_now();
                    } else {
                        wait(&m, bells, &|| c.ready(), &|| c.sleep_safe());
                    }
                }
                if me == 1 {
                    assert_eq!(out, [7 + seq as u8; 8]);
                }
            }
        });
    });
}

/// Barriers (three in a row) whose every waiter sleeps: the flag barrier (`counter`
/// false: the member that stores its `EPOCH`, a `SeqCst` swap, wakes through
/// `ShmTeam::wake_fenced`) or the counter barrier (the last arrival's release swap,
/// then `wake_fenced`).
fn sleepy_barriers(counter: bool) {
    two(if counter {
        |m, bells| barriers(m, bells, true)
    } else {
        |m, bells| barriers(m, bells, false)
    });
}

fn barriers(m: Member, bells: &Bells, counter: bool) {
    for k in 0..3 {
        let mut b = if counter {
            m.counter_barrier(k, None)
        } else {
            m.barrier(k, None)
        };
        loop {
            let done = b.step(&m);
            // shmdrive.rs, Coll::direct_step: `t.wake_fenced(b.take_wake(), ...)`.
            m.wake_fenced(b.take_wake(), &mut |q| bells.ring(q));
            if done {
                break;
            }
            wait(&m, bells, &|| b.ready(), &|| true);
        }
        assert_eq!(b.entry(), (None, false));
    }
}

#[test]
fn loom_sleep_flag_barrier() {
    loom::model(|| sleepy_barriers(false));
}

#[test]
fn loom_sleep_counter_barrier() {
    loom::model(|| sleepy_barriers(true));
}
