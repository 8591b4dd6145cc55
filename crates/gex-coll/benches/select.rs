//! Microbenchmark of the autotuner's cached selection (no harness): prints ns/lookup.
//! Run with `cargo bench -p gex-coll --bench select`.
use gex_coll::{LogGP, OpKind, Query, Tuner, catalog};
use std::time::Instant;

fn main() {
    let mut t = Tuner::new(catalog(), LogGP::default());
    let qs: Vec<Query> = OpKind::ALL
        .iter()
        .flat_map(|&op| [8usize, 4096, 1 << 20].map(|bytes| Query::plain(op, 64, bytes)))
        .collect();
    for q in &qs {
        t.select(q, None).expect("a choice");
    }
    let n = 2_000_000usize;
    let t0 = Instant::now();
    let mut acc = 0usize;
    for i in 0..n {
        acc += t
            .select(&qs[i % qs.len()], None)
            .map(|a| a.name().len())
            .unwrap_or(0);
    }
    let ns = t0.elapsed().as_nanos() as f64 / n as f64;
    println!(
        "select (cached): {ns:.1} ns/lookup over {} keys (checksum {acc})",
        qs.len()
    );
}
