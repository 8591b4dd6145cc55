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

#[test]
#[ignore = "needs a running Slurm: ci/slurm.sh test"]
fn srun_pmi2_collectives() {
    common::collectives(SrunPmi2, "srun_pmi2_collectives");
}

#[test]
#[ignore = "needs a running Slurm: ci/slurm.sh test"]
fn srun_pmi2_exit_codes() {
    common::exit_codes(SrunPmi2, "srun_pmi2_exit_codes");
}

#[test]
#[ignore = "needs a running Slurm: ci/slurm.sh test"]
fn srun_pmi2_kill9() {
    common::kill9(SrunPmi2, "srun_pmi2_kill9");
}

#[test]
#[ignore = "needs a running Slurm: ci/slurm.sh test"]
fn srun_pmi2_abort() {
    common::abort(SrunPmi2, "srun_pmi2_abort");
}

#[test]
#[ignore = "needs a running Slurm: ci/slurm.sh test"]
fn srun_pmi2_exit_request() {
    common::exit_request(SrunPmi2, "srun_pmi2_exit_request");
}

#[test]
#[ignore = "needs a running Slurm: ci/slurm.sh test"]
fn srun_pmi2_time_limit() {
    common::time_limit(SrunPmi2, "srun_pmi2_time_limit");
}

#[cfg(feature = "pmix")]
#[test]
#[ignore = "needs a running Slurm: ci/slurm.sh test"]
fn srun_pmix_collectives() {
    common::collectives(SrunPmix, "srun_pmix_collectives");
}

#[cfg(feature = "pmix")]
#[test]
#[ignore = "needs a running Slurm: ci/slurm.sh test"]
fn srun_pmix_exit_codes() {
    common::exit_codes(SrunPmix, "srun_pmix_exit_codes");
}

#[cfg(feature = "pmix")]
#[test]
#[ignore = "needs a running Slurm: ci/slurm.sh test"]
fn srun_pmix_kill9() {
    common::kill9(SrunPmix, "srun_pmix_kill9");
}

#[cfg(feature = "pmix")]
#[test]
#[ignore = "needs a running Slurm: ci/slurm.sh test"]
fn srun_pmix_abort() {
    common::abort(SrunPmix, "srun_pmix_abort");
}

#[cfg(feature = "pmix")]
#[test]
#[ignore = "needs a running Slurm: ci/slurm.sh test"]
fn srun_pmix_exit_request() {
    common::exit_request(SrunPmix, "srun_pmix_exit_request");
}
