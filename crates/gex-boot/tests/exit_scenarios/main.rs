//! Exit scenarios: how a gex job ends when one rank (or every rank) leaves it in some
//! way -- an exit request while the others compute, wait in a barrier, sit in a
//! collective or wait for a reply; an exit or a panic in an AM handler or on another
//! thread; `Client::abort` and `std::process::abort`; SIGTERM, SIGINT and SIGKILL to a
//! rank and to the launcher; a rank that never finalizes; every rank exiting at once
//! with different codes -- run over the smp and ofi conduits under gex-run, Hydra's
//! `mpiexec`, self-launch and a launcher that does not end the job when a rank dies
//! (which leaves it to the ranks' own liveness checks). The scenarios follow the
//! cases of GASNet-EX's `testexit`, in our own words and with gex's semantics.
//!
//! For every combination the driver checks: the job ends (the launcher exits and every
//! rank process the ranks reported, and the process that started them, is gone)
//! within [`driver::BOUND`] of the event that set it off (a wall-clock mark the
//! triggering rank writes just before it acts, or the moment the driver signals the
//! launcher); the launcher's exit code is the one `docs/launching.md` documents; the
//! launcher or the ranks say what happened; nothing new is left in `/dev/shm`.
//!
//! One binary plays every part (`harness = false`):
//! - run by `cargo test` (no `GEXTEST_EXIT_*` in its environment) it is the
//!   **driver**: it runs the matrix and prints one line per combination;
//! - with `GEXTEST_EXIT_LAUNCHER=no-kill` it is the **no-kill launcher**: gex-boot's
//!   fork launcher with `kill_on_bad_exit(false)`;
//! - with `GEXTEST_EXIT_SCENARIO` it is the **scenario program**: started alone it
//!   launches itself ([`gex::boot::spawn_self`]), under gex-run, mpiexec or the no-kill
//!   launcher it is one rank.
//!
//! ```text
//! cargo test -p gex-boot --test exit_scenarios                      # smp, every launcher
//! cargo test -p gex-boot --test exit_scenarios --features gex/ofi   # smp and ofi
//! cargo test -p gex-boot --test exit_scenarios -- gex-run/smp/       # a filter (substring)
//! cargo test -p gex-boot --test exit_scenarios -- --list             # the combinations
//! ```
//!
//! Settings: `GEXTEST_EXIT_JOBS` (jobs run at once, default 2), `GEXTEST_EXIT_BOUND_MS`
//! (the bound, default 2000), `GEXTEST_ALLOW_NO_MPIEXEC=1` (skip the mpiexec column
//! when MPICH is missing), `--nocapture` (print every job's output).

mod driver;
mod rank;
mod scenarios;

/// Set for the scenario program: the scenario's name.
const SCENARIO_VAR: &str = "GEXTEST_EXIT_SCENARIO";
/// Set for the scenario program: the job's directory (marks, pids, readiness).
const DIR_VAR: &str = "GEXTEST_EXIT_DIR";
/// Set for a self-launching scenario program: the number of ranks.
const RANKS_VAR: &str = "GEXTEST_EXIT_RANKS";
/// `no-kill`: this process is the launcher that does not end the job when a rank dies
/// (it starts its ranks with `rank`).
const LAUNCHER_VAR: &str = "GEXTEST_EXIT_LAUNCHER";
/// For the no-kill launcher: the host list (`a,a,b`), like `gex-run --hosts`.
const HOSTS_VAR: &str = "GEXTEST_EXIT_HOSTS";

fn main() -> std::process::ExitCode {
    if std::env::var(LAUNCHER_VAR).is_ok_and(|v| v == "no-kill") {
        std::process::exit(driver::no_kill_launcher());
    }
    if let Ok(name) = std::env::var(SCENARIO_VAR) {
        let Some(s) = scenarios::find(&name) else {
            eprintln!("exit_scenarios: no scenario {name:?}");
            std::process::exit(96);
        };
        rank::run(s);
    }
    driver::main()
}
