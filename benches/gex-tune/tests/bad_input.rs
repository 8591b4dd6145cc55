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
