//! The registration cache of large native transfers (`Ibv::register`), over the
//! emulation, counting `reg_mr` calls through the emulated device: repeated transfers
//! from and into a registered buffer register it once per endpoint; unregistered
//! memory registers per transfer (never served a cached registration, even at an
//! address that was registered before); the cache is bounded (`GEX_IBV_REG_CACHE`,
//! least recently used evicted); dropping the guard drops the registrations.

use gex_core::boot::Bootstrap;
use gex_core::{Blocking, EpAddr};
use gex_rma::{GlobalPtr, RmaExt};
use gex_testkit::boot::ThreadJob;
use std::sync::atomic::{AtomicBool, Ordering};

mod common;

const BIG: usize = 256 << 10;

fn at(off: usize) -> GlobalPtr<u8> {
    GlobalPtr::new(EpAddr::rank(1), off)
}

#[test]
fn registered_buffers_hit_the_cache_and_stay_bounded() {
    let job = ThreadJob::new(2);
    let done = AtomicBool::new(false);
    job.run(|boot| {
        let rank = boot.rank();
        let client = common::emu_client(
            gex_testkit::rma::client_builder(),
            boot,
            &[("GEX_IBV_REG_CACHE", "2")],
            1 << 20,
        );
        let mut ep = client.endpoint(0).expect("ep");
        if rank == 0 {
            let ibv = client.conduit().clone();
            let regs = || ibv.emu_counts(0).expect("emulated").reg_mrs;
            let live = || ibv.emu_counts(0).expect("emulated").live_mrs;
            let pattern = |seed: u8| -> Vec<u8> {
                (0..BIG).map(|i| (i as u8).wrapping_mul(7) ^ seed).collect()
            };
            let check = |ep: &mut gex_core::OwnedEndpoint<_>, off: usize, want: &[u8]| {
                let mut back = vec![0u8; want.len()];
                ep.get(&mut back[..], at(off), Blocking).expect("get");
                assert!(back == want, "the target holds other bytes at {off}");
            };

            // Unregistered memory: one registration per large transfer.
            let plain = pattern(1);
            let r0 = regs();
            for _ in 0..5 {
                ep.put(at(0), &plain, Blocking).expect("put");
            }
            assert_eq!(regs() - r0, 5);
            assert_eq!(ibv.stats().reg_cache_hits, 0);
            check(&mut ep, 0, &plain); // (the get registers its buffer: +1)

            // A registered buffer: registered on first use, then hits.
            let mut buf = pattern(2);
            let r1 = regs();
            let mut reg = ibv.register(&mut buf);
            for _ in 0..5 {
                ep.put(at(0), &reg, Blocking).expect("put");
            }
            // A sub-range, and a get into the buffer, hit too.
            ep.put(at(BIG), &reg[4096..4096 + 100_000], Blocking)
                .expect("put");
            ep.get(&mut reg[..], at(0), Blocking).expect("get");
            assert_eq!(regs() - r1, 1, "one registration for 7 transfers");
            let s = ibv.stats();
            assert_eq!((s.reg_cache_misses, s.reg_cache_hits), (1, 6), "{s:?}");
            let want: Vec<u8> = reg.to_vec();
            check(&mut ep, 0, &want);

            // Bounded: with room for 2, three buffers used in turn evict the least
            // recently used.
            let (mut a, mut b) = (pattern(3), pattern(4));
            let ra = ibv.register(&mut a);
            let rb = ibv.register(&mut b);
            let r2 = regs();
            ep.put(at(0), &ra, Blocking).expect("put a"); // miss: [reg, a]
            ep.put(at(0), &rb, Blocking).expect("put b"); // miss, evicts reg: [a, b]
            ep.put(at(0), &reg, Blocking).expect("put reg"); // miss, evicts a: [b, reg]
            ep.put(at(0), &rb, Blocking).expect("put b"); // hit
            let s = ibv.stats();
            assert_eq!(regs() - r2, 3, "{s:?}");
            assert_eq!(
                (s.reg_cache_misses, s.reg_cache_hits, s.reg_cache_evictions),
                (4, 7, 2),
                "{s:?}"
            );
            check(&mut ep, 0, &rb);

            // Unregistering drops the endpoint's registrations (at its next large
            // transfer), and the same memory, now unregistered and changed, is
            // registered per transfer: no stale registration serves it.
            let live_before = live();
            drop((ra, rb, reg));
            buf.iter_mut().for_each(|x| *x = !*x);
            let r3 = regs();
            let hits = ibv.stats().reg_cache_hits;
            ep.put(at(0), &buf, Blocking).expect("put");
            assert_eq!(regs() - r3, 1);
            assert_eq!(ibv.stats().reg_cache_hits, hits);
            assert_eq!(
                live(),
                live_before - 2,
                "the two cached registrations are gone"
            );
            check(&mut ep, 0, &buf);
            done.store(true, Ordering::Release);
        } else {
            // The target polls: its first contact with rank 0 (lazy wire-up) needs it
            // to answer once; RDMA needs nothing more from it.
            ep.wait_until(|| done.load(Ordering::Acquire));
        }
        gex_testkit::finalize(ep, client).expect("finalize");
    })
    .expect("job");
}
