//! Every fuzz target for a fixed number of executions from a fixed seed, and every
//! saved input of `corpus/` replayed (the minimised inputs of the bugs the targets
//! found, among others). `ci/test fuzz` runs the targets for longer.

use gex_fuzz::{Options, fuzz, replay, saved_inputs};
use std::time::Duration;

#[test]
fn every_target_passes_a_short_run() {
    let out = std::env::temp_dir().join(format!("gex-fuzz-test-{}", std::process::id()));
    let mut failed = Vec::new();
    for t in gex_fuzz::all() {
        let opts = Options {
            time: Duration::from_secs(60),
            max_execs: Some(2_000),
            seed: 42,
            out: out.clone(),
            ..Options::default()
        };
        let r = fuzz(&t, &opts);
        assert_eq!(r.execs, 2_000, "{}", t.name);
        if let Some(f) = r.failure {
            failed.push(format!("{}: {} ({:?})", t.name, f.message, f.path));
        }
    }
    let _ = std::fs::remove_dir_all(out);
    assert!(failed.is_empty(), "{failed:#?}");
}

#[test]
fn every_seed_runs_cleanly() {
    // Seeds are what the fuzzer starts from: each must pass the target's checks.
    for t in gex_fuzz::all() {
        for s in (t.seeds)() {
            replay(&t, &s).unwrap_or_else(|e| panic!("{}: seed {s:?}: {e}", t.name));
        }
    }
}

#[test]
fn saved_inputs_pass() {
    let mut n = 0;
    for t in gex_fuzz::all() {
        for (path, input) in saved_inputs(t.name) {
            if let Err(e) = replay(&t, &input) {
                panic!("{}: {}: {e}", t.name, path.display());
            }
            n += 1;
        }
    }
    assert!(n > 0, "no saved input found under benches/gex-fuzz/corpus");
}

#[test]
fn names_are_unique_and_listed() {
    let all = gex_fuzz::all();
    let mut names: Vec<&str> = all.iter().map(|t| t.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), all.len());
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/testing.md"
    ))
    .expect("docs/testing.md");
    for t in &all {
        assert!(
            doc.contains(&format!("| `{}` |", t.name)),
            "target {} has no row in the fuzz table of docs/testing.md",
            t.name
        );
    }
}
