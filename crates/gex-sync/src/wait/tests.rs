use super::*;
use std::sync::Arc;
use std::sync::atomic::AtomicU64 as StdAtomicU64;
use std::time::{Duration, Instant};

#[test]
fn policies() {
    assert_eq!(auto_policy(1, 1), WaitPolicy::Spin);
    assert_eq!(auto_policy(1, 0), WaitPolicy::Spin);
    assert_eq!(
        auto_policy(3, 2),
        WaitPolicy::SpinThenBlock {
            spins: default_spins()
        }
    );
}

#[test]
fn ready_returns_at_once_for_every_policy() {
    let bell = Doorbell::new();
    for policy in [
        WaitPolicy::Spin,
        WaitPolicy::Block,
        WaitPolicy::SpinThenBlock { spins: 10 },
    ] {
        bell.wait_until(policy, || true);
        assert!(bell.wait_until_timeout(policy, Duration::ZERO, || true));
        bell.set_may_block(true);
    }
}

#[test]
fn timeouts_expire_for_every_policy() {
    let bell = Doorbell::new();
    for may_block in [false, true] {
        bell.set_may_block(may_block);
        for policy in [
            WaitPolicy::Spin,
            WaitPolicy::Block,
            WaitPolicy::SpinThenBlock { spins: 1000 },
        ] {
            let t = Instant::now();
            assert!(!bell.wait_until_timeout(policy, Duration::from_millis(20), || false));
            let took = t.elapsed();
            assert!(took >= Duration::from_millis(20), "{policy:?}: {took:?}");
            assert!(took < Duration::from_secs(5), "{policy:?}: {took:?}");
        }
    }
    // A condition that becomes true late is still seen.
    let mut n = 0;
    assert!(
        bell.wait_until_timeout(WaitPolicy::Block, Duration::from_secs(10), || {
            n += 1;
            n > 3
        })
    );
}

/// The waiter sleeps with `Block`; the other thread publishes later and rings. The waiter
/// must be woken by `FUTEX_WAKE` (counted by the test-only `woken` field), not by the
/// safety-net timeout.
#[test]
fn block_waiter_is_woken_by_ring() {
    let bell = Arc::new(Doorbell::new());
    bell.set_may_block(true);
    let work = Arc::new(StdAtomicU64::new(0));
    let done = Arc::new(StdAtomicU64::new(0));
    let rounds = 5u64;
    let waiter = {
        let (bell, work, done) = (bell.clone(), work.clone(), done.clone());
        std::thread::spawn(move || {
            for round in 1..=rounds {
                let ok =
                    bell.wait_until_timeout(WaitPolicy::Block, Duration::from_secs(30), || {
                        work.load(std::sync::atomic::Ordering::Acquire) >= round
                    });
                assert!(ok, "round {round} timed out");
                done.store(round, std::sync::atomic::Ordering::Release);
            }
        })
    };
    for round in 1..=rounds {
        // Give the waiter time to fall asleep.
        while bell.sleepers.load(Ordering::Relaxed) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(5));
        work.store(round, std::sync::atomic::Ordering::Release);
        bell.ring();
        // Wait for the waiter to finish the round.
        while done.load(std::sync::atomic::Ordering::Acquire) != round {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    waiter.join().unwrap();
    assert!(
        bell.woken.load(Ordering::Relaxed) >= 1,
        "no futex wait ended by a wake: {bell:?}"
    );
}

/// Two threads play ping-pong through two doorbells with blocking policies; a lost wake-up
/// would cost a 100 ms safety-net nap per occurrence.
#[test]
fn ping_pong_blocking() {
    let rounds = 2_000u64;
    let bells = Arc::new([Doorbell::new(), Doorbell::new()]);
    let counters = Arc::new([StdAtomicU64::new(0), StdAtomicU64::new(0)]);
    for b in bells.iter() {
        b.set_may_block(true);
    }
    let start = Instant::now();
    let other = {
        let (bells, counters) = (bells.clone(), counters.clone());
        std::thread::spawn(move || {
            for i in 1..=rounds {
                bells[1].wait_until(WaitPolicy::SpinThenBlock { spins: 50 }, || {
                    counters[0].load(std::sync::atomic::Ordering::Acquire) >= i
                });
                counters[1].store(i, std::sync::atomic::Ordering::Release);
                bells[0].ring();
            }
        })
    };
    for i in 1..=rounds {
        counters[0].store(i, std::sync::atomic::Ordering::Release);
        bells[1].ring();
        bells[0].wait_until(WaitPolicy::Block, || {
            counters[1].load(std::sync::atomic::Ordering::Acquire) >= i
        });
    }
    other.join().unwrap();
    let took = start.elapsed();
    // Every nap here is ended by a ring within microseconds; a nap that runs into the 100 ms
    // safety net means a lost wake-up (or a badly overloaded machine, hence the tolerance).
    let naps =
        bells[0].timed_out.load(Ordering::Relaxed) + bells[1].timed_out.load(Ordering::Relaxed);
    assert!(
        naps <= 3,
        "{naps} safety-net timeouts in {rounds} rounds ({took:?}): {bells:?}"
    );
}

#[test]
fn doorbell_in_place() {
    let mut slot = std::mem::MaybeUninit::<Doorbell>::uninit();
    // SAFETY: `slot` is valid and aligned for a `Doorbell`.
    let bell = unsafe {
        Doorbell::init_in_place(slot.as_mut_ptr());
        slot.assume_init_ref()
    };
    assert!(!bell.may_block());
    bell.ring();
    bell.set_may_block(true);
    bell.ring();
    assert!(bell.may_block());
    assert_eq!(bell.word.load(Ordering::Relaxed), 0, "no sleeper, no bump");
}
