//! The `gex-run` binary with real rank processes: `sh -c` programs, and copies of
//! this test binary that open the smp conduit (`smp_rank`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const GEX_RUN: &str = env!("CARGO_BIN_EXE_gex-run");

fn gex_run(args: &[&str]) -> (Output, Duration) {
    let start = Instant::now();
    let out = Command::new(GEX_RUN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("start gex-run");
    (out, start.elapsed())
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The arguments of `gex-run <opts> -- sh -c <script> sh -x`: every rank runs
/// `script` with `-x` as its `$1` (what follows the program reaches the ranks).
fn with_x<'a>(opts: &[&'a str], script: &'a str) -> Vec<&'a str> {
    let mut args = opts.to_vec();
    args.extend(["--", "sh", "-c", script, "sh", "-x"]);
    args
}

/// Runs `gex-run args`, which must exit with `code` and say each of `mentions` on
/// stderr (failures name `args`); how long it took.
fn gex_run_says(args: &[&str], code: i32, mentions: &[&str]) -> Duration {
    let (out, took) = gex_run(args);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    for m in mentions {
        assert!(err.contains(m), "{args:?}: no {m:?} in: {err}");
    }
    took
}

/// A fresh directory for one test, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let p = std::env::temp_dir().join(format!("gex-boot-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir(&p).unwrap();
        TempDir(p)
    }
    fn path(&self) -> &Path {
        &self.0
    }
    fn s(&self) -> String {
        self.0.display().to_string()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

use gex_testkit::procs::{is_gone, shm_leftovers, shm_names, wait_until};

fn read_pids(dir: &Path, ranks: &[u32]) -> Vec<u32> {
    ranks
        .iter()
        .map(|r| {
            let s = std::fs::read_to_string(dir.join(format!("pid.{r}"))).unwrap();
            s.trim().parse().unwrap()
        })
        .collect()
}

/// Starts `gex-run -n <ranks> sh -c '<record its pid in dir>; <then>'` (stderr as
/// `stderr`), and waits until every rank has recorded its pid (in `pid.<rank>`;
/// the launcher is killed and the test fails if they do not within 5 s): the
/// launcher, and the ranks' pids.
fn start_recording(dir: &TempDir, ranks: u32, then: &str, stderr: Stdio) -> (Child, Vec<u32>) {
    let d = dir.s();
    let script = format!(
        "echo $$ > {d}/pid.tmp.$GEX_RANK && mv {d}/pid.tmp.$GEX_RANK {d}/pid.$GEX_RANK; {then}"
    );
    let mut launcher = Command::new(GEX_RUN)
        .args(["-n", &ranks.to_string(), "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let ready = wait_until(Duration::from_secs(5), || {
        (0..ranks).all(|r| dir.path().join(format!("pid.{r}")).exists())
    });
    if !ready {
        let _ = launcher.kill();
        let _ = launcher.wait();
        panic!("the ranks did not start");
    }
    let all: Vec<u32> = (0..ranks).collect();
    let pids = read_pids(dir.path(), &all);
    (launcher, pids)
}

#[test]
fn all_ranks_exit_zero() {
    let (out, _) = gex_run(&["-n", "3", "sh", "-c", "exit 0"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(out.stderr.is_empty(), "{}", stderr(&out));
}

#[test]
fn ranks_get_their_environment() {
    let script = r#"
        test "$GEX_BOOT" = fork || exit 11
        test "$GEX_SIZE" = 3 || exit 12
        test "$GEX_LOCAL_SIZE" = 3 || exit 13
        test "$GEX_LOCAL_RANK" = "$GEX_RANK" || exit 14
        test "$GEX_RANK" -ge 0 && test "$GEX_RANK" -lt 3 || exit 15
        test -n "$GEX_JOB_ID" || exit 16
        test -S "/proc/self/fd/$GEX_BOOT_FD" || test -e "/proc/$$/fd/$GEX_BOOT_FD" || exit 17
        test "$GEX_CONDUIT" = smp || exit 18
        test "$1" = "-x" || exit 19
        exit 0
    "#;
    gex_run_says(&with_x(&["-n", "3", "--conduit", "smp"], script), 0, &[]);
}

#[test]
fn a_failing_rank_ends_the_job_with_its_code() {
    let script = r#"if [ "$GEX_RANK" = 2 ]; then exit 7; fi; sleep 30"#;
    let (out, took) = gex_run(&["-n", "4", "sh", "-c", script]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(7), "{err}");
    assert!(took < Duration::from_secs(2), "gex-run took {took:?}");
    assert!(
        err.contains("rank 2 (pid ") && err.contains("exited with code 7"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "exactly one line expected: {err}");
}

#[test]
fn a_rank_killed_by_sigkill_ends_the_job() {
    let dir = TempDir::new("kill9");
    let d = dir.s();
    let script = format!(
        r#"
        if [ "$GEX_RANK" = 1 ]; then
            i=0
            while [ $i -lt 100 ] && ! {{ [ -e {d}/pid.0 ] && [ -e {d}/pid.2 ] && [ -e {d}/pid.3 ]; }}; do
                sleep 0.05; i=$((i+1))
            done
            kill -9 $$
        fi
        echo $$ > {d}/pid.tmp.$GEX_RANK && mv {d}/pid.tmp.$GEX_RANK {d}/pid.$GEX_RANK
        sleep 30
    "#
    );
    let took = gex_run_says(
        &["-n", "4", "sh", "-c", &script],
        137,
        &["rank 1 (pid ", "killed by signal 9 (SIGKILL)"],
    );
    assert!(took < Duration::from_secs(8), "gex-run took {took:?}");
    for pid in read_pids(dir.path(), &[0, 2, 3]) {
        assert!(is_gone(pid), "rank process {pid} is still running");
    }
}

/// `--hosts` sets the per-host local rank and size, `--host-exec` starts each rank
/// through its prefix with `{host}` replaced (host ids in WELCOME: tests/self_launch.rs).
#[test]
fn hosts_and_host_exec_prefix() {
    let script = r#"
        case "$GEX_RANK:$BOOT_TEST_HOST:$GEX_LOCAL_RANK:$GEX_LOCAL_SIZE:$1" in
            0:a:0:2:-x|1:a:1:2:-x|2:b:0:1:-x|3:c:0:1:-x) exit 0 ;;
            *) echo "unexpected $GEX_RANK:$BOOT_TEST_HOST:$GEX_LOCAL_RANK:$GEX_LOCAL_SIZE:$1" >&2; exit 9 ;;
        esac
    "#;
    gex_run_says(
        &with_x(
            &[
                "-n",
                "4",
                "--hosts",
                "a*2,b,c",
                "--host-exec",
                "env BOOT_TEST_HOST={host}",
            ],
            script,
        ),
        0,
        &[],
    );
    // Without a prefix the names still shape GEX_LOCAL_*.
    gex_run_says(
        &[
            "-n",
            "3",
            "--hosts",
            "p,q,p",
            "sh",
            "-c",
            r#"case "$GEX_RANK:$GEX_LOCAL_RANK:$GEX_LOCAL_SIZE" in 0:0:2|1:0:1|2:1:2) exit 0 ;; *) exit 9 ;; esac"#,
        ],
        0,
        &[],
    );
}

#[test]
fn bad_host_lists_are_usage_errors() {
    for (args, want) in [
        (
            &["-n", "3", "--hosts", "a,b", "true"][..],
            "2 hosts for 3 ranks",
        ),
        (&["-n", "2", "--hosts", "a,", "true"][..], "empty host name"),
        (
            &["-n", "2", "--hosts", "a*x", "true"][..],
            "positive number",
        ),
        (&["-n", "2", "--host-exec", "env", "true"][..], "--hosts"),
        (
            &["-n", "1", "--hosts", "a", "--host-exec", " ", "true"][..],
            "empty command prefix",
        ),
    ] {
        gex_run_says(args, 2, &[want]);
    }
}

#[test]
fn missing_host_prefix_program_exits_127() {
    gex_run_says(
        &[
            "-n",
            "2",
            "--hosts",
            "a,b",
            "--host-exec",
            "gex-boot-no-such-prefix {host}",
            "true",
        ],
        127,
        &["cannot execute gex-boot-no-such-prefix"],
    );
}

#[test]
fn zero_ranks_is_a_usage_error() {
    gex_run_says(&["-n", "0", "true"], 2, &["at least 1"]);
}

#[test]
fn missing_program_exits_127() {
    gex_run_says(
        &["-n", "2", "gex-boot-no-such-program"],
        127,
        &["cannot execute gex-boot-no-such-program"],
    );
}

#[test]
fn a_non_gex_program_exiting_nonzero_is_named() {
    gex_run_says(
        &["-n", "1", "sh", "-c", "exit 3"],
        3,
        &["rank 0 (pid ", "exited with code 3"],
    );
}

#[test]
fn killing_the_launcher_kills_every_rank() {
    let dir = TempDir::new("pdeathsig");
    // `exec` so that the recorded pid is the process that runs until the end
    // (a shell's children do not inherit PR_SET_PDEATHSIG).
    let (mut launcher, pids) = start_recording(&dir, 3, "exec sleep 60", Stdio::null());
    launcher.kill().unwrap(); // SIGKILL
    launcher.wait().unwrap();
    let gone = wait_until(Duration::from_secs(2), || pids.iter().all(|&p| is_gone(p)));
    if !gone {
        // Do not leave them behind when the test fails.
        for &p in &pids {
            if let Some(pid) = rustix::process::Pid::from_raw(p as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
    }
    assert!(gone, "rank processes {pids:?} outlived their launcher");
}

#[test]
fn sigterm_to_the_launcher_ends_the_ranks() {
    let dir = TempDir::new("sigterm");
    let (launcher, pids) = start_recording(&dir, 2, "sleep 30", Stdio::piped());
    let pid = rustix::process::Pid::from_child(&launcher);
    let start = Instant::now();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let out = launcher.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(128 + 15), "{err}");
    assert!(err.contains("SIGTERM"), "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "took {:?}",
        start.elapsed()
    );
    assert!(pids.iter().all(|&p| is_gone(p)), "ranks {pids:?} survived");
}

/// Set in the ranks of `nothing_is_left_in_dev_shm`: `kill` (rank 1 kills itself
/// with SIGKILL while the others wait in a barrier) or `finalize`; its presence makes
/// `smp_rank` a rank.
const SHM_RANK_VAR: &str = "GEXTEST_SHM_RANK";

/// Runs the ranks of [`nothing_is_left_in_dev_shm`]: `gex-run -n 3 <this binary>
/// smp_rank ...` with `mode` in [`SHM_RANK_VAR`] and `dir` for the ranks' pids.
fn shm_job(conduit: &[(&str, &str)], mode: &str, dir: &TempDir) -> (Output, Vec<u32>) {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new(GEX_RUN);
    cmd.args(["-n", "3", "--"])
        .arg(exe)
        .args([
            "smp_rank",
            "--exact",
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(SHM_RANK_VAR, mode)
        .env("GEXTEST_SHM_DIR", dir.path())
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null());
    for (k, v) in conduit {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("start gex-run");
    let pids = read_pids(dir.path(), &[0, 1, 2]);
    (out, pids)
}

/// A rank of [`nothing_is_left_in_dev_shm`] (a real gex program: it creates the
/// conduit's shared state). Run by that test through gex-run; does nothing otherwise.
#[test]
#[ignore = "a rank program of nothing_is_left_in_dev_shm, started by it"]
fn smp_rank() {
    let Ok(mode) = std::env::var(SHM_RANK_VAR) else {
        return;
    };
    use gex::prelude::*;
    let dir = PathBuf::from(std::env::var_os("GEXTEST_SHM_DIR").unwrap());
    let boot = gex_boot::from_env().unwrap();
    let rank = boot.rank();
    let client = gex::builder()
        .segment_size(1 << 20)
        .init::<gex::AnyConduit>(boot)
        .unwrap();
    let mut ep = client.endpoint(0).unwrap();
    let world = ep.world();
    ep.barrier(&world).unwrap();
    let pid = std::process::id();
    std::fs::write(dir.join(format!("pid.tmp.{rank}")), pid.to_string()).unwrap();
    std::fs::rename(
        dir.join(format!("pid.tmp.{rank}")),
        dir.join(format!("pid.{rank}")),
    )
    .unwrap();
    ep.barrier(&world).unwrap();
    if mode == "kill" {
        if rank == 1 {
            let me = rustix::process::getpid();
            rustix::process::kill_process(me, rustix::process::Signal::KILL).unwrap();
        }
        // Rank 1 never comes: the launcher ends the job.
        let _ = ep.barrier(&world);
        std::thread::sleep(Duration::from_secs(30));
    }
    drop(ep);
    client.finalize().unwrap();
}

/// No rank leaves anything in `/dev/shm`, even when one is killed with SIGKILL while
/// the others wait in a barrier: the ranks open the smp conduit (and, in a build with
/// the ofi conduit, the ofi conduit over libfabric's `shm` provider, which names its
/// regions in `/dev/shm`), so a conduit that named its shared memory and failed to
/// remove it would fail this test.
#[test]
fn nothing_is_left_in_dev_shm() {
    let mut conduits: Vec<Vec<(&str, &str)>> = vec![vec![("GEX_CONDUIT", "smp")]];
    if gex::conduits().contains(&"ofi") {
        conduits.push(vec![
            ("GEX_CONDUIT", "ofi"),
            ("GEX_OFI_PROVIDER", "shm"),
            ("IPATH_NO_BACKTRACE", "1"),
        ]);
    }
    for conduit in &conduits {
        let before = shm_names();
        let dir = TempDir::new("shm-kill");
        let (out, pids_kill) = shm_job(conduit, "kill", &dir);
        assert_eq!(
            out.status.code(),
            Some(137),
            "{conduit:?}: {}",
            stderr(&out)
        );
        let dir = TempDir::new("shm-fin");
        let (out, pids_fin) = shm_job(conduit, "finalize", &dir);
        assert_eq!(out.status.code(), Some(0), "{conduit:?}: {}", stderr(&out));
        let pids: Vec<u32> = pids_kill.into_iter().chain(pids_fin).collect();
        let left = shm_leftovers(&before, &pids);
        assert!(
            left.is_empty(),
            "{conduit:?}: left in /dev/shm (now removed): {left:?}"
        );
    }
}

/// The launcher blocks the signals it forwards while the job runs; its ranks must not
/// inherit that mask (a rank with SIGTERM blocked could not be ended by SIGTERM: the
/// launcher's own SIGTERM did nothing and every job ended only at the SIGKILL one
/// second later). They also get IPATH_NO_BACKTRACE=1, so that libinfinipath (loaded
/// with Debian's libfabric) does not turn signals into `exit(1)`.
#[test]
fn ranks_start_with_a_clean_signal_mask() {
    let out = Command::new(GEX_RUN)
        .args([
            "-n",
            "1",
            "sh",
            "-c",
            r#"echo "ipath=$IPATH_NO_BACKTRACE"; exec grep SigBlk /proc/self/status"#,
        ])
        .env_remove("IPATH_NO_BACKTRACE")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("ipath=1"), "{text}");
    let mask = text
        .lines()
        .find_map(|l| l.strip_prefix("SigBlk:"))
        .map(|m| u64::from_str_radix(m.trim(), 16).unwrap())
        .unwrap_or_else(|| panic!("{text}"));
    for sig in [libc::SIGHUP, libc::SIGINT, libc::SIGTERM] {
        assert_eq!(
            mask & (1 << (sig - 1)),
            0,
            "signal {sig} blocked in a rank: {text}"
        );
    }
    // And a SIGTERM really ends a rank at once (not the SIGKILL a second later).
    let took = gex_run_says(
        &[
            "-n",
            "2",
            "sh",
            "-c",
            r#"[ "$GEX_RANK" = 1 ] && kill -TERM $$; sleep 5"#,
        ],
        143,
        &[],
    );
    assert!(took < Duration::from_secs(5), "took {took:?}");
}
