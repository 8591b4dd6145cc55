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
        let (mut ep, w, me, n) = start(&client);
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
        finish(client, ep, &w);
    }
}

/// A job's start: endpoint 0 of `client`, its world team, this rank and the team's
/// size.
fn start<C: Conduit>(client: &Client<C>) -> (Box<gex_core::Endpoint<C>>, gex_core::Team, u32, u32) {
    let ep = client.endpoint(0).unwrap();
    let w = ep.world().clone();
    let (me, n) = (w.rank(), w.size());
    (ep, w, me, n)
}

/// A job's end: a barrier of `w`, then the endpoint closed and `client` finalized.
fn finish<C: Conduit>(client: Client<C>, mut ep: Box<gex_core::Endpoint<C>>, w: &gex_core::Team) {
    use gex_coll::CollExt;
    ep.barrier(w).unwrap();
    drop(ep);
    client.finalize().unwrap();
}

fn launch(ranks: u32) {
    launch_env(ranks, &[]);
}

fn launch_env(ranks: u32, env: &[(&str, &str)]) {
    launch_job(ranks, env, Exchange { mapped: false });
}

/// Runs `job` on `ranks` rank processes with `env` set (the overlap layer, 8 MiB
/// segments, at most 300 s) and asserts that the job succeeded.
fn launch_job<J: gex::Job>(ranks: u32, env: &[(&str, &str)], job: J) {
    env.iter()
        .fold(Procs::new(ranks), |p, &(k, v)| p.env(k, v))
        .timeout(std::time::Duration::from_secs(300))
        .run(move |boot| {
            let b = gex::builder().layer::<Overlap>().segment_size(8 << 20);
            gex::init_with_boot(b, boot, None, job).unwrap();
        })
        .assert_success();
}

/// The cases (each marked `#[test]`): `fn name() => the test's whole body;`.
macro_rules! job_tests {
    ($($(#[$m:meta])* fn $name:ident() => $run:expr;)*) => {
        $(
            $(#[$m])*
            fn $name() {
                $run;
            }
        )*
    };
}

job_tests! {
    #[test]
    fn procs_exchange_2() => launch(2);
    #[test]
    fn procs_exchange_3() => launch(3);
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

/// The bytes of rank `r`'s delta buffer after round `round`: a base pattern, with the
/// pages `p % 5 == round % 5` rewritten in each round up to `round`.
fn delta_byte(r: u32, round: u32, i: usize, pg: usize) -> u8 {
    let p = i / pg;
    let last = (1..=round).rev().find(|k| p % 5 == (*k as usize) % 5);
    match last {
        None => pattern(r, i),
        Some(k) => pattern(r + 31 * k, i),
    }
}

/// Delta puts between ranks: each rank sends its buffer to the next one's segment
/// every round, after changing a fifth of its pages (by two threads in OS-triggered
/// mode, marked in annotated mode); the receiver checks every byte. Then a misuse
/// (a page written after it was flushed) reported, the final bytes still delivered.
struct DeltaExchange {
    mode: gex_overlap::Tracking,
}

impl Job for DeltaExchange {
    type Output = ();
    fn run<C: Conduit>(self, client: Client<C>) {
        use gex_coll::CollExt;
        use gex_overlap::{DeltaBuf, DeltaExt, OverlapError, Tracking, page_size};
        let (mut ep, w, me, n) = start(&client);
        let pg = page_size();
        let len = 100 * pg;
        let peer = (me + 1) % n;
        let from = (me + n - 1) % n;
        let dst = GlobalPtr::<u8>::new(gex_core::EpAddr::new(peer, 0), 1 << 20);
        let mut buf = DeltaBuf::new(len, self.mode).unwrap();
        for (i, b) in buf.iter_mut().enumerate() {
            *b = pattern(me, i);
        }
        // No window was made at `dst` (its length word reads 0), mapped or not.
        assert!(matches!(
            ep.delta_send_begin(&mut buf, dst),
            Err(OverlapError::OutOfBuffer { buf_len: 0, .. })
        ));
        assert!(!buf.in_epoch());
        if ep.peer_segment(dst.addr()).is_none() && !ep.has_progress_thread() {
            // Over the network (ofi without `GEX_HYBRID=1`), without a progress
            // thread: delta puts go through gex-rma during the calls, and a receive
            // window is refused (nothing would serve its arrivals while a reader
            // waits in the fault handler).
            assert!(matches!(
                ep.delta_recv_window(3 << 20, len),
                Err(OverlapError::NeedsProgressThread { .. })
            ));
        }
        for round in 0..6u32 {
            if round > 0 {
                let half = len / 2;
                let (a, b) = buf.split_at_mut(half);
                std::thread::scope(|s| {
                    for (base, part) in [(0, a), (half, b)] {
                        s.spawn(move || {
                            for (j, byte) in part.iter_mut().enumerate() {
                                let i = base + j;
                                if (i / pg) % 5 == round as usize % 5 {
                                    *byte = pattern(me + 31 * round, i);
                                }
                            }
                        });
                    }
                });
                if self.mode == Tracking::Annotated {
                    for p in (0..100).filter(|p| p % 5 == round as usize % 5) {
                        buf.mark(p * pg, pg).unwrap();
                    }
                }
            }
            let s = ep.delta_put(dst, &mut buf).unwrap();
            if round == 0 {
                assert_eq!(s.bytes, len);
            } else {
                assert_eq!((s.bytes, s.whole), (20 * pg, false), "round {round}");
                assert_eq!(s.runs, 20, "round {round}");
            }
            ep.barrier(&w).unwrap();
            let mut got = vec![0u8; len];
            ep.get(&mut got[..], GlobalPtr::new(ep.addr(), 1 << 20), Blocking)
                .unwrap();
            for (i, &b) in got.iter().enumerate() {
                assert_eq!(b, delta_byte(from, round, i, pg), "round {round} byte {i}");
            }
            ep.barrier(&w).unwrap();
        }
        // Misuse: page 7 written after the flush that sent it.
        ep.delta_begin(&mut buf, dst).unwrap();
        buf[7 * pg] = 1;
        if self.mode == Tracking::Annotated {
            buf.mark(7 * pg, 1).unwrap();
            buf.mark(7 * pg, pg).unwrap();
        }
        ep.delta_flush(&mut buf).unwrap();
        buf[7 * pg + 1] = 2;
        match ep.delta_end(&mut buf) {
            Err(OverlapError::WrittenAfterSend { offset }) => assert_eq!(offset, 7 * pg),
            r => panic!("{r:?}"),
        }
        ep.delta_wait(&mut buf).unwrap();
        ep.barrier(&w).unwrap();
        let mut got = vec![0u8; 2];
        ep.get(
            &mut got[..],
            GlobalPtr::new(ep.addr(), (1 << 20) + 7 * pg),
            Blocking,
        )
        .unwrap();
        assert_eq!(got, [1, 2]);
        finish(client, ep, &w);
    }
}

fn launch_delta(ranks: u32, mode: gex_overlap::Tracking) {
    launch_job(ranks, &[], DeltaExchange { mode });
}

job_tests! {
    #[test]
    fn procs_delta_put_os_triggered_2() => launch_delta(2, gex_overlap::Tracking::OsTriggered);
    #[test]
    fn procs_delta_put_os_triggered_3() => launch_delta(3, gex_overlap::Tracking::OsTriggered);
    #[test]
    fn procs_delta_put_annotated_3() => launch_delta(3, gex_overlap::Tracking::Annotated);
}

/// Delta send-recv around a ring: every rank posts the receive of its left
/// neighbour's epoch (returns at once), sends its own buffer to its right neighbour's
/// window while computing it (pages produced in a scattered order, sent as they are
/// marked or flushed: they arrive out of order), then reads what it received, page by
/// page, without a wait. OS-triggered: two threads write, a flush after each quarter.
struct DeltaRing {
    mode: gex_overlap::Tracking,
    /// Whether the right neighbour's segment is not mapped here (the gex-rma path).
    unmapped: bool,
}

/// Whether a job launched without `GEX_HYBRID` sends between unmapped segments: over
/// ofi (the network path), not over smp.
fn network_unmapped() -> bool {
    std::env::var("GEX_CONDUIT").unwrap_or_default() == "ofi"
}

fn ring_byte(r: u32, round: u32, i: usize) -> u8 {
    pattern(r.wrapping_mul(7).wrapping_add(round * 131), i)
}

impl Job for DeltaRing {
    type Output = ();
    fn run<C: Conduit>(self, client: Client<C>) {
        use gex_coll::CollExt;
        use gex_overlap::{DeltaBuf, DeltaExt, Tracking, page_size};
        let (mut ep, w, me, n) = start(&client);
        let pg = page_size();
        let pages = 64;
        let len = pages * pg;
        let right = (me + 1) % n;
        let left = (me + n - 1) % n;
        let mut rx = ep.delta_recv_window(2 << 20, len).unwrap();
        let window = GlobalPtr::<u8>::new(gex_core::EpAddr::new(right, 0), 2 << 20);
        assert_eq!(
            ep.peer_segment(window.addr()).is_none(),
            self.unmapped && n > 1
        );
        let mut tx = DeltaBuf::new(len, self.mode).unwrap();
        ep.barrier(&w).unwrap();
        for round in 0..5u32 {
            ep.delta_recv(&mut rx).unwrap();
            ep.delta_send_begin(&mut tx, window).unwrap();
            // Round 0 writes every page, later rounds every third page; in a
            // scattered order (a stride coprime with the page count).
            let order: Vec<usize> = (0..pages)
                .map(|k| (k * 37 + round as usize) % pages)
                .filter(|p| round == 0 || p % 3 == round as usize % 3)
                .collect();
            match self.mode {
                Tracking::Annotated => {
                    for &p in &order {
                        for (j, b) in tx[p * pg..(p + 1) * pg].iter_mut().enumerate() {
                            *b = ring_byte(me, round, p * pg + j);
                        }
                        ep.delta_mark(&mut tx, p * pg, pg).unwrap();
                    }
                }
                Tracking::OsTriggered => {
                    for quarter in order.chunks(order.len().div_ceil(4)) {
                        let (a, b) = tx.split_at_mut(len / 2);
                        std::thread::scope(|s| {
                            for (base, part) in [(0, a), (len / 2, b)] {
                                s.spawn(move || {
                                    for &p in quarter {
                                        if p * pg >= base && p * pg < base + len / 2 {
                                            let at = p * pg - base;
                                            for (j, b) in part[at..at + pg].iter_mut().enumerate() {
                                                *b = ring_byte(me, round, p * pg + j);
                                            }
                                        }
                                    }
                                });
                            }
                        });
                        ep.delta_flush(&mut tx).unwrap();
                    }
                }
            }
            let s = ep.delta_end(&mut tx).unwrap();
            if round > 0 {
                assert_eq!(
                    (s.bytes, s.whole),
                    (order.len() * pg, false),
                    "round {round}: {s:?}"
                );
            }
            // What the left neighbour sent this round, and before for the pages it
            // did not write this round.
            for i in (0..len).step_by(61) {
                let p = i / pg;
                let last = (0..=round)
                    .rev()
                    .find(|&r| r == 0 || p % 3 == r as usize % 3)
                    .unwrap();
                assert_eq!(rx[i], ring_byte(left, last, i), "round {round} byte {i}");
            }
            ep.delta_wait(&mut tx).unwrap();
        }
        ep.delta_recv_wait(&mut rx).unwrap();
        finish(client, ep, &w);
    }
}

/// Over ofi, a hybrid job (`GEX_HYBRID=1`; the smp conduit ignores it): the ranks map
/// each other's segments and the movers copy.
fn launch_ring(ranks: u32, mode: gex_overlap::Tracking) {
    launch_job(
        ranks,
        &[("GEX_HYBRID", "1")],
        DeltaRing {
            mode,
            unmapped: false,
        },
    );
}

/// With a progress thread and without `GEX_HYBRID`: over ofi, the windows of ranks
/// whose segments are not mapped here, written through gex-rma (shadow pages, then
/// their arrival words, then the end word); over smp, the mapped path with a progress
/// thread.
fn launch_ring_network(ranks: u32, mode: gex_overlap::Tracking) {
    let job = DeltaRing {
        mode,
        unmapped: network_unmapped(),
    };
    launch_job(ranks, &[("GEX_PROGRESS_THREAD", "1")], job);
}

job_tests! {
    #[test]
    fn procs_delta_send_recv_annotated_2() => launch_ring(2, gex_overlap::Tracking::Annotated);
    #[test]
    fn procs_delta_send_recv_os_triggered_3() => launch_ring(3, gex_overlap::Tracking::OsTriggered);
    #[test]
    fn procs_delta_send_recv_network_annotated_2() => launch_ring_network(2, gex_overlap::Tracking::Annotated);
    #[test]
    fn procs_delta_send_recv_network_os_triggered_3() => launch_ring_network(3, gex_overlap::Tracking::OsTriggered);
}

/// Cascades on 4 ranks (seed 001's chained pipelines), 3 rounds each:
/// - chain: rank 0 produces a buffer and sends it to rank 1; ranks 1 and 2 each add
///   their rank to every byte as the pages arrive (`delta_relay`) and send on; rank 3
///   checks the result;
/// - array reduce up the tree 0 ← {1, 2}, 1 ← {3}: every rank adds its children's
///   buffers to its own contribution as they arrive and sends the sum to its parent;
///   the root's sum (put into its own segment) is checked.
struct DeltaCascade {
    reduce: bool,
}

fn contribution(r: u32, round: u32, i: usize) -> u8 {
    pattern(r + 11 * round, i)
}

impl Job for DeltaCascade {
    type Output = ();
    fn run<C: Conduit>(self, client: Client<C>) {
        use gex_coll::CollExt;
        use gex_overlap::{DeltaBuf, DeltaExt, DeltaRecv, Tracking, page_size};
        let (mut ep, w, me, n) = start(&client);
        assert_eq!(n, 4);
        let pg = page_size();
        let len = 48 * pg + 40;
        let slot = DeltaRecv::window_len(len).div_ceil(pg) * pg;
        let at = |r: u32, k: usize| GlobalPtr::<u8>::new(gex_core::EpAddr::new(r, 0), k * slot);
        // Who sends to whom: (children, parent).
        let (children, parent): (Vec<u32>, Option<u32>) = if self.reduce {
            let kids = [2 * me + 1, 2 * me + 2]
                .into_iter()
                .filter(|&c| c < n)
                .collect();
            (kids, (me > 0).then(|| (me - 1) / 2))
        } else {
            let kids = if me > 0 { vec![me - 1] } else { vec![] };
            (kids, (me + 1 < n).then_some(me + 1))
        };
        // Window k of a rank receives from its k-th child.
        let mut rx: Vec<DeltaRecv> = (0..children.len())
            .map(|k| ep.delta_recv_window(k * slot, len).unwrap())
            .collect();
        let mut out = DeltaBuf::new(len, Tracking::Annotated).unwrap();
        ep.barrier(&w).unwrap();
        for round in 0..3u32 {
            for r in &mut rx {
                ep.delta_recv(r).unwrap();
            }
            match parent {
                Some(p) => {
                    // My index among the parent's children.
                    let k = if self.reduce {
                        ((me - 1) % 2) as usize
                    } else {
                        0
                    };
                    ep.delta_send_begin(&mut out, at(p, k)).unwrap();
                }
                // The end of the cascade keeps its result in its own segment.
                None => ep.delta_begin(&mut out, at(me, 4)).unwrap(),
            }
            let ins: Vec<&DeltaRecv> = rx.iter().collect();
            let reduce = self.reduce;
            ep.delta_relay(&ins, &mut out, 0, |off, ins, o| {
                for (j, b) in o.iter_mut().enumerate() {
                    let i = off + j;
                    *b = if reduce {
                        ins.iter()
                            .fold(contribution(me, round, i), |s, x| s.wrapping_add(x[j]))
                    } else if ins.is_empty() {
                        contribution(0, round, i)
                    } else {
                        ins[0][j].wrapping_add(me as u8)
                    };
                }
            })
            .unwrap();
            ep.delta_end(&mut out).unwrap();
            ep.delta_wait(&mut out).unwrap();
            if parent.is_none() {
                let mut got = vec![0u8; len];
                ep.get(&mut got[..], at(me, 4), Blocking).unwrap();
                for (i, &b) in got.iter().enumerate() {
                    let want = if self.reduce {
                        (0..n).fold(0u8, |s, r| s.wrapping_add(contribution(r, round, i)))
                    } else {
                        contribution(0, round, i).wrapping_add(1 + 2 + 3)
                    };
                    assert_eq!(b, want, "round {round} byte {i}");
                }
            }
        }
        for r in &mut rx {
            ep.delta_recv_wait(r).unwrap();
        }
        finish(client, ep, &w);
    }
}

fn launch_cascade(reduce: bool, env: &[(&str, &str)]) {
    launch_job(4, env, DeltaCascade { reduce });
}

job_tests! {
    #[test]
    fn procs_delta_cascade_chain_4() => launch_cascade(false, &[("GEX_HYBRID", "1")]);
    #[test]
    fn procs_delta_cascade_array_reduce_4() => launch_cascade(true, &[("GEX_HYBRID", "1")]);
    /// As `launch_ring_network`: over ofi, every relay through gex-rma.
    #[test]
    fn procs_delta_cascade_array_reduce_network_4() => launch_cascade(true, &[("GEX_PROGRESS_THREAD", "1")]);
}

/// Delta send-recv around a ring of 3 thread ranks of this process, OS-triggered:
/// one fault handler and registry for every rank's buffers (each rank's writes fault
/// on its own pages), one mover per rank sending and landing pages.
#[test]
fn threads_delta_send_recv_os_triggered_3() {
    gex::boot::threads::run(3, |boot| {
        let b = gex::builder().layer::<Overlap>().segment_size(8 << 20);
        gex::init_with_boot(
            b,
            Box::new(boot),
            Some("smp"),
            DeltaRing {
                mode: gex_overlap::Tracking::OsTriggered,
                unmapped: false,
            },
        )
        .unwrap();
    })
    .unwrap();
}
