//! The smp conduit in a job started by MPICH's Hydra `mpiexec`: the ranks bootstrap
//! through gex-boot's PMI-1 client (`gex_boot::from_env()` finds `PMI_FD`), open a
//! real client on the smp conduit, exchange Short AMs between every pair and finalize.
//!
//! The test runs `mpiexec.hydra -n 4 <this test binary> <test name> --exact
//! --nocapture --test-threads=1` with `GEXTEST_MPI_DIR` set; the copies find that
//! variable and play the ranks. MPICH's `mpiexec.hydra` (or `mpiexec.mpich`) must be
//! in `PATH` (`apt-get install mpich`; `ci/test` installs it); without it the test
//! fails loudly unless `GEXTEST_ALLOW_NO_MPIEXEC=1`. (This test lives here rather
//! than in gex-boot because only the facade and benchmarks may depend on a conduit.)

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime};

use gex_conduit_smp::Smp;
use gex_core::{Am, ClientBuilder, EpAddr, Flags, Token};

/// Set in the ranks: the job's scratch directory (and the rank marker).
const RANK_DIR: &str = "GEXTEST_MPI_DIR";
const ALLOW_MISSING: &str = "GEXTEST_ALLOW_NO_MPIEXEC";
const LIMIT: Duration = Duration::from_secs(60);
const RANKS: u32 = 4;

fn find_mpiexec() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    ["mpiexec.hydra", "mpiexec.mpich"].iter().find_map(|name| {
        std::env::split_paths(&path)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

/// Whether `pid` is gone (no such process, or a zombie waiting to be reaped).
fn is_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.trim_start().starts_with('Z'))
            .unwrap_or(false),
    }
}

fn pids(dir: &Path) -> Vec<u32> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.strip_prefix("pid.")?.parse().ok()
        })
        .collect()
}

fn kill(pid: u32, sig: rustix::process::Signal) {
    if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(p, sig);
    }
}

/// What every rank does.
fn rank_body(dir: &Path) {
    std::fs::write(dir.join(format!("pid.{}", std::process::id())), "").unwrap();
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_secs(30));
        eprintln!("rank watchdog: mpiexec did not end the job; exiting 99");
        std::process::exit(99);
    });
    let boot = gex_boot::from_env().expect("bootstrap");
    assert_eq!(boot.name(), "pmi");
    let c = ClientBuilder::new()
        .segment_size(1 << 20)
        .init::<Smp>(boot)
        .expect("smp client under mpiexec");
    let (me, n) = (c.rank(), c.size());
    assert_eq!(n, RANKS);
    let mut ep = c.endpoint(0).unwrap();
    let replies = Arc::new(AtomicU32::new(0));
    let seen = replies.clone();
    ep.register(200, move |t: &mut Token<'_>, am: Am<'_>| {
        // args: [sender, nonce]; answer with [this rank, nonce + 1].
        assert_eq!(am.args()[0], t.src().rank);
        t.reply_short(201, &[me, am.args()[1] + 1]).unwrap();
    })
    .unwrap();
    ep.register(201, move |t: &mut Token<'_>, am: Am<'_>| {
        let from = t.src().rank;
        assert_eq!(am.args(), &[from, 1000 * me + from + 1]);
        seen.fetch_add(1, Ordering::Relaxed);
    })
    .unwrap();
    for peer in 0..n {
        ep.request_short(
            EpAddr::rank(peer),
            200,
            &[me, 1000 * me + peer],
            Flags::empty(),
        )
        .unwrap();
    }
    ep.wait_until(|| replies.load(Ordering::Relaxed) == n);
    ep.barrier().unwrap();
    c.finalize().expect("finalize");
    std::fs::write(dir.join(format!("done.{me}")), "").unwrap();
}

#[test]
fn smp_client_under_mpiexec() {
    const NAME: &str = "smp_client_under_mpiexec";
    if let Some(dir) = std::env::var_os(RANK_DIR) {
        rank_body(Path::new(&dir));
        return;
    }
    let Some(mpiexec) = find_mpiexec() else {
        let _ = writeln!(
            std::io::stderr(),
            "\n!!!!!!!!!! {NAME}: MPICH's mpiexec.hydra / mpiexec.mpich is not in PATH \
             (apt-get install mpich): smp under mpiexec is NOT TESTED !!!!!!!!!!\n"
        );
        assert!(
            std::env::var(ALLOW_MISSING).is_ok_and(|v| v == "1"),
            "{NAME} needs MPICH's mpiexec.hydra; install mpich, or set {ALLOW_MISSING}=1 to skip"
        );
        return;
    };
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let dir = std::env::temp_dir().join(format!("gex-smp-mpiexec-{}-{nanos}", std::process::id()));
    std::fs::create_dir(&dir).unwrap();
    let exe = std::env::current_exe().unwrap();
    eprintln!(
        "+ {} -n {RANKS} {} {NAME} --exact --nocapture --test-threads=1",
        mpiexec.display(),
        exe.display()
    );
    let start = Instant::now();
    let mut child = Command::new(&mpiexec)
        .arg("-n")
        .arg(RANKS.to_string())
        .arg(&exe)
        .args([NAME, "--exact", "--nocapture", "--test-threads=1"])
        .env_remove("GEX_BOOT")
        .env(RANK_DIR, &dir)
        .stdin(Stdio::null())
        .stdout(File::create(dir.join("stdout")).unwrap())
        .stderr(File::create(dir.join("stderr")).unwrap())
        .spawn()
        .expect("start mpiexec");
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if start.elapsed() > LIMIT {
            // Let Hydra clean up, then insist, and kill the ranks it left.
            kill(child.id(), rustix::process::Signal::INT);
            std::thread::sleep(Duration::from_secs(3));
            let _ = child.kill();
            let _ = child.wait();
            for p in pids(&dir) {
                kill(p, rustix::process::Signal::KILL);
            }
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let took = start.elapsed();
    eprintln!("  mpiexec exited with {status:?} after {took:?}");
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
    let report = format!(
        "mpiexec {status:?} after {took:?}\n--- stdout\n{}--- stderr\n{}",
        read("stdout"),
        read("stderr")
    );
    let done = (0..RANKS).all(|r| dir.join(format!("done.{r}")).exists());
    let ranks = pids(&dir);
    let start = Instant::now();
    while !ranks.iter().all(|&p| is_gone(p)) && start.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let alive: Vec<u32> = ranks.iter().copied().filter(|&p| !is_gone(p)).collect();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{report}");
    assert!(done, "not every rank finished\n{report}");
    assert_eq!(ranks.len(), RANKS as usize, "{report}");
    assert!(alive.is_empty(), "ranks {alive:?} survived\n{report}");
}
