//! Jobs of real rank processes started with `spawn_self_test`: each test function
//! is both the launcher (in the test process) and the ranks (in copies of this
//! test binary that run only that test).

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use gex_boot::{Role, spawn_self_test, spawn_self_test_with};
use gex_core::boot::Bootstrap;

/// In a rank: end the process if the launcher has not ended the job in time, so a
/// broken launcher makes the test fail instead of hang.
fn watchdog() {
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_secs(20));
        eprintln!("rank watchdog: the launcher did not end the job; exiting 99");
        std::process::exit(99);
    });
}

/// A file shared by the launcher and its ranks (the ranks' parent is the launcher).
fn shared_file(tag: &str, launcher_pid: u32) -> PathBuf {
    std::env::temp_dir().join(format!("gex-boot-test-{tag}-{launcher_pid}"))
}

fn parent_pid() -> u32 {
    rustix::process::getppid()
        .map(|p| p.as_raw_pid().unsigned_abs())
        .unwrap_or(0)
}

fn blob_of(rank: u32) -> Vec<u8> {
    // Different lengths per rank, including an empty blob for rank 0.
    (0..rank * 3).map(|i| (rank * 16 + i) as u8).collect()
}

/// Both sides of a job of `ranks` copies of the test `name`: in the launcher,
/// `launcher` checks the job's exit code; in each rank, `rank` runs (the
/// [`watchdog`] started).
fn self_job(
    ranks: u32,
    name: &str,
    launcher: impl FnOnce(i32),
    rank: impl FnOnce(Box<dyn Bootstrap>),
) {
    on_role(spawn_self_test(ranks, name).unwrap(), launcher, rank);
}

/// [`self_job`] whose launcher asserts that the job's exit code is `code`.
fn job_ending_with(code: i32, ranks: u32, name: &str, rank: impl FnOnce(Box<dyn Bootstrap>)) {
    self_job(ranks, name, |c| assert_eq!(c, code), rank);
}

/// [`self_job`] for a job already started (`role`).
fn on_role(role: Role, launcher: impl FnOnce(i32), rank: impl FnOnce(Box<dyn Bootstrap>)) {
    match role {
        Role::Launcher(code) => launcher(code),
        Role::Rank(boot) => {
            watchdog();
            rank(boot);
        }
    }
}

/// In the launcher: the job ended with `code`, and within 5 s of `start`.
fn ended_promptly(code: i32, want: i32, start: Instant) {
    assert_eq!(code, want);
    let took = start.elapsed();
    assert!(took < Duration::from_secs(5), "job took {took:?}");
}

/// In a rank the job should lose: wait for the others in a barrier, then linger
/// until the launcher ends the job.
fn linger(mut boot: Box<dyn Bootstrap>) {
    let _ = boot.barrier();
    std::thread::sleep(Duration::from_secs(30));
}

#[test]
fn four_ranks_exchange_barrier_broadcast() {
    job_ending_with(0, 4, "four_ranks_exchange_barrier_broadcast", |mut boot| {
        let (rank, size) = (boot.rank(), boot.size());
        assert_eq!(size, 4);
        assert_eq!(boot.name(), "fork");
        assert_eq!(boot.host_ids(), &[0, 0, 0, 0]);
        assert_eq!(std::env::var("GEX_LOCAL_RANK").unwrap(), rank.to_string());
        assert_eq!(std::env::var("GEX_LOCAL_SIZE").unwrap(), "4");
        let all = boot.exchange(&blob_of(rank)).unwrap();
        assert_eq!(all.len(), 4);
        for (r, blob) in all.iter().enumerate() {
            assert_eq!(
                blob,
                &blob_of(r as u32),
                "blob of rank {r} seen by rank {rank}"
            );
        }
        boot.barrier().unwrap();
        let data = if rank == 2 {
            b"from two".to_vec()
        } else {
            b"ignored".to_vec()
        };
        assert_eq!(boot.broadcast(2, &data).unwrap(), b"from two");
        // A second exchange, to check sequence numbers keep matching.
        let all = boot.exchange(format!("again {rank}").as_bytes()).unwrap();
        let want: Vec<Vec<u8>> = (0..4).map(|r| format!("again {r}").into_bytes()).collect();
        assert_eq!(all, want);
        boot.barrier().unwrap();
        boot.finalize(0).unwrap();
    });
}

/// Host names given to the launcher reach the ranks as host ids (WELCOME), and every
/// rank was started through the host prefix with its own host name.
#[test]
fn hosts_reach_the_ranks() {
    let job = spawn_self_test_with(4, "hosts_reach_the_ranks", |s| {
        s.hosts(["x", "y", "x", "y"])
            .host_exec(["env", "BOOT_TEST_HOST=host-{host}"])
    });
    on_role(
        job.unwrap(),
        |code| assert_eq!(code, 0),
        |mut boot| {
            let rank = boot.rank();
            assert_eq!(boot.host_ids(), &[0, 1, 0, 1]);
            let host = if rank % 2 == 0 { "host-x" } else { "host-y" };
            assert_eq!(std::env::var("BOOT_TEST_HOST").unwrap(), host);
            assert_eq!(
                std::env::var("GEX_LOCAL_RANK").unwrap(),
                (rank / 2).to_string()
            );
            assert_eq!(std::env::var("GEX_LOCAL_SIZE").unwrap(), "2");
            // The prefix exec'd the rank in place: its parent is still the launcher.
            let launcher = boot.broadcast(0, &parent_pid().to_le_bytes()).unwrap();
            assert_eq!(launcher, parent_pid().to_le_bytes());
            boot.finalize(0).unwrap();
        },
    );
}

#[test]
fn panic_after_hello_ends_the_job() {
    let me = std::process::id();
    self_job(
        3,
        "panic_after_hello_ends_the_job",
        |code| {
            let ended = SystemTime::now();
            let path = shared_file("panic", me);
            let stamp = std::fs::read_to_string(&path).expect("rank 1 wrote its panic time");
            let _ = std::fs::remove_file(&path);
            let panicked =
                SystemTime::UNIX_EPOCH + Duration::from_nanos(stamp.trim().parse().unwrap());
            assert_eq!(code, 101);
            let took = ended.duration_since(panicked).unwrap_or_default();
            assert!(
                took < Duration::from_secs(2),
                "ranks were ended {took:?} after the panic"
            );
        },
        |mut boot| {
            boot.barrier().unwrap();
            if boot.rank() == 1 {
                let now = SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap();
                std::fs::write(
                    shared_file("panic", parent_pid()),
                    now.as_nanos().to_string(),
                )
                .unwrap();
                panic!("rank 1 panics on purpose");
            }
            // The others wait for rank 1, which never comes: the launcher must end them.
            linger(boot);
        },
    );
}

#[test]
fn sigkill_of_a_gex_rank_ends_the_job() {
    let start = Instant::now();
    self_job(
        3,
        "sigkill_of_a_gex_rank_ends_the_job",
        |code| ended_promptly(code, 128 + 9, start),
        |mut boot| {
            boot.barrier().unwrap();
            if boot.rank() == 2 {
                let me = rustix::process::getpid();
                rustix::process::kill_process(me, rustix::process::Signal::KILL).unwrap();
            }
            linger(boot);
        },
    );
}

#[test]
fn exit_request_ends_the_job() {
    let start = Instant::now();
    self_job(
        3,
        "exit_request_ends_the_job",
        |code| ended_promptly(code, 5, start),
        |mut boot| {
            boot.barrier().unwrap();
            if boot.rank() == 0 {
                boot.request_exit(5);
                std::process::exit(5);
            }
            linger(boot);
        },
    );
}

#[test]
fn abort_ends_the_job_with_its_code() {
    job_ending_with(3, 3, "abort_ends_the_job_with_its_code", |mut boot| {
        if boot.rank() == 2 {
            boot.abort(3, "rank 2 gives up on purpose");
        }
        linger(boot);
    });
}

#[test]
fn mismatched_collectives_end_the_job() {
    job_ending_with(1, 2, "mismatched_collectives_end_the_job", |mut boot| {
        if boot.rank() == 0 {
            let _ = boot.barrier();
        } else {
            let _ = boot.exchange(b"x");
        }
        std::thread::sleep(Duration::from_secs(30));
    });
}

#[test]
fn nonzero_exit_after_finalize_is_the_job_code() {
    job_ending_with(
        9,
        2,
        "nonzero_exit_after_finalize_is_the_job_code",
        |mut boot| {
            boot.barrier().unwrap();
            let code = if boot.rank() == 1 { 9 } else { 0 };
            boot.finalize(code).unwrap();
            std::process::exit(code);
        },
    );
}

#[test]
fn wrong_test_path_fails_the_job() {
    // The copy runs no test, so it never creates its bootstrap: that must not pass.
    match spawn_self_test(1, "there_is_no_test_with_this_name").unwrap() {
        Role::Launcher(code) => assert_eq!(code, 1),
        Role::Rank(_) => unreachable!("no copy runs this test"),
    }
}
