//! Latency of collectives in a real multi-process job (no harness): every rank runs
//! each operation at a few sizes with the tuner's choice, rank 0 prints µs per call.
//! `cargo bench -p gex-coll --bench lat -- [ranks]` (default 2; the conduit is the
//! facade's choice, `GEX_CONDUIT`, default smp; `GEX_COLL_<OP>` overrides apply).
use gex::spi::Conduit;
use gex::{Client, ClientBuilder, Job};
use gex_coll::{BuiltinOp, CollEp, OpKind, ReduceOp};
use gex_rma::RmaEp;
use std::time::Instant;

struct Lat;

impl Job for Lat {
    type Output = ();
    fn run<C: Conduit>(self, client: Client<C>) {
        let rma = RmaEp::new(client.endpoint(0).expect("endpoint 0")).expect("rma");
        let mut c = CollEp::with_config(rma, client.config()).expect("coll");
        let w = c.world().clone();
        let p = w.size() as usize;
        let sum = ReduceOp::<u8>::builtin(BuiltinOp::Sum).expect("sum");
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
                    op,
                    size: p as u32,
                    bytes,
                    addr: gex_coll::AddrMode::Local,
                    sync: Default::default(),
                    commutative: true,
                    scratch: false,
                    shm: c.shared_memory(&w),
                    hier: false,
                    hosts: 0,
                    host_ranges: false,
                };
                let alg = c.explain(&q).map(|x| x.algorithm).unwrap_or_default();
                let run = |c: &mut CollEp<C>| match op {
                    OpKind::Barrier => c.barrier(&w).expect("barrier"),
                    OpKind::Broadcast => {
                        let mut b = vec![1u8; bytes];
                        c.broadcast(&w, 0, &mut b).expect("broadcast");
                    }
                    OpKind::Allreduce => {
                        let mut b = vec![1u8; bytes];
                        c.allreduce_in_place(&w, &mut b, &sum).expect("allreduce");
                    }
                    OpKind::GatherAll => {
                        let mut d = vec![0u8; bytes * p];
                        c.gather_all(&w, &vec![1u8; bytes], &mut d)
                            .expect("gather_all");
                    }
                    _ => {
                        let mut d = vec![0u8; bytes * p];
                        c.exchange(&w, &vec![1u8; bytes * p], &mut d)
                            .expect("exchange");
                    }
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
    match gex_boot::spawn_self(ranks).expect("launch") {
        gex_boot::Role::Launcher(code) => std::process::exit(code),
        gex_boot::Role::Rank(boot) => {
            gex::init_with_boot(ClientBuilder::new().segment_size(16 << 20), boot, None, Lat)
                .expect("init");
        }
    }
}
