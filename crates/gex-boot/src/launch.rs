//! The local fork launcher: start `N` rank processes of one program on this host,
//! serve their bootstrap collectives, and end the job as one unit.
//!
//! [`run_job`] is what `gex-run` and [`spawn_self`](crate::spawn_self) call.
//!
//! # How a job runs
//!
//! For every rank the launcher creates an anonymous UNIX stream `socketpair`
//! (nothing is created in the file system or in `/dev/shm`). Its own end is
//! close-on-exec; the rank's end is inherited by that rank only and named by
//! `GEX_BOOT_FD`. The rank process:
//!
//! - gets the environment of [`crate::env`](mod@crate::env) (`GEX_BOOT=fork`, `GEX_RANK`, ...) on top
//!   of the launcher's environment and [`JobSpec::env`], and `IPATH_NO_BACKTRACE=1`
//!   unless either sets it (so that a signal ends a rank of a program linked with
//!   Debian's libfabric as a signal: see [`env::IPATH_NO_BACKTRACE`]);
//! - starts with the signal mask the launcher had before it blocked the signals it
//!   forwards (a blocked SIGTERM would survive `exec`);
//! - inherits the launcher's stdin, stdout and stderr;
//! - runs in its own process group, so that ending the job also ends the processes
//!   a rank started itself (a shell's children, for instance). A consequence: a
//!   rank is not in the terminal's foreground process group, so a rank that reads
//!   from a terminal is stopped (SIGTTIN); give the job its input from a file or a
//!   pipe. Ctrl-C reaches the launcher, which forwards it (see
//!   [`JobSpec::forward_signals`]);
//! - has `PR_SET_PDEATHSIG = SIGKILL` set before `exec`, and checks that its parent
//!   is still the launcher, so that if the launcher dies, even by `kill -9`, every
//!   rank process is killed by the kernel. This covers the rank processes
//!   themselves, not processes they started (those do not inherit the setting).
//!
//! The launcher then waits in one `poll` loop on every rank's socket and on a
//! pidfd per rank (no SIGCHLD handler, no threads). The rank processes are
//! children of the calling *thread*: `PR_SET_PDEATHSIG` fires when that thread
//! ends, and `run_job` returns only after every rank has been reaped.
//!
//! Where `pidfd_open` is not available (`ENOSYS`: Linux before 5.3, or valgrind
//! 3.19, which does not know the system call; `EPERM`: a seccomp filter), the
//! launcher asks `waitid(P_PID, WNOHANG)` about each running rank at least every
//! 10 ms instead: the same semantics, a rank's end noticed up to 10 ms later. A
//! rank is the launcher's unreaped child, so its pid cannot be reused before the
//! launcher reaps it.
//!
//! # Several (simulated) hosts
//!
//! By default every rank runs on this host and gets host id 0. With
//! [`JobSpec::hosts`] each rank is given a host *name*; ranks with the same name
//! share a host. The launcher then:
//!
//! - numbers the distinct names in order of first appearance (`a,a,b,b` → host ids
//!   `0,0,1,1`) and sends those ids in WELCOME, so a rank's
//!   [`host_ids`](gex_core::boot::Bootstrap::host_ids) (and the client's
//!   `JobLayout.host`) say which ranks share a host;
//! - sets `GEX_LOCAL_RANK` / `GEX_LOCAL_SIZE` per host (rank among, and number of,
//!   the ranks with the same name);
//! - starts each rank through [`JobSpec::host_exec`], a command prefix in which
//!   every `{host}` is replaced by the rank's host name: with the prefix
//!   `ip netns exec {host}`, rank 2 of `a,a,b,b` runs as
//!   `ip netns exec b prog args…`. The prefix must `exec` the program in the same
//!   process (as `ip netns exec`, `env`, `nsenter`, `chroot` do): the rank keeps
//!   its inherited bootstrap socket, its process group and its parent-death
//!   signal. A prefix that forks and waits (`ssh`, `sudo` with `use_pty`) is not
//!   supported: the socket to the launcher does not cross machines.
//!
//! Without a prefix the names only shape the host ids: that simulates a layout for
//! tests while every process stays on this host. The bootstrap runs over
//! socketpairs, which network namespaces do not affect, so the hosts can be
//! network namespaces of this machine (see `docs/launching.md`).
//!
//! ```
//! use gex_boot::launch::{run_job, JobSpec};
//!
//! // Ranks 0,1 on host "a", ranks 2,3 on host "b"; each rank checks that its prefix
//! // ran (H) and its per-host local rank and size.
//! let spec = JobSpec::new(4, "sh")
//!     .args(["-c", r#"case "$GEX_RANK$H$GEX_LOCAL_RANK$GEX_LOCAL_SIZE" in 0a02|1a12|2b02|3b12) ;; *) exit 9;; esac"#])
//!     .hosts(["a", "a", "b", "b"])
//!     .host_exec(["env", "H={host}"]);
//! assert_eq!(run_job(&spec)?, 0);
//! # Ok::<(), gex_boot::launch::LaunchError>(())
//! ```
//!
//! # Exit semantics
//!
//! | event | effect | job exit code |
//! |---|---|---|
//! | every rank sends FINALIZE, then exits | job ends normally | first non-zero exit code (in the order the launcher saw the exits), else 0 |
//! | a rank that said HELLO exits without FINALIZE (any exit code, a signal, `kill -9`, a Rust panic) | one line on stderr naming the rank, its pid and how it ended; the job ends | the rank's code (signal N → 128 + N; code 0 → 1, since not finalizing is a failure) |
//! | a rank sends EXIT(code) (`gasnet_exit`: any rank's exit ends the job) | the job ends (a `tracing` debug event, no stderr line) | the first non-zero code already recorded, else `code` |
//! | a rank sends ABORT(code, msg) | `gex-run: rank R aborted the job: msg`; the job ends | `code` (1 if 0) |
//! | a process that never says HELLO (not a gex program) exits 0 | nothing; the job continues (unless [`JobSpec::require_hello`]) | — |
//! | such a process exits non-zero or is killed | one line on stderr; the job ends | its code (signal N → 128 + N) |
//! | ranks enter different collectives, or a collective can never complete because a rank that has not entered it finalized or exited | one line on stderr; the job ends | 1 |
//! | the launcher receives SIGINT/SIGTERM/SIGHUP (with [`JobSpec::forward_signals`]) | the signal is forwarded to every rank's process group; the job ends | 128 + signal |
//!
//! *The job ends* means: every rank process group still running receives SIGTERM
//! (except a rank that asked for the exit or abort, which is exiting by itself),
//! and every rank process group receives SIGKILL one second later; then every rank
//! is reaped. Ranks are therefore gone within about one second of the event. When a
//! job ends normally, processes left behind in a rank's process group are killed.
//! Exit codes are passed to `exit(2)`, so only their low 8 bits reach the shell.
//!
//! # Wire protocol
//!
//! Each direction of a rank's socket carries frames:
//!
//! ```text
//! frame   = length:u32 tag:u8 payload      (length = 1 + payload length, never 0)
//! blob    = length:u32 bytes
//! ```
//!
//! All integers are little-endian. A rank may send at most 64 MiB in one frame.
//!
//! | tag | direction | name | payload | meaning |
//! |---|---|---|---|---|
//! | `0x01` | rank → launcher | HELLO | `version:u32 rank:u32 size:u32` | first message of every gex rank; `version` is 1 |
//! | `0x02` | rank → launcher | EXCHANGE | `seq:u64 bytes…` | enter all-gather `seq` with this rank's blob (the rest of the frame) |
//! | `0x03` | rank → launcher | BARRIER | `seq:u64` | enter barrier `seq` |
//! | `0x04` | rank → launcher | BCAST | `seq:u64 root:u32 bytes…` | enter broadcast `seq` from `root`; the bytes matter on the root only |
//! | `0x05` | rank → launcher | FINALIZE | `code:i32` | this rank finished cleanly and will exit with `code` |
//! | `0x06` | rank → launcher | EXIT | `code:i32` | end the whole job with `code` |
//! | `0x07` | rank → launcher | ABORT | `code:i32 msg…` | end the whole job with `code`, printing `msg` (UTF-8) |
//! | `0x81` | launcher → rank | WELCOME | `n:u32 host:u32 × n` | reply to HELLO: one host id per rank (all 0 unless [`JobSpec::hosts`] is set) |
//! | `0x82` | launcher → rank | EXCHANGED | `seq:u64 n:u32 blob × n` | result of all-gather `seq`, indexed by rank |
//! | `0x83` | launcher → rank | BARRIER_DONE | `seq:u64` | barrier `seq` is complete |
//! | `0x84` | launcher → rank | BCAST_DONE | `seq:u64 bytes…` | result of broadcast `seq`: the root's blob |
//!
//! Exchange, barrier and broadcast share one sequence counter per rank, starting at
//! 0. A collective completes when every rank has entered it; the launcher checks
//! that every rank entered the same kind, sequence number and root, and ends the
//! job with a message naming the ranks otherwise. Only HELLO may come first; any
//! malformed frame ends the job.
//!
//! # Example
//!
//! ```
//! use gex_boot::launch::{run_job, JobSpec};
//!
//! let spec = JobSpec::new(2, "sh").args(["-c", "exit 0"]);
//! assert_eq!(run_job(&spec)?, 0);
//! let spec = JobSpec::new(3, "sh").args(["-c", r#"[ "$GEX_RANK" = 1 ] && exit 7; sleep 5"#]);
//! assert_eq!(run_job(&spec)?, 7); // prints "gex-run: rank 1 (pid …) exited with code 7; ending the job"
//! # Ok::<(), gex_boot::launch::LaunchError>(())
//! ```

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use gex_core::boot::BootError;
use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType};
use rustix::process::{Pid, PidfdFlags, Signal, WaitId, WaitIdOptions};
use thiserror::Error;

use crate::child;
use crate::coord::{Coordinator, Ending, Outbox, Status};
use crate::env;
use crate::proto::{self, FrameBuf};
use crate::signals::SignalFd;

/// Time between SIGTERM and SIGKILL when a job ends.
const GRACE: Duration = Duration::from_secs(1);

/// Longest `poll` of the launcher while a running rank has no pidfd (see
/// [How a job runs](self#how-a-job-runs)): how late it may notice that rank's end.
const NO_PIDFD_TICK: Duration = Duration::from_millis(10);

/// What to launch: `ranks` processes of `program args…`.
///
/// ```
/// use gex_boot::launch::JobSpec;
/// let spec = JobSpec::new(4, "./my-app").arg("--size").arg("1M").env("GEX_CONDUIT", "smp");
/// assert_eq!(spec.ranks, 4);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct JobSpec {
    /// Number of rank processes (at least 1).
    pub ranks: u32,
    /// The program; a name without `/` is looked up in `PATH`.
    pub program: PathBuf,
    /// Arguments after the program name.
    pub args: Vec<OsString>,
    /// Extra environment variables for every rank (the launcher's own variables of
    /// [`crate::env`](mod@crate::env) take precedence).
    pub env: Vec<(OsString, OsString)>,
    /// Forward SIGINT/SIGTERM/SIGHUP received by the launcher to the ranks (default
    /// `false`). While the job runs the calling thread blocks these signals and reads
    /// them from a signalfd; `gex-run` turns this on.
    pub forward_signals: bool,
    /// Treat a rank that exits without saying HELLO as failed even with exit code 0
    /// (default `false`; [`spawn_self`](crate::spawn_self) turns it on so a
    /// mistyped test name cannot pass silently).
    pub require_hello: bool,
    /// Send the ranks' standard output to the launcher's standard error (default
    /// `false`). [`spawn_self_test`](crate::spawn_self_test) turns it on, so the rank
    /// copies' own test-harness lines do not mix with the harness output of the test
    /// that launched them.
    pub stdout_to_stderr: bool,
    /// Host name of each rank, one per rank (default empty: every rank on this
    /// host, host id 0). See [several hosts](self#several-simulated-hosts).
    pub hosts: Vec<String>,
    /// Command prefix that starts a rank on its host, one word per element; every
    /// `{host}` in a word is replaced by the rank's host name (default empty: the
    /// program is started directly). Requires [`hosts`](Self::hosts).
    pub host_exec: Vec<OsString>,
    /// End the job when a rank fails (default `true`): a rank that ends without
    /// finalizing, or a process that never said HELLO and exits non-zero. With
    /// `false` the launcher prints the failure and keeps it as the job's exit code, but
    /// leaves the other ranks running until they end by themselves, as `srun` does
    /// without `--kill-on-bad-exit`; EXIT and ABORT requests, and a bootstrap
    /// collective that can no longer complete, still end the job. For testing the
    /// ranks' own detection of a dead peer (the smp conduit's liveness checks).
    pub kill_on_bad_exit: bool,
}

/// The builder setters of [`JobSpec`]'s switches: one per named `bool` field, of the
/// same name.
macro_rules! switches {
    ($($field:ident),+ $(,)?) => {$(
        #[doc = concat!("Sets [`", stringify!($field), "`](Self::", stringify!($field), ").")]
        pub fn $field(mut self, yes: bool) -> Self {
            self.$field = yes;
            self
        }
    )+};
}

impl JobSpec {
    /// A job of `ranks` processes of `program` with no arguments.
    pub fn new(ranks: u32, program: impl Into<PathBuf>) -> Self {
        JobSpec {
            ranks,
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            forward_signals: false,
            require_hello: false,
            stdout_to_stderr: false,
            hosts: Vec::new(),
            host_exec: Vec::new(),
            kill_on_bad_exit: true,
        }
    }
    /// Appends one argument.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }
    /// Appends arguments.
    pub fn args(mut self, args: impl IntoIterator<Item = impl Into<OsString>>) -> Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }
    /// Adds an environment variable for every rank.
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }
    switches!(
        forward_signals,
        require_hello,
        stdout_to_stderr,
        kill_on_bad_exit
    );
    /// Sets [`hosts`](Self::hosts): the host name of each rank.
    pub fn hosts(mut self, hosts: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.hosts = hosts.into_iter().map(Into::into).collect();
        self
    }
    /// Sets [`host_exec`](Self::host_exec): the command prefix, one word per item.
    pub fn host_exec(mut self, words: impl IntoIterator<Item = impl Into<OsString>>) -> Self {
        self.host_exec = words.into_iter().map(Into::into).collect();
        self
    }
}

/// Parses a host list as `gex-run --hosts` takes it: comma-separated host names,
/// each optionally followed by `*COUNT` for `COUNT` consecutive ranks on that host.
///
/// ```
/// use gex_boot::launch::parse_hosts;
/// assert_eq!(parse_hosts("a,a,b").unwrap(), ["a", "a", "b"]);
/// assert_eq!(parse_hosts("ns1*2,ns2*2").unwrap(), ["ns1", "ns1", "ns2", "ns2"]);
/// assert!(parse_hosts("a,,b").is_err());
/// ```
///
/// # Errors
/// [`LaunchError::Hosts`] for an empty name, a name with whitespace or `{`/`}`, or
/// a `COUNT` that is not a positive number.
pub fn parse_hosts(list: &str) -> Result<Vec<String>, LaunchError> {
    let mut hosts = Vec::new();
    for item in list.split(',') {
        let (name, count) = match item.rsplit_once('*') {
            Some((name, count)) => match count.parse::<usize>() {
                Ok(c) if c > 0 => (name, c),
                _ => {
                    return Err(LaunchError::Hosts(format!(
                        "`{item}` in the host list: the count after `*` must be a positive number"
                    )));
                }
            },
            None => (item, 1),
        };
        check_host_name(name)?;
        hosts.extend(std::iter::repeat_n(name.to_string(), count));
    }
    Ok(hosts)
}

fn check_host_name(name: &str) -> Result<(), LaunchError> {
    if name.is_empty() {
        return Err(LaunchError::Hosts(
            "empty host name in the host list".into(),
        ));
    }
    if name
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || matches!(c, '{' | '}' | ',' | '*'))
    {
        return Err(LaunchError::Hosts(format!(
            "host name {name:?} contains whitespace, a control character or one of `{{}},*`"
        )));
    }
    Ok(())
}

/// Splits a `gex-run --host-exec` command prefix into words at whitespace (no
/// quoting: a word cannot contain a space).
///
/// ```
/// use gex_boot::launch::parse_host_exec;
/// assert_eq!(parse_host_exec("ip netns exec {host}"), ["ip", "netns", "exec", "{host}"]);
/// ```
pub fn parse_host_exec(prefix: &str) -> Vec<OsString> {
    prefix.split_whitespace().map(OsString::from).collect()
}

/// Where each rank runs: host id, rank on its host and number of ranks on its host.
#[derive(Debug, PartialEq, Eq)]
struct HostMap {
    ids: Vec<u32>,
    local_rank: Vec<usize>,
    local_size: Vec<usize>,
}

impl HostMap {
    /// Checks `spec`'s hosts and numbers them in order of first appearance.
    fn new(spec: &JobSpec) -> Result<HostMap, LaunchError> {
        let n = spec.ranks as usize;
        if spec.hosts.is_empty() {
            if !spec.host_exec.is_empty() {
                return Err(LaunchError::Hosts(
                    "a host command prefix (host_exec, --host-exec) needs a host list (hosts, --hosts)".into(),
                ));
            }
            return Ok(HostMap {
                ids: vec![0; n],
                local_rank: (0..n).collect(),
                local_size: vec![n; n],
            });
        }
        if spec.hosts.len() != n {
            return Err(LaunchError::Hosts(format!(
                "the host list names {} hosts for {n} ranks (one host per rank)",
                spec.hosts.len()
            )));
        }
        let mut names: Vec<&str> = Vec::new();
        let mut ids = Vec::with_capacity(n);
        let mut local_rank = Vec::with_capacity(n);
        for h in &spec.hosts {
            check_host_name(h)?;
            let id = match names.iter().position(|x| x == h) {
                Some(i) => i,
                None => {
                    names.push(h);
                    names.len() - 1
                }
            };
            local_rank.push(ids.iter().filter(|&&x| x == id).count());
            ids.push(id);
        }
        let local_size = ids
            .iter()
            .map(|&id| ids.iter().filter(|&&x| x == id).count())
            .collect();
        let ids = ids
            .into_iter()
            .map(|i| u32::try_from(i).unwrap_or(u32::MAX))
            .collect();
        Ok(HostMap {
            ids,
            local_rank,
            local_size,
        })
    }
}

/// The command that starts `rank`: `program args…`, behind the host prefix if any.
fn rank_command(spec: &JobSpec, rank: usize) -> Command {
    let Some((first, rest)) = spec.host_exec.split_first() else {
        let mut cmd = Command::new(&spec.program);
        cmd.args(&spec.args);
        return cmd;
    };
    let host = &spec.hosts[rank];
    let subst = |w: &OsString| -> OsString {
        match w.to_str() {
            Some(s) if s.contains("{host}") => s.replace("{host}", host).into(),
            _ => w.clone(),
        }
    };
    let mut cmd = Command::new(subst(first));
    cmd.args(rest.iter().map(subst))
        .arg(&spec.program)
        .args(&spec.args);
    cmd
}

/// Errors that prevent a job from running (a job that runs and fails is not an
/// error: its exit code says so).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum LaunchError {
    /// The job was asked to have zero ranks.
    #[error("a job needs at least one rank")]
    NoRanks,
    /// The program could not be started (`gex-run` exits with 127).
    #[error("cannot execute {}: {source}", program.display())]
    Spawn {
        /// The program as given.
        program: PathBuf,
        /// Why `exec` failed.
        #[source]
        source: io::Error,
    },
    /// The path of the running executable could not be found (for
    /// [`spawn_self`](crate::spawn_self)).
    #[error("cannot find the current executable: {0}")]
    CurrentExe(#[source] io::Error),
    /// An operating-system call of the launcher failed.
    #[error("launcher error while {context}: {source}")]
    Io {
        /// What the launcher was doing.
        context: &'static str,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The host list or the host command prefix is malformed (`gex-run` exits
    /// with 2).
    #[error("{0}")]
    Hosts(String),
    /// This process is a rank and its bootstrap could not be created.
    #[error(transparent)]
    Boot(#[from] BootError),
}

fn io_err(context: &'static str) -> impl FnOnce(Errno) -> LaunchError {
    move |e| LaunchError::Io {
        context,
        source: e.into(),
    }
}

/// One rank process as the launcher sees it.
#[derive(Debug)]
struct Rank {
    pid: Pid,
    /// `None` where `pidfd_open` is not available: the launcher then polls
    /// `waitid` on the pid (see [`NO_PIDFD_TICK`]).
    pidfd: Option<OwnedFd>,
    /// The launcher's end of the socket; `None` after EOF or an error.
    sock: Option<OwnedFd>,
    inbuf: FrameBuf,
    out: Vec<u8>,
    sent: usize,
    /// Known once the process has exited (it stays a zombie until reaped, which
    /// keeps its pid and process group id from being reused).
    status: Option<Status>,
    reaped: bool,
}

impl Rank {
    fn signal_group(&self, sig: Signal) {
        if !self.reaped {
            // Errors: ESRCH if the group is already empty; nothing to do.
            let _ = rustix::process::kill_process_group(self.pid, sig);
        }
    }

    /// Which process `waitid` asks about: the pidfd if there is one, else the pid
    /// (this rank is an unreaped child of the launcher, so the pid is still its).
    fn wait_id(&self) -> WaitId<'_> {
        match &self.pidfd {
            Some(fd) => WaitId::PidFd(fd.as_fd()),
            None => WaitId::Pid(self.pid),
        }
    }

    fn reap(&mut self) {
        if self.reaped {
            return;
        }
        let exited = WaitIdOptions::EXITED;
        while let Err(Errno::INTR) = rustix::process::waitid(self.wait_id(), exited) {}
        self.reaped = true;
    }
}

/// Opens a pidfd of the rank process `pid`; `Ok(None)` where the kernel (or an
/// emulator such as valgrind, or a seccomp filter) does not offer `pidfd_open`, or
/// where `use_pidfds` is false (tests of the fallback).
fn open_pidfd(pid: Pid, use_pidfds: bool) -> Result<Option<OwnedFd>, Errno> {
    if !use_pidfds {
        return Ok(None);
    }
    match rustix::process::pidfd_open(pid, PidfdFlags::empty()) {
        Ok(fd) => Ok(Some(fd)),
        Err(e @ (Errno::NOSYS | Errno::PERM)) => {
            tracing::debug!(error = %e, "no pidfd_open: polling waitid for the rank's exit");
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// The ranks of a job; dropping it kills and reaps any rank not reaped yet, so an
/// early return or a panic in the launcher leaves no process behind.
#[derive(Debug, Default)]
struct Ranks(Vec<Rank>);

impl Drop for Ranks {
    fn drop(&mut self) {
        for r in &mut self.0 {
            r.signal_group(Signal::KILL);
        }
        for r in &mut self.0 {
            r.reap();
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Src {
    Pid(usize),
    Sock(usize),
    Sig,
}

/// A running job.
#[derive(Debug)]
struct Job {
    ranks: Ranks,
    coord: Coordinator,
    /// When to send SIGKILL to every rank's group, once the job is ending.
    kill_at: Option<Instant>,
}

/// Runs a job to completion and returns its exit code (see the
/// [module documentation](self) for how it is computed). Diagnostics about the
/// job go to the launcher's stderr, prefixed with `gex-run:`.
///
/// ```
/// use gex_boot::launch::{run_job, JobSpec};
/// let code = run_job(&JobSpec::new(2, "true"))?;
/// assert_eq!(code, 0);
/// # Ok::<(), gex_boot::launch::LaunchError>(())
/// ```
///
/// # Errors
/// [`LaunchError::NoRanks`] for `ranks == 0`; [`LaunchError::Hosts`] for a host
/// list that does not give one valid name per rank; [`LaunchError::Spawn`] if the
/// program cannot be executed (ranks already started are killed);
/// [`LaunchError::Io`] if a system call of the launcher fails (ranks are killed).
pub fn run_job(spec: &JobSpec) -> Result<i32, LaunchError> {
    run_job_with(spec, true)
}

/// [`run_job`]; with `use_pidfds == false` the launcher behaves as where
/// `pidfd_open` is not available (tests of that fallback).
fn run_job_with(spec: &JobSpec, use_pidfds: bool) -> Result<i32, LaunchError> {
    if spec.ranks == 0 {
        return Err(LaunchError::NoRanks);
    }
    let sigfd = if spec.forward_signals {
        Some(SignalFd::new().map_err(|source| LaunchError::Io {
            context: "blocking SIGINT/SIGTERM/SIGHUP",
            source,
        })?)
    } else {
        None
    };
    let hosts = HostMap::new(spec)?;
    let n = spec.ranks as usize;
    let me = rustix::process::getpid();
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let job_id = format!("{:x}-{nanos:x}", me.as_raw_pid());
    let mut job = Job {
        ranks: Ranks(Vec::with_capacity(n)),
        coord: Coordinator::new(n, spec.require_hello),
        kill_at: None,
    };
    job.coord.set_hosts(hosts.ids.clone());
    job.coord.set_kill_on_bad_exit(spec.kill_on_bad_exit);
    for rank in 0..n {
        let (mine, theirs) = rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )
        .map_err(io_err("creating a socketpair"))?;
        let theirs = Arc::new(theirs);
        let mut cmd = rank_command(spec, rank);
        cmd.envs(spec.env.iter().map(|(k, v)| (k, v)))
            .env(env::BOOT, env::BOOT_FORK)
            .env(env::BOOT_FD, theirs.as_raw_fd().to_string())
            .env(env::RANK, rank.to_string())
            .env(env::SIZE, n.to_string())
            .env(env::JOB_ID, &job_id)
            .env(env::LOCAL_RANK, hosts.local_rank[rank].to_string())
            .env(env::LOCAL_SIZE, hosts.local_size[rank].to_string())
            .process_group(0);
        if std::env::var_os(env::IPATH_NO_BACKTRACE).is_none()
            && !spec.env.iter().any(|(k, _)| k == env::IPATH_NO_BACKTRACE)
        {
            // Signals must end a rank as signals (see the constant's docs).
            cmd.env(env::IPATH_NO_BACKTRACE, "1");
        }
        if spec.stdout_to_stderr {
            let err = std::io::stderr()
                .as_fd()
                .try_clone_to_owned()
                .map_err(|source| LaunchError::Io {
                    context: "duplicating standard error",
                    source,
                })?;
            cmd.stdout(std::process::Stdio::from(err));
        }
        let child = child::spawn_rank(
            &mut cmd,
            &theirs,
            me,
            sigfd.as_ref().map(SignalFd::mask_before),
        )
        .map_err(|source| LaunchError::Spawn {
            program: cmd.get_program().into(),
            source,
        })?;
        // Close the launcher's copies of the rank's end (the hook holds one).
        drop(cmd);
        drop(theirs);
        let pid = Pid::from_child(&child);
        let pidfd = match open_pidfd(pid, use_pidfds) {
            Ok(fd) => fd,
            Err(e) => {
                let _ = rustix::process::kill_process_group(pid, Signal::KILL);
                let mut child = child;
                let _ = child.wait();
                return Err(io_err("opening a pidfd (Linux 5.3 or later is required)")(
                    e,
                ));
            }
        };
        tracing::debug!(rank, pid = pid.as_raw_pid(), "rank started");
        job.coord.set_pid(rank, pid.as_raw_pid().unsigned_abs());
        job.ranks.0.push(Rank {
            pid,
            pidfd,
            sock: Some(mine),
            inbuf: FrameBuf::new(proto::MAX_RANK_FRAME),
            out: Vec::new(),
            sent: 0,
            status: None,
            reaped: false,
        });
    }
    job.run(sigfd.as_ref())?;
    // Processes a rank left in its process group do not outlive the job.
    for r in &job.ranks.0 {
        r.signal_group(Signal::KILL);
    }
    for r in &mut job.ranks.0 {
        r.reap();
    }
    drop(sigfd);
    Ok(job.coord.job_code())
}

impl Job {
    fn run(&mut self, sigfd: Option<&SignalFd>) -> Result<(), LaunchError> {
        let mut ready: Vec<(Src, PollFlags)> = Vec::new();
        while self.ranks.0.iter().any(|r| r.status.is_none()) {
            ready.clear();
            // Ranks without a pidfd: ask waitid directly, and wake up again soon.
            let mut unwatched = false;
            for i in 0..self.ranks.0.len() {
                if self.ranks.0[i].pidfd.is_none() && self.ranks.0[i].status.is_none() {
                    self.check_exit(i);
                    unwatched |= self.ranks.0[i].status.is_none();
                }
            }
            if !self.ranks.0.iter().any(|r| r.status.is_none()) {
                break;
            }
            let until_kill = self
                .kill_at
                .map(|t| t.saturating_duration_since(Instant::now()));
            let timeout = match (until_kill, unwatched) {
                (Some(d), true) => Some(d.min(NO_PIDFD_TICK)),
                (None, true) => Some(NO_PIDFD_TICK),
                (d, false) => d,
            }
            .map(|d| {
                Timespec::try_from(d).unwrap_or(Timespec {
                    tv_sec: 1,
                    tv_nsec: 0,
                })
            });
            {
                let mut fds = Vec::with_capacity(2 * self.ranks.0.len() + 1);
                let mut srcs = Vec::with_capacity(fds.capacity());
                for (i, r) in self.ranks.0.iter().enumerate() {
                    if let Some(s) = &r.sock {
                        let mut flags = PollFlags::IN;
                        if r.sent < r.out.len() {
                            flags |= PollFlags::OUT;
                        }
                        fds.push(PollFd::new(s, flags));
                        srcs.push(Src::Sock(i));
                    }
                    if let (None, Some(pidfd)) = (&r.status, &r.pidfd) {
                        fds.push(PollFd::new(pidfd, PollFlags::IN));
                        srcs.push(Src::Pid(i));
                    }
                }
                if let Some(sf) = sigfd {
                    fds.push(PollFd::new(sf, PollFlags::IN));
                    srcs.push(Src::Sig);
                }
                match rustix::event::poll(&mut fds, timeout.as_ref()) {
                    Ok(_) | Err(Errno::INTR) => {}
                    Err(e) => return Err(io_err("polling rank sockets and pidfds")(e)),
                }
                for (fd, src) in fds.iter().zip(srcs) {
                    let re = fd.revents();
                    if !re.is_empty() {
                        ready.push((src, re));
                    }
                }
            }
            for &(src, re) in &ready {
                match src {
                    Src::Sock(i) => {
                        if re.intersects(PollFlags::OUT) {
                            self.flush(i);
                        }
                        if re.intersects(PollFlags::IN | PollFlags::HUP | PollFlags::ERR) {
                            self.read(i);
                        }
                    }
                    Src::Pid(i) => self.check_exit(i),
                    Src::Sig => {
                        if let Some(sig) = sigfd.and_then(|s| s.read().ok().flatten()) {
                            self.interrupted(sig);
                        }
                    }
                }
            }
            if let Some(t) = self.kill_at
                && Instant::now() >= t
            {
                self.kill_at = None;
                tracing::debug!("grace period over: killing every rank");
                for r in &self.ranks.0 {
                    r.signal_group(Signal::KILL);
                }
            }
        }
        Ok(())
    }

    /// Reads what rank `i` sent and hands every complete frame to the coordinator.
    fn read(&mut self, i: usize) {
        let mut buf = [0u8; 64 * 1024];
        while let Some(sock) = &self.ranks.0[i].sock {
            match rustix::net::recv(sock, &mut buf, RecvFlags::DONTWAIT) {
                Ok((0, _)) => {
                    self.ranks.0[i].sock = None;
                    break;
                }
                Ok((n, _)) => {
                    self.ranks.0[i].inbuf.push(&buf[..n]);
                    self.process_frames(i);
                }
                Err(Errno::INTR) => {}
                Err(Errno::AGAIN) => break,
                Err(e) => {
                    tracing::debug!(rank = i, error = %e, "rank socket error");
                    self.ranks.0[i].sock = None;
                    break;
                }
            }
        }
    }

    fn process_frames(&mut self, i: usize) {
        let mut outbox = Outbox::new();
        loop {
            let ending = match self.ranks.0[i].inbuf.next_frame() {
                Ok(Some(body)) => self.coord.message(i, &body, &mut outbox),
                Ok(None) => break,
                Err(e) => {
                    self.ranks.0[i].sock = None;
                    let ending = self.coord.bad_frame(i, &e);
                    self.end(ending);
                    break;
                }
            };
            self.deliver(&mut outbox);
            self.end(ending);
        }
        self.deliver(&mut outbox);
    }

    fn deliver(&mut self, outbox: &mut Outbox) {
        for (r, frame) in outbox.drain(..) {
            let rank = &mut self.ranks.0[r];
            if rank.sock.is_some() {
                rank.out.extend_from_slice(&frame);
                self.flush(r);
            }
        }
    }

    /// Sends as much of rank `i`'s pending output as the socket takes.
    fn flush(&mut self, i: usize) {
        let r = &mut self.ranks.0[i];
        let Some(sock) = &r.sock else {
            return;
        };
        while r.sent < r.out.len() {
            match rustix::net::send(
                sock,
                &r.out[r.sent..],
                SendFlags::DONTWAIT | SendFlags::NOSIGNAL,
            ) {
                Ok(n) => r.sent += n,
                Err(Errno::INTR) => {}
                Err(Errno::AGAIN) => break,
                Err(e) => {
                    // The rank closed its end; whatever it was waiting for no longer matters.
                    tracing::debug!(rank = i, error = %e, "cannot send to rank");
                    r.sent = r.out.len();
                }
            }
        }
        if r.sent == r.out.len() {
            r.out.clear();
            r.sent = 0;
        }
    }

    /// Records rank `i`'s exit if it has exited (without reaping it).
    fn check_exit(&mut self, i: usize) {
        let opts = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
        let status = match rustix::process::waitid(self.ranks.0[i].wait_id(), opts) {
            Ok(Some(st)) => match (st.exit_status(), st.terminating_signal()) {
                (Some(code), _) => Status::Code(code),
                (None, Some(sig)) => Status::Signal(sig),
                (None, None) => return,
            },
            Ok(None) | Err(Errno::INTR) => return,
            Err(e) => {
                // ECHILD: something else reaped it (SIGCHLD ignored?); its status is lost.
                tracing::warn!(rank = i, error = %e, "cannot read the exit status of a rank");
                self.ranks.0[i].reaped = true;
                Status::Code(0)
            }
        };
        // Everything the rank sent before it died is in the socket: handle it first.
        self.read(i);
        self.ranks.0[i].status = Some(status);
        tracing::debug!(rank = i, ?status, "rank exited");
        let ending = self.coord.exited(i, status);
        for line in self.coord.take_notices() {
            eprintln!("{line}");
        }
        self.end(ending);
    }

    fn interrupted(&mut self, sig: i32) {
        if self.coord.is_ending() {
            // A second signal: do not wait for the grace period.
            for r in &self.ranks.0 {
                r.signal_group(Signal::KILL);
            }
            return;
        }
        let ending = self.coord.interrupted(sig);
        let forward = Signal::from_named_raw(sig).unwrap_or(Signal::TERM);
        self.end_with(ending, forward);
    }

    fn end(&mut self, ending: Option<Ending>) {
        self.end_with(ending, Signal::TERM);
    }

    /// Carries out the decision to end the job: print its line, signal every rank
    /// group (except a rank ending by itself), arm the SIGKILL timer.
    fn end_with(&mut self, ending: Option<Ending>, sig: Signal) {
        let Some(ending) = ending else {
            return;
        };
        if let Some(line) = &ending.message {
            eprintln!("{line}");
        }
        tracing::debug!(code = ending.code, "ending the job");
        self.kill_at = Some(Instant::now() + GRACE);
        for (i, r) in self.ranks.0.iter().enumerate() {
            if ending.spare == Some(i) && r.status.is_none() {
                continue;
            }
            r.signal_group(sig);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without pidfds (`pidfd_open` failing with ENOSYS, as under valgrind 3.19) the
    /// launcher still sees every way a rank ends, promptly, through `waitid` on the
    /// pid. Rank 1 leaves a background `sleep` holding its bootstrap socket, so no
    /// hang-up on the socket tells the launcher that rank 1 is gone: only the `waitid`
    /// tick does (without it, this job would never end).
    #[test]
    fn without_pidfds_rank_exits_are_seen_promptly() {
        // On a thread, so that a launcher that misses an exit fails the test instead
        // of hanging it (its ranks die with the test process). A job that ends lasts
        // at most the grace period (SIGTERM, then SIGKILL after 1 s).
        let run = |spec: JobSpec| {
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || tx.send(run_job_with(&spec, false).unwrap()));
            rx.recv_timeout(Duration::from_secs(10))
        };
        assert_eq!(run(JobSpec::new(2, "true")), Ok(0));
        for (script, code) in [("sleep 20 & exit 7", 7), ("sleep 20 & kill -9 $$", 128 + 9)] {
            let body = format!(r#"if [ "$GEX_RANK" = 1 ]; then {script}; fi; sleep 20"#);
            let spec = JobSpec::new(3, "sh").args(["-c", &body]);
            assert_eq!(
                run(spec),
                Ok(code),
                "{script}: the launcher missed the exit"
            );
        }
    }

    #[test]
    fn host_lists_parse() {
        assert_eq!(parse_hosts("a").unwrap(), ["a"]);
        assert_eq!(parse_hosts("a*3,b").unwrap(), ["a", "a", "a", "b"]);
        assert_eq!(parse_hosts("b,a,b").unwrap(), ["b", "a", "b"]);
        for bad in [
            "", "a,", ",a", "a*0", "a*x", "a*", "*2", "a b", "{host}", "a**2",
        ] {
            let e = parse_hosts(bad).expect_err(bad);
            assert!(matches!(e, LaunchError::Hosts(_)), "{bad}: {e}");
        }
        assert_eq!(
            parse_host_exec("  ip netns  exec {host} "),
            ["ip", "netns", "exec", "{host}"]
        );
        assert!(parse_host_exec("  ").is_empty());
    }

    #[test]
    fn host_ids_follow_first_appearance() {
        let spec = JobSpec::new(5, "x").hosts(["b", "a", "b", "c", "a"]);
        assert_eq!(
            HostMap::new(&spec).unwrap(),
            HostMap {
                ids: vec![0, 1, 0, 2, 1],
                local_rank: vec![0, 0, 1, 0, 1],
                local_size: vec![2, 2, 2, 1, 2],
            }
        );
        let one = HostMap::new(&JobSpec::new(3, "x")).unwrap();
        assert_eq!(one.ids, [0, 0, 0]);
        assert_eq!(one.local_rank, [0, 1, 2]);
        assert_eq!(one.local_size, [3, 3, 3]);
    }

    #[test]
    fn bad_host_specs_are_refused() {
        let e = HostMap::new(&JobSpec::new(3, "x").hosts(["a", "b"])).unwrap_err();
        assert!(e.to_string().contains("2 hosts for 3 ranks"), "{e}");
        let e = HostMap::new(&JobSpec::new(1, "x").host_exec(["env"])).unwrap_err();
        assert!(e.to_string().contains("needs a host list"), "{e}");
        let e = HostMap::new(&JobSpec::new(1, "x").hosts([""])).unwrap_err();
        assert!(e.to_string().contains("empty host name"), "{e}");
        let e = run_job(&JobSpec::new(2, "true").hosts(["a"])).unwrap_err();
        assert!(matches!(e, LaunchError::Hosts(_)), "{e}");
    }

    #[test]
    fn prefix_words_get_the_host_name() {
        let spec = JobSpec::new(2, "prog")
            .arg("x{host}")
            .hosts(["n1", "n2"])
            .host_exec(["ip", "netns", "exec", "{host}", "--opt={host}.{host}"]);
        let cmd = rank_command(&spec, 1);
        assert_eq!(cmd.get_program(), "ip");
        let args: Vec<_> = cmd.get_args().collect();
        // The program's own arguments are not substituted.
        assert_eq!(
            args,
            ["netns", "exec", "n2", "--opt=n2.n2", "prog", "x{host}"]
        );
        let cmd = rank_command(&JobSpec::new(1, "prog").arg("a"), 0);
        assert_eq!(cmd.get_program(), "prog");
        assert_eq!(cmd.get_args().collect::<Vec<_>>(), ["a"]);
    }
}
