//! Hybrid jobs on one machine: a 4-rank job whose host list names two "hosts" (`a*2,b*2`,
//! gex-boot's host layout without `--host-exec`, so `GEX_LOCAL_*` and the host ids say
//! two hosts while every process runs here). Ranks of one host talk through the smp
//! conduit's shared memory, the two hosts through libfabric's `tcp;ofi_rxm` on `lo`
//! (`GEX_OFI_DOMAIN=lo`: the "hosts" share this machine's loopback).
//!
//! Runs the core conformance suite (1 and 2 endpoints per rank) and the RMA suite in
//! that shape, the core suite on 3 ranks of one host with `GEX_OFI_HYBRID=1`
//! (`one_host_forced`: every peer through shared memory), and `paths_are_counted` / `hybrid_off_uses_the_network_only` check with
//! `Hybrid::stats()` which path each peer's traffic took. `coll_world_is_hierarchical`
//! runs every collective on the world team of that job (gex-coll's `hier`: host
//! teams through shared memory, leaders through libfabric).
//! `conduits/ofi/tests/netns.rs` runs the same across two network namespaces.
//!
//! Exclusions: none.

mod hybrid_common;

use gex_core::layer::LayerSet;
use gex_core::{Client, ClientBuilder, Config};
use gex_testkit::conformance;
use gex_testkit::procs::{self, ProcRunner, Procs};
use hybrid_common::OfiHybrid;

fn config(extra: &[(&'static str, &'static str)]) -> Config {
    // Spin-then-block, not the `auto` policy's spinning (2 ranks per "host" on a
    // 2-core machine): the test harness runs two of these 4-rank jobs at once, and
    // spinning ranks of one job take the cores from the other's (tests/netns.rs).
    let mut pairs = vec![
        ("GEX_OFI_PROVIDER", "tcp"),
        ("GEX_OFI_DOMAIN", "lo"),
        ("GEX_WAIT", "spin-then-block"),
    ];
    pairs.extend_from_slice(extra);
    Config::from_pairs(pairs)
}

/// Checks that `client` reaches exactly the ranks `want` through shared memory.
fn shared_memory_peers(client: &Client<OfiHybrid>, want: &[u32]) -> Result<(), String> {
    let got = client.conduit().shared_memory_peers();
    if got != want {
        return Err(format!(
            "rank {}: shared-memory peers {got:?}, want {want:?}",
            client.rank()
        ));
    }
    Ok(())
}

/// Jobs on two "hosts" (the first half of the ranks on `a`, the others on `b`) whose
/// clients come from `builder` (the layers of the suite); each rank checks that it
/// reaches exactly the ranks of its host through shared memory, then runs the case.
fn two_hosts_runner<L: LayerSet>(
    builder: fn() -> ClientBuilder<L>,
    segment: usize,
) -> ProcRunner<OfiHybrid, L> {
    ProcRunner::new()
        .builder(move || builder().config(config(&[])).segment_size(segment))
        .on_two_hosts(|client: &Client<OfiHybrid>| {
            Ok(client.conduit().shared_memory_peers().to_vec())
        })
}

/// 4 ranks on two "hosts", one endpoint each.
mod two_hosts {
    use super::*;
    gex_testkit::suite_tests! {
        suite: core,
        conduit: OfiHybrid,
        runner: two_hosts_runner(conformance::builder, 256 << 10),
        ranks: 4,
    }
}

/// 4 ranks on two "hosts", two endpoints each (rings between every pair of endpoints
/// of a host, one libfabric domain per endpoint across hosts).
mod two_hosts_two_eps {
    use super::*;
    gex_testkit::suite_tests! {
        suite: core,
        conduit: OfiHybrid,
        runner: two_hosts_runner(conformance::builder, 256 << 10),
        ranks: 4,
        endpoints: 2,
    }
}

/// The RMA suite (gex-rma) on 4 ranks on two "hosts": direct copies and CPU atomics
/// within a host, native `FI_RMA` across; atomic domains native (NIC) for all peers
/// where `FI_ATOMIC` offers every operation.
mod rma_two_hosts {
    use super::*;
    gex_testkit::suite_tests! {
        suite: rma,
        conduit: OfiHybrid,
        runner: two_hosts_runner(gex_testkit::rma::client_builder, 2 << 20),
        ranks: 4,
    }
}

/// One host, 3 ranks, `GEX_OFI_HYBRID=1`: every peer through shared memory; libfabric
/// carries only what gex-rma asks of the NIC (native atomic domains).
mod one_host_forced {
    use super::*;
    fn runner() -> ProcRunner<OfiHybrid> {
        ProcRunner::new()
            .builder(|| {
                conformance::builder()
                    .config(config(&[("GEX_OFI_HYBRID", "1")]))
                    .segment_size(256 << 10)
            })
            .procs(|p, job| p.hosts(vec!["a"; job.ranks as usize]))
            .check(|client, job| shared_memory_peers(client, &(0..job.ranks).collect::<Vec<_>>()))
    }
    gex_testkit::suite_tests! {
        suite: core,
        conduit: OfiHybrid,
        runner: runner(),
        ranks: 3,
    }
}

/// Runs `body` on every rank of a 4-rank job on two "hosts" with `extra` settings and
/// 1 MiB segments, the clients carrying the RMA and collectives layers
/// ([`hybrid_common::builder`]); a rank whose body fails aborts the job. The job must
/// succeed.
/// `coll_world` runs every collective over tcp: 40-100 s on a 2-core machine that
/// others load too, where the runner's default watchdog of 180 s was seen to fire;
/// hence 10 minutes.
fn four_rank_job(
    test: &str,
    extra: &'static [(&'static str, &'static str)],
    body: impl FnOnce(&Client<OfiHybrid>) -> Result<(), String>,
) {
    Procs::new(4)
        .test(test)
        .timeout(std::time::Duration::from_secs(600))
        .hosts(procs::two_hosts(4))
        .run(|boot| {
            let client = hybrid_common::builder()
                .config(config(extra))
                .segment_size(1 << 20)
                .init::<OfiHybrid>(boot)
                .map_err(|e| e.to_string())?;
            if let Err(e) = body(&client) {
                procs::failed(&e);
                client.abort(1, &e);
            }
            client.finalize().map_err(|e| e.to_string())
        })
        .assert_success();
}

/// Runs `check_paths` on every rank of a 4-rank job on two "hosts" with `extra` settings.
fn paths_job(test: &str, extra: &'static [(&'static str, &'static str)], hybrid: bool) {
    four_rank_job(test, extra, |client| {
        let me = client.rank();
        hybrid_common::check_paths(client, hybrid, &procs::two_hosts_neighbours(4, me))
    });
}

/// Hybrid by default: requests to the rank's own host go through the rings, the others
/// through libfabric; puts across hosts are native, puts to a neighbour plain copies.
#[test]
fn paths_are_counted() {
    paths_job("paths_are_counted", &[], true);
}

/// `GEX_OFI_HYBRID=0`: every peer through libfabric, no segment mapped.
#[test]
fn hybrid_off_uses_the_network_only() {
    paths_job(
        "hybrid_off_uses_the_network_only",
        &[("GEX_OFI_HYBRID", "0")],
        false,
    );
}

/// Input of rank `r` for `op`: `blocks` blocks of `count` values, distinct per (rank,
/// block, element).
fn coll_input(r: u32, blocks: usize, count: usize) -> Vec<u64> {
    (0..blocks * count)
        .map(|i| u64::from(r) * 1_000_003 + (i / count) as u64 * 1009 + (i % count) as u64)
        .collect()
}

/// What rank `me` of `p` must get from `op` (root `root`, `count` values per block,
/// sums), computed from [`coll_input`].
fn coll_expected(op: gex_coll::OpKind, p: u32, me: u32, root: u32, count: usize) -> Vec<u64> {
    use gex_coll::OpKind::*;
    let block =
        |r: u32, b: u32| coll_input(r, b as usize + 1, count)[b as usize * count..].to_vec();
    // Each member's block once, then summed value by value (a block per value made
    // this quadratic: seconds per check in a debug build, minutes per test).
    let sum = |rs: std::ops::Range<u32>, b: u32| -> Vec<u64> {
        let blocks: Vec<Vec<u64>> = rs.map(|r| block(r, b)).collect();
        (0..count)
            .map(|k| blocks.iter().map(|v| v[k]).sum())
            .collect()
    };
    match op {
        Barrier => vec![],
        Broadcast => block(root, 0),
        Scatter => block(root, me),
        Gather if me != root => vec![],
        Gather | GatherAll => (0..p).flat_map(|r| block(r, 0)).collect(),
        Exchange => (0..p).flat_map(|r| block(r, me)).collect(),
        Reduce if me != root => vec![],
        Reduce | Allreduce => sum(0..p, 0),
        ReduceScatter => sum(0..p, me),
        Scan => sum(0..me + 1, 0),
        Exscan if me == 0 => vec![],
        Exscan => sum(0..me, 0),
    }
}

/// Every operation on the world team, `hier` forced and tuned, a leader and a
/// non-leader as roots, blocks of 0 and 5000 values (40 KB: fragmented messages),
/// against [`coll_expected`]; then a non-commutative scan (the hosts are rank ranges).
/// Each runs through gex-coll's one entry with its descriptor, blocking.
fn coll_world(client: &Client<OfiHybrid>) -> Result<(), String> {
    use gex_coll::{
        Allreduce, Barrier, Broadcast, BuiltinOp, CollExt, Exchange, Exscan, Gather, GatherAll,
        OpKind, Opts, Reduce, ReduceOp, ReduceScatter, Scan, Scatter,
    };
    use gex_core::Blocking;
    let e = |e: gex_coll::CollError| e.to_string();
    let mut c = client.endpoint(0).map_err(|e| e.to_string())?;
    let w = c.world();
    let (p, me) = (w.size(), w.rank());
    if !c.hierarchical(&w) {
        return Err(format!("rank {me}: the world team is not hierarchical"));
    }
    let sum = ReduceOp::<u64>::builtin(BuiltinOp::Sum);
    for op in OpKind::ALL {
        // A leader and a non-leader (ranks 0 and 1 on one host, 2 and 3 on the other).
        let roots = if op.rooted() { vec![0, p - 1] } else { vec![0] };
        for root in roots {
            for count in [0usize, 5000] {
                for alg in [Some("hier"), None] {
                    let opts = Opts {
                        algorithm: alg,
                        ..Opts::default()
                    };
                    let input = coll_input(me, op.shape(p, me, root).0.max(1), count);
                    let s = sum.clone();
                    // Runs the descriptor `$d` with `opts`, blocking.
                    macro_rules! run {
                        ($d:expr) => {
                            c.collective(&w, $d.opts(opts), Blocking).map_err(e)?
                        };
                    }
                    let got: Vec<u64> = match op {
                        OpKind::Barrier => {
                            run!(Barrier::new());
                            vec![]
                        }
                        OpKind::Broadcast => run!(Broadcast::new(root, input)),
                        OpKind::Scatter => run!(Scatter::new(root, input, count)),
                        OpKind::Gather => run!(Gather::new(root, input)),
                        OpKind::GatherAll => run!(GatherAll::new(input)),
                        OpKind::Exchange => run!(Exchange::new(input)),
                        OpKind::Reduce => run!(Reduce::new(root, input, s)),
                        OpKind::Allreduce => run!(Allreduce::new(input, s)),
                        OpKind::ReduceScatter => run!(ReduceScatter::new(input, s)),
                        OpKind::Scan => run!(Scan::new(input, s)),
                        OpKind::Exscan => run!(Exscan::new(input, s)),
                    };
                    if got != coll_expected(op, p, me, root, count) {
                        return Err(format!(
                            "rank {me}: {op} root {root} count {count} algorithm {alg:?}: wrong result"
                        ));
                    }
                }
            }
        }
    }
    // Affine maps x -> m·x + c (mod 2^32) packed as (m << 32 | c), composed in rank
    // order (not commutative).
    let compose = |a: u64, b: u64| {
        let (m1, c1) = ((a >> 32) as u32, a as u32);
        let (m2, c2) = ((b >> 32) as u32, b as u32);
        (u64::from(m2.wrapping_mul(m1)) << 32) | u64::from(m2.wrapping_mul(c1).wrapping_add(c2))
    };
    let affine = ReduceOp::user(false, move |a: &u64, b: &u64| compose(*a, *b));
    let map = |r: u32| (u64::from(r + 2) << 32) | u64::from(r * 7 + 1);
    let got = c
        .collective(
            &w,
            Scan::new(vec![map(me); 3], affine).algorithm("hier"),
            Blocking,
        )
        .map_err(e)?;
    let want = (1..=me).fold(map(0), |a, r| compose(a, map(r)));
    if got != vec![want; 3] {
        return Err(format!(
            "rank {me}: non-commutative scan {got:?}, want {want:#x}"
        ));
    }
    c.barrier(&w).map_err(e)
}

/// The world team of a job on two "hosts" (2 + 2 ranks, hybrid) runs every collective
/// hierarchically and gets the right values (see [`coll_world`]).
#[test]
fn coll_world_is_hierarchical() {
    four_rank_job("coll_world_is_hierarchical", &[], coll_world);
}
