//! The PMIx client under Open MPI's `mpirun` (4.x: ORTE with a PMIx server; as root
//! with `--allow-run-as-root --oversubscribe`). Built only with the `pmix` feature
//! (`cargo test -p gex-boot --features pmix --test launch_mpirun`, which `ci/test`'s
//! `mpirun` step runs). The cases are in `common`.
//!
//! Open MPI's launcher (`mpirun.openmpi`, Debian's `openmpi-bin`) must be in `PATH`:
//! without it these tests fail.

mod common;

use common::Launcher::Mpirun;

common::launcher_cases! {
    Mpirun;
    mpirun_collectives: collectives;
    mpirun_exit_codes: exit_codes;
    mpirun_kill9: kill9;
    mpirun_abort: abort;
    mpirun_exit_request: exit_request;
}
