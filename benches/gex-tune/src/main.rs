//! `gex-tune`: the offline autotuner of gex-coll.
//!
//! ```text
//! gex-tune [-n N] [--conduit NAME] tune [-o FILE] [--state FILE] [--fresh] [--quick]
//!                                       [--op OP]… [--sizes LIST]
//! gex-tune plots [--out DIR] [--ranks P]
//! gex-tune [-n N] [--conduit NAME] overlap [-o FILE] [--len BYTES]
//! ```
//!
//! `tune` launches itself on N ranks (default 4) like gex-perf, calibrates the LogGP
//! parameters (chain and flat broadcasts of 1 B and 64 KiB, a local copy), then times
//! every candidate algorithm of every (operation, size) cell on the world team, shows
//! a progress bar on stderr, keeps its progress in a state file after every cell (a
//! killed or interrupted run resumes where it stopped; `--fresh` starts over) and
//! finally writes the profile (`GEX_COLL_PROFILE=FILE` loads it) and a summary table.
//!
//! `plots` runs the discrete-event LogGP simulation of gex-coll's schedules on 1024
//! ranks with seed 003's Table 1 platforms and writes the SVG plots of docs/coll.md.
//!
//! `overlap` measures gex-overlap's strip-model parameters for the conduit (rank 0 to
//! rank 1) and stores them in the overlap profile (`GEX_OVERLAP_PROFILE=FILE` loads
//! it; see `overlap.rs`).

use clap::{Parser, Subcommand};
use gex::config::Config;
use gex::core::{Client, Endpoint};
use gex::spi::Conduit;
use gex::{Blocking, Job};
use gex_coll::{Broadcast, CollError, CollExt, LogGP, OpKind, Opts};
use gex_coll::{Profile, ProfileCell as Cell};
use gex_tune::measure::{Budget, Placement, median, query, time_cell, time_interleaved};
use std::io::Write as _;
use std::process::ExitCode;
use std::time::Instant;

mod overlap;
mod plots;

/// Offline autotuner of gex-coll, and simulation plots.
#[derive(Debug, Parser)]
#[command(name = "gex-tune", version)]
struct Cli {
    /// Number of ranks to launch (ignored when started by a launcher).
    #[arg(
        short = 'n',
        long = "ranks",
        value_name = "N",
        default_value_t = 4,
        global = true
    )]
    ranks: u32,
    /// Conduit to use (default: GEX_CONDUIT, else smp).
    #[arg(long, value_name = "NAME", global = true)]
    conduit: Option<String>,
    /// What to do.
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Calibrate, time every candidate per cell, write a profile.
    Tune(TuneArgs),
    /// Simulate 1024+ ranks with seed 003's platforms and write SVG plots.
    Plots(plots::PlotArgs),
    /// Measure gex-overlap's strip-model parameters for the conduit and store them in
    /// the overlap profile (GEX_OVERLAP_PROFILE).
    Overlap(overlap::OverlapArgs),
}

/// Options of `tune`.
#[derive(Debug, Clone, clap::Args)]
struct TuneArgs {
    /// The profile to write.
    #[arg(
        short = 'o',
        long = "out",
        value_name = "FILE",
        default_value = "gex-coll-profile.toml"
    )]
    out: String,
    /// The state file of an interrupted run (default: FILE.state).
    #[arg(long, value_name = "FILE")]
    state: Option<String>,
    /// Ignore an existing state file and start over.
    #[arg(long)]
    fresh: bool,
    /// Short timings (4 ms × 3 batches per candidate instead of 12 ms × 5).
    #[arg(long)]
    quick: bool,
    /// Only this operation (repeatable); default: all eleven.
    #[arg(long = "op", value_name = "OP", value_parser = parse_op)]
    ops: Vec<OpKind>,
    /// Block sizes in bytes, comma separated (K/M suffixes); default
    /// 8,64,512,4K,64K (the sizes gex-perf coll measures) and 256K.
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = parse_size)]
    sizes: Vec<usize>,
    /// Where the timed calls' buffers live: `segment` (the default: as PGAS programs
    /// keep shared data) or `private` (heap memory, as MPI benchmarks use).
    #[arg(long, value_name = "WHERE", default_value = "segment", value_parser = Placement::parse)]
    buffers: Placement,
    /// Stop (as if interrupted) after this many cells of this run (tests resuming).
    #[arg(long, value_name = "K", hide = true)]
    stop_after: Option<usize>,
}

fn parse_op(s: &str) -> Result<OpKind, String> {
    OpKind::ALL
        .into_iter()
        .find(|o| o.name() == s)
        .ok_or_else(|| format!("`{s}` is not an operation"))
}

fn parse_size(s: &str) -> Result<usize, String> {
    gex::config::parse_size(s).ok_or_else(|| format!("`{s}` is not a size (e.g. 8, 4K, 1M)"))
}

fn complain(msg: &str) {
    let _ = std::io::stderr()
        .lock()
        .write_all(format!("gex-tune: {msg}\n").as_bytes());
}

/// Exit code of a run stopped by `--stop-after`.
const STOPPED: i32 = 3;

struct TuneJob {
    args: TuneArgs,
}

impl Job for TuneJob {
    type Output = i32;
    fn run<C: Conduit>(self, client: Client<C>) -> i32 {
        match tune(&self.args, &client) {
            Ok(code) => {
                if let Err(e) = client.finalize() {
                    complain(&format!("finalisation failed: {e}"));
                    return 1;
                }
                code
            }
            Err(e) => client.abort(1, &format!("gex-tune: rank {}: {e}", client.rank())),
        }
    }
}

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Calibrates LogGP on the world team (rank 0's figures are the result): a message
/// `L + 2o` from a chain broadcast of 1 B ((P − 1) messages in sequence), the gap from
/// a flat broadcast of 1 B (the root injects P − 1 messages), the per-byte time from a
/// chain broadcast of 64 KiB, the copy cost from a local 1 MiB copy.
#[allow(unsafe_code)] // time_cell over the segment: see the SAFETY notes
fn calibrate<C: Conduit>(
    c: &mut Endpoint<C>,
    budget: Budget,
    at: Placement,
) -> Result<LogGP, CollError> {
    let p = f64::from(c.world().size());
    // Copy cost per byte (each rank measures; rank 0's value is used).
    let (a, mut b) = (vec![1u8; 1 << 20], vec![0u8; 1 << 20]);
    b.copy_from_slice(&a);
    let t0 = Instant::now();
    for _ in 0..16 {
        b.copy_from_slice(std::hint::black_box(&a));
        std::hint::black_box(&mut b);
    }
    let copy = t0.elapsed().as_secs_f64() * 1e6 / (16.0 * f64::from(1u32 << 20));
    if p < 2.0 {
        return Ok(LogGP {
            copy,
            ..LogGP::default()
        });
    }
    let chain = Opts::default().with_algorithm("chain");
    let flat = Opts::default().with_algorithm("flat");
    // Nothing else touches this rank's segment while gex-tune times (no RMA into it,
    // no scratch region there): the condition of `time_cell` over the segment.
    let mut time = |bytes: usize, opts: &Opts<'_>| -> Result<f64, CollError> {
        // SAFETY: see above.
        Ok(median(&unsafe {
            time_cell(c, OpKind::Broadcast, bytes, opts, budget, at)?
        }))
    };
    let msg = time(1, &chain)? / (p - 1.0);
    let big = time(65536, &chain)? / (p - 1.0);
    let per_byte = ((big - msg) / 65535.0).max(1e-7);
    let big_g = (per_byte - copy).max(per_byte * 0.1);
    let g = if p >= 3.0 {
        ((time(1, &flat)? - msg) / (p - 2.0)).max(0.01)
    } else {
        msg / 4.0
    };
    let o = g.min(msg / 3.0);
    Ok(LogGP {
        l: (msg - 2.0 * o).max(0.01),
        o,
        g,
        big_g,
        copy,
    })
}

/// Writes `text` to `path` atomically (a temporary file renamed over it).
fn write_atomic(path: &str, text: &str) -> std::io::Result<()> {
    let tmp = format!("{path}.tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

/// The tuning state: the one of an interrupted run at `state_path` (unless `--fresh`),
/// refused if it was for another job size; otherwise a new one naming this machine.
fn load_state<C: Conduit>(args: &TuneArgs, client: &Client<C>, state_path: &str) -> Res<Profile> {
    let p = client.size();
    // Every rank reads the state (rank 0 rewrites it only after a cell every rank
    // took part in, so all ranks see the same file).
    let prof = match std::fs::metadata(state_path) {
        Ok(_) if !args.fresh => {
            let s = Profile::load(state_path)?;
            let ranks = s
                .machine
                .iter()
                .find(|m| m.0 == "ranks")
                .map(|m| m.1.clone());
            if ranks.as_deref() != Some(&p.to_string()) {
                return Err(format!(
                    "state file {state_path} is for {} ranks, this run has {p} (use --fresh)",
                    ranks.unwrap_or_else(|| "?".into())
                )
                .into());
            }
            s
        }
        _ => Profile {
            machine: vec![
                ("conduit".into(), client.conduit_name().to_string()),
                ("ranks".into(), p.to_string()),
                ("wait_policy".into(), format!("{:?}", client.wait_policy())),
                ("buffers".into(), args.buffers.name().to_string()),
                (
                    "created_unix".into(),
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_secs())
                        .unwrap_or(0)
                        .to_string(),
                ),
                (
                    "tool".into(),
                    format!("gex-tune {}", env!("CARGO_PKG_VERSION")),
                ),
            ],
            loggp: None,
            cells: Vec::new(),
        },
    };
    Ok(prof)
}

/// The cells still to time and each one's candidates, in a fixed order on every rank
/// (the operations and sizes asked, less the cells `prof` already has).
fn cells_to_time<C: Conduit>(
    args: &TuneArgs,
    c: &mut Endpoint<C>,
    prof: &Profile,
) -> Res<Vec<(OpKind, usize, Vec<String>)>> {
    let p = c.world().size();
    let ops: Vec<OpKind> = if args.ops.is_empty() {
        OpKind::ALL.to_vec()
    } else {
        args.ops.clone()
    };
    let sizes: Vec<usize> = if args.sizes.is_empty() {
        vec![8, 64, 512, 4096, 65536, 256 << 10]
    } else {
        args.sizes.clone()
    };
    // The cells to time and their candidates, in a fixed order on every rank.
    let mut todo: Vec<(OpKind, usize, Vec<String>)> = Vec::new();
    for &op in &ops {
        let op_sizes: &[usize] = if op == OpKind::Barrier { &[0] } else { &sizes };
        for &bytes in op_sizes {
            let done = prof
                .cells
                .iter()
                .any(|x| x.op == op && x.team == p && x.bytes == bytes);
            if done {
                continue;
            }
            let q = query(op, p, bytes, c.shared_memory(&c.world()));
            let cands: Vec<String> = c.tuner(|t| {
                t.algorithms()
                    .iter()
                    .filter(|a| a.supports(&q))
                    .map(|a| a.name().to_string())
                    .collect()
            })?;
            todo.push((op, bytes, cands));
        }
    }
    Ok(todo)
}

#[allow(unsafe_code)] // time_interleaved over the segment: see the SAFETY note
fn tune<C: Conduit>(args: &TuneArgs, client: &Client<C>) -> Res<i32> {
    let me = client.rank();
    let p = client.size();
    // The plain catalogue: no profile, no overrides, no online trials (the client's
    // configuration has no GEX_COLL_* variable, see `main`; every candidate is forced
    // anyway).
    let mut c = client.endpoint(0)?;
    let budget = if args.quick {
        Budget::QUICK
    } else {
        Budget::TUNE
    };
    let state_path = args
        .state
        .clone()
        .unwrap_or_else(|| format!("{}.state", args.out));
    let mut prof = load_state(args, client, &state_path)?;
    let resumed = prof.cells.len();
    let t_start = Instant::now();
    if prof.loggp.is_none() {
        let m = calibrate(&mut c, budget, args.buffers)?;
        // Rank 0's figures, on every rank: the tuner's choices (of the barriers and
        // allreduces inside the timing loop too) must be the same everywhere.
        let mut v = [m.l, m.o, m.g, m.big_g, m.copy];
        let w = c.world();
        c.collective(&w, Broadcast::in_place(0, &mut v), Blocking)?;
        let [l, o, g, big_g, copy] = v;
        prof.loggp = Some(LogGP {
            l,
            o,
            g,
            big_g,
            copy,
        });
        if me == 0 {
            write_atomic(&state_path, &prof.to_toml())?;
        }
    }
    let model = prof.loggp.expect("set above");
    c.tuner(|t| t.set_model(model))?;
    let todo = cells_to_time(args, &mut c, &prof)?;
    let total: usize = todo.iter().map(|t| t.2.len()).sum();
    if me == 0 && resumed > 0 {
        complain(&format!(
            "resuming {state_path}: {resumed} cells done, {} to go",
            todo.len()
        ));
    }
    let mut progress = Progress::new(me == 0, total);
    for (n, (op, bytes, cands)) in todo.iter().enumerate() {
        if args.stop_after == Some(n) {
            progress.finish();
            if me == 0 {
                complain(&format!(
                    "stopped after {n} cells; run again to resume from {state_path}"
                ));
            }
            return Ok(STOPPED);
        }
        // Every candidate of the cell, batches interleaved (load changes hit all).
        progress.step(
            &format!("{} {bytes} B ({} candidates)", op.name(), cands.len()),
            cands.len(),
        );
        let opts: Vec<Opts<'_>> = cands
            .iter()
            .map(|n| Opts::default().with_algorithm(n))
            .collect();
        // SAFETY: as in `calibrate`.
        let t = unsafe { time_interleaved(&mut c, *op, *bytes, &opts, budget, args.buffers)? };
        let times: Vec<(String, f64)> = cands
            .iter()
            .zip(&t)
            .map(|(n, v)| (n.clone(), median(v)))
            .collect();
        if me == 0 {
            if let Some(cell) = Cell::from_times(*op, p, *bytes, times) {
                prof.cells.push(cell);
            }
            write_atomic(&state_path, &prof.to_toml())?;
        }
    }
    progress.finish();
    if me == 0 {
        write_atomic(&args.out, &prof.to_toml())?;
        let _ = std::fs::remove_file(&state_path);
        summary(&mut c, &prof, p, t_start.elapsed().as_secs_f64(), &args.out);
    }
    Ok(0)
}

/// Prints the chosen algorithm per cell against the model's choice.
fn summary<C: Conduit>(c: &mut Endpoint<C>, prof: &Profile, p: u32, secs: f64, out: &str) {
    let m = prof.loggp.unwrap_or_default();
    println!(
        "gex-tune: {} cells on {p} ranks in {secs:.1} s -> {out}\nLogGP: L {:.3} us, o {:.3} us, g {:.3} us, G {:.6} us/B ({:.2} GB/s), copy {:.6} us/B",
        prof.cells.len(),
        m.l,
        m.o,
        m.g,
        m.big_g,
        1e-3 / m.big_g.max(1e-12),
        m.copy
    );
    println!(
        "{:<15} {:>8}  {:<16} {:>10}  {:<16} {:>10}  {:<16}",
        "op", "bytes", "measured best", "us", "runner-up", "us", "model's choice"
    );
    let mut agree = 0;
    let shm = c.shared_memory(&c.world());
    for cell in prof.cells.iter().filter(|x| x.team == p) {
        let mut t = cell.times.clone();
        t.sort_by(|a, b| a.1.total_cmp(&b.1));
        let (r, rt) = t.get(1).cloned().unwrap_or_default();
        let model = c
            .explain(&query(cell.op, p, cell.bytes, shm))
            .map(|x| {
                x.candidates
                    .first()
                    .map(|y| y.0.clone())
                    .unwrap_or_default()
            })
            .unwrap_or_default();
        if model == cell.choice {
            agree += 1;
        }
        println!(
            "{:<15} {:>8}  {:<16} {:>10.2}  {:<16} {:>10.2}  {:<16}",
            cell.op.name(),
            cell.bytes,
            cell.choice,
            cell.time_of(&cell.choice).unwrap_or(0.0),
            r,
            rt,
            model
        );
    }
    println!(
        "the calibrated model picks the measured best in {agree} of {} cells",
        prof.cells.len()
    );
}

/// A progress bar on stderr (rank 0 only).
struct Progress {
    on: bool,
    total: usize,
    done: usize,
    t0: Instant,
}

impl Progress {
    fn new(on: bool, total: usize) -> Progress {
        Progress {
            on,
            total,
            done: 0,
            t0: Instant::now(),
        }
    }

    /// Shows `what` as under way, then counts `n` more steps done.
    fn step(&mut self, what: &str, n: usize) {
        if self.on {
            let frac = self.done as f64 / self.total.max(1) as f64;
            let width = 30;
            let filled = (frac * width as f64) as usize;
            let eta = if self.done > 0 {
                let per = self.t0.elapsed().as_secs_f64() / self.done as f64;
                format!("eta {:.0}s", per * (self.total - self.done) as f64)
            } else {
                "eta ?".into()
            };
            let line = format!(
                "\r[{}{}] {}/{} {eta:<9} {what:<40.40}",
                "#".repeat(filled),
                ".".repeat(width - filled),
                self.done,
                self.total
            );
            let _ = std::io::stderr().lock().write_all(line.as_bytes());
        }
        self.done += n;
    }

    fn finish(&mut self) {
        if self.on && self.total > 0 {
            let _ = std::io::stderr().lock().write_all(
                format!(
                    "\r[{}] {}/{} in {:.1}s{:<40}\n",
                    "#".repeat(30),
                    self.done,
                    self.total,
                    self.t0.elapsed().as_secs_f64(),
                    ""
                )
                .as_bytes(),
            );
        }
    }
}

/// The client's configuration from the process environment `vars`: its `GEX_*`
/// variables except the collectives layer's (`GEX_COLL_*`), and the names of those
/// left out. The endpoint's collectives layer then has the plain catalogue and cost
/// model: a profile, an override or online trials would steer the barriers and
/// allreduces of the timing loop and the model's choices that the summary compares
/// with the measured ones.
fn plain_config(vars: impl Iterator<Item = (String, String)>) -> (Config, Vec<String>) {
    let (coll, rest): (Vec<_>, Vec<_>) = vars
        .filter(|(k, _)| k.starts_with("GEX_"))
        .partition(|(k, _)| k.starts_with("GEX_COLL_"));
    let mut ignored: Vec<String> = coll.into_iter().map(|(k, _)| k).collect();
    ignored.sort();
    (Config::from_pairs(rest), ignored)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (args, over) = match cli.cmd {
        Cmd::Plots(a) => {
            return match plots::run(&a) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    complain(&e);
                    ExitCode::FAILURE
                }
            };
        }
        Cmd::Tune(a) => (Some(a), None),
        Cmd::Overlap(a) if a.len < overlap::MIN_LEN => {
            complain(&format!(
                "overlap: --len {} is less than 16 pages ({} B)",
                a.len,
                overlap::MIN_LEN
            ));
            return ExitCode::from(2);
        }
        Cmd::Overlap(a) => (None, Some(a)),
    };
    let conduit = match gex::select_conduit(cli.conduit.as_deref()) {
        Ok(_) if cli.conduit.is_some() => cli.conduit.clone(),
        Ok(_) => None,
        Err(e) => {
            complain(&e.to_string());
            return ExitCode::from(2);
        }
    };
    let boot = match gex::boot::spawn_self(cli.ranks.max(1)) {
        Ok(gex::boot::Role::Launcher(code)) => return ExitCode::from((code & 0xff) as u8),
        Ok(gex::boot::Role::Rank(boot)) => boot,
        Err(e) => {
            complain(&format!("cannot launch {} ranks: {e}", cli.ranks));
            return ExitCode::FAILURE;
        }
    };
    let rank = boot.rank();
    let (config, ignored) = plain_config(std::env::vars());
    if rank == 0 && !ignored.is_empty() {
        complain(&format!(
            "ignoring {} (gex-tune times the plain catalogue)",
            ignored.join(", ")
        ));
    }
    let run = match (args, over) {
        (Some(args), _) => gex::init_with_boot(
            gex::builder().segment_size(16 << 20).config(config),
            boot,
            conduit.as_deref(),
            TuneJob { args },
        ),
        (None, Some(args)) => {
            let job = overlap::OverlapJob { args };
            gex::init_with_boot(
                overlap::builder(job.segment()).config(config),
                boot,
                conduit.as_deref(),
                job,
            )
        }
        (None, None) => unreachable!("plots returned above"),
    };
    match run {
        Ok(code) => ExitCode::from(code as u8),
        Err(e) => {
            complain(&format!("rank {rank}: initialisation failed: {e}"));
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_reads_no_collective_setting() {
        let vars = [
            ("GEX_COLL_PROFILE", "p.toml"),
            ("GEX_WAIT", "spin"),
            ("HOME", "/"),
            ("GEX_COLL_BROADCAST", "chain"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let (c, ignored) = plain_config(vars.into_iter());
        assert_eq!(ignored, ["GEX_COLL_BROADCAST", "GEX_COLL_PROFILE"]);
        assert_eq!(c.get("GEX_WAIT"), Some("spin"));
        assert_eq!(c.get("GEX_COLL_PROFILE"), None);
        assert_eq!(c.get("HOME"), None);
    }
}
