//! `gex-fuzz`: runs the fuzz targets of gex's decoders (see the crate docs and
//! `docs/testing.md`).
//!
//! ```text
//! gex-fuzz list                         the targets, with the decoder each covers
//! gex-fuzz run [OPTIONS] [TARGET...]    fuzz (every target if none is named)
//!     --secs S     time per target (default 10)
//!     --execs N    stop each target after N executions
//!     --seed S     seed (default: from the clock; printed)
//!     --jobs J     targets fuzzed at once (default: available CPUs)
//!     --hang S     an execution longer than S seconds is a hang (default 10)
//!     --out DIR    where failing inputs go (default target/gex-fuzz)
//! gex-fuzz replay TARGET FILE...        run saved inputs again
//! ```
//!
//! `run` prints one line per target (executions, executions per second, corpus,
//! outcome classes) and exits with 1 if a property failed, after printing the
//! minimised input and the file it was written to; 3 on a hang.

use gex_fuzz::{Options, Report, Target};
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::Duration;

fn usage() -> ExitCode {
    eprintln!(
        "usage: gex-fuzz list | run [--secs S] [--execs N] [--seed S] [--jobs J] [--hang S] [--out DIR] [TARGET...] | replay TARGET FILE..."
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("list") => {
            for t in gex_fuzz::all() {
                println!(
                    "{:<15} {}\n{:<15} checks: {}",
                    t.name, t.decoder, "", t.checks
                );
            }
            ExitCode::SUCCESS
        }
        Some("run") => run(&args[1..]),
        Some("replay") if args.len() >= 3 => replay(&args[1], &args[2..]),
        _ => usage(),
    }
}

fn replay(name: &str, files: &[String]) -> ExitCode {
    let Some(t) = gex_fuzz::find(name) else {
        eprintln!("gex-fuzz: no target {name:?} (gex-fuzz list)");
        return ExitCode::from(2);
    };
    let mut bad = 0;
    for f in files {
        let input = match std::fs::read(f) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("gex-fuzz: {f}: {e}");
                return ExitCode::from(2);
            }
        };
        match gex_fuzz::replay(&t, &input) {
            Ok(_) => println!("{f}: ok"),
            Err(m) => {
                println!("{f}: FAILED: {m}");
                bad += 1;
            }
        }
    }
    if bad == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn run(args: &[String]) -> ExitCode {
    let mut opts = Options::default();
    let mut seed = None;
    let mut jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut names = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = |what: &str| -> Option<f64> {
            let v = it.next().and_then(|v| v.parse::<f64>().ok());
            if v.is_none() {
                eprintln!("gex-fuzz: {a} needs a number ({what})");
            }
            v
        };
        match a.as_str() {
            "--secs" => match val("seconds") {
                Some(s) if s >= 0.0 => opts.time = Duration::from_secs_f64(s),
                _ => return usage(),
            },
            "--execs" => match val("executions") {
                Some(n) => opts.max_execs = Some(n as u64),
                None => return usage(),
            },
            "--seed" => match val("seed") {
                Some(n) => seed = Some(n as u64),
                None => return usage(),
            },
            "--jobs" => match val("jobs") {
                Some(n) if n >= 1.0 => jobs = n as usize,
                _ => return usage(),
            },
            "--hang" => match val("seconds") {
                Some(s) if s > 0.0 => opts.hang = Duration::from_secs_f64(s),
                _ => return usage(),
            },
            "--out" => match it.next() {
                Some(d) => opts.out = d.into(),
                None => return usage(),
            },
            n if !n.starts_with('-') => names.push(n.to_string()),
            _ => return usage(),
        }
    }
    opts.seed = seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let targets: Vec<Target> = if names.is_empty() {
        gex_fuzz::all()
    } else {
        let mut v = Vec::new();
        for n in &names {
            match gex_fuzz::find(n) {
                Some(t) => v.push(t),
                None => {
                    eprintln!("gex-fuzz: no target {n:?} (gex-fuzz list)");
                    return ExitCode::from(2);
                }
            }
        }
        v
    };
    println!(
        "gex-fuzz: {} target(s), {:?} each{}, {jobs} at a time, seed {} (rerun: --seed {})",
        targets.len(),
        opts.time,
        opts.max_execs
            .map_or(String::new(), |n| format!(" or {n} executions")),
        opts.seed,
        opts.seed
    );
    println!(
        "{:<15} {:>10} {:>10} {:>7} {:>8}  result",
        "target", "execs", "execs/s", "corpus", "outcomes"
    );
    let queue = Mutex::new(targets.into_iter());
    let reports: Mutex<Vec<Report>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| {
                loop {
                    let next = queue.lock().map(|mut q| q.next()).unwrap_or(None);
                    let Some(t) = next else { break };
                    let r = gex_fuzz::fuzz(&t, &opts);
                    print_line(&r);
                    if let Ok(mut v) = reports.lock() {
                        v.push(r);
                    }
                }
            });
        }
    });
    let reports = reports.into_inner().unwrap_or_default();
    let failed: Vec<&Report> = reports.iter().filter(|r| r.failure.is_some()).collect();
    let execs: u64 = reports.iter().map(|r| r.execs).sum();
    if failed.is_empty() {
        println!(
            "gex-fuzz: {} target(s) passed, {execs} executions in all",
            reports.len()
        );
        return ExitCode::SUCCESS;
    }
    for r in &failed {
        let f = r.failure.as_ref().expect("failed");
        println!(
            "\ngex-fuzz: {}: FAILED: {}\n    input {}\n    saved as {}\n    replay: cargo run -p gex-fuzz -- replay {} {}",
            r.target,
            f.message,
            gex_fuzz::show(&f.input),
            f.path
                .as_ref()
                .map_or("(not saved)".into(), |p| p.display().to_string()),
            r.target,
            f.path
                .as_ref()
                .map_or("<file>".into(), |p| p.display().to_string()),
        );
    }
    println!(
        "{} passed, {} failed",
        reports.len() - failed.len(),
        failed.len()
    );
    ExitCode::from(1)
}

fn print_line(r: &Report) {
    let secs = r.elapsed.as_secs_f64().max(1e-9);
    println!(
        "{:<15} {:>10} {:>10.0} {:>7} {:>8}  {}",
        r.target,
        r.execs,
        r.execs as f64 / secs,
        r.corpus,
        r.outcomes,
        if r.failure.is_some() { "FAILED" } else { "ok" }
    );
}
