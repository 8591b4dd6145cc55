//! Latency of collectives in a real multi-process job (no harness): every rank runs
//! each operation at a few sizes with the tuner's choice, rank 0 prints µs per call.
//! `cargo bench -p gex-coll --bench lat -- [ranks]` (default 2; the conduit is the
//! facade's choice, `GEX_CONDUIT`, default smp; `GEX_COLL_<OP>` overrides apply).
mod support;

use gex::Job;
use gex::spi::Conduit;
use gex_coll::{Allreduce, Broadcast, BuiltinOp, CollExt, Exchange, GatherAll, OpKind, ReduceOp};
use gex_core::{Blocking, Client, Endpoint};
use std::time::Instant;

struct Lat;

impl Job for Lat {
    type Output = ();
    fn run<C: Conduit>(self, client: Client<C>) {
        let mut c = client
            .endpoint(0)
            .expect("endpoint 0 with the collectives layer");
        let w = c.world();
        let p = w.size() as usize;
        let sum = ReduceOp::<u8>::builtin(BuiltinOp::Sum);
        let ops = [
            OpKind::Barrier,
            OpKind::Broadcast,
            OpKind::Allreduce,
            OpKind::GatherAll,
            OpKind::Exchange,
        ];
        if w.rank() == 0 {
            println!("{p} ranks on {}", client.conduit_name());
            println!("{:<12} {:>8} {:>10}  algorithm", "op", "bytes", "µs/call");
        }
        for op in ops {
            for bytes in [8usize, 4096, 65536] {
                let iters = if bytes > 10_000 { 200 } else { 2000 };
                let q = gex_coll::Query {
                    shm: c.shared_memory(&w),
                    ..gex_coll::Query::plain(op, p as u32, bytes)
                };
                let alg = c.explain(&q).map(|x| x.algorithm).unwrap_or_default();
                // Buffers made once per cell: the loop times the collective alone.
                let src = vec![1u8; bytes * p];
                let mut dst = vec![0u8; bytes * p];
                let mut run = |c: &mut Endpoint<C>| match op {
                    OpKind::Barrier => c.barrier(&w).expect("barrier"),
                    OpKind::Broadcast => c
                        .collective(&w, Broadcast::in_place(0, &mut dst[..bytes]), Blocking)
                        .expect("broadcast"),
                    OpKind::Allreduce => c
                        .collective(
                            &w,
                            Allreduce::in_place(&mut dst[..bytes], sum.clone()),
                            Blocking,
                        )
                        .expect("allreduce"),
                    OpKind::GatherAll => c
                        .collective(&w, GatherAll::slices(&src[..bytes], &mut dst), Blocking)
                        .expect("gather_all"),
                    _ => c
                        .collective(&w, Exchange::slices(&src, &mut dst), Blocking)
                        .expect("exchange"),
                };
                for _ in 0..iters / 10 {
                    run(&mut c);
                }
                c.barrier(&w).expect("barrier");
                let t0 = Instant::now();
                for _ in 0..iters {
                    run(&mut c);
                }
                let us = t0.elapsed().as_secs_f64() * 1e6 / iters as f64;
                if w.rank() == 0 {
                    println!("{:<12} {:>8} {:>10.2}  {alg}", op.name(), bytes, us);
                }
                if op == OpKind::Barrier {
                    break;
                }
            }
        }
        c.barrier(&w).expect("barrier");
        drop(c);
        client.finalize().expect("finalize");
    }
}

fn main() {
    let ranks = std::env::args()
        .skip(1)
        .find_map(|a| a.parse::<u32>().ok())
        .unwrap_or(2);
    support::launch(ranks, 16 << 20, Lat);
}
