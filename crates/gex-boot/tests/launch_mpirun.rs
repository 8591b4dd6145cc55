//! The PMIx client under Open MPI's `mpirun` (4.x: ORTE with a PMIx server; as root
//! with `--allow-run-as-root --oversubscribe`). Built only with the `pmix` feature
//! (`cargo test -p gex-boot --features pmix --test launch_mpirun`, which `ci/test`'s
//! `mpirun` step runs). The cases are in `common`.
//!
//! Open MPI's launcher (`mpirun.openmpi`, Debian's `openmpi-bin`) must be in `PATH`:
//! without it these tests fail.

mod common;

use common::Launcher::Mpirun;

#[test]
fn mpirun_collectives() {
    common::collectives(Mpirun, "mpirun_collectives");
}

#[test]
fn mpirun_exit_codes() {
    common::exit_codes(Mpirun, "mpirun_exit_codes");
}

#[test]
fn mpirun_kill9() {
    common::kill9(Mpirun, "mpirun_kill9");
}

#[test]
fn mpirun_abort() {
    common::abort(Mpirun, "mpirun_abort");
}

#[test]
fn mpirun_exit_request() {
    common::exit_request(Mpirun, "mpirun_exit_request");
}
