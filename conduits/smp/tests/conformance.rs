//! The gex conformance suite (gex-testkit) on the smp conduit: every case runs as a
//! real multi-process job launched by gex-boot's self-launcher.
//!
//! Exclusions: none. Every case of the suite passes on smp.

use gex_conduit_smp::Smp;
use gex_core::{ClientBuilder, Config, WaitPolicy};
use gex_testkit::conformance::{self, Case, Job};

/// Launches `job.ranks` processes of this test binary; each rank builds its client with
/// `builder` and runs the case.
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
                .segment_size(1 << 20)
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

/// Three ranks with two endpoints each, default rings.
mod three_ranks_two_eps {
    use super::*;
    fn runner(job: &Job<'_>, case: &Case<Smp>) -> Result<(), String> {
        run(job, case, ClientBuilder::new)
    }
    gex_testkit::suite_tests! {
        suite: core,
        conduit: Smp,
        runner: runner,
        ranks: 3,
        endpoints: 2,
    }
}

/// Two ranks on 4 KiB rings, so back-pressure and reply deferral happen constantly.
mod small_rings {
    use super::*;
    fn runner(job: &Job<'_>, case: &Case<Smp>) -> Result<(), String> {
        run(job, case, || {
            ClientBuilder::new().config(Config::from_pairs([
                ("GEX_SMP_RING_SIZE", "4096"),
                ("GEX_SMP_MAX_MEDIUM", "1024"),
            ]))
        })
    }
    gex_testkit::suite_tests! {
        suite: core,
        conduit: Smp,
        runner: runner,
        ranks: 2,
    }
}

/// Four ranks that always sleep in the kernel while waiting (doorbell wake-ups).
mod blocking_waits {
    use super::*;
    fn runner(job: &Job<'_>, case: &Case<Smp>) -> Result<(), String> {
        run(job, case, || {
            ClientBuilder::new().wait_policy(WaitPolicy::Block)
        })
    }
    gex_testkit::suite_tests! {
        suite: core,
        conduit: Smp,
        runner: runner,
        ranks: 4,
    }
}
