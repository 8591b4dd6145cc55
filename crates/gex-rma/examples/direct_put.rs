//! Rough cost of a blocking 8-byte put/get on the direct path (loopback, one rank):
//! `cargo run --release -p gex-rma --example direct_put`. Not a benchmark harness;
//! gex-perf is the place for real measurements. `GEX_RMA_PATH=am` measures the AM
//! reference path instead.

use gex_core::{Blocking, ClientBuilder, boot::Singleton, loopback::Loopback};
use gex_rma::{GlobalPtr, Rma, RmaExt};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = ClientBuilder::new()
        .layer::<Rma>()
        .segment_size(1 << 16)
        .init::<Loopback>(Box::new(Singleton::new()))?;
    let mut ep = client.endpoint(0)?;
    let p = GlobalPtr::<u64>::new(ep.addr(), 64);
    let am = gex_core::layer::with::<Rma, _, _>(&mut *ep, |r, _| r.forces_am()).unwrap_or(false);
    let n = if am { 200_000u64 } else { 10_000_000u64 };
    let t0 = Instant::now();
    for i in 0..n {
        ep.put_val(p, std::hint::black_box(i), Blocking)?;
    }
    let put = t0.elapsed();
    let t0 = Instant::now();
    let mut s = 0u64;
    for _ in 0..n {
        s = s.wrapping_add(ep.get_val(p, Blocking)?);
    }
    let get = t0.elapsed();
    std::hint::black_box(s);
    println!(
        "put_val: {:.1} ns/op, get_val: {:.1} ns/op ({})",
        put.as_nanos() as f64 / n as f64,
        get.as_nanos() as f64 / n as f64,
        if am { "AM path" } else { "direct path" }
    );
    Ok(())
}
