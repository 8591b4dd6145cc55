//! Bad input to the `gex` facade (docs/testing.md, "Bad input"): conduit names that
//! are not compiled in, launcher environments that name no bootstrap, bad conduit
//! settings and segments no conduit can map, through every entry (`select_conduit`,
//! `start`, `init`, `init_with`, `init_with_boot`, `launch_or_start`, `launch_or_run`, and
//! `ClientBuilder::init` with the run-time conduit). Each must be the documented
//! `InitError`, never a panic.
//!
//! The entries that read the process environment are tried in a child process (the
//! test binary runs its own `child_entry` test with a clean environment plus the
//! variables under test, and prints what the entry returned).

use gex::boot::{BootError, Singleton};
use gex::spi::Conduit;
use gex::{AnyConduit, Config, InitError, Job};

/// The variant of an init error, for the parent to match.
fn variant(e: &InitError) -> &'static str {
    match e {
        InitError::Boot(BootError::Environment(_)) => "Boot(Environment)",
        InitError::Boot(_) => "Boot(other)",
        InitError::Config(_) => "Config",
        InitError::Conduit { .. } => "Conduit",
        InitError::Layer { .. } => "Layer",
        InitError::Os { .. } => "Os",
        _ => "other",
    }
}

/// A job that only says which conduit it ran on.
struct Name;

impl Job for Name {
    type Output = &'static str;
    fn run<C: Conduit>(self, client: gex::Client<C>) -> &'static str {
        client.conduit_name()
    }
}

/// A job that finalises its client and says which conduit it ran on and its rank.
struct NameAndRank;

impl Job for NameAndRank {
    type Output = String;
    fn run<C: Conduit>(self, client: gex::Client<C>) -> String {
        let s = format!(
            "{} {}/{}",
            client.conduit_name(),
            client.rank(),
            client.size()
        );
        client.finalize().expect("finalize");
        s
    }
}

fn show<T>(r: Result<T, InitError>, ok: impl FnOnce(T) -> String) -> String {
    match r {
        Ok(x) => format!("ok {}", ok(x)),
        Err(e) => format!("err {}: {e}", variant(&e)),
    }
}

#[test]
#[ignore = "run by the other tests of this file in a child process"]
fn child_entry() {
    let Ok(what) = std::env::var(gex_testkit::child::VAR) else {
        return;
    };
    let b = || gex::builder().segment_size(1 << 16);
    let line = match what.as_str() {
        "start" => show(gex::start(b()), |c| c.conduit_name().to_string()),
        "init" => show(gex::init(), |c| c.conduit_name().to_string()),
        "init_with" => show(gex::init_with(b(), Name), str::to_string),
        "init_with_boot" => show(
            gex::init_with_boot(b(), Box::new(Singleton::new()), None, Name),
            str::to_string,
        ),
        "launch_or_start" => show(gex::launch_or_start(2, b()), |c| {
            c.conduit_name().to_string()
        }),
        "launch_or_run" => show(gex::launch_or_run(2, b(), NameAndRank), |s| s),
        other => panic!("unknown child action {other}"),
    };
    println!("RESULT {line}");
}

fn expect(what: &str, env: &[(&str, &str)], want: &str, mentions: &str) {
    gex_testkit::child::expect("child_entry", what, env, want, mentions);
}

#[test]
fn unknown_conduit_names_are_config_errors() {
    for name in [
        "carrier-pigeon",
        "smp2",
        "lo opback",
        "ofi-but-not-built",
        "\u{0}",
    ] {
        if gex::conduits().contains(&name) {
            continue;
        }
        let r = gex::select_conduit(Some(name));
        assert!(
            matches!(&r, Err(InitError::Config(m)) if m.contains("loopback")),
            "{name:?}: {r:?}"
        );
        let r = gex::init_with_boot(
            gex::builder().segment_size(4096),
            Box::new(Singleton::new()),
            Some(name),
            Name,
        );
        assert!(matches!(r, Err(InitError::Config(_))), "{name:?}: {r:?}");
        // The run-time conduit reads GEX_CONDUIT from the builder's configuration.
        let r = gex::builder()
            .segment_size(4096)
            .config(Config::from_pairs([("GEX_CONDUIT", name)]))
            .init::<AnyConduit>(Box::new(Singleton::new()));
        assert!(matches!(r, Err(InitError::Config(_))), "{name:?}: {r:?}");
    }
    // Case and blanks do not matter; empty means the default.
    assert_eq!(gex::select_conduit(Some(" LoopBack ")).unwrap(), "loopback");
    assert_eq!(gex::select_conduit(Some("")).unwrap(), gex::DEFAULT_CONDUIT);
}

/// Every entry that reads the environment: a `GEX_BOOT` naming no bootstrap is
/// `InitError::Boot(BootError::Environment)`, a `GEX_CONDUIT` naming no compiled-in
/// conduit `InitError::Config`, a malformed core setting `InitError::Config`.
#[test]
fn bad_environments_fail_every_entry() {
    for what in [
        "start",
        "init",
        "init_with",
        "launch_or_start",
        "launch_or_run",
    ] {
        expect(
            what,
            &[("GEX_BOOT", "carrier-pigeon")],
            "err Boot(Environment)",
            "GEX_BOOT",
        );
        expect(
            what,
            &[("GEX_BOOT", "fork"), ("GEX_BOOT_FD", "x")],
            "err Boot(Environment)",
            "GEX_BOOT_FD",
        );
    }
    for what in ["start", "init", "init_with", "init_with_boot"] {
        expect(
            what,
            &[("GEX_CONDUIT", "carrier-pigeon")],
            "err Config",
            "GEX_CONDUIT",
        );
        expect(
            what,
            &[("GEX_CONDUIT", "loopback"), ("GEX_ENDPOINTS", "many")],
            "err Config",
            "GEX_ENDPOINTS",
        );
    }
    // Started alone with a good environment: a job of one rank.
    expect(
        "init_with",
        &[("GEX_CONDUIT", "loopback")],
        "ok loopback",
        "",
    );
}

/// The shared-memory conduit's own settings and a segment no memory holds.
#[cfg(feature = "smp")]
#[test]
fn bad_smp_settings_and_segments_are_errors() {
    let smp = |pairs: &[(&str, &str)]| {
        gex::init_with_boot(
            gex::ClientBuilder::new()
                .segment_size(1 << 16)
                .config(Config::from_pairs(pairs.iter().copied())),
            Box::new(Singleton::new()),
            Some("smp"),
            Name,
        )
    };
    for (var, val) in [
        ("GEX_SMP_RING_SIZE", "lots"),
        ("GEX_SMP_RING_SIZE", "1000"),
        ("GEX_SMP_RING_SIZE", "64"),
        ("GEX_SMP_RING_SIZE", "3M"),
        ("GEX_SMP_MAX_MEDIUM", "-1"),
        ("GEX_SMP_MAX_MEDIUM", "1G"),
    ] {
        let r = smp(&[(var, val)]);
        assert!(
            matches!(&r, Err(InitError::Config(m)) if m.contains(var)),
            "{var}={val}: {r:?}"
        );
    }
    // 8 EiB - 1 GiB and 16 EiB - 1 GiB: no memfd can be that long (one endpoint slot:
    // with the default capacity of 16, the region's size already overflows).
    for size in ["8589934591G", "17179869183G"] {
        let r = smp(&[("GEX_SEGMENT_SIZE", size), ("GEX_MAX_ENDPOINTS", "1")]);
        assert!(matches!(r, Err(InitError::Os { .. })), "{size}: {r:?}");
    }
    // usize::MAX bytes: the region's size (segment, rings, doorbells) overflows.
    let r = smp(&[("GEX_SEGMENT_SIZE", "18446744073709551615")]);
    assert!(
        matches!(&r, Err(InitError::Config(m)) if m.contains("overflows")),
        "{r:?}"
    );
}

/// The counterpart of the bad inputs above: started alone, `launch_or_run` launches the
/// program as a job of 2 ranks, each of which runs the job (monomorphised for the
/// default conduit) and prints its result; the launching process exits with the job's
/// code (0).
#[test]
fn launch_or_run_starts_a_job_and_runs_it_in_every_rank() {
    let stdout = gex_testkit::child::run("child_entry", "launch_or_run", &[]);
    let mut got: Vec<&str> = gex_testkit::child::results(&stdout).collect();
    got.sort_unstable();
    let d = gex::DEFAULT_CONDUIT;
    assert_eq!(
        got,
        [format!("ok {d} 0/2"), format!("ok {d} 1/2")],
        "{stdout}"
    );
}
