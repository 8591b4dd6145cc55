//! Rough cost of a blocking 8-byte put/get on the direct path (loopback, one rank):
//! `cargo run --release -p gex-rma --example direct_put`. Not a benchmark harness;
//! gex-perf is the place for real measurements.

use gex_core::{ClientBuilder, boot::Singleton, loopback::Loopback};
use gex_rma::RmaEp;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = ClientBuilder::new()
        .segment_size(1 << 16)
        .init::<Loopback>(Box::new(Singleton::new()))?;
    let mut rma = RmaEp::new(client.endpoint(0)?)?;
    let p = rma.global_ptr::<u64>(rma.addr(), 64);
    let n = 10_000_000u64;
    let t0 = Instant::now();
    for i in 0..n {
        rma.put_val(p, std::hint::black_box(i))?;
    }
    let put = t0.elapsed();
    let t0 = Instant::now();
    let mut s = 0u64;
    for _ in 0..n {
        s = s.wrapping_add(rma.get_val(p)?);
    }
    let get = t0.elapsed();
    std::hint::black_box(s);
    println!(
        "put_val: {:.1} ns/op, get_val: {:.1} ns/op ({})",
        put.as_nanos() as f64 / n as f64,
        get.as_nanos() as f64 / n as f64,
        if cfg!(gex_force_am_rma) {
            "forced AM path"
        } else {
            "direct path"
        }
    );
    Ok(())
}
