//! Demand-driven gets and puts between ranks of a multi-process job started by
//! gex-testkit's runner, on the conduit the facade selects (`GEX_CONDUIT`, default
//! smp; with `--features gex/ofi` and `GEX_CONDUIT=ofi`, the hybrid ofi conduit, whose
//! same-host ranks map each other's segments with `GEX_HYBRID=1`); and on thread ranks
//! of this test process (gex-boot's thread bootstrap over smp: one fault handler and
//! registry for every rank's buffers, one mover per rank).

use gex::Job;
use gex::spi::Conduit;
use gex_core::{Blocking, Client};
use gex_overlap::{Decomp, Overlap, OverlapBuf, OverlapExt};
use gex_rma::{GlobalPtr, RmaExt};
use gex_testkit::procs::Procs;

fn pattern(rank: u32, i: usize) -> u8 {
    (i.wrapping_mul(13) as u8) ^ (rank as u8).wrapping_mul(101) ^ ((i >> 12) as u8)
}

/// Whether the transfers to the peer are demand-driven here: always when the peer's
/// segment is mapped (smp, or ofi with `GEX_HYBRID=1`); over the network (ofi on one
/// host, `GEX_HYBRID` unset) only with a progress thread (native RMA strips retired by
/// the layer's progress hook), otherwise done during the call.
fn expect_demand() -> bool {
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    var("GEX_CONDUIT") != "ofi" || var("GEX_HYBRID") == "1" || var("GEX_PROGRESS_THREAD") == "1"
}

/// `mapped`: the ranks are thread ranks of one process over smp (every segment
/// mapped, so every transfer is demand-driven).
struct Exchange {
    mapped: bool,
}

impl Job for Exchange {
    type Output = ();
    fn run<C: Conduit>(self, client: Client<C>) {
        use gex_coll::CollExt;
        let mut ep = client.endpoint(0).unwrap();
        let w = ep.world().clone();
        let (me, n) = (w.rank(), w.size());
        let len = 2 << 20;
        let data: Vec<u8> = (0..len).map(|i| pattern(me, i)).collect();
        ep.put(GlobalPtr::<u8>::new(ep.addr(), 0), &data, Blocking)
            .unwrap();
        ep.barrier(&w).unwrap();
        let peer = (me + 1) % n;
        let src = GlobalPtr::<u8>::new(gex_core::EpAddr::new(peer, 0), 0);
        for (round, d) in [Decomp::Auto, Decomp::Bytes(64 << 10), Decomp::Count(3)]
            .into_iter()
            .enumerate()
        {
            ep.set_decomp(d, 64 << 10).unwrap();
            let mut buf = OverlapBuf::new(len).unwrap();
            let issued = ep.get_demand(&mut buf, 0, src, len).unwrap();
            assert!(issued.strips >= 1);
            assert_eq!(issued.demand, self.mapped || expect_demand(), "{issued:?}");
            // Two threads stream through the buffer from both ends.
            std::thread::scope(|s| {
                let b = &buf;
                s.spawn(move || {
                    for i in (0..len).step_by(1000) {
                        assert_eq!(b[i], pattern(peer, i), "round {round} byte {i}");
                    }
                });
                for i in (0..len).rev().step_by(999) {
                    assert_eq!(b[i], pattern(peer, i), "round {round} byte {i}");
                }
            });
            ep.retire_all().unwrap();
        }
        // A put from a protected source into the peer's second MiB region.
        let mut out = OverlapBuf::new(1 << 20).unwrap();
        out.iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b = pattern(me + 7, i));
        let dst = GlobalPtr::<u8>::new(gex_core::EpAddr::new(peer, 0), 4 << 20);
        let issued = ep.put_demand(dst, &out, 0, 1 << 20).unwrap();
        assert_eq!(issued.demand, self.mapped || expect_demand(), "{issued:?}");
        out.iter_mut().for_each(|b| *b = 0);
        ep.retire_all().unwrap();
        ep.barrier(&w).unwrap();
        let from = (me + n - 1) % n;
        let mut got = vec![0u8; 1 << 20];
        ep.get(&mut got[..], GlobalPtr::new(ep.addr(), 4 << 20), Blocking)
            .unwrap();
        for (i, &b) in got.iter().enumerate() {
            assert_eq!(b, pattern(from + 7, i), "put byte {i}");
        }
        ep.barrier(&w).unwrap();
        drop(ep);
        client.finalize().unwrap();
    }
}

fn launch(ranks: u32) {
    launch_env(ranks, &[]);
}

fn launch_env(ranks: u32, env: &[(&str, &str)]) {
    env.iter()
        .fold(Procs::new(ranks), |p, &(k, v)| p.env(k, v))
        .timeout(std::time::Duration::from_secs(300))
        .run(|boot| {
            let b = gex::builder().layer::<Overlap>().segment_size(8 << 20);
            gex::init_with_boot(b, boot, None, Exchange { mapped: false }).unwrap();
        })
        .assert_success();
}

#[test]
fn procs_exchange_2() {
    launch(2);
}

#[test]
fn procs_exchange_3() {
    launch(3);
}

/// With a progress thread: on ofi across the network, native RMA strips that the
/// progress thread's polls retire while the ranks wait in the fault handler.
#[test]
fn procs_exchange_progress_thread_2() {
    launch_env(
        2,
        &[("GEX_PROGRESS_THREAD", "1"), ("GEX_OVERLAP_TRACE", "1")],
    );
}

/// Three thread ranks of this process: every rank's faults go through the one handler
/// of the process, every rank has its own mover.
#[test]
fn threads_exchange_3() {
    gex::boot::threads::run(3, |boot| {
        let b = gex::builder().layer::<Overlap>().segment_size(8 << 20);
        gex::init_with_boot(b, Box::new(boot), Some("smp"), Exchange { mapped: true }).unwrap();
    })
    .unwrap();
}
