//! `gex-info`: what this build of gex offers and what it would choose.
//!
//! ```text
//! gex-info conduits            compiled conduits: capabilities and limits (one-rank probe)
//! gex-info env                 every GEX_* variable: value here, default, meaning
//! gex-info coll [-n N] [--single] [--hosts H] [--no-shm]
//!                              the collective algorithm chosen per operation and size
//!                              on a team of N (default 8), with the runner-up and why,
//!                              and the path a blocking call takes: by default the team
//!                              of a job on this host (shared memory: `shm` where the
//!                              tuner takes it); `--hosts H` spreads it over H hosts,
//!                              `--no-shm` is a conduit without shared memory
//! gex-info ofi                 (built with --features ofi) the libfabric provider,
//!                              domain and the path of every operation, with reasons
//! gex-info ibv                 (built with --features ibv or ibv-verbs) the RDMA devices
//!                              and ports libibverbs sees ("no RDMA device" where there
//!                              is none), the emulation, and what the ibv conduit would
//!                              choose with this environment's GEX_IBV_* settings
//! gex-info boot [--no-connect] the bootstrap this process finds (gex-run, PMIx, PMI-2,
//!                              PMI-1, singleton) and why; then connects and prints
//!                              rank, size and host ids (run it under the launcher:
//!                              `srun -n 4 gex-info boot`)
//! gex-info layout [--threads T] the job layout as rank 0 agreed it: per rank its host,
//!                              process, endpoints and segment, and which ranks are
//!                              threads of one process (under a launcher: `gex-run -n 4
//!                              [--threads T] gex-info layout`, which honours
//!                              `GEX_THREADS`; `--threads T`: T thread ranks of this
//!                              process alone)
//! ```
//!
//! Everything is read from this process's environment (`GEX_*`), as a gex program
//! would: `GEX_COLL_<OP>` overrides and `GEX_COLL_LOGGP` change `coll`,
//! `GEX_OFI_PROVIDER` changes `ofi`.

use clap::{Parser, Subcommand};
use gex::ClientBuilder;
use gex::coll::CollExt;
use gex::config::Config;
use std::io::Write as _;
use std::process::ExitCode;

/// Writes to stdout; a closed pipe (`gex-info env | head`) ends the output quietly.
fn out(text: &str) {
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

#[derive(Parser, Debug)]
#[command(
    name = "gex-info",
    about = "What this gex build offers and would choose"
)]
struct Cli {
    #[command(subcommand)]
    what: Option<What>,
}

#[derive(Subcommand, Debug)]
enum What {
    /// Compiled conduits with their capabilities and limits.
    Conduits,
    /// Every GEX_* variable with its value here, default and meaning.
    Env,
    /// The collective algorithm chosen per operation and size, and why.
    Coll {
        /// Team size.
        #[arg(short = 'n', long, default_value_t = 8)]
        size: u32,
        /// Single address mode (every member's addresses known) instead of local.
        #[arg(long)]
        single: bool,
        /// Hosts the team spans (1: all on this host).
        #[arg(long, default_value_t = 1)]
        hosts: u32,
        /// The members do not share memory (a conduit without it, e.g. ofi or ibv
        /// between processes of one host).
        #[arg(long)]
        no_shm: bool,
    },
    /// The libfabric conduit's provider, domain and per-operation paths.
    Ofi,
    /// The ibverbs conduit: RDMA devices and ports, the emulation, what it would choose.
    Ibv,
    /// The bootstrap this process finds and why; then rank, size and host ids.
    Boot {
        /// Only say what would be used; do not connect to the launcher.
        #[arg(long)]
        no_connect: bool,
    },
    /// The job layout: host, process, endpoints and segment of every rank.
    Layout {
        /// Run T thread ranks of this process instead of taking the launcher's job.
        #[arg(long)]
        threads: Option<u32>,
    },
}

/// Capabilities, limits and wait policy of conduit `name`, opened for a job of one
/// rank (no layers: the conduit alone), chosen at run time as `GEX_CONDUIT` would.
fn describe(name: &str) -> String {
    let mut config = Config::from_env();
    config.set(gex::CONDUIT_VAR, name);
    let client: gex::Client = match ClientBuilder::new()
        .segment_size(1 << 16)
        .config(config)
        .init::<gex::AnyConduit>(Box::new(gex::boot::Singleton::new()))
    {
        Ok(c) => c,
        Err(e) => return format!("  cannot open here: {e}\n"),
    };
    let ep: gex::OwnedEndpoint = match client.endpoint(0) {
        Ok(ep) => ep,
        Err(e) => return format!("  endpoint 0: {e}\n"),
    };
    let me = ep.addr();
    // The endpoint bounds a Long by the destination's segment: a bound equal to the
    // segment is the conduit's "no limit of its own".
    let long = ep.max_long(me);
    format!(
        "  capabilities: {:?}\n  limits: {} args, Medium {} B, Long {}\n  wait policy: {:?}\n",
        ep.capabilities(),
        ep.max_args(),
        ep.max_medium(me),
        if Some(long) == ep.segment_len_of(me.rank) {
            "up to the segment".to_string()
        } else {
            format!("{long} B")
        },
        client.wait_policy()
    )
}

fn conduits() -> Result<(), String> {
    for &name in gex::conduits() {
        let default = if name == gex::DEFAULT_CONDUIT {
            " (default)"
        } else {
            ""
        };
        out(&format!("{name}{default}\n"));
        out(&describe(name));
    }
    Ok(())
}

/// `gex-info boot`: detection, then (unless `no_connect`) one line per rank.
fn boot(no_connect: bool) -> Result<(), String> {
    let d = gex_boot::detect().map_err(|e| e.to_string())?;
    let pmix = if gex_boot::PMIX_BUILT {
        pmix_version()
    } else {
        "not built in (cargo feature gex-boot/pmix, gex-info/pmix)".to_string()
    };
    let header = format!(
        "bootstrap: {}{}
  why: {}
  PMIx client: {pmix}
",
        d.backend.name(),
        if d.forced { " (forced)" } else { " (detected)" },
        d.reason
    );
    if no_connect {
        out(&header);
        return Ok(());
    }
    let mut b = gex_boot::from_env().map_err(|e| format!("{header}cannot connect: {e}"))?;
    if b.rank() == 0 {
        out(&header);
    }
    // Rank 0's header first, then one line per rank.
    b.barrier().map_err(|e| e.to_string())?;
    out(&format!(
        "rank {} of {}: bootstrap {}, host ids {:?}\n",
        b.rank(),
        b.size(),
        b.name(),
        b.host_ids()
    ));
    b.barrier().map_err(|e| e.to_string())?;
    b.finalize(0).map_err(|e| e.to_string())
}

/// The job layout as `client` agreed it, one line per rank, and a summary of the
/// processes.
fn describe_layout(client: &gex::Client) -> String {
    let l = client.layout();
    let mut text = String::new();
    for r in 0..l.size() {
        let peers = l.process_peers(r);
        let threads = if peers.len() > 1 {
            format!(", threads of one process with ranks {peers:?}")
        } else {
            String::new()
        };
        text += &format!(
            "rank {r}: host {}, process {}{threads}, {} endpoint(s), segment {} B\n",
            l.host[r as usize], l.process[r as usize], l.eps[r as usize], l.seg_len[r as usize]
        );
    }
    // A process is counted at its first rank.
    let procs = (0..l.size())
        .filter(|&r| l.process_peers(r).first() == Some(&r))
        .count();
    text += &if l.one_process() {
        format!("{} rank(s), all threads of one process\n", l.size())
    } else {
        format!("{} rank(s) in {procs} process(es)\n", l.size())
    };
    text
}

/// `gex-info layout`: the layout of the launcher's job (printed by rank 0) or of
/// `threads` thread ranks of this process.
fn layout(threads: Option<u32>) -> Result<(), String> {
    let builder = || gex::ClientBuilder::new().segment_size(1 << 16);
    let describe = |client: gex::Client| {
        let text = (client.rank() == 0).then(|| describe_layout(&client));
        client.finalize().map(|()| text).map_err(|e| e.to_string())
    };
    let texts = match threads {
        Some(t) => gex::run_threads(t, builder, describe).map_err(|e| e.to_string())?,
        // Under a launcher: this process's `GEX_THREADS` thread ranks (one without it),
        // so `gex-run -n P --threads T gex-info layout` shows the job of P × T ranks.
        None => gex_boot::threads::run_from_env(|boot| {
            let client = builder()
                .init::<gex::AnyConduit>(Box::new(boot))
                .map_err(|e| e.to_string())?;
            describe(client)
        })
        .map_err(|e| e.to_string())?,
    };
    for t in texts {
        if let Some(t) = t? {
            out(&t);
        }
    }
    Ok(())
}

#[cfg(feature = "pmix")]
fn pmix_version() -> String {
    format!("built in ({})", gex_boot::pmix::library_version())
}

#[cfg(not(feature = "pmix"))]
fn pmix_version() -> String {
    unreachable!("PMIX_BUILT is false without the feature")
}

/// Every `GEX_*` variable this build may read: the registry the facade collects from
/// the core, the launcher, the facade, the conduits and the layers compiled in.
fn env() -> Result<(), String> {
    for v in gex::env_vars() {
        let value = std::env::var(v.name).unwrap_or_default();
        let shown = if value.is_empty() {
            "(unset)".to_string()
        } else {
            value
        };
        let default = if v.default.is_empty() { "-" } else { v.default };
        out(&format!(
            "{:<24} {:<14} default {:<10} {}\n",
            v.name, shown, default, v.doc
        ));
    }
    Ok(())
}

/// The choices of the tuner a gex program's collectives layer has: the layer of an
/// endpoint of a one-rank job (loopback), which read its `GEX_COLL_*` settings from
/// the environment when it attached (a bad one fails here, naming the variable), asked
/// about teams of `size` placed as `place` — the queries the layer builds for such a
/// team, so the table shows what the job would run and the path a blocking call takes.
fn coll(size: u32, single: bool, place: gex_coll::Placement) -> Result<(), String> {
    if size == 0 {
        return Err("a team has at least one member (-n 1 or more)".into());
    }
    if place.hosts == 0 || place.hosts > size {
        return Err(format!(
            "a team of {size} spans 1 to {size} hosts (--hosts {})",
            place.hosts
        ));
    }
    let client = gex::builder()
        .segment_size(1 << 16)
        .init::<gex::conduit::Loopback>(Box::new(gex::boot::Singleton::new()))
        .map_err(|e| e.to_string())?;
    let mut ep = client.endpoint(0).map_err(|e| e.to_string())?;
    let addr = if single {
        gex_coll::AddrMode::Single
    } else {
        gex_coll::AddrMode::Local
    };
    let table = ep
        .tuner(|t| t.table_on(size, addr, place))
        .map_err(|e| e.to_string())?;
    out(&table);
    Ok(())
}

#[cfg(feature = "ofi")]
fn ofi() -> Result<(), String> {
    let client = ClientBuilder::new()
        .segment_size(1 << 16)
        .init::<gex_conduit_ofi::Ofi>(Box::new(gex::boot::Singleton::new()))
        .map_err(|e| e.to_string())?;
    let report = client.conduit().report();
    out(&format!("{report}\n"));
    if report.provider().split(';').next() == Some("tcp") {
        // The kernel's congestion control sets the bulk rate of a tcp job as much as
        // gex does (docs/performance.md, "Put 1 MiB and the kernel's congestion control").
        let cc = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
            .map(|v| v.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        let note = if cc == "bbr" {
            " (paces each connection: bulk rates depend on the traffic pattern, see docs/performance.md)"
        } else {
            ""
        };
        out(&format!("kernel TCP congestion control: {cc}{note}\n"));
    }
    Ok(())
}

#[cfg(feature = "ibv")]
fn ibv() -> Result<(), String> {
    out(&gex_conduit_ibv::probe(&Config::from_env()));
    Ok(())
}

#[cfg(not(feature = "ibv"))]
fn ibv() -> Result<(), String> {
    Err(
        "this gex-info was built without the ibv conduit (cargo build -p gex-info --features ibv, or ibv-verbs for libibverbs)"
            .into(),
    )
}

#[cfg(not(feature = "ofi"))]
fn ofi() -> Result<(), String> {
    Err(
        "this gex-info was built without the ofi conduit (cargo build -p gex-info --features ofi)"
            .into(),
    )
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.what.unwrap_or(What::Conduits) {
        What::Conduits => conduits(),
        What::Env => env(),
        What::Coll {
            size,
            single,
            hosts,
            no_shm,
        } => coll(
            size,
            single,
            gex_coll::Placement {
                shm: !no_shm,
                hosts,
            },
        ),
        What::Ofi => ofi(),
        What::Ibv => ibv(),
        What::Boot { no_connect } => boot(no_connect),
        What::Layout { threads } => layout(threads),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gex-info: {e}");
            ExitCode::from(2)
        }
    }
}
