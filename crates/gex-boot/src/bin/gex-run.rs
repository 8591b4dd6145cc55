//! `gex-run`: run a gex job of `N` ranks on this host.
//!
//! ```text
//! gex-run -n N [--threads T] [--conduit NAME] [--hosts LIST [--host-exec PREFIX]] [--] prog args…
//! ```
//!
//! `--hosts a,a,b,b` (or `a*2,b*2`) puts each rank on a named host: ranks with the
//! same name share a host id. `--host-exec 'ip netns exec {host}'` starts each rank
//! through that prefix, `{host}` replaced by its host name (see
//! `gex_boot::launch`, "Several hosts").
//!
//! Exits with the job's exit code (see `gex_boot::launch` for how it is
//! computed), 127 if `prog` cannot be executed, 2 for a usage error and 1 if the
//! launcher itself fails.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::Parser;
use gex_boot::launch::{JobSpec, LaunchError, parse_host_exec, parse_hosts, run_job};

/// Run a gex job of N ranks of PROG on this host.
///
/// Every rank inherits stdin, stdout and stderr and gets GEX_BOOT=fork, GEX_RANK,
/// GEX_SIZE, GEX_JOB_ID, GEX_LOCAL_RANK, GEX_LOCAL_SIZE and GEX_BOOT_FD in its
/// environment. If a rank fails, exits or aborts, every other rank is terminated
/// and gex-run exits with that rank's code.
#[derive(Debug, Parser)]
#[command(name = "gex-run", version)]
struct Args {
    /// Number of ranks (at least 1).
    #[arg(short = 'n', long = "ranks", value_name = "N", value_parser = parse_ranks)]
    ranks: u32,
    /// Thread ranks per process (sets GEX_THREADS=T): the job has N x T ranks in N
    /// processes, for programs that start their ranks with
    /// gex_boot::threads::run_from_env.
    #[arg(long, value_name = "T", value_parser = parse_threads)]
    threads: Option<u32>,
    /// Conduit the ranks should use (sets GEX_CONDUIT=NAME).
    #[arg(long, value_name = "NAME")]
    conduit: Option<OsString>,
    /// Host of each rank, comma-separated (NAME or NAME*COUNT); ranks with the same
    /// name share a host id. Must name exactly N ranks.
    #[arg(long, value_name = "LIST")]
    hosts: Option<String>,
    /// Command prefix that starts a rank on its host; every `{host}` is replaced
    /// by the rank's host name; split at whitespace (e.g. 'ip netns exec {host}').
    /// Needs --hosts.
    #[arg(long, value_name = "PREFIX", requires = "hosts")]
    host_exec: Option<String>,
    /// The program to run, and its arguments.
    #[arg(
        value_name = "PROG",
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    command: Vec<OsString>,
}

fn parse_ranks(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(0) => Err("the number of ranks must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("`{s}` is not a number of ranks: {e}")),
    }
}

fn parse_threads(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(0) => Err("the number of thread ranks per process must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("`{s}` is not a number of thread ranks: {e}")),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mut command = args.command.into_iter();
    let Some(program) = command.next() else {
        eprintln!("gex-run: no program given");
        return ExitCode::from(2);
    };
    let mut spec = JobSpec::new(args.ranks, program)
        .args(command)
        .forward_signals(true);
    if let Some(t) = args.threads {
        spec = spec.env(gex_boot::env::THREADS, t.to_string());
    }
    if let Some(conduit) = args.conduit {
        spec = spec.env(gex_boot::env::CONDUIT, conduit);
    }
    if let Some(list) = &args.hosts {
        match parse_hosts(list) {
            Ok(hosts) => spec = spec.hosts(hosts),
            Err(e) => {
                eprintln!("gex-run: --hosts: {e}");
                return ExitCode::from(2);
            }
        }
    }
    if let Some(prefix) = &args.host_exec {
        let words = parse_host_exec(prefix);
        if words.is_empty() {
            eprintln!("gex-run: --host-exec: empty command prefix");
            return ExitCode::from(2);
        }
        spec = spec.host_exec(words);
    }
    match run_job(&spec) {
        Ok(code) => exit_code(code),
        Err(e @ LaunchError::Spawn { .. }) => {
            eprintln!("gex-run: {e}");
            ExitCode::from(127)
        }
        Err(e @ (LaunchError::NoRanks | LaunchError::Hosts(_))) => {
            eprintln!("gex-run: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("gex-run: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The low 8 bits of the job's code, as `exit(2)` would report them.
fn exit_code(code: i32) -> ExitCode {
    ExitCode::from(code.to_le_bytes()[0])
}
