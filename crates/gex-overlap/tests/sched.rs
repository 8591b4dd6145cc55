//! Message scheduling (trains, piggybacking): a halo exchange of many small puts and a
//! put-with-signal per neighbour, in every mode, between the processes of a job started
//! by gex-testkit's runner (the conduit `GEX_CONDUIT` names: smp by default, where
//! `auto` copies directly; `ci/test` also runs this file over ofi `tcp;ofi_rxm`, where
//! `auto` coalesces) and between thread ranks of this process; the program's own
//! active messages carrying scheduled puts (`sched_request`: the handler sees them in
//! place, replies, bodies too large to share a message with the train); and the
//! documented errors.
#![allow(unsafe_code)] // a handler reads its own segment (byte-wise atomic copies)

mod common;

use gex::Job;
use gex::spi::Conduit;
use gex_coll::CollExt;
use gex_core::boot::Singleton;
use gex_core::loopback::Loopback;
use gex_core::{Am, AmError, Body, Client, ClientBuilder, EpAddr, HandlerId, Token};
use gex_overlap::{Overlap, OverlapError, OverlapExt, SchedExt, SchedMode};
use gex_rma::{GlobalPtr, Rma};
use gex_testkit::procs::Procs;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Puts per neighbour per iteration, and their size.
const K: usize = 32;
const SZ: usize = 24;
/// Where a rank's left and right neighbours put (the signal words are at 0 and 8).
const FROM_LEFT: usize = 4096;
const FROM_RIGHT: usize = 8192;

fn byte(rank: u32, it: u64, k: usize) -> u8 {
    (rank as u8).wrapping_mul(31) ^ (it as u8).wrapping_mul(7) ^ k as u8
}

/// A ring job's start: endpoint 0 scheduling in `mode`, the world team, and this
/// rank with its left and right neighbours.
fn ring_start<C: Conduit>(
    client: &Client<C>,
    mode: SchedMode,
) -> (gex_core::OwnedEndpoint<C>, gex_core::Team, [u32; 3]) {
    let mut ep = client.endpoint(0).unwrap();
    ep.set_sched(mode).unwrap();
    let w = ep.world().clone();
    let (me, n) = (w.rank(), w.size());
    (ep, w, [me, (me + n - 1) % n, (me + 1) % n])
}

struct Halo {
    mode: SchedMode,
    iters: u64,
}

impl Job for Halo {
    type Output = ();
    fn run<C: Conduit>(self, client: Client<C>) {
        let (mut ep, w, [me, left, right]) = ring_start(&client, self.mode);
        for it in 1..=self.iters {
            // I am my right neighbour's left one, and my left neighbour's right one.
            for (peer, region, sig) in [(right, FROM_LEFT, 0), (left, FROM_RIGHT, 8)] {
                let at = EpAddr::new(peer, 0);
                for k in 0..K {
                    let d = [byte(me, it, k); SZ];
                    ep.sched_put(GlobalPtr::new(at, region + k * SZ), &d)
                        .unwrap();
                }
                ep.sched_signal(GlobalPtr::new(at, sig), 1).unwrap();
            }
            // Every put of an iteration is in place when its signal is seen.
            assert_eq!(ep.signal_wait(0, it).unwrap(), it);
            assert_eq!(ep.signal_wait(8, it).unwrap(), it);
            let seg = ep.segment();
            let mut got = [0u8; SZ];
            for k in 0..K {
                seg.read(FROM_LEFT + k * SZ, &mut got).unwrap();
                assert_eq!(got, [byte(left, it, k); SZ], "it {it} k {k} from {left}");
                seg.read(FROM_RIGHT + k * SZ, &mut got).unwrap();
                assert_eq!(got, [byte(right, it, k); SZ], "it {it} k {k} from {right}");
            }
            // Nobody writes the next iteration's halos before everyone has read these.
            ep.barrier(&w).unwrap();
        }
        ep.retire_all().unwrap();
        let s = ep.sched_stats().unwrap();
        let total = 2 * K as u64 * self.iters;
        assert_eq!(
            s.direct + s.plain + s.coalesced,
            total,
            "{:?}: {s:?}",
            self.mode
        );
        assert_eq!(s.signals, 2 * self.iters, "{s:?}");
        assert_eq!(s.dropped, 0, "{s:?}");
        match self.mode {
            SchedMode::Plain => assert_eq!(s.coalesced, 0, "{s:?}"),
            SchedMode::Train | SchedMode::Piggyback => {
                assert_eq!(s.coalesced, total, "{s:?}");
                // No poll between the puts and their signal: every signal carried them.
                assert_eq!(s.piggybacked, 2 * self.iters, "{s:?}");
            }
            // Directly into mapped peers, or coalesced over the network.
            _ => assert!(s.direct == total || s.coalesced == total, "{s:?}"),
        }
    }
}

/// The rank processes run the test function again from its start: the mode of the
/// job goes to them in this variable (a mode captured by the body would be the
/// loop's first in every job).
const MODE_VAR: &str = "SCHED_TEST_MODE";

fn mode_name(mode: SchedMode) -> &'static str {
    match mode {
        SchedMode::Plain => "plain",
        SchedMode::Train => "train",
        SchedMode::Piggyback => "piggyback",
        _ => "auto",
    }
}

/// In a rank: the job's mode (`MODE_VAR`).
fn job_mode() -> SchedMode {
    match std::env::var(MODE_VAR).as_deref() {
        Ok("plain") => SchedMode::Plain,
        Ok("train") => SchedMode::Train,
        Ok("piggyback") => SchedMode::Piggyback,
        Ok("auto") => SchedMode::Auto,
        other => panic!("{MODE_VAR}={other:?}"),
    }
}

/// Every scheduling mode.
const MODES: [SchedMode; 4] = [
    SchedMode::Auto,
    SchedMode::Plain,
    SchedMode::Train,
    SchedMode::Piggyback,
];

/// One job of 3 processes in `mode`: every rank runs the job `job` makes for the mode
/// that reaches it in [`MODE_VAR`].
fn procs<J: Job>(mode: SchedMode, job: fn(SchedMode) -> J) {
    Procs::new(3)
        .timeout(std::time::Duration::from_secs(120))
        .env(MODE_VAR, mode_name(mode))
        .run(|boot| {
            let b = gex::builder().layer::<Overlap>().segment_size(1 << 16);
            gex::init_with_boot(b, boot, None, job(job_mode())).unwrap();
        })
        .assert_success();
}

/// Every mode in turn, each a job of 3 processes.
#[test]
fn procs_halo_every_mode_3() {
    for mode in MODES {
        procs(mode, |mode| Halo { mode, iters: 20 });
    }
}

/// One job of 3 thread ranks of this process per mode of `modes`, every rank running
/// the job `job` makes for the mode.
fn threads<J: Job<Output = ()>>(modes: &[SchedMode], job: fn(SchedMode) -> J) {
    for &mode in modes {
        gex::boot::threads::run(3, |boot| {
            let b = gex::builder().layer::<Overlap>().segment_size(1 << 16);
            gex::init_with_boot(b, Box::new(boot), None, job(mode))
        })
        .unwrap();
    }
}

/// Thread ranks of this process: every segment mapped, trains forced and automatic.
#[test]
fn threads_halo_3() {
    threads(&[SchedMode::Auto, SchedMode::Train], |mode| Halo {
        mode,
        iters: 20,
    });
}

/// The payload of a program request of iteration `it`, of `len` bytes.
fn body_bytes(it: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13) ^ it as u8)
        .collect()
}

/// Every iteration a multiple of this one sends a body too large to share a message
/// with the train (the train leaves first, the request follows).
const LARGE_EVERY: u64 = 4;

/// A ring where each rank schedules `K` puts to its right neighbour, then sends it a
/// program request with `sched_request`; the neighbour's handler checks that every
/// put of the iteration is already in its segment and the body is intact, and on odd
/// iterations replies (the program's reply, so the layer acknowledges by a request).
struct Carry {
    mode: SchedMode,
    iters: u64,
}

/// What a rank's handlers saw: requests (and the last iteration), puts or bodies
/// found wrong, replies.
#[derive(Default)]
struct Seen {
    requests: AtomicU64,
    wrong: AtomicU64,
    replies: AtomicU64,
}

impl Job for Carry {
    type Output = ();
    fn run<C: Conduit>(self, client: Client<C>) {
        let (mut ep, w, [me, left, right]) = ring_start(&client, self.mode);
        let seen = Arc::new(Seen::default());
        let (sn, base) = (seen.clone(), ep.segment().as_ptr() as usize);
        // Same order on every rank: the same handler indices.
        let back = ep
            .register(move |_t: &mut Token<'_>, _am: Am<'_>| {
                sn.replies.fetch_add(1, Ordering::AcqRel);
            })
            .unwrap();
        let sn = seen.clone();
        let on_halo = ep
            .register(move |t: &mut Token<'_>, am: Am<'_>| {
                let (it, from) = (u64::from(am.args()[0]), am.src().rank);
                let mut wrong = 0;
                let mut got = [0u8; SZ];
                for k in 0..K {
                    // SAFETY: inside this endpoint's segment (64 KiB), mapped while
                    // the endpoint lives; a byte-wise atomic copy.
                    unsafe {
                        gex_sync::copy::atomic_read(
                            (base + FROM_LEFT + k * SZ) as *const u8,
                            &mut got,
                        )
                    };
                    wrong += u64::from(got != [byte(from, it, k); SZ]);
                }
                wrong += u64::from(am.payload() != body_bytes(it, am.payload().len()));
                wrong += u64::from(am.args()[1] != from || !t.is_request());
                sn.wrong.fetch_add(wrong, Ordering::AcqRel);
                if it % 2 == 1 {
                    t.reply(back, Body::short(&[])).unwrap();
                }
                sn.requests.fetch_add(1, Ordering::AcqRel);
            })
            .unwrap();
        let at = EpAddr::new(right, 0);
        let large = ep.max_medium(at) - 8;
        let mut odd = 0;
        for it in 1..=self.iters {
            for k in 0..K {
                let d = [byte(me, it, k); SZ];
                ep.sched_put(GlobalPtr::new(at, FROM_LEFT + k * SZ), &d)
                    .unwrap();
            }
            let len = if it % LARGE_EVERY == 0 { large } else { 40 };
            let payload = body_bytes(it, len);
            ep.sched_request(at, on_halo, Body::medium(&[it as u32, me], &payload))
                .unwrap();
            odd += it % 2;
            // My left neighbour's request of this iteration, and my right one's reply.
            ep.wait_until(|| {
                seen.requests.load(Ordering::Acquire) == it
                    && seen.replies.load(Ordering::Acquire) == odd
            });
            // Nobody writes the next iteration's halo before everyone has checked this.
            ep.barrier(&w).unwrap();
        }
        ep.retire_all().unwrap();
        assert_eq!(
            seen.wrong.load(Ordering::Acquire),
            0,
            "{:?} from {left}",
            self.mode
        );
        let s = ep.sched_stats().unwrap();
        let total = K as u64 * self.iters;
        assert_eq!(
            s.direct + s.plain + s.coalesced,
            total,
            "{:?}: {s:?}",
            self.mode
        );
        assert_eq!(
            (s.requests, s.signals, s.dropped),
            (self.iters, 0, 0),
            "{s:?}"
        );
        let large = self.iters / LARGE_EVERY;
        match self.mode {
            SchedMode::Plain => assert_eq!((s.coalesced, s.carried), (0, 0), "{s:?}"),
            SchedMode::Train | SchedMode::Piggyback => {
                assert_eq!(s.coalesced, total, "{s:?}");
                // No poll between the puts and the request: each carried them, but
                // the large ones, whose train left first.
                assert_eq!(s.carried, self.iters - large, "{s:?}");
                assert_eq!(s.trains, self.iters, "{s:?}");
            }
            // Directly into mapped peers, or coalesced over the network and, once
            // the statistics see every interval end with a request, carried.
            _ => assert!(
                s.direct == total || (s.coalesced == total && s.carried > 0),
                "{s:?}"
            ),
        }
    }
}

/// Program requests carrying the puts before them, every mode, 3 processes.
#[test]
fn procs_requests_carry_puts_every_mode_3() {
    for mode in MODES {
        procs(mode, |mode| Carry { mode, iters: 16 });
    }
}

/// The same between thread ranks of this process.
#[test]
fn threads_requests_carry_puts_3() {
    threads(&[SchedMode::Auto, SchedMode::Piggyback], |mode| Carry {
        mode,
        iters: 16,
    });
}

/// A client of one rank over loopback, with gex-rma and the overlap layer.
fn loopback() -> Client<Loopback> {
    ClientBuilder::new()
        .layer::<Rma>()
        .layer::<Overlap>()
        .segment_size(1 << 16)
        .init::<Loopback>(Box::new(Singleton::new()))
        .unwrap()
}

/// A train leaves on the endpoint's next poll without a signal or a flush (mode
/// `train`), and waits for the flush in mode `piggyback`.
#[test]
fn trains_leave_on_the_next_poll_unless_held() {
    for (mode, on_poll) in [(SchedMode::Train, true), (SchedMode::Piggyback, false)] {
        let client = loopback();
        let mut ep = client.endpoint(0).unwrap();
        ep.set_sched(mode).unwrap();
        let me = ep.addr();
        ep.sched_put(GlobalPtr::new(me, 100), &[9; 5]).unwrap();
        for _ in 0..10 {
            gex_core::layer::poll(&mut ep);
        }
        let mut got = [0u8; 5];
        ep.segment().read(100, &mut got).unwrap();
        assert_eq!(got == [9; 5], on_poll, "{mode:?}");
        assert_eq!(ep.sched_stats().unwrap().trains, u64::from(on_poll));
        ep.sched_flush().unwrap();
        ep.segment().read(100, &mut got).unwrap();
        assert_eq!(got, [9; 5], "{mode:?}");
        // A full train leaves by itself: 4096-byte trains hold 15 puts of 256 bytes.
        for i in 0..16 {
            ep.sched_put(GlobalPtr::new(me, 1024 + 256 * i), &[i as u8; 256])
                .unwrap();
        }
        // (the first put's train left on the poll or at the flush: one before)
        assert_eq!(ep.sched_stats().unwrap().trains, 2, "{mode:?}");
        ep.sched_flush().unwrap();
        ep.segment().read(1024 + 256 * 15, &mut got).unwrap();
        assert_eq!(got, [15; 5]);
    }
}

#[test]
fn bad_input_gives_documented_errors() {
    let client = loopback();
    let mut ep = client.endpoint(0).unwrap();
    let me = ep.addr();
    for mode in [SchedMode::Auto, SchedMode::Plain, SchedMode::Train] {
        ep.set_sched(mode).unwrap();
        for off in [(1 << 16) - 3, usize::MAX - 1] {
            let e = ep.sched_put(GlobalPtr::new(me, off), &[1; 4]).unwrap_err();
            assert!(matches!(e, OverlapError::OutOfSegment { .. }), "{e}");
        }
    }
    for off in [4, (1 << 16) - 4, usize::MAX - 7] {
        let e = ep.sched_signal(GlobalPtr::new(me, off), 1).unwrap_err();
        assert!(matches!(e, OverlapError::OutOfSegment { .. }), "{off}: {e}");
        let e = ep.signal_wait(off, 1).unwrap_err();
        assert!(matches!(e, OverlapError::OutOfSegment { .. }), "{off}: {e}");
    }
    assert_eq!(ep.sched_stats().unwrap(), Default::default());
    // Program requests: a Long body, reserved and unregistered handlers, too many
    // arguments, too large a payload, no such rank; nothing is sent.
    let h = ep.register(|_t: &mut Token<'_>, _am: Am<'_>| {}).unwrap();
    ep.set_sched(SchedMode::Piggyback).unwrap();
    ep.sched_put(GlobalPtr::new(me, 100), &[1; 4]).unwrap();
    let e = ep
        .sched_request(me, h, Body::long(&[], &[1; 8], 64))
        .unwrap_err();
    assert!(matches!(e, OverlapError::LongRequest), "{e}");
    let reserved = HandlerId::at_any(16);
    let e = ep
        .sched_request(me, reserved, Body::short(&[]))
        .unwrap_err();
    assert!(
        matches!(e, OverlapError::Am(AmError::ReservedHandler(16))),
        "{e}"
    );
    let e = ep
        .sched_request(me, HandlerId::at(200), Body::short(&[]))
        .unwrap_err();
    assert!(
        matches!(e, OverlapError::Am(AmError::UnregisteredHandler(200))),
        "{e}"
    );
    let args = [0u32; 17];
    let e = ep.sched_request(me, h, Body::short(&args)).unwrap_err();
    assert!(
        matches!(e, OverlapError::Am(AmError::TooManyArgs { given: 17, .. })),
        "{e}"
    );
    let big = vec![0u8; ep.max_medium(me) + 1];
    let e = ep
        .sched_request(me, h, Body::medium(&[], &big))
        .unwrap_err();
    assert!(
        matches!(e, OverlapError::Am(AmError::PayloadTooLarge { .. })),
        "{e}"
    );
    let e = ep
        .sched_request(EpAddr::new(5, 0), h, Body::short(&[]))
        .unwrap_err();
    assert!(
        matches!(e, OverlapError::Am(AmError::BadRank { rank: 5, .. })),
        "{e}"
    );
    let s = ep.sched_stats().unwrap();
    assert_eq!((s.requests, s.carried, s.trains), (0, 0, 0), "{s:?}");
    ep.sched_flush().unwrap();
    ep.set_sched(SchedMode::Auto).unwrap();
    drop(ep);
    // Without the layer.
    let client = common::rma_only_client(1 << 16);
    let mut ep = client.endpoint(0).unwrap();
    let me = ep.addr();
    let e = ep.sched_put(GlobalPtr::new(me, 0), &[1]).unwrap_err();
    assert!(matches!(e, OverlapError::NotAttached), "{e}");
    assert!(matches!(ep.sched_flush(), Err(OverlapError::NotAttached)));
    let h = ep.register(|_t: &mut Token<'_>, _am: Am<'_>| {}).unwrap();
    let e = ep.sched_request(me, h, Body::short(&[])).unwrap_err();
    assert!(matches!(e, OverlapError::NotAttached), "{e}");
}

/// Over loopback, in every mode: the program's handler sees every put scheduled
/// before its request, with and without a train waiting, with a body that fits the
/// train's message and one that does not, replying or not.
#[test]
fn a_request_s_handler_sees_the_puts_before_it() {
    for mode in [
        SchedMode::Auto,
        SchedMode::Plain,
        SchedMode::Train,
        SchedMode::Piggyback,
    ] {
        let client = loopback();
        let mut ep = client.endpoint(0).unwrap();
        ep.set_sched(mode).unwrap();
        let me = ep.addr();
        let base = ep.segment().as_ptr() as usize;
        let seen = Arc::new(Seen::default());
        let sn = seen.clone();
        let back = ep
            .register(move |_t: &mut Token<'_>, _am: Am<'_>| {
                sn.replies.fetch_add(1, Ordering::AcqRel);
            })
            .unwrap();
        let sn = seen.clone();
        let h = ep
            .register(move |t: &mut Token<'_>, am: Am<'_>| {
                let it = am.args()[0] as u8;
                let mut got = [0u8; 64];
                // SAFETY: inside this endpoint's segment, mapped while it lives.
                unsafe { gex_sync::copy::atomic_read((base + 1024) as *const u8, &mut got) };
                sn.wrong
                    .fetch_add(u64::from(got != [it; 64]), Ordering::AcqRel);
                if am.args()[1] == 1 {
                    t.reply(back, Body::short(&[])).unwrap();
                }
                sn.requests.fetch_add(1, Ordering::AcqRel);
            })
            .unwrap();
        let large = vec![0u8; ep.max_medium(me) - 4];
        for it in 1..=6u32 {
            for k in 0..8 {
                ep.sched_put(GlobalPtr::new(me, 1024 + 8 * k), &[it as u8; 8])
                    .unwrap();
            }
            let args = [it, it % 2];
            let body = if it > 3 {
                Body::medium(&args, &large[..])
            } else {
                Body::short(&args)
            };
            ep.sched_request(me, h, body).unwrap();
            ep.wait_until(|| seen.requests.load(Ordering::Acquire) == u64::from(it));
        }
        ep.wait_until(|| seen.replies.load(Ordering::Acquire) == 3);
        ep.sched_flush().unwrap();
        assert_eq!(seen.wrong.load(Ordering::Acquire), 0, "{mode:?}");
        let s = ep.sched_stats().unwrap();
        assert_eq!(s.requests, 6, "{mode:?}: {s:?}");
        let carried = match mode {
            SchedMode::Train | SchedMode::Piggyback => 3, // the large ones went apart
            _ => 0,                                       // direct (loopback) or plain
        };
        assert_eq!(s.carried, carried, "{mode:?}: {s:?}");
    }
}
