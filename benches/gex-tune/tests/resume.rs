//! `gex-tune tune` end to end on 2 ranks: an interrupted run leaves a state file, the
//! next run resumes from it (timing only the remaining cells) and writes a profile
//! that gex-coll's tuner loads.

use gex_coll::{Profile, Reason, Tuner, catalog};
use std::process::Command;

fn tune(dir: &std::path::Path, extra: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gex-tune"))
        .args([
            "-n",
            "2",
            "tune",
            "--quick",
            "--op",
            "barrier",
            "--op",
            "broadcast",
        ])
        .args(["--sizes", "8,4K", "-o"])
        .arg(dir.join("p.toml"))
        .args(extra)
        .output()
        .expect("gex-tune runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn interrupted_run_resumes_and_the_profile_loads() {
    let dir = std::env::temp_dir().join(format!("gex-tune-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let state = dir.join("p.toml.state");
    // Stopped after 2 cells (barrier, broadcast 8 B): exit code 3, state kept.
    let (code, err) = tune(&dir, &["--stop-after", "2"]);
    assert_eq!(code, 3, "{err}");
    let s = Profile::load(state.to_str().unwrap()).unwrap();
    assert_eq!(s.cells.len(), 2, "{s:?}");
    assert!(s.loggp.is_some());
    assert!(!dir.join("p.toml").exists());
    // Resumed: only broadcast 4 KiB is left.
    let (code, err) = tune(&dir, &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("resuming") && err.contains("2 cells done, 1 to go"),
        "{err}"
    );
    assert!(!state.exists());
    let path = dir.join("p.toml");
    let p = Profile::load(path.to_str().unwrap()).unwrap();
    assert_eq!(p.cells.len(), 3);
    // The calibration of the first run was kept, not redone.
    assert_eq!(p.loggp, s.loggp);
    for c in &p.cells {
        assert_eq!(c.team, 2);
        let best = c.times.iter().min_by(|a, b| a.1.total_cmp(&b.1)).unwrap();
        assert_eq!(best.0, c.choice);
        assert!(
            c.times.len() >= 2 && c.times.iter().all(|t| t.1 > 0.0),
            "{c:?}"
        );
    }
    // The tuner loads it and follows it.
    let mut t = Tuner::new(catalog(), gex_coll::LogGP::default());
    let ps = path.to_str().unwrap().to_string();
    t.configure(|k| (k == "GEX_COLL_PROFILE").then(|| ps.clone()))
        .unwrap();
    // The tuned job ran on one host (smp), where the world team has a shared-memory channel.
    let q = gex_tune::measure::query(gex_coll::OpKind::Broadcast, 2, 4096, true);
    let c = t.explain(&q).unwrap();
    assert_eq!(c.reason, Reason::Profile);
    assert_eq!(c.algorithm, p.cells[2].choice);
    // A stale state file for another team size is refused.
    std::fs::write(
        &state,
        s.to_toml().replace("ranks = \"2\"", "ranks = \"3\""),
    )
    .unwrap();
    let (code, err) = tune(&dir, &[]);
    assert_ne!(code, 0);
    assert!(err.contains("is for 3 ranks"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
