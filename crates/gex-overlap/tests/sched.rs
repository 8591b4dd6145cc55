//! Message scheduling (trains, piggybacking): a halo exchange of many small puts and a
//! put-with-signal per neighbour, in every mode, between the processes of a job started
//! by gex-testkit's runner (the conduit `GEX_CONDUIT` names: smp by default, where
//! `auto` copies directly; `ci/test` also runs this file over ofi `tcp;ofi_rxm`, where
//! `auto` coalesces) and between thread ranks of this process; and the documented
//! errors.

mod common;

use gex::Job;
use gex::spi::Conduit;
use gex_coll::CollExt;
use gex_core::boot::Singleton;
use gex_core::loopback::Loopback;
use gex_core::{Client, ClientBuilder, EpAddr};
use gex_overlap::{Overlap, OverlapError, OverlapExt, SchedExt, SchedMode};
use gex_rma::{GlobalPtr, Rma};
use gex_testkit::procs::Procs;

/// Puts per neighbour per iteration, and their size.
const K: usize = 32;
const SZ: usize = 24;
/// Where a rank's left and right neighbours put (the signal words are at 0 and 8).
const FROM_LEFT: usize = 4096;
const FROM_RIGHT: usize = 8192;

fn byte(rank: u32, it: u64, k: usize) -> u8 {
    (rank as u8).wrapping_mul(31) ^ (it as u8).wrapping_mul(7) ^ k as u8
}

struct Halo {
    mode: SchedMode,
    iters: u64,
}

impl Job for Halo {
    type Output = ();
    fn run<C: Conduit>(self, client: Client<C>) {
        let mut ep = client.endpoint(0).unwrap();
        ep.set_sched(self.mode).unwrap();
        let w = ep.world().clone();
        let (me, n) = (w.rank(), w.size());
        let (left, right) = ((me + n - 1) % n, (me + 1) % n);
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

fn procs(mode: SchedMode) {
    Procs::new(3)
        .timeout(std::time::Duration::from_secs(120))
        .run(move |boot| {
            let b = gex::builder().layer::<Overlap>().segment_size(1 << 16);
            gex::init_with_boot(b, boot, None, Halo { mode, iters: 20 }).unwrap();
        })
        .assert_success();
}

/// Every mode in turn, each a job of 3 processes.
#[test]
fn procs_halo_every_mode_3() {
    for mode in [
        SchedMode::Auto,
        SchedMode::Plain,
        SchedMode::Train,
        SchedMode::Piggyback,
    ] {
        procs(mode);
    }
}

/// Thread ranks of this process: every segment mapped, trains forced and automatic.
#[test]
fn threads_halo_3() {
    for mode in [SchedMode::Auto, SchedMode::Train] {
        gex::boot::threads::run(3, |boot| {
            let b = gex::builder().layer::<Overlap>().segment_size(1 << 16);
            gex::init_with_boot(b, Box::new(boot), None, Halo { mode, iters: 20 })
        })
        .unwrap();
    }
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
    drop(ep);
    // Without the layer.
    let client = common::rma_only_client(1 << 16);
    let mut ep = client.endpoint(0).unwrap();
    let me = ep.addr();
    let e = ep.sched_put(GlobalPtr::new(me, 0), &[1]).unwrap_err();
    assert!(matches!(e, OverlapError::NotAttached), "{e}");
    assert!(matches!(ep.sched_flush(), Err(OverlapError::NotAttached)));
}
