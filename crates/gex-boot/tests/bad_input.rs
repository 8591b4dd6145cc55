//! Bad input to gex-boot (docs/testing.md, "Bad input"): malformed or contradictory
//! launcher environments given to `from_env`/`spawn_self`, bad job specifications
//! given to `run_job` and `parse_hosts`, and bad `gex-run` arguments. Each must be the
//! documented error (or usage exit code), never a panic or a hang.
//!
//! The environment is process-wide, so each environment is tried in a child process:
//! the test binary runs its own `child_bootstrap` test with a clean environment plus
//! the variables under test, and that test prints what `from_env` (or `spawn_self`)
//! returned.

use gex_boot::launch::{JobSpec, LaunchError, parse_hosts, run_job};
use gex_core::boot::BootError;
use std::process::{Command, Stdio};

const GEX_RUN: &str = env!("CARGO_BIN_EXE_gex-run");

/// The variant of a bootstrap error, for the parent to match.
fn boot_variant(e: &BootError) -> &'static str {
    match e {
        BootError::Environment(_) => "Environment",
        BootError::Lost(_) => "Lost",
        BootError::Protocol(_) => "Protocol",
        BootError::Io(_) => "Io",
        _ => "other",
    }
}

#[test]
#[ignore = "run by the other tests of this file in a child process"]
fn child_bootstrap() {
    let Ok(what) = std::env::var(gex_testkit::child::VAR) else {
        return;
    };
    let line = match what.as_str() {
        "from_env" => match gex_boot::from_env() {
            Ok(b) => format!("ok {}", b.name()),
            Err(e) => format!("err {}: {e}", boot_variant(&e)),
        },
        "detect" => match gex_boot::detect() {
            Ok(d) => format!("ok {}", d.backend.name()),
            Err(e) => format!("err {}: {e}", boot_variant(&e)),
        },
        "spawn_self" => match gex_boot::spawn_self(2) {
            Ok(gex_boot::Role::Rank(b)) => format!("ok rank {}", b.name()),
            Ok(gex_boot::Role::Launcher(c)) => format!("ok launcher {c}"),
            Err(LaunchError::Boot(e)) => format!("err Boot({}): {e}", boot_variant(&e)),
            Err(e) => format!("err other: {e}"),
        },
        other => panic!("unknown child action {other}"),
    };
    println!("RESULT {line}");
}

/// A call of `child_bootstrap` (`detect`, `from_env`), its environment, and what its
/// error mentions.
type Case = (
    &'static str,
    Vec<(&'static str, &'static str)>,
    &'static str,
);

fn expect(what: &str, env: &[(&str, &str)], want: &str, mentions: &str) {
    gex_testkit::child::expect("child_bootstrap", what, env, want, mentions);
}

/// `GEX_BOOT` naming no backend, and every backend's environment missing or
/// malformed: `BootError::Environment` naming the variable.
#[test]
fn malformed_launcher_environments_are_environment_errors() {
    let fork = |fd: &'static str, rank: &'static str, size: &'static str| {
        vec![
            ("GEX_BOOT", "fork"),
            ("GEX_BOOT_FD", fd),
            ("GEX_RANK", rank),
            ("GEX_SIZE", size),
        ]
    };
    let mut cases: Vec<Case> = vec![
        ("detect", vec![("GEX_BOOT", "mpi")], "GEX_BOOT"),
        ("from_env", vec![("GEX_BOOT", "Fork")], "GEX_BOOT"),
        ("from_env", vec![("GEX_BOOT", "fork")], "GEX_BOOT_FD"),
        ("from_env", fork("three", "0", "1"), "GEX_BOOT_FD"),
        ("from_env", fork("-1", "0", "1"), "GEX_BOOT_FD"),
        ("from_env", fork("99999999999", "0", "1"), "GEX_BOOT_FD"),
        ("from_env", fork("5", "x", "1"), "GEX_RANK"),
        ("from_env", fork("5", "0", ""), "GEX_SIZE"),
        // Standard streams, out-of-range and closed descriptors are not the
        // launcher's socket.
        ("from_env", fork("1", "0", "1"), "standard stream"),
        ("from_env", fork("4294967295", "0", "1"), "GEX_BOOT_FD"),
        ("from_env", fork("1000", "0", "1"), "not an open descriptor"),
        // PMI-1 and PMI-2 without (or with malformed) launcher variables.
        ("from_env", vec![("GEX_BOOT", "pmi")], "PMI_FD"),
        ("from_env", vec![("GEX_BOOT", "pmi2")], "PMI_FD"),
        (
            "from_env",
            vec![("GEX_BOOT", "pmi1"), ("PMI_FD", "seven")],
            "PMI_FD",
        ),
        (
            "from_env",
            vec![("PMI_FD", "1000"), ("PMI_RANK", "0"), ("PMI_SIZE", "1")],
            "PMI_FD",
        ),
        (
            "from_env",
            vec![("PMI_FD", "1000"), ("PMI_JOBID", "1.0"), ("PMI_RANK", "0")],
            "PMI_FD",
        ),
        (
            "from_env",
            vec![("PMI_PORT", "127.0.0.1:1"), ("PMI_RANK", "0")],
            "PMI_PORT",
        ),
        ("from_env", vec![("PMI_PORT", "nowhere")], "PMI"),
    ];
    if !gex_boot::PMIX_BUILT {
        cases.push(("from_env", vec![("GEX_BOOT", "pmix")], "pmix"));
        cases.push((
            "from_env",
            vec![("PMIX_NAMESPACE", "ns"), ("PMIX_RANK", "0")],
            "pmix",
        ));
    }
    for (what, env, mentions) in &cases {
        expect(what, env, "err Environment", mentions);
    }
    // Empty values count as unset: a job of one rank.
    expect(
        "from_env",
        &[("GEX_BOOT", ""), ("PMI_FD", "")],
        "ok singleton",
        "",
    );
}

/// A process that looks like a rank (`GEX_BOOT` set) never launches: `spawn_self`
/// returns its bootstrap error as `LaunchError::Boot`.
#[test]
fn spawn_self_in_a_rank_with_a_bad_environment_is_a_boot_error() {
    expect(
        "spawn_self",
        &[("GEX_BOOT", "carrier-pigeon")],
        "err Boot(Environment)",
        "GEX_BOOT",
    );
    expect(
        "spawn_self",
        &[
            ("GEX_BOOT", "fork"),
            ("GEX_BOOT_FD", "2"),
            ("GEX_RANK", "0"),
            ("GEX_SIZE", "1"),
        ],
        "err Boot(Environment)",
        "GEX_BOOT_FD",
    );
}

#[test]
fn bad_job_specifications_are_launch_errors() {
    assert!(matches!(
        run_job(&JobSpec::new(0, "true")),
        Err(LaunchError::NoRanks)
    ));
    for spec in [
        JobSpec::new(3, "true").hosts(["a", "b"]),
        JobSpec::new(2, "true").hosts(["a", "b c"]),
        JobSpec::new(2, "true").hosts(["a", ""]),
        JobSpec::new(2, "true").hosts(["{host}", "a"]),
        JobSpec::new(2, "true").host_exec(["env"]),
    ] {
        let r = run_job(&spec);
        assert!(matches!(r, Err(LaunchError::Hosts(_))), "{spec:?}: {r:?}");
    }
    let r = run_job(&JobSpec::new(2, "/nonexistent/gex-bad-input-program"));
    assert!(matches!(r, Err(LaunchError::Spawn { .. })), "{r:?}");
    let r = run_job(
        &JobSpec::new(1, "true")
            .hosts(["a"])
            .host_exec(["/nonexistent/gex-bad-input-prefix", "{host}"]),
    );
    assert!(matches!(r, Err(LaunchError::Spawn { .. })), "{r:?}");
}

#[test]
fn bad_host_lists_are_hosts_errors() {
    for list in [
        "",
        "a,,b",
        ",a",
        "a,",
        "a*0",
        "a*x",
        "a*-1",
        "a*",
        "*2",
        "a b",
        "a\tb",
        "{a}",
        "a*2*3",
        "a*99999999999999999999",
    ] {
        let r = parse_hosts(list);
        assert!(matches!(r, Err(LaunchError::Hosts(_))), "{list:?}: {r:?}");
    }
    assert_eq!(parse_hosts("a*2,b").unwrap(), ["a", "a", "b"]);
}

/// `gex-run` usage errors exit with 2 and a message (the argument parser's for
/// malformed options), a program that cannot be executed with 127.
#[test]
fn bad_gex_run_arguments_are_usage_errors() {
    let run = |args: &[&str]| {
        Command::new(GEX_RUN)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    for (args, mentions) in [
        (&["-n", "two", "true"][..], "not a number of ranks"),
        (&["-n", "-3", "true"][..], "not a number of ranks"),
        (&["-n", "4294967296", "true"][..], "not a number of ranks"),
        (&["-n", "2"][..], "PROG"),
        (&["-n", "2", "--threads", "0", "true"][..], "at least 1"),
        (
            &["-n", "2", "--threads", "x", "true"][..],
            "not a number of thread ranks",
        ),
        (&["true"][..], "--ranks"),
        (&["-n", "1", "--host-exec", "env", "true"][..], "--hosts"),
        (&["-n", "1", "--hosts", "a b", "true"][..], "whitespace"),
        (
            &["-n", "1", "--hosts", "a", "--host-exec", "", "true"][..],
            "empty",
        ),
    ] {
        let out = run(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(mentions), "{args:?}: {err}");
    }
    // After the options, anything is the program (`--` is optional): an unknown
    // option there is a program that cannot be executed.
    let out = run(&["-n", "1", "--bogus", "true"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(127), "{err}");
    assert!(err.contains("cannot execute --bogus"), "{err}");
}
