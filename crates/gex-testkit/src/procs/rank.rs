//! The rank side: what a rank body returns, the notes and marks it leaves for the
//! launcher, and how a rank ends.

use super::*;

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

pub(super) fn rank_main<B, O>(body: B) -> !
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
