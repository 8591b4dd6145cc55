//! Bad command lines and files given to `gex-tune` (docs/testing.md, "Bad input"):
//! argument errors exit 2 with the parser's message; a conduit that is not compiled
//! in exits 2; a malformed state file ends the run with a message naming the file
//! and line. Never a panic.

use std::process::{Command, Output};

fn gex_tune(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gex-tune"))
        .args(args)
        .env_remove("GEX_CONDUIT")
        .output()
        .expect("gex-tune runs")
}

#[test]
fn bad_arguments_exit_2() {
    for (args, mentions) in [
        (&["bogus"][..], "unrecognized subcommand"),
        (&["tune", "--op", "nonesuch"][..], "not an operation"),
        (&["tune", "--sizes", "8,x"][..], "not a size"),
        (
            &["tune", "--sizes", "99999999999999999999G"][..],
            "not a size",
        ),
        (&["tune", "--buffers", "heap"][..], "not a placement"),
        (&["overlap", "--len", "4K"][..], "less than 16 pages"),
        (&["overlap", "--len", "lots"][..], "not a size"),
        (&["-n", "x", "tune"][..], "--ranks"),
        (
            &["--conduit", "carrier-pigeon", "tune"][..],
            "carrier-pigeon",
        ),
    ] {
        let o = gex_tune(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(mentions), "{args:?}: {err}");
    }
}

#[test]
fn a_malformed_state_file_is_reported_with_its_line() {
    let dir = std::env::temp_dir().join(format!("gex-tune-bad-input-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let state = dir.join("bad.state");
    std::fs::write(&state, "garbage [[\n").unwrap();
    let out = dir.join("p.toml");
    let o = gex_tune(&[
        "-n",
        "1",
        "--conduit",
        "loopback",
        "tune",
        "--quick",
        "--op",
        "barrier",
        "--sizes",
        "8",
        "-o",
        out.to_str().unwrap(),
        "--state",
        state.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    let wrote = out.exists();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("bad.state:1"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(!wrote, "a profile was written");
}

/// `gex-tune overlap` writes the conduit's table of the overlap profile (keeping the
/// other tables, and gex-overlap reads it back), and leaves a malformed file alone,
/// naming its line.
#[test]
fn overlap_writes_its_profile_and_refuses_a_malformed_one() {
    let dir = std::env::temp_dir().join(format!("gex-tune-overlap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("ov.toml");
    let keep = "[ofi]\noverhead_ns = 1\ngap_ns_per_byte = 1\nround_trip_ns = 1\nfault_ns = 1\nmprotect_ns = 1\n";
    std::fs::write(&out, keep).unwrap();
    let run = |file: &std::path::Path| {
        gex_tune(&[
            "-n",
            "1",
            "--conduit",
            "loopback",
            "overlap",
            "--len",
            "256K",
            "-o",
            file.to_str().unwrap(),
        ])
    };
    let o = run(&out);
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[loopback]\nfault_ns = fast\n").unwrap();
    let ob = run(&bad);
    let bad_after = std::fs::read_to_string(&bad).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let p = gex::overlap::OverlapProfile::parse(&text).unwrap();
    let lb = p.get("loopback").expect("the loopback table");
    assert!(lb.gap_ns_per_byte > 0.0 && lb.mprotect_ns > 0.0, "{lb:?}");
    assert_eq!(
        p.get("ofi").unwrap().fault_ns,
        1.0,
        "the other table is kept"
    );
    let err = String::from_utf8_lossy(&ob.stderr);
    assert!(!ob.status.success());
    assert!(err.contains("bad.toml: line 2"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(bad_after, "[loopback]\nfault_ns = fast\n");
}
