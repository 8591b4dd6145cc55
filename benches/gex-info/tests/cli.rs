//! gex-info's command line: each view prints what the build offers, errors exit 2.

use std::process::{Command, Output};

fn gex_info(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gex-info"));
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("gex-info runs")
}

fn stdout(o: &Output) -> String {
    assert!(o.status.success(), "{o:?}");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn conduits_lists_every_compiled_conduit_with_capabilities() {
    let text = stdout(&gex_info(&["conduits"], &[]));
    for name in gex::conduits() {
        assert!(text.contains(name), "{name} missing:\n{text}");
    }
    assert!(text.contains("(default)"), "{text}");
    // The shared-memory conduit maps neighbours and builds payloads in place.
    #[cfg(feature = "smp")]
    assert!(
        text.contains("NP_IN_PLACE | SHARED_MEMORY | BLOCKING_WAIT"),
        "{text}"
    );
}

#[test]
fn env_shows_values_and_defaults() {
    let text = stdout(&gex_info(&["env"], &[("GEX_SEGMENT_SIZE", "3M")]));
    let line = text
        .lines()
        .find(|l| l.starts_with("GEX_SEGMENT_SIZE "))
        .expect("listed");
    assert!(line.contains("3M") && line.contains("default"), "{line}");
    assert_eq!(
        text.lines().filter(|l| l.starts_with("GEX_")).count(),
        gex::env_vars().len()
    );
}

/// `gex-info env | head`: a reader that goes away ends the output quietly (exit 0, no
/// panic message).
#[test]
fn env_into_a_closed_pipe_ends_quietly() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gex-info"))
        .arg("env")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("gex-info runs");
    // The reader closes before the child writes (it is still starting).
    drop(child.stdout.take());
    let o = child.wait_with_output().expect("gex-info ends");
    assert!(o.status.success(), "{o:?}");
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn coll_prints_a_choice_per_operation_and_follows_overrides() {
    let text = stdout(&gex_info(&["coll", "-n", "16"], &[]));
    assert!(text.starts_with("team size 16"), "{text}");
    for op in ["barrier", "broadcast", "allreduce", "exchange", "scan"] {
        assert!(text.lines().any(|l| l.starts_with(op)), "{op}:\n{text}");
    }
    let forced = stdout(&gex_info(
        &["coll", "-n", "16"],
        &[("GEX_COLL_BROADCAST", "binomial")],
    ));
    let rows: Vec<&str> = forced
        .lines()
        .filter(|l| l.starts_with("broadcast"))
        .collect();
    assert!(!rows.is_empty());
    for r in rows {
        assert_eq!(r.split_whitespace().nth(2), Some("binomial"), "{r}");
    }
}

/// What a job on one host runs (issue 29): an 8-rank team with shared memory takes
/// `shm` for small allreduce and barrier, directly in the caller, and the small
/// broadcast through the ring; the same team without shared memory, or over two
/// hosts, moves messages (or runs host stages).
#[test]
fn coll_shows_the_path_a_job_on_this_host_takes() {
    let row = |text: &str, op: &str, bytes: &str| -> Vec<String> {
        text.lines()
            .find(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                w.first() == Some(&op) && (op == "barrier" || w.get(1) == Some(&bytes))
            })
            .unwrap_or_else(|| panic!("no {op} {bytes} row:\n{text}"))
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    let host = stdout(&gex_info(&["coll", "-n", "8"], &[]));
    assert!(host.contains("one host, shared memory"), "{host}");
    let ar = row(&host, "allreduce", "8");
    assert_eq!(
        (ar[2].as_str(), ar[4].as_str()),
        ("shm", "shm-direct"),
        "{host}"
    );
    let bar = row(&host, "barrier", "0");
    assert_eq!(
        (bar[2].as_str(), bar[4].as_str()),
        ("shm", "shm-direct"),
        "{host}"
    );
    let bc = row(&host, "broadcast", "8");
    assert_eq!(
        (bc[2].as_str(), bc[4].as_str()),
        ("shm", "shm-ring"),
        "{host}"
    );
    let msgs = stdout(&gex_info(&["coll", "-n", "8", "--no-shm"], &[]));
    let ar = row(&msgs, "allreduce", "8");
    assert_ne!(ar[2], "shm", "{msgs}");
    assert_eq!(ar[4], "messages", "{msgs}");
    let two = stdout(&gex_info(&["coll", "-n", "8", "--hosts", "2"], &[]));
    assert!(two.contains("2 hosts"), "{two}");
    assert!(two.lines().skip(2).all(|l| !l.contains("shm-")), "{two}");
    let o = gex_info(&["coll", "-n", "4", "--hosts", "5"], &[]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
}

#[test]
fn bad_input_exits_2_with_a_message() {
    let o = gex_info(&["coll", "-n", "0"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("at least one member"));
    let o = gex_info(&["coll"], &[("GEX_COLL_BROADCAST", "no-such-algorithm")]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    #[cfg(not(feature = "ofi"))]
    {
        let o = gex_info(&["ofi"], &[]);
        assert_eq!(o.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&o.stderr).contains("--features ofi"));
    }
}

#[cfg(feature = "ofi")]
#[test]
fn ofi_reports_provider_and_paths() {
    let text = stdout(&gex_info(&["ofi"], &[("GEX_OFI_PROVIDER", "tcp")]));
    assert!(text.contains("tcp;ofi_rxm"), "{text}");
    assert!(text.contains("RMA put/get"), "{text}");
}

#[cfg(feature = "ofi")]
#[test]
fn ofi_reports_the_local_buffer_path_and_why() {
    let text = stdout(&gex_info(&["ofi"], &[("GEX_OFI_PROVIDER", "tcp")]));
    assert!(
        text.contains("RMA local buffers: no registration needed")
            && text.contains("does not require FI_MR_LOCAL"),
        "{text}"
    );
    let text = stdout(&gex_info(
        &["ofi"],
        &[("GEX_OFI_PROVIDER", "shm"), ("GEX_OFI_MR_LOCAL", "1")],
    ));
    let line = text
        .lines()
        .find(|l| l.contains("RMA local buffers"))
        .unwrap_or_else(|| panic!("no local-buffer path: {text}"));
    assert!(
        line.contains("client regions") && line.contains("GEX_OFI_MR_LOCAL=1"),
        "{line}"
    );
    assert!(text.contains("atomics: native"), "{text}");
}

#[test]
fn boot_says_which_bootstrap_and_why() {
    // No launcher: a singleton, and the one rank connects.
    let no_launcher = [
        ("GEX_BOOT", ""),
        ("PMI_FD", ""),
        ("PMI_PORT", ""),
        ("PMIX_RANK", ""),
    ];
    let text = stdout(&gex_info(&["boot"], &no_launcher));
    assert!(
        text.starts_with("bootstrap: singleton (detected)\n"),
        "{text}"
    );
    assert!(
        text.contains("rank 0 of 1: bootstrap singleton, host ids [0]"),
        "{text}"
    );
    // The detection order, without connecting: PMIx before PMI-2 before PMI-1.
    let pmi1 = [("PMI_FD", "9"), ("PMI_RANK", "0"), ("PMI_SIZE", "2")];
    let text = stdout(&gex_info(&["boot", "--no-connect"], &pmi1));
    assert!(text.starts_with("bootstrap: pmi (detected)\n"), "{text}");
    assert!(text.contains("PMI_FD is set without PMI_JOBID"), "{text}");
    let pmi2 = [("PMI_FD", "9"), ("PMI_JOBID", "7.0"), ("PMI_RANK", "0")];
    let text = stdout(&gex_info(&["boot", "--no-connect"], &pmi2));
    assert!(text.starts_with("bootstrap: pmi2 (detected)\n"), "{text}");
    let pmix = [
        ("PMIX_NAMESPACE", "ns"),
        ("PMIX_RANK", "0"),
        ("PMI_FD", "9"),
        ("PMI_JOBID", "7"),
    ];
    let text = stdout(&gex_info(&["boot", "--no-connect"], &pmix));
    assert!(text.starts_with("bootstrap: pmix (detected)\n"), "{text}");
    assert!(text.contains("PMIX_NAMESPACE=ns"), "{text}");
    let text = stdout(&gex_info(
        &["boot", "--no-connect"],
        &[("GEX_BOOT", "pmi2")],
    ));
    assert!(text.starts_with("bootstrap: pmi2 (forced)\n"), "{text}");
}

/// Without the PMIx client, a process under a PMIx server fails with a message
/// saying what is missing, instead of running as a one-rank job.
#[cfg(not(feature = "pmix"))]
#[test]
fn boot_under_pmix_without_the_client_is_an_error() {
    let pmix = [("PMIX_NAMESPACE", "ns"), ("PMIX_RANK", "0")];
    let o = gex_info(&["boot"], &pmix);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("gex-boot/pmix") && err.contains("GEX_BOOT=singleton"),
        "{err}"
    );
    assert!(err.contains("PMIX_NAMESPACE=ns"), "{err}");
}

/// `gex-info layout --threads 3`: three thread ranks of one process, said so.
#[cfg(feature = "smp")]
#[test]
fn layout_of_thread_ranks_says_one_process() {
    let text = stdout(&gex_info(&["layout", "--threads", "3"], &[]));
    let pid = |line: &str| {
        line.split("process ")
            .nth(1)
            .and_then(|t| t.split(',').next())
            .map(str::to_owned)
    };
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("rank ")).collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines.iter().all(|l| pid(l) == pid(lines[0])), "{text}");
    assert!(
        lines[1].contains("threads of one process with ranks [0, 1, 2]"),
        "{text}"
    );
    assert!(
        text.contains("3 rank(s), all threads of one process"),
        "{text}"
    );
}

/// `gex-info layout` without `--threads` honours `GEX_THREADS`, as a program started
/// by `gex-run --threads T` must: alone it runs that many thread ranks of one process.
#[cfg(feature = "smp")]
#[test]
fn layout_honours_gex_threads() {
    let text = stdout(&gex_info(&["layout"], &[("GEX_THREADS", "2")]));
    assert!(
        text.contains("2 rank(s), all threads of one process"),
        "{text}"
    );
    let o = gex_info(&["layout"], &[("GEX_THREADS", "two")]);
    assert!(!o.status.success(), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("GEX_THREADS"),
        "{o:?}"
    );
}

/// `gex-info ibv` says clearly that there is no RDMA device here (this machine has none:
/// the libibverbs provider finds none, or is not built in), shows the emulation, and
/// what the conduit would choose: nothing by default (naming the emulation's setting),
/// the emulation with `GEX_IBV_PROVIDER=emu`.
#[cfg(feature = "ibv")]
#[test]
fn ibv_says_no_rdma_device_and_what_it_would_choose() {
    let text = stdout(&gex_info(&["ibv"], &[]));
    assert!(text.contains("no RDMA device"), "{text}");
    assert!(
        text.contains("software emulation (emu): device emu0"),
        "{text}"
    );
    assert!(text.contains("would choose: nothing"), "{text}");
    assert!(text.contains("GEX_IBV_PROVIDER=emu"), "{text}");
    let text = stdout(&gex_info(&["ibv"], &[("GEX_IBV_PROVIDER", "emu")]));
    assert!(
        text.contains("would choose: the software emulation"),
        "{text}"
    );
}

#[cfg(not(feature = "ibv"))]
#[test]
fn ibv_needs_the_feature() {
    let o = gex_info(&["ibv"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--features ibv"));
}
