//! The launcher side: the report of a job (how each rank ended, its log and notes)
//! and how it is read from the job's directory.

use super::*;

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
pub(super) fn collect_ranks(dir: &Path) -> Vec<RankReport> {
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
