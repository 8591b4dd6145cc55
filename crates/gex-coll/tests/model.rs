//! Every algorithm × operation × team size × block size, executed by the sequential
//! schedule model and compared with the sequential reference; plus LogGP timing.

mod common;

use common::{bytes, matmul, plan_all, plan_each, reference};
use gex_coll::sched::model;
use gex_coll::{AddrMode, BuiltinOp, LogGP, OpKind, PlanCtx, Query, ReduceOp, catalog};
use proptest::prelude::*;

fn check(
    alg: &dyn gex_coll::Algorithm,
    op: OpKind,
    p: u32,
    root: u32,
    count: usize,
    comm: bool,
) -> Result<(), String> {
    let (elem, f) = if comm {
        (
            4usize,
            ReduceOp::<u32>::builtin(BuiltinOp::Sum).func().clone(),
        )
    } else {
        (
            32usize,
            ReduceOp::<[u64; 4]>::user(false, matmul).func().clone(),
        )
    };
    let n = count * elem;
    let q = Query {
        // Signaling put and rendezvous exist only in single address mode.
        addr: if alg.transport() == gex_coll::Transport::Eager {
            AddrMode::Local
        } else {
            AddrMode::Single
        },
        commutative: comm,
        ..Query::plain(op, p, n)
    };
    if !alg.supports(&q) {
        return Ok(());
    }
    let ctx = PlanCtx {
        op,
        size: p,
        rank: 0,
        root,
        block: n,
        elem,
        commutative: comm,
    };
    let scheds = plan_each(alg, ctx);
    let inputs: Vec<Vec<u8>> = (0..p as usize)
        .map(|r| {
            let (ib, _) = op.shape(p, r as u32, root);
            // Broadcast non-roots pass a buffer too; the model ignores it.
            bytes(r, count as u64 * 7 + u64::from(p), ib.max(1) * n)
        })
        .collect();
    let fr = op.reduces().then_some(&f);
    let got = model::run(&scheds, &inputs, fr)
        .map_err(|e| format!("{} {op} P={p} root={root} n={n}: {e:?}", alg.name()))?;
    let want = reference(op, root as usize, n, &inputs, fr);
    if got != want {
        let bad = (0..p as usize).find(|&i| got[i] != want[i]).unwrap();
        return Err(format!(
            "{} {op} P={p} root={root} count={count} comm={comm}: rank {bad} differs",
            alg.name()
        ));
    }
    model::loggp_time(&scheds, &LogGP::default())
        .map_err(|e| format!("{}: loggp {e:?}", alg.name()))?;
    Ok(())
}

/// The catalogue plus instances with other parameters: small pipelining segments
/// (many segments per message), radix 3 and 5, fork trees of one to four automatic
/// dimensions and on given grids (2 × 3, 3 × 3 × 2: ragged or partial on most team
/// sizes).
fn algorithms() -> Vec<std::sync::Arc<dyn gex_coll::Algorithm>> {
    use gex_coll::{Builtin, Kind, Transport};
    let e = Transport::Eager;
    let mut v = catalog();
    for b in [
        Builtin::new(Kind::Chain, 0, 16, e),
        Builtin::new(Kind::Chain, 0, 40, e),
        Builtin::new(Kind::Knomial, 3, 0, e),
        Builtin::new(Kind::Kary, 3, 0, e),
        Builtin::new(Kind::Kary, 1, 0, e),
        Builtin::new(Kind::Bruck, 3, 0, e),
        Builtin::new(Kind::Bruck, 5, 0, e),
        Builtin::new(Kind::Dissemination, 5, 0, e),
        Builtin::new(Kind::Knomial, 3, 0, Transport::Put),
        Builtin::new(Kind::Chain, 0, 24, Transport::Rendezvous),
        Builtin::new(Kind::Fork, 1, 0, e),
        Builtin::new(Kind::Fork, 4, 0, e),
        Builtin::new(Kind::Fork, 3, 0, Transport::Put),
        Builtin::fork(&[2, 3], e).unwrap(),
        Builtin::fork(&[3, 3, 2], e).unwrap(),
        Builtin::fork(&[2, 2], Transport::Rendezvous).unwrap(),
    ] {
        v.push(std::sync::Arc::new(b));
    }
    for name in ["fork2d", "fork3d", "fork2d+put", "fork2d+rdv"] {
        assert!(v.iter().any(|a| a.name() == name), "{name} not catalogued");
    }
    v
}

#[test]
fn every_algorithm_every_op_small_teams() {
    let mut checked = 0;
    for a in algorithms() {
        for &op in a.ops() {
            for p in [1u32, 2, 3, 5, 8, 13] {
                for count in [0usize, 1, 3, 17] {
                    for comm in [true, false] {
                        for root in [0, p / 2, p - 1] {
                            if !op.rooted() && root != 0 {
                                continue;
                            }
                            check(&*a, op, p, root, count, comm).unwrap();
                            checked += 1;
                        }
                    }
                }
            }
        }
    }
    assert!(checked > 2000, "{checked}");
}

#[test]
fn every_op_has_a_non_commutative_algorithm_for_every_size() {
    for op in OpKind::ALL.into_iter().filter(|o| o.reduces()) {
        for p in [1u32, 2, 3, 5, 6, 7, 8, 12] {
            let q = Query {
                commutative: false,
                ..Query::plain(op, p, 32)
            };
            let n = catalog().iter().filter(|a| a.supports(&q)).count();
            assert!(n >= 2, "{op} P={p}: {n} algorithms");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Random algorithm, op, team size (up to 40), root and count.
    #[test]
    fn prop_random_cases(ai in 0usize..1000, oi in 0usize..11, p in 1u32..40, rs in 0u32..1000, count in 0usize..40, comm: bool) {
        let cat = algorithms();
        let a = &cat[ai % cat.len()];
        let op = a.ops()[oi % a.ops().len()];
        check(&**a, op, p, rs % p, count, comm).map_err(TestCaseError::fail)?;
    }
}

/// LogGP simulation of 128 ranks with the Table 1 parameters of seed 003: the
/// dissemination (Bruck) exchange beats flat at small sizes and flat wins at large
/// ones; the crossover depends on the platform.
#[test]
fn loggp_128_ranks_exchange_crossover() {
    exchange_crossover(128);
}

/// The same at 1024 ranks (a million messages per flat exchange: run it in release,
/// `cargo test -p gex-coll --release --test model -- --ignored`).
#[test]
#[ignore = "slow in debug builds; run with --release -- --ignored"]
fn loggp_1024_ranks_exchange_crossover() {
    exchange_crossover(1024);
}

fn exchange_crossover(p: u32) {
    let time = |name: &str, n: usize, m: &LogGP| {
        let a = catalog().into_iter().find(|a| a.name() == name).unwrap();
        let s = plan_all(&*a, OpKind::Exchange, p, n, 1);
        model::loggp_time(&s, m).unwrap()
    };
    let mut crossovers = Vec::new();
    for m in [LogGP::CRAY_XT4, LogGP::BLUEGENE_P, LogGP::RANGER] {
        assert!(time("bruck2", 8, &m) < time("flat", 8, &m));
        assert!(time("bruck2", 4096, &m) > time("flat", 4096, &m));
        let cross = [8usize, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
            .into_iter()
            .find(|&n| time("bruck2", n, &m) > time("flat", n, &m))
            .unwrap();
        crossovers.push(cross);
    }
    assert!(
        crossovers.iter().any(|&c| c != crossovers[0]),
        "{crossovers:?}"
    );
}

/// The cost formulas against the schedule-level LogGP simulation: for every operation
/// on 48 ranks and three sizes, the algorithm the tuner picks from its formulas is
/// within a factor of the best simulated algorithm (the formulas are approximations;
/// the factor bounds how far they may drift from the schedules they describe).
#[test]
fn tuner_choice_is_near_the_simulated_best() {
    use gex_coll::Tuner;
    let p = 48u32;
    let m = LogGP::RANGER;
    let mut t = Tuner::new(catalog(), m);
    let mut worst: (f64, String) = (1.0, String::new());
    for op in OpKind::ALL {
        for bytes in [8usize, 4096, 65536] {
            let q = Query::plain(op, p, bytes);
            let sim = |a: &dyn gex_coll::Algorithm| {
                let s = plan_all(a, op, p, bytes, 8);
                model::loggp_time(&s, &m).unwrap()
            };
            let cat = catalog();
            let best = cat
                .iter()
                .filter(|a| a.supports(&q))
                .map(|a| sim(&**a))
                .fold(f64::INFINITY, f64::min);
            let chosen = t.select(&q, None).unwrap().clone();
            let ratio = sim(&*chosen) / best.max(1e-9);
            println!("{op:<15} {bytes:>6} {:<14} {ratio:.2}", chosen.name());
            if ratio > worst.0 {
                worst = (ratio, format!("{op} {bytes} {}", chosen.name()));
            }
        }
    }
    assert!(worst.0 < 2.0, "worst: {worst:?}");
}

/// The `hier` cost model under the default parameters: on 9 ranks over 3 hosts the
/// tuner picks `hier` for every operation at 8 bytes, on 64 ranks over 8 hosts for
/// every one but scatter, gather and exchange; bandwidth-bound exchanges go to a
/// message algorithm; `hier` is no candidate for a non-commutative allreduce on hosts
/// that are not rank ranges, and is one for a non-commutative scan there.
#[test]
fn hier_cost_model_choices() {
    use gex_coll::Tuner;
    let mut t = Tuner::new(catalog(), LogGP::default());
    let q = |op, size, hosts, bytes, commutative, host_ranges| Query {
        commutative,
        hier: true,
        hosts,
        host_ranges,
        ..Query::plain(op, size, bytes)
    };
    for op in OpKind::ALL {
        let c = t.explain(&q(op, 9, 3, 8, true, true)).unwrap();
        assert_eq!(c.algorithm, "hier", "{op} on 9 ranks: {c:?}");
        let c = t.explain(&q(op, 64, 8, 8, true, true)).unwrap();
        let want = !matches!(op, OpKind::Scatter | OpKind::Gather | OpKind::Exchange);
        assert_eq!(c.algorithm == "hier", want, "{op} on 64 ranks: {c:?}");
    }
    let c = t
        .explain(&q(OpKind::Exchange, 9, 3, 65536, true, true))
        .unwrap();
    assert_ne!(c.algorithm, "hier", "{c:?}");
    let offered = |t: &mut Tuner, op| {
        let c = t.explain(&q(op, 9, 3, 8, false, false)).unwrap();
        c.candidates.iter().any(|x| x.0 == "hier")
    };
    assert!(!offered(&mut t, OpKind::Allreduce));
    assert!(offered(&mut t, OpKind::Scan));
}

/// The fork trees' cost formulas against the schedule-level LogGP simulation of
/// their own schedules: within 20 % for every operation, on full and ragged grids.
#[test]
fn fork_cost_tracks_the_schedule_simulation() {
    let m = LogGP::RANGER;
    let mut checked = 0;
    for a in catalog().iter().filter(|a| a.name().starts_with("fork")) {
        if a.transport() != gex_coll::Transport::Eager {
            // The schedule simulation moves everything eagerly.
            continue;
        }
        for &op in a.ops() {
            for p in [2u32, 13, 27, 48, 100] {
                for bytes in [8usize, 4096, 65536] {
                    let q = Query::plain(op, p, bytes);
                    let s = plan_all(&**a, op, p, bytes, 8);
                    let sim = model::loggp_time(&s, &m).unwrap();
                    let ratio = a.cost(&q, &m) / sim;
                    assert!(
                        (0.8..1.2).contains(&ratio),
                        "{} {op} P={p} {bytes} B: cost/simulated = {ratio:.2}",
                        a.name()
                    );
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(checked, 2 * 5 * 5 * 3);
}

/// The `scatter+allgather` broadcast: the reference's result on every team size,
/// root and block length (uneven pieces, fewer elements than members), fewer bytes
/// through the root than a binomial tree, and the tuner's choice where its model
/// wins — large broadcasts on big teams.
#[test]
fn scatter_allgather_broadcast() {
    use gex_coll::{Algorithm, ScatterAllgather, Tuner};
    let a = ScatterAllgather;
    for p in 1u32..=12 {
        for root in [0, p / 2, p - 1] {
            for count in [0usize, 1, 3, p as usize + 1, 50] {
                check(&a, OpKind::Broadcast, p, root, count, true).unwrap();
            }
        }
    }
    // The query the layer builds for a team of messages only.
    let q = |size: u32, bytes: usize| {
        gex_coll::Placement::default().query(OpKind::Broadcast, size, bytes, AddrMode::Local)
    };
    // The root sends (P − 1)/P of the message twice (scatter, ring), not the whole
    // message log2 P times.
    let ctx = |rank| PlanCtx {
        op: OpKind::Broadcast,
        size: 16,
        rank,
        root: 0,
        block: 1 << 20,
        elem: 8,
        commutative: true,
    };
    let sent = |s: &gex_coll::sched::Schedule| -> usize {
        s.rounds
            .iter()
            .flat_map(|r| &r.sends)
            .flat_map(|x| &x.ranges)
            .map(|r| r.len())
            .sum()
    };
    let binomial = catalog()
        .into_iter()
        .find(|a| a.name() == "binomial")
        .unwrap();
    assert_eq!(sent(&binomial.plan(&ctx(0))), 4 << 20);
    assert_eq!(sent(&a.plan(&ctx(0))), 2 * (15 << 16));
    // The model: cheaper than every tree (the pipelined chain included: its depth is
    // P − 1 segments) for 1 MiB on 1024 ranks, and then the tuner's choice.
    let m = LogGP {
        l: 1.0,
        o: 0.5,
        g: 0.5,
        big_g: 1e-3,
        copy: 1e-4,
    };
    let mut t = Tuner::new(catalog(), m);
    assert_eq!(
        t.select(&q(1024, 1 << 20), None).unwrap().name(),
        "scatter+allgather"
    );
    // Not for small messages, where the ring's P − 1 steps cost latency.
    assert_ne!(
        t.select(&q(64, 8), None).unwrap().name(),
        "scatter+allgather"
    );
}
