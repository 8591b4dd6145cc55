//! The discrete-event LogGP simulator (`gex_coll::des`) on 1024+ ranks: the data of
//! the schedules gex-coll runs against the sequential reference, and seed 003's
//! findings with its Table 1 platforms.

mod common;

use common::{bytes, plan_all, reference};
use gex_coll::des::{Options, simulate};
use gex_coll::{Algorithm, BuiltinOp, LogGP, OpKind, ReduceOp, catalog};
use std::sync::Arc;

const PLATFORMS: [(&str, LogGP); 3] = [
    ("Cray XT4", LogGP::CRAY_XT4),
    ("BlueGene/P", LogGP::BLUEGENE_P),
    ("Ranger", LogGP::RANGER),
];

fn algo(name: &str) -> Arc<dyn Algorithm> {
    catalog()
        .into_iter()
        .find(|a| a.name() == name)
        .unwrap_or_else(|| panic!("no algorithm {name}"))
}

fn time(name: &str, op: OpKind, p: u32, n: usize, m: &LogGP) -> f64 {
    let a = algo(name);
    let o = Options {
        transport: a.transport(),
        in_my: true,
    };
    simulate(&plan_all(&*a, op, p, n, 1), m, o, None)
        .unwrap()
        .time
}

/// Every listed (algorithm, operation) on 1024 and 1000 ranks (those with P² messages
/// on 200): the simulated outputs equal the sequential reference, and every message
/// is received.
#[test]
fn data_matches_the_reference_at_1024_ranks() {
    use OpKind::*;
    let cases = [
        ("dissem2", Barrier),
        ("binomial", Broadcast),
        ("binomial+put", Broadcast),
        ("binomial+rdv", Broadcast),
        ("knomial4", Scatter),
        ("binomial", Gather),
        ("knomial4", Reduce),
        ("recdbl", Allreduce),
        ("rechalv", Allreduce),
        ("bruck2", GatherAll),
        ("bruck2", Exchange),
        ("recdbl", Scan),
        ("recdbl", Exscan),
        ("fork2d", Barrier),
        ("fork2d", Broadcast),
        ("fork2d+put", Broadcast),
        ("fork2d+rdv", Broadcast),
        ("fork3d", Scatter),
        ("fork3d", Gather),
        ("fork2d", Reduce),
        // P² messages: on 200 ranks below.
        ("ring", Allreduce),
        ("ring+put", GatherAll),
        ("ring", ReduceScatter),
        ("flat", Exchange),
    ];
    let f = ReduceOp::<u32>::builtin(BuiltinOp::Sum).func().clone();
    let mut ran = 0;
    for p in [1024u32, 1000, 200] {
        for (name, op) in cases {
            let quadratic = matches!(name, "ring" | "ring+put" | "flat");
            if quadratic != (p == 200) {
                continue;
            }
            let a = algo(name);
            let count = 2usize;
            let n = count * 4;
            // Simulated networks: no shared memory, one rank per host.
            let q = gex_coll::Query {
                addr: gex_coll::AddrMode::Single,
                ..gex_coll::Query::plain(op, p, n)
            };
            if !a.supports(&q) {
                continue;
            }
            let scheds = plan_all(&*a, op, p, n, 4);
            let inputs: Vec<Vec<u8>> = (0..p as usize)
                .map(|r| {
                    let (ib, _) = op.shape(p, r as u32, 0);
                    bytes(r, u64::from(p) + 11, ib.max(1) * n)
                })
                .collect();
            let fr = op.reduces().then_some(&f);
            let o = Options {
                transport: a.transport(),
                in_my: true,
            };
            let got = simulate(&scheds, &LogGP::RANGER, o, Some((&inputs, fr)))
                .unwrap_or_else(|e| panic!("{name} {op} P={p}: {e:?}"));
            let want = reference(op, 0, n, &inputs, fr);
            let out = got.outputs.unwrap();
            if let Some(bad) = (0..p as usize).find(|&i| out[i] != want[i]) {
                panic!("{name} {op} P={p}: rank {bad} differs");
            }
            assert!(got.time > 0.0, "{name} {op} P={p}");
            ran += 1;
        }
    }
    assert!(ran >= 43, "only {ran} cases ran");
}

/// Seed 003: the dissemination (Bruck) exchange beats the flat one at small sizes,
/// flat wins at large ones, and the crossover is platform specific — on 256 ranks
/// (each flat exchange is P² messages; `gex-tune plots` draws the 1024-rank curves).
#[test]
fn exchange_dissemination_vs_flat_crossover_256_ranks() {
    exchange_crossover(256, &[8, 32, 128, 512, 2048, 8192]);
}

/// The same on 1024 ranks: about 25 s in release builds, several minutes in debug
/// (`cargo test -p gex-coll --release --test des -- --ignored`).
#[test]
#[ignore = "a million messages per flat exchange: run with --release -- --ignored"]
fn exchange_dissemination_vs_flat_crossover_1024_ranks() {
    exchange_crossover(1024, &[8, 64, 512, 4096]);
}

fn exchange_crossover(p: u32, sizes: &[usize]) {
    let mut crossovers = Vec::new();
    for (platform, m) in PLATFORMS {
        let t: Vec<(f64, f64)> = sizes
            .iter()
            .map(|&n| {
                (
                    time("bruck2", OpKind::Exchange, p, n, &m),
                    time("flat", OpKind::Exchange, p, n, &m),
                )
            })
            .collect();
        println!("{platform}: {t:?}");
        assert!(t[0].0 < t[0].1, "{platform}: bruck2 {t:?}");
        assert!(
            t[sizes.len() - 1].1 < t[sizes.len() - 1].0,
            "{platform}: flat {t:?}"
        );
        let cross = sizes
            .iter()
            .zip(&t)
            .find(|(_, x)| x.1 < x.0)
            .map(|x| *x.0)
            .unwrap();
        crossovers.push(cross);
    }
    println!("crossovers: {crossovers:?}");
    assert!(
        crossovers.iter().any(|&c| c != crossovers[0]),
        "{crossovers:?}"
    );
}

/// Seed 003: broadcast by signaling put beats broadcast by rendezvous (one transfer
/// per hop against announce + get + acknowledgement), on every platform and size,
/// for the trees (binomial, 4-nomial, 2-D fork) and the flat broadcast on 1024 ranks.
#[test]
fn signaling_put_beats_rendezvous_broadcast_1024_ranks() {
    for (platform, m) in PLATFORMS {
        for tree in ["binomial", "knomial4", "flat", "fork2d"] {
            for n in [8usize, 512, 8192, 65536] {
                let put = time(&format!("{tree}+put"), OpKind::Broadcast, 1024, n, &m);
                let rdv = time(&format!("{tree}+rdv"), OpKind::Broadcast, 1024, n, &m);
                assert!(put < rdv, "{platform} {tree} {n} B: put {put} rdv {rdv}");
            }
        }
    }
}

/// The simulator agrees with the closed forms where they are exact: a chain
/// broadcast of one eager message per hop on P ranks takes (P − 1)(L + 2o + (k −
/// 1)G + k·copy).
#[test]
fn chain_broadcast_matches_the_closed_form() {
    let m = LogGP::CRAY_XT4;
    for (p, n) in [(2u32, 8usize), (16, 4096), (1024, 64)] {
        let t = time("chain", OpKind::Broadcast, p, n, &m);
        let k = n as f64;
        let want = f64::from(p - 1) * (m.l + 2.0 * m.o + (k - 1.0) * m.big_g + k * m.copy);
        assert!((t - want).abs() < 1e-6 * want, "P={p} n={n}: {t} vs {want}");
    }
}
