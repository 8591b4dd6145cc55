//! The RMA conformance suite (gex-testkit's `rma` module, exercising gex-rma) on the
//! smp conduit: every case runs as a real multi-process job launched by gex-boot's
//! self-launcher. Neighbours share memory, so this runs the direct path; build with
//! `RUSTFLAGS="--cfg gex_force_am_rma"` to run the AM reference path over the rings.
//!
//! Exclusions: none.

use gex_conduit_smp::Smp;
use gex_core::{ClientBuilder, Config};
use gex_testkit::conformance::{self, Case, Job};

/// Launches `job.ranks` processes of this test binary; each rank runs the case.
fn run(
    job: &Job<'_>,
    case: &Case<Smp>,
    builder: impl FnOnce() -> ClientBuilder,
) -> Result<(), String> {
    match gex_boot::spawn_self_test(job.ranks, job.test_path).map_err(|e| e.to_string())? {
        gex_boot::Role::Launcher(0) => Ok(()),
        gex_boot::Role::Launcher(code) => Err(format!("job exited with code {code}")),
        gex_boot::Role::Rank(boot) => {
            conformance::rank_watchdog(job.test_path);
            let client = builder()
                .endpoints(job.endpoints)
                .init::<Smp>(boot)
                .map_err(|e| e.to_string())?;
            if let Err(e) = conformance::run_on_rank(&client, case) {
                client.abort(1, &e);
            }
            client.finalize().map_err(|e| e.to_string())
        }
    }
}

/// Two ranks, 17 MiB segments (the 16 MiB case runs).
mod two_ranks {
    use super::*;
    fn runner(job: &Job<'_>, case: &Case<Smp>) -> Result<(), String> {
        run(job, case, || ClientBuilder::new().segment_size(17 << 20))
    }
    gex_testkit::suite_tests! {
        suite: rma,
        conduit: Smp,
        runner: runner,
        ranks: 2,
    }
}

/// Four ranks, 4 MiB segments, small rings and Medium payloads (AM path under
/// back-pressure when forced).
mod four_ranks_small_rings {
    use super::*;
    fn runner(job: &Job<'_>, case: &Case<Smp>) -> Result<(), String> {
        run(job, case, || {
            ClientBuilder::new()
                .segment_size(4 << 20)
                .config(Config::from_pairs([
                    ("GEX_SMP_RING_SIZE", "16384"),
                    ("GEX_SMP_MAX_MEDIUM", "2048"),
                ]))
        })
    }
    gex_testkit::suite_tests! {
        suite: rma,
        conduit: Smp,
        runner: runner,
        ranks: 4,
    }
}

/// Five ranks that sleep when they wait (`WaitPolicy::Block`): the shared-memory
/// barrier's releases must wake them (a lost wake-up costs a 10 ms sleep per barrier,
/// and the cases' watchdog ends a hang).
mod five_ranks_blocking {
    use super::*;
    fn runner(job: &Job<'_>, case: &Case<Smp>) -> Result<(), String> {
        run(job, case, || {
            ClientBuilder::new()
                .segment_size(2 << 20)
                .wait_policy(gex_core::WaitPolicy::Block)
        })
    }
    gex_testkit::suite_tests! {
        suite: rma,
        conduit: Smp,
        runner: runner,
        ranks: 5,
    }
}
