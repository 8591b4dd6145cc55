//! Demand-driven transfers in one process (loopback: the endpoint's own segment is
//! mapped, so the mover moves the strips): threads touching pages while strips land,
//! write protection of a put's source, bad input, a foreign handler installed before
//! gex's, a real segfault still crashing, fork after use. The tests that need a fresh
//! process (the handler is installed once per process) re-run this binary with one
//! test selected and `OVERLAP_TEST_CHILD` set.
#![allow(unsafe_code)]

use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

mod common;

use gex_core::boot::Singleton;
use gex_core::loopback::Loopback;
use gex_core::{Blocking, Client, ClientBuilder, Endpoint};
use gex_overlap::{Decomp, Overlap, OverlapBuf, OverlapError, OverlapExt};
use gex_rma::{GlobalPtr, Rma, RmaExt};

const SEG: usize = 8 << 20;

fn client() -> Client<Loopback> {
    common::loopback_client(gex_core::config::Config::default(), SEG)
}

/// An endpoint of a fresh client (kept alive after it) in one-page strips, and the
/// start of its segment.
fn one_page_strips() -> (Client<Loopback>, Box<Endpoint<Loopback>>, GlobalPtr<u8>) {
    let client = client();
    let mut ep = client.endpoint(0).unwrap();
    let p = GlobalPtr::<u8>::new(ep.addr(), 0);
    ep.set_decomp(Decomp::Bytes(page()), 0).unwrap();
    (client, ep, p)
}

/// Keeps the mover busy: gets of 8 MiB from `p` in the endpoint's strips, into the
/// buffers returned (pending until the mover reaches them).
fn busy_mover(ep: &mut Endpoint<Loopback>, p: GlobalPtr<u8>) -> Vec<OverlapBuf> {
    let mut fillers: Vec<OverlapBuf> = (0..8).map(|_| OverlapBuf::new(1 << 20).unwrap()).collect();
    for f in &mut fillers {
        ep.get_demand(f, 0, p, 1 << 20).unwrap();
    }
    fillers
}

/// Puts `data` at the start of the segment and starts a demand-driven get of it into a
/// new buffer.
fn demand_get(ep: &mut Endpoint<Loopback>, data: &[u8]) -> OverlapBuf {
    let p = GlobalPtr::<u8>::new(ep.addr(), 0);
    ep.put(p, data, Blocking).unwrap();
    let mut buf = OverlapBuf::new(data.len()).unwrap();
    ep.get_demand(&mut buf, 0, p, data.len()).unwrap();
    buf
}

fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(31) ^ (i >> 12)) as u8
}

fn page() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

#[test]
fn get_demand_streams_and_threads_touch_pages_while_strips_land() {
    let client = client();
    let mut ep = client.endpoint(0).unwrap();
    let len = 4 << 20;
    let data: Vec<u8> = (0..len).map(pattern).collect();
    let p = GlobalPtr::<u8>::new(ep.addr(), 0);
    ep.put(p, &data, Blocking).unwrap();
    for round in 0..4 {
        let mut buf = OverlapBuf::new(len).unwrap();
        ep.set_decomp(Decomp::Bytes(64 << 10), 0).unwrap();
        let issued = ep.get_demand(&mut buf, 0, p, len).unwrap();
        assert!(issued.demand);
        assert_eq!(issued.strips, len / (64 << 10));
        // Four threads read the buffer at once, each from a different place (the
        // last strips first for some), while the mover lands strips.
        let seen = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for t in 0..4usize {
                let (buf, seen) = (&buf, &seen);
                s.spawn(move || {
                    let n = buf.len();
                    let start = (t * 7 + round) * n / 29 % n;
                    for k in 0..n / 4096 {
                        let i = (start + k * 4096 + t) % n;
                        assert_eq!(buf[i], pattern(i), "byte {i}");
                    }
                    seen.fetch_add(1, Ordering::Relaxed);
                });
            }
        });
        assert_eq!(seen.load(Ordering::Relaxed), 4);
        assert_eq!(&buf[..], &data[..]);
        ep.retire_all().unwrap();
        assert!(!buf.is_pending(0, len).unwrap());
    }
    assert!(gex_overlap::fault_count() > 0);
}

#[test]
fn put_demand_source_is_reusable_once_its_pages_left() {
    let client = client();
    let mut ep = client.endpoint(0).unwrap();
    let len = 2 << 20;
    let mut buf = OverlapBuf::new(len).unwrap();
    for (i, b) in buf.iter_mut().enumerate() {
        *b = pattern(i);
    }
    ep.set_decomp(Decomp::Count(16), 0).unwrap();
    let dst = GlobalPtr::<u8>::new(ep.addr(), 1 << 20);
    let issued = ep.put_demand(dst, &buf, 0, len).unwrap();
    assert!(issued.demand);
    // Writing the source waits for each page's strip to have left: the target gets
    // the bytes as they were at the call, whatever is written afterwards.
    for i in (0..len).step_by(4096).rev() {
        buf[i] = !pattern(i);
    }
    ep.retire_all().unwrap();
    let mut back = vec![0u8; len];
    ep.get(&mut back[..], dst, Blocking).unwrap();
    for (i, &b) in back.iter().enumerate() {
        assert_eq!(b, pattern(i), "byte {i}");
    }
}

#[test]
fn bad_input_gives_documented_errors() {
    let (_client, mut ep, p) = one_page_strips();
    let pg = page();
    let mut buf = OverlapBuf::new(16 * pg).unwrap();
    assert!(matches!(
        ep.get_demand(&mut buf, 1, p, pg),
        Err(OverlapError::Unaligned { offset: 1, .. })
    ));
    assert!(matches!(
        ep.get_demand(&mut buf, 0, p, 17 * pg),
        Err(OverlapError::OutOfBuffer { .. })
    ));
    assert!(matches!(
        ep.get_demand(&mut buf, 0, GlobalPtr::new(ep.addr(), SEG - 10), pg),
        Err(OverlapError::OutOfSegment { .. })
    ));
    assert!(matches!(
        ep.get_demand(&mut buf, 0, GlobalPtr::new(ep.addr(), usize::MAX), pg),
        Err(OverlapError::OutOfSegment { .. })
    ));
    // Overlapping pending ranges: keep the first pending by holding the mover
    // behind a long first job (several MiB in one-page strips), then ask again.
    let big = 4 << 20;
    let mut slow = OverlapBuf::new(big).unwrap();
    ep.get_demand(&mut slow, 0, p, big).unwrap();
    ep.get_demand(&mut buf, 0, p, 8 * pg).unwrap();
    match ep.get_demand(&mut buf, 4 * pg, p, 8 * pg) {
        Err(OverlapError::Overlapping { page }) => assert!((4..8).contains(&page)),
        // The mover may already have moved both (a fast machine): then it succeeds.
        Ok(_) => {}
        Err(e) => panic!("{e}"),
    }
    assert!(matches!(
        ep.wait_range(&buf, 0, 17 * pg),
        Err(OverlapError::OutOfBuffer { .. })
    ));
    ep.wait_range(&buf, 0, 16 * pg).unwrap();
    ep.retire_all().unwrap();
    // Without the layer.
    let plain = common::rma_only_client(1 << 16);
    let mut ep2 = plain.endpoint(0).unwrap();
    assert!(matches!(
        ep2.get_demand(&mut buf, 0, p, pg),
        Err(OverlapError::NotAttached)
    ));
}

#[test]
fn overlapping_pending_range_is_refused() {
    // The range stays pending while the mover works through a queue of 8 MiB in
    // one-page strips given before it; retried a few times in case a round drained.
    let (_client, mut ep, p) = one_page_strips();
    let pg = page();
    let mut seen = false;
    for _ in 0..20 {
        let _fillers = busy_mover(&mut ep, p);
        let mut buf = OverlapBuf::new(4 * pg).unwrap();
        ep.get_demand(&mut buf, 0, p, 4 * pg).unwrap();
        if let Err(e) = ep.get_demand(&mut buf, pg, p, pg) {
            assert!(matches!(e, OverlapError::Overlapping { page: 1 }), "{e}");
            seen = true;
        }
        ep.retire_all().unwrap();
        if seen {
            break;
        }
    }
    assert!(seen, "a pending page was never refused");
}

/// Runs this binary's test `name` alone in a child with `OVERLAP_TEST_CHILD=1`.
fn child(name: &str) -> std::process::Output {
    Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env("OVERLAP_TEST_CHILD", "1")
        .output()
        .unwrap()
}

/// A crash on purpose leaves no core file in the test's directory (the signal is
/// what the tests check).
fn no_core_file() {
    let zero = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid rlimit; only this process's core size changes.
    unsafe { libc::setrlimit(libc::RLIMIT_CORE, &zero) };
}

fn in_child() -> bool {
    std::env::var_os("OVERLAP_TEST_CHILD").is_some()
}

static FOREIGN: AtomicUsize = AtomicUsize::new(0);
static FOREIGN_PAGE: AtomicUsize = AtomicUsize::new(0);

extern "C" fn foreign(_: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: a valid siginfo from the kernel.
    let addr = unsafe { (*info).si_addr() } as usize;
    let pg = FOREIGN_PAGE.load(Ordering::Relaxed);
    if addr >= pg && addr < pg + 4096 {
        foreign_fault(pg);
    }
}

extern "C" fn foreign_plain(_: libc::c_int) {
    // No address without SA_SIGINFO: the test's page is the only foreign fault.
    foreign_fault(FOREIGN_PAGE.load(Ordering::Relaxed));
}

/// The foreign handlers' work: counts the fault and opens the test's page `pg`.
fn foreign_fault(pg: usize) {
    FOREIGN.fetch_add(1, Ordering::Relaxed);
    // SAFETY: the page is the test's own mapping.
    unsafe {
        libc::mprotect(
            pg as *mut libc::c_void,
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
        )
    };
}

#[test]
fn foreign_handler_installed_before_gex_still_gets_its_faults() {
    foreign_case(
        "foreign_handler_installed_before_gex_still_gets_its_faults",
        true,
    );
}

#[test]
fn foreign_plain_handler_installed_before_gex_still_gets_its_faults() {
    foreign_case(
        "foreign_plain_handler_installed_before_gex_still_gets_its_faults",
        false,
    );
}

fn foreign_case(name: &str, siginfo: bool) {
    if !in_child() {
        let out = child(name);
        assert!(out.status.success(), "{out:?}");
        assert!(String::from_utf8_lossy(&out.stdout).contains("foreign ok"));
        return;
    }
    // SAFETY: a fresh anonymous page; a handler with the signature its flags declare.
    unsafe {
        let pg = libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(pg, libc::MAP_FAILED);
        FOREIGN_PAGE.store(pg as usize, Ordering::Relaxed);
        let mut sa: libc::sigaction = std::mem::zeroed();
        if siginfo {
            sa.sa_sigaction = foreign as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO;
        } else {
            sa.sa_sigaction = foreign_plain as *const () as usize;
        }
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGSEGV, &sa, std::ptr::null_mut()), 0);
    }
    // gex's handler now goes in, chained to the foreign one.
    let client = client();
    let mut ep = client.endpoint(0).unwrap();
    let buf = demand_get(&mut ep, &vec![5u8; 1 << 20]);
    let pg = FOREIGN_PAGE.load(Ordering::Relaxed) as *mut u8;
    // SAFETY: the foreign handler unprotects the page on the fault.
    unsafe { pg.write_volatile(9) };
    assert_eq!(FOREIGN.load(Ordering::Relaxed), 1);
    assert!(buf.iter().all(|&b| b == 5));
    ep.retire_all().unwrap();
    println!("foreign ok");
}

#[test]
fn real_segfault_still_crashes_with_sigsegv() {
    if !in_child() {
        let out = child("real_segfault_still_crashes_with_sigsegv");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{out:?}");
        assert!(String::from_utf8_lossy(&out.stdout).contains("about to fault"));
        return;
    }
    let client = client();
    let mut ep = client.endpoint(0).unwrap();
    let p = GlobalPtr::<u8>::new(ep.addr(), 0);
    let mut buf = OverlapBuf::new(1 << 20).unwrap();
    ep.get_demand(&mut buf, 0, p, 1 << 20).unwrap();
    no_core_file();
    println!("about to fault");
    // SAFETY: none: this is the crash under test (a write to an unmapped page).
    unsafe { (16 as *mut u8).write_volatile(1) };
    unreachable!("the write above faults");
}

#[test]
fn fork_after_use() {
    let client = client();
    let mut ep = client.endpoint(0).unwrap();
    let buf = demand_get(&mut ep, &(0..1 << 20).map(pattern).collect::<Vec<u8>>());
    ep.retire_all().unwrap();
    // SAFETY: the child only reads memory, compares and calls _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let ok = buf.iter().enumerate().all(|(i, &b)| b == pattern(i));
        // A new buffer in the child works too (the handler is inherited).
        let fresh = OverlapBuf::new(4096).map(|b| b[0] == 0).unwrap_or(false);
        // SAFETY: _exit ends the child without running the parent's destructors.
        unsafe { libc::_exit(if ok && fresh { 0 } else { 3 }) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{status:#x}"
    );
}

/// `GEX_OVERLAP_MOVER_CPUS`: by default (`inherit`) the mover shares the core its rank
/// pinned itself to after making the endpoint; `beside` runs it on the CPUs that
/// thread could use when the layer attached, less that core; a list places it. In
/// children, so that the only mover of the process is this test's.
#[test]
fn the_mover_cpus_setting_places_the_mover_thread() {
    use rustix::thread::{CpuSet, Pid, sched_getaffinity, sched_setaffinity};
    let name = "the_mover_cpus_setting_places_the_mover_thread";
    let Ok(mode) = std::env::var("MOVER_MODE") else {
        let cpus: Vec<usize> = {
            let m = sched_getaffinity(None).unwrap();
            (0..CpuSet::MAX_CPU).filter(|&c| m.is_set(c)).collect()
        };
        let list = cpus.last().unwrap().to_string();
        for mode in ["", "inherit", "beside", list.as_str()] {
            let out = Command::new(std::env::current_exe().unwrap())
                .args([name, "--exact", "--nocapture", "--test-threads=1"])
                .env("MOVER_MODE", mode)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "mode {mode}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        return;
    };
    let mut cfg = gex_core::config::Config::default();
    cfg.set("GEX_OVERLAP_MOVER_CPUS", &mode);
    let client = common::loopback_client(cfg, SEG);
    let mut ep = client.endpoint(0).unwrap();
    let at_attach = sched_getaffinity(None).unwrap();
    let cpus: Vec<usize> = (0..CpuSet::MAX_CPU)
        .filter(|&c| at_attach.is_set(c))
        .collect();
    // The rank pins itself to its first CPU after making the endpoint (as gex-perf
    // and many runtimes do), then starts its first transfer, which starts the mover.
    let mut pin = CpuSet::new();
    pin.set(cpus[0]);
    sched_setaffinity(None, &pin).unwrap();
    let buf = demand_get(&mut ep, &(0..1 << 20).map(pattern).collect::<Vec<u8>>());
    ep.retire_all().unwrap();
    assert!(buf.iter().enumerate().all(|(i, &b)| b == pattern(i)));
    let movers: Vec<i32> = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| {
            let t = t.unwrap().path();
            let comm = std::fs::read_to_string(t.join("comm")).ok()?;
            (comm.trim() == "gex-overlap-mov")
                .then(|| t.file_name().unwrap().to_str().unwrap().parse().unwrap())
        })
        .collect();
    assert_eq!(movers.len(), 1, "one mover thread: {movers:?}");
    let m = sched_getaffinity(Pid::from_raw(movers[0])).unwrap();
    let on: Vec<usize> = (0..CpuSet::MAX_CPU).filter(|&c| m.is_set(c)).collect();
    let want = match mode.as_str() {
        "" | "inherit" => vec![cpus[0]],
        // The CPUs of attach less the pin, or all of them when the pin was the only one.
        "beside" if cpus.len() > 1 => cpus[1..].to_vec(),
        "beside" => cpus.clone(),
        list => vec![list.parse().unwrap()],
    };
    assert_eq!(
        on, want,
        "mode {mode}: the mover's CPUs (the thread could use {cpus:?})"
    );
    if cpus.len() == 1 {
        eprintln!("one CPU only: beside and inherit cannot differ here");
    }
}

#[test]
fn syscall_after_wait_range_gets_the_bytes() {
    let client = client();
    let mut ep = client.endpoint(0).unwrap();
    let len = 1 << 20;
    let buf = demand_get(&mut ep, &vec![b'x'; len]);
    ep.wait_range(&buf, 0, len).unwrap();
    let mut fds = [0; 2];
    // SAFETY: a pipe; `buf` holds `len` retired bytes.
    unsafe {
        assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
        assert_eq!(libc::write(fds[1], buf.as_ptr().cast(), 4096), 4096);
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
}

#[test]
fn bad_settings_fail_the_endpoint() {
    common::assert_bad_settings(&[
        ("GEX_OVERLAP_STRIP", "lots"),
        ("GEX_OVERLAP_STRIP", "0"),
        ("GEX_OVERLAP_MIN_SPLIT", "-1"),
        ("GEX_OVERLAP_TRACE", "yes"),
        ("GEX_OVERLAP_SCHED", "fast"),
        ("GEX_OVERLAP_TRAIN", "lots"),
        ("GEX_OVERLAP_TRAIN_PUT", "-1"),
        ("GEX_OVERLAP_MOVER_CPUS", "any"),
        ("GEX_OVERLAP_MOVER_CPUS", "3-1"),
        ("GEX_OVERLAP_MOVER_CPUS", "100000"),
    ]);
}

#[test]
fn trace_records_the_faults_waited_for() {
    let mut cfg = gex_core::config::Config::default();
    cfg.set("GEX_OVERLAP_TRACE", "1");
    let client = ClientBuilder::new()
        .layer::<Rma>()
        .layer::<Overlap>()
        .config(cfg)
        .segment_size(SEG)
        .init::<Loopback>(Box::new(Singleton::new()))
        .unwrap();
    let mut ep = client.endpoint(0).unwrap();
    assert!(gex_overlap::trace_enabled());
    let len = 4 << 20;
    let p = GlobalPtr::<u8>::new(ep.addr(), 0);
    // One strip: the last page is touched at once, before the mover can have copied
    // 4 MiB (retried in case this thread was descheduled that long).
    ep.set_decomp(Decomp::Unsplit, 0).unwrap();
    let mut found = false;
    for _ in 0..20 {
        let mut buf = OverlapBuf::new(len).unwrap();
        ep.get_demand(&mut buf, 0, p, len).unwrap();
        let base = buf.as_ptr() as usize;
        assert_eq!(std::hint::black_box(buf[len - 1]), 0);
        ep.retire_all().unwrap();
        let (records, _) = gex_overlap::overlap_trace();
        // Other tests of this binary fault too: look for a page of this buffer.
        if records
            .iter()
            .any(|r| r.addr >= base && r.addr < base + len && r.addr % page() == 0)
        {
            found = true;
            break;
        }
    }
    assert!(found, "no fault of this buffer in the trace");
}

#[test]
fn fork_with_a_pending_page_crashes_the_child_that_touches_it() {
    let (_client, mut ep, p) = one_page_strips();
    let pg = page();
    // Keep the mover busy (8 MiB in one-page strips), then start the get whose page
    // the child touches: it is still pending at the fork.
    let _fillers = busy_mover(&mut ep, p);
    let mut buf = OverlapBuf::new(4 * pg).unwrap();
    ep.get_demand(&mut buf, 0, p, 4 * pg).unwrap();
    if !buf.is_pending(0, pg).unwrap() {
        // The mover was faster than this thread: nothing to check this time.
        ep.retire_all().unwrap();
        return;
    }
    // SAFETY: the child only reads one byte (which crashes it) or calls _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        no_core_file();
        let b = std::hint::black_box(&buf)[0];
        // SAFETY: ends the child (not reached: the read above crashes it).
        unsafe { libc::_exit(i32::from(b) + 10) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGSEGV,
        "{status:#x}"
    );
    ep.retire_all().unwrap();
    assert!(buf.iter().all(|&b| b == 0));
}
