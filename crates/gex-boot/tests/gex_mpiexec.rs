//! The PMI-1 bootstrap under a real launcher: MPICH's Hydra `mpiexec`.
//!
//! Each test is both sides. In the test process it runs
//! `mpiexec.hydra -n N <this test binary> <test name> --exact --nocapture
//! --test-threads=1` with `GEXTEST_MPI_DIR` (a fresh directory) in the environment,
//! waits for it (at most [`LIMIT`]) and checks the exit code, the time taken and that
//! no rank survived. In the copies started by `mpiexec`, which find
//! `GEXTEST_MPI_DIR` set, the same test function plays a rank: it records its pid in
//! that directory, bootstraps with `gex_boot::from_env()` and writes `done.<rank>`
//! when it has finished.
//!
//! MPICH's `mpiexec.hydra` (or `mpiexec.mpich`) must be in `PATH` (`apt-get install
//! mpich`; `ci/test` installs it). Without it every test here fails with a loud
//! message, unless `GEXTEST_ALLOW_NO_MPIEXEC=1` is set, in which case they pass
//! after printing that they were skipped. (Plain `mpiexec` is not used: it may be
//! Open MPI's.)

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime};

use gex_core::boot::Bootstrap;
use gex_testkit::procs::{is_gone, recorded_pids, signal, wait_until};

/// Set in the ranks: the job's scratch directory. Its presence is the rank marker.
const RANK_DIR: &str = "GEXTEST_MPI_DIR";
/// `1` turns a missing mpiexec into a skip instead of a failure.
const ALLOW_MISSING: &str = "GEXTEST_ALLOW_NO_MPIEXEC";
/// Longest a job may take before the test kills it and fails.
const LIMIT: Duration = Duration::from_secs(60);
/// A rank that is still alive this long after starting exits on its own.
const RANK_WATCHDOG: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------------
// Launcher side

/// MPICH's Hydra launcher, looked up in `PATH`.
fn find_mpiexec() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    ["mpiexec.hydra", "mpiexec.mpich"].iter().find_map(|name| {
        std::env::split_paths(&path)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

/// The launcher, or `None` (after a loud message) when it is missing and
/// `GEXTEST_ALLOW_NO_MPIEXEC=1`; panics when it is missing otherwise.
fn mpiexec_or_skip(test: &str) -> Option<PathBuf> {
    if let Some(p) = find_mpiexec() {
        return Some(p);
    }
    // Straight to stderr, not through `eprintln!`: libtest would hide it when the
    // test passes (skipped with GEXTEST_ALLOW_NO_MPIEXEC=1).
    let _ = writeln!(
        std::io::stderr(),
        "\n!!!!!!!!!! {test}: MPICH's mpiexec.hydra / mpiexec.mpich is not in PATH \
         (apt-get install mpich): the PMI-1 bootstrap is NOT TESTED !!!!!!!!!!\n"
    );
    let allowed = std::env::var(ALLOW_MISSING).is_ok_and(|v| v == "1");
    assert!(
        allowed,
        "{test} needs MPICH's mpiexec.hydra; install mpich, or set {ALLOW_MISSING}=1 to skip"
    );
    None
}

/// A fresh directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let p = std::env::temp_dir().join(format!(
            "gex-boot-mpiexec-{tag}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir(&p).unwrap();
        TempDir(p)
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A finished `mpiexec` job.
struct Job {
    status: ExitStatus,
    took: Duration,
    ended: SystemTime,
    dir: TempDir,
}

impl Job {
    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default()
    }
    fn stderr(&self) -> String {
        self.read("stderr")
    }
    /// Everything the job printed, for assertion messages.
    fn report(&self) -> String {
        format!(
            "mpiexec {:?} after {:?}\n--- stdout\n{}--- stderr\n{}",
            self.status,
            self.took,
            self.read("stdout"),
            self.stderr()
        )
    }
    /// The pids of every rank process that started.
    fn pids(&self) -> Vec<u32> {
        recorded_pids(self.dir.path())
    }
    /// Asserts that `n` rank processes started and that none of them is still
    /// running (allowing a moment for the kernel to finish the kills).
    fn assert_no_rank_left(&self, n: usize) {
        let pids = self.pids();
        assert_eq!(
            pids.len(),
            n,
            "rank processes that started\n{}",
            self.report()
        );
        let gone = wait_until(Duration::from_secs(2), || pids.iter().all(|&p| is_gone(p)));
        let alive: Vec<u32> = pids.iter().copied().filter(|&p| !is_gone(p)).collect();
        assert!(gone, "ranks {alive:?} survived the job\n{}", self.report());
    }
    /// Asserts that ranks `0..n` all reached the end of their test body.
    fn assert_all_done(&self, n: u32) {
        for r in 0..n {
            assert!(
                self.dir.path().join(format!("done.{r}")).exists(),
                "rank {r} did not finish\n{}",
                self.report()
            );
        }
    }
}

/// Runs `mpiexec.hydra [extra…] -n ranks <this binary> test --exact --nocapture
/// --test-threads=1` with `env` added to its environment (and `GEX_BOOT` removed),
/// stdout and stderr to files. A job still running after [`LIMIT`] is interrupted
/// (SIGINT to mpiexec, which makes Hydra clean up), then killed with its ranks, and
/// the test fails.
fn run_job(mpiexec: &Path, ranks: u32, test: &str, extra: &[&str], env: &[(&str, &str)]) -> Job {
    let dir = TempDir::new(test);
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new(mpiexec);
    cmd.args(extra)
        .arg("-n")
        .arg(ranks.to_string())
        .arg(&exe)
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env_remove("GEX_BOOT")
        .env(RANK_DIR, dir.path())
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(File::create(dir.path().join("stdout")).unwrap())
        .stderr(File::create(dir.path().join("stderr")).unwrap());
    let shown: Vec<String> = std::iter::once(mpiexec.display().to_string())
        .chain(extra.iter().map(|a| a.to_string()))
        .chain(["-n".into(), ranks.to_string(), exe.display().to_string()])
        .chain([test, "--exact", "--nocapture", "--test-threads=1"].map(String::from))
        .collect();
    eprintln!("+ {}", shown.join(" "));
    let start = Instant::now();
    let mut child = cmd.spawn().expect("start mpiexec");
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > LIMIT {
            signal(child.id(), rustix::process::Signal::INT);
            if !wait_until(Duration::from_secs(3), || {
                child.try_wait().unwrap().is_some()
            }) {
                let _ = child.kill();
            }
            let _ = child.wait();
            for p in recorded_pids(dir.path()) {
                signal(p, rustix::process::Signal::KILL);
            }
            let job = Job {
                status: ExitStatus::default(),
                took: start.elapsed(),
                ended: SystemTime::now(),
                dir,
            };
            panic!("mpiexec did not end within {LIMIT:?}\n{}", job.report());
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let job = Job {
        status,
        took: start.elapsed(),
        ended: SystemTime::now(),
        dir,
    };
    eprintln!(
        "  mpiexec exited with {:?} after {:?}",
        job.status, job.took
    );
    job
}

// ---------------------------------------------------------------------------------
// Rank side

/// In a copy started by mpiexec: the job's directory. `None` in the test process.
fn rank_dir() -> Option<PathBuf> {
    std::env::var_os(RANK_DIR).map(PathBuf::from)
}

/// Every rank starts here: record the pid (before anything can fail) and arm the
/// watchdog that ends a rank the launcher forgot.
fn rank_prelude(dir: &Path) {
    std::fs::write(dir.join(format!("pid.{}", std::process::id())), "").unwrap();
    std::thread::spawn(|| {
        std::thread::sleep(RANK_WATCHDOG);
        eprintln!("rank watchdog: mpiexec did not end the job; exiting 99");
        std::process::exit(99);
    });
}

/// [`rank_prelude`], then the bootstrap.
fn rank_start(dir: &Path) -> Box<dyn Bootstrap> {
    rank_prelude(dir);
    gex_boot::from_env().expect("PMI bootstrap")
}

fn rank_done(dir: &Path, rank: u32) {
    std::fs::write(dir.join(format!("done.{rank}")), "").unwrap();
}

fn now_nanos() -> u128 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// A blob whose length and content depend on the rank and the round; some are
/// empty, some far larger than Hydra's 1024-byte `vallen_max`.
fn blob(rank: u32, round: u32) -> Vec<u8> {
    let len = match round {
        0 => 0,
        1 => 1 + rank as usize,
        2 => 700 + 333 * rank as usize,
        3 => 1023 + rank as usize,
        _ => 20_000 + 4097 * rank as usize,
    };
    (0..len)
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(rank * 7 + round) as u8)
        .collect()
}

// ---------------------------------------------------------------------------------
// Tests

#[test]
fn four_ranks_collectives() {
    const NAME: &str = "four_ranks_collectives";
    if let Some(dir) = rank_dir() {
        let mut boot = rank_start(&dir);
        let rank = boot.rank();
        assert_eq!(boot.name(), "pmi");
        assert_eq!(boot.size(), 4);
        assert_eq!(std::env::var("PMI_RANK").unwrap(), rank.to_string());
        // One host: every rank has the same host id.
        assert_eq!(boot.host_ids(), &[0, 0, 0, 0]);
        for round in 0..5 {
            let all = boot.exchange(&blob(rank, round)).unwrap();
            assert_eq!(all.len(), 4);
            for (r, b) in all.iter().enumerate() {
                assert_eq!(b, &blob(r as u32, round), "round {round}: blob of rank {r}");
            }
        }
        boot.barrier().unwrap();
        let big = blob(2, 4);
        let mine = if rank == 2 {
            big.clone()
        } else {
            b"ignored".to_vec()
        };
        assert_eq!(boot.broadcast(2, &mine).unwrap(), big);
        assert_eq!(boot.broadcast(0, b"").unwrap(), b"");
        assert_eq!(boot.broadcast(3, b"three").unwrap(), b"three");
        boot.barrier().unwrap();
        boot.finalize(0).unwrap();
        rank_done(&dir, rank);
        return;
    }
    let Some(mpiexec) = mpiexec_or_skip(NAME) else {
        return;
    };
    let job = run_job(&mpiexec, 4, NAME, &[], &[]);
    assert_eq!(job.status.code(), Some(0), "{}", job.report());
    job.assert_all_done(4);
    job.assert_no_rank_left(4);
}

/// Hydra's other mode (`PMI_PORT` and `PMI_ID` instead of an inherited socket), with
/// `GEX_BOOT=pmi` forcing the PMI client; `spawn_self_test` in a rank started by
/// mpiexec returns the rank's bootstrap instead of launching.
#[test]
fn pmi_port_mode_and_spawn_self() {
    const NAME: &str = "pmi_port_mode_and_spawn_self";
    if let Some(dir) = rank_dir() {
        assert!(std::env::var_os("PMI_FD").is_none());
        assert!(std::env::var_os("PMI_PORT").is_some());
        rank_prelude(&dir);
        let mut boot = match gex_boot::spawn_self_test(7, NAME).unwrap() {
            gex_boot::Role::Rank(b) => b,
            gex_boot::Role::Launcher(_) => panic!("a rank under mpiexec launched a job"),
        };
        assert_eq!((boot.name(), boot.size()), ("pmi", 3));
        let rank = boot.rank();
        let all = boot.exchange(&blob(rank, 4)).unwrap();
        for (r, b) in all.iter().enumerate() {
            assert_eq!(b, &blob(r as u32, 4));
        }
        boot.finalize(0).unwrap();
        rank_done(&dir, rank);
        return;
    }
    let Some(mpiexec) = mpiexec_or_skip(NAME) else {
        return;
    };
    let job = run_job(&mpiexec, 3, NAME, &["-pmi-port"], &[("GEX_BOOT", "pmi")]);
    assert_eq!(job.status.code(), Some(0), "{}", job.report());
    job.assert_all_done(3);
    job.assert_no_rank_left(3);
}

#[test]
fn abort_ends_the_job_promptly() {
    const NAME: &str = "abort_ends_the_job_promptly";
    if let Some(dir) = rank_dir() {
        let mut boot = rank_start(&dir);
        boot.barrier().unwrap();
        if boot.rank() == 1 {
            std::fs::write(dir.join("abort-time"), now_nanos().to_string()).unwrap();
            boot.abort(3, "rank 1 gives up on purpose");
        }
        // The others wait for rank 1, which never comes: mpiexec must end them.
        let _ = boot.barrier();
        std::thread::sleep(Duration::from_secs(60));
        return;
    }
    let Some(mpiexec) = mpiexec_or_skip(NAME) else {
        return;
    };
    let job = run_job(&mpiexec, 4, NAME, &[], &[]);
    assert_eq!(job.status.code(), Some(3), "{}", job.report());
    let stamp: u64 = job
        .read("abort-time")
        .trim()
        .parse()
        .expect("rank 1 aborted");
    let aborted = SystemTime::UNIX_EPOCH + Duration::from_nanos(stamp);
    let took = job.ended.duration_since(aborted).unwrap_or_default();
    assert!(
        took < Duration::from_secs(5),
        "mpiexec ended {took:?} after the abort\n{}",
        job.report()
    );
    assert!(
        job.stderr()
            .contains("gex: rank 1 aborted the job (code 3): rank 1 gives up on purpose"),
        "{}",
        job.report()
    );
    job.assert_no_rank_left(4);
}

#[test]
fn exit_request_ends_the_job_with_its_code() {
    const NAME: &str = "exit_request_ends_the_job_with_its_code";
    if let Some(dir) = rank_dir() {
        let mut boot = rank_start(&dir);
        boot.barrier().unwrap();
        if boot.rank() == 0 {
            boot.request_exit(5);
            std::process::exit(5);
        }
        let _ = boot.barrier();
        std::thread::sleep(Duration::from_secs(60));
        return;
    }
    let Some(mpiexec) = mpiexec_or_skip(NAME) else {
        return;
    };
    let job = run_job(&mpiexec, 3, NAME, &[], &[]);
    assert_eq!(job.status.code(), Some(5), "{}", job.report());
    assert!(job.took < Duration::from_secs(10), "{}", job.report());
    job.assert_no_rank_left(3);
}

/// Under mpiexec a dying rank is Hydra's business: it must end the job.
#[test]
fn sigkill_of_a_rank_ends_the_job() {
    const NAME: &str = "sigkill_of_a_rank_ends_the_job";
    if let Some(dir) = rank_dir() {
        let mut boot = rank_start(&dir);
        boot.barrier().unwrap();
        if boot.rank() == 2 {
            let me = rustix::process::getpid();
            rustix::process::kill_process(me, rustix::process::Signal::KILL).unwrap();
        }
        let _ = boot.barrier();
        std::thread::sleep(Duration::from_secs(60));
        return;
    }
    let Some(mpiexec) = mpiexec_or_skip(NAME) else {
        return;
    };
    let job = run_job(&mpiexec, 3, NAME, &[], &[]);
    assert!(
        !job.status.success() && job.took < Duration::from_secs(10),
        "{}",
        job.report()
    );
    job.assert_no_rank_left(3);
}
