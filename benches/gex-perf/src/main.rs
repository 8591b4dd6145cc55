//! `gex-perf`: a benchmark driver for gex, in the spirit of `ucx_perftest` and
//! GASNet's `testam`.
//!
//! ```text
//! gex-perf [-n N] [--threads T] [--conduit NAME] [--pin|--no-pin] am [--json] [--quick] [--sizes LIST] [--iters K] [--test NAME]…
//! gex-perf [-n N] [--threads T] … msg [--json] [--quick] [--sizes LIST]
//! ```
//!
//! Started on its own, `gex-perf` launches itself on `N` ranks (default 2) with the
//! fork launcher ([`gex::boot::spawn_self`]) and exits with the job's exit code;
//! started by a launcher (`gex-run -n 4 gex-perf am`), each process is one rank and
//! `-n` is ignored. With `--threads T` (or `GEX_THREADS`), each process runs `T` thread
//! ranks ([`gex::boot::threads::ThreadJob::within`]): `-n N --threads T` is `N / T`
//! processes of `T` thread ranks. Ranks form pairs `(0,1), (2,3), …` that measure concurrently;
//! rank 0 prints the median over pairs. See `--help` and the `am` module for what
//! each test measures.

/// `impl gex::Job for $job`: each rank runs `$run(&job, &client)`, then ends the job
/// through [`end_job`] as `$who`.
macro_rules! rank_job {
    ($job:ty, $run:ident, $who:literal) => {
        impl gex::Job for $job {
            type Output = crate::RankEnd;
            fn run<C: gex::spi::Conduit>(self, client: gex::core::Client<C>) -> Self::Output {
                let r = $run(&self, &client);
                crate::end_job(client, $who, r)
            }
        }
    };
}

mod am;
mod coll;
mod domains;
mod msg;
mod overlap;
mod overlap_delta;
mod overlap_floor;
mod overlap_halo;
mod pin;
mod progress;
mod report;
mod rma;
mod soak;
mod storm;

use clap::{Parser, Subcommand, ValueEnum};
use std::process::ExitCode;

/// Benchmark driver for gex active messages (like ucx_perftest / GASNet testam).
///
/// Launches itself on N ranks over the fork launcher unless it already is a rank
/// (for example under `gex-run -n N gex-perf …`; then -n is ignored). Ranks pair up
/// as (0,1), (2,3), …; every pair measures at the same time and rank 0 reports the
/// median over pairs. With more ranks than cores, waits spin then block
/// automatically (GEX_WAIT overrides). With --threads T the ranks are threads: N / T
/// processes of T thread ranks each (every JSON line says `"ranks_as": "threads"` and
/// `"threads_per_process": T`). Exit code 0 on success.
#[derive(Debug, Parser)]
#[command(name = "gex-perf", version)]
struct Cli {
    /// Number of ranks to launch (ignored when started by a launcher); default 2, or T
    /// with --threads T.
    #[arg(short = 'n', long = "ranks", value_name = "N", value_parser = parse_ranks, global = true)]
    ranks: Option<u32>,
    /// Ranks as threads: every process runs T thread ranks (default: GEX_THREADS, as
    /// under `gex-run --threads T`; else process ranks). `-n N --threads T` launches
    /// N / T processes (N must be a multiple of T); `--threads T` alone is one process
    /// of T thread ranks. Each thread rank has its own client, as a process rank does;
    /// pinning pins each rank's thread.
    #[arg(long, value_name = "T", value_parser = parse_ranks, global = true)]
    threads: Option<u32>,
    /// Conduit to use (default: GEX_CONDUIT, else smp).
    #[arg(long, value_name = "NAME", global = true)]
    conduit: Option<String>,
    /// Pin rank i to the (i mod ncores)-th allowed core (the default).
    ///
    /// The anchors (ping-pong, ucx_perftest -c) pin too, so figures compare like for
    /// like. Measured on the 2-vCPU development VM: with 8 ranks, pinning (every pair
    /// split over the two cores) took the short AM round trip from 9-20 us to about
    /// 4-5 us; with 2 ranks on a quiet machine it made no difference, but with other
    /// load the kernel sometimes put both spinning ranks on one core, and every round
    /// trip then waited for a scheduler tick.
    #[arg(long, global = true, conflicts_with = "no_pin")]
    pin: bool,
    /// Never pin: leave placement to the kernel (see --pin).
    #[arg(long, global = true)]
    no_pin: bool,
    /// One JSON object per line instead of the table (keys: name, size, ranks, conduit,
    /// value, unit, min, max, ranks_as, threads_per_process; some tests add provider,
    /// algorithm and buffers).
    #[arg(long, global = true)]
    json: bool,
    /// What to measure.
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Clone, Subcommand)]
enum Cmd {
    /// Active messages: round trips, flood rates and bandwidths.
    ///
    /// Each test point: warm-up (which sizes the batches to ~50 ms each), then 7
    /// timed batches; value = median batch, min/max = extreme batches (over every
    /// pair). Default sizes: Medium 8 B..max Medium and Long 8 B..1 MiB in powers of
    /// two (plus the maximum), floods from 4 KiB. Rank 0 prints a table, or with
    /// --json one object per line: {"name","size","ranks","conduit","value","unit",
    /// "min","max","ranks_as","threads_per_process"}; units "us" (latency, per message
    /// for floods) and "GB/s" (1e9 B/s).
    /// The full run takes about 20-30 s on 2 cores, --quick about 1 s.
    Am(AmArgs),
    /// One-sided puts (gex-rma): put_lat, put_observed_lat (µs) for 8 B..4 KiB,
    /// put_fence_lat and put_val_fence_lat (µs, 8 B: a put then a full barrier, as
    /// OpenSHMEM's put + quiet) and put_bw (GB/s) for 1 KiB..64 MiB; rank 0 reports its
    /// own pair.
    Put(rma::RmaArgs),
    /// One-sided gets (gex-rma): get_lat (µs) for 8 B..4 KiB and get_bw (GB/s).
    Get(rma::RmaArgs),
    /// Remote atomics (gex-rma, u64 domain): atomic_fadd_lat (µs per blocking fetch-add
    /// to the peer's word, a round trip) and atomic_fadd_rate (Mop/s, NBI fetch-adds
    /// back to back, one sync per batch); rank 0 reports its own pair.
    Atomic(rma::RmaArgs),
    /// The barrier (the collectives layer's, on the world team) over every rank, back
    /// to back: barrier_lat (µs).
    Barrier(rma::RmaArgs),
    /// Collectives (gex-coll) on the world team: `coll_<op>_lat` (µs per call, rank 0's
    /// median batch) for barrier, broadcast, reduce, allreduce, gather_all and exchange
    /// with u8 blocks of 8 B..64 KiB per rank; each line names the algorithm (the
    /// tuner's choice, or the one forced with --algorithm).
    Coll(coll::CollArgs),
    /// Progress while a rank computes: rank 1 computes --compute-ms (10) without
    /// calling gex while rank 0 times an 8-byte get on the active-message path;
    /// progress_get_lat (µs) and the target's progress_compute_ms, labelled `thread`
    /// (with --thread: a progress thread serves the target) or `no-thread`.
    Progress(progress::ProgressArgs),
    /// Soak: random AMs, RMA, atomics and collectives over every rank for --seconds
    /// (60), every byte verified; rank 0 prints soak_ops, soak_errors, soak_seconds
    /// and soak_rate; any error fails the job (exit code 1). Run it on 4 ranks:
    /// `gex-perf -n 4 soak`.
    Soak(soak::SoakArgs),
    /// Storm: every rank sends Medium AMs of mixed sizes (8 B to the Medium limit, a
    /// seeded random mix) to random peers while serving the others', for --seconds
    /// (default 2) or --count messages per rank; every payload's checksum is verified.
    /// Rank 0 reports storm_rate (messages/s over every rank), storm_backpressure_wait
    /// and storm_backpressure_wait_p99 (µs one back-pressured injection waited until
    /// the conduit took it: median and 99th percentile over every such injection, 0
    /// when none was refused; max = the longest), storm_backpressure_events,
    /// storm_messages, storm_seconds and storm_errors; any error fails the job.
    Storm(storm::StormArgs),
    /// Tagged messaging (gex-msg): the MPI anchor's pingpong, OSU-style bidirectional
    /// tests and the any-source receive rate.
    ///
    /// Ranks 0 and 1 measure while the others wait in a barrier
    /// (as `../shared/anchors/mpibench.c` does): msg_pingpong_lat (µs one-way = half the
    /// round trip of a blocking send and recv, like MPI_Send/MPI_Recv) and
    /// msg_pingpong_bw (MB/s = 1e6 B/s, size / one-way time); msg_bi_lat (µs per
    /// exchange: both ranks isend and irecv one message at once and wait, seed 002's
    /// bidirectional latency); msg_bibw (MB/s both directions, a window of 64 isends
    /// and irecvs per round, as osu_bibw) and msg_bi_rate (messages/s both directions,
    /// 8 B, window 64). With 3 ranks or more, msg_anysource_rate (messages/s): every
    /// rank but 0 sends 8 B messages to rank 0, which receives with any-source recvs.
    /// Default sizes 8,64,512,4K,32K,256K,1M; value = median of 7 batches of ~50 ms.
    /// Compare with `../shared/anchors/run.sh mpi` (its pingpong lines).
    Msg(msg::MsgArgs),
    /// Communication domains (seed 002): AM message rate of N threads of one rank,
    /// each driving its own endpoint and sending Short AMs to itself in windows.
    /// Rank 0 reports domains_rate (msg/s over its workers, `size` = N) and
    /// domains_speedup (over N = 1, same run) for every N of --eps (default 1,2,4).
    /// Run it on one rank: `gex-perf -n 1 domains`.
    Domains(domains::DomainsArgs),
    /// Demand-driven synchronisation (gex-overlap, seed 000's first kernel): rank 0
    /// gets --size (4 MiB) from rank 1 and uses it page by page (--work steps of
    /// arithmetic per page and a checksum), blocking get then use against `get_demand`
    /// (pages waited for one by one as strips land), alternated for --rounds (11).
    /// Rows: overlap_get_stream_blocking and overlap_get_stream_demand (µs per round),
    /// overlap_get_stream_speedup (`x`, blocking / demand per round) and overlap_strip
    /// (B, the model's strip; min/max = the number of strips); then the same get in
    /// the model's equal and variable strips: overlap_get_stream_equal, _variable (µs),
    /// _variable_speedup (`x`, equal / variable) and overlap_strip_variable (B, the
    /// first strip; min/max = the number of strips); over shared memory also the
    /// floor, the same copy and use overlapped by hand by a helper thread on another
    /// core with no page protection: overlap_get_stream_floor (µs) and
    /// _floor_speedup (`x`, blocking / floor: the most any implementation could gain
    /// on the machine). With --kernel
    /// pair|cascade|ring|reduce|delta, seed 001's delta kernels (gex-overlap's delta
    /// send-recv and cascades), each against its blocking baseline in the same run:
    /// rows `overlap_delta_<kernel>_blocking` (pair: `_whole`), `_delta` (µs per round) and
    /// `_speedup` (`x`); run cascade, ring and reduce on 4 ranks. With --kernel halo,
    /// a ring halo exchange of --puts (64) puts of --put-size (16) bytes per neighbour
    /// and a signal each, per iteration, in each scheduling mode of gex-overlap:
    /// rows `overlap_halo_<plain|train|piggyback|auto>` (µs per iteration) and
    /// `overlap_halo_<mode>_speedup` (`x`, plain / mode).
    Overlap(overlap::OverlapArgs),
}

/// Options of the `am` benchmarks.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct AmArgs {
    /// Smoke run: few sizes, short timings (a few seconds in all).
    #[arg(long)]
    pub(crate) quick: bool,
    /// Payload sizes for the sized tests, comma separated, K/M/G suffixes allowed
    /// (e.g. 8,4K,64K,1M); sizes above a test's limit are skipped.
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = parse_size)]
    pub(crate) sizes: Vec<usize>,
    /// Timed iterations (messages, for floods) per test point, split over the batches;
    /// default: as many as fit the time budget of a point.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) iters: Option<u64>,
    /// Batches per test point: the value is the median batch, min/max the extremes.
    #[arg(long, value_name = "B", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub(crate) batches: Option<u32>,
    /// Run only this test (repeatable); default: all.
    #[arg(long = "test", value_name = "NAME")]
    pub(crate) tests: Vec<TestName>,
}

/// A benchmark's run: its subcommand's options and the global ones it reads. Each
/// benchmark module gives its own `Run<Args>` a `builder` (the client it needs) and
/// implements [`gex::Job`] for it (`rank_job!`).
#[derive(Debug)]
pub(crate) struct Run<A> {
    /// The subcommand's options.
    pub(crate) args: A,
    /// Whether ranks pin themselves to a core.
    pub(crate) pin: PinMode,
    /// `--json`: JSON lines instead of the table.
    pub(crate) json: bool,
}

/// The options `soak` and `storm` share (their random runs, all verified).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct VerifiedArgs {
    /// Seed of every generator (a rank's own draws mix in the rank; the same seed
    /// draws the same operations).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub(crate) seed: u64,
    /// Test aid: flip one byte of every 16th payload (soak: Medium payloads) after its
    /// pattern was written or its checksum taken, so the checks must report errors
    /// (the run then fails).
    #[arg(long, hide = true)]
    pub(crate) corrupt: bool,
}

/// Whether ranks pin themselves to a core.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PinMode {
    /// Pin when the ranks on the host outnumber its cores.
    Auto,
    /// Always pin.
    On,
    /// Never pin.
    Off,
}

/// The `am` tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum TestName {
    /// Short request (0 args) answered by a Short reply; µs per round trip.
    #[value(name = "am_short_rtt")]
    ShortRtt,
    /// Medium request of s bytes echoed by a Medium reply of s bytes; µs.
    #[value(name = "am_medium_rtt")]
    MediumRtt,
    /// Long request of s bytes into the peer's segment, Long reply of s bytes back; µs.
    #[value(name = "am_long_rtt")]
    LongRtt,
    /// Back-to-back Short requests, one final acknowledgement; µs per message.
    #[value(name = "am_short_flood")]
    ShortFlood,
    /// Back-to-back Medium requests of s bytes; GB/s (1e9 bytes/s).
    #[value(name = "am_medium_flood_bw")]
    MediumFloodBw,
    /// Back-to-back Long requests of s bytes into one target region; GB/s.
    #[value(name = "am_long_flood_bw")]
    LongFloodBw,
}

impl TestName {
    /// Every test, in the order they run.
    pub(crate) const ALL: [TestName; 6] = [
        TestName::ShortRtt,
        TestName::MediumRtt,
        TestName::LongRtt,
        TestName::ShortFlood,
        TestName::MediumFloodBw,
        TestName::LongFloodBw,
    ];

    /// The name printed and used by `--test`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            TestName::ShortRtt => "am_short_rtt",
            TestName::MediumRtt => "am_medium_rtt",
            TestName::LongRtt => "am_long_rtt",
            TestName::ShortFlood => "am_short_flood",
            TestName::MediumFloodBw => "am_medium_flood_bw",
            TestName::LongFloodBw => "am_long_flood_bw",
        }
    }

    /// Unit of the reported value.
    pub(crate) fn unit(self) -> &'static str {
        match self {
            TestName::MediumFloodBw | TestName::LongFloodBw => "GB/s",
            _ => "us",
        }
    }
}

fn parse_ranks(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(0) => Err("the number of ranks must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("`{s}` is not a number of ranks: {e}")),
    }
}

pub(crate) fn parse_size(s: &str) -> Result<usize, String> {
    match gex::config::parse_size(s) {
        Some(0) => Err("sizes must be at least 1 byte".into()),
        Some(n) => Ok(n),
        None => Err(format!("`{s}` is not a size (e.g. 8, 4K, 1M)")),
    }
}

/// Prints one message on stderr with a single write, so that lines from several
/// ranks do not interleave.
pub(crate) fn complain(msg: &str) {
    use std::io::Write;
    let line = format!("gex-perf: {msg}\n");
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// The result of a benchmark's rank.
type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Endpoint 0 of `client` and its world team, with this rank's thread pinned as `pin`
/// says ([`pin::pin_rank`]).
///
/// # Errors
/// The endpoint's error, or pinning's.
pub(crate) fn rank_endpoint<C: gex::spi::Conduit>(
    client: &gex::core::Client<C>,
    pin: PinMode,
) -> Res<(gex::core::OwnedEndpoint<C>, gex::core::Team)> {
    let ep = client.endpoint(0)?;
    let world = ep.world();
    pin::pin_rank(client, pin)?;
    Ok((ep, world))
}

/// [`rank_endpoint`] for the benchmark `what`, which needs 2 ranks or more.
///
/// # Errors
/// A job of one rank, or as [`rank_endpoint`].
pub(crate) fn two_or_more<C: gex::spi::Conduit>(
    client: &gex::core::Client<C>,
    what: &str,
    pin: PinMode,
) -> Res<(gex::core::OwnedEndpoint<C>, gex::core::Team)> {
    if client.size() < 2 {
        return Err(format!("{what} needs at least 2 ranks").into());
    }
    rank_endpoint(client, pin)
}

/// The collectives layer's barrier over every rank of `ep`'s job (separates test
/// points and phases).
pub(crate) fn world_barrier<C: gex::spi::Conduit>(ep: &mut gex::core::Endpoint<C>) -> Res<()> {
    use gex::coll::CollExt;
    let world = ep.world();
    ep.barrier(&world)?;
    Ok(())
}

/// Ends a rank's part of a job: finalizes after `r` succeeded, or aborts the job with
/// `who: rank R: error`. A failed finalisation is returned (and printed), not turned
/// into `std::process::exit`, so that the other thread ranks of this process finish
/// too; `main` turns it into exit code 1.
pub(crate) fn end_job<C: gex::spi::Conduit, E: std::fmt::Display>(
    client: gex::core::Client<C>,
    who: &str,
    r: Result<(), E>,
) -> RankEnd {
    let rank = client.rank();
    match r {
        Ok(()) => client.finalize().map_err(|e| {
            let m = format!("rank {rank}: finalisation failed: {e}");
            complain(&m);
            m
        }),
        Err(e) => client.abort(1, &format!("{who}: rank {rank}: {e}")),
    }
}

/// How a rank's part of a job ended: `Err` after a failed finalisation (already
/// printed).
pub(crate) type RankEnd = Result<(), String>;

/// How the ranks of this job are made, for the JSON lines (`ranks_as`,
/// `threads_per_process`). Set once in `main` before any rank starts; every rank of the
/// process reads the same value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RankKind {
    /// Thread ranks per process, `None` for process ranks.
    pub(crate) threads: Option<u32>,
}

impl std::fmt::Display for RankKind {
    /// `processes`, or `threads (T per process)`, for the human headers.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.threads {
            None => f.write_str("processes"),
            Some(t) => write!(f, "threads ({t} per process)"),
        }
    }
}

static RANK_KIND: std::sync::OnceLock<RankKind> = std::sync::OnceLock::new();

/// This process's [`RankKind`] (process ranks if `main` did not set one, as in unit
/// tests).
pub(crate) fn rank_kind() -> RankKind {
    RANK_KIND
        .get()
        .copied()
        .unwrap_or(RankKind { threads: None })
}

/// The layers of every subcommand but `msg`: gex-rma and gex-coll, as before gex-msg
/// existed, so that those figures stay comparable across builds (`ci/perf-ab`) and an
/// idle layer they never use is not part of what they measure.
pub(crate) type Layers = (((), gex::rma::Rma), gex::coll::Coll);

/// A client builder with [`Layers`] (`msg` uses the facade's [`gex::builder`], which
/// adds gex-msg).
pub(crate) fn builder() -> gex::ClientBuilder<Layers> {
    gex::ClientBuilder::new()
        .layer::<gex::rma::Rma>()
        .layer::<gex::coll::Coll>()
}

/// The `GEX_*` variables gex-perf reads itself (besides the library's).
pub const ENV_VARS: &[gex::config::EnvVar] = &[gex::config::EnvVar {
    name: "GEX_PERF_HEAP_SHIFT",
    default: "",
    doc: "gex-perf only: bytes (at most 64 KiB) to allocate and keep before anything else, which moves every later heap block within its page; ci/perf-ab draws a random multiple of 16 below 4 KiB for every pair of runs so that an A/B samples many heap layouts (4K aliasing between a loop's state and its copy's destination otherwise decides sub-10-ns verdicts).",
}];

/// With `GEX_PERF_HEAP_SHIFT=N` (bytes, at most 64 KiB), allocates and keeps a block of
/// `N` bytes before anything else, which moves every later heap block (the library's
/// states and tables) by about `N` bytes in its page. `ci/perf-ab` draws `N` afresh for
/// every pair of runs so that an A/B samples many heap layouts instead of the one each
/// build happens to get: a sub-10-ns figure moves by up to a third when a state the
/// loop reads shares its page offset with the copy's destination (4K aliasing), and the
/// layout, not the code, would decide the verdict (docs/performance.md).
fn shift_heap() {
    let n = std::env::var(ENV_VARS[0].name)
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(0)
        .min(1 << 16);
    if n > 0 {
        std::mem::forget(Vec::<u8>::with_capacity(n));
    }
}

/// Whether this process was started by a launcher (it is then one process of the
/// launcher's job and `-n` is ignored).
fn under_launcher() -> bool {
    ["GEX_BOOT", "PMI_FD", "PMI_PORT"]
        .iter()
        .any(|v| std::env::var_os(v).is_some())
}

/// Thread ranks per process: `--threads`, else `GEX_THREADS`, else none.
fn threads_wanted(cli: &Cli) -> Result<Option<u32>, String> {
    if let Some(t) = cli.threads {
        return Ok(Some(t));
    }
    match std::env::var(gex::boot::env::THREADS) {
        Ok(v) if !v.trim().is_empty() => match v.trim().parse::<u32>() {
            Ok(t) if t >= 1 => Ok(Some(t)),
            _ => Err(format!(
                "{}={v:?}: not a number of thread ranks of at least 1",
                gex::boot::env::THREADS
            )),
        },
        _ => Ok(None),
    }
}

/// Runs `cmd` as one rank over `boot` (a process's or a thread rank's bootstrap).
fn run_rank(
    cmd: Cmd,
    boot: Box<dyn gex::boot::Bootstrap>,
    conduit: Option<&str>,
    pin: PinMode,
    json: bool,
) -> Result<RankEnd, gex::InitError> {
    // Every benchmark's job makes its client with the builder it describes.
    macro_rules! init {
        ($job:expr) => {{
            let job = $job;
            gex::init_with_boot(job.builder(), boot, conduit, job)
        }};
    }
    let rma_job = |family, args| rma::RmaJob {
        family,
        args,
        pin,
        json,
    };
    match cmd {
        Cmd::Am(args) => init!(Run { args, pin, json }),
        Cmd::Put(args) => init!(rma_job(rma::Family::Put, args)),
        Cmd::Get(args) => init!(rma_job(rma::Family::Get, args)),
        Cmd::Atomic(args) => init!(rma_job(rma::Family::Atomic, args)),
        Cmd::Barrier(args) => init!(rma_job(rma::Family::Barrier, args)),
        Cmd::Coll(args) => init!(Run { args, pin, json }),
        Cmd::Progress(args) => init!(Run { args, pin, json }),
        Cmd::Soak(args) => init!(Run { args, pin, json }),
        Cmd::Storm(args) => init!(Run { args, pin, json }),
        Cmd::Msg(args) => init!(Run { args, pin, json }),
        Cmd::Domains(args) => init!(Run { args, pin, json }),
        Cmd::Overlap(args) => init!(Run { args, pin, json }),
    }
}

fn main() -> ExitCode {
    shift_heap();
    let cli = Cli::parse();
    // Refuse an unknown conduit (`--conduit`, else GEX_CONDUIT) before launching
    // anything.
    if let Err(e) = gex::select_conduit(cli.conduit.as_deref()) {
        complain(&e.to_string());
        return ExitCode::from(2);
    }
    let threads = match threads_wanted(&cli) {
        Ok(t) => t,
        Err(e) => {
            complain(&e);
            return ExitCode::from(2);
        }
    };
    let ranks = cli.ranks.unwrap_or(threads.unwrap_or(2));
    let per_process = threads.unwrap_or(1);
    if ranks % per_process != 0 && !under_launcher() {
        complain(&format!(
            "-n {ranks} is not a multiple of --threads {per_process}: every process runs {per_process} thread ranks"
        ));
        return ExitCode::from(2);
    }
    let _ = RANK_KIND.set(RankKind { threads });
    let procs = ranks / per_process;
    let boot = match gex::boot::spawn_self(procs) {
        Ok(gex::boot::Role::Launcher(code)) => return ExitCode::from((code & 0xff) as u8),
        Ok(gex::boot::Role::Rank(boot)) => boot,
        Err(e) => {
            complain(&format!("cannot launch {procs} processes: {e}"));
            return ExitCode::FAILURE;
        }
    };
    let pin = match (cli.pin, cli.no_pin) {
        (true, _) => PinMode::On,
        (_, true) => PinMode::Off,
        _ => PinMode::Auto,
    };
    let Some(t) = threads else {
        let rank = boot.rank();
        return match run_rank(cli.cmd, boot, cli.conduit.as_deref(), pin, cli.json) {
            Ok(Ok(())) => ExitCode::SUCCESS,
            Ok(Err(_)) => ExitCode::FAILURE,
            Err(e) => {
                complain(&format!("rank {rank}: initialisation failed: {e}"));
                ExitCode::FAILURE
            }
        };
    };
    let job = match gex::boot::threads::ThreadJob::within(boot, t) {
        Ok(j) => j,
        Err(e) => {
            complain(&format!("cannot make {t} thread ranks: {e}"));
            return ExitCode::FAILURE;
        }
    };
    let ends = job.run(|tb| {
        use gex::boot::Bootstrap as _;
        let (job, rank) = (tb.job().clone(), tb.rank());
        match run_rank(
            cli.cmd.clone(),
            Box::new(tb),
            cli.conduit.as_deref(),
            pin,
            cli.json,
        ) {
            Ok(end) => end.is_ok(),
            Err(e) => {
                // Release the other thread ranks of this process, which may wait for
                // this one in a bootstrap collective.
                job.poison(&format!("rank {rank} could not initialise its client: {e}"));
                complain(&format!("rank {rank}: initialisation failed: {e}"));
                false
            }
        }
    });
    match ends {
        Ok(ok) if ok.iter().all(|&x| x) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::FAILURE,
        Err(e) => {
            complain(&e.to_string());
            ExitCode::FAILURE
        }
    }
}
