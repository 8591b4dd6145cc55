//! The PMI-2 and PMIx clients under Slurm's `srun` (`--mpi=pmi2`, and `--mpi=pmix`
//! when built with the `pmix` feature). The cases are in `common`.
//!
//! They need a running Slurm whose `srun` finds its configuration (`SLURM_CONF`):
//! `ci/slurm.sh test` starts a one-node Slurm, runs them with `--ignored` and stops
//! it. In a plain `cargo test` they are ignored (and reported as such).

mod common;

use common::Launcher::SrunPmi2;
#[cfg(feature = "pmix")]
use common::Launcher::SrunPmix;

common::launcher_cases! {
    SrunPmi2, each #[ignore = "needs a running Slurm: ci/slurm.sh test"];
    srun_pmi2_collectives: collectives;
    srun_pmi2_exit_codes: exit_codes;
    srun_pmi2_kill9: kill9;
    srun_pmi2_abort: abort;
    srun_pmi2_exit_request: exit_request;
    srun_pmi2_time_limit: time_limit;
}

#[cfg(feature = "pmix")]
common::launcher_cases! {
    SrunPmix, each #[ignore = "needs a running Slurm: ci/slurm.sh test"];
    srun_pmix_collectives: collectives;
    srun_pmix_exit_codes: exit_codes;
    srun_pmix_kill9: kill9;
    srun_pmix_abort: abort;
    srun_pmix_exit_request: exit_request;
}
