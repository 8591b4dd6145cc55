//! The PMI-1 bootstrap under a real launcher: MPICH's Hydra `mpiexec`, as a user runs
//! it (`gex_boot::detect` picks PMI-1 there; `launch_hydra.rs` runs Hydra's PMI-2).
//! The cases are in `common`, each playing both sides (see that module); this file
//! adds Hydra's other mode (`-pmi-port`).
//!
//! MPICH's `mpiexec.hydra` (or `mpiexec.mpich`) must be in `PATH` (`apt-get install
//! mpich`; `ci/test` installs it). Without it every test here fails with a loud
//! message, unless `GEXTEST_ALLOW_NO_MPIEXEC=1` is set, in which case they pass
//! after printing that they were skipped. (Plain `mpiexec` is not used: it may be
//! Open MPI's.)

mod common;

use common::Launcher::Hydra;
use common::Opts;

/// In the test process: false (after a loud line) when Hydra is missing and
/// `GEXTEST_ALLOW_NO_MPIEXEC=1` (skip); panics when it is missing otherwise. In a
/// rank: true.
fn hydra_or_skip(test: &str) -> bool {
    common::rank_dir().is_some() || gex_testkit::procs::mpiexec(test).unwrap().is_some()
}

common::launcher_cases! {
    Hydra, if hydra_or_skip;
    four_ranks_collectives: collectives;
    exit_codes_follow_hydras_rule: exit_codes;
    abort_ends_the_job_promptly: abort;
    exit_request_ends_the_job_with_its_code: exit_request;
    /// Under mpiexec a dying rank is Hydra's business: it must end the job.
    sigkill_of_a_rank_ends_the_job: kill9;
}

/// Hydra's other mode (`PMI_PORT` and `PMI_ID` instead of an inherited socket), with
/// `GEX_BOOT=pmi` forcing the PMI client; `spawn_self_test` in a rank started by
/// mpiexec returns the rank's bootstrap instead of launching.
#[test]
fn pmi_port_mode_and_spawn_self() {
    const NAME: &str = "pmi_port_mode_and_spawn_self";
    if let Some(dir) = common::rank_dir() {
        assert!(std::env::var_os("PMI_FD").is_none());
        assert!(std::env::var_os("PMI_PORT").is_some());
        common::rank_prelude(&dir);
        let mut boot = match gex_boot::spawn_self_test(7, NAME).unwrap() {
            gex_boot::Role::Rank(b) => b,
            gex_boot::Role::Launcher(_) => panic!("a rank under mpiexec launched a job"),
        };
        assert_eq!((boot.name(), boot.size()), ("pmi", 3));
        let rank = boot.rank();
        let all = boot.exchange(&common::blob(rank, 4)).unwrap();
        for (r, b) in all.iter().enumerate() {
            assert_eq!(b, &common::blob(r as u32, 4));
        }
        boot.finalize(0).unwrap();
        common::rank_done(&dir, rank);
        return;
    }
    if !hydra_or_skip(NAME) {
        return;
    }
    let opts = Opts {
        hydra_args: &["-pmi-port"],
        env: &[("GEX_BOOT", "pmi")],
        ..Opts::default()
    };
    let job = common::run_job(Hydra, 3, NAME, opts);
    assert_eq!(job.code(), Some(0), "{}", job.report());
    job.assert_all_done(3);
    job.assert_no_rank_left(3);
}
