//! Multi-process tests of the smp conduit that the generic conformance suite does not
//! cover: the shared-memory mechanics themselves (memfd regions, peer segment mappings,
//! reply deferral under a full ring, blocking waits, nothing left in /dev/shm).

use gex_boot::{Role, spawn_self_test};
use gex_conduit_smp::Smp;
use gex_core::{Am, ClientBuilder, Config, EpAddr, Flags, Injected, Token, WaitPolicy};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Runs `body` on `n` ranks (processes) of this test binary; asserts the job succeeded.
fn job(n: u32, name: &str, body: impl FnOnce(Box<dyn gex_core::boot::Bootstrap>)) {
    match spawn_self_test(n, name).expect("launch") {
        Role::Rank(boot) => body(boot),
        Role::Launcher(code) => assert_eq!(code, 0, "job {name} failed"),
    }
}

/// Entries of /dev/shm that look like gex's (other software, e.g. libfabric's shm
/// provider in concurrent tests, may come and go there).
fn shm_entries() -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.to_ascii_lowercase().contains("gex"))
                .collect()
        })
        .unwrap_or_default()
}
#[test]
fn ping_pong_every_pair() {
    job(3, "ping_pong_every_pair", |boot| {
        let c = ClientBuilder::new()
            .segment_size(1 << 20)
            .init::<Smp>(boot)
            .unwrap();
        let mut ep = c.endpoint(0).unwrap();
        let got = Arc::new(AtomicU64::new(0));
        let g = got.clone();
        ep.register(130, |t: &mut Token<'_>, am: Am<'_>| {
            t.reply_medium(131, am.args(), am.payload()).unwrap();
        })
        .unwrap();
        ep.register(131, move |_t: &mut Token<'_>, am: Am<'_>| {
            assert_eq!(am.args()[0] as usize, am.payload().len());
            assert!(am.payload().iter().all(|&b| b == am.args()[1] as u8));
            g.fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
        let n = c.size();
        let mut want = 0;
        for peer in 0..n {
            for len in [0usize, 1, 7, 4096, 65536] {
                let fill = (peer * 31 + len as u32) as u8;
                let buf = vec![fill; len];
                ep.request_medium(
                    EpAddr::rank(peer),
                    130,
                    &[len as u32, fill as u32],
                    &buf,
                    Flags::empty(),
                )
                .unwrap();
                want += 1;
                ep.wait_until(|| got.load(Ordering::Relaxed) == want);
            }
        }
        ep.barrier().unwrap();
    });
}

#[test]
fn long_lands_in_mapped_peer_segment() {
    job(2, "long_lands_in_mapped_peer_segment", |boot| {
        let c = ClientBuilder::new()
            .segment_size(1 << 16)
            .init::<Smp>(boot)
            .unwrap();
        let mut ep = c.endpoint(0).unwrap();
        let seen = Arc::new(AtomicU64::new(0));
        let s = seen.clone();
        ep.register(140, move |_t: &mut Token<'_>, am: Am<'_>| {
            assert_eq!(am.offset(), 100);
            assert_eq!(am.payload(), &[0xab; 1000][..]);
            s.fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
        let peer = EpAddr::rank(1 - c.rank());
        ep.request_long(peer, 140, &[], &[0xab; 1000], 100, Flags::empty())
            .unwrap();
        ep.wait_until(|| seen.load(Ordering::Relaxed) == 1);
        // The peer's segment is mapped here: its bytes are visible through the mapping.
        let (base, len) =
            gex_core::spi::ConduitEp::peer_segment(ep.conduit_ep(), EpAddr::rank(c.rank()))
                .unwrap();
        assert_eq!(len, 1 << 16);
        let mut own = [0u8; 1000];
        ep.segment().read(100, &mut own).unwrap();
        assert_eq!(own, [0xab; 1000]);
        assert_eq!(base.as_ptr(), ep.segment().as_ptr());
        ep.barrier().unwrap();
    });
}

/// A tiny ring forces replies to be deferred; nothing may be lost or deadlock.
#[test]
fn replies_survive_full_rings() {
    job(2, "replies_survive_full_rings", |boot| {
        let cfg = Config::from_pairs([
            ("GEX_SMP_RING_SIZE", "4096"),
            ("GEX_SMP_MAX_MEDIUM", "1024"),
        ]);
        let c = ClientBuilder::new()
            .segment_size(4096)
            .config(cfg)
            .init::<Smp>(boot)
            .unwrap();
        let mut ep = c.endpoint(0).unwrap();
        let replies = Arc::new(AtomicU64::new(0));
        let r = replies.clone();
        ep.register(150, |t: &mut Token<'_>, am: Am<'_>| {
            t.reply_medium(151, am.args(), am.payload()).unwrap()
        })
        .unwrap();
        ep.register(151, move |_t: &mut Token<'_>, am: Am<'_>| {
            assert_eq!(am.payload().len(), 1000);
            r.fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
        let peer = EpAddr::rank(1 - c.rank());
        let mut would_block = 0u64;
        let total = 5000;
        let mut sent = 0;
        while sent < total {
            match ep
                .request_medium(peer, 150, &[sent], &[7u8; 1000], Flags::IMMEDIATE)
                .unwrap()
            {
                Injected::Sent => sent += 1,
                Injected::WouldBlock => {
                    would_block += 1;
                    ep.poll();
                }
            }
        }
        assert!(would_block > 0, "a 4 KiB ring must push back");
        ep.wait_until(|| replies.load(Ordering::Relaxed) == total as u64);
        ep.barrier().unwrap();
    });
}

/// Ranks that block in the kernel are woken by senders.
#[test]
fn blocking_waits_wake() {
    job(4, "blocking_waits_wake", |boot| {
        let c = ClientBuilder::new()
            .segment_size(4096)
            .wait_policy(WaitPolicy::Block)
            .init::<Smp>(boot)
            .unwrap();
        let mut ep = c.endpoint(0).unwrap();
        assert_eq!(ep.wait_policy(), WaitPolicy::Block);
        let got = Arc::new(AtomicU64::new(0));
        let g = got.clone();
        ep.register(160, |t: &mut Token<'_>, _am: Am<'_>| {
            t.reply_short(161, &[]).unwrap()
        })
        .unwrap();
        ep.register(161, move |_t: &mut Token<'_>, _am: Am<'_>| {
            g.fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
        let n = c.size();
        let peer = EpAddr::rank((c.rank() + 1) % n);
        for i in 1..=200 {
            ep.request_short(peer, 160, &[], Flags::empty()).unwrap();
            ep.wait_until(|| got.load(Ordering::Relaxed) == i);
        }
        ep.barrier().unwrap();
    });
}

/// Several endpoints per rank: AMs target non-zero endpoints, each EP on its own thread.
#[test]
fn endpoints_on_threads() {
    job(2, "endpoints_on_threads", |boot| {
        let c = ClientBuilder::new()
            .segment_size(4096)
            .endpoints(3)
            .init::<Smp>(boot)
            .unwrap();
        let peer_rank = 1 - c.rank();
        std::thread::scope(|s| {
            for e in 0..3u16 {
                let mut ep = c.endpoint(e).unwrap();
                s.spawn(move || {
                    let got = Arc::new(AtomicU64::new(0));
                    let g = got.clone();
                    ep.register(170, |t: &mut Token<'_>, am: Am<'_>| {
                        t.reply_short(171, am.args()).unwrap()
                    })
                    .unwrap();
                    ep.register(171, move |t: &mut Token<'_>, am: Am<'_>| {
                        assert_eq!(t.src().ep as u32, am.args()[0]);
                        g.fetch_add(1, Ordering::Relaxed);
                    })
                    .unwrap();
                    let dst = EpAddr::new(peer_rank, e);
                    for i in 1..=1000 {
                        ep.request_short(dst, 170, &[e as u32], Flags::empty())
                            .unwrap();
                        ep.wait_until(|| got.load(Ordering::Relaxed) == i);
                    }
                    ep.barrier().unwrap();
                });
            }
        });
    });
}

/// Runs `name` as a job of `n` ranks that is expected to fail; returns the job's code
/// and how long it took to end after the failure (see [`mark_failure`]), so that slow
/// rank start-up on a loaded machine does not count.
fn failing_job(
    n: u32,
    name: &str,
    body: impl FnOnce(Box<dyn gex_core::boot::Bootstrap>),
) -> Option<(i32, std::time::Duration)> {
    let mark = failure_mark(std::process::id(), name);
    let _ = std::fs::remove_file(&mark);
    let log = mark.with_extension("log");
    match spawn_self_test(n, name).expect("launch") {
        Role::Rank(boot) => {
            // The ranks' own test harnesses report the failure this test provokes
            // ("panicked", "FAILED"); send that to a log the launcher shows only when
            // its own assertions fail, so a passing run prints no failure text.
            let launcher = rustix::process::getppid().expect("a parent").as_raw_pid() as u32;
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(failure_mark(launcher, name).with_extension("log"))
                .expect("open the ranks' log");
            rustix::stdio::dup2_stdout(&f).expect("redirect stdout");
            rustix::stdio::dup2_stderr(&f).expect("redirect stderr");
            body(boot);
            None
        }
        Role::Launcher(code) => {
            let ended = wall_clock_ns();
            // Captured by the test harness: printed only if this test fails.
            eprintln!(
                "ranks' output:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            let _ = std::fs::remove_file(&log);
            let failed: u128 = std::fs::read_to_string(&mark)
                .expect("the failing rank marked the time of its failure")
                .trim()
                .parse()
                .expect("a time");
            let _ = std::fs::remove_file(&mark);
            let took = std::time::Duration::from_nanos(ended.saturating_sub(failed) as u64);
            Some((code, took))
        }
    }
}

fn failure_mark(launcher: u32, name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("gex-smp-test-failure-{launcher}-{name}"))
}

fn wall_clock_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos()
}

/// Called by the rank that is about to fail: records the time for [`failing_job`]
/// (the launcher is this rank's parent process).
fn mark_failure(name: &str) {
    let launcher = rustix::process::getppid().expect("a parent").as_raw_pid() as u32;
    std::fs::write(failure_mark(launcher, name), wall_clock_ns().to_string())
        .expect("write the failure mark");
}

/// A rank killed with SIGKILL while its peers spin in `wait_until` for a message that
/// will never come: the launcher ends the job promptly with 128 + 9 and nothing is left
/// in /dev/shm.
#[test]
fn kill_9_of_a_rank_ends_the_job() {
    let before = shm_entries();
    let r = failing_job(3, "kill_9_of_a_rank_ends_the_job", |boot| {
        let c = ClientBuilder::new()
            .segment_size(1 << 20)
            .init::<Smp>(boot)
            .unwrap();
        let mut ep = c.endpoint(0).unwrap();
        ep.barrier().unwrap();
        if c.rank() == 1 {
            mark_failure("kill_9_of_a_rank_ends_the_job");
            rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL)
                .unwrap();
        }
        ep.wait_until(|| false);
    });
    if let Some((code, took)) = r {
        assert_eq!(code, 128 + 9, "job code");
        assert!(
            took < std::time::Duration::from_secs(2),
            "job took {took:?}"
        );
        let after = shm_entries();
        assert!(
            after.iter().all(|e| before.contains(e)),
            "new /dev/shm entries: {after:?}"
        );
    }
}

/// A panic inside an AM handler ends the job with the panic's exit code (101).
#[test]
fn panic_in_a_handler_ends_the_job() {
    let r = failing_job(2, "panic_in_a_handler_ends_the_job", |boot| {
        let c = ClientBuilder::new()
            .segment_size(1 << 16)
            .init::<Smp>(boot)
            .unwrap();
        let mut ep = c.endpoint(0).unwrap();
        ep.register(190, |_t: &mut Token<'_>, _am: Am<'_>| {
            mark_failure("panic_in_a_handler_ends_the_job");
            panic!("handler failure (expected by the test)")
        })
        .unwrap();
        ep.barrier().unwrap();
        if c.rank() == 0 {
            ep.request_short(EpAddr::rank(1), 190, &[], Flags::empty())
                .unwrap();
        }
        ep.wait_until(|| false);
    });
    if let Some((code, took)) = r {
        assert_eq!(code, 101, "job code");
        assert!(
            took < std::time::Duration::from_secs(2),
            "job took {took:?}"
        );
    }
}

#[test]
fn nothing_left_in_dev_shm() {
    let before = shm_entries();
    job(2, "nothing_left_in_dev_shm", |boot| {
        let c = ClientBuilder::new()
            .segment_size(1 << 20)
            .init::<Smp>(boot)
            .unwrap();
        let mut ep = c.endpoint(0).unwrap();
        ep.barrier().unwrap();
    });
    if std::env::var_os("GEX_BOOT").is_none() {
        let after = shm_entries();
        let new: Vec<_> = after.iter().filter(|e| !before.contains(e)).collect();
        assert!(new.is_empty(), "new /dev/shm entries: {new:?}");
    }
}
