//! The gex conformance suite (gex-testkit) on the ofi conduit: every case runs as a real
//! multi-process job launched by gex-boot's self-launcher, over libfabric's `tcp;ofi_rxm`
//! and `shm` providers on this host.
//!
//! Exclusions: none. Every case passes on both providers.

use gex_conduit_ofi::Ofi;
use gex_core::{ClientBuilder, Config, WaitPolicy};
use gex_testkit::conformance::{self, Case, Job};

/// Launches `job.ranks` processes of this test binary; each rank builds its client with
/// `builder` and runs the case.
fn run(
    job: &Job<'_>,
    case: &Case<Ofi>,
    builder: impl FnOnce() -> ClientBuilder,
) -> Result<(), String> {
    match gex_boot::spawn_self_test(job.ranks, job.test_path).map_err(|e| e.to_string())? {
        gex_boot::Role::Launcher(0) => Ok(()),
        gex_boot::Role::Launcher(code) => Err(format!("job exited with code {code}")),
        gex_boot::Role::Rank(boot) => {
            watchdog(job.test_path);
            let client = builder()
                .segment_size(256 << 10)
                .endpoints(job.endpoints)
                .init::<Ofi>(boot)
                .map_err(|e| e.to_string())?;
            if let Err(e) = conformance::run_on_rank(&client, case) {
                client.abort(1, &e);
            }
            client.finalize().map_err(|e| e.to_string())
        }
    }
}

/// Bounds every case: a rank still running after [`CASE_LIMIT`] exits, and the launcher
/// then ends the whole job, so a hang fails the test instead of stalling the run.
fn watchdog(case: &str) {
    let case = case.to_string();
    std::thread::spawn(move || {
        std::thread::sleep(CASE_LIMIT);
        eprintln!("ofi conformance: {case} still running after {CASE_LIMIT:?}; ending this rank");
        std::process::exit(124);
    });
}

/// Longest one case may run on one rank (they take well under a few seconds here).
const CASE_LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

fn provider(p: &'static str) -> impl FnOnce() -> ClientBuilder {
    move || ClientBuilder::new().config(Config::from_pairs([("GEX_OFI_PROVIDER", p)]))
}

/// tcp;ofi_rxm, two ranks.
mod tcp {
    use super::*;
    fn runner(job: &Job<'_>, case: &Case<Ofi>) -> Result<(), String> {
        run(job, case, provider("tcp"))
    }
    gex_testkit::suite_tests! {
        suite: core,
        conduit: Ofi,
        runner: runner,
        ranks: 2,
    }
}

/// tcp;ofi_rxm, three ranks with two endpoints each (one libfabric domain per endpoint).
mod tcp_three_ranks_two_eps {
    use super::*;
    fn runner(job: &Job<'_>, case: &Case<Ofi>) -> Result<(), String> {
        run(job, case, provider("tcp"))
    }
    gex_testkit::suite_tests! {
        suite: core,
        conduit: Ofi,
        runner: runner,
        ranks: 3,
        endpoints: 2,
    }
}

/// shm, two ranks.
mod shm {
    use super::*;
    fn runner(job: &Job<'_>, case: &Case<Ofi>) -> Result<(), String> {
        run(job, case, provider("shm"))
    }
    gex_testkit::suite_tests! {
        suite: core,
        conduit: Ofi,
        runner: runner,
        ranks: 2,
    }
}

/// tcp;ofi_rxm without multi-receive (the pre-posted buffer pool), a credit window of 4
/// and 1 KiB Mediums, so flow control and reply queueing happen constantly; blocking
/// waits (the CQ wait object).
mod tcp_small_window_blocking {
    use super::*;
    fn runner(job: &Job<'_>, case: &Case<Ofi>) -> Result<(), String> {
        run(job, case, || {
            ClientBuilder::new()
                .config(Config::from_pairs([
                    ("GEX_OFI_PROVIDER", "tcp"),
                    ("GEX_OFI_MULTI_RECV", "0"),
                    ("GEX_OFI_CREDITS", "4"),
                    ("GEX_OFI_MAX_MEDIUM", "1024"),
                ]))
                .wait_policy(WaitPolicy::Block)
        })
    }
    gex_testkit::suite_tests! {
        suite: core,
        conduit: Ofi,
        runner: runner,
        ranks: 2,
    }
}

/// shm, three ranks with two endpoints each, always sleeping in the CQ's wait object.
mod shm_three_ranks_two_eps_blocking {
    use super::*;
    fn runner(job: &Job<'_>, case: &Case<Ofi>) -> Result<(), String> {
        run(job, case, || {
            provider("shm")().wait_policy(WaitPolicy::Block)
        })
    }
    gex_testkit::suite_tests! {
        suite: core,
        conduit: Ofi,
        runner: runner,
        ranks: 3,
        endpoints: 2,
    }
}
