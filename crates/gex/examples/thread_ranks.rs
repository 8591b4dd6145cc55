//! Thread ranks: every process of the job runs `GEX_THREADS` ranks as threads (1 when
//! unset), each with its own client; they add up their ranks with an allreduce.
//!
//! ```text
//! cargo run --example thread_ranks                      # 1 process, 1 rank
//! GEX_THREADS=4 cargo run --example thread_ranks        # 1 process, 4 thread ranks
//! gex-run -n 2 --threads 3 target/debug/examples/thread_ranks   # 2 processes x 3
//! ```

use gex::prelude::*;

fn main() -> std::process::ExitCode {
    let ranks = gex::boot::threads::run_from_env(|boot| {
        let client = gex::builder()
            .segment_size(1 << 16)
            .init::<gex::AnyConduit>(Box::new(boot))
            .expect("the client initialises");
        let mut ep = client.endpoint(0).expect("endpoint 0");
        let world = ep.world();
        let me = world.rank() as u64;
        let sum = ep
            .collective(&world, Allreduce::new(vec![me], BuiltinOp::Sum), Blocking)
            .expect("allreduce");
        let n = world.size() as u64;
        assert_eq!(sum[0], n * (n - 1) / 2);
        let peers = client.layout().process_peers(client.rank());
        println!(
            "rank {me} of {n} (process {}, with thread ranks {peers:?}): the ranks add up to {}",
            std::process::id(),
            sum[0]
        );
        drop(ep);
        client.finalize().expect("finalize");
    });
    match ranks {
        Ok(_) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("thread_ranks: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
