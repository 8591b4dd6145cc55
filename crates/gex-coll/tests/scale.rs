//! Collectives on 1024 ranks of the simulated fabric (thread ranks, 32 simulated
//! hosts of 32 ranks, messages reordered): gex-coll's real engine — teams, sequence
//! numbers, the message transports, the tuner — at the scale of seed 003's
//! experiments, every result checked. Wall-clock time means nothing here (1024 threads on a few cores); the
//! timing model at this scale is the discrete-event LogGP simulation (`tests/des.rs`).

use gex_coll::{
    Allreduce, Barrier, Broadcast, BuiltinOp, CollExt, Exchange, GatherAll, Opts, Reduce, ReduceOp,
    Scan,
};
use gex_core::Blocking;
use gex_testkit::sim::{Delay, SimConfig, run_sim};
use std::time::Duration;

const P: u32 = 1024;

#[test]
fn collectives_on_1024_simulated_ranks() {
    // Messages overtake each other (random extra delays of up to 3 receiver polls).
    let cfg = SimConfig {
        ranks_per_host: 32,
        reorder: true,
        jitter: Delay::polls(3),
        seed: 1024,
        timeout: Duration::from_secs(600),
        ..SimConfig::default()
    };
    let ran = run_sim(
        P,
        cfg,
        || {
            gex_core::ClientBuilder::new()
                .layer::<gex_rma::Rma>()
                .layer::<gex_coll::Coll>()
                .segment_size(64 << 10)
        },
        |client| {
            let mut c = client.endpoint(0).unwrap();
            let w = c.world().clone();
            let (p, me) = (u64::from(w.size()), u64::from(w.rank()));
            let sum = ReduceOp::<u64>::builtin(BuiltinOp::Sum);
            let mut ran = 0u32;
            for alg in [None, Some("dissem2"), Some("dissem4")] {
                c.collective(
                    &w,
                    Barrier::new().opts(
                        alg.map_or_else(Opts::default, |a| Opts::default().with_algorithm(a)),
                    ),
                    Blocking,
                )
                .unwrap();
                ran += 1;
            }
            for (alg, root) in [
                (None, 777u32),
                (Some("binomial"), 3),
                (Some("knomial8"), 1000),
            ] {
                let o = alg.map_or_else(Opts::default, |a| Opts::default().with_algorithm(a));
                let mut buf = [0u64; 8];
                if u64::from(root) == me {
                    buf = std::array::from_fn(|i| i as u64 * 31 + u64::from(root));
                }
                c.collective(&w, Broadcast::in_place(root, &mut buf).opts(o), Blocking)
                    .unwrap();
                assert_eq!(
                    buf,
                    std::array::from_fn(|i| i as u64 * 31 + u64::from(root))
                );
                ran += 1;
            }
            for alg in [None, Some("recdbl"), Some("rechalv"), Some("reduce+bcast")] {
                let o = alg.map_or_else(Opts::default, |a| Opts::default().with_algorithm(a));
                let mut out = [0u64; 4];
                c.collective(
                    &w,
                    Allreduce::slices(&[me, 1, me * me, 7], &mut out, sum.clone()).opts(o),
                    Blocking,
                )
                .unwrap();
                assert_eq!(
                    out,
                    [p * (p - 1) / 2, p, (p - 1) * p * (2 * p - 1) / 6, 7 * p],
                    "{alg:?}"
                );
                ran += 1;
            }
            let mut all = vec![0u64; p as usize];
            c.collective(
                &w,
                GatherAll::slices(&[me * 3], &mut all)
                    .opts(Opts::default().with_algorithm("bruck2")),
                Blocking,
            )
            .unwrap();
            assert!(all.iter().enumerate().all(|(i, &x)| x == i as u64 * 3));
            let src: Vec<u64> = (0..p).map(|d| me * 10_000 + d).collect();
            let mut dst = vec![0u64; p as usize];
            c.collective(
                &w,
                Exchange::slices(&src, &mut dst).opts(Opts::default().with_algorithm("bruck2")),
                Blocking,
            )
            .unwrap();
            assert!(
                dst.iter()
                    .enumerate()
                    .all(|(i, &x)| x == i as u64 * 10_000 + me)
            );
            let mut s = [0u64];
            c.collective(&w, Scan::slices(&[me], &mut s, sum.clone()), Blocking)
                .unwrap();
            assert_eq!(s[0], me * (me + 1) / 2);
            let mut r = [0u64];
            c.collective(
                &w,
                Reduce::slices(5, &[me + 1], &mut r, sum.clone())
                    .opts(Opts::default().with_algorithm("knomial4")),
                Blocking,
            )
            .unwrap();
            if me == 5 {
                assert_eq!(r[0], p * (p + 1) / 2);
            }
            ran += 4;
            c.barrier(&w).unwrap();
            assert_eq!(c.coll_stats().dropped_messages, 0);
            ran
        },
    );
    assert!(ran.iter().all(|&n| n == 14), "{:?}", &ran[..4]);
}
