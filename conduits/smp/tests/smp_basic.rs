//! Multi-process tests of the smp conduit that the generic conformance suite does not
//! cover: the shared-memory mechanics themselves (memfd regions, peer segment mappings,
//! reply deferral under a full ring, blocking waits, nothing left in /dev/shm).
//! Every job is started by gex-testkit's process runner.

use gex_conduit_smp::Smp;
use gex_core::boot::Bootstrap;
use gex_core::{
    Am, Body, ClientBuilder, Config, Endpoint, EpAddr, HandlerId, HandlerIndex, Injected, Token,
    WaitPolicy,
};
use gex_testkit::procs::{self, Procs};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Runs `body` on `n` ranks (processes) of this test binary; asserts the job succeeded.
fn job(n: u32, body: impl FnOnce(Box<dyn Bootstrap>)) {
    Procs::new(n).run(body).assert_success();
}

/// A client of `seg`-byte segments (default config) on `boot`.
fn client(boot: Box<dyn Bootstrap>, seg: usize) -> gex_core::Client<Smp> {
    init(ClientBuilder::new().segment_size(seg), boot)
}

/// The client `builder` makes on `boot`.
fn init(builder: ClientBuilder, boot: Box<dyn Bootstrap>) -> gex_core::Client<Smp> {
    builder.init::<Smp>(boot).unwrap()
}

/// Registers at `at` on `ep` a handler that answers each request with a reply to
/// `reply_to` carrying the request's arguments, and its payload in a Medium when
/// `medium` (else a Short).
fn echo(ep: &mut Endpoint<Smp>, at: HandlerIndex, reply_to: HandlerIndex, medium: bool) {
    let to = HandlerId::at(reply_to);
    ep.register_at(at, move |t: &mut Token<'_>, am: Am<'_>| {
        let body = if medium {
            Body::medium(am.args(), am.payload())
        } else {
            Body::short(am.args())
        };
        t.reply(to, body).unwrap()
    })
    .unwrap();
}

/// Registers at `at` on `ep` a handler that runs `check` on each message it gets and
/// then counts it; returns the count.
fn counted(
    ep: &mut Endpoint<Smp>,
    at: HandlerIndex,
    check: impl Fn(&Token<'_>, &Am<'_>) + Send + 'static,
) -> Arc<AtomicU64> {
    let n = Arc::new(AtomicU64::new(0));
    let m = n.clone();
    ep.register_at(at, move |t: &mut Token<'_>, am: Am<'_>| {
        check(t, &am);
        m.fetch_add(1, Ordering::Relaxed);
    })
    .unwrap();
    n
}

#[test]
fn ping_pong_every_pair() {
    job(3, |boot| {
        let c = client(boot, 1 << 20);
        let mut ep = c.endpoint(0).unwrap();
        echo(&mut ep, 130, 131, true);
        let got = counted(&mut ep, 131, |_, am| {
            assert_eq!(am.args()[0] as usize, am.payload().len());
            assert!(am.payload().iter().all(|&b| b == am.args()[1] as u8));
        });
        let n = c.size();
        let mut want = 0;
        for peer in 0..n {
            for len in [0usize, 1, 7, 4096, 65536] {
                let fill = (peer * 31 + len as u32) as u8;
                let buf = vec![fill; len];
                ep.request(
                    EpAddr::rank(peer),
                    HandlerId::at(130),
                    Body::medium(&[len as u32, fill as u32], &buf),
                )
                .unwrap();
                want += 1;
                ep.wait_until(|| got.load(Ordering::Relaxed) == want);
            }
        }
        gex_testkit::exchange_barrier(&mut ep).unwrap();
    });
}

#[test]
fn long_lands_in_mapped_peer_segment() {
    job(2, |boot| {
        let c = client(boot, 1 << 16);
        let mut ep = c.endpoint(0).unwrap();
        let seen = counted(&mut ep, 140, |_, am| {
            assert_eq!(am.offset(), 100);
            assert_eq!(am.long().expect("a Long").to_vec(), &[0xab; 1000][..]);
        });
        let peer = EpAddr::rank(1 - c.rank());
        ep.request(
            peer,
            HandlerId::at(140),
            Body::long(&[], &[0xab; 1000], 100),
        )
        .unwrap();
        ep.wait_until(|| seen.load(Ordering::Relaxed) == 1);
        // Neighbours map each other's segments; the Long landed in this one.
        assert!(ep.shares_memory_with(peer));
        assert_eq!(ep.segment().len(), 1 << 16);
        let mut own = [0u8; 1000];
        ep.segment().read(100, &mut own).unwrap();
        assert_eq!(own, [0xab; 1000]);
        gex_testkit::exchange_barrier(&mut ep).unwrap();
    });
}

/// A tiny ring forces replies to be deferred; nothing may be lost or deadlock.
#[test]
fn replies_survive_full_rings() {
    job(2, |boot| {
        let cfg = Config::from_pairs([
            ("GEX_SMP_RING_SIZE", "4096"),
            ("GEX_SMP_MAX_MEDIUM", "1024"),
        ]);
        let c = init(ClientBuilder::new().segment_size(4096).config(cfg), boot);
        let mut ep = c.endpoint(0).unwrap();
        echo(&mut ep, 150, 151, true);
        let replies = counted(&mut ep, 151, |_, am| assert_eq!(am.payload().len(), 1000));
        let peer = EpAddr::rank(1 - c.rank());
        let mut would_block = 0u64;
        let total = 5000;
        let mut sent = 0;
        while sent < total {
            match ep
                .try_request(
                    peer,
                    HandlerId::at(150),
                    Body::medium(&[sent], &[7u8; 1000]),
                )
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
        gex_testkit::exchange_barrier(&mut ep).unwrap();
    });
}

/// Ranks that block in the kernel are woken by senders.
#[test]
fn blocking_waits_wake() {
    job(4, |boot| {
        let c = init(
            ClientBuilder::new()
                .segment_size(4096)
                .wait_policy(WaitPolicy::Block),
            boot,
        );
        let mut ep = c.endpoint(0).unwrap();
        assert_eq!(ep.wait_policy(), WaitPolicy::Block);
        echo(&mut ep, 160, 161, false);
        let got = counted(&mut ep, 161, |_, _| {});
        let n = c.size();
        let peer = EpAddr::rank((c.rank() + 1) % n);
        for i in 1..=200 {
            ep.request(peer, HandlerId::at(160), Body::short(&[]))
                .unwrap();
            ep.wait_until(|| got.load(Ordering::Relaxed) == i);
        }
        gex_testkit::exchange_barrier(&mut ep).unwrap();
    });
}

/// Several endpoints per rank: AMs target non-zero endpoints, each EP on its own thread.
#[test]
fn endpoints_on_threads() {
    job(2, |boot| {
        let c = init(ClientBuilder::new().segment_size(4096).endpoints(3), boot);
        let peer_rank = 1 - c.rank();
        std::thread::scope(|s| {
            for e in 0..3u16 {
                let mut ep = c.endpoint(e).unwrap();
                s.spawn(move || {
                    echo(&mut ep, 170, 171, false);
                    let got = counted(&mut ep, 171, |t, am| {
                        assert_eq!(t.src().ep as u32, am.args()[0]);
                    });
                    let dst = EpAddr::new(peer_rank, e);
                    for i in 1..=1000 {
                        ep.request(dst, HandlerId::at(170), Body::short(&[e as u32]))
                            .unwrap();
                        ep.wait_until(|| got.load(Ordering::Relaxed) == i);
                    }
                    gex_testkit::exchange_barrier(&mut ep).unwrap();
                });
            }
        });
    });
}

/// Runs a job of `n` ranks that is expected to fail; returns the job's code and how
/// long it took to end after the failure (the failing rank marks the time with
/// [`procs::mark`]), so that slow rank start-up on a loaded machine does not count.
/// The ranks' own test harness output (the failure this test provokes) is in their
/// logs, which the runner prints only when the job's report is shown.
fn failing_job(
    n: u32,
    body: impl FnOnce(Box<dyn Bootstrap>),
) -> (procs::Report, i32, std::time::Duration) {
    let r = Procs::new(n).run(body);
    r.assert_clean();
    let took = r
        .since_mark(FAILED)
        .expect("the failing rank marked the time of its failure");
    let code = r.code().expect("the job's exit code");
    (r, code, took)
}

/// The mark of the rank that fails on purpose.
const FAILED: &str = "failed";

/// A rank killed with SIGKILL while its peers spin in `wait_until` for a message that
/// will never come: the launcher ends the job promptly with 128 + 9 and nothing is left
/// in /dev/shm.
#[test]
fn kill_9_of_a_rank_ends_the_job() {
    let (r, code, took) = failing_job(3, |boot| {
        let c = client(boot, 1 << 20);
        let mut ep = c.endpoint(0).unwrap();
        gex_testkit::exchange_barrier(&mut ep).unwrap();
        if c.rank() == 1 {
            procs::mark(FAILED);
            rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL)
                .unwrap();
        }
        ep.wait_until(|| false);
    });
    assert_eq!(code, 128 + 9, "job code\n{r}");
    assert!(
        took < std::time::Duration::from_secs(2),
        "job took {took:?}\n{r}"
    );
    assert!(
        r.shm_left.is_empty(),
        "new /dev/shm entries: {:?}",
        r.shm_left
    );
}

/// A panic inside an AM handler ends the job with the panic's exit code (101).
#[test]
fn panic_in_a_handler_ends_the_job() {
    let (r, code, took) = failing_job(2, |boot| {
        let c = client(boot, 1 << 16);
        let mut ep = c.endpoint(0).unwrap();
        ep.register_at(190, |_t: &mut Token<'_>, _am: Am<'_>| {
            procs::mark(FAILED);
            panic!("handler failure (expected by the test)")
        })
        .unwrap();
        gex_testkit::exchange_barrier(&mut ep).unwrap();
        if c.rank() == 0 {
            ep.request(EpAddr::rank(1), HandlerId::at(190), Body::short(&[]))
                .unwrap();
        }
        ep.wait_until(|| false);
    });
    assert_eq!(code, 101, "job code\n{r}");
    assert!(
        took < std::time::Duration::from_secs(2),
        "job took {took:?}\n{r}"
    );
}

#[test]
fn nothing_left_in_dev_shm() {
    let r = Procs::new(2).run(|boot| {
        let c = client(boot, 1 << 20);
        let mut ep = c.endpoint(0).unwrap();
        gex_testkit::exchange_barrier(&mut ep).unwrap();
    });
    r.assert_success();
    assert!(
        r.shm_left.is_empty(),
        "new /dev/shm entries: {:?}",
        r.shm_left
    );
}

/// CPU time (user + system) of this process's thread named `name`, in clock ticks.
fn thread_cpu_ticks(name: &str) -> Option<u64> {
    for t in std::fs::read_dir("/proc/self/task").ok()? {
        let dir = t.ok()?.path();
        let comm = std::fs::read_to_string(dir.join("comm")).ok()?;
        if comm.trim_end() != name {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
        // Fields after the command (which ends with the last ')'): state is field 3,
        // utime field 14, stime field 15.
        let rest = &stat[stat.rfind(')')? + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        return Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?);
    }
    None
}

#[test]
fn the_progress_thread_sleeps_on_the_doorbell_and_serves_a_computing_rank() {
    job(2, |boot| {
        let c = init(
            ClientBuilder::new()
                .segment_size(1 << 16)
                .progress_thread(true),
            boot,
        );
        let mut ep = c.endpoint(0).unwrap();
        assert!(ep.has_progress_thread());
        let pongs = Arc::new(AtomicU64::new(0));
        let p = pongs.clone();
        let pong = ep
            .register(move |_t: &mut Token<'_>, _am: Am<'_>| {
                p.fetch_add(1, Ordering::Relaxed);
            })
            .unwrap();
        let ping = ep
            .register(move |t: &mut Token<'_>, _am: Am<'_>| {
                t.reply(pong, Body::short(&[])).unwrap();
            })
            .unwrap();
        let me = c.rank();
        gex_testkit::exchange_barrier(&mut ep).unwrap();
        // Phase 1: rank 1 computes for 400 ms without calling gex; rank 0's pings are
        // answered meanwhile by rank 1's progress thread.
        if me == 1 {
            let t0 = std::time::Instant::now();
            let mut x = 1u64;
            while t0.elapsed() < std::time::Duration::from_millis(400) {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        } else {
            std::thread::sleep(std::time::Duration::from_millis(20));
            for i in 1..=10 {
                ep.request(EpAddr::rank(1), ping, Body::short(&[])).unwrap();
                let t0 = std::time::Instant::now();
                assert!(
                    ep.wait_until_timeout(
                        || pongs.load(Ordering::Relaxed) >= i,
                        std::time::Duration::from_millis(150)
                    ),
                    "ping {i} was not answered while the target computed"
                );
                // Well inside the 400 ms of computation.
                assert!(t0.elapsed() < std::time::Duration::from_millis(150));
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
        gex_testkit::exchange_barrier(&mut ep).unwrap();
        // Phase 2: nothing arrives for 500 ms: the thread sleeps on the doorbell
        // instead of napping (a napping thread polls tens of thousands of times a
        // second and burns a large share of a core).
        let before = thread_cpu_ticks("gex-progress").expect("the progress thread");
        std::thread::sleep(std::time::Duration::from_millis(500));
        let after = thread_cpu_ticks("gex-progress").expect("the progress thread");
        // Ticks are 10 ms: 500 ms idle must cost less than 50 ms.
        assert!(
            after - before < 5,
            "idle progress thread used {} ticks",
            after - before
        );
        gex_testkit::exchange_barrier(&mut ep).unwrap();
    });
}

/// The hang report (`Endpoint::report`) shows what a peer has not consumed: requests
/// sit in the ring to rank 1 while rank 1 computes without polling.
#[test]
fn the_report_shows_unconsumed_ring_bytes_by_peer() {
    job(2, |boot| {
        let c = client(boot, 4096);
        let mut ep = c.endpoint(0).unwrap();
        let got = counted(&mut ep, 140, |_, _| {});
        // Both ranks are children of the test process: files next to it are the
        // signals. Rank 1 may still be polling inside the barrier after rank 0 left
        // it, so rank 0 sends only once rank 1 says it has stopped calling gex
        // (`ready`), and rank 1 polls again only once rank 0 has read its report
        // (`flag`).
        let name = |what: &str| {
            std::env::temp_dir().join(format!(
                "gex-smp-report-test-{what}-{}",
                std::os::unix::process::parent_id()
            ))
        };
        let (flag, ready) = (name("read"), name("ready"));
        let wait_for = |f: &std::path::Path, what: &str| {
            let t0 = std::time::Instant::now();
            while !f.exists() {
                assert!(t0.elapsed().as_secs() < 60, "{what}");
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        };
        gex_testkit::exchange_barrier(&mut ep).unwrap();
        if c.rank() == 0 {
            wait_for(&ready, "rank 1 never left the barrier");
            let _ = std::fs::remove_file(&ready);
            for i in 0..3 {
                ep.request(
                    EpAddr::rank(1),
                    HandlerId::at(140),
                    Body::medium(&[i], &[9u8; 100]),
                )
                .unwrap();
            }
            let report = ep.report();
            let line = report
                .lines()
                .find(|l| l.contains("conduit smp: to rank 1"))
                .unwrap_or_else(|| panic!("no line for rank 1 in:\n{report}"));
            let bytes: u64 = line
                .split("1 ep 0: ")
                .nth(1)
                .and_then(|r| r.split(' ').next())
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("no byte count in {line:?}"));
            assert!(bytes >= 300, "{line}");
            assert!(line.contains("request bytes"), "{line}");
            std::fs::write(&flag, b"").unwrap();
        } else {
            std::fs::write(&ready, b"").unwrap();
            wait_for(&flag, "rank 0 never read its report");
            ep.wait_until(|| got.load(Ordering::Relaxed) == 3);
            let _ = std::fs::remove_file(&flag);
        }
        gex_testkit::exchange_barrier(&mut ep).unwrap();
    });
}
