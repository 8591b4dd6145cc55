//! Collectives through the layers on the ibv conduit over the emulation: gex-coll (over
//! gex-rma, native RMA and NIC atomics on) runs every operation on the world team of a
//! 3-rank job with the tuner's choice of algorithm and with every algorithm gex-coll
//! has for it (those that run on 3 members without team scratch space), rooted ones
//! from rank 0 and rank 2,
//! blocks of 0 and 3000 values (24 KB: fragmented payloads, native puts), and checks every
//! value.

use gex_coll::{
    Allreduce, Barrier, Broadcast, BuiltinOp, Coll, CollExt, Exchange, Exscan, Gather, GatherAll,
    OpKind, Opts, Reduce, ReduceOp, ReduceScatter, Scan, Scatter,
};
use gex_conduit_ibv::Ibv;
use gex_core::{Blocking, Client, ClientBuilder, Config, WaitPolicy};
use gex_rma::Rma;
use gex_testkit::procs::{self, Procs};

fn input(r: u32, blocks: usize, count: usize) -> Vec<u64> {
    (0..blocks * count)
        .map(|i| u64::from(r) * 1_000_003 + (i / count) as u64 * 1009 + (i % count) as u64)
        .collect()
}

fn expected(op: OpKind, p: u32, me: u32, root: u32, count: usize) -> Vec<u64> {
    use OpKind::*;
    let block = |r: u32, b: u32| input(r, b as usize + 1, count)[b as usize * count..].to_vec();
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

fn world(client: &Client<Ibv>) -> Result<(), String> {
    let mut c = client.endpoint(0).map_err(|e| e.to_string())?;
    let w = c.world();
    let (p, me) = (w.size(), w.rank());
    let sum = ReduceOp::<u64>::builtin(BuiltinOp::Sum);
    let mut forced_ran = 0;
    for op in OpKind::ALL {
        let roots = if op.rooted() { vec![0, p - 1] } else { vec![0] };
        // The tuner's choice, and every algorithm gex-coll has for the operation.
        let mut algs: Vec<Option<String>> = vec![None];
        algs.extend(c.algorithms(op).into_iter().map(Some));
        for root in roots {
            for count in [0usize, 3000] {
                // Every algorithm once (large blocks, root 0); the tuner's choice always.
                for alg in algs
                    .iter()
                    .filter(|a| a.is_none() || (count > 0 && root == 0))
                {
                    let opts = Opts {
                        algorithm: alg.as_deref(),
                        ..Opts::default()
                    };
                    let inp = input(me, op.shape(p, me, root).0.max(1), count);
                    let s = sum.clone();
                    // Runs the descriptor `$d` with `opts`, blocking.
                    macro_rules! run {
                        ($d:expr) => {
                            c.collective(&w, $d.opts(opts), Blocking)?
                        };
                    }
                    let r: Result<Vec<u64>, gex_coll::CollError> = (|| {
                        Ok(match op {
                            OpKind::Barrier => {
                                run!(Barrier::new());
                                vec![]
                            }
                            OpKind::Broadcast => run!(Broadcast::new(root, inp)),
                            OpKind::Scatter => run!(Scatter::new(root, inp, count)),
                            OpKind::Gather => run!(Gather::new(root, inp)),
                            OpKind::GatherAll => run!(GatherAll::new(inp)),
                            OpKind::Exchange => run!(Exchange::new(inp)),
                            OpKind::Reduce => run!(Reduce::new(root, inp, s)),
                            OpKind::Allreduce => run!(Allreduce::new(inp, s)),
                            OpKind::ReduceScatter => run!(ReduceScatter::new(inp, s)),
                            OpKind::Scan => run!(Scan::new(inp, s)),
                            OpKind::Exscan => run!(Exscan::new(inp, s)),
                        })
                    })();
                    let got = match r {
                        Ok(g) => g,
                        // A forced algorithm that does not run on 3 members, or needs
                        // team scratch space the world team has not got (every rank
                        // decides the same).
                        Err(
                            gex_coll::CollError::Unsupported { .. }
                            | gex_coll::CollError::ScratchTooSmall { .. },
                        ) if alg.is_some() => continue,
                        Err(err) => {
                            return Err(format!("rank {me}: {op} algorithm {alg:?}: {err}"));
                        }
                    };
                    forced_ran += usize::from(alg.is_some());
                    if got != expected(op, p, me, root, count) {
                        return Err(format!(
                            "rank {me}: {op} root {root} count {count} algorithm {alg:?}: wrong result"
                        ));
                    }
                }
            }
        }
    }
    // Forced algorithms really ran (not all refused): at least two per operation.
    if forced_ran < 2 * OpKind::ALL.len() {
        return Err(format!(
            "rank {me}: only {forced_ran} forced algorithms ran"
        ));
    }
    eprintln!("rank {me}: {forced_ran} forced algorithm runs");
    c.barrier(&w).map_err(|e| e.to_string())
}

#[test]
fn every_collective_over_the_emulation() {
    Procs::new(3)
        .test("every_collective_over_the_emulation")
        .timeout(std::time::Duration::from_secs(300))
        .run(|boot| {
            let client = ClientBuilder::new()
                .layer::<Rma>()
                .layer::<Coll>()
                .config(Config::from_pairs([("GEX_IBV_PROVIDER", "emu")]))
                // Three ranks and their emulated NICs' threads share 2 cores here.
                .wait_policy(WaitPolicy::Block)
                .segment_size(1 << 20)
                .init::<Ibv>(boot)
                .map_err(|e| e.to_string())?;
            if let Err(e) = world(&client) {
                procs::failed(&e);
                client.abort(1, &e);
            }
            client.finalize().map_err(|e| e.to_string())
        })
        .assert_success();
}
