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

// ---------------------------------------------------------------------------------
// Rank side

/// What a rank body returns: `()` (a rank that did not panic passed) or a `Result`
/// whose error is printed and fails the rank.
pub trait RankResult {
    /// `Ok` if the rank passed, else why not.
    ///
    /// # Errors
    /// The rank's failure, as text.
    fn into_result(self) -> Result<(), String>;
}

impl RankResult for () {
    fn into_result(self) -> Result<(), String> {
        Ok(())
    }
}

impl<E: fmt::Display> RankResult for Result<(), E> {
    fn into_result(self) -> Result<(), String> {
        self.map_err(|e| e.to_string())
    }
}

/// This rank's files in the job directory: `<pid>.<what>`.
fn rank_file(what: &str) -> Option<PathBuf> {
    let dir = std::env::var_os(DIR_VAR)?;
    Some(Path::new(&dir).join(format!("{}.{what}", std::process::id())))
}

/// Writes `value` to this rank's file `what`, whole (a temporary file renamed).
fn write_rank_file(what: &str, value: &str) {
    if let Some(p) = rank_file(what) {
        let tmp = p.with_extension(format!("{what}.tmp"));
        if std::fs::write(&tmp, value).is_ok() {
            let _ = std::fs::rename(&tmp, &p);
        }
    }
}

/// In a rank: leaves `value` for the launcher under `key` ([`RankReport::notes`],
/// [`Report::notes`]). `key` is made of ASCII letters, digits, `-` and `_`. Does
/// nothing outside a rank of [`Procs::run`].
pub fn note(key: &str, value: &str) {
    assert!(
        !key.is_empty()
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
        "procs::note: bad key {key:?}"
    );
    write_rank_file(&format!("note.{key}"), value);
}

/// In a rank that is about to end the job itself (e.g. with
/// [`Client::abort`](gex_core::Client::abort), which ends the process): prints `msg`
/// and records it as this rank's failure ([`Outcome::Failed`]), so the report shows
/// it. Does nothing else outside a rank of [`Procs::run`].
pub fn failed(msg: &str) {
    eprintln!("procs: rank failed: {msg}");
    write_rank_file("result", &format!("failed\n{msg}"));
}

/// In a rank: notes the current wall-clock time under `key`; the launcher reads how
/// long before the end of the job that was with [`Report::since_mark`] (e.g. how
/// promptly a job ended after a rank failed on purpose).
pub fn mark(key: &str) {
    note(key, &wall_clock_ns().to_string());
}

fn wall_clock_ns() -> u128 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

fn flush_stdio() {
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
}

/// Records the rank's outcome and ends the process with `code`.
fn finish(outcome: &str, msg: &str, code: i32) -> ! {
    write_rank_file("result", &format!("{outcome}\n{msg}"));
    flush_stdio();
    std::process::exit(code)
}

fn rank_main<B, O>(body: B) -> !
where
    B: FnOnce(Box<dyn Bootstrap>) -> O,
    O: RankResult,
{
    // The log first, so everything this rank prints (also the test harness's own
    // lines) is kept for the launcher; the pid file is the log.
    if let Some(p) = rank_file("log") {
        match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&p)
        {
            Ok(f) => {
                flush_stdio();
                let _ = rustix::stdio::dup2_stdout(&f);
                let _ = rustix::stdio::dup2_stderr(&f);
            }
            Err(e) => eprintln!("procs: cannot open the rank log {}: {e}", p.display()),
        }
    }
    let limit = std::env::var(TIMEOUT_VAR)
        .ok()
        .and_then(|v| v.parse().ok())
        .map(Duration::from_millis)
        .unwrap_or(DEFAULT_TIMEOUT);
    let test = std::thread::current()
        .name()
        .unwrap_or("(unnamed)")
        .to_string();
    std::thread::spawn(move || {
        std::thread::sleep(limit);
        eprintln!("procs: {test} still running after {limit:?}; ending this rank");
        finish("timed out", &format!("still running after {limit:?}"), 124);
    });
    let boot = match gex_boot::from_env() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("procs: bootstrap: {e}");
            finish("failed", &format!("bootstrap: {e}"), 1);
        }
    };
    write_rank_file("rank", &boot.rank().to_string());
    match catch_unwind(AssertUnwindSafe(|| body(boot).into_result())) {
        Ok(Ok(())) => finish("passed", "", 0),
        Ok(Err(e)) => {
            eprintln!("procs: rank failed: {e}");
            finish("failed", &e, 1)
        }
        Err(p) => finish("panicked", &panic_text(&*p), 101),
    }
}

// ---------------------------------------------------------------------------------
// Launcher side: the report

/// How one rank ended, as it reported it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// The body returned `()` or `Ok`.
    Passed,
    /// The body (or the bootstrap) returned this error.
    Failed(String),
    /// The body panicked with this message.
    Panicked(String),
    /// The rank's watchdog ended it.
    TimedOut,
    /// The rank reported nothing: it was killed (by a signal, or by the launcher
    /// ending the job), ended itself with [`std::process::exit`], or never reached
    /// the body.
    Unreported,
}

/// One rank of a finished job.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RankReport {
    /// Its rank, once it had bootstrapped.
    pub rank: Option<u32>,
    /// Its process id.
    pub pid: u32,
    /// How it ended.
    pub outcome: Outcome,
    /// Everything it printed (standard output and error).
    pub log: String,
    /// Its [`note`]s, by key.
    pub notes: BTreeMap<String, String>,
}

/// The result of [`Procs::run`] in the launcher.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Report {
    /// The test path the ranks ran.
    pub test: String,
    /// Ranks the job was started with.
    pub ranks_expected: u32,
    /// `fork`, or the `mpiexec` program.
    pub launcher: String,
    /// The job's exit code (`None`: the job could not be started, or mpiexec was
    /// killed by a signal or by the watchdog).
    pub code: Option<i32>,
    /// Why the job could not be started or waited for.
    pub error: Option<String>,
    /// Whether the launcher's watchdog ended the job.
    pub timed_out: bool,
    /// How long the job took.
    pub took: Duration,
    /// When the job ended (wall clock).
    pub ended: SystemTime,
    /// Every rank process that started the test, by rank (those that never knew their
    /// rank last).
    pub ranks: Vec<RankReport>,
    /// Rank processes still running after the job (killed by the launcher).
    pub survivors: Vec<u32>,
    /// Entries the job left in `/dev/shm` (removed by the launcher).
    pub shm_left: Vec<String>,
    /// What `mpiexec` printed (empty under the fork launcher, whose messages go to
    /// the test's standard error).
    pub launcher_log: String,
}

impl Report {
    /// The job's exit code, if it has one.
    pub fn code(&self) -> Option<i32> {
        self.code
    }

    /// Whether the job left nothing behind: no rank process and nothing in
    /// `/dev/shm`.
    pub fn clean(&self) -> bool {
        self.survivors.is_empty() && self.shm_left.is_empty()
    }

    /// Whether the job succeeded: exit code 0, ranks `0..ranks` each reported
    /// [`Outcome::Passed`], and it left nothing behind.
    pub fn succeeded(&self) -> bool {
        self.code == Some(0)
            && self.error.is_none()
            && !self.timed_out
            && self.clean()
            && self.ranks.len() == self.ranks_expected as usize
            && self
                .ranks
                .iter()
                .enumerate()
                .all(|(i, r)| r.rank == Some(i as u32) && r.outcome == Outcome::Passed)
    }

    /// `Ok` if the job [succeeded](Self::succeeded), else the report as text (with
    /// the logs of the ranks that did not pass).
    ///
    /// # Errors
    /// The report, if the job did not succeed.
    pub fn result(&self) -> Result<(), String> {
        if self.succeeded() {
            Ok(())
        } else {
            Err(self.display(false).to_string())
        }
    }

    /// Panics with the report unless the job [succeeded](Self::succeeded).
    ///
    /// # Panics
    /// If the job did not succeed.
    #[track_caller]
    pub fn assert_success(&self) {
        if let Err(e) = self.result() {
            panic!("{e}");
        }
    }

    /// Panics with the report if the job left a rank process or something in
    /// `/dev/shm` behind (for jobs that are meant to fail).
    ///
    /// # Panics
    /// If the job was not [clean](Self::clean), or could not be started.
    #[track_caller]
    pub fn assert_clean(&self) {
        if !self.clean() || self.error.is_some() {
            panic!("{}", self.display(false));
        }
    }

    /// The rank with rank number `rank`, if it bootstrapped.
    pub fn rank(&self, rank: u32) -> Option<&RankReport> {
        self.ranks.iter().find(|r| r.rank == Some(rank))
    }

    /// The values every rank left under `key`, in rank order.
    pub fn notes(&self, key: &str) -> Vec<&str> {
        self.ranks
            .iter()
            .filter_map(|r| r.notes.get(key).map(String::as_str))
            .collect()
    }

    /// How long before the end of the job the first [`mark`] under `key` was made.
    pub fn since_mark(&self, key: &str) -> Option<Duration> {
        let at: u128 = self.notes(key).first()?.trim().parse().ok()?;
        let ended = self
            .ended
            .duration_since(SystemTime::UNIX_EPOCH)
            .ok()?
            .as_nanos();
        Some(Duration::from_nanos(ended.saturating_sub(at) as u64))
    }

    /// The report as text: a summary line per rank, then the logs of the ranks that
    /// did not pass (or every log if `all_logs`; only the last lines of each).
    pub fn display(&self, all_logs: bool) -> impl fmt::Display + '_ {
        ReportText(self, all_logs)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        ReportText(self, false).fmt(f)
    }
}

struct ReportText<'a>(&'a Report, bool);

impl fmt::Display for ReportText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (r, all_logs) = (self.0, self.1);
        let code = match r.code {
            Some(c) => format!("exit code {c}"),
            None => "no exit code".into(),
        };
        writeln!(
            f,
            "job {}: {} ranks ({}), {code} after {:?}{}",
            r.test,
            r.ranks_expected,
            r.launcher,
            r.took,
            if r.timed_out {
                ", ENDED BY THE WATCHDOG"
            } else {
                ""
            }
        )?;
        if let Some(e) = &r.error {
            writeln!(f, "  error: {e}")?;
        }
        if r.ranks.len() != r.ranks_expected as usize {
            writeln!(
                f,
                "  {} rank processes started the test, want {} (a wrong test path, or ranks ended before they started it)",
                r.ranks.len(),
                r.ranks_expected
            )?;
        }
        for k in &r.ranks {
            let rank = k.rank.map_or("?".to_string(), |n| n.to_string());
            let what = match &k.outcome {
                Outcome::Passed => "passed".to_string(),
                Outcome::Failed(m) => format!("FAILED: {m}"),
                Outcome::Panicked(m) => format!("PANICKED: {m}"),
                Outcome::TimedOut => "TIMED OUT".to_string(),
                Outcome::Unreported => "no result (killed or exited by itself)".to_string(),
            };
            writeln!(f, "  rank {rank} (pid {}): {what}", k.pid)?;
        }
        if !r.survivors.is_empty() {
            writeln!(
                f,
                "  rank processes left running (killed): {:?}",
                r.survivors
            )?;
        }
        if !r.shm_left.is_empty() {
            writeln!(f, "  left in /dev/shm (removed): {:?}", r.shm_left)?;
        }
        let failed: Vec<&RankReport> = r
            .ranks
            .iter()
            .filter(|k| all_logs || k.outcome != Outcome::Passed)
            .collect();
        // If every rank passed and the job still failed, every log may help.
        let shown = if failed.is_empty() && !all_logs && !r.ranks.is_empty() {
            r.ranks.iter().collect()
        } else {
            failed
        };
        for k in shown.into_iter().filter(|k| !k.log.trim().is_empty()) {
            let rank = k.rank.map_or("?".to_string(), |n| n.to_string());
            let lines: Vec<&str> = k.log.lines().collect();
            let skip = lines.len().saturating_sub(LOG_TAIL_LINES);
            writeln!(
                f,
                "--- log of rank {rank} (pid {}){}",
                k.pid,
                if skip > 0 {
                    format!(", last {LOG_TAIL_LINES} of {} lines", lines.len())
                } else {
                    String::new()
                }
            )?;
            for l in &lines[skip..] {
                writeln!(f, "{l}")?;
            }
        }
        if !r.launcher_log.is_empty() {
            writeln!(f, "--- launcher output\n{}", r.launcher_log.trim_end())?;
        }
        Ok(())
    }
}

/// Every rank that started the test (it left a log named after its pid), sorted by
/// rank.
fn collect_ranks(dir: &Path) -> Vec<RankReport> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = entries
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(".log")?.parse().ok()
        })
        .collect();
    pids.sort_unstable();
    let read = |pid: u32, what: &str| std::fs::read_to_string(dir.join(format!("{pid}.{what}")));
    let mut ranks: Vec<RankReport> = pids
        .into_iter()
        .map(|pid| {
            let outcome = match read(pid, "result") {
                Err(_) => Outcome::Unreported,
                Ok(s) => {
                    let (what, msg) = s.split_once('\n').unwrap_or((&s, ""));
                    match what {
                        "passed" => Outcome::Passed,
                        "panicked" => Outcome::Panicked(msg.to_string()),
                        "timed out" => Outcome::TimedOut,
                        _ => Outcome::Failed(msg.to_string()),
                    }
                }
            };
            let mut notes = BTreeMap::new();
            let prefix = format!("{pid}.note.");
            if let Ok(d) = std::fs::read_dir(dir) {
                for e in d.flatten() {
                    let name = e.file_name().to_string_lossy().into_owned();
                    if let Some(key) = name.strip_prefix(&prefix) {
                        if key.ends_with(".tmp") {
                            continue;
                        }
                        if let Ok(v) = std::fs::read_to_string(e.path()) {
                            notes.insert(key.to_string(), v);
                        }
                    }
                }
            }
            RankReport {
                rank: read(pid, "rank").ok().and_then(|s| s.trim().parse().ok()),
                pid,
                outcome,
                log: read(pid, "log").unwrap_or_default(),
                notes,
            }
        })
        .collect();
    ranks.sort_by_key(|r| (r.rank.is_none(), r.rank, r.pid));
    ranks
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

// ---------------------------------------------------------------------------------
// The conformance runner

type BuilderFn<L> = Box<dyn Fn() -> ClientBuilder<L>>;
type ProcsFn = Box<dyn Fn(Procs, &Job<'_>) -> Procs>;
type CheckFn<C> = Box<dyn Fn(&Client<C>, &Job<'_>) -> Result<(), String>>;
type AfterFn<C> = fn(&C) -> Result<(), String>;

/// The conformance [`Runner`] for process-based conduits: each case is one job of
/// [`Procs`] (by default the fork launcher, `job.ranks` ranks on this host), in which
/// every rank builds its client from the [`builder`](Self::builder) with
/// `job.endpoints` endpoints, runs the optional [`check`](Self::check), then the case
/// ([`conformance::run_on_rank`]), aborts the job on the first failure (so that no
/// peer waits for it) and finalizes.
///
/// The clients carry the layers of the builder: the AM suite needs the conformance
/// probe ([`conformance::builder`], the default), the RMA suite the RMA layer
/// ([`rma::client_builder`](crate::rma::client_builder)).
///
/// ```ignore
/// // conduits/smp/tests/conformance.rs
/// use gex_testkit::procs::ProcRunner;
///
/// gex_testkit::suite_tests! {
///     suite: core,
///     conduit: gex_conduit_smp::Smp,
///     runner: ProcRunner::new().builder(|| gex_testkit::conformance::builder().segment_size(1 << 20)),
///     ranks: 3,
///     endpoints: 2,
/// }
/// ```
pub struct ProcRunner<C: Conduit, L: LayerSet = ((), conformance::Probe)> {
    builder: BuilderFn<L>,
    procs: ProcsFn,
    check: Option<CheckFn<C>>,
    after: Option<AfterFn<C>>,
}

impl<C: Conduit, L: LayerSet> fmt::Debug for ProcRunner<C, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcRunner")
            .field("conduit", &C::NAME)
            .field("check", &self.check.is_some())
            .field("after_finalize", &self.after.is_some())
            .finish_non_exhaustive()
    }
}

impl<C: Conduit> Default for ProcRunner<C> {
    fn default() -> Self {
        ProcRunner::new()
    }
}

impl<C: Conduit> ProcRunner<C> {
    /// Clients from [`conformance::builder`] (the AM suite's probe layer), jobs of the
    /// fork launcher on this host.
    pub fn new() -> Self {
        ProcRunner {
            builder: Box::new(conformance::builder),
            procs: Box::new(|p, _| p),
            check: None,
            after: None,
        }
    }
}

impl<C: Conduit, L: LayerSet> ProcRunner<C, L> {
    /// How each rank's client is built (layers, segment size, settings, wait
    /// policy); the runner adds the job's endpoint count.
    pub fn builder<L2: LayerSet>(
        self,
        f: impl Fn() -> ClientBuilder<L2> + 'static,
    ) -> ProcRunner<C, L2> {
        ProcRunner {
            builder: Box::new(f),
            procs: self.procs,
            check: self.check,
            after: self.after,
        }
    }

    /// Shapes each job: `f` gets the [`Procs`] of `job.ranks` ranks running the
    /// case's test and returns the one to run (host layout, environment, timeout,
    /// launcher).
    pub fn procs(mut self, f: impl Fn(Procs, &Job<'_>) -> Procs + 'static) -> Self {
        self.procs = Box::new(f);
        self
    }

    /// A check every rank runs on its fresh client before the case (e.g. which peers
    /// it reaches through shared memory); a failure fails the job like the case's.
    pub fn check(
        mut self,
        f: impl Fn(&Client<C>, &Job<'_>) -> Result<(), String> + 'static,
    ) -> Self {
        self.check = Some(Box::new(f));
        self
    }

    /// A check every rank runs on its conduit after the client is finalized (e.g. that
    /// every memory registration was closed).
    pub fn after_finalize(mut self, f: fn(&C) -> Result<(), String>) -> Self {
        self.after = Some(f);
        self
    }

    fn rank(&self, boot: Box<dyn Bootstrap>, job: &Job<'_>, case: &Case<C>) -> Result<(), String> {
        let client = (self.builder)()
            .endpoints(job.endpoints)
            .init::<C>(boot)
            .map_err(|e| e.to_string())?;
        let conduit = client.conduit().clone();
        let r = match &self.check {
            Some(check) => check(&client, job),
            None => Ok(()),
        }
        .and_then(|()| conformance::run_on_rank(&client, case));
        if let Err(e) = r {
            // Record the failure (abort ends this process), then end the whole job
            // promptly rather than leaving peers waiting.
            failed(&e);
            client.abort(1, &e);
        }
        client.finalize().map_err(|e| e.to_string())?;
        match self.after {
            Some(after) => after(&conduit),
            None => Ok(()),
        }
    }
}

impl<C: Conduit, L: LayerSet> Runner<C> for ProcRunner<C, L> {
    fn run(&self, job: &Job<'_>, case: &Case<C>) -> Result<(), String> {
        let procs = (self.procs)(Procs::new(job.ranks).test(job.test_path), job);
        procs.run(|boot| self.rank(boot, job, case)).result()
    }
}
