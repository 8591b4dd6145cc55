//! The driver: runs every combination scenario × conduit × launcher as a real job and
//! checks how it ended.

use crate::scenarios::{
    Code, Conduit, Expect, Launcher, RANKS, SCENARIOS, Scenario, Survivors, TRIGGER, Trigger,
    expect, silent_death,
};
use crate::{DIR_VAR, HOSTS_VAR, LAUNCHER_VAR, RANKS_VAR, SCENARIO_VAR};
use gex_testkit::procs;
use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// The bound on the time from the event to the end of the job (the 2 s).
pub(crate) const BOUND: Duration = Duration::from_secs(2);
/// A job still running this long after it started is killed and fails.
const JOB_LIMIT: Duration = Duration::from_secs(30);
/// How long rank processes may outlive their launcher's exit before they count as
/// orphans (they are checked, and the time counts against [`BOUND`], meanwhile).
const ORPHAN_GRACE: Duration = Duration::from_secs(3);

const GEX_RUN: &str = env!("CARGO_BIN_EXE_gex-run");

/// Variables of an enclosing job that must not reach the launchers we start.
const FOREIGN_VARS: &[&str] = &[
    "GEX_BOOT",
    "GEX_BOOT_FD",
    "GEX_RANK",
    "GEX_SIZE",
    "GEX_JOB_ID",
    "GEX_LOCAL_RANK",
    "GEX_LOCAL_SIZE",
    "GEX_CONDUIT",
    "GEX_HYBRID",
    "PMI_FD",
    "PMI_PORT",
    "PMI_RANK",
    "PMI_SIZE",
    "PMI_JOBID",
    "PMIX_NAMESPACE",
    "PMIX_RANK",
];

/// The launcher that does not end the job when a rank dies (this binary with
/// `GEXTEST_EXIT_LAUNCHER=no-kill`): gex-boot's fork launcher with
/// `kill_on_bad_exit(false)`. Returns the job's exit code.
pub(crate) fn no_kill_launcher() -> i32 {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("no-kill launcher: {e}");
            return 1;
        }
    };
    let mut spec = gex_boot::launch::JobSpec::new(RANKS, exe)
        // The ranks are scenario programs, not launchers.
        .env(LAUNCHER_VAR, "rank")
        .require_hello(true)
        .kill_on_bad_exit(false);
    if let Ok(list) = std::env::var(HOSTS_VAR) {
        match gex_boot::launch::parse_hosts(&list) {
            Ok(h) => spec = spec.hosts(h),
            Err(e) => {
                eprintln!("no-kill launcher: {e}");
                return 2;
            }
        }
    }
    match gex_boot::launch::run_job(&spec) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("no-kill launcher: {e}");
            1
        }
    }
}

/// One combination.
struct Row {
    scenario: &'static Scenario,
    conduit: Conduit,
    launcher: Launcher,
    expect: Result<Expect, String>,
}

impl Row {
    fn name(&self) -> String {
        format!(
            "{}/{}/{}",
            self.launcher.name(),
            self.conduit.name(),
            self.scenario.name
        )
    }
}

fn rows() -> Vec<Row> {
    let mut v = Vec::new();
    for launcher in Launcher::ALL {
        for conduit in Conduit::ALL {
            for s in SCENARIOS {
                // ofi-net: what the ofi conduit notices by itself of a silent death,
                // so only under the launcher that leaves that to the ranks.
                if conduit == Conduit::OfiNet
                    && (launcher != Launcher::NoKill || !silent_death(s.trigger))
                {
                    continue;
                }
                v.push(Row {
                    scenario: s,
                    conduit,
                    launcher,
                    expect: expect(s, launcher, conduit),
                });
            }
        }
    }
    v
}

/// Command-line options (libtest's where they make sense).
#[derive(Default)]
struct Opts {
    filters: Vec<String>,
    skips: Vec<String>,
    exact: bool,
    list: bool,
    ignored_only: bool,
    show_output: bool,
    jobs: Option<usize>,
}

fn parse_args() -> Opts {
    let mut o = Opts::default();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--list" => o.list = true,
            "--exact" => o.exact = true,
            "--ignored" => o.ignored_only = true,
            "--nocapture" | "--show-output" => o.show_output = true,
            "--skip" => o.skips.extend(args.next()),
            "--test-threads" => o.jobs = args.next().and_then(|v| v.parse().ok()),
            // Options with a value that do not matter here.
            "--color" | "--format" | "--logfile" | "-Z" => {
                args.next();
            }
            s if s.starts_with("--test-threads=") => {
                o.jobs = s["--test-threads=".len()..].parse().ok();
            }
            s if s.starts_with('-') => {}
            s => o.filters.push(s.to_string()),
        }
    }
    o
}

impl Opts {
    fn selects(&self, name: &str) -> bool {
        let hit = |f: &String| {
            if self.exact {
                name == f
            } else {
                name.contains(f.as_str())
            }
        };
        (self.filters.is_empty() || self.filters.iter().any(hit))
            && !self.skips.iter().any(|s| name.contains(s.as_str()))
    }
}

/// What the rows need from the machine.
struct Env {
    exe: PathBuf,
    mpiexec: Option<PathBuf>,
    bound: Duration,
    show_output: bool,
}

/// How one row went.
struct Outcome {
    name: String,
    launcher: Launcher,
    conduit: Conduit,
    /// `Err`: why it failed.
    result: Result<String, String>,
    /// From the event to the end of the job.
    took: Option<Duration>,
    output: String,
}

pub(crate) fn main() -> ExitCode {
    let opts = parse_args();
    let rows: Vec<Row> = rows()
        .into_iter()
        .filter(|r| opts.selects(&r.name()))
        .collect();
    if opts.list {
        for r in &rows {
            println!("{}: test", r.name());
        }
        return ExitCode::SUCCESS;
    }
    if opts.ignored_only {
        println!("\nrunning 0 tests\n\ntest result: ok. 0 passed; 0 failed\n");
        return ExitCode::SUCCESS;
    }
    let ofi = gex::conduits().contains(&"ofi");
    let wants_mpiexec = rows
        .iter()
        .any(|r| r.launcher == Launcher::Mpiexec && r.expect.is_ok());
    let mpiexec = if wants_mpiexec {
        match procs::mpiexec("exit_scenarios") {
            Ok(p) => p,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        None
    };
    let env = Env {
        exe: std::env::current_exe().expect("the test binary"),
        mpiexec,
        bound: std::env::var("GEXTEST_EXIT_BOUND_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(BOUND, Duration::from_millis),
        show_output: opts.show_output,
    };
    let jobs = opts
        .jobs
        .or_else(|| std::env::var("GEXTEST_EXIT_JOBS").ok()?.parse().ok())
        .unwrap_or(2)
        .max(1);

    let mut run: Vec<Row> = Vec::new();
    let mut excluded: Vec<(String, String)> = Vec::new();
    for r in rows {
        let why = match &r.expect {
            Err(why) => Some(why.clone()),
            Ok(_) if r.conduit != Conduit::Smp && !ofi => Some(
                "built without the ofi conduit (cargo test -p gex-boot --test exit_scenarios --features gex/ofi)"
                    .into(),
            ),
            Ok(_) if r.launcher == Launcher::Mpiexec && env.mpiexec.is_none() => {
                Some("MPICH's mpiexec.hydra is not installed (GEXTEST_ALLOW_NO_MPIEXEC=1)".into())
            }
            Ok(_) => None,
        };
        match why {
            Some(w) => excluded.push((r.name(), w)),
            None => run.push(r),
        }
    }
    println!(
        "\nrunning {} exit scenarios ({} jobs at a time, bound {:?}; {} combinations not run)",
        run.len(),
        jobs,
        env.bound,
        excluded.len()
    );
    let started = Instant::now();
    let next = AtomicUsize::new(0);
    let outcomes: Mutex<Vec<Outcome>> = Mutex::new(Vec::new());
    let env = Arc::new(env);
    std::thread::scope(|sc| {
        for _ in 0..jobs.min(run.len().max(1)) {
            sc.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(row) = run.get(i) else { break };
                    let o = run_row(row, i, &env);
                    print_outcome(&o, env.show_output);
                    outcomes.lock().unwrap().push(o);
                }
            });
        }
    });
    let outcomes = outcomes.into_inner().unwrap();
    let failed: Vec<&Outcome> = outcomes.iter().filter(|o| o.result.is_err()).collect();
    if !failed.is_empty() {
        println!("\nfailures:");
        for o in &failed {
            println!("\n---- {} ----\n{}", o.name, o.result.as_ref().unwrap_err());
            let out = o.output.trim_end();
            if !out.is_empty() {
                println!("--- output of the job\n{}", tail(out, 60));
            }
        }
        println!("\nfailures:");
        for o in &failed {
            println!("    {}", o.name);
        }
    }
    if !excluded.is_empty() {
        let mut by_reason: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (n, w) in &excluded {
            by_reason.entry(w.as_str()).or_default().push(n.as_str());
        }
        println!("\nnot run:");
        for (why, names) in by_reason {
            println!("    {} combinations: {why}", names.len());
            if names.len() <= 6 {
                for n in names {
                    println!("        {n}");
                }
            }
        }
    }
    print_times(&outcomes);
    println!(
        "\ntest result: {}. {} passed; {} failed; {} not run; finished in {:.2}s\n",
        if failed.is_empty() { "ok" } else { "FAILED" },
        outcomes.len() - failed.len(),
        failed.len(),
        excluded.len(),
        started.elapsed().as_secs_f64()
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(101)
    }
}

fn tail(s: &str, lines: usize) -> String {
    let v: Vec<&str> = s.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

fn print_outcome(o: &Outcome, show: bool) {
    let took = o.took.map_or(String::new(), |t| {
        format!(", ended {:.3} s after the event", t.as_secs_f64())
    });
    match &o.result {
        Ok(what) => println!("test {} ... ok ({what}{took})", o.name),
        Err(_) => println!("test {} ... FAILED{took}", o.name),
    }
    if show && !o.output.trim().is_empty() {
        println!("{}", o.output.trim_end());
    }
}

/// The median and largest times of `rows` (those that have one), and how many, under
/// `name`; nothing when none has a time.
fn print_stats<'a>(name: &str, rows: impl Iterator<Item = &'a Outcome>) {
    let mut v: Vec<Duration> = rows.filter_map(|o| o.took).collect();
    if v.is_empty() {
        return;
    }
    v.sort();
    println!(
        "    {:<8} {:.3} s / {:.3} s ({} rows)",
        name,
        v[v.len() / 2].as_secs_f64(),
        v[v.len() - 1].as_secs_f64(),
        v.len()
    );
}

fn print_times(outcomes: &[Outcome]) {
    println!("\ntime from the event to the end of the job (median / max over the rows):");
    for l in Launcher::ALL {
        print_stats(l.name(), outcomes.iter().filter(|o| o.launcher == l));
    }
    for c in Conduit::ALL {
        print_stats(c.name(), outcomes.iter().filter(|o| o.conduit == c));
    }
    print_stats("all", outcomes.iter());
}

/// A rank process as it reported itself.
#[derive(Debug, Clone, Copy)]
struct RankProc {
    rank: u32,
    pid: u32,
    ppid: u32,
}

fn read_ranks(dir: &Path) -> Vec<RankProc> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_suffix(".rank").and_then(|p| p.parse().ok()) else {
            continue;
        };
        let text = std::fs::read_to_string(e.path()).unwrap_or_default();
        let mut it = text.split_whitespace().map(|w| w.parse::<u32>().ok());
        if let (Some(Some(rank)), Some(Some(ppid))) = (it.next(), it.next()) {
            v.push(RankProc { rank, pid, ppid });
        }
    }
    v.sort_by_key(|r| r.rank);
    v
}

fn read_marks(dir: &Path) -> Vec<SystemTime> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if !e.file_name().to_string_lossy().starts_with("mark.") {
            continue;
        }
        if let Some(ns) = std::fs::read_to_string(e.path())
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
        {
            v.push(SystemTime::UNIX_EPOCH + Duration::from_nanos(ns));
        }
    }
    v.sort();
    v
}

fn signal_group(pid: u32, sig: rustix::process::Signal) {
    if let Some(p) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process_group(p, sig);
    }
}

/// The job directory, removed on drop.
struct JobDir(PathBuf);

impl Drop for JobDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn command(row: &Row, env: &Env) -> Command {
    let n = RANKS.to_string();
    let ofi = row.conduit != Conduit::Smp;
    let mut cmd = match row.launcher {
        Launcher::GexRun => {
            let mut c = Command::new(GEX_RUN);
            c.args(["-n", &n]);
            if ofi {
                // Ranks 0 and 1 share host a (shared memory), rank 2 is alone on b:
                // a hybrid job, whose traffic to rank 2 goes over tcp;ofi_rxm.
                c.args(["--hosts", "a*2,b"]);
            }
            c.arg("--").arg(&env.exe);
            c
        }
        Launcher::Mpiexec => {
            let mut c = Command::new(env.mpiexec.as_ref().expect("mpiexec"));
            c.args(["-n", &n]).arg(&env.exe);
            c
        }
        Launcher::SelfLaunch => {
            let mut c = Command::new(&env.exe);
            // The launching process links libfabric in an ofi build: without this,
            // libinfinipath's handlers turn SIGTERM/SIGINT into exit(1) (see
            // gex_boot::env::IPATH_NO_BACKTRACE; the fork launcher sets it for ranks).
            c.env(RANKS_VAR, &n).env("IPATH_NO_BACKTRACE", "1");
            c
        }
        Launcher::NoKill => {
            let mut c = Command::new(&env.exe);
            c.env(LAUNCHER_VAR, "no-kill");
            c
        }
    };
    for v in FOREIGN_VARS {
        cmd.env_remove(v);
    }
    cmd.env(SCENARIO_VAR, row.scenario.name)
        // A panic's backtrace is not what is timed here.
        .env("RUST_BACKTRACE", "0")
        .env("GEX_CONDUIT", if ofi { "ofi" } else { "smp" });
    if ofi {
        cmd.env("GEX_OFI_PROVIDER", "tcp")
            .env("GEX_OFI_DOMAIN", "lo");
        match row.launcher {
            Launcher::GexRun => {}
            // One host: every peer over tcp;ofi_rxm.
            Launcher::Mpiexec | Launcher::SelfLaunch => {
                cmd.env("GEX_HYBRID", "0");
            }
            // One host, every peer through the hybrid conduit's near part (smp): the
            // liveness checks of a hybrid job; or (ofi-net) every peer over tcp.
            Launcher::NoKill => {
                let hybrid = if row.conduit == Conduit::OfiNet {
                    "0"
                } else {
                    "1"
                };
                cmd.env("GEX_HYBRID", hybrid);
            }
        }
    }
    cmd
}

fn run_row(row: &Row, index: usize, env: &Env) -> Outcome {
    let name = row.name();
    let mut out = Outcome {
        name: name.clone(),
        launcher: row.launcher,
        conduit: row.conduit,
        result: Err(String::new()),
        took: None,
        output: String::new(),
    };
    let expect = row
        .expect
        .as_ref()
        .expect("only rows with an expectation run");
    let dir =
        JobDir(std::env::temp_dir().join(format!("gextest-exit-{}-{index}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    if let Err(e) = std::fs::create_dir(&dir.0) {
        out.result = Err(format!("cannot make {}: {e}", dir.0.display()));
        return out;
    }
    let log = dir.0.join("job.log");
    let files = File::create(&log).and_then(|f| Ok((f.try_clone()?, f)));
    let (o1, o2) = match files {
        Ok(f) => f,
        Err(e) => {
            out.result = Err(format!("cannot make {}: {e}", log.display()));
            return out;
        }
    };
    let shm_before = procs::shm_names();
    let mut cmd = command(row, env);
    cmd.env(DIR_VAR, &dir.0)
        .stdin(Stdio::null())
        .stdout(o1)
        .stderr(o2)
        .process_group(0);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            out.result = Err(format!("cannot start {cmd:?}: {e}"));
            return out;
        }
    };
    let launcher_pid = child.id();
    let t0 = Instant::now();
    let mut signalled: Option<SystemTime> = None;
    let mut problems: Vec<String> = Vec::new();
    if let Trigger::LauncherSignal(sig) = row.scenario.trigger {
        let all_ready = || (0..RANKS).all(|r| dir.0.join(format!("ready.{r}")).exists());
        while !all_ready() && t0.elapsed() < Duration::from_secs(20) {
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        if all_ready() {
            std::thread::sleep(Duration::from_millis(150));
            signalled = Some(SystemTime::now());
            procs::signal(launcher_pid, sig);
        } else {
            problems.push("the ranks never got ready for the launcher's signal".into());
        }
    }
    let status: Option<ExitStatus> = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) => {}
            Err(e) => {
                problems.push(format!("waiting for the launcher: {e}"));
                break None;
            }
        }
        if t0.elapsed() > JOB_LIMIT {
            problems.push(format!(
                "the job was still running after {JOB_LIMIT:?}: killed"
            ));
            signal_group(launcher_pid, rustix::process::Signal::KILL);
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let exited = SystemTime::now();
    // Every rank process, and the process that started it (mpiexec's proxy), must go.
    let ranks = read_ranks(&dir.0);
    let me = std::process::id();
    let mut watch: Vec<u32> = ranks.iter().map(|r| r.pid).collect();
    for r in &ranks {
        if r.ppid != launcher_pid && r.ppid != me && r.ppid > 1 && !watch.contains(&r.ppid) {
            watch.push(r.ppid);
        }
    }
    let t1 = Instant::now();
    while !watch.iter().all(|&p| procs::is_gone(p)) && t1.elapsed() < ORPHAN_GRACE {
        std::thread::sleep(Duration::from_millis(2));
    }
    let gone = SystemTime::now();
    let orphans: Vec<u32> = watch
        .iter()
        .copied()
        .filter(|&p| !procs::is_gone(p))
        .collect();
    for &p in &orphans {
        procs::signal(p, rustix::process::Signal::KILL);
    }
    if !orphans.is_empty() {
        problems.push(format!(
            "processes left running {ORPHAN_GRACE:?} after the launcher exited (killed): {orphans:?}"
        ));
    }
    let shm_left = procs::shm_leftovers(&shm_before, &watch);
    if !shm_left.is_empty() {
        problems.push(format!("left in /dev/shm (removed): {shm_left:?}"));
    }
    out.output = std::fs::read_to_string(&log).unwrap_or_default();
    if ranks.len() != RANKS as usize {
        problems.push(format!(
            "{} rank processes reported themselves, want {RANKS}",
            ranks.len()
        ));
    }

    // The event, and how long the job took to end after it.
    let marks = read_marks(&dir.0);
    let event = match row.scenario.trigger {
        Trigger::LauncherSignal(_) => signalled,
        // The event is the last rank's leaving.
        Trigger::AllReturn => marks.last().copied(),
        _ => marks.first().copied(),
    };
    let end = exited.max(gone);
    match event {
        Some(ev) => {
            let took = end.duration_since(ev).unwrap_or_default();
            out.took = Some(took);
            let bound = expect.bound.unwrap_or(env.bound);
            if took > bound {
                problems.push(format!(
                    "the job ended {took:?} after the event (bound {bound:?}; launcher exit {:?} after it)",
                    exited.duration_since(ev).unwrap_or_default()
                ));
            }
        }
        None => problems.push("no event: the scenario never set itself off".into()),
    }

    // The exit code.
    let got = status.map(describe_status).unwrap_or_else(|| "none".into());
    if let Some(st) = status {
        let ok = match &expect.code {
            Code::Is(c) => st.code() == Some(*c),
            Code::OneOf(cs) => st.code().is_some_and(|c| cs.contains(&c)),
            Code::NonZero => st.code().is_some_and(|c| c != 0),
            Code::KilledBy(s) => st.signal() == Some(*s),
            Code::Any => true,
        };
        if !ok {
            problems.push(format!("ended with {got}, want {:?}", expect.code));
        }
    }
    // What the launcher and the ranks said.
    let trigger_pid = ranks
        .iter()
        .find(|r| r.rank == TRIGGER)
        .map_or(0, |r| r.pid);
    for said in &expect.says {
        let said = said.replace("{pid}", &trigger_pid.to_string());
        if !out.output.contains(&said) {
            problems.push(format!("the job's output lacks {said:?}"));
        }
    }
    let dead = format!("rank {TRIGGER} (pid {trigger_pid})");
    for r in (0..RANKS).filter(|&r| r != TRIGGER) {
        // `gex smp: rank R: neighbour rank 2 (pid N) has ended ...` (or `neighbours
        // rank 1 (pid M) and rank 2 (pid N) have ended` when a survivor died first);
        // `gex ofi(tcp;ofi_rxm) rank R EP 0: rank 2 EP 0 is unreachable ...`.
        let (head, names) = match expect.survivors {
            Survivors::Quiet => continue,
            Survivors::NameItSmp => (format!("gex smp: rank {r}: neighbour"), dead.clone()),
            Survivors::NameItOfi => (
                format!("gex ofi(tcp;ofi_rxm) rank {r} EP 0: "),
                format!("rank {TRIGGER} EP 0 is unreachable"),
            ),
        };
        if !out
            .output
            .lines()
            .any(|l| l.starts_with(&head) && l.contains(&names))
        {
            problems.push(format!(
                "rank {r} did not notice the end of {dead} by itself (no line \"{head}... {names} ...\")"
            ));
        }
    }
    out.result = if problems.is_empty() {
        Ok(got)
    } else {
        Err(problems.join("\n"))
    };
    out
}

fn describe_status(st: ExitStatus) -> String {
    match (st.code(), st.signal()) {
        (Some(c), _) => format!("code {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        _ => format!("{st:?}"),
    }
}
