//! Small blocking broadcasts back to back in a real multi-process job (no harness):
//! the loop `MPI_Bcast` benchmarks run, for profiling the small-broadcast path
//! (`perf record`/`perf stat` over the whole job: the loop dominates it).
//!
//! `cargo bench -p gex-coll --bench small_bcast -- [ranks] [iters] [bytes] [roots] [sim]`
//! (defaults 2, 2 000 000, 8, `fixed`; `roots` = `fixed` (rank 0) or `rotate` (call
//! `i` rooted at `i mod P`); `sim`: thread ranks of the simulated conduit in this
//! process, one host, e.g. under `valgrind --tool=callgrind`). Rank `r` pins itself to
//! the `(r mod n)`-th allowed core (as gex-perf does); every rank prints its ns per
//! call and its `CollStats`.
#![allow(unsafe_code)]

mod support;

use gex::Job;
use gex::spi::Conduit;
use gex_coll::{Broadcast, CollExt};
use gex_core::{Blocking, Client};
use std::time::Instant;

#[derive(Clone, Copy)]
struct Bench {
    iters: u64,
    bytes: usize,
    rotate: bool,
}

/// Pins the calling thread to the `(index mod n)`-th core it may run on.
fn pin(index: u32) {
    // SAFETY: `set` is a plain bit set owned here; the calls only read and write it
    // and the calling thread's affinity.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return;
        }
        let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect();
        if cpus.is_empty() {
            return;
        }
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpus[index as usize % cpus.len()], &mut one);
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &one);
    }
}

impl Job for Bench {
    type Output = ();
    fn run<C: Conduit>(self, client: Client<C>) {
        pin(client.rank());
        let mut c = client
            .endpoint(0)
            .expect("endpoint 0 with the collectives layer");
        let w = c.world();
        let (p, me) = (w.size(), w.rank());
        let mut buf = vec![0u8; self.bytes];
        let root = |i: u64| {
            if self.rotate {
                (i % u64::from(p)) as u32
            } else {
                0
            }
        };
        let mut call = |c: &mut gex_core::Endpoint<C>, i: u64| {
            let r = root(i);
            if me == r {
                buf.fill(i as u8);
            }
            c.collective(&w, Broadcast::in_place(r, &mut buf), Blocking)
                .expect("broadcast");
            assert_eq!(buf[0], i as u8, "rank {me}: broadcast {i}");
        };
        for i in 0..self.iters / 10 {
            call(&mut c, i);
        }
        c.barrier(&w).expect("barrier");
        let t0 = Instant::now();
        for i in 0..self.iters {
            call(&mut c, i);
        }
        let ns = t0.elapsed().as_secs_f64() * 1e9 / self.iters as f64;
        c.barrier(&w).expect("barrier");
        println!(
            "rank {me}/{p}: {ns:.1} ns per {}-byte broadcast ({} roots) {:?}",
            self.bytes,
            if self.rotate { "rotating" } else { "fixed" },
            c.coll_stats()
        );
        drop(c);
        client.finalize().expect("finalize");
    }
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let num = |i: usize, d: u64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let ranks = num(0, 2) as u32;
    let bench = Bench {
        iters: num(1, 2_000_000),
        bytes: num(2, 8) as usize,
        rotate: args.get(3).is_some_and(|a| a == "rotate"),
    };
    if args.get(4).is_some_and(|a| a == "sim") {
        // Thread ranks in this process (one simulated host), for tools that follow
        // one process only (callgrind: instructions per call).
        let b = || support::layers(1 << 20);
        let cfg = gex_testkit::sim::SimConfig::default()
            .ranks_per_host(ranks)
            .timeout(std::time::Duration::from_secs(3600));
        gex_testkit::sim::run_sim(ranks, cfg, b, |client| {
            bench.run(client);
        });
        return;
    }
    support::launch(ranks, 1 << 20, bench);
}
