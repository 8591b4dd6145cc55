//! The PMI-2 client under MPICH's Hydra (`mpiexec.hydra` with `GEX_BOOT=pmi2`; Hydra
//! decides the PMI version by the client's first request, there is no flag).
//!
//! Hydra 4.0's PMI-2 server is enough for the data exchanges (its `kvs-get` waits
//! until the key is published) but its `kvs-fence` is no barrier and it has no
//! `abort`: that is why [`gex_boot::detect`] keeps Hydra on PMI-1 (tested by
//! `gex_mpiexec.rs`), and these tests pin both facts down, so that a Hydra that
//! changes shows up here. The cases are in `common`.
//!
//! MPICH's `mpiexec.hydra` must be in `PATH` (`apt-get install mpich`; `ci/test`
//! installs it): without it these tests fail.

mod common;

use std::time::{Duration, Instant};

use common::Launcher::HydraPmi2;

common::launcher_cases! {
    HydraPmi2;
    hydra_pmi2_collectives: collectives;
}

/// Rank 0 enters the barrier 2 s after the others: under Hydra 4.0's PMI-2 the
/// others leave it at once (the fence is no barrier), while an exchange still waits
/// for rank 0's data.
#[test]
fn hydra_pmi2_fence_is_no_barrier_but_gets_wait() {
    const NAME: &str = "hydra_pmi2_fence_is_no_barrier_but_gets_wait";
    if let Some(dir) = common::rank_dir() {
        let mut boot = common::rank_start(&dir, HydraPmi2);
        let rank = boot.rank();
        if rank == 0 {
            std::thread::sleep(Duration::from_secs(2));
        }
        let t = Instant::now();
        boot.barrier().unwrap();
        let barrier = t.elapsed();
        let t = Instant::now();
        let all = boot.exchange(&rank.to_le_bytes()).unwrap();
        let exchange = t.elapsed();
        assert_eq!(all[0], 0u32.to_le_bytes());
        std::fs::write(
            dir.join(format!("times.{rank}")),
            format!("{} {}", barrier.as_millis(), exchange.as_millis()),
        )
        .unwrap();
        boot.finalize(0).unwrap();
        common::rank_done(&dir, rank);
        return;
    }
    let job = common::run_job(HydraPmi2, 3, NAME, common::Opts::default());
    assert_eq!(job.code(), Some(0), "{}", job.report());
    job.assert_all_done(3);
    for r in 1..3 {
        let t = job.read(&format!("times.{r}"));
        let (barrier, exchange) = t.split_once(' ').unwrap();
        let (barrier, exchange): (u64, u64) = (barrier.parse().unwrap(), exchange.parse().unwrap());
        assert!(
            barrier < 1000,
            "rank {r}: barrier took {barrier} ms: Hydra's PMI-2 fence is a barrier now: revisit gex_boot::detect\n{}",
            job.report()
        );
        assert!(
            exchange >= 1000,
            "rank {r}: the exchange took {exchange} ms\n{}",
            job.report()
        );
    }
    job.assert_no_rank_left(3);
}
