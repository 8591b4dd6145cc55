//! Bad command lines and environments given to `gex-info` (docs/testing.md, "Bad
//! input"): every one exits 2 with a message on stderr, never a panic. (`coll -n 0`,
//! an unknown `GEX_COLL_BROADCAST` and `ofi` without the feature are in `cli.rs`.)

use std::process::{Command, Output};

fn gex_info(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gex-info"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("gex-info runs")
}

fn usage_error(args: &[&str], env: &[(&str, &str)], mentions: &str) {
    let o = gex_info(args, env);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{args:?} {env:?}: {err}");
    assert!(err.contains(mentions), "{args:?} {env:?}: {err}");
    assert!(!err.contains("panicked"), "{args:?} {env:?}: {err}");
}

#[test]
fn bad_arguments_exit_2() {
    usage_error(&["bogus"], &[], "unrecognized subcommand");
    usage_error(&["coll", "-n", "x"], &[], "--size");
    usage_error(&["coll", "-n", "-1"], &[], "-1");
    usage_error(&["coll", "-n", "4294967296"], &[], "--size");
    usage_error(&["boot", "--connect"], &[], "--connect");
}

#[test]
fn bad_environments_exit_2_naming_the_variable() {
    usage_error(&["boot"], &[("GEX_BOOT", "mpi")], "GEX_BOOT");
    usage_error(
        &["boot", "--no-connect"],
        &[("GEX_BOOT", "mpi")],
        "GEX_BOOT",
    );
    usage_error(
        &["boot"],
        &[("GEX_BOOT", "fork"), ("GEX_BOOT_FD", "x")],
        "GEX_BOOT_FD",
    );
    usage_error(
        &["coll"],
        &[("GEX_COLL_TUNE", "sometimes")],
        "GEX_COLL_TUNE",
    );
    usage_error(&["coll"], &[("GEX_COLL_LOGGP", "1,2")], "GEX_COLL_LOGGP");
    usage_error(
        &["coll"],
        &[("GEX_COLL_PROFILE", "/nonexistent/gex-profile.toml")],
        "GEX_COLL_PROFILE",
    );
}

/// A view that reports on the conduits says when a setting keeps one from opening,
/// and still succeeds (it is a report, not a job).
#[test]
fn conduits_reports_a_bad_setting_per_conduit() {
    let o = gex_info(&["conduits"], &[("GEX_SEGMENT_SIZE", "lots")]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{o:?}");
    assert!(
        text.contains("cannot open here") && text.contains("GEX_SEGMENT_SIZE"),
        "{text}"
    );
}
