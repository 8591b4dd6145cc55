//! Launcher conformance cases, shared by the tests that run them under a real
//! launcher: `gex_mpiexec.rs` (MPICH's Hydra, PMI-1), `launch_hydra.rs` (Hydra,
//! PMI-2), `launch_slurm.rs` (`srun`, PMI-2 and PMIx) and `launch_mpirun.rs` (Open
//! MPI's `mpirun`, PMIx).
//!
//! Each case is one function that plays both sides. In the test process it runs
//! `<launcher> <this test binary> <test name> --exact --nocapture --test-threads=1`
//! with `GEXTEST_LAUNCH_DIR` (a fresh directory) in the environment, waits for it
//! (bounded), and checks the exit code, the launcher's messages, the time taken and
//! that no rank survived. In the ranks the launcher started, which find
//! `GEXTEST_LAUNCH_DIR` set, the same function plays a rank: it records its pid,
//! bootstraps with `gex_boot::from_env()` and does its part.
//!
//! What each launcher does on a fault is its own business (exit code, message):
//! [`Launcher`]'s methods hold what each is observed and documented to do (see
//! docs/launching.md), and the cases assert exactly that.
#![allow(dead_code)] // each test file uses the cases of its launchers

use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use gex_core::boot::Bootstrap;
use gex_testkit::procs::{is_gone, recorded_pids, shm_names, signal, wait_until};

/// One `#[test]` per `name: case;` (with its attributes, and those given with `each`):
/// `fn name()` runs `common::case(launcher, "name")`, unless `guard("name")` (if
/// given) says to skip it.
macro_rules! launcher_cases {
    (@each $launcher:expr, [$($guard:ident)?], [$($all:tt)*],
        $(#[$m:meta])* $name:ident: $case:ident; $($rest:tt)*) => {
        $($all)*
        $(#[$m])*
        #[test]
        fn $name() {
            const NAME: &str = stringify!($name);
            $(
                if !$guard(NAME) {
                    return;
                }
            )?
            $crate::common::$case($launcher, NAME);
        }
        $crate::common::launcher_cases!(@each $launcher, [$($guard)?], [$($all)*], $($rest)*);
    };
    (@each $launcher:expr, [$($guard:ident)?], [$($all:tt)*],) => {};
    ($launcher:expr $(, if $guard:ident)? $(, each #[$all:meta])*; $($cases:tt)*) => {
        $crate::common::launcher_cases!(@each $launcher, [$($guard)?], [$(#[$all])*], $($cases)*);
    };
}
#[allow(unused_imports)] // not every test file generates its cases
pub(crate) use launcher_cases;

/// Set in the ranks: the job's scratch directory. Its presence is the rank marker.
pub(crate) const RANK_DIR: &str = "GEXTEST_LAUNCH_DIR";
/// Longest a job may take before the test kills it and fails.
const LIMIT: Duration = Duration::from_secs(60);
/// A rank that is still alive this long after starting exits on its own (99).
const RANK_WATCHDOG: Duration = Duration::from_secs(200);
/// How soon after a fault the launcher must have ended the job.
const PROMPT: Duration = Duration::from_secs(15);

/// One job at a time: 4 ranks of two jobs on the 2 cores of CI would make the
/// timing checks meaningless.
static ONE_JOB: Mutex<()> = Mutex::new(());

/// A launcher under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Launcher {
    /// MPICH's Hydra `mpiexec.hydra` as a user runs it: PMI-1, which
    /// [`gex_boot::detect`] picks there.
    Hydra,
    /// MPICH's Hydra `mpiexec.hydra` with `GEX_BOOT=pmi2` (Hydra serves both PMI
    /// versions on its socket; detection would pick PMI-1 there).
    HydraPmi2,
    /// Slurm's `srun --mpi=pmi2` (needs a running Slurm: ci/slurm.sh).
    SrunPmi2,
    /// Slurm's `srun --mpi=pmix`.
    SrunPmix,
    /// Open MPI's `mpirun` (a PMIx server).
    Mpirun,
}

impl Launcher {
    /// The bootstrap the ranks must find.
    pub(crate) fn backend(self) -> &'static str {
        match self {
            Launcher::Hydra => "pmi",
            Launcher::HydraPmi2 | Launcher::SrunPmi2 => "pmi2",
            Launcher::SrunPmix | Launcher::Mpirun => "pmix",
        }
    }

    fn program(self) -> Option<PathBuf> {
        let names: &[&str] = match self {
            Launcher::Hydra | Launcher::HydraPmi2 => &["mpiexec.hydra", "mpiexec.mpich"],
            Launcher::SrunPmi2 | Launcher::SrunPmix => &["srun"],
            Launcher::Mpirun => &["mpirun.openmpi", "orterun", "prterun"],
        };
        let path = std::env::var_os("PATH")?;
        names.iter().find_map(|name| {
            std::env::split_paths(&path)
                .map(|d| d.join(name))
                .find(|p| p.is_file())
        })
    }

    /// The command line that starts `ranks` ranks, before the program.
    fn command(self, ranks: u32, opts: &Opts) -> Command {
        let prog = self.program().unwrap_or_else(|| {
            panic!(
                "{self:?}: the launcher is not in PATH (ci/test's packages step installs \
                 mpich, openmpi-bin and Slurm)"
            )
        });
        let mut c = Command::new(prog);
        let n = ranks.to_string();
        match self {
            Launcher::Hydra => {
                c.args(opts.hydra_args).args(["-n", &n]);
            }
            Launcher::HydraPmi2 => {
                c.args(["-n", &n]).env("GEX_BOOT", "pmi2");
            }
            Launcher::SrunPmi2 | Launcher::SrunPmix => {
                let mpi = if self == Launcher::SrunPmi2 {
                    "--mpi=pmi2"
                } else {
                    "--mpi=pmix"
                };
                // --overcommit: more tasks than the node's CPUs (CI has 2);
                // --kill-on-bad-exit: a rank that dies ends the step (see
                // docs/launching.md: without it Slurm lets the others run on).
                c.args([mpi, "--overcommit", "--quiet"]).args(["-n", &n]);
                if !opts.keep_going {
                    c.arg("--kill-on-bad-exit=1");
                }
                let t = opts.time_limit_min.unwrap_or(5).to_string();
                c.args(["--time", &t]);
            }
            Launcher::Mpirun => {
                // As root, Open MPI wants to be told; --oversubscribe: more ranks than
                // cores.
                c.args(["--allow-run-as-root", "--oversubscribe", "-n", &n]);
            }
        }
        c
    }

    /// The exit code of a job whose ranks all finalize and then exit with `codes`.
    pub(crate) fn code_of_finalized(self, codes: &[i32]) -> i32 {
        match self {
            // Hydra 4.0: the bitwise OR of the ranks' codes.
            Launcher::Hydra | Launcher::HydraPmi2 => codes.iter().fold(0, |a, c| a | c),
            // srun: the largest.
            Launcher::SrunPmi2 | Launcher::SrunPmix => codes.iter().copied().max().unwrap_or(0),
            // mpirun: the first non-zero code it saw (here: the lowest rank's, as the
            // ranks exit in rank order, see the case).
            Launcher::Mpirun => codes.iter().copied().find(|&c| c != 0).unwrap_or(0),
        }
    }

    /// What the launcher says on stderr when rank `rank` is killed by SIGKILL
    /// (`None`: nothing naming the rank).
    pub(crate) fn kill_message(self, rank: u32) -> Option<String> {
        match self {
            // Hydra 4.0 in PMI-2 mode: its proxy fails writing to the dead rank's
            // socket and the job ends as an internal error (255), naming no rank.
            Launcher::HydraPmi2 => None,
            // Hydra 4.0 with PMI-1: its "BAD TERMINATION" banner goes to stdout and
            // names the dead process's pid, not its rank.
            Launcher::Hydra => None,
            Launcher::SrunPmi2 | Launcher::SrunPmix => Some(format!("task {rank}: Killed")),
            Launcher::Mpirun => Some(format!("rank {rank} with PID")),
        }
    }

    /// The exit code of a job a rank aborted with code `code` (`None`: any
    /// non-zero code, the launcher does not keep it).
    pub(crate) fn code_of_abort(self, code: i32) -> Option<i32> {
        match self {
            // Hydra 4.0 has no PMI-2 abort: it ends the job as a protocol error.
            Launcher::HydraPmi2 => Some(255),
            // PMI-1's abort: the aborting rank's code.
            Launcher::Hydra => Some(code),
            // Slurm kills the step with SIGKILL; srun reports 128 + 9 or the
            // aborting rank's own code, whichever reached it last.
            Launcher::SrunPmi2 | Launcher::SrunPmix => None,
            Launcher::Mpirun => Some(code),
        }
    }
}

/// How to run a job.
#[derive(Debug, Default)]
pub(crate) struct Opts {
    /// Slurm: the job's time limit in minutes (default 5).
    pub(crate) time_limit_min: Option<u32>,
    /// How long the test waits for the job (default [`LIMIT`]).
    pub(crate) limit: Option<Duration>,
    /// Slurm: no `--kill-on-bad-exit` (a rank's non-zero exit does not end the
    /// others).
    pub(crate) keep_going: bool,
    /// [`Launcher::Hydra`]: arguments before `-n` (e.g. `-pmi-port`).
    pub(crate) hydra_args: &'static [&'static str],
    /// Added to the launcher's environment (after `GEX_BOOT` is removed).
    pub(crate) env: &'static [(&'static str, &'static str)],
}

/// A fresh directory, removed on drop.
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        // The ranks write here: on one node any local directory will do.
        let p = std::env::temp_dir().join(format!(
            "gex-boot-launch-{tag}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir(&p).unwrap();
        TempDir(p)
    }
    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A finished job.
pub(crate) struct Job {
    pub(crate) launcher: Launcher,
    /// What /dev/shm held before the job started.
    shm_before: Vec<String>,
    pub(crate) status: ExitStatus,
    pub(crate) took: Duration,
    pub(crate) ended: SystemTime,
    pub(crate) dir: TempDir,
}

impl Job {
    pub(crate) fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default()
    }
    pub(crate) fn stderr(&self) -> String {
        self.read("stderr")
    }
    pub(crate) fn stdout(&self) -> String {
        self.read("stdout")
    }
    /// Everything the job printed, for assertion messages.
    pub(crate) fn report(&self) -> String {
        format!(
            "{:?} {:?} after {:?}\n--- stdout\n{}--- stderr\n{}",
            self.launcher,
            self.status,
            self.took,
            self.stdout(),
            self.stderr()
        )
    }
    pub(crate) fn code(&self) -> Option<i32> {
        self.status.code()
    }
    fn pids(&self) -> Vec<u32> {
        recorded_pids(self.dir.path())
    }
    /// Asserts that the job failed, and not by a rank's watchdog (exit code 99).
    pub(crate) fn assert_failed(&self) {
        assert!(
            !self.status.success() && self.code() != Some(99),
            "{}",
            self.report()
        );
    }
    /// Asserts the exit code of a job a rank of which aborted with `code` under `l`
    /// ([`Launcher::code_of_abort`]; where the launcher does not keep it, that the
    /// job failed).
    pub(crate) fn assert_code_of_abort(&self, l: Launcher, code: i32) {
        match l.code_of_abort(code) {
            Some(c) => assert_eq!(self.code(), Some(c), "{}", self.report()),
            None => self.assert_failed(),
        }
    }
    /// Asserts that `n` rank processes started and none of them is still running
    /// (allowing a moment for the kernel to finish the kills).
    pub(crate) fn assert_no_rank_left(&self, n: usize) {
        let pids = self.pids();
        assert_eq!(
            pids.len(),
            n,
            "rank processes that started\n{}",
            self.report()
        );
        let gone = wait_until(Duration::from_secs(5), || pids.iter().all(|&p| is_gone(p)));
        let alive: Vec<u32> = pids.iter().copied().filter(|&p| !is_gone(p)).collect();
        assert!(gone, "ranks {alive:?} survived the job\n{}", self.report());
        let new: Vec<String> = shm_names()
            .into_iter()
            .filter(|n| !self.shm_before.contains(n))
            .collect();
        assert!(
            new.is_empty(),
            "the job left {new:?} in /dev/shm\n{}",
            self.report()
        );
    }
    /// Asserts that ranks `0..n` all reached the end of their part.
    pub(crate) fn assert_all_done(&self, n: u32) {
        for r in 0..n {
            assert!(
                self.dir.path().join(format!("done.{r}")).exists(),
                "rank {r} did not finish\n{}",
                self.report()
            );
        }
    }
    /// Asserts the job ended within [`PROMPT`] of the time stamp rank files `stamp`.
    pub(crate) fn assert_ended_promptly_after(&self, stamp: &str) {
        let t: u64 = self
            .read(stamp)
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("no time stamp {stamp}\n{}", self.report()));
        let at = SystemTime::UNIX_EPOCH + Duration::from_nanos(t);
        let took = self.ended.duration_since(at).unwrap_or_default();
        assert!(
            took < PROMPT,
            "the job ended {took:?} after {stamp}\n{}",
            self.report()
        );
    }
    pub(crate) fn assert_stderr_has(&self, what: &str) {
        assert!(
            self.stderr().contains(what),
            "stderr lacks {what:?}\n{}",
            self.report()
        );
    }
}

/// Runs `test` as a job of `ranks` ranks under `launcher`, stdout and stderr to
/// files, at most `limit`: a job still running then is interrupted (SIGTERM to the
/// launcher, which makes it clean up), then killed with its ranks, and the test
/// fails.
pub(crate) fn run_job(launcher: Launcher, ranks: u32, test: &str, opts: Opts) -> Job {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let limit = opts.limit.unwrap_or(LIMIT);
    let dir = TempDir::new(test);
    let exe = std::env::current_exe().unwrap();
    let mut cmd = launcher.command(ranks, &opts);
    cmd.arg(&exe)
        .args([
            test,
            "--exact",
            "--nocapture",
            "--test-threads=1",
            "--include-ignored",
        ])
        .env(RANK_DIR, dir.path())
        .stdin(Stdio::null())
        .stdout(File::create(dir.path().join("stdout")).unwrap())
        .stderr(File::create(dir.path().join("stderr")).unwrap());
    if launcher != Launcher::HydraPmi2 {
        cmd.env_remove("GEX_BOOT");
    }
    cmd.envs(opts.env.iter().copied());
    let _ = writeln!(std::io::stderr(), "+ {cmd:?}");
    let shm_before = shm_names();
    let start = Instant::now();
    let mut child = cmd.spawn().expect("start the launcher");
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > limit {
            signal(child.id(), rustix::process::Signal::TERM);
            if !wait_until(Duration::from_secs(10), || {
                child.try_wait().unwrap().is_some()
            }) {
                let _ = child.kill();
            }
            let _ = child.wait();
            for p in recorded_pids(dir.path()) {
                signal(p, rustix::process::Signal::KILL);
            }
            let job = Job {
                launcher,
                shm_before,
                status: ExitStatus::default(),
                took: start.elapsed(),
                ended: SystemTime::now(),
                dir,
            };
            panic!("the job did not end within {limit:?}\n{}", job.report());
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let job = Job {
        launcher,
        shm_before,
        status,
        took: start.elapsed(),
        ended: SystemTime::now(),
        dir,
    };
    let _ = writeln!(
        std::io::stderr(),
        "  exited with {:?} after {:?}",
        job.status,
        job.took
    );
    if std::env::var_os("GEXTEST_SHOW_JOBS").is_some() {
        let _ = writeln!(std::io::stderr(), "{}", job.report());
    }
    job
}

// ---------------------------------------------------------------------------------
// Rank side

/// In a rank started by the launcher: the job's directory. `None` in the test
/// process.
pub(crate) fn rank_dir() -> Option<PathBuf> {
    std::env::var_os(RANK_DIR).map(PathBuf::from)
}

/// Every rank starts here: record the pid (before anything can fail) and arm the
/// watchdog that ends a rank the launcher forgot.
pub(crate) fn rank_prelude(dir: &Path) {
    std::fs::write(dir.join(format!("pid.{}", std::process::id())), "").unwrap();
    std::thread::spawn(|| {
        std::thread::sleep(RANK_WATCHDOG);
        eprintln!("rank watchdog: the launcher did not end the job; exiting 99");
        std::process::exit(99);
    });
}

/// [`rank_prelude`], then the bootstrap, which must be `launcher`'s.
pub(crate) fn rank_start(dir: &Path, launcher: Launcher) -> Box<dyn Bootstrap> {
    rank_prelude(dir);
    let boot = gex_boot::from_env().expect("bootstrap");
    assert_eq!(boot.name(), launcher.backend(), "{:?}", gex_boot::detect());
    boot
}

pub(crate) fn rank_done(dir: &Path, rank: u32) {
    std::fs::write(dir.join(format!("done.{rank}")), "").unwrap();
}

pub(crate) fn stamp(dir: &Path, name: &str) {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    std::fs::write(dir.join(name), now.to_string()).unwrap();
}

/// A blob whose length and content depend on the rank and the round; some are
/// empty, some far larger than a PMI value.
pub(crate) fn blob(rank: u32, round: u32) -> Vec<u8> {
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
// Cases

/// 4 ranks: the backend the launcher implies, rank and size, one host, exchanges
/// of blobs up to 32 KiB, barriers and broadcasts from several roots, finalize.
pub(crate) fn collectives(l: Launcher, name: &str) {
    if let Some(dir) = rank_dir() {
        let mut boot = rank_start(&dir, l);
        let rank = boot.rank();
        assert_eq!(boot.size(), 4);
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
            b"x".to_vec()
        };
        assert_eq!(boot.broadcast(2, &mine).unwrap(), big);
        assert_eq!(boot.broadcast(0, b"").unwrap(), b"");
        assert_eq!(boot.broadcast(3, b"three").unwrap(), b"three");
        boot.barrier().unwrap();
        boot.finalize(0).unwrap();
        rank_done(&dir, rank);
        return;
    }
    let job = run_job(l, 4, name, Opts::default());
    assert_eq!(job.code(), Some(0), "{}", job.report());
    job.assert_all_done(4);
    job.assert_no_rank_left(4);
}

/// Every rank finalizes, then exits with its own code (rank 1: 3, rank 2: 5, the
/// others 0, in rank order): the launcher's exit code follows its rule.
pub(crate) fn exit_codes(l: Launcher, name: &str) {
    const CODES: [i32; 4] = [0, 3, 5, 0];
    if let Some(dir) = rank_dir() {
        let mut boot = rank_start(&dir, l);
        let rank = boot.rank();
        boot.barrier().unwrap();
        boot.finalize(0).unwrap();
        rank_done(&dir, rank);
        // Exit in rank order, so "the first non-zero code" is well defined.
        std::thread::sleep(Duration::from_millis(300 * u64::from(rank)));
        std::process::exit(CODES[rank as usize]);
    }
    // With --kill-on-bad-exit, srun would kill the ranks still running when rank 1
    // exits with 3 (and report 143): exit codes propagate without it.
    let opts = Opts {
        keep_going: true,
        ..Opts::default()
    };
    let job = run_job(l, 4, name, opts);
    assert_eq!(
        job.code(),
        Some(l.code_of_finalized(&CODES)),
        "{}",
        job.report()
    );
    job.assert_all_done(4);
    job.assert_no_rank_left(4);
}

/// The rank side of a case in which rank `who` ends the job: false in the test
/// process. In a rank, after a first barrier, rank `who` stamps `event` and runs
/// `end` (which does not come back); the others wait for it in a barrier, then sleep
/// until the launcher ends them.
fn in_rank_one_ends_the_job(
    l: Launcher,
    who: u32,
    event: &str,
    end: impl FnOnce(&mut Box<dyn Bootstrap>),
) -> bool {
    let Some(dir) = rank_dir() else {
        return false;
    };
    let mut boot = rank_start(&dir, l);
    boot.barrier().unwrap();
    if boot.rank() == who {
        stamp(&dir, event);
        end(&mut boot);
    }
    let _ = boot.barrier();
    std::thread::sleep(Duration::from_secs(300));
    true
}

/// Rank 1 is killed by SIGKILL while the others wait in a barrier: the launcher
/// ends the job promptly, says which rank died, exits non-zero.
pub(crate) fn kill9(l: Launcher, name: &str) {
    if in_rank_one_ends_the_job(l, 1, "kill-time", |_| {
        let me = rustix::process::getpid();
        rustix::process::kill_process(me, rustix::process::Signal::KILL).unwrap();
    }) {
        return;
    }
    let job = run_job(l, 4, name, Opts::default());
    job.assert_failed();
    job.assert_ended_promptly_after("kill-time");
    if let Some(m) = l.kill_message(1) {
        job.assert_stderr_has(&m);
    }
    job.assert_no_rank_left(4);
}

/// Rank 1 aborts with code 3 while the others wait in a barrier: gex prints the
/// message, the launcher ends the job promptly with its rule's code.
pub(crate) fn abort(l: Launcher, name: &str) {
    if in_rank_one_ends_the_job(l, 1, "abort-time", |boot| {
        boot.abort(3, "rank 1 gives up on purpose")
    }) {
        return;
    }
    let job = run_job(l, 4, name, Opts::default());
    job.assert_code_of_abort(l, 3);
    job.assert_ended_promptly_after("abort-time");
    job.assert_stderr_has("gex: rank 1 aborted the job (code 3): rank 1 gives up on purpose");
    job.assert_no_rank_left(4);
}

/// Rank 0 asks to end the job with code 5 (`Bootstrap::request_exit`, what
/// `Client::exit` does) and exits: the launcher ends the others promptly.
pub(crate) fn exit_request(l: Launcher, name: &str) {
    if in_rank_one_ends_the_job(l, 0, "exit-time", |boot| {
        boot.request_exit(5);
        std::process::exit(5);
    }) {
        return;
    }
    let job = run_job(l, 3, name, Opts::default());
    job.assert_code_of_abort(l, 5);
    job.assert_ended_promptly_after("exit-time");
    job.assert_no_rank_left(3);
}

/// Slurm only: a job whose ranks wait forever (rank 0 never enters the barrier)
/// under `--time 1` is ended by Slurm's time limit: srun exits non-zero saying so,
/// and no rank survives.
pub(crate) fn time_limit(l: Launcher, name: &str) {
    assert!(matches!(l, Launcher::SrunPmi2 | Launcher::SrunPmix));
    if let Some(dir) = rank_dir() {
        let mut boot = rank_start(&dir, l);
        boot.barrier().unwrap();
        stamp(&dir, &format!("waiting.{}", boot.rank()));
        if boot.rank() != 0 {
            let _ = boot.barrier();
        }
        std::thread::sleep(Duration::from_secs(300));
        return;
    }
    // Slurm's limit is whole minutes, checked about every 30 s, then KillWait.
    let opts = Opts {
        time_limit_min: Some(1),
        limit: Some(Duration::from_secs(150)),
        ..Opts::default()
    };
    let job = run_job(l, 2, name, opts);
    job.assert_failed();
    assert!(job.took >= Duration::from_secs(55), "{}", job.report());
    job.assert_stderr_has("DUE TO TIME LIMIT");
    job.assert_no_rank_left(2);
}
