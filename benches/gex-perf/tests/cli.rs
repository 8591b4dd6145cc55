//! End-to-end runs of the `gex-perf` binary.

use std::process::Command;

fn gex_perf() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gex-perf"));
    // A rank started by these tests must not think it runs under a launcher.
    c.env_remove("GEX_BOOT");
    c
}

/// Runs `cmd`, asserts it succeeded and returns its standard output.
fn stdout_ok(cmd: &mut Command) -> String {
    let out = cmd.output().expect("gex-perf runs");
    assert!(
        out.status.success(),
        "{cmd:?}: stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// A quick `am` run on the loopback conduit, in JSON.
const LOOPBACK_AM: &[&str] = &[
    "-n",
    "1",
    "--conduit",
    "loopback",
    "am",
    "--quick",
    "--json",
];

#[test]
fn quick_json_on_loopback_has_the_documented_keys() {
    let text = stdout_ok(gex_perf().args(LOOPBACK_AM));
    let mut names = Vec::new();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("one JSON object per line");
        let o = v.as_object().expect("an object");
        let mut keys: Vec<&str> = o.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "conduit",
                "max",
                "min",
                "name",
                "ranks",
                "ranks_as",
                "size",
                "threads_per_process",
                "unit",
                "value"
            ]
        );
        assert_eq!(o["ranks_as"], "processes");
        assert_eq!(o["threads_per_process"], 1);
        assert_eq!(o["conduit"], "loopback");
        assert_eq!(o["ranks"], 1);
        let unit = o["unit"].as_str().expect("unit");
        assert!(unit == "us" || unit == "GB/s", "{unit}");
        let (value, min, max) = (
            o["value"].as_f64().unwrap(),
            o["min"].as_f64().unwrap(),
            o["max"].as_f64().unwrap(),
        );
        assert!(min <= value && value <= max && min > 0.0, "{line}");
        names.push(o["name"].as_str().unwrap().to_string());
    }
    for t in [
        "am_short_rtt",
        "am_medium_rtt",
        "am_long_rtt",
        "am_short_flood",
        "am_medium_flood_bw",
        "am_long_flood_bw",
    ] {
        assert!(names.iter().any(|n| n == t), "{t} missing from {names:?}");
    }
}

#[test]
fn test_selection_and_sizes() {
    let text = stdout_ok(gex_perf().args(LOOPBACK_AM).args([
        "--test",
        "am_medium_rtt",
        "--sizes",
        "16,1K",
        "--iters",
        "50",
    ]));
    let sizes: Vec<u64> = text
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["size"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(sizes, [16, 1024]);
}

#[test]
fn unknown_conduit_fails_with_a_message() {
    let out = gex_perf()
        .args(["--conduit", "carrier-pigeon", "am"])
        .output()
        .expect("gex-perf runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("carrier-pigeon") && err.contains("loopback"),
        "{err}"
    );
}

#[cfg(feature = "smp")]
/// The `name` of every row that has one, in order.
fn row_names(rows: &[serde_json::Value]) -> Vec<&str> {
    rows.iter().filter_map(|r| r["name"].as_str()).collect()
}

fn rows(args: &[&str]) -> Vec<serde_json::Value> {
    stdout_ok(gex_perf().args(args))
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect()
}

#[cfg(feature = "smp")]
/// The rows of `gex-perf ARGS`, asserted to be named `names`, in that order.
fn rows_named(args: &[&str], names: &[&str]) -> Vec<serde_json::Value> {
    let rows = rows(args);
    assert_eq!(row_names(&rows), names, "{args:?}");
    rows
}

#[cfg(feature = "smp")]
/// Asserts that there are `n` rows and that every one is `ok`.
fn assert_every(rows: &[serde_json::Value], n: usize, ok: impl Fn(&serde_json::Value) -> bool) {
    assert_eq!(rows.len(), n, "{rows:?}");
    assert!(rows.iter().all(ok), "{rows:?}");
}

#[cfg(feature = "smp")]
/// The `(name, size)` of every row, in order.
fn names_and_sizes(rows: &[serde_json::Value]) -> Vec<(&str, u64)> {
    rows.iter()
        .map(|r| (r["name"].as_str().unwrap(), r["size"].as_u64().unwrap()))
        .collect()
}

#[cfg(feature = "smp")]
#[test]
fn smp_pairs_run_concurrently_and_rank0_reports() {
    // 3 ranks: one pair and an idle rank; 4 ranks: two pairs, median over pairs.
    for n in ["2", "3", "4"] {
        let rows = rows(&[
            "-n",
            n,
            "am",
            "--json",
            "--test",
            "am_short_rtt",
            "--test",
            "am_long_rtt",
            "--test",
            "am_short_flood",
            "--sizes",
            "8,4K",
            "--iters",
            "400",
            "--batches",
            "3",
        ]);
        let got: Vec<(String, u64)> = rows
            .iter()
            .map(|r| {
                (
                    r["name"].as_str().unwrap().to_string(),
                    r["size"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("am_short_rtt".into(), 0),
                ("am_long_rtt".into(), 8),
                ("am_long_rtt".into(), 4096),
                ("am_short_flood".into(), 0)
            ],
            "n = {n}"
        );
        for r in &rows {
            assert_eq!(r["conduit"], "smp");
            assert_eq!(r["ranks"].as_u64().unwrap().to_string(), n);
        }
    }
}

#[cfg(feature = "smp")]
#[test]
fn smp_atomic_reports_fetch_add_latency_and_rate() {
    let rows = rows(&["-n", "2", "atomic", "--json", "--quick"]);
    let got: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r["name"].as_str().unwrap(), r["unit"].as_str().unwrap()))
        .collect();
    assert_eq!(
        got,
        [("atomic_fadd_lat", "us"), ("atomic_fadd_rate", "Mop/s")]
    );
    for r in &rows {
        assert_eq!(r["conduit"], "smp");
        assert_eq!(r["ranks"], 2);
        assert_eq!(r["size"], 8);
        let (v, min, max) = (
            r["value"].as_f64().unwrap(),
            r["min"].as_f64().unwrap(),
            r["max"].as_f64().unwrap(),
        );
        assert!(0.0 < min && min <= v && v <= max, "{r}");
    }
    // One rank has no peer: a clear error, not a hang.
    let out = gex_perf()
        .args(["-n", "1", "atomic", "--quick"])
        .output()
        .expect("gex-perf runs");
    assert!(!out.status.success());
}

/// `put --sizes 8` adds the rows with OpenSHMEM put + quiet's semantics after the
/// plain latency: `put_fence_lat` and `put_val_fence_lat` (8 B, µs; positive, min ≤
/// median ≤ max), and only when 8 B is among the sizes.
#[cfg(feature = "smp")]
#[test]
fn smp_put_reports_the_fenced_rows_at_8_bytes() {
    let got8 = rows(&["-n", "2", "put", "--json", "--quick", "--sizes", "8"]);
    assert_eq!(
        names_and_sizes(&got8),
        [
            ("put_lat", 8),
            ("put_fence_lat", 8),
            ("put_val_fence_lat", 8),
            ("put_observed_lat", 8)
        ]
    );
    for r in &got8 {
        let (v, min, max) = (
            r["value"].as_f64().unwrap(),
            r["min"].as_f64().unwrap(),
            r["max"].as_f64().unwrap(),
        );
        assert!(0.0 < min && min <= v && v <= max, "{r}");
    }
    // Without the 8-byte size the fenced rows are not run.
    let got16 = rows(&["-n", "2", "put", "--json", "--quick", "--sizes", "16"]);
    assert!(
        got16
            .iter()
            .all(|r| !r["name"].as_str().unwrap().contains("fence")),
        "{got16:?}"
    );
}

/// One batch of 200 short-AM round trips (`am_short_rtt`).
#[cfg(any(feature = "ofi", feature = "ibv"))]
const AM_SHORT_RTT: &[&str] = &[
    "am",
    "--test",
    "am_short_rtt",
    "--iters",
    "200",
    "--batches",
    "1",
];

/// Over the libfabric conduit the JSON lines name the conduit and the provider
/// (issue 5's interface): `"conduit":"ofi"`, `"provider":"tcp;ofi_rxm"` with
/// `GEX_OFI_PROVIDER=tcp`, `"provider":"shm"` with `shm`.
#[cfg(feature = "ofi")]
#[test]
fn json_lines_over_ofi_carry_conduit_and_provider() {
    for (prov, want) in [("tcp", "tcp;ofi_rxm"), ("shm", "shm")] {
        let text = stdout_ok(
            gex_perf()
                .env("GEX_OFI_PROVIDER", prov)
                .args(["-n", "2", "--no-pin", "--conduit", "ofi"])
                .args(AM_SHORT_RTT)
                .arg("--json"),
        );
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1, "{prov}: {text}");
        let v: serde_json::Value = serde_json::from_str(lines[0]).expect("a JSON object");
        assert_eq!(v["conduit"], "ofi", "{prov}: {text}");
        assert_eq!(v["provider"], want, "{prov}: {text}");
        assert_eq!(v["name"], "am_short_rtt", "{prov}: {text}");
        assert!(v["value"].as_f64().is_some_and(|x| x > 0.0), "{text}");
    }
}

/// Over ofi `tcp;ofi_rxm` the delta kernel's blocking baseline completes (its waits
/// serve the endpoint: the peer's put into the waiting rank progresses only while it
/// polls; it hung in its first round before), and the delta variant then stops with
/// a message naming the unmapped segment (delta send-recv needs mapped segments)
/// instead of hanging. Killed and failed after two minutes.
#[cfg(feature = "ofi")]
#[test]
fn overlap_delta_pair_over_ofi_ends_with_a_clear_error() {
    let mut child = gex_perf()
        .env("GEX_OFI_PROVIDER", "tcp")
        .args([
            "-n",
            "2",
            "--no-pin",
            "--conduit",
            "ofi",
            "overlap",
            "--kernel",
            "pair",
        ])
        .args(["--size", "64K", "--rounds", "1", "--work", "16", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("gex-perf runs");
    let t0 = std::time::Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if t0.elapsed() > std::time::Duration::from_secs(120) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("gex-perf overlap --kernel pair over ofi still runs after 2 minutes");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let out = child.wait_with_output().expect("output");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("segment is not mapped"), "{err}");
}

/// `coll`: one `coll_<op>_lat` line per operation and size with the algorithm that ran;
/// `--algorithm` forces it, and a name the operation does not have fails the job.
#[cfg(feature = "smp")]
#[test]
fn coll_reports_latency_and_algorithm_per_op_and_size() {
    let all = rows(&["-n", "3", "coll", "--quick", "--json"]);
    let names = row_names(&all);
    for op in [
        "barrier",
        "broadcast",
        "reduce",
        "allreduce",
        "gather_all",
        "exchange",
    ] {
        let name = format!("coll_{op}_lat");
        assert!(names.contains(&name.as_str()), "{name} missing: {names:?}");
    }
    for r in &all {
        assert_eq!(r["ranks"], 3, "{r}");
        assert_eq!(r["unit"], "us", "{r}");
        assert!(r["value"].as_f64().is_some_and(|v| v > 0.0), "{r}");
        assert!(
            r["algorithm"].as_str().is_some_and(|a| !a.is_empty()),
            "{r}"
        );
        assert_eq!(r["buffers"], "segment", "{r}");
    }
    // Quick runs on 2 ranks of one operation, with `more` options.
    let quick2 =
        |more: &[&str]| rows(&[&["-n", "2", "coll", "--quick", "--json"][..], more].concat());
    let private = quick2(&["--op", "exchange", "--buffers", "private"]);
    assert_every(&private, 2, |r| r["buffers"] == "private");
    let forced = quick2(&["--op", "broadcast", "--algorithm", "binomial"]);
    assert_eq!(forced.len(), 2, "{forced:?}");
    for r in &forced {
        assert_eq!(r["name"], "coll_broadcast_lat");
        assert_eq!(r["algorithm"], "binomial");
    }
    let out = gex_perf()
        .args([
            "-n",
            "2",
            "coll",
            "--quick",
            "--op",
            "allreduce",
            "--algorithm",
            "nosuch",
        ])
        .output()
        .expect("gex-perf runs");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not an algorithm of allreduce"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = gex_perf()
        .args(["coll", "--op", "teleport"])
        .output()
        .expect("gex-perf runs");
    assert_eq!(out.status.code(), Some(2));
}

/// `coll --sizes`: exactly the sizes asked for, in order, on either side of the
/// small-broadcast ring's limit and beyond the default segment (an exchange of 4 MiB
/// blocks on 3 ranks needs 24 MiB of buffers: the segment grows with the sizes);
/// a size of 0 is a usage error.
#[cfg(feature = "smp")]
#[test]
fn coll_sizes_are_the_ones_asked_for() {
    let got = rows(&[
        "-n",
        "3",
        "coll",
        "--quick",
        "--json",
        "--op",
        "broadcast",
        "--op",
        "exchange",
        "--sizes",
        "56,57,4M",
    ]);
    assert_eq!(
        names_and_sizes(&got),
        [
            ("coll_broadcast_lat", 56),
            ("coll_broadcast_lat", 57),
            ("coll_broadcast_lat", 4 << 20),
            ("coll_exchange_lat", 56),
            ("coll_exchange_lat", 57),
            ("coll_exchange_lat", 4 << 20),
        ]
    );
    let out = gex_perf()
        .args(["coll", "--sizes", "8,0"])
        .output()
        .expect("gex-perf runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("at least 1 byte"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[cfg(feature = "smp")]
#[test]
fn progress_thread_serves_the_get_while_the_target_computes() {
    // The target computes 40 ms per round without calling gex; the origin's get
    // (active-message path) starts 1 ms in. Without a progress thread it waits for the
    // computation to end; with one it is served meanwhile. The latencies are compared
    // with the target's own time (at least 40 ms; more when it is descheduled).
    let run = |thread: bool| {
        let mut args = vec![
            "-n",
            "2",
            "progress",
            "--json",
            "--compute-ms",
            "40",
            "--rounds",
            "5",
        ];
        if thread {
            args.push("--thread");
        }
        let rows = rows_named(
            &args,
            &[
                "progress_get_lat",
                "progress_compute_ms",
                "progress_compute_rate",
            ],
        );
        for r in &rows {
            assert_eq!(r["algorithm"], if thread { "thread" } else { "no-thread" });
            assert_eq!(r["ranks"], 2);
        }
        let v = |i: usize| rows[i]["value"].as_f64().expect("a value");
        assert!(v(1) >= 40.0, "the target computed {} ms, not 40", v(1));
        assert!(v(2) > 0.0, "no compute rate: {rows:?}");
        (v(0) / 1000.0, v(1)) // (get latency in ms, target's compute time in ms)
    };
    let (without, compute) = run(false);
    assert!(
        without > 0.5 * compute,
        "without a thread the get took {without} ms while the target computed {compute} ms"
    );
    let (with, compute) = run(true);
    assert!(
        with < 0.25 * compute,
        "with a thread the get took {with} ms while the target computed {compute} ms"
    );
}

#[cfg(feature = "smp")]
#[test]
fn soak_verifies_every_operation_and_fails_on_corruption() {
    let rows = rows(&["-n", "4", "soak", "--seconds", "2", "--json"]);
    let get = |name: &str| {
        rows.iter()
            .find(|r| r["name"] == name)
            .and_then(|r| r["value"].as_f64())
            .unwrap_or_else(|| panic!("no {name} in {rows:?}"))
    };
    assert!(get("soak_ops") > 100.0, "{rows:?}");
    assert_eq!(get("soak_errors"), 0.0);
    assert!(get("soak_seconds") >= 2.0);
    // The checks are live: corrupting Medium payloads before they leave makes the job
    // fail with the differences named.
    let out = gex_perf()
        .args(["-n", "2", "soak", "--seconds", "1", "--corrupt"])
        .output()
        .expect("gex-perf runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("differs"), "{err}");
    assert!(err.contains("errors in"), "{err}");
}

/// The thread-rank layouts the tests run: one process of 2 thread ranks, and 2
/// processes of 2 thread ranks each (a mixed job).
#[cfg(feature = "smp")]
const THREAD_LAYOUTS: [(&[&str], u64); 2] = [
    (&["--threads", "2"], 2),
    (&["-n", "4", "--threads", "2"], 4),
];

/// `rows` for `args` after each thread layout, checking that every line says its ranks
/// are threads, two per process, and how many ranks the job has.
#[cfg(feature = "smp")]
fn thread_rows(args: &[&str]) -> Vec<(u64, Vec<serde_json::Value>)> {
    THREAD_LAYOUTS
        .iter()
        .map(|&(layout, ranks)| {
            let all: Vec<&str> = layout.iter().chain(args).copied().collect();
            let rows = rows(&all);
            assert!(!rows.is_empty(), "{all:?}: no output");
            for r in &rows {
                assert_eq!(r["ranks_as"], "threads", "{all:?}: {r}");
                assert_eq!(r["threads_per_process"], 2, "{all:?}: {r}");
                assert_eq!(r["ranks"], ranks, "{all:?}: {r}");
                assert!(r["value"].as_f64().is_some(), "{all:?}: {r}");
            }
            (ranks, rows)
        })
        .collect()
}

#[cfg(feature = "smp")]
#[test]
fn am_on_thread_ranks_and_mixed_jobs() {
    for (ranks, rows) in thread_rows(&[
        "am",
        "--json",
        "--test",
        "am_short_rtt",
        "--test",
        "am_medium_rtt",
        "--sizes",
        "8,4K",
        "--iters",
        "200",
        "--batches",
        "3",
    ]) {
        let names: Vec<&str> = rows.iter().map(|r| r["name"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            ["am_short_rtt", "am_medium_rtt", "am_medium_rtt"],
            "{ranks} ranks"
        );
    }
}

#[cfg(feature = "smp")]
#[test]
fn barrier_and_coll_on_thread_ranks_and_mixed_jobs() {
    for (ranks, rows) in thread_rows(&["barrier", "--quick", "--json"]) {
        assert!(
            rows.iter().all(|r| r["name"] == "barrier_lat"),
            "{ranks}: {rows:?}"
        );
    }
    for (ranks, rows) in thread_rows(&["coll", "--quick", "--json"]) {
        for op in ["barrier", "broadcast", "allreduce", "exchange"] {
            let name = format!("coll_{op}_lat");
            assert!(
                rows.iter().any(|r| r["name"] == name),
                "{ranks}: {name} missing"
            );
        }
    }
}

#[cfg(feature = "smp")]
#[test]
fn storm_on_processes_threads_and_mixed_jobs_loses_nothing() {
    let check = |rows: &[serde_json::Value], what: &str| {
        let get = |name: &str| {
            rows.iter()
                .find(|r| r["name"] == name)
                .and_then(|r| r["value"].as_f64())
                .unwrap_or_else(|| panic!("{what}: no {name} in {rows:?}"))
        };
        assert_eq!(get("storm_errors"), 0.0, "{what}");
        assert!(get("storm_rate") > 0.0, "{what}");
        assert!(get("storm_messages") > 0.0, "{what}");
        let waits = get("storm_backpressure_wait");
        let p99 = get("storm_backpressure_wait_p99");
        assert!(0.0 <= waits && waits <= p99, "{what}: {waits} {p99}");
        if get("storm_backpressure_events") == 0.0 {
            assert_eq!(p99, 0.0, "{what}");
        }
    };
    let args = ["storm", "--seconds", "0.5", "--json"];
    let procs = rows(&[&["-n", "3"][..], &args].concat());
    check(&procs, "3 processes");
    assert!(procs.iter().all(|r| r["ranks_as"] == "processes"));
    for (ranks, rows) in thread_rows(&args) {
        check(&rows, &format!("{ranks} thread ranks"));
    }
    // A fixed count: every rank sends exactly that many.
    let counted = rows(&[
        "--threads",
        "2",
        "storm",
        "--count",
        "300",
        "--max-size",
        "1K",
        "--json",
    ]);
    check(&counted, "--count");
    assert!(
        counted
            .iter()
            .any(|r| r["name"] == "storm_messages" && r["value"] == 600.0)
    );
    // The checks are live: corrupted payloads fail the job, naming the checksum.
    let out = gex_perf()
        .args([
            "-n",
            "4",
            "--threads",
            "2",
            "storm",
            "--count",
            "200",
            "--corrupt",
        ])
        .output()
        .expect("gex-perf runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("checksum"), "{err}");
}

#[cfg(feature = "smp")]
#[test]
fn domains_reports_every_thread_count_against_one() {
    let rows = rows(&[
        "-n",
        "1",
        "domains",
        "--eps",
        "2,1,3",
        "--seconds",
        "0.05",
        "--json",
    ]);
    let get = |name: &str, n: u64| {
        rows.iter()
            .find(|r| r["name"] == name && r["size"] == n)
            .and_then(|r| r["value"].as_f64())
            .unwrap_or_else(|| panic!("no {name} for {n} in {rows:?}"))
    };
    // N = 1 comes first (the reference), repeats are dropped, every N is reported.
    assert_eq!(rows[0]["name"], "domains_rate");
    assert_eq!(rows[0]["size"], 1);
    assert_eq!(rows.len(), 6, "{rows:?}");
    assert_eq!(get("domains_speedup", 1), 1.0);
    for n in [1, 2, 3] {
        let (rate, speedup) = (get("domains_rate", n), get("domains_speedup", n));
        assert!(rate > 0.0, "{n}: {rate}");
        let want = rate / get("domains_rate", 1);
        assert!(
            (speedup - want).abs() < 1e-9 * want.max(1.0),
            "{n}: {speedup} {want}"
        );
    }
    // The same with every endpoint made at init.
    let at_init = crate::rows(&[
        "-n",
        "1",
        "domains",
        "--eps",
        "2",
        "--seconds",
        "0.05",
        "--at-init",
        "--json",
    ]);
    assert_every(&at_init, 4, |r| r["value"].as_f64().unwrap() > 0.0);
}

#[test]
fn threads_must_divide_the_ranks() {
    let out = gex_perf()
        .args(["-n", "3", "--threads", "2", "am"])
        .output()
        .expect("gex-perf runs");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("multiple"), "{err}");
}

/// `args` after each layout of `n` ranks, with the `ranks_as` it reports: `-n n`
/// (processes) and `--threads n` (thread ranks of one process).
#[cfg(feature = "smp")]
fn layouts<'a>(n: &'a str, args: &[&'a str]) -> [(Vec<&'a str>, &'static str); 2] {
    [(["-n", n], "processes"), (["--threads", n], "threads")]
        .map(|(layout, ranks_as)| (layout.iter().chain(args).copied().collect(), ranks_as))
}

/// The figures every `msg` run reports (the pair tests between ranks 0 and 1).
#[cfg(feature = "smp")]
const MSG_PAIR_FIGURES: [&str; 5] = [
    "msg_pingpong_lat",
    "msg_pingpong_bw",
    "msg_bi_lat",
    "msg_bibw",
    "msg_bi_rate",
];

#[cfg(feature = "smp")]
#[test]
fn msg_quick_on_two_processes_and_two_thread_ranks() {
    for (all, ranks_as) in layouts("2", &["msg", "--quick", "--json"]) {
        let rows = rows(&all);
        for r in &rows {
            assert_eq!(r["ranks"], 2, "{all:?}: {r}");
            assert_eq!(r["ranks_as"], ranks_as, "{all:?}: {r}");
            let (v, lo, hi) = (
                r["value"].as_f64().unwrap(),
                r["min"].as_f64().unwrap(),
                r["max"].as_f64().unwrap(),
            );
            assert!(0.0 < lo && lo <= v && v <= hi, "{all:?}: {r}");
        }
        for name in MSG_PAIR_FIGURES {
            assert!(
                rows.iter().any(|r| r["name"] == name),
                "{all:?}: {name} missing"
            );
        }
        // Any-source needs a third rank: skipped with 2.
        assert!(!rows.iter().any(|r| r["name"] == "msg_anysource_rate"));
        // The ping-pong runs at the quick sizes, one of them above the eager limit
        // (rendezvous), in the units of the MPI anchor.
        let pp: Vec<(u64, &str)> = rows
            .iter()
            .filter(|r| r["name"] == "msg_pingpong_lat")
            .map(|r| (r["size"].as_u64().unwrap(), r["unit"].as_str().unwrap()))
            .collect();
        assert_eq!(pp, [(8, "us"), (4096, "us"), (65536, "us")], "{all:?}");
        assert!(
            rows.iter()
                .filter(|r| r["name"] == "msg_pingpong_bw" || r["name"] == "msg_bibw")
                .all(|r| r["unit"] == "MB/s")
        );
    }
}

#[cfg(feature = "smp")]
#[test]
fn msg_anysource_rate_on_three_ranks() {
    for (all, ranks_as) in layouts("3", &["msg", "--quick", "--json", "--sizes", "8"]) {
        let rows = rows(&all);
        let any: Vec<&serde_json::Value> = rows
            .iter()
            .filter(|r| r["name"] == "msg_anysource_rate")
            .collect();
        assert_eq!(any.len(), 1, "{all:?}: {rows:?}");
        let r = any[0];
        assert_eq!(r["ranks"], 3, "{r}");
        assert_eq!(r["ranks_as"], ranks_as, "{r}");
        assert_eq!(r["unit"], "msg/s", "{r}");
        assert_eq!(r["size"], 8, "{r}");
        assert!(r["value"].as_f64().unwrap() > 0.0, "{r}");
        for name in MSG_PAIR_FIGURES {
            assert!(
                rows.iter().any(|r| r["name"] == name && r["size"] == 8),
                "{all:?}: {name} missing"
            );
        }
    }
}

#[test]
fn overlap_kernel_reports_both_sides_and_the_speedup() {
    // Correctness only (every round's checksum is verified by the benchmark; the
    // figures are not judged here: the machine is shared).
    let rows = rows_named(
        &[
            "-n", "2", "overlap", "--json", "--size", "1M", "--rounds", "3", "--work", "8",
        ],
        &[
            "overlap_get_stream_blocking",
            "overlap_get_stream_demand",
            "overlap_get_stream_speedup",
            "overlap_strip",
            "overlap_get_stream_equal",
            "overlap_get_stream_variable",
            "overlap_get_stream_variable_speedup",
            "overlap_strip_variable",
            "overlap_get_stream_floor",
            "overlap_get_stream_floor_speedup",
        ],
    );
    assert_eq!(rows[2]["unit"], "x");
    assert_eq!(rows[6]["unit"], "x");
    assert_eq!(rows[8]["unit"], "us");
    assert_eq!(rows[9]["unit"], "x");
    // The variable plan's first strip is shorter than the get, and there are at
    // least two strips.
    let first = rows[7]["value"].as_f64().unwrap();
    assert!(first >= 4096.0 && first < f64::from(1 << 20), "{first}");
    assert!(rows[7]["max"].as_f64().unwrap() >= 2.0, "{}", rows[7]);
    for r in &rows {
        assert_eq!(r["size"], 1 << 20);
        assert!(r["value"].as_f64().expect("a value") > 0.0, "{r}");
    }
    let strip = rows[3]["value"].as_f64().unwrap();
    assert!(strip >= 4096.0 && strip <= f64::from(1 << 20), "{strip}");
}

#[test]
fn overlap_halo_kernel_reports_every_mode_and_its_speedup() {
    // Correctness only: the last iteration of every round checks every halo byte (a
    // wrong byte fails the run); the figures are not judged here.
    let rows = rows_named(
        &[
            "-n", "3", "overlap", "--json", "--kernel", "halo", "--puts", "8", "--iters", "5",
            "--rounds", "2",
        ],
        &[
            "overlap_halo_plain",
            "overlap_halo_train",
            "overlap_halo_train_speedup",
            "overlap_halo_piggyback",
            "overlap_halo_piggyback_speedup",
            "overlap_halo_auto",
            "overlap_halo_auto_speedup",
            "overlap_halo_request",
            "overlap_halo_request_speedup",
        ],
    );
    assert_kernel_rows(&rows, 16, 3);
}

/// Every row of an overlap kernel: its size and ranks, a positive value, and the unit
/// its name says (`_speedup` rows `x`, the others `us`).
fn assert_kernel_rows(rows: &[serde_json::Value], size: u64, ranks: u64) {
    for r in rows {
        assert_eq!(
            (r["size"].as_u64(), r["ranks"].as_u64()),
            (Some(size), Some(ranks)),
            "{r}"
        );
        let speedup = r["name"].as_str().unwrap().ends_with("speedup");
        assert_eq!(r["unit"], if speedup { "x" } else { "us" }, "{r}");
        assert!(r["value"].as_f64().expect("a value") > 0.0, "{r}");
    }
}

#[test]
fn overlap_delta_kernels_report_both_sides_and_the_speedups() {
    // Correctness only: every rank compares the checksums of the two variants of each
    // round (a mismatch fails the run); the figures are not judged here.
    let mut want = Vec::new();
    for k in ["pair", "cascade", "ring", "reduce"] {
        let base = if k == "pair" { "whole" } else { "blocking" };
        for side in [base, "delta", "speedup"] {
            want.push(format!("overlap_delta_{k}_{side}"));
        }
    }
    let want: Vec<&str> = want.iter().map(String::as_str).collect();
    let all = rows_named(
        &[
            "-n", "4", "overlap", "--json", "--kernel", "delta", "--size", "64K", "--rounds", "2",
            "--work", "16",
        ],
        &want,
    );
    assert_kernel_rows(&all, 64 << 10, 4);
    // The pair with OS-triggered tracking, on 2 ranks.
    rows_named(
        &[
            "-n",
            "2",
            "overlap",
            "--json",
            "--kernel",
            "pair",
            "--os-triggered",
            "--size",
            "64K",
            "--rounds",
            "2",
            "--work",
            "16",
            "--fraction",
            "4",
        ],
        &[
            "overlap_delta_pair_whole",
            "overlap_delta_pair_delta",
            "overlap_delta_pair_speedup",
        ],
    );
}

/// Over the ibv conduit (its software emulation here: this machine has no RDMA device)
/// gex-perf runs unchanged: AM round trips, RMA puts and a collective, the JSON lines
/// naming the conduit and the verbs provider.
#[cfg(feature = "ibv")]
#[test]
fn runs_over_the_ibv_emulation() {
    for args in [
        AM_SHORT_RTT,
        &["put", "--quick", "--sizes", "8,65536"][..],
        &["atomic", "--quick"][..],
    ] {
        let text = stdout_ok(
            gex_perf()
                .env("GEX_IBV_PROVIDER", "emu")
                .args(["-n", "2", "--no-pin", "--conduit", "ibv"])
                .args(args)
                .arg("--json"),
        );
        let first = text.lines().next().unwrap_or_default();
        let v: serde_json::Value = serde_json::from_str(first).expect("a JSON object");
        assert_eq!(v["conduit"], "ibv", "{text}");
        assert_eq!(v["provider"], "emu", "{text}");
        assert!(v["value"].as_f64().is_some_and(|x| x > 0.0), "{text}");
    }
}
