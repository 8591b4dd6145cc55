//! The process runner: every multi-process test of every conduit and layer starts its
//! job here.
//!
//! A multi-process test re-executes *its own test binary* once per rank: the test
//! function runs in the test process (the **launcher**) and again in every rank
//! process, started as `<test binary> <test path> --exact --include-ignored
//! --nocapture --test-threads=1` so that each copy runs exactly that test. In the
//! launcher, [`Procs::run`] starts the job, waits for it and returns a [`Report`]; in a
//! rank, the same call runs the rank's body and ends the process, so it never returns
//! there.
//!
//! What every job gets, so that no test has to write it again:
//! - **a launcher**: gex-boot's fork launcher (the default; with a host layout and a
//!   per-rank command prefix, like `gex-run --hosts … --host-exec …`) or MPICH's Hydra
//!   `mpiexec` ([`Procs::mpiexec`], with the PMI-1 bootstrap);
//! - **a watchdog** on both sides: a rank still running after [`Procs::timeout`]
//!   records that and exits with code 124 (the launcher then ends the job); the
//!   launcher kills every rank [`LAUNCHER_GRACE`] later if the job has still not ended
//!   (a rank stopped in the kernel, a launcher that does not end the job);
//! - **per-rank results**: each rank reports whether its body passed, returned an
//!   error or panicked (with the message), and its pid; a rank that reports nothing
//!   (killed, exited on its own, never started the test) is [`Outcome::Unreported`];
//! - **per-rank logs**: a rank's standard output and error go to a log file; the
//!   report prints the logs of the ranks that did not pass, so a passing run prints no
//!   failure text of the ranks' own and a failing one shows what went wrong where;
//! - **cleanup checks**: after the job, every rank process must be gone (survivors
//!   are killed and listed in [`Report::survivors`]) and nothing the job created may be
//!   left in `/dev/shm` (an entry whose name contains `gex`, or that libfabric's shm
//!   provider names after a rank's pid, `<pid>:…`; removed and listed in
//!   [`Report::shm_left`]);
//! - **notes**: a rank can leave a small value for the launcher ([`note`], [`mark`]),
//!   e.g. the time at which it failed on purpose, or the message of an expected error.
//!
//! # Example
//! ```no_run
//! use gex_testkit::procs::Procs;
//!
//! #[test]
//! fn three_ranks_barrier() {
//!     // The test's name is the path of the test: libtest names the test thread after it.
//!     Procs::new(3)
//!         .run(|mut boot| {
//!             boot.barrier().map_err(|e| e.to_string())?;
//!             boot.finalize(0).map_err(|e| e.to_string())
//!         })
//!         .assert_success();
//! }
//! ```
//!
//! Code before [`Procs::run`] runs in every rank too (each rank is the same test
//! function): guard launcher-only set-up (network namespaces, temporary files) with
//! [`is_rank`].
//!
//! # Conformance suites
//! [`ProcRunner`] is the [`Runner`] of
//! the [`suite_tests!`](crate::suite_tests) macro for process-based conduits: every
//! case becomes one job, each rank building its client and running the case.
//!
//! # Environment
//! The launcher passes its settings to the ranks in `GEXTEST_PROCS_*` variables (not
//! `GEX_*`: they are the test kit's, not gex's). `GEXTEST_PROCS_LOGS=1` makes the
//! launcher print every rank's log, not only those of failed ranks (run the test with
//! `--nocapture` to see it when it passes).

use crate::conformance::{self, Case, Job, Runner};
use crate::panic_text;
use gex_core::boot::Bootstrap;
use gex_core::layer::LayerSet;
use gex_core::spi::Conduit;
use gex_core::{Client, ClientBuilder};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt;
use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime};

mod rank;
mod report;
mod runner;

pub use rank::{RankResult, failed, mark, note};
pub use report::{Outcome, RankReport, Report};
pub use runner::ProcRunner;

use rank::rank_main;
use report::collect_ranks;

/// Set in every rank: the job's directory (logs, results, notes). Its presence is what
/// makes a process a rank ([`is_rank`]).
const DIR_VAR: &str = "GEXTEST_PROCS_DIR";
/// Set in every rank: the rank watchdog's limit in milliseconds.
const TIMEOUT_VAR: &str = "GEXTEST_PROCS_TIMEOUT_MS";
/// `1`: the launcher prints every rank's log, not only those of failed ranks.
const LOGS_VAR: &str = "GEXTEST_PROCS_LOGS";
/// `1`: a missing `mpiexec` makes [`mpiexec`] skip instead of fail.
pub const ALLOW_NO_MPIEXEC: &str = "GEXTEST_ALLOW_NO_MPIEXEC";

/// Default limit of one job ([`Procs::timeout`]).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(180);
/// How long after [`Procs::timeout`] the launcher kills every rank of a job that has
/// not ended (the ranks' own watchdogs should have ended it by then).
pub const LAUNCHER_GRACE: Duration = Duration::from_secs(15);
/// Lines of a rank's log a [`Report`] prints (the last ones).
const LOG_TAIL_LINES: usize = 150;

/// The host of every rank of a job of `ranks` ranks on two "hosts" (a host list for
/// [`Procs::hosts`]): the first half on `a`, the others on `b`.
pub fn two_hosts(ranks: u32) -> Vec<&'static str> {
    (0..ranks)
        .map(|r| if r < ranks / 2 { "a" } else { "b" })
        .collect()
}

/// The ranks on `rank`'s host in a [`two_hosts`] job of `ranks` ranks.
pub fn two_hosts_neighbours(ranks: u32, rank: u32) -> Vec<u32> {
    let h = two_hosts(ranks);
    (0..ranks)
        .filter(|&r| h[r as usize] == h[rank as usize])
        .collect()
}

/// Tests that each run one rank function on every rank of a job of `N` processes
/// ([`Procs::new`](crate::procs::Procs::new)`(N)`) and assert that the job succeeded
/// ([`Report::assert_success`](crate::procs::Report::assert_success)): each entry `name(args…);` is a test `name` whose
/// ranks run `rank(boot, args…)` (`boot` is the rank's bootstrap). The tests must
/// stand at the top level of their test crate: a test's name is its libtest path.
///
/// ```ignore
/// gex_testkit::procs_tests! {
///     ranks 2, native_rank:
///     /// Over tcp.
///     native_path_tcp("tcp");
///     native_path_shm("shm");
/// }
/// ```
#[macro_export]
macro_rules! procs_tests {
    (
        ranks $n:expr, $rank:path:
        $($(#[$doc:meta])* $name:ident($($arg:expr),* $(,)?);)*
    ) => {
        $(
            $(#[$doc])*
            #[test]
            fn $name() {
                $crate::procs::Procs::new($n)
                    .test(::core::stringify!($name))
                    .run(|boot| $rank(boot, $($arg),*))
                    .assert_success();
            }
        )*
    };
}

/// Whether this process is a rank of a job started by [`Procs::run`].
pub fn is_rank() -> bool {
    std::env::var_os(DIR_VAR).is_some()
}

/// Which program starts the ranks.
#[derive(Clone, Debug)]
enum Launcher {
    /// gex-boot's fork launcher ([`gex_boot::launch::run_job`]).
    Fork,
    /// MPICH's Hydra: `[prefix…] <program> [args…] -n N <test binary> …`.
    Mpiexec {
        program: PathBuf,
        prefix: Vec<OsString>,
        args: Vec<OsString>,
    },
}

/// A multi-process job of the running test binary: what to start, and how.
///
/// Build it with [`Procs::new`] and the setters, then call [`run`](Procs::run) (see
/// the [module docs](self)).
#[derive(Clone, Debug)]
#[must_use = "a job does nothing until `run` is called"]
pub struct Procs {
    ranks: u32,
    test: Option<String>,
    hosts: Vec<String>,
    host_exec: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    timeout: Duration,
    launcher: Launcher,
}

impl Procs {
    /// A job of `ranks` ranks under the fork launcher, every rank on this host, with
    /// the [`DEFAULT_TIMEOUT`].
    pub fn new(ranks: u32) -> Procs {
        Procs {
            ranks,
            test: None,
            hosts: Vec::new(),
            host_exec: Vec::new(),
            env: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
            launcher: Launcher::Fork,
        }
    }

    /// The libtest path of the test the ranks run (`module::name`). Default: the name
    /// of the calling thread, which libtest sets to the running test's path; set it
    /// when calling [`run`](Self::run) from another thread.
    pub fn test(mut self, path: impl Into<String>) -> Procs {
        self.test = Some(path.into());
        self
    }

    /// The host name of each rank, as `gex-run --hosts` takes them (one per rank;
    /// ranks with the same name share a host: their host ids, `GEX_LOCAL_RANK` and
    /// `GEX_LOCAL_SIZE` say so). Fork launcher only. See
    /// [`JobSpec::hosts`](gex_boot::launch::JobSpec::hosts).
    pub fn hosts<I, S>(mut self, hosts: I) -> Procs
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.hosts = hosts.into_iter().map(Into::into).collect();
        self
    }

    /// The command prefix that starts a rank on its host (`{host}` is replaced by its
    /// host name), as `gex-run --host-exec` takes it, e.g. `["ip", "netns", "exec",
    /// "{host}"]`. Fork launcher only; needs [`hosts`](Self::hosts). See
    /// [`JobSpec::host_exec`](gex_boot::launch::JobSpec::host_exec).
    pub fn host_exec<I, S>(mut self, words: I) -> Procs
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.host_exec = words.into_iter().map(Into::into).collect();
        self
    }

    /// Adds an environment variable for every rank.
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Procs {
        self.env.push((key.into(), value.into()));
        self
    }

    /// The conduit the ranks pick at run time (`GEX_CONDUIT`), for tests that choose
    /// it through the facade.
    pub fn conduit(self, name: &str) -> Procs {
        self.env("GEX_CONDUIT", name)
    }

    /// Longest the job may run: a rank still running after it ends itself (code 124),
    /// and the launcher kills every rank [`LAUNCHER_GRACE`] later. Default
    /// [`DEFAULT_TIMEOUT`].
    pub fn timeout(mut self, limit: Duration) -> Procs {
        self.timeout = limit;
        self
    }

    /// Starts the job with MPICH's Hydra instead of the fork launcher:
    /// `<program> -n <ranks> <test binary> <test path> …` (the ranks bootstrap through
    /// PMI-1). [`mpiexec`] finds the program.
    pub fn mpiexec(mut self, program: impl Into<PathBuf>) -> Procs {
        self.launcher = Launcher::Mpiexec {
            program: program.into(),
            prefix: Vec::new(),
            args: Vec::new(),
        };
        self
    }

    /// Arguments given to `mpiexec` before `-n` (e.g. `-hosts`, `-launcher`). Only
    /// after [`mpiexec`](Self::mpiexec).
    pub fn mpiexec_args<I, S>(mut self, args: I) -> Procs
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        if let Launcher::Mpiexec { args: a, .. } = &mut self.launcher {
            *a = args.into_iter().map(Into::into).collect();
        }
        self
    }

    /// A command prefix that starts `mpiexec` itself (e.g. `["ip", "netns", "exec",
    /// "ns1"]`; it must `exec` the program). Only after [`mpiexec`](Self::mpiexec).
    pub fn mpiexec_prefix<I, S>(mut self, words: I) -> Procs
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        if let Launcher::Mpiexec { prefix, .. } = &mut self.launcher {
            *prefix = words.into_iter().map(Into::into).collect();
        }
        self
    }

    /// Runs the job.
    ///
    /// **In the launcher** (the test process): starts the ranks, waits for the job to
    /// end, checks that every rank process is gone and nothing was left in `/dev/shm`,
    /// and returns the [`Report`]. Nothing here panics: the caller asserts (most tests
    /// call [`Report::assert_success`]).
    ///
    /// **In a rank** ([`is_rank`]): sends this process's standard output and error to
    /// its log, arms the watchdog, creates the bootstrap ([`gex_boot::from_env`]), runs
    /// `body` with it and ends the process: code 0 if `body` returned `()` or `Ok`, 1
    /// (after printing the error) if it returned `Err`, 101 if it panicked. `body` may
    /// also end the process itself ([`std::process::exit`]; the rank then reports
    /// nothing; a body that always does has the type `!`, so write it as
    /// `|boot| -> () { … }`). A rank never returns from this call.
    pub fn run<B, O>(&self, body: B) -> Report
    where
        B: FnOnce(Box<dyn Bootstrap>) -> O,
        O: RankResult,
    {
        if is_rank() {
            rank_main(body)
        }
        self.launch()
    }

    fn launch(&self) -> Report {
        let test = self
            .test
            .clone()
            .or_else(|| std::thread::current().name().map(str::to_string))
            .unwrap_or_default();
        let mut report = Report {
            test: test.clone(),
            ranks_expected: self.ranks,
            launcher: match &self.launcher {
                Launcher::Fork => "fork".into(),
                Launcher::Mpiexec { program, .. } => program.display().to_string(),
            },
            code: None,
            error: None,
            timed_out: false,
            took: Duration::ZERO,
            ended: SystemTime::now(),
            ranks: Vec::new(),
            survivors: Vec::new(),
            shm_left: Vec::new(),
            launcher_log: String::new(),
        };
        if test.is_empty() || test == "main" {
            report.error = Some(
                "Procs::run: no test path (call it from a #[test] thread or set Procs::test)"
                    .into(),
            );
            return report;
        }
        let dir = match JobDir::new(&test) {
            Ok(d) => d,
            Err(e) => {
                report.error = Some(format!("cannot make the job directory: {e}"));
                return report;
            }
        };
        let shm_before = shm_names();
        let t0 = Instant::now();
        eprintln!("procs: {test}: {} ranks ({})", self.ranks, report.launcher);
        match &self.launcher {
            Launcher::Fork => self.run_fork(&test, &dir.0, &mut report),
            Launcher::Mpiexec {
                program,
                prefix,
                args,
            } => self.run_mpiexec(&test, &dir.0, program, prefix, args, &mut report),
        }
        report.took = t0.elapsed();
        report.ended = SystemTime::now();
        report.ranks = collect_ranks(&dir.0);
        // Every rank process is gone (the fork launcher reaps its ranks; mpiexec's are
        // not our children).
        let pids: Vec<u32> = report.ranks.iter().map(|r| r.pid).collect();
        let t1 = Instant::now();
        while !pids.iter().all(|&p| is_gone(p)) && t1.elapsed() < Duration::from_secs(3) {
            std::thread::sleep(Duration::from_millis(20));
        }
        for &p in &pids {
            if !is_gone(p) {
                kill(p);
                report.survivors.push(p);
            }
        }
        report.shm_left = shm_leftovers(&shm_before, &pids);
        let all_logs = std::env::var(LOGS_VAR).is_ok_and(|v| v == "1");
        if !report.succeeded() || all_logs {
            // Captured by the test harness: shown when the test fails (or with
            // --nocapture).
            eprintln!("{}", report.display(all_logs));
        } else {
            eprintln!("procs: {test}: passed in {:?}", report.took);
        }
        report
    }

    fn rank_env(&self, dir: &Path) -> Vec<(OsString, OsString)> {
        let mut env = self.env.clone();
        env.push((DIR_VAR.into(), dir.into()));
        env.push((
            TIMEOUT_VAR.into(),
            self.timeout.as_millis().to_string().into(),
        ));
        env
    }

    fn run_fork(&self, test: &str, dir: &Path, report: &mut Report) {
        let exe = match std::env::current_exe() {
            Ok(e) => e,
            Err(e) => {
                report.error = Some(format!("cannot find the test binary: {e}"));
                return;
            }
        };
        let mut spec = gex_boot::launch::JobSpec::new(self.ranks, exe)
            .args(rank_args(test))
            .require_hello(true)
            .stdout_to_stderr(true)
            .hosts(self.hosts.clone())
            .host_exec(self.host_exec.clone());
        for (k, v) in self.rank_env(dir) {
            spec = spec.env(k, v);
        }
        // The ranks are children of this thread (their parent-death signal is tied to
        // it), so the job runs here and the watchdog on its own thread.
        let watchdog = Watchdog::start(dir.to_path_buf(), self.timeout + LAUNCHER_GRACE);
        match gex_boot::launch::run_job(&spec) {
            Ok(code) => report.code = Some(code),
            Err(e) => report.error = Some(format!("launch: {e}")),
        }
        report.timed_out = watchdog.stop();
    }

    fn run_mpiexec(
        &self,
        test: &str,
        dir: &Path,
        program: &Path,
        prefix: &[OsString],
        args: &[OsString],
        report: &mut Report,
    ) {
        if !self.hosts.is_empty() || !self.host_exec.is_empty() {
            report.error = Some(
                "Procs: hosts and host_exec are for the fork launcher; give mpiexec its hosts in mpiexec_args".into(),
            );
            return;
        }
        let exe = match std::env::current_exe() {
            Ok(e) => e,
            Err(e) => {
                report.error = Some(format!("cannot find the test binary: {e}"));
                return;
            }
        };
        let mut words: Vec<OsString> = prefix.to_vec();
        words.push(program.into());
        words.extend(args.iter().cloned());
        words.push("-n".into());
        words.push(self.ranks.to_string().into());
        words.push(exe.into());
        words.extend(rank_args(test));
        let log = dir.join("launcher.log");
        let out = match std::fs::File::create(&log).and_then(|f| Ok((f.try_clone()?, f))) {
            Ok(o) => o,
            Err(e) => {
                report.error = Some(format!("cannot create {}: {e}", log.display()));
                return;
            }
        };
        let mut cmd = std::process::Command::new(&words[0]);
        cmd.args(&words[1..])
            .env_remove(gex_boot::env::BOOT)
            .envs(self.rank_env(dir))
            .stdin(std::process::Stdio::null())
            .stdout(out.0)
            .stderr(out.1);
        eprintln!(
            "+ {}",
            words
                .iter()
                .map(|w| w.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" ")
        );
        let t0 = Instant::now();
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                report.error = Some(format!("cannot start {}: {e}", program.display()));
                return;
            }
        };
        let limit = self.timeout + LAUNCHER_GRACE;
        let status = loop {
            match child.try_wait() {
                Ok(Some(st)) => break Some(st),
                Ok(None) => {}
                Err(e) => {
                    report.error = Some(format!("waiting for mpiexec: {e}"));
                    break None;
                }
            }
            if t0.elapsed() > limit {
                // Let Hydra clean up, then insist, and kill the ranks it left.
                report.timed_out = true;
                signal(child.id(), rustix::process::Signal::INT);
                let t1 = Instant::now();
                while t1.elapsed() < Duration::from_secs(3) {
                    if let Ok(Some(_)) = child.try_wait() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                let _ = child.kill();
                let _ = child.wait();
                for r in collect_ranks(dir) {
                    kill(r.pid);
                }
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        report.code = status.and_then(|s| s.code());
        report.launcher_log = std::fs::read_to_string(&log).unwrap_or_default();
        eprintln!("  mpiexec ended with {status:?} after {:?}", t0.elapsed());
    }
}

/// The arguments that make a copy of the test binary run exactly test `test` (also
/// when it is ignored, so that `cargo test -- --ignored` can try an excluded case).
fn rank_args(test: &str) -> Vec<OsString> {
    [
        test,
        "--exact",
        "--include-ignored",
        "--nocapture",
        "--test-threads=1",
    ]
    .into_iter()
    .map(OsString::from)
    .collect()
}

/// The job directory, removed on drop.
struct JobDir(PathBuf);

impl JobDir {
    fn new(test: &str) -> std::io::Result<JobDir> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let tag: String = test
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .take(60)
            .collect();
        let p = std::env::temp_dir().join(format!(
            "gextest-procs-{}-{}-{tag}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir(&p)?;
        Ok(JobDir(p))
    }
}

impl Drop for JobDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The launcher's watchdog: kills every rank that recorded its pid in the job
/// directory if the job is still running after `limit`.
struct Watchdog {
    stop: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<bool>,
}

impl Watchdog {
    fn start(dir: PathBuf, limit: Duration) -> Watchdog {
        let (stop, rx) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            match rx.recv_timeout(limit) {
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                _ => return false,
            }
            eprintln!("procs: the job is still running after {limit:?}; killing its ranks");
            for r in collect_ranks(&dir) {
                kill(r.pid);
            }
            true
        });
        Watchdog { stop, thread }
    }

    /// Stops the watchdog; returns whether it fired.
    fn stop(self) -> bool {
        let _ = self.stop.send(());
        self.thread.join().unwrap_or(true)
    }
}

/// Whether process `pid` is gone: no such process, or a zombie waiting to be reaped
/// (it runs no more). Also for tests with launchers of their own (the exit scenarios
/// of gex-boot).
pub fn is_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.trim_start().starts_with('Z'))
            .unwrap_or(false),
    }
}

/// Sends `sig` to process `pid`, if there is one (errors are ignored: the process
/// may be gone already). Also for tests with launchers of their own.
pub fn signal(pid: u32, sig: rustix::process::Signal) {
    if let Some(p) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process(p, sig);
    }
}

/// Polls `cond` every 20 ms until it holds or `limit` has passed; whether it held
/// (asked once more at the end). For tests waiting on processes of their own.
pub fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

/// The pids that ranks recorded as files named `pid.<pid>` in `dir` (the scheme of
/// gex-boot's launcher tests).
pub fn recorded_pids(dir: &Path) -> Vec<u32> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.strip_prefix("pid.")?.parse().ok()
        })
        .collect()
}

fn kill(pid: u32) {
    signal(pid, rustix::process::Signal::KILL);
}

/// The names in `/dev/shm` now: take it before a job, give it to [`shm_leftovers`]
/// after.
pub fn shm_names() -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Entries of `/dev/shm` a job left: new ones (not in `before`, from [`shm_names`])
/// that look like gex's, and any named after one of its rank processes `pids`
/// (libfabric's shm provider: `<pid>:<uid>:<index>`). Removes them, so a failure does
/// not spill into the next run. What every [`Procs`] job checks ([`Report::shm_left`]);
/// public for tests with launchers of their own.
pub fn shm_leftovers(before: &[String], pids: &[u32]) -> Vec<String> {
    let prefixes: Vec<String> = pids.iter().map(|p| format!("{p}:")).collect();
    let mut left: Vec<String> = shm_names()
        .into_iter()
        .filter(|n| {
            (n.to_ascii_lowercase().contains("gex") && !before.contains(n))
                || prefixes.iter().any(|p| n.starts_with(p))
        })
        .collect();
    left.sort();
    for n in &left {
        let _ = std::fs::remove_file(Path::new("/dev/shm").join(n));
    }
    left
}

/// MPICH's Hydra launcher (`mpiexec.hydra` or `mpiexec.mpich`, not a plain `mpiexec`,
/// which may be Open MPI's), looked up in `PATH`.
pub fn find_mpiexec() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    ["mpiexec.hydra", "mpiexec.mpich"].iter().find_map(|name| {
        std::env::split_paths(&path)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

/// MPICH's Hydra launcher for test `test`: `Ok(Some(path))` if installed. If it is
/// not, prints a loud line straight to standard error (not captured by the test
/// harness) and returns `Ok(None)` when [`ALLOW_NO_MPIEXEC`]` = 1` (the test should
/// pass without running), else an error.
///
/// # Errors
/// `mpiexec` is missing and skipping was not allowed.
pub fn mpiexec(test: &str) -> Result<Option<PathBuf>, String> {
    if let Some(p) = find_mpiexec() {
        return Ok(Some(p));
    }
    let _ = writeln!(
        std::io::stderr(),
        "\n!!!!!!!!!! {test}: MPICH's mpiexec.hydra / mpiexec.mpich is not in PATH \
         (apt-get install mpich): NOT TESTED !!!!!!!!!!\n"
    );
    if std::env::var(ALLOW_NO_MPIEXEC).is_ok_and(|v| v == "1") {
        Ok(None)
    } else {
        Err(format!(
            "{test} needs MPICH's mpiexec.hydra; install mpich, or set {ALLOW_NO_MPIEXEC}=1 to skip"
        ))
    }
}
