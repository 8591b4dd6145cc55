//! Collectives on the simulated fabric (thread ranks): every algorithm × operation ×
//! element type × size class × team size (1, 2, 3, 5, 8) against the sequential
//! reference, single address mode with every transport and sync mode, the in-my
//! entry rule, teams (split, lists, scratch) and concurrent collectives on
//! overlapping teams; the shared-memory algorithm on per-host teams, its channels and
//! where it must not run; roots named by where their data lives.

mod common;

use common::{
    affine, buffer_matrix, bytes, layers, matrix, matrix_mode, on_sim, reference, run_one,
    segment_matrix, single_mode_call,
};
use gex_coll::{
    Allreduce, Barrier, BitOp, Broadcast, BuiltinOp, CollError, CollExt, Exchange, GatherAll,
    InSegments, OpKind, Opts, Reduce, ReduceOp, Scratch, Single, SyncMode, Team, TeamExt,
};
use gex_core::{Blocking, Endpoint, Nb, OwnedEndpoint};
use gex_testkit::sim::{Delay, Sim, SimConfig, run_sim};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const SEG: usize = 1 << 20;

/// Size classes: empty, one element, odd, and (4500 × 4 bytes) above the 16 KiB
/// Medium limit (fragmented messages).
const ALL_COUNTS: &[usize] = &[0, 1, 13, 4500];

fn matrix_job(p: u32, cfg: SimConfig, counts: &[usize]) {
    let ran = on_sim(p, cfg, SEG, |mut c, _| {
        // The catalogue's fork trees run in the matrix, and one on a given grid
        // (2 × 2: partial or ragged on most team sizes).
        assert!(c.algorithms(OpKind::Scatter).iter().any(|a| a == "fork3d"));
        c.register_algorithm(std::sync::Arc::new(
            gex_coll::Builtin::fork(&[2, 2], gex_coll::Transport::Eager).unwrap(),
        ))
        .unwrap();
        let w = c.world().clone();
        let n = matrix(&mut c, &w, counts);
        c.barrier(&w).unwrap();
        assert_eq!(c.coll_stats().dropped_messages, 0);
        n
    });
    assert!(ran[0] > 100, "only {} cases ran", ran[0]);
}

#[test]
fn matrix_1() {
    matrix_job(1, SimConfig::default(), ALL_COUNTS);
}
#[test]
fn matrix_2() {
    matrix_job(2, SimConfig::default(), ALL_COUNTS);
}
#[test]
fn matrix_3_reordered() {
    matrix_job(3, SimConfig::default().reorder(true).seed(5), ALL_COUNTS);
}
/// Latency and jitter in wall-clock time (messages overtake each other by up to
/// 20 µs).
#[test]
fn matrix_3_latency_jitter() {
    let cfg = SimConfig::default()
        .reorder(true)
        .seed(77)
        .latency(Delay::nanos(2_000))
        .jitter(Delay::nanos(20_000));
    matrix_job(3, cfg, &[1, 13]);
}
#[test]
fn matrix_5_reordered_one_per_host() {
    matrix_job(
        5,
        SimConfig::default().reorder(true).seed(9).ranks_per_host(1),
        ALL_COUNTS,
    );
}
#[test]
fn matrix_8() {
    matrix_job(8, SimConfig::default().seed(2), &[0, 13, 700]);
}

/// Back-pressure and many fragments: 4 KiB of requests in flight per pair, 1 KiB
/// Medium payloads, reordering.
#[test]
fn matrix_4_small_rings() {
    let mut cfg = SimConfig::default()
        .reorder(true)
        .seed(17)
        .ring_capacity(4096);
    cfg.max_medium = 1024;
    cfg.max_long = 2048;
    matrix_job(4, cfg, &[1, 700]);
}

/// Split teams: the matrix on both halves of 8 ranks (sizes 3 and 5), at once.
#[test]
fn matrix_on_split_teams() {
    let ran = on_sim(
        8,
        SimConfig::default().reorder(true).seed(4),
        SEG,
        |mut c, w| {
            let r = w.rank();
            let t = c
                .split(&w, Some(u32::from(r % 8 < 3)), 100 - r, Scratch::None)
                .unwrap()
                .unwrap();
            assert_eq!(t.size(), if r < 3 { 3 } else { 5 });
            let n = matrix(&mut c, &t, &[1, 33]);
            c.barrier(&w).unwrap();
            n
        },
    );
    assert!(ran.iter().all(|&n| n > 100), "{ran:?}");
}

/// Single address mode: broadcast and gather_all with every algorithm (eager, put,
/// rendezvous) under every sync mode, with different offsets on every rank.
#[test]
fn single_mode_transports_and_sync_modes() {
    single_mode_job(
        5,
        SimConfig::default()
            .reorder(true)
            .seed(21)
            .ranks_per_host(2),
    );
}

/// The same with small Long and Medium limits (signaling puts and rendezvous gets in
/// many pieces) and back-pressure.
#[test]
fn single_mode_small_limits() {
    let mut cfg = SimConfig::default()
        .reorder(true)
        .seed(3)
        .ring_capacity(8192);
    cfg.max_medium = 1024;
    cfg.max_long = 3000;
    single_mode_job(3, cfg);
}

fn single_mode_job(p: u32, cfg: SimConfig) {
    on_sim(p, cfg, SEG, |mut c, w| {
        let p = w.size();
        let modes = [SyncMode::No, SyncMode::My, SyncMode::All];
        let mut salt = 0u64;
        let mut by_transport = [0usize; 3];
        for op in [OpKind::Broadcast, OpKind::GatherAll] {
            for alg in c.algorithms(op) {
                let all_modes = [
                    "flat+put",
                    "binomial+rdv",
                    "ring+put",
                    "chain64k+rdv",
                    "binomial",
                ]
                .contains(&alg.as_str());
                for count in [3usize, 5000] {
                    for i in modes {
                        for o in modes {
                            if !all_modes && (i != o || i == SyncMode::All) {
                                continue;
                            }
                            salt += 1;
                            let root = (salt % u64::from(p)) as u32;
                            // Source at 0, destinations at rank-dependent offsets.
                            let dst: Vec<usize> =
                                (0..p as usize).map(|r| 200_000 + 64 * r).collect();
                            let call = (op, alg.as_str(), (i, o));
                            let at = (root, count);
                            if !single_mode_call::<_, u32>(&mut c, &w, call, at, &dst, salt) {
                                continue;
                            }
                            by_transport[usize::from(alg.ends_with("+put"))
                                + 2 * usize::from(alg.ends_with("+rdv"))] += 1;
                        }
                    }
                }
            }
        }
        assert!(by_transport.iter().all(|&x| x > 0), "{by_transport:?}");
    });
}

/// Single address mode for every other operation (tuned algorithm), out of place and
/// in place.
#[test]
fn single_mode_every_op() {
    on_sim(
        3,
        SimConfig::default().reorder(true).seed(8),
        SEG,
        |mut c, w| {
            let (p, me) = (w.size() as usize, w.rank() as usize);
            let sum = ReduceOp::<u32>::builtin(BuiltinOp::Sum);
            for (k, op) in OpKind::ALL.into_iter().enumerate() {
                for in_place in [false, true] {
                    if in_place
                        && matches!(
                            op,
                            OpKind::Scatter
                                | OpKind::Exchange
                                | OpKind::ReduceScatter
                                | OpKind::Barrier
                        )
                    {
                        continue;
                    }
                    let count = 6;
                    let n = count * 4;
                    let root = (k % p) as u32;
                    let inputs: Vec<Vec<u8>> = (0..p)
                        .map(|r| {
                            bytes(r, k as u64, op.shape(p as u32, r as u32, root).0.max(1) * n)
                        })
                        .collect();
                    let (src, dst) = (1000usize, 50_000usize);
                    c.segment().write(dst, &vec![0u8; p * n]).unwrap();
                    if in_place {
                        let at = if matches!(op, OpKind::Gather | OpKind::GatherAll) {
                            dst + me * n
                        } else {
                            dst
                        };
                        c.segment().write(at, &inputs[me]).unwrap();
                    } else {
                        c.segment().write(src, &inputs[me]).unwrap();
                    }
                    let addrs = if in_place {
                        Single::in_place(p as u32, dst)
                    } else {
                        Single::uniform(p as u32, src, dst)
                    };
                    let red = op.reduces().then_some(&sum);
                    let h = {
                        let d = InSegments::<u32>::new(op, count, addrs.clone()).root(root);
                        let d = match red {
                            Some(r) => d.reduce(r.clone()),
                            None => d,
                        };
                        c.collective(&w, d, Nb)
                    }
                    .unwrap();
                    c.wait(h).unwrap();
                    let want = reference(op, root as usize, n, &inputs, red.map(|r| r.func()));
                    let mut got = vec![0u8; want[me].len()];
                    c.segment().read(dst, &mut got).unwrap();
                    assert_eq!(got, want[me], "{op} in_place={in_place}");
                    c.barrier(&w).unwrap();
                }
            }
        },
    );
}

/// Under in-my (and in-all), a signaling put may not land in a member's destination
/// before that member entered; under in-no it may (and does, here).
#[test]
fn in_my_sync_is_honoured() {
    for mode in [SyncMode::My, SyncMode::All, SyncMode::No] {
        let started = AtomicBool::new(false);
        let started = &started;
        on_sim(2, SimConfig::default(), SEG, move |mut c, w| {
            let me = w.rank();
            let dst = 4096;
            let n = 256;
            if me == 0 {
                c.segment().write(0, &[7u8; 256]).unwrap();
            }
            c.segment().write(dst, &[0xEE; 256]).unwrap();
            c.barrier(&w).unwrap();
            let addrs = Single {
                src: Some(vec![0, 0]),
                dst: vec![dst, dst],
            };
            let opts = Opts::sync(mode, SyncMode::My).with_algorithm("flat+put");
            if me == 0 {
                let h = bcast_from_0(&mut c, &w, n, &addrs, opts);
                for _ in 0..10 {
                    c.test(&h).unwrap();
                }
                started.store(true, Ordering::SeqCst);
                c.wait(h).unwrap();
            } else {
                while !started.load(Ordering::SeqCst) {
                    std::thread::yield_now();
                }
                // Keep polling (as any gex call would) before entering.
                let t0 = Instant::now();
                let mut buf = [0u8; 256];
                loop {
                    c.poll();
                    c.segment().read(dst, &mut buf).unwrap();
                    if buf != [0xEE; 256] || t0.elapsed() > Duration::from_millis(200) {
                        break;
                    }
                    std::thread::yield_now();
                }
                match mode {
                    SyncMode::No => {
                        assert_eq!(buf, [7u8; 256], "in-no: the put should land early here")
                    }
                    _ => assert_eq!(
                        buf, [0xEE; 256],
                        "{mode:?}: data landed before rank 1 entered"
                    ),
                }
                let h = bcast_from_0(&mut c, &w, n, &addrs, opts);
                c.wait(h).unwrap();
                c.segment().read(dst, &mut buf).unwrap();
                assert_eq!(buf, [7u8; 256]);
            }
            c.barrier(&w).unwrap();
        });
    }
}

/// Split by (color, key), creation from a list, rank translation, scratch space
/// (given and allocated, freed on destroy), and collectives in flight at once on
/// overlapping teams started in different orders on different ranks.
#[test]
fn teams_and_concurrent_collectives() {
    on_sim(
        6,
        SimConfig::default()
            .reorder(true)
            .seed(13)
            .latency(Delay::polls(2)),
        SEG,
        |mut c, _| {
            c.set_scratch_region(SEG / 2..SEG).unwrap();
            let w = c.world().clone();
            let r = w.rank();
            // Odd/even, ordered by descending rank.
            let half = c
                .split(&w, Some(r % 2), 100 - r, Scratch::Alloc(1000))
                .unwrap()
                .unwrap();
            let expect: Vec<u32> = (0..6).rev().filter(|x| x % 2 == r % 2).collect();
            let jr: Vec<u32> = (0..half.size())
                .map(|i| half.job_rank(i).unwrap())
                .collect();
            assert_eq!(jr, expect);
            assert_eq!(half.rank_of(w.member(r).unwrap()), Some(half.rank()));
            assert_eq!(half.scratch().len(), 3);
            assert!(
                half.scratch()
                    .iter()
                    .all(|&(o, l)| o >= SEG / 2 && l == 1000)
            );
            // Ranks 0 and 5 join no team.
            let mid = c
                .split(
                    &w,
                    (1..5).contains(&r).then_some(0),
                    r,
                    Scratch::Given(64 * r as usize, 64),
                )
                .unwrap();
            assert_eq!(
                mid.as_ref().map(|t| t.size()),
                (1..5).contains(&r).then_some(4)
            );
            if let Some(m) = &mid {
                let want: Vec<(usize, usize)> = (1..5).map(|x| (64 * x, 64)).collect();
                assert_eq!(m.scratch(), &want[..]);
            }
            // A team from a list (members 4, 1, 3 in that order).
            let list = [4u32, 1, 3];
            let lt = if list.contains(&r) {
                Some(c.create_team(&w, &list, Scratch::None).unwrap())
            } else {
                None
            };
            if let Some(t) = &lt {
                assert_eq!(t.job_rank(0), Some(4));
                assert_eq!(t.rank(), list.iter().position(|&x| x == r).unwrap() as u32);
            }
            let sum = ReduceOp::<u64>::builtin(BuiltinOp::Sum);
            for iter in 0..5u64 {
                // Start on world, half, mid and the list team in a rank-dependent order.
                let mut hs = Vec::new();
                let mut order: Vec<usize> = vec![0, 1, 2, 3];
                order.rotate_left((r as usize + iter as usize) % 4);
                let mut h_world = None;
                let mut h_half = None;
                let mut h_mid = None;
                let mut h_list = None;
                for k in order {
                    match k {
                        0 => {
                            h_world = Some(
                                c.collective(
                                    &w,
                                    Allreduce::new(vec![u64::from(r) + iter; 3], sum.clone()),
                                    Nb,
                                )
                                .unwrap(),
                            )
                        }
                        1 => {
                            h_half = Some(
                                c.collective(
                                    &half,
                                    GatherAll::new(vec![u64::from(r) * 10 + iter]),
                                    Nb,
                                )
                                .unwrap(),
                            )
                        }
                        2 => {
                            if let Some(m) = &mid {
                                h_mid = Some(
                                    c.collective(
                                        m,
                                        Broadcast::new(2, vec![u64::from(r) + 1000 * iter; 4000]),
                                        Nb,
                                    )
                                    .unwrap(),
                                );
                            }
                        }
                        _ => {
                            if let Some(t) = &lt {
                                h_list = Some(
                                    c.collective(
                                        t,
                                        Exchange::new(
                                            (0..3).map(|j| u64::from(r) * 100 + j + iter).collect(),
                                        ),
                                        Nb,
                                    )
                                    .unwrap(),
                                );
                            }
                        }
                    }
                }
                hs.push(0);
                if let Some(h) = h_list {
                    let v = c.wait(h).unwrap();
                    let me = lt.as_ref().unwrap().rank() as u64;
                    assert_eq!(
                        v,
                        list.iter()
                            .map(|&s| u64::from(s) * 100 + me + iter)
                            .collect::<Vec<_>>()
                    );
                }
                if let Some(h) = h_mid {
                    let m = mid.as_ref().unwrap();
                    let root_job = u64::from(m.job_rank(2).unwrap());
                    assert_eq!(c.wait(h).unwrap(), vec![root_job + 1000 * iter; 4000]);
                }
                let g = c.wait(h_half.unwrap()).unwrap();
                assert_eq!(
                    g,
                    expect
                        .iter()
                        .map(|&x| u64::from(x) * 10 + iter)
                        .collect::<Vec<_>>()
                );
                let a = c.wait(h_world.unwrap()).unwrap();
                assert_eq!(a, vec![15 + 6 * iter; 3]);
            }
            // A team with a collective in flight cannot be destroyed. (A collective
            // that completed here is no longer in flight, even before its event is
            // waited for: so every member but the last, team rank 0, starts a barrier
            // of `half` that cannot complete before the last one enters it.)
            let last = half.rank() == 0;
            let early = (!last).then(|| {
                let h = c.collective(&half, Barrier::new(), Nb).unwrap();
                let e = c.destroy_team(half.clone()).unwrap_err();
                assert!(matches!(e, CollError::TeamBusy { pending: 1, .. }), "{e}");
                h
            });
            c.barrier(&w).unwrap();
            let h = match early {
                Some(h) => h,
                None => c.collective(&half, Barrier::new(), Nb).unwrap(),
            };
            c.wait(h).unwrap();
            // Destroy frees the allocated scratch: the same range is allocated again.
            let first = half.scratch()[half.rank() as usize];
            c.barrier(&w).unwrap();
            c.destroy_team(half).unwrap();
            let again = c
                .split(&w, Some(0), r, Scratch::Alloc(1000))
                .unwrap()
                .unwrap();
            assert_eq!(again.scratch()[again.rank() as usize], first);
            assert!(matches!(
                c.destroy_team(w.clone()),
                Err(CollError::BadMembers(_))
            ));
            c.barrier(&w).unwrap();
        },
    );
}

/// GEX_COLL_<OP> overrides through the client's configuration, and errors.
#[test]
fn env_override_and_errors() {
    use gex_coll::Query;
    use gex_core::Config;
    let builder = || {
        layers().segment_size(SEG).config(Config::from_pairs([
            ("GEX_COLL_BROADCAST", "chain"),
            ("GEX_COLL_LOGGP", "6.2,0.5,0.5,0.0001"),
        ]))
    };
    run_sim(3, SimConfig::default(), builder, |client| {
        let mut c = client.endpoint(0).unwrap();
        let w = c.world().clone();
        let q = Query::plain(OpKind::Broadcast, 3, 8);
        let why = c.explain(&q).unwrap();
        assert_eq!(
            (why.algorithm.as_str(), why.reason),
            ("chain", gex_coll::Reason::Override)
        );
        assert_eq!(c.tuner(|t| t.model().l).unwrap(), 6.2);
        // The chain broadcast from rank 0 sends exactly one message per non-last rank.
        let before = c.stats();
        let mut b = [u64::from(w.rank()); 4];
        c.collective(&w, Broadcast::in_place(0, &mut b), Blocking)
            .unwrap();
        assert_eq!(b, [0; 4]);
        let after = c.stats();
        let sent = |s: &gex_core::EpStats| -> u64 { s.sent.iter().sum() };
        assert_eq!(sent(&after) - sent(&before), u64::from(w.rank() < 2));
        // Forced algorithms are checked.
        let e = c
            .collective(
                &w,
                GatherAll::new(vec![1u8]).opts(Opts::default().with_algorithm("recdbl")),
                Nb,
            )
            .unwrap_err();
        assert!(matches!(e, CollError::Unsupported { .. }));
        let e = c
            .collective(
                &w,
                Barrier::new().opts(Opts::default().with_algorithm("nonesuch")),
                Nb,
            )
            .unwrap_err();
        assert!(matches!(e, CollError::UnknownAlgorithm { .. }));
        assert!(matches!(
            c.collective(&w, Broadcast::new(3, vec![1u8]), Nb),
            Err(CollError::BadRank { .. })
        ));
        assert!(matches!(
            c.collective(&w, Exchange::new(vec![1u8; 4]), Nb),
            Err(CollError::BadLength { .. })
        ));
        let mut out = [0u8; 2];
        assert!(matches!(
            c.collective(&w, GatherAll::slices(&[1u8], &mut out), Blocking),
            Err(CollError::BadLength { .. })
        ));
        let bad = Single {
            src: None,
            dst: vec![0; 2],
        };
        assert!(matches!(
            c.collective(
                &w,
                InSegments::<u8>::new(OpKind::Broadcast, 1, bad.clone()).root(0),
                Nb
            ),
            Err(CollError::BadAddress(_))
        ));
        c.barrier(&w).unwrap();
    });
    // An override naming an algorithm that does not implement the op is an error.
    run_sim(
        1,
        SimConfig::default(),
        || {
            layers()
                .segment_size(SEG)
                .config(Config::from_pairs([("GEX_COLL_BARRIER", "ring")]))
        },
        |client| {
            // Read when the layer attaches: the endpoint is refused, and the error
            // names the variable.
            let e = client.endpoint(0).unwrap_err().to_string();
            assert!(
                e.contains("GEX_COLL_BARRIER") && e.contains("no algorithm named \"ring\""),
                "{e}"
            );
        },
    );
}

/// Exit modes: a rendezvous broadcast's root under out-no completes before the
/// receiver even entered; under out-my it cannot (its data has not been read); an
/// eager broadcast's root completes at once under out-my but not under out-all.
#[test]
fn out_sync_modes() {
    // (algorithm, exit mode, may the root complete before rank 1 enters?)
    let cases = [
        ("flat+rdv", SyncMode::No, true),
        ("flat+rdv", SyncMode::My, false),
        ("flat", SyncMode::My, true),
        ("flat", SyncMode::All, false),
    ];
    for (alg, out, early) in cases {
        let entered = AtomicBool::new(false);
        let entered = &entered;
        on_sim(2, SimConfig::default(), SEG, move |mut c, w| {
            let n = 1000;
            c.segment().write(0, &[3u8; 1000]).unwrap();
            c.barrier(&w).unwrap();
            let addrs = Single {
                src: Some(vec![0, 0]),
                dst: vec![8192, 8192],
            };
            let opts = Opts::sync(SyncMode::No, out).with_algorithm(alg);
            if w.rank() == 0 {
                let h = bcast_from_0(&mut c, &w, n, &addrs, opts);
                let t0 = Instant::now();
                let mut done = false;
                while t0.elapsed() < Duration::from_millis(100) && !done {
                    done = c.test(&h).unwrap();
                }
                assert_eq!(done, early, "{alg} out={out:?}");
                entered.store(true, Ordering::SeqCst);
                c.wait(h).unwrap();
            } else {
                while !entered.load(Ordering::SeqCst) {
                    std::thread::yield_now();
                }
                let h = bcast_from_0(&mut c, &w, n, &addrs, opts);
                c.wait(h).unwrap();
                let mut buf = [0u8; 1000];
                c.segment().read(8192, &mut buf).unwrap();
                assert_eq!(buf, [3u8; 1000]);
            }
            c.barrier(&w).unwrap();
            // Nothing is left in flight (out-no work finished in the background).
            for _ in 0..100 {
                c.poll();
            }
            assert_eq!(c.coll_stats().in_flight, 0);
        });
    }
}

mod prop {
    use super::*;
    use common::{affine, run_one};
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// Random (operation, algorithm, team size, root, count, schedule seed,
        /// reordering) executed on the simulated fabric against the reference, with a
        /// commutative and a non-commutative operator.
        #[test]
        fn prop_random_collectives_on_sim(
            oi in 0usize..11, ai in 0usize..64, p in 1u32..7, rs in 0u32..64,
            count in 0usize..300, seed in 0u64..1000, reorder: bool,
        ) {
            let op = OpKind::ALL[oi];
            let cfg = SimConfig::default().reorder(reorder).seed(seed);
            on_sim(p, cfg, SEG, |mut c, w| {
                let algs = c.algorithms(op);
                let alg = algs[ai % algs.len()].clone();
                let root = rs % p;
                let sum = ReduceOp::<u64>::builtin(BuiltinOp::Sum);
                run_one(&mut c, &w, op, Some(&alg), root, count, &sum, seed);
                if op.reduces() {
                    run_one(&mut c, &w, op, Some(&alg), root, count, &affine(), seed + 1);
                }
                c.barrier(&w).unwrap();
            });
        }
    }
}

/// Local address mode through team scratch space: signaling put and rendezvous
/// broadcasts and gather_alls, several in flight at once on one team (they take
/// turns on the scratch space), checked against the reference; the data visibly
/// passes through each member's scratch.
#[test]
fn local_mode_through_scratch() {
    on_sim(
        4,
        SimConfig::default()
            .reorder(true)
            .seed(31)
            .ranks_per_host(1),
        SEG,
        |mut c, _| {
            c.set_scratch_region(SEG / 2..SEG).unwrap();
            let w = c.world().clone();
            let t = c
                .split(&w, Some(0), 10 - w.rank(), Scratch::Alloc(64 << 10))
                .unwrap()
                .unwrap();
            let (p, me) = (t.size(), t.rank());
            let algs = [
                (OpKind::Broadcast, "flat+put"),
                (OpKind::GatherAll, "ring+rdv"),
                (OpKind::Broadcast, "binomial+rdv"),
                (OpKind::GatherAll, "recdbl+put"),
                (OpKind::Broadcast, "chain64k+put"),
                (OpKind::GatherAll, "flat+rdv"),
            ];
            for round in 0..3u64 {
                let mut hs = Vec::new();
                for (k, (op, alg)) in algs.iter().enumerate() {
                    let salt = round * 100 + k as u64;
                    let count = 100 + 37 * k;
                    let data: Vec<u64> = (0..count as u64)
                        .map(|i| i * 1000 + u64::from(me) + salt)
                        .collect();
                    let opts = Opts::default().with_algorithm(alg);
                    let h = match op {
                        OpKind::Broadcast => c
                            .collective(&t, Broadcast::new((k as u32) % p, data).opts(opts), Nb)
                            .unwrap(),
                        _ => c
                            .collective(&t, GatherAll::new(data).opts(opts), Nb)
                            .unwrap(),
                    };
                    hs.push((k, *op, count, salt, h));
                }
                for (k, op, count, salt, h) in hs.into_iter().rev() {
                    let got = c.wait(h).unwrap();
                    let block =
                        |r: u32| (0..count as u64).map(move |i| i * 1000 + u64::from(r) + salt);
                    let want: Vec<u64> = match op {
                        OpKind::Broadcast => block((k as u32) % p).collect(),
                        _ => (0..p).flat_map(block).collect(),
                    };
                    assert_eq!(got, want, "{op} {}", algs[k].1);
                    if k == algs.len() - 1 {
                        // The last collective's output is what the scratch holds now.
                        let (off, _) = t.scratch()[me as usize];
                        let mut raw = vec![0u8; want.len() * 8];
                        c.segment().read(off, &mut raw).unwrap();
                        assert_eq!(raw, bytemuck::cast_slice::<u64, u8>(&want));
                    }
                }
            }
            c.barrier(&w).unwrap();
            // Acknowledgements of the last rendezvous gets may still be on their way.
            let t0 = Instant::now();
            while c.coll_stats().in_flight > 0 && t0.elapsed() < Duration::from_secs(30) {
                c.poll();
            }
            assert_eq!(c.coll_stats().in_flight, 0);
        },
    );
}

/// The `shm` algorithm where it is valid and only there: on three simulated hosts of
/// three ranks the world team (spanning hosts) has no shared-memory channel and
/// refuses a forced `shm`, while the per-host teams of a split have one, the tuner
/// picks `shm` for them, and every algorithm × operation (shm forced, tuned, the
/// message algorithms) matches the reference there, with blocks several rounds long,
/// through the nonblocking calls and through the blocking ones (the direct path);
/// a team of the host leaders (across hosts) runs the message algorithms.
#[test]
fn shm_per_host_teams_and_cross_host_leaders() {
    let ran = on_sim(
        9,
        SimConfig::default()
            .reorder(true)
            .seed(77)
            .ranks_per_host(3)
            .timeout(Duration::from_secs(300)),
        SEG,
        |mut c, w| {
            let r = w.rank();
            assert!(!c.shared_memory(&w));
            let sum = ReduceOp::<u32>::builtin(BuiltinOp::Sum);
            let forced = c.collective(
                &w,
                Allreduce::new(vec![1u32], sum.clone()).opts(Opts::default().with_algorithm("shm")),
                Nb,
            );
            assert!(
                matches!(forced, Err(CollError::Unsupported { .. })),
                "{forced:?}"
            );
            let host = c.split(&w, Some(r / 3), r, Scratch::None).unwrap().unwrap();
            assert_eq!(host.size(), 3);
            // `--cfg gex_force_am_rma` keeps every collective on messages.
            let shm = !cfg!(gex_force_am_rma);
            assert_eq!(c.shared_memory(&host), shm);
            let q = gex_coll::Query {
                shm,
                ..gex_coll::Query::plain(OpKind::Allreduce, 3, 8)
            };
            assert_eq!(c.explain(&q).unwrap().algorithm == "shm", shm);
            // 9000 u32 = 36 KB per block: three rounds on a world-sized slot, eight
            // on a team channel's.
            let n = matrix(&mut c, &host, &[0, 13, 9000]);
            let direct = c.coll_stats().direct_calls;
            matrix_mode(&mut c, &host, &[0, 13, 9000], true);
            assert_eq!(c.coll_stats().direct_calls > direct, shm);
            let leaders = c
                .split(&w, (r % 3 == 0).then_some(0), r, Scratch::None)
                .unwrap();
            if let Some(l) = &leaders {
                assert_eq!(l.size(), 3);
                assert!(!c.shared_memory(l));
                matrix(&mut c, l, &[33]);
            }
            c.barrier(&w).unwrap();
            n
        },
    );
    assert!(ran.iter().all(|&n| n > 100), "{ran:?}");
}

/// Channels: a single-host job of 4 has the world's channel and three more; teams
/// created beyond them get none (and run message algorithms), a channel comes back
/// when its team is dropped. Collectives of four teams in flight at once, started in
/// rank-dependent orders, under every sync mode, all complete with the right values.
#[test]
fn shm_channels_concurrency_and_sync_modes() {
    on_sim(
        4,
        SimConfig::default().reorder(true).seed(5),
        SEG,
        |mut c, w| {
            let (p, me) = (w.size(), w.rank());
            let on = !cfg!(gex_force_am_rma);
            assert_eq!(c.shared_memory(&w), on);
            let all: Vec<u32> = (0..p).collect();
            let mut teams: Vec<_> = (0..4)
                .map(|_| c.create_team(&w, &all, Scratch::None).unwrap())
                .collect();
            let shm: Vec<bool> = teams.iter().map(|t| c.shared_memory(t)).collect();
            assert_eq!(shm, vec![on, on, on, false]);
            let sum = ReduceOp::<u64>::builtin(BuiltinOp::Sum);
            let modes = [SyncMode::No, SyncMode::My, SyncMode::All];
            let mut salt = 0u64;
            for i in modes {
                for o in modes {
                    salt += 1;
                    // Rank-dependent start order over the teams, three collectives each.
                    let mut hs = Vec::new();
                    for k in 0..teams.len() {
                        let t = (k + me as usize) % teams.len();
                        let opts = Opts::sync(i, o);
                        for j in 0..3u64 {
                            let len = 1 + (salt as usize * 997 + j as usize * 4099) % 5000;
                            let v: Vec<u64> = (0..len as u64)
                                .map(|x| x * 7 + u64::from(me) * 1000 + salt + j)
                                .collect();
                            let h = c
                                .collective(
                                    &teams[t],
                                    Allreduce::new(v, sum.clone()).opts(opts),
                                    Nb,
                                )
                                .unwrap();
                            hs.push((len, j, h));
                        }
                    }
                    for (len, j, h) in hs.into_iter().rev() {
                        let got = c.wait(h).unwrap();
                        let want: Vec<u64> = (0..len as u64)
                            .map(|x| (0..u64::from(p)).map(|r| x * 7 + r * 1000 + salt + j).sum())
                            .collect();
                        assert_eq!(got, want, "in={i:?} out={o:?}");
                    }
                }
            }
            // Dropping a team frees its channel for the next team.
            teams.remove(1);
            let again = c.create_team(&w, &all, Scratch::None).unwrap();
            assert_eq!(c.shared_memory(&again), on);
            let h = c
                .collective(&again, GatherAll::new(vec![me as u8; 3]), Nb)
                .unwrap();
            let g = c.wait(h).unwrap();
            assert_eq!(g, (0..p as u8).flat_map(|r| [r; 3]).collect::<Vec<_>>());
            c.barrier(&w).unwrap();
            assert_eq!(c.coll_stats().in_flight, 0);
        },
    );
}

/// Blocking calls take the direct shared-memory path only when nothing else is in
/// flight on the endpoint: while ranks 0 and 1 hold an allreduce on a team of all four
/// (which ranks 2 and 3 join only later), their blocking world collectives queue
/// behind it (nonblocking path) and ranks 2 and 3 run the same collectives directly;
/// both paths interoperate (same sequence numbers and slots), and every value is
/// right. (A held collective must be incomplete: one that completed is no longer in
/// flight, even before its event is waited for.)
#[test]
fn blocking_calls_mix_direct_and_queued_paths() {
    on_sim(4, SimConfig::default().seed(9), SEG, |mut c, w| {
        let (p, me) = (w.size(), w.rank());
        let on = !cfg!(gex_force_am_rma);
        let quad = c.create_team(&w, &[0, 1, 2, 3], Scratch::None).unwrap();
        let sum = ReduceOp::<u64>::builtin(BuiltinOp::Sum);
        let held = (me < 2).then(|| {
            c.collective(
                &quad,
                Allreduce::new(vec![u64::from(me); 1000], sum.clone()),
                Nb,
            )
            .unwrap()
        });
        let before = c.coll_stats().direct_calls;
        for k in 0..20u32 {
            let root = k % p;
            let mut buf = vec![if me == root { k * 31 + 7 } else { 0 }; 1 + k as usize * 300];
            c.collective(&w, Broadcast::in_place(root, &mut buf), Blocking)
                .unwrap();
            assert!(buf.iter().all(|&x| x == k * 31 + 7), "broadcast {k}");
            let mut out = [0u64; 3];
            c.collective(
                &w,
                Allreduce::slices(&[u64::from(me + k); 3], &mut out, sum.clone()),
                Blocking,
            )
            .unwrap();
            assert_eq!(out, [(0..p).map(|r| u64::from(r + k)).sum::<u64>(); 3]);
        }
        let direct = c.coll_stats().direct_calls - before;
        assert_eq!(direct, if on && me >= 2 { 40 } else { 0 }, "rank {me}");
        let held = held.unwrap_or_else(|| {
            c.collective(
                &quad,
                Allreduce::new(vec![u64::from(me); 1000], sum.clone()),
                Nb,
            )
            .unwrap()
        });
        assert_eq!(c.wait(held).unwrap(), vec![6u64; 1000]);
        c.barrier(&w).unwrap();
        // The barrier: direct everywhere once nothing is held.
        let all = u64::from(on) * (direct + 1);
        assert_eq!(c.coll_stats().direct_calls - before, all);
        assert_eq!(c.coll_stats().in_flight, 0);
    });
}

/// Starts a broadcast in single address mode from rank 0 of `w`: `n` bytes at the
/// offsets of `addrs`, with the options `opts`.
fn bcast_from_0(
    c: &mut Endpoint<Sim>,
    w: &Team,
    n: usize,
    addrs: &Single,
    opts: Opts<'_>,
) -> gex_core::Event<(), CollError> {
    let d = InSegments::<u8>::new(OpKind::Broadcast, n, addrs.clone());
    c.collective(w, d.root(0).opts(opts), Nb).unwrap()
}

/// Calls (and barriers) that replayed the previous one's decisions so far.
fn replayed(c: &mut Endpoint<Sim>) -> u64 {
    c.coll_stats().replayed_calls
}

/// Blocking barriers under default options replay the first one's decision
/// (`Coll::barrier_replay`): the names still meet (a mismatch is an error on every
/// member, and the next barrier works), and a new team, or one made after a team was
/// destroyed, takes the general path first.
#[test]
fn replayed_barriers_keep_names_and_teams() {
    on_sim(4, SimConfig::default().seed(12), SEG, |mut c, w| {
        let (p, me) = (w.size(), w.rank());
        let on = !cfg!(gex_force_am_rma);
        let r0 = replayed(&mut c);
        for _ in 0..5 {
            c.barrier(&w).unwrap();
        }
        // The first barrier chooses; the four after it replay.
        assert_eq!(replayed(&mut c) - r0, if on { 4 } else { 0 });
        // Matching names pass, different ones fail everywhere, on the replayed path.
        let before = replayed(&mut c);
        c.collective(&w, Barrier::named(7), Blocking).unwrap();
        let r = c.collective(&w, Barrier::named(u64::from(me % 2)), Blocking);
        assert_eq!(r, Err(CollError::BarrierMismatch), "rank {me}");
        assert_eq!(replayed(&mut c) - before, if on { 2 } else { 0 });
        c.barrier(&w).unwrap();
        // Another team: its first barrier takes the general path, then it replays;
        // the world's next barrier takes the general path again.
        let all: Vec<u32> = (0..p).rev().collect();
        for _ in 0..2 {
            let t = c.create_team(&w, &all, Scratch::None).unwrap();
            let before = replayed(&mut c);
            for _ in 0..3 {
                c.barrier(&t).unwrap();
            }
            assert_eq!(replayed(&mut c) - before, if on { 2 } else { 0 });
            c.destroy_team(t).unwrap();
        }
        let before = replayed(&mut c);
        c.barrier(&w).unwrap();
        c.barrier(&w).unwrap();
        assert_eq!(replayed(&mut c) - before, u64::from(on));
        assert_eq!(c.coll_stats().in_flight, 0);
    });
}

/// Blocking calls of one shape in a loop replay the first call's checks and decisions
/// (shmdrive, *Replay*); any change of shape, options, reduction kind or tuner takes
/// the general path again, and its checks: bad lengths are still errors, a new root or
/// a non-commutative reduction still gives the right result.
#[test]
fn replayed_calls_keep_the_checks_and_results() {
    on_sim(4, SimConfig::default().seed(11), SEG, |mut c, w| {
        let (p, me) = (w.size(), w.rank());
        let on = !cfg!(gex_force_am_rma);
        let sum = ReduceOp::<u64>::builtin(BuiltinOp::Sum);
        let r0 = replayed(&mut c);
        for k in 0..10u64 {
            let (src, mut out) = ([u64::from(me) + k; 3], [0u64; 3]);
            let d = Allreduce::slices(&src, &mut out, sum.clone());
            c.collective(&w, d, Blocking).unwrap();
            let want = (0..u64::from(p)).map(|r| r + k).sum::<u64>();
            assert_eq!(out, [want; 3], "allreduce {k}");
        }
        // The first call lowers and chooses; the nine after it replay.
        assert_eq!(replayed(&mut c) - r0, if on { 9 } else { 0 });
        // A borrowed operator replays as a moved one does.
        let before = replayed(&mut c);
        for k in 0..4u64 {
            let (src, mut out) = ([u64::from(me) + k; 3], [0u64; 3]);
            c.collective(&w, Allreduce::slices(&src, &mut out, &sum), Blocking)
                .unwrap();
            assert_eq!(out, [(0..u64::from(p)).map(|r| r + k).sum::<u64>(); 3]);
        }
        assert_eq!(replayed(&mut c) - before, if on { 4 } else { 0 });
        // In-place broadcasts above the ring's size replay too, from any root.
        for root in [1 % p, 1 % p, 1 % p, 0, 0] {
            let mut buf = vec![if me == root { u64::from(root) + 5 } else { 0 }; 40];
            c.collective(&w, Broadcast::in_place(root, &mut buf), Blocking)
                .unwrap();
            assert!(buf.iter().all(|&x| x == u64::from(root) + 5));
        }
        let before = replayed(&mut c);
        for _ in 0..3 {
            let mut buf = vec![if me == 0 { 9u64 } else { 0 }; 40];
            c.collective(&w, Broadcast::in_place(0, &mut buf), Blocking)
                .unwrap();
            assert!(buf.iter().all(|&x| x == 9));
        }
        assert_eq!(replayed(&mut c) - before, if on { 3 } else { 0 });
        // A bad output length is still an error (the shape differs: no replay).
        let (src, mut short) = ([1u64; 3], [0u64; 2]);
        let d = Allreduce::slices(&src, &mut short, sum.clone());
        assert!(matches!(
            c.collective(&w, d, Blocking),
            Err(CollError::BadLength { .. })
        ));
        // Another root of the same lengths: its own checks and the right result.
        for root in [0, p - 1, 0] {
            let (src, mut out) = ([u64::from(me) + 1; 2], [0u64; 2]);
            let d = Reduce::slices(root, &src, &mut out, sum.clone());
            c.collective(&w, d, Blocking).unwrap();
            let want = if me == root {
                [(1..=u64::from(p)).sum::<u64>(); 2]
            } else {
                [0; 2]
            };
            assert_eq!(out, want, "reduce to {root}");
        }
        // A non-commutative (associative) reduction of the same shape: combined in
        // rank order, so the leftmost operand, rank 0's, wins.
        let first = ReduceOp::<u64>::user(false, |a: &u64, _: &u64| *a);
        for _ in 0..3 {
            let (src, mut out) = ([u64::from(me) + 1; 3], [0u64; 3]);
            let d = Allreduce::slices(&src, &mut out, first.clone());
            c.collective(&w, d, Blocking).unwrap();
            assert_eq!(out, [1; 3]);
        }
        // The tuner changed: the next call chooses again (no replay, though the
        // call before it had the same shape), the one after it replays.
        let (src, mut out) = ([1u64; 3], [0u64; 3]);
        let d = Allreduce::slices(&src, &mut out, sum.clone());
        c.collective(&w, d, Blocking).unwrap();
        let before = replayed(&mut c);
        c.tuner(|_| ()).unwrap();
        for _ in 0..2 {
            let (src, mut out) = ([1u64; 3], [0u64; 3]);
            let d = Allreduce::slices(&src, &mut out, sum.clone());
            c.collective(&w, d, Blocking).unwrap();
            assert_eq!(out, [u64::from(p); 3]);
        }
        assert_eq!(replayed(&mut c) - before, u64::from(on));
        // Forced options never replay (`shm` itself where it runs).
        let forced = if on {
            "shm".to_string()
        } else {
            c.algorithms(OpKind::Allreduce).swap_remove(0)
        };
        let before = replayed(&mut c);
        for _ in 0..2 {
            let mut out = [0u64; 3];
            let d = Allreduce::slices(&[1u64; 3], &mut out, sum.clone())
                .opts(Opts::default().with_algorithm(&forced));
            c.collective(&w, d, Blocking).unwrap();
            assert_eq!(out, [u64::from(p); 3]);
        }
        assert_eq!(replayed(&mut c), before);
        // A team destroyed and another made: calls on it lower again.
        let all: Vec<u32> = (0..p).collect();
        for round in 0..2u64 {
            let t = c.create_team(&w, &all, Scratch::None).unwrap();
            let before = replayed(&mut c);
            for _ in 0..3 {
                let (src, mut out) = ([round; 3], [0u64; 3]);
                let d = Allreduce::slices(&src, &mut out, sum.clone());
                c.collective(&t, d, Blocking).unwrap();
                assert_eq!(out, [round * u64::from(p); 3]);
            }
            assert_eq!(replayed(&mut c) - before, if on { 2 } else { 0 });
            c.destroy_team(t).unwrap();
        }
        c.barrier(&w).unwrap();
        assert_eq!(c.coll_stats().in_flight, 0);
    });
}

/// Cases each rank of a `hier` test runs at least (under `--cfg gex_force_am_rma`
/// there is no hierarchy: one message-algorithm matrix instead).
const HIER_MIN_CASES: usize = if cfg!(gex_force_am_rma) { 50 } else { 100 };

/// Runs the hierarchical job `f` on `p` thread ranks placed by `cfg`, with messages
/// reordered, `4 × SEG`-byte segments and a watchdog of 10 minutes (nine debug-built
/// thread ranks running every algorithm are slow on a busy machine); the results in
/// rank order.
fn hier_sim<R: Send>(
    p: u32,
    cfg: SimConfig,
    f: impl Fn(OwnedEndpoint<Sim>, Team) -> R + Send + Sync,
) -> Vec<R> {
    let cfg = cfg.reorder(true).timeout(Duration::from_secs(600));
    on_sim(p, cfg, 4 * SEG, f)
}

/// `hier` on `team`: every operation × every root (rooted ones; the largest count
/// with two roots) × `counts`, forced and tuned, u32 sums; the non-commutative affine
/// map forced (run where `hier` takes it: host ranges, or scan/exscan; refused
/// otherwise) and tuned; four more element types. Returns the cases run.
fn hier_cases(c: &mut Endpoint<Sim>, team: &Team, counts: &[usize], ranges: bool) -> usize {
    use OpKind::{Exscan, Scan};
    let sum = ReduceOp::<u32>::builtin(BuiltinOp::Sum);
    let aff = affine();
    let hier = Some("hier");
    let p = team.size();
    let big = counts.iter().copied().max().unwrap_or(0);
    let mut ran = 0;
    let mut salt = 1000;
    for op in OpKind::ALL {
        for &count in counts {
            let roots: Vec<u32> = match (op.rooted(), count == big && big > 13) {
                (false, _) => vec![0],
                (true, true) => vec![1, p - 1],
                (true, false) => (0..p).collect(),
            };
            for root in roots {
                salt += 1;
                for alg in [hier, None] {
                    let ok = run_one(c, team, op, alg, root, count, &sum, salt);
                    assert!(ok, "{op} {alg:?} refused");
                    ran += 1;
                }
                if op.reduces() {
                    let takes = ranges || matches!(op, Scan | Exscan);
                    let ok = run_one(c, team, op, hier, root, count, &aff, salt);
                    assert_eq!(ok, takes, "{op}: hier and a non-commutative operator");
                    assert!(run_one(c, team, op, None, root, count, &aff, salt));
                    ran += 2;
                }
            }
        }
        let root = if op.rooted() { p - 1 } else { 0 };
        for alg in [hier, None] {
            let max_f64 = ReduceOp::<f64>::builtin(BuiltinOp::Max);
            let bxor8 = ReduceOp::<i8>::bitwise(BitOp::Bxor);
            let prod128 = ReduceOp::<u128>::builtin(BuiltinOp::Prod);
            let land16 = ReduceOp::<i16>::bitwise(BitOp::Land);
            assert!(run_one(c, team, op, alg, root, 7, &max_f64, 99));
            assert!(run_one(c, team, op, alg, root, 9, &bxor8, 98));
            assert!(run_one(c, team, op, alg, root, 3, &prod128, 97));
            assert!(run_one(c, team, op, alg, root, 5, &land16, 96));
            ran += 4;
        }
    }
    ran
}

/// The tuner on a hierarchical team at 8 bytes: `hier` for every operation without a
/// root (and, with `rooted`, for every operation); for a non-commutative operator `hier` is a candidate of scan and exscan always, of
/// reduce, allreduce and reduce_scatter only on host ranges.
fn hier_choices(c: &mut Endpoint<Sim>, team: &Team, hosts: u32, ranges: bool, rooted: bool) {
    for op in OpKind::ALL {
        for commutative in [true, false] {
            let q = gex_coll::Query {
                commutative: commutative || !op.reduces(),
                shm: c.shared_memory(team),
                hier: true,
                hosts,
                host_ranges: ranges,
                ..gex_coll::Query::plain(op, team.size(), 8)
            };
            let ch = c.explain(&q).unwrap();
            let offered = ch.candidates.iter().any(|x| x.0 == "hier");
            let takes = q.commutative || ranges || matches!(op, OpKind::Scan | OpKind::Exscan);
            assert_eq!(offered, takes, "{op} commutative={commutative}: {ch:?}");
            if commutative && (rooted || !op.rooted()) {
                assert_eq!(ch.algorithm, "hier", "{op}: {ch:?}");
            }
        }
    }
}

/// Nine ranks on three hosts of three: the world team (its host and leader teams
/// built without communication, the host team on channel 0), a team of every rank
/// made by `create_team`, and a team of every rank in round-robin order (hosts are
/// not rank ranges) are hierarchical; every operation × root × size (empty, one
/// element, odd, 18 KB blocks: fragmented messages, several shared-memory rounds) ×
/// element type matches the reference with `hier` forced and tuned, non-commutative
/// reductions where `hier` takes them and refused where not; every algorithm on
/// the world; forced broadcast, reduce, allreduce and barrier spelled out.
#[test]
fn hier_equal_hosts_world_and_round_robin() {
    let ran = hier_sim(
        9,
        SimConfig::default().seed(13).ranks_per_host(3),
        |mut c, w| {
            let r = w.rank();
            let on = !cfg!(gex_force_am_rma);
            assert_eq!(c.hierarchical(&w), on);
            assert!(!c.shared_memory(&w));
            if !on {
                return matrix(&mut c, &w, &[1, 4500]);
            }
            hier_choices(&mut c, &w, 3, true, true);
            let mut n = hier_cases(&mut c, &w, &[0, 1, 13, 4500], true);
            n += matrix(&mut c, &w, &[1, 4500]);
            // Spelled out: forced, every root (leaders and non-leaders of every host).
            let hier = Opts::default().with_algorithm("hier");
            let sum = ReduceOp::<u64>::builtin(BuiltinOp::Sum);
            for root in 0..9u32 {
                let v = vec![u64::from(r) * 10 + u64::from(root); 5];
                let h = c
                    .collective(&w, Broadcast::new(root, v.clone()).opts(hier), Nb)
                    .unwrap();
                assert_eq!(c.wait(h).unwrap(), vec![u64::from(root) * 11; 5]);
                let h = c
                    .collective(&w, Reduce::new(root, v, sum.clone()).opts(hier), Nb)
                    .unwrap();
                let want = if r == root {
                    vec![(0..9).map(|x| x * 10 + u64::from(root)).sum::<u64>(); 5]
                } else {
                    vec![]
                };
                assert_eq!(c.wait(h).unwrap(), want);
            }
            let h = c
                .collective(
                    &w,
                    Allreduce::new(vec![u64::from(r); 3], sum.clone()).opts(hier),
                    Nb,
                )
                .unwrap();
            assert_eq!(c.wait(h).unwrap(), vec![36; 3]);
            let h = c.collective(&w, Barrier::new().opts(hier), Nb).unwrap();
            c.wait(h).unwrap();
            // A team of every rank: host teams agree on channels at creation.
            let all: Vec<u32> = (0..9).collect();
            let t = c.create_team(&w, &all, Scratch::None).unwrap();
            assert!(c.hierarchical(&t));
            n += hier_cases(&mut c, &t, &[0, 13], true);
            // Round-robin over the hosts: team rank i is on host i % 3.
            let rr: Vec<u32> = (0..9).map(|i| (i % 3) * 3 + i / 3).collect();
            let t = c.create_team(&w, &rr, Scratch::None).unwrap();
            assert!(c.hierarchical(&t));
            hier_choices(&mut c, &t, 3, false, true);
            n += hier_cases(&mut c, &t, &[0, 1, 13, 4500], false);
            c.barrier(&w).unwrap();
            n
        },
    );
    assert!(ran.iter().all(|&n| n > HIER_MIN_CASES), "{ran:?}");
}

/// Hosts of unequal sizes: on three hosts of three, a split team with hosts of 3, 2
/// and 1 members (rank ranges, in reverse key order) and a team whose hosts hold
/// 3, 3 and 1 interleaved members; then a world of 5 ranks on hosts of 2, 2 and 1.
#[test]
fn hier_unequal_hosts() {
    let ran = hier_sim(
        9,
        SimConfig::default().seed(17).ranks_per_host(3),
        |mut c, w| {
            let r = w.rank();
            let on = !cfg!(gex_force_am_rma);
            let mut n = 0;
            let odd = c
                .split(
                    &w,
                    [0, 1, 2, 3, 4, 6].contains(&r).then_some(1),
                    9 - r,
                    Scratch::None,
                )
                .unwrap();
            if let Some(o) = &odd {
                assert_eq!(o.size(), 6);
                assert_eq!(c.hierarchical(o), on);
                n += if on {
                    hier_choices(&mut c, o, 3, true, false);
                    hier_cases(&mut c, o, &[0, 1, 13, 4500], true)
                } else {
                    matrix(&mut c, o, &[13])
                };
            }
            // Team ranks 0..7 on hosts 0, 1, 0, 1, 2, 0, 1.
            let mixed = [0u32, 3, 1, 4, 6, 2, 5];
            if mixed.contains(&r) {
                let t = c.create_team(&w, &mixed, Scratch::None).unwrap();
                assert_eq!(c.hierarchical(&t), on);
                n += if on {
                    hier_choices(&mut c, &t, 3, false, false);
                    hier_cases(&mut c, &t, &[0, 1, 13, 4500], false)
                } else {
                    matrix(&mut c, &t, &[13])
                };
            }
            c.barrier(&w).unwrap();
            n
        },
    );
    // Ranks 7 and 8 are in neither team.
    let (in_teams, _) = ran.split_at(7);
    assert!(in_teams.iter().all(|&n| n > HIER_MIN_CASES), "{ran:?}");
    let ran = hier_sim(
        5,
        SimConfig::default().seed(19).ranks_per_host(2),
        |mut c, w| {
            let on = !cfg!(gex_force_am_rma);
            assert_eq!(c.hierarchical(&w), on);
            let n = if on {
                hier_choices(&mut c, &w, 3, true, false);
                hier_cases(&mut c, &w, &[0, 1, 13, 4500], true)
            } else {
                matrix(&mut c, &w, &[13])
            };
            c.barrier(&w).unwrap();
            n
        },
    );
    assert!(ran.iter().all(|&n| n > HIER_MIN_CASES), "{ran:?}");
}

/// A world team placed round-robin over hosts of unequal sizes (8 ranks: rank `r`
/// on host `r % 3`, so hosts of 3, 3 and 2 whose members are not rank ranges): the
/// world is hierarchical without communication; every operation matches the
/// reference; non-commutative reduce, allreduce and reduce_scatter are refused by
/// `hier` and the tuner runs another algorithm for them; teams split from it work.
#[test]
fn hier_world_round_robin() {
    let ran = hier_sim(
        8,
        SimConfig::default()
            .seed(23)
            .placement((0..8).map(|r| r % 3).collect()),
        |mut c, w| {
            let r = w.rank();
            let on = !cfg!(gex_force_am_rma);
            assert_eq!(c.hierarchical(&w), on);
            if !on {
                return matrix(&mut c, &w, &[13]);
            }
            hier_choices(&mut c, &w, 3, false, false);
            let mut n = hier_cases(&mut c, &w, &[0, 1, 13, 4500], false);
            // A host's ranks split off from the hierarchical world run `shm`.
            let host = c.split(&w, Some(r % 3), r, Scratch::None).unwrap().unwrap();
            assert!(c.shared_memory(&host) && !c.hierarchical(&host));
            n += usize::from(run_one(
                &mut c,
                &host,
                OpKind::Allreduce,
                Some("shm"),
                0,
                5,
                &affine(),
                3,
            ));
            c.barrier(&w).unwrap();
            n
        },
    );
    assert!(ran.iter().all(|&n| n > HIER_MIN_CASES), "{ran:?}");
}

/// `GEX_COLL_TUNE=online`: the first call of a cell on a team times the surviving
/// candidates (collectively), every member keeps the same winner, later calls of the
/// cell do not re-time, results stay right, and a split team times its own cells.
#[test]
fn online_tuning_agrees_and_caches() {
    use gex_coll::{Query, TuneMode};
    let builder = || {
        layers()
            .segment_size(SEG)
            .config(gex_core::Config::from_pairs([("GEX_COLL_TUNE", "online")]))
    };
    let out = run_sim(4, SimConfig::default(), builder, |client| {
        let mut c = client.endpoint(0).unwrap();
        assert_eq!(c.tuner(|t| t.mode()).unwrap(), TuneMode::Online);
        let w = c.world().clone();
        let me = w.rank();
        let sum = ReduceOp::<u32>::builtin(BuiltinOp::Sum);
        let mut winners = Vec::new();
        for round in 0..3u32 {
            let v = vec![me + round; 100];
            let mut r = vec![0u32; 100];
            c.collective(&w, Allreduce::slices(&v, &mut r, sum.clone()), Blocking)
                .unwrap();
            assert_eq!(r, vec![6 + 4 * round; 100]);
            assert_eq!(c.coll_stats().online_trials, 1, "round {round}");
        }
        let q = Query {
            shm: c.shared_memory(&w),
            hier: c.hierarchical(&w),
            ..Query::plain(OpKind::Allreduce, 4, 400)
        };
        let a = c
            .tuner(|t| t.online_choice(w.id(), &q).unwrap().name().to_string())
            .unwrap();
        let cands: Vec<String> = c
            .tuner(|t| {
                t.online_candidates(&q, 4)
                    .iter()
                    .map(|&i| t.algorithms()[i].name().to_string())
                    .collect()
            })
            .unwrap();
        assert!(cands.contains(&a), "{a} not in {cands:?}");
        winners.push(a);
        // A split team has its own cells.
        let sub = c
            .split(&w, Some(me % 2), 0, Default::default())
            .unwrap()
            .unwrap();
        let before = c.coll_stats().online_trials;
        let mut b = [me; 8];
        c.collective(&sub, Broadcast::in_place(0, &mut b), Blocking)
            .unwrap();
        assert_eq!(b, [me % 2; 8]);
        assert!(c.coll_stats().online_trials > before);
        let qb = Query {
            op: OpKind::Broadcast,
            size: 2,
            bytes: 32,
            ..q
        };
        winners.push(
            c.tuner(|t| t.online_choice(sub.id(), &qb).unwrap().name().to_string())
                .unwrap(),
        );
        c.barrier(&w).unwrap();
        winners
    });
    assert!(out.iter().all(|w| w[0] == out[0][0]), "{out:?}");
    assert_eq!(out[0][1], out[2][1], "{out:?}");
    assert_eq!(out[1][1], out[3][1], "{out:?}");
}

/// Blocking calls over buffers in the members' segments: blocks of 16 KiB and more
/// are published by reference (readers copy straight from the publisher's segment,
/// one copy) and the publisher returns only once its readers have copied — every
/// member scribbles over its input as soon as a call returns, and every result still
/// matches the reference. Small blocks go through the slots as before. Two shapes:
/// the world of 4 (one host) and the per-host teams of 3 hosts × 2 ranks.
#[test]
fn segment_buffers_by_reference() {
    for (p, per_host) in [(4u32, 4u32), (6, 2)] {
        on_sim(
            p,
            SimConfig::default().seed(21).ranks_per_host(per_host),
            4 * SEG,
            |mut c, w| {
                let me = w.rank();
                let host = c
                    .split(&w, Some(me / per_host), me, Scratch::None)
                    .unwrap()
                    .unwrap();
                let shm = !cfg!(gex_force_am_rma) && c.shared_memory(&host);
                let before = c.coll_stats().by_reference_calls;
                // 3 u64 (slots), 2100 u64 = 16.8 KB (by reference, one round) and
                // 40 000 u64 = 320 KB (by reference, several rounds of a slot).
                let ran = segment_matrix(&mut c, &host, &[3, 2100, 40_000]);
                assert!(ran > 50, "only {ran} cases");
                let by_ref = c.coll_stats().by_reference_calls - before;
                let before_private = c.coll_stats().by_reference_calls;
                if shm {
                    assert!(by_ref > 20, "rank {me}: only {by_ref} calls by reference");
                } else {
                    assert_eq!(by_ref, 0);
                }
                // Private buffers: the copying operations' large blocks go by CMA
                // (thread ranks read their own process), the rest through the slots.
                let before = c.coll_stats().cma_calls;
                let ran = buffer_matrix(&mut c, &host, &[3, 2100, 40_000], false);
                assert!(ran > 50, "only {ran} cases");
                let cma = c.coll_stats().cma_calls - before;
                if shm && gex_coll::cma_capable() {
                    // At least the two large exchanges (on a team with more members
                    // than CPUs only exchange goes by CMA).
                    assert!(cma >= 2, "rank {me}: only {cma} CMA publications");
                } else {
                    assert_eq!(cma, 0);
                }
                assert_eq!(c.coll_stats().by_reference_calls - before_private, 0);
                c.barrier(&w).unwrap();
            },
        );
    }
}

/// Roots named by where the data lives (`Root::Data`, a `GlobalPtr`): every rooted
/// operation, owned buffers (nonblocking and blocking, tuned and forced algorithms)
/// and single address mode (the pointer is the root's buffer), from every member of
/// split teams whose team ranks are not their job ranks; then the errors, on every
/// member alike and before anything moves.
#[test]
fn data_centric_roots() {
    use OpKind::{Broadcast, Gather, Reduce, Scatter};
    use common::to_vec;
    use gex_coll::Root;
    use gex_rma::{GlobalPtr, RmaError};
    on_sim(
        6,
        SimConfig::default().reorder(true).seed(31),
        SEG,
        |mut c, w| {
            let me = w.rank();
            // Teams {4, 2, 0} and {5, 3, 1} (job ranks in team-rank order).
            let t = c
                .split(&w, Some(me % 2), 100 - me, Scratch::None)
                .unwrap()
                .unwrap();
            let (p, tr) = (t.size(), t.rank());
            assert_eq!(tr, 2 - me / 2);
            let sum = ReduceOp::<u32>::builtin(BuiltinOp::Sum);
            let (count, n) = (5usize, 20usize);
            let mut salt = 0u64;
            let mut ran = 0;
            for op in [Broadcast, Scatter, Gather, Reduce] {
                for owner in 0..p {
                    for alg in [None, Some("fork2d"), Some("binomial"), Some("flat")] {
                        salt += 1;
                        // The root's buffer, at an offset of its own.
                        let at = 4096 + 256 * owner as usize;
                        let ptr = GlobalPtr::<u32>::new(t.member(owner).unwrap(), at);
                        assert_eq!(Root::from(ptr), Root::Data(ptr.cast()));
                        let inputs: Vec<Vec<u8>> = (0..p)
                            .map(|r| bytes(r as usize, salt, op.shape(p, r, owner).0.max(1) * n))
                            .collect();
                        let red = op.reduces().then_some(sum.func());
                        let want = reference(op, owner as usize, n, &inputs, red);
                        let mine = &want[tr as usize];
                        let data: Vec<u32> = to_vec(&inputs[tr as usize]);
                        let opts = Opts {
                            algorithm: alg,
                            ..Opts::default()
                        };
                        // Owned buffers, nonblocking.
                        let h = match op {
                            Broadcast => c.collective(
                                &t,
                                gex_coll::Broadcast::new(ptr, data.clone()).opts(opts),
                                Nb,
                            ),
                            Scatter => c.collective(
                                &t,
                                gex_coll::Scatter::new(ptr, data.clone(), count).opts(opts),
                                Nb,
                            ),
                            Gather => c.collective(
                                &t,
                                gex_coll::Gather::new(ptr, data.clone()).opts(opts),
                                Nb,
                            ),
                            _ => c.collective(
                                &t,
                                gex_coll::Reduce::new(ptr, data.clone(), sum.clone()).opts(opts),
                                Nb,
                            ),
                        }
                        .unwrap();
                        let got = c.wait(h).unwrap();
                        assert_eq!(bytemuck::cast_slice::<u32, u8>(&got), &mine[..]);
                        // Blocking, over borrowed slices.
                        let mut out = vec![
                            7u32;
                            if op == Gather {
                                p as usize * count
                            } else {
                                count
                            }
                        ];
                        match op {
                            Broadcast => {
                                let mut b = data.clone();
                                c.collective(
                                    &t,
                                    gex_coll::Broadcast::in_place(ptr, &mut b).opts(opts),
                                    Blocking,
                                )
                                .unwrap();
                                out = b;
                            }
                            Scatter => c
                                .collective(
                                    &t,
                                    gex_coll::Scatter::slices(ptr, &data, &mut out).opts(opts),
                                    Blocking,
                                )
                                .unwrap(),
                            Gather => c
                                .collective(
                                    &t,
                                    gex_coll::Gather::slices(ptr, &data, &mut out).opts(opts),
                                    Blocking,
                                )
                                .unwrap(),
                            _ => c
                                .collective(
                                    &t,
                                    gex_coll::Reduce::slices(ptr, &data, &mut out, sum.clone())
                                        .opts(opts),
                                    Blocking,
                                )
                                .unwrap(),
                        }
                        if mine.is_empty() {
                            assert!(out.iter().all(|&x| x == 7), "{op}: a non-root's output");
                        } else {
                            assert_eq!(bytemuck::cast_slice::<u32, u8>(&out), &mine[..]);
                        }
                        ran += 1;
                        // Single address mode: the root's buffer is at the pointer; the
                        // other members' at offsets that differ from it.
                        let (src, dst) = (100_000usize, 200_000usize);
                        c.segment().write(dst, &vec![0xEE; p as usize * n]).unwrap();
                        c.segment().write(at, &vec![0xEE; p as usize * n]).unwrap();
                        let root_buf = matches!(op, Broadcast | Scatter);
                        let input_at = if root_buf && tr == owner { at } else { src };
                        c.segment().write(input_at, &inputs[tr as usize]).unwrap();
                        c.barrier(&w).unwrap();
                        for in_place in [false, true] {
                            if in_place && op != Broadcast {
                                continue;
                            }
                            let addrs = if in_place {
                                Single::in_place(p, dst)
                            } else {
                                Single::uniform(p, src, dst)
                            };
                            let h = c
                                .collective(
                                    &t,
                                    InSegments::<u32>::new(op, count, addrs.clone())
                                        .root(ptr)
                                        .opts(opts)
                                        .reduce(sum.clone()),
                                    Nb,
                                )
                                .unwrap();
                            c.wait(h).unwrap();
                            let out_at = if !root_buf && tr == owner { at } else { dst };
                            let mut got = vec![0u8; mine.len()];
                            c.segment().read(out_at, &mut got).unwrap();
                            assert_eq!(&got, mine, "{op} single in_place={in_place}");
                            c.barrier(&w).unwrap();
                        }
                    }
                }
            }
            assert_eq!(ran, 4 * 3 * 4);
            // Errors, on every member alike: the pointer's owner is not in the team
            // (a member of the other team; an endpoint index the team does not use).
            let other = w.member((me + 1) % 6).unwrap();
            for addr in [other, gex_core::EpAddr::new(me, 1)] {
                let ptr = GlobalPtr::<u32>::new(addr, 0);
                let e = c
                    .collective(&t, gex_coll::Broadcast::new(ptr, vec![1u32; 4]), Nb)
                    .unwrap_err();
                assert_eq!(
                    e,
                    CollError::RootNotMember {
                        owner: addr,
                        team: t.id()
                    }
                );
                let mut v = [0u32; 4];
                assert!(matches!(
                    c.collective(
                        &t,
                        gex_coll::Reduce::slices(ptr, &[1u32; 4], &mut v, sum.clone()),
                        Blocking
                    ),
                    Err(CollError::RootNotMember { .. })
                ));
                let e = c
                    .collective(
                        &t,
                        InSegments::<u32>::new(Gather, 4, Single::uniform(p, 0, 64).clone())
                            .root(ptr),
                        Nb,
                    )
                    .unwrap_err();
                assert!(matches!(e, CollError::RootNotMember { .. }), "{e}");
            }
            // ... or the root's buffer leaves the owner's segment: one block for a
            // broadcast, P blocks for a scatter, and a saturated pointer.
            let owner = t.member(1).unwrap();
            let edge = GlobalPtr::<u32>::new(owner, SEG - 16);
            let e = c
                .collective(&t, gex_coll::Broadcast::new(edge, vec![1u32; 5]), Nb)
                .unwrap_err();
            assert_eq!(
                e,
                CollError::Rma(RmaError::OutOfSegment {
                    dst: owner,
                    offset: SEG - 16,
                    len: 20,
                    seg_len: SEG
                })
            );
            let mut v = [0u32; 4];
            c.collective(&t, gex_coll::Broadcast::in_place(edge, &mut v), Blocking)
                .unwrap(); // 16 bytes fit
            let block = GlobalPtr::<u32>::new(owner, SEG - 3 * 8);
            let mut one = [0u32; 2];
            c.collective(
                &t,
                gex_coll::Gather::slices(
                    block,
                    &[me; 2],
                    &mut if tr == 1 { vec![0; 6] } else { vec![] },
                ),
                Blocking,
            )
            .unwrap(); // 3 blocks of 8 bytes fit
            let e = c
                .collective(
                    &t,
                    gex_coll::Scatter::slices(block, &[0u32; 9], &mut [0u32; 3]),
                    Blocking,
                )
                .unwrap_err();
            assert!(
                matches!(e, CollError::Rma(RmaError::OutOfSegment { len: 36, .. })),
                "{e}"
            );
            let far = GlobalPtr::<u32>::new(owner, 0).add(usize::MAX);
            assert!(matches!(
                c.collective(
                    &t,
                    gex_coll::Scatter::slices(far, &[0u32; 6], &mut one),
                    Blocking
                ),
                Err(CollError::Rma(RmaError::OutOfSegment { .. }))
            ));
            // Nothing started: the teams still agree on their sequence numbers.
            assert_eq!(c.coll_stats().in_flight, 0);
            let mut b = [u32::from(tr == 2) * 9; 3];
            c.collective(
                &t,
                gex_coll::Broadcast::in_place(
                    GlobalPtr::<u8>::new(t.member(2).unwrap(), 0),
                    &mut b,
                ),
                Blocking,
            )
            .unwrap();
            assert_eq!(b, [9; 3]);
            c.barrier(&w).unwrap();
            assert_eq!(c.coll_stats().dropped_messages, 0);
        },
    );
}

/// `GEX_COLL_<OP>=hier` for every operation: the application's calls run `hier`, and
/// the sub-collectives of its stages (an allreduce among one leader per host, a
/// broadcast inside a host, ...) fall back to the tuner instead of failing because
/// the override cannot run them. Without native RMA (`gex_force_am_rma`) no team is
/// hierarchical and the override fails each call with `Unsupported`, as documented.
#[test]
fn hier_override_leaves_stages_to_the_tuner() {
    let pairs: Vec<(&str, &str)> = OpKind::ALL
        .iter()
        .map(|op| (op.env_var(), "hier"))
        .collect();
    let builder = move || {
        layers()
            .segment_size(4 * SEG)
            .config(gex_core::Config::from_pairs(pairs.clone()))
    };
    let ran = run_sim(
        6,
        SimConfig::default().reorder(true).seed(5).ranks_per_host(3),
        builder,
        |client| {
            let mut c = client.endpoint(0).unwrap();
            let w = c.world().clone();
            let sum = ReduceOp::<u32>::builtin(BuiltinOp::Sum);
            let mut n = 0;
            for op in OpKind::ALL {
                let q = gex_coll::Query {
                    sync: gex_coll::SyncModes::default(),
                    hier: c.hierarchical(&w),
                    hosts: 2,
                    host_ranges: true,
                    ..gex_coll::Query::plain(op, 6, 8)
                };
                match c.explain(&q) {
                    Ok(why) => assert_eq!(
                        (why.algorithm.as_str(), why.reason),
                        ("hier", gex_coll::Reason::Override),
                        "{op}"
                    ),
                    Err(e) => assert!(
                        !q.hier && matches!(e, CollError::Unsupported { .. }),
                        "{op}: {e}"
                    ),
                }
                for count in [1usize, 13] {
                    let root = if op.rooted() { 4 } else { 0 };
                    let ok = run_one(&mut c, &w, op, None, root, count, &sum, 7 + n);
                    assert_eq!(ok, c.hierarchical(&w), "{op} count {count}");
                    n += 1;
                }
            }
            assert_eq!(c.hierarchical(&w), !cfg!(gex_force_am_rma));
            c.collective(
                &w,
                Barrier::new().opts(Opts::default().with_algorithm("binomial")),
                Nb,
            )
            .map(|h| c.wait(h).unwrap())
            .unwrap();
            n
        },
    );
    assert!(
        ran.iter().all(|&n| n == 2 * OpKind::ALL.len() as u64),
        "{ran:?}"
    );
}

/// Members that name different roots get `Mismatch` (field `Root`) instead of waiting forever
/// (the code before the layer hung in every case below; the simulator's watchdog
/// turns a hang into a failure). Over messages (one rank per host) and through
/// shared memory (one host), each mismatch on a team of its own:
/// - two members that each take the other for the root of a broadcast (nobody ever
///   sends: found by the stalled members' probes, or in their check lines): both fail;
/// - three members naming three different roots: all fail;
/// - a reduce to rank 0 where rank 2 names rank 1: rank 0 waits for rank 2's data and
///   fails; ranks 1 and 2 finish or fail (documented on `Root`).
///
/// Afterwards the world team still runs collectives (teams of messages stay usable,
/// shared-memory ones are poisoned: they are destroyed).
#[test]
fn root_mismatch_is_an_error_not_a_hang() {
    for per_host in [1u32, 3] {
        let cfg = SimConfig::default()
            .seed(41)
            .ranks_per_host(per_host)
            .timeout(Duration::from_secs(120));
        on_sim(3, cfg, SEG, move |mut c, w| {
            let me = w.rank();
            fn mismatch<T>(r: &Result<T, CollError>) -> bool {
                match r {
                    Err(CollError::Mismatch { found, .. }) => {
                        found.is_none_or(|d| d.field == gex_coll::Field::Root)
                    }
                    _ => false,
                }
            }
            // Two members, each naming the other.
            let pair = c
                .split(&w, Some(u32::from(me < 2)), me, Scratch::None)
                .unwrap()
                .unwrap();
            if me < 2 {
                assert_eq!(
                    c.shared_memory(&pair),
                    per_host > 1 && !cfg!(gex_force_am_rma)
                );
                let mut b = [me; 4];
                let r = c.collective(&pair, Broadcast::in_place(1 - me, &mut b), Blocking);
                assert!(mismatch(&r), "rank {me}: {r:?}");
                // The team failed: its next collective fails at once.
                let r = c.collective(&pair, Barrier::new(), Blocking);
                assert!(mismatch(&r), "rank {me}: {r:?}");
            }
            // Nonblocking (on a new pair: the first failed): the event fails the
            // same way.
            let pair2 = c
                .split(&w, Some(u32::from(me < 2)), me, Scratch::None)
                .unwrap()
                .unwrap();
            if me < 2 {
                let ev = c
                    .collective(
                        &pair2,
                        Broadcast::new(1 - me, vec![me; 4]).algorithm("flat"),
                        Nb,
                    )
                    .unwrap();
                let r = c.wait(ev);
                assert!(mismatch(&r), "rank {me}: {r:?}");
            }
            // Three members, three roots (binomial tree, and the tuned algorithm).
            let trio = c.create_team(&w, &[0, 1, 2], Scratch::None).unwrap();
            for alg in ["binomial", ""] {
                let mut b = [me; 4];
                let d = Broadcast::in_place((me + 1) % 3, &mut b);
                let d = if alg.is_empty() { d } else { d.algorithm(alg) };
                let r = c.collective(&trio, d, Blocking);
                assert!(mismatch(&r), "rank {me} {alg}: {r:?}");
            }
            // A reduce whose root waits for a member that named another root.
            let t = c.create_team(&w, &[0, 1, 2], Scratch::None).unwrap();
            let root = if me == 2 { 1 } else { 0 };
            let r = c.collective(
                &t,
                Reduce::new(root, vec![1u32; 3], BuiltinOp::Sum),
                Blocking,
            );
            if me == 0 {
                assert!(mismatch(&r), "rank 0: {r:?}");
            } else {
                assert!(r.is_ok() || mismatch(&r), "rank {me}: {r:?}");
            }
            c.destroy_team(pair).unwrap();
            c.destroy_team(pair2).unwrap();
            c.destroy_team(trio).unwrap();
            c.destroy_team(t).unwrap();
            // The world is unaffected.
            let s = c
                .collective(
                    &w,
                    Allreduce::new(vec![u64::from(me)], BuiltinOp::Sum),
                    Blocking,
                )
                .unwrap();
            assert_eq!(s, vec![3]);
            c.barrier(&w).unwrap();
        });
    }
}

/// Members of a shared-memory team that pass broadcast sizes of different classes
/// (at most 8 bytes: the ring's packed slots; 9-56: its slots; more: the
/// slot protocol) would wait in different places: the class is part of the belief,
/// so the reader gets `Mismatch` instead of a hang (run under the simulator's
/// watchdog). Every member then leaves the poisoned team.
#[test]
fn broadcast_sizes_of_different_classes_are_an_error_not_a_hang() {
    for (root_len, reader_len) in [(8usize, 16usize), (16, 8), (56, 57), (256, 8)] {
        let cfg = SimConfig::default()
            .seed(43)
            .ranks_per_host(2)
            .timeout(Duration::from_secs(120));
        on_sim(2, cfg, SEG, move |mut c, w| {
            let me = w.rank();
            let t = c.create_team(&w, &[0, 1], Scratch::None).unwrap();
            if !c.shared_memory(&t) {
                return; // gex_force_am_rma: no shared-memory team
            }
            let mut b = vec![7u8; if me == 0 { root_len } else { reader_len }];
            let r = c.collective(&t, Broadcast::in_place(0, &mut b), Blocking);
            if me == 1 {
                assert!(
                    matches!(r, Err(CollError::Mismatch { .. })),
                    "{root_len} vs {reader_len}: {r:?}"
                );
            } else {
                assert!(
                    r.is_ok() || matches!(r, Err(CollError::Mismatch { .. })),
                    "{r:?}"
                );
            }
            c.destroy_team(t).unwrap();
            c.barrier(&w).unwrap();
        });
    }
}

/// Barrier names: a named nonblocking barrier whose members use different names
/// fails with `BarrierMismatch` on every member (the code before the layer reported
/// no mismatch for `barrier_nb`), as does a split-phase barrier; anonymous entries
/// match any name; a member that waits with another name than it notified gets the
/// error alone; notify twice and wait without notify are errors. On a team of
/// messages, a shared-memory team and a hierarchical world (two hosts of three).
#[test]
fn barrier_names_mismatch_on_every_member() {
    use gex_coll::BarrierFlags;
    let anon = BarrierFlags::ANONYMOUS;
    let named = BarrierFlags::empty();
    for per_host in [1u32, 6, 3] {
        let cfg = SimConfig::default()
            .seed(43)
            .ranks_per_host(per_host)
            .timeout(Duration::from_secs(120));
        on_sim(6, cfg, SEG, move |mut c, w| {
            let me = u64::from(w.rank());
            if per_host == 3 {
                assert_eq!(c.hierarchical(&w), !cfg!(gex_force_am_rma));
            }
            // Different names, nonblocking: every member sees it.
            let ev = c.collective(&w, Barrier::named(me % 2), Nb).unwrap();
            assert_eq!(c.wait(ev), Err(CollError::BarrierMismatch), "rank {me}");
            // The same name, blocking and nonblocking; anonymous entries mixed in.
            c.collective(&w, Barrier::named(7), Blocking).unwrap();
            let b = if me % 3 == 0 {
                Barrier::new()
            } else {
                Barrier::named(9)
            };
            let ev = c.collective(&w, b, Nb).unwrap();
            c.wait(ev).unwrap();
            // A named entry against anonymous blocking barriers elsewhere.
            let r = if me == 4 {
                c.collective(&w, Barrier::named(3), Blocking)
            } else {
                c.barrier(&w)
            };
            assert_eq!(r, Ok(()), "one name and anonymous entries match");
            let r = if me == 4 {
                c.collective(&w, Barrier::named(3), Blocking)
            } else if me == 5 {
                c.collective(&w, Barrier::named(4), Blocking)
            } else {
                c.barrier(&w)
            };
            assert_eq!(r, Err(CollError::BarrierMismatch), "rank {me}");
            // Split phase.
            c.barrier_notify(&w, 11, named).unwrap();
            assert_eq!(
                c.barrier_notify(&w, 11, named),
                Err(CollError::BarrierAlreadyNotified)
            );
            while !c.barrier_try(&w, 11, named).unwrap() {}
            assert_eq!(
                c.barrier_wait(&w, 11, named),
                Err(CollError::BarrierNotNotified)
            );
            c.barrier_notify(&w, 20 + me, named).unwrap();
            assert_eq!(
                c.barrier_wait(&w, 20 + me, named),
                Err(CollError::BarrierMismatch),
                "rank {me}"
            );
            let id = if me == 0 { 0 } else { 5 };
            let f = if me == 0 { anon } else { named };
            c.barrier_notify(&w, id, f).unwrap();
            // Other collectives may run between notify and wait.
            let s = c
                .collective(&w, Allreduce::new(vec![me], BuiltinOp::Sum), Blocking)
                .unwrap();
            assert_eq!(s, vec![15]);
            c.barrier_wait(&w, id, f).unwrap();
            // Waiting with another name than notified: this member's error only.
            c.barrier_notify(&w, 30, named).unwrap();
            let wait_id = if me == 2 { 31 } else { 30 };
            let r = c.barrier_wait(&w, wait_id, named);
            assert_eq!(r.is_err(), me == 2, "rank {me}: {r:?}");
            c.barrier(&w).unwrap();
        });
    }
}

/// The layer attaches after gex-rma's (a clear error otherwise) and reads its settings
/// when it attaches: an endpoint taken the ordinary way follows `GEX_COLL_*` (the
/// wrapper this replaces ignored them unless built with `with_config`), and a bad
/// value fails `Client::endpoint` with an error naming the variable.
#[test]
fn settings_are_read_when_the_layer_attaches() {
    use gex_core::{ClientBuilder, Config};
    // Without gex-rma's layer.
    run_sim(
        1,
        SimConfig::default(),
        || {
            ClientBuilder::new()
                .layer::<gex_coll::Coll>()
                .segment_size(SEG)
        },
        |client| {
            let e = client.endpoint(0).unwrap_err().to_string();
            assert!(e.contains("gex-rma") && e.contains("coll"), "{e}");
        },
    );
    for (var, bad) in [
        ("GEX_COLL_TUNE", "sometimes"),
        ("GEX_COLL_LOGGP", "1,2"),
        ("GEX_COLL_PROFILE", "/nonexistent/gex-profile.toml"),
        ("GEX_COLL_SCAN", "bruck2"),
    ] {
        run_sim(
            1,
            SimConfig::default(),
            move || {
                layers()
                    .segment_size(SEG)
                    .config(Config::from_pairs([(var, bad)]))
            },
            move |client| {
                let e = client.endpoint(0).unwrap_err().to_string();
                assert!(e.contains(var), "{var}={bad}: {e}");
            },
        );
    }
    run_sim(
        2,
        SimConfig::default(),
        || {
            layers()
                .segment_size(SEG)
                .config(Config::from_pairs([("GEX_COLL_TUNE", "online")]))
        },
        |client| {
            let mut c = client.endpoint(0).unwrap();
            assert_eq!(c.tuner(|t| t.mode()).unwrap(), gex_coll::TuneMode::Online);
            c.barrier(&c.world()).unwrap();
        },
    );
}

/// Small broadcasts through the ring on 2..8 thread ranks of one host: the ring
/// workload (rotating and fixed roots, 1..=56 bytes, every blocking form and
/// nonblocking batches, wrap-around of every member's 32-slot ring), then one of
/// 1..=8 bytes only (in packed slots, as on a host with fewer CPUs than members, and
/// in the ring's slots, as on one with a CPU per member; wrapped around) on the world
/// team, then on two disjoint split teams at once (channels 1 and 2) and on a team of
/// every other member, each output checked byte by byte; every broadcast goes through
/// the ring (`CollStats::ring_calls`). Then the channel changes hands: a team takes
/// the channel of a dropped one while a member of the old team, not in the new one,
/// still has the old team's last broadcast to read (it sleeps first), so the new
/// team's first publication must wait for it.
#[test]
fn ring_small_broadcasts_2_to_8_ranks() {
    for p in 2..=8u32 {
        on_sim(
            p,
            SimConfig::default().seed(u64::from(p)),
            SEG,
            move |mut c, w| {
                let me = w.rank();
                let on = !cfg!(gex_force_am_rma);
                let ring = |c: &mut Endpoint<Sim>| c.coll_stats().ring_calls;
                let r0 = ring(&mut c);
                let calls = common::ring_workload(&mut c, &w, 150, u64::from(p));
                assert_eq!(ring(&mut c) - r0, if on { calls } else { 0 }, "rank {me}");
                // Blocks of at most 8 bytes, wrapped around: in packed slots (a host
                // of 1 CPU), then in the ring's slots (1024 CPUs: `ring::packs`).
                let cpus = c.tuner(|t| t.host_cpus()).unwrap();
                for (host, seed) in [(1, 100), (1024, 200)] {
                    c.tuner(|t| t.set_host_cpus(host)).unwrap();
                    let r0 = ring(&mut c);
                    let calls = common::ring_workload_upto(&mut c, &w, 150, seed + u64::from(p), 8);
                    assert_eq!(ring(&mut c) - r0, if on { calls } else { 0 }, "rank {me}");
                }
                c.tuner(|t| t.set_host_cpus(cpus)).unwrap();
                // Two halves at once (their own channels), then every other member.
                if p >= 4 {
                    let half = c
                        .split(&w, Some(me % 2), me, Scratch::None)
                        .unwrap()
                        .unwrap();
                    assert_eq!(c.shared_memory(&half), on);
                    let r0 = ring(&mut c);
                    let calls = common::ring_workload(&mut c, &half, 100, 10 + u64::from(me % 2));
                    assert_eq!(ring(&mut c) - r0, if on { calls } else { 0 }, "rank {me}");
                    drop(half);
                }
                if p >= 4 {
                    let t = c
                        .split(&w, (me % 2 == 1).then_some(0), me, Scratch::None)
                        .unwrap();
                    if let Some(t) = t {
                        assert_eq!(t.size(), p / 2);
                        common::ring_workload(&mut c, &t, 70, 20);
                    }
                }
                // The channel changes hands (see above): team A = everyone, its last
                // broadcast from rank 0; rank p-1 reads it late and is not in team B.
                let all: Vec<u32> = (0..p).collect();
                let a = c.create_team(&w, &all, Scratch::None).unwrap();
                common::ring_workload(&mut c, &a, 40, 30);
                let mut last = if me == 0 { [0x3cu8; 16] } else { [0u8; 16] };
                if me == p - 1 {
                    std::thread::sleep(Duration::from_millis(30));
                }
                c.collective(&a, Broadcast::in_place(0, &mut last), Blocking)
                    .unwrap();
                assert_eq!(last, [0x3c; 16], "rank {me}: team A's last broadcast");
                let ch_a = c.shared_memory(&a);
                c.destroy_team(a).unwrap();
                if me < p - 1 {
                    let b = c.create_team(&w, &all[..p as usize - 1], Scratch::None);
                    let b = b.unwrap();
                    if b.size() >= 2 {
                        assert_eq!(c.shared_memory(&b), ch_a);
                        common::ring_workload(&mut c, &b, 70, 40);
                    }
                }
                c.barrier(&w).unwrap();
                assert_eq!(c.coll_stats().in_flight, 0);
                assert_eq!(c.coll_stats().dropped_messages, 0);
            },
        );
    }
}

/// A root far ahead of its readers on the packed ring: on 2 and 3 thread ranks, 300
/// one-word broadcasts from rank 0 whose readers start 2 ms late (at calls 0 and 150):
/// the root fills its 64 packed slots and reuses a line only once every reader
/// finished the previous lap's broadcasts in it. Then on 2 ranks whose one-word
/// blocks are not packed (a host with a CPU per member): the root fills the ring's
/// 32 slots instead. Every block arrives whole, every call through the ring.
#[test]
fn ring_packed_root_runs_ahead() {
    for (p, host) in [(2u32, 1u32), (3, 1), (2, 1024)] {
        on_sim(
            p,
            SimConfig::default().seed(60 + u64::from(p)),
            SEG,
            move |mut c, w| {
                let me = w.rank();
                c.tuner(|t| t.set_host_cpus(host)).unwrap();
                let r0 = c.coll_stats().ring_calls;
                for k in 0..300u32 {
                    if me != 0 && k % 150 == 0 {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    let want = (u64::from(k).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(p))
                        .to_le_bytes();
                    let mut buf = if me == 0 { want } else { [0xa5; 8] };
                    c.collective(&w, Broadcast::in_place(0, &mut buf), Blocking)
                        .unwrap();
                    assert_eq!(buf, want, "P={p} rank {me}: broadcast {k}");
                }
                let on = !cfg!(gex_force_am_rma);
                let ring = c.coll_stats().ring_calls - r0;
                assert_eq!(ring, if on { 300 } else { 0 }, "rank {me}");
                c.barrier(&w).unwrap();
            },
        );
    }
}

/// Sleepers on the ring are woken, on 2 and 3 thread ranks under `Block` with naps of
/// 20 s (`SimConfig::nap`; see `common::ring_wakeups`: readers sleep on a root that
/// pauses, a root sleeps on readers that pause): the phases take well under a second
/// when every wake-up arrives, a lost one stalls its member for the rest of a nap.
/// Then 8 ranks under spin-then-block with a short spin (ranks outnumber the cores:
/// members yield, then sleep) run the ring workload.
#[test]
fn ring_sleepers_are_woken() {
    for p in [2u32, 3] {
        run_sim(
            p,
            SimConfig::default()
                .seed(40 + u64::from(p))
                .nap(Duration::from_secs(20)),
            || {
                layers()
                    .segment_size(SEG)
                    .wait_policy(gex_core::WaitPolicy::Block)
            },
            move |client| {
                let mut c = client.endpoint(0).unwrap();
                let w = c.world().clone();
                let t = Instant::now();
                common::ring_wakeups(&mut c, &w, 40);
                let took = t.elapsed();
                assert!(
                    took < Duration::from_secs(8),
                    "P={p} rank {}: {took:?} (a lost wake-up stalls for a 20 s nap)",
                    w.rank()
                );
            },
        );
    }
    run_sim(
        8,
        SimConfig::default().seed(48),
        || {
            layers()
                .segment_size(SEG)
                .wait_policy(gex_core::WaitPolicy::SpinThenBlock { spins: 10 })
        },
        |client| {
            let mut c = client.endpoint(0).unwrap();
            let w = c.world().clone();
            common::ring_workload(&mut c, &w, 100, 8);
        },
    );
}

/// The catalogue's `scatter+allgather` broadcast (an algorithm outside the built-in
/// families, docs/coll.md "The catalogue") run by the layer over a reordering
/// network: every member gets the root's data, for every root, with pieces that
/// split unevenly (and fewer elements than members).
#[test]
fn scatter_allgather_broadcast_matches_the_reference() {
    for p in [1u32, 3, 4, 7] {
        on_sim(
            p,
            SimConfig::default().reorder(true).seed(29),
            SEG,
            |mut c, w| {
                let me = w.rank();
                assert!(
                    c.algorithms(OpKind::Broadcast)
                        .iter()
                        .any(|a| a == "scatter+allgather")
                );
                for root in 0..w.size() {
                    for count in [0usize, 1, 5, 1000] {
                        let data: Vec<u32> = (0..count as u32).map(|i| i * 7 + root).collect();
                        let mine = if me == root {
                            data.clone()
                        } else {
                            vec![0; count]
                        };
                        let d = Broadcast::new(root, mine).algorithm("scatter+allgather");
                        let got = c.collective(&w, d, Blocking).unwrap();
                        assert_eq!(got, data, "p={} root={root} count={count}", w.size());
                    }
                }
            },
        );
    }
}
