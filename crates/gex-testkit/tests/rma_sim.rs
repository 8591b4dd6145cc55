//! The RMA conformance suite (gex-testkit's `rma` module) on the simulated fabric.
//!
//! Run it both ways:
//! `cargo test -p gex-testkit --test rma_sim` and
//! `RUSTFLAGS="--cfg gex_force_am_rma" CARGO_TARGET_DIR=target/force-am cargo test -p gex-testkit --test rma_sim`.
//!
//! Exclusions: none.

use gex_testkit::sim::{Sim, SimConfig, SimRunner};

/// Two ranks sharing memory: the direct path (unless forced to AM).
mod r2_shared {
    use super::*;
    gex_testkit::rma_conformance_tests! {
        conduit: Sim,
        runner: SimRunner::new(SimConfig::default()).segment_size(4 << 20),
        ranks: 2,
    }
}

/// Three ranks, one per host (no shared memory between them), reordering on: the AM
/// reference path with out-of-order delivery; 17 MiB segments for the 16 MiB case.
mod r3_am_reorder {
    use super::*;
    gex_testkit::rma_conformance_tests! {
        conduit: Sim,
        runner: SimRunner::new(SimConfig::default().reorder(true).ranks_per_host(1).seed(7))
            .segment_size(17 << 20),
        ranks: 3,
    }
}

/// Five ranks, shared memory switched off in the fabric, small Medium limit (so VIS
/// packing and get chunking split often), reordering on.
mod r5_no_shm {
    use super::*;
    fn cfg() -> SimConfig {
        let mut c = SimConfig::default().reorder(true).seed(11);
        c.shared_memory = false;
        c.max_medium = 1024;
        c
    }
    gex_testkit::rma_conformance_tests! {
        conduit: Sim,
        runner: SimRunner::new(cfg()).segment_size(2 << 20),
        ranks: 5,
    }
}

/// Property test: random strided shapes (0–3 dimensions, counts 0–5, strides −6..=6 on
/// both sides) put and got by rank 0 into rank 1's segment, on the direct or the AM
/// path, against a sequential model of the remote region.
mod prop_strided {
    use gex_core::{ClientBuilder, EpAddr};
    use gex_rma::{RmaEp, Strided};
    use gex_testkit::sim::{SimConfig, run_sim};
    use proptest::prelude::*;
    use std::collections::HashSet;

    /// Elements of the remote region.
    const M: usize = 4096;

    type Shape = (Vec<usize>, Vec<isize>, Vec<isize>);

    fn arb_shape() -> impl Strategy<Value = Shape> {
        (0usize..=3).prop_flat_map(|d| {
            (
                prop::collection::vec(0usize..6, d),
                prop::collection::vec(-6isize..=6, d),
                prop::collection::vec(-6isize..=6, d),
            )
        })
    }

    /// (remote, local) element index of every element, in iteration order, and the
    /// smallest remote/local index relative to element (0, .., 0).
    fn elems(c: &[usize], rs: &[isize], ls: &[isize]) -> (Vec<(i64, i64)>, i64, i64) {
        let mut out = Vec::new();
        let (mut rmin, mut lmin) = (0, 0);
        if !c.contains(&0) {
            let mut idx = vec![0usize; c.len()];
            'outer: loop {
                let r: i64 = idx.iter().zip(rs).map(|(i, s)| *i as i64 * *s as i64).sum();
                let l: i64 = idx.iter().zip(ls).map(|(i, s)| *i as i64 * *s as i64).sum();
                rmin = rmin.min(r);
                lmin = lmin.min(l);
                out.push((r, l));
                for d in 0..c.len() {
                    idx[d] += 1;
                    if idx[d] < c[d] {
                        continue 'outer;
                    }
                    idx[d] = 0;
                }
                break;
            }
        }
        (out, rmin, lmin)
    }

    fn run(shapes: &[Shape], shared: bool, seed: u64) -> Result<(), String> {
        let mut cfg = SimConfig::default().reorder(true).seed(seed);
        cfg.shared_memory = shared;
        cfg.max_medium = 512;
        let out = run_sim(
            2,
            cfg,
            || ClientBuilder::new().segment_size(M * 4),
            |client| -> Result<(), String> {
                let mut r = RmaEp::new(client.endpoint(0).unwrap()).map_err(|e| e.to_string())?;
                r.barrier().map_err(|e| e.to_string())?;
                if r.rank() == 0 {
                    let region = r.global_ptr::<u32>(EpAddr::rank(1), 0);
                    let mut model = vec![0u32; M];
                    let mut val = seed as u32;
                    for (k, (c, rs, ls)) in shapes.iter().enumerate() {
                        let (el, rmin, lmin) = elems(c, rs, ls);
                        let base = (-rmin) as usize + 3;
                        let start = (-lmin) as usize;
                        let llen = el
                            .iter()
                            .map(|e| (e.1 - lmin) as usize + 1)
                            .max()
                            .unwrap_or(0)
                            + 2;
                        let sh = Strided {
                            counts: c,
                            remote_strides: rs,
                            local_start: start,
                            local_strides: ls,
                        };
                        let p = region.add(base);
                        let what = format!("shape {k}: {c:?} {rs:?} {ls:?}");
                        let rem: Vec<usize> =
                            el.iter().map(|e| (base as i64 + e.0) as usize).collect();
                        let loc: Vec<usize> =
                            el.iter().map(|e| (start as i64 + e.1) as usize).collect();
                        if rem.iter().collect::<HashSet<_>>().len() == rem.len() {
                            let src: Vec<u32> =
                                (0..llen).map(|i| val.wrapping_add(i as u32)).collect();
                            val = val.wrapping_add(llen as u32);
                            for (ri, li) in rem.iter().zip(&loc) {
                                model[*ri] = src[*li];
                            }
                            r.put_strided(p, &src, sh)
                                .map_err(|e| format!("{what}: {e}"))?;
                            let mut back = vec![0u32; M];
                            r.get(&mut back, region).map_err(|e| e.to_string())?;
                            if back != model {
                                return Err(format!(
                                    "{what}: region differs from the model after put"
                                ));
                            }
                        }
                        if loc.iter().collect::<HashSet<_>>().len() == loc.len() {
                            let mut want = vec![u32::MAX; llen];
                            for (ri, li) in rem.iter().zip(&loc) {
                                want[*li] = model[*ri];
                            }
                            let mut got = vec![u32::MAX; llen];
                            r.get_strided(&mut got, p, sh)
                                .map_err(|e| format!("{what}: {e}"))?;
                            if got != want {
                                return Err(format!("{what}: strided get differs from the model"));
                            }
                        }
                    }
                }
                r.barrier().map_err(|e| e.to_string())?;
                Ok(())
            },
        );
        out.into_iter().collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
        #[test]
        fn strided_matches_model(
            shapes in prop::collection::vec(arb_shape(), 1..10),
            shared in any::<bool>(),
            seed in any::<u64>(),
        ) {
            prop_assert_eq!(run(&shapes, shared, seed), Ok(()));
        }
    }
}
