//! Tests of the process runner itself (`gex_testkit::procs`): what a job reports when
//! it passes, when a rank fails, panics, hangs or leaves something in `/dev/shm`, when
//! the test path is wrong; host layouts, notes and marks; Hydra's `mpiexec`; and the
//! conformance suite through `ProcRunner` (on gex-core's one-rank loopback conduit,
//! one process per job).

use gex_core::boot::Bootstrap;
use gex_core::loopback::Loopback;
use gex_testkit::procs::{self, Outcome, ProcRunner, Procs};
use std::time::Duration;

fn e2s(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Barrier, then finalize: what a rank that passes does at the bootstrap level.
fn finish(mut boot: Box<dyn Bootstrap>) -> Result<(), String> {
    boot.barrier().map_err(e2s)?;
    boot.finalize(0).map_err(e2s)
}

#[test]
fn a_job_that_passes_reports_every_rank() {
    let r = Procs::new(3).run(|boot| {
        let me = boot.rank();
        println!("hello from rank {me}");
        procs::note("square", &(me * me).to_string());
        finish(boot)
    });
    r.assert_success();
    assert_eq!(r.code(), Some(0));
    assert_eq!(r.ranks.len(), 3);
    for (i, k) in r.ranks.iter().enumerate() {
        assert_eq!(k.rank, Some(i as u32));
        assert_eq!(k.outcome, Outcome::Passed);
        assert!(
            k.log.contains(&format!("hello from rank {i}")),
            "{:?}",
            k.log
        );
    }
    let mut pids: Vec<u32> = r.ranks.iter().map(|k| k.pid).collect();
    pids.dedup();
    assert_eq!(pids.len(), 3, "one process per rank");
    assert_eq!(r.notes("square"), ["0", "1", "4"]);
    assert!(r.clean());
}

#[test]
fn a_failing_rank_is_reported_with_its_log() {
    let r = Procs::new(3).run(|mut boot| {
        if boot.rank() == 1 {
            eprintln!("rank 1 is about to fail");
            return Err("no, on purpose".to_string());
        }
        // The others wait for rank 1, which never comes: the launcher ends them.
        let _ = boot.barrier();
        std::thread::sleep(Duration::from_secs(30));
        Ok(())
    });
    assert!(!r.succeeded());
    assert_eq!(r.code(), Some(1), "{r}");
    let failed = r.rank(1).expect("rank 1 reported");
    assert_eq!(failed.outcome, Outcome::Failed("no, on purpose".into()));
    assert!(failed.log.contains("rank 1 is about to fail"), "{r}");
    let text = r.to_string();
    assert!(
        text.contains("FAILED: no, on purpose") && text.contains("rank 1 is about to fail"),
        "{text}"
    );
    assert!(
        r.took < Duration::from_secs(20),
        "the job was not ended: {r}"
    );
    r.assert_clean();
}

#[test]
fn a_panicking_rank_ends_the_job_with_101() {
    let r = Procs::new(2).run(|mut boot| {
        if boot.rank() == 0 {
            panic!("rank 0 panics on purpose");
        }
        let _ = boot.barrier();
        std::thread::sleep(Duration::from_secs(30));
    });
    assert_eq!(r.code(), Some(101), "{r}");
    assert_eq!(
        r.rank(0).expect("rank 0").outcome,
        Outcome::Panicked("rank 0 panics on purpose".into())
    );
    r.assert_clean();
}

#[test]
fn a_hung_job_is_ended_by_the_watchdog() {
    let r = Procs::new(2)
        .timeout(Duration::from_secs(2))
        .run(|_boot| std::thread::sleep(Duration::from_secs(120)));
    assert!(!r.succeeded());
    assert_eq!(r.code(), Some(124), "{r}");
    assert!(
        r.ranks.iter().any(|k| k.outcome == Outcome::TimedOut),
        "{r}"
    );
    assert!(r.took < Duration::from_secs(15), "{r}");
    r.assert_clean();
}

#[test]
fn leftovers_in_dev_shm_are_reported_and_removed() {
    let r = Procs::new(2).run(|boot| {
        let name = format!("/dev/shm/gex-procs-test-{}", std::process::id());
        std::fs::write(name, b"left behind").map_err(e2s)?;
        finish(boot)
    });
    assert!(!r.succeeded(), "{r}");
    assert_eq!(r.code(), Some(0));
    assert_eq!(r.shm_left.len(), 2, "{r}");
    let mut want: Vec<String> = r
        .ranks
        .iter()
        .map(|k| format!("gex-procs-test-{}", k.pid))
        .collect();
    want.sort();
    assert_eq!(r.shm_left, want);
    for n in &r.shm_left {
        assert!(!std::path::Path::new("/dev/shm").join(n).exists());
    }
}

#[test]
fn a_wrong_test_path_fails_the_job() {
    let r = Procs::new(2)
        .test("there_is_no_test_with_this_name")
        .run(finish);
    assert!(!r.succeeded());
    assert!(r.ranks.is_empty(), "{r}");
    assert_ne!(r.code(), Some(0), "{r}");
}

#[test]
fn marks_time_the_end_of_a_job() {
    let r = Procs::new(2).run(|mut boot| -> () {
        boot.barrier().expect("barrier");
        if boot.rank() == 0 {
            procs::mark("leaving");
            std::process::exit(7);
        }
        let _ = boot.barrier();
        std::thread::sleep(Duration::from_secs(30));
        std::process::exit(0);
    });
    assert_eq!(r.code(), Some(7), "{r}");
    let since = r.since_mark("leaving").expect("rank 0 marked");
    assert!(since < Duration::from_secs(5), "{since:?}\n{r}");
    assert_eq!(r.rank(0).expect("rank 0").outcome, Outcome::Unreported);
    r.assert_clean();
}

/// Host names shape the ranks' host ids and per-host ranks, and the prefix starts each
/// rank with its host name.
#[test]
fn hosts_and_host_exec_shape_the_job() {
    Procs::new(3)
        .hosts(["a", "a", "b"])
        .host_exec(["env", "PROCS_TEST_HOST={host}"])
        .env("PROCS_TEST_VALUE", "42")
        .run(|boot| {
            let me = boot.rank();
            let want = if me < 2 { "a" } else { "b" };
            let host = std::env::var("PROCS_TEST_HOST").map_err(e2s)?;
            let value = std::env::var("PROCS_TEST_VALUE").map_err(e2s)?;
            if boot.host_ids() != [0, 0, 1] || host != want || value != "42" {
                return Err(format!(
                    "rank {me}: host ids {:?}, host {host}, value {value}",
                    boot.host_ids()
                ));
            }
            finish(boot)
        })
        .assert_success();
}

/// The same job under MPICH's Hydra: the ranks bootstrap through PMI-1.
#[test]
fn mpiexec_starts_the_ranks_under_hydra() {
    let mpiexec = match procs::mpiexec("mpiexec_starts_the_ranks_under_hydra") {
        Ok(Some(m)) => m,
        Ok(None) => return,
        Err(e) => panic!("{e}"),
    };
    let r = Procs::new(3)
        .mpiexec(mpiexec)
        .timeout(Duration::from_secs(60))
        .run(|boot| {
            if boot.name() != "pmi" || boot.size() != 3 {
                return Err(format!("bootstrap {} of size {}", boot.name(), boot.size()));
            }
            finish(boot)
        });
    r.assert_success();
    assert!(r.launcher.contains("mpiexec"), "{}", r.launcher);
}

/// The core suite through `ProcRunner`: every case a job of one process on the
/// loopback conduit (the same exclusions as `conformance_loopback.rs`).
mod loopback_in_a_process {
    use super::*;
    gex_testkit::suite_tests! {
        suite: core,
        conduit: Loopback,
        runner: ProcRunner::new().builder(|| gex_testkit::conformance::builder().segment_size(64 << 10)),
        ranks: 1,
        endpoints: 2,
        exclude: {
            flood_one_rank: "needs 3 ranks; loopback runs a job of one",
            back_pressure: "loopback's queues are unbounded: non-waiting requests never report WouldBlock",
        },
    }
}
