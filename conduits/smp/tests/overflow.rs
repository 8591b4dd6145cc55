//! Requests kept at the sender when the destination's ring is full
//! (`GEX_SMP_OVERFLOW`): accepted while the destination does not poll, delivered in
//! order once it does, handed over when the sending endpoint is dropped, and none kept
//! with `GEX_SMP_OVERFLOW=0`. Every job is started by gex-testkit's process runner.

use gex_conduit_smp::Smp;
use gex_core::{Am, Body, ClientBuilder, Config, EpAddr, HandlerId, Injected, Token};
use gex_testkit::procs::Procs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const H: HandlerId = HandlerId::at(150);
/// Payload bytes per request: with the 4 KiB rings below, three fit a ring.
const LEN: usize = 1000;

/// A file next to the test process, shared by the ranks (children of it) of the test
/// named `test`.
fn signal(test: &str, what: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "gex-smp-overflow-{test}-{what}-{}",
        std::os::unix::process::parent_id()
    ))
}

fn wait_file(f: &Path, what: &str) {
    let t0 = Instant::now();
    while !f.exists() {
        assert!(t0.elapsed() < Duration::from_secs(60), "{what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Rank 1 stops calling gex until rank 0 has sent what the ring and the overflow
/// take without any poll of rank 1; returns how many that was (on rank 0), after
/// `total` requests reached rank 1 in order. `drop_early`: rank 0 drops its endpoint
/// right after the last request (the drop must hand the kept ones over).
/// `empty`: Short requests without arguments or payload (an empty body) instead of
/// numbered Medium ones of `LEN` bytes (counted, not checked for order).
fn run(test: &'static str, overflow: &str, total: u32, drop_early: bool, empty: bool) -> u32 {
    let cfg = Config::from_pairs([
        ("GEX_SMP_RING_SIZE", "4096"),
        ("GEX_SMP_MAX_MEDIUM", "1024"),
        ("GEX_SMP_OVERFLOW", overflow),
    ]);
    let r = Procs::new(2).run(move |boot| {
        let c = ClientBuilder::new()
            .segment_size(4096)
            .config(cfg)
            .init::<Smp>(boot)
            .unwrap();
        let mut ep = c.endpoint(0).unwrap();
        let seen = Arc::new(AtomicU64::new(0));
        let s = seen.clone();
        ep.register_at(H.index(), move |_t: &mut Token<'_>, am: Am<'_>| {
            if let Some(&i) = am.args().first() {
                assert_eq!(
                    u64::from(i),
                    s.load(Ordering::Relaxed),
                    "requests out of order"
                );
                assert!(am.payload().len() == LEN && am.payload().iter().all(|&b| b == i as u8));
            } else {
                assert!(empty && am.payload().is_empty());
            }
            s.fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
        let (ready, sent) = (signal(test, "ready"), signal(test, "sent"));
        gex_testkit::exchange_barrier(&mut ep).unwrap();
        if c.rank() == 0 {
            wait_file(&ready, "rank 1 never stopped polling");
            let _ = std::fs::remove_file(&ready);
            let mut n = 0u32;
            while n < total {
                let r = if empty {
                    ep.try_request(EpAddr::rank(1), H, Body::short(&[]))
                } else {
                    ep.try_request(EpAddr::rank(1), H, Body::medium(&[n], &[n as u8; LEN]))
                }
                .unwrap();
                if r == Injected::WouldBlock {
                    break;
                }
                n += 1;
            }
            gex_testkit::procs::note("accepted", &n.to_string());
            let report = ep.report();
            if !empty && n > 3 {
                assert!(report.contains("requests kept"), "{report}");
            }
            gex_testkit::procs::note("kept", &kept_in(&report).to_string());
            std::fs::write(&sent, b"").unwrap();
            for i in n..total {
                if empty {
                    ep.request(EpAddr::rank(1), H, Body::short(&[])).unwrap();
                } else {
                    ep.request(EpAddr::rank(1), H, Body::medium(&[i], &[i as u8; LEN]))
                        .unwrap();
                }
            }
            if drop_early {
                drop(ep);
                return;
            }
        } else {
            std::fs::write(&ready, b"").unwrap();
            wait_file(&sent, "rank 0 never filled the ring");
            let _ = std::fs::remove_file(&sent);
            let t0 = Instant::now();
            while seen.load(Ordering::Relaxed) < u64::from(total) {
                assert!(t0.elapsed() < Duration::from_secs(60), "requests lost");
                ep.poll();
            }
            if drop_early {
                // Rank 0's endpoint is gone: the client's finalisation is the meeting.
                return;
            }
        }
        gex_testkit::exchange_barrier(&mut ep).unwrap();
    });
    r.assert_success();
    let note = |what: &str| -> u32 {
        r.notes(what)
            .first()
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("rank 0 noted no {what}"))
    };
    let kept = note("kept");
    if overflow == "0" {
        assert_eq!(kept, 0, "requests kept with GEX_SMP_OVERFLOW=0");
    }
    if empty {
        // Each empty request counts one byte of the overflow.
        let cap: u32 = overflow.parse().expect("a plain number of bytes");
        assert_eq!(
            kept, cap,
            "empty requests kept with {cap} bytes of overflow"
        );
    }
    note("accepted")
}

/// The requests the endpoint report says are kept (the number before each
/// "requests kept"), summed over destinations.
fn kept_in(report: &str) -> u64 {
    report
        .match_indices(" requests kept")
        .map(|(at, _)| {
            let word = report[..at].rsplit(' ').next().unwrap_or("");
            word.parse::<u64>()
                .unwrap_or_else(|_| panic!("no count before \"requests kept\": {report}"))
        })
        .sum()
}

/// Rank 0 got `n` requests accepted without a poll of rank 1, within `want`.
fn assert_accepted(n: u32, want: std::ops::RangeInclusive<u32>) {
    assert!(
        want.contains(&n),
        "accepted without a poll of the peer: {n}"
    );
}

#[test]
fn a_full_ring_keeps_requests_in_the_overflow_and_delivers_them_in_order() {
    // Ring: 3 records of ~1 KiB; overflow: 16 KiB, 15 more.
    assert_accepted(run("keep", "16384", 100, false, false), 17..=20);
}

#[test]
fn without_an_overflow_a_full_ring_pushes_back_at_once() {
    assert_accepted(run("none", "0", 100, false, false), 2..=4);
}

#[test]
fn dropping_the_endpoint_hands_the_kept_requests_over() {
    // All 60 fit the ring and the 64 KiB overflow without a poll of rank 1, which
    // starts polling only when rank 0 is about to drop its endpoint: the drop must wait
    // for the 57 or so kept requests to be handed over.
    assert_accepted(run("drop", "65536", 60, true, false), 60..=60);
}

#[test]
fn without_an_overflow_empty_requests_push_back_at_once_too() {
    // A Short request without arguments has an empty body: it must count against the
    // overflow like any other (with 0, none is kept: `run` checks the report), not
    // slip in without bound. The 4 KiB ring takes a few hundred such records; 5000 do
    // not fit.
    assert_accepted(run("empty", "0", 5000, false, true), 1..=999);
}

#[test]
fn an_overflow_keeps_a_bounded_number_of_empty_requests() {
    // 64 bytes of overflow keep exactly 64 empty requests (`run` checks the report)
    // beyond what the ring takes.
    assert_accepted(run("empty-keep", "64", 5000, false, true), 65..=1063);
}
