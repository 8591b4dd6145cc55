//! What a bootstrap says, and what a peer publishes, is checked against the job layout
//! before the smp conduit uses it (issue 24, point 3).
//!
//! `Bootstrap` is a safe trait: a runtime implements it for its launcher, and nothing
//! stops such an implementation from returning other ranks' blobs changed. Each test
//! here wraps the process runner's real bootstrap in gex-testkit's
//! [`Tampered`](gex_testkit::tamper::Tampered) (safe code only) on one rank, and checks
//! that `init` fails with an error naming the rank and the field, on every rank that
//! can tell, instead of a write past a peer's segment, a panic or a hang. Without the
//! checks, the first three jobs write 4 KiB past a peer's 4 KiB segment (into the
//! segment of its next endpoint, which the peer then finds changed: the *canary*).

use gex_conduit_smp::Smp;
use gex_core::boot::Bootstrap;
use gex_core::{Am, Body, ClientBuilder, EpAddr, HandlerId, Token};
use gex_rma::{GlobalPtr, RmaExt};
use gex_testkit::procs::{Outcome, Procs, Report};
use gex_testkit::tamper::{Tampered, replace_le_u64};

/// Segment length of every endpoint of these jobs.
const SEG: u64 = 4096;
/// What a lying bootstrap says the other ranks' segments are.
const INFLATED: u64 = 1 << 20;
/// Bytes the probes write at offset 0 of a peer's EP 0: its segment and the whole of
/// the next endpoint's (segments are page-rounded and consecutive in a region).
const SPILL: usize = 2 * SEG as usize;

/// What a tampered bootstrap changes.
#[derive(Clone, Copy, Debug)]
enum Lie {
    /// In the core's layout exchange (the first), the other ranks' segment lengths
    /// read `INFLATED` instead of `SEG`.
    InflateOthers,
    /// In the core's layout exchange, this rank's own blob goes out with `INFLATED`
    /// (and comes back as it was sent): every other rank is told a segment length that
    /// this rank's region does not have.
    InflateOwnOutgoing,
    /// The `n`th exchange (0: the core's, 1: the conduit's) returns one blob fewer.
    DropLastBlob(usize),
    /// The `n`th exchange returns one blob more (a copy of the last).
    ExtraBlob(usize),
    /// `rank()` answers this instead of the launcher's rank.
    Rank(u32),
}

/// The rank's bootstrap: telling `lie` on rank `liar`, the real one elsewhere.
fn boot_of(boot: Box<dyn Bootstrap>, liar: u32, lie: Lie) -> Box<dyn Bootstrap> {
    let me = boot.rank();
    if me != liar {
        return boot;
    }
    let t = Tampered::new(boot);
    match lie {
        Lie::InflateOthers => t.incoming(move |n, all| {
            if n == 0 {
                for (r, b) in all.iter_mut().enumerate() {
                    if r != me as usize {
                        assert!(replace_le_u64(b, SEG, INFLATED), "a layout blob");
                    }
                }
            }
        }),
        Lie::InflateOwnOutgoing => t.outgoing(|n, b| {
            if n == 0 {
                assert!(replace_le_u64(b, SEG, INFLATED), "a layout blob");
            }
        }),
        Lie::DropLastBlob(k) => t.incoming(move |n, all| {
            if n == k {
                all.pop();
            }
        }),
        Lie::ExtraBlob(k) => t.incoming(move |n, all| {
            if n == k {
                let last = all.last().cloned().unwrap_or_default();
                all.push(last);
            }
        }),
        Lie::Rank(r) => t.with_rank(r),
    }
    .boxed()
}

/// How one rank of a probe ended: its init error (as text), or `Ok` after the part of
/// the probe that runs when init succeeds.
type Ran = Result<(), String>;

/// The canary check of rank 1 after a probe wrote: the segment of its EP 1, just past
/// the 4 KiB segment of its EP 0, must still be zero.
fn check_canary(c: &gex_core::Client<impl gex_core::spi::Conduit>) -> Ran {
    let ep1 = c.endpoint(1).map_err(|e| e.to_string())?;
    let mut seg = vec![0u8; SEG as usize];
    ep1.segment().read(0, &mut seg).map_err(|e| e.to_string())?;
    match seg.iter().filter(|&&b| b != 0).count() {
        0 => Ok(()),
        n => Err(format!(
            "CANARY: {n} bytes of the segment of rank 1's EP 1 were written by a transfer \
             to its EP 0 (past EP 0's {SEG}-byte segment)"
        )),
    }
}

/// After a boot barrier, rank 1 checks that nothing wrote past its segment.
fn canary_after_barrier(c: &gex_core::Client<Smp>) -> Ran {
    c.boot_barrier().map_err(|e| e.to_string())?;
    if c.rank() == 1 {
        check_canary(c)?;
    }
    Ok(())
}

/// A 2-rank job (two endpoints each) whose rank `liar` tells `lie`: rank 0 sends a
/// Long of `SPILL` bytes to rank 1's EP 0, then rank 1 checks its canary.
fn long_past_the_segment(liar: u32, lie: Lie) -> Report {
    Procs::new(2).run(move |boot| -> Ran {
        let c = ClientBuilder::new()
            .segment_size(SEG as usize)
            .endpoints(2)
            .init::<Smp>(boot_of(boot, liar, lie))
            .map_err(|e| e.to_string())?;
        let mut ep = c.endpoint(0).map_err(|e| e.to_string())?;
        ep.register_at(200, |_t: &mut Token<'_>, _am: Am<'_>| {})
            .map_err(|e| e.to_string())?;
        if c.rank() == 0 {
            ep.request(
                EpAddr::new(1, 0),
                HandlerId::at(200),
                Body::long(&[], &[0xab; SPILL], 0),
            )
            .map_err(|e| format!("the Long was refused: {e}"))?;
        }
        canary_after_barrier(&c)
    })
}

/// The outcome of `rank` as text, for assertion messages.
fn outcome(r: &Report, rank: u32) -> Option<&Outcome> {
    r.rank(rank).map(|x| &x.outcome)
}

/// Asserts that the job failed cleanly, that rank `rank` failed with an error
/// containing every one of `words`, and that no rank found its canary changed.
fn assert_refused(r: &Report, rank: u32, words: &[&str]) {
    r.assert_clean();
    for x in &r.ranks {
        if let Outcome::Failed(m) | Outcome::Panicked(m) = &x.outcome {
            assert!(!m.contains("CANARY"), "a write went past a segment:\n{r}");
        }
    }
    match outcome(r, rank) {
        Some(Outcome::Failed(m)) if words.iter().all(|w| m.contains(w)) => {}
        other => panic!("rank {rank} should have failed naming {words:?}, got {other:?}\n{r}"),
    }
}

/// A bootstrap on rank 0 that inflates rank 1's segment length (4 KiB to 1 MiB) in the
/// core's layout exchange. Without a check, rank 0 validates a Long of 8 KiB to rank
/// 1's EP 0 against 1 MiB and writes it through its mapping of rank 1's region, past
/// the 4 KiB segment. Rank 0 must instead fail `init`, naming rank 1 and the segment
/// length.
#[test]
fn inflated_peer_segments_fail_init_instead_of_a_long_writing_past_them() {
    let r = long_past_the_segment(0, Lie::InflateOthers);
    assert_refused(&r, 0, &["rank 1", "segment", "4096", "1048576"]);
}

/// As [`inflated_peer_segments_fail_init_instead_of_a_long_writing_past_them`], with an
/// RMA put (gex-rma's direct path copies through the mapping after checking the range
/// against the layout).
#[test]
fn inflated_peer_segments_fail_init_instead_of_a_put_writing_past_them() {
    let r = Procs::new(2).run(|boot| -> Ran {
        let c = gex_testkit::rma::client_builder()
            .segment_size(SEG as usize)
            .endpoints(2)
            .init::<Smp>(boot_of(boot, 0, Lie::InflateOthers))
            .map_err(|e| e.to_string())?;
        let mut ep = c.endpoint(0).map_err(|e| e.to_string())?;
        if c.rank() == 0 {
            ep.put(
                GlobalPtr::<u8>::new(EpAddr::new(1, 0), 0),
                &[0xab; SPILL],
                gex_core::Blocking,
            )
            .map_err(|e| format!("the put was refused: {e}"))?;
        }
        canary_after_barrier(&c)
    });
    assert_refused(&r, 0, &["rank 1", "segment", "4096", "1048576"]);
}

/// The same lie told the other way: rank 1's bootstrap sends a layout blob with a
/// 1 MiB segment while its region holds 4 KiB (and hides it from rank 1 itself).
/// Rank 0's bootstrap is honest; rank 0 must still refuse rank 1's region, whose
/// header disagrees with the layout.
#[test]
fn a_peer_whose_region_disagrees_with_the_layout_is_refused() {
    let r = long_past_the_segment(1, Lie::InflateOwnOutgoing);
    assert_refused(&r, 0, &["rank 1", "segment", "4096", "1048576"]);
}

/// Runs a 2-rank job whose rank `liar` tells `lie`, and returns its report; every rank
/// that gets through `init` finalizes. A rank whose `init` fails notes the error
/// (under `init`) and waits a second before failing, so that another rank failing at
/// the same step records its error too before the launcher ends the job.
fn init_job(liar: u32, lie: Lie) -> Report {
    Procs::new(2).run(move |boot| -> Ran {
        let c = ClientBuilder::new()
            .segment_size(SEG as usize)
            .init::<Smp>(boot_of(boot, liar, lie))
            .map_err(|e| {
                gex_testkit::procs::note("init", &e.to_string());
                std::thread::sleep(std::time::Duration::from_secs(1));
                e.to_string()
            })?;
        c.finalize().map_err(|e| e.to_string())
    })
}

/// A bootstrap whose second exchange (the conduit's region descriptors) returns one
/// blob fewer than ranks: an error naming the count, not an index out of bounds.
#[test]
fn a_short_region_exchange_is_an_error_not_a_panic() {
    let r = init_job(0, Lie::DropLastBlob(1));
    assert_refused(&r, 0, &["1 region blobs", "2 ranks"]);
}

/// The same with one blob too many.
#[test]
fn a_long_region_exchange_is_an_error() {
    let r = init_job(0, Lie::ExtraBlob(1));
    assert_refused(&r, 0, &["3 region blobs", "2 ranks"]);
}

/// A bootstrap on rank 0 that says it is rank 1 (the launcher has it at 0, and its
/// blobs come back at index 0). Both ranks can tell from the layout exchange, since
/// every layout blob names the rank that sent it: rank 1 fails `init` naming rank 0
/// and what it claimed; the liar finds at index 1 a blob that is not its own (the
/// blobs carry each rank's process id, so two processes' blobs always differ) or, in
/// a build where it is, rank 0's claim.
#[test]
fn a_bootstrap_lying_about_its_rank_fails_every_rank() {
    let r = init_job(0, Lie::Rank(1));
    r.assert_clean();
    for rank in [0, 1] {
        let note = r
            .rank(rank)
            .and_then(|x| x.notes.get("init"))
            .map(String::as_str);
        match note {
            Some(m) if m.contains("rank 0's layout blob says it is rank 1") => {}
            Some(m) if rank == 0 && m.contains("not this rank's own blob at its rank") => {}
            other => panic!("rank {rank}'s init error: {other:?}\n{r}"),
        }
    }
}

/// A neighbour with smaller rings (`GEX_SMP_RING_SIZE` is per rank, and its region's
/// header says what it uses): Mediums to it are bounded by what its rings hold, and
/// the limits of the two ranks agree. Before, rank 0 offered its own 64 KiB limit
/// toward rank 1, whose 4 KiB rings can never take such a record: the request waited
/// for ring space forever.
#[test]
fn a_neighbour_with_smaller_rings_bounds_mediums_to_it() {
    Procs::new(2)
        .run(|boot| -> Ran {
            let config = if boot.rank() == 1 {
                gex_core::Config::from_pairs([
                    ("GEX_SMP_RING_SIZE", "4096"),
                    ("GEX_SMP_MAX_MEDIUM", "1024"),
                ])
            } else {
                gex_core::Config::default()
            };
            let c = ClientBuilder::new()
                .segment_size(SEG as usize)
                .config(config)
                .init::<Smp>(boot)
                .map_err(|e| e.to_string())?;
            let mut ep = c.endpoint(0).map_err(|e| e.to_string())?;
            let got = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let g = got.clone();
            ep.register_at(201, move |_t: &mut Token<'_>, am: Am<'_>| {
                g.store(am.payload().len(), std::sync::atomic::Ordering::Release)
            })
            .map_err(|e| e.to_string())?;
            let peer = EpAddr::rank(1 - c.rank());
            let max = ep.max_medium(peer);
            if max != 1024 {
                // Ends the job at once: returning would finalize, a collective the
                // other rank (waiting in the exchange below) never joins.
                gex_testkit::procs::failed(&format!(
                    "rank {}: max_medium toward rank {} is {max}, not 1024 (the smaller of both ranks' limits)",
                    c.rank(),
                    peer.rank
                ));
                std::process::exit(1);
            }
            gex_testkit::exchange_barrier(&mut ep).map_err(|e| e.to_string())?;
            if c.rank() == 0 {
                let t0 = std::time::Instant::now();
                let payload = vec![7u8; max];
                while ep
                    .try_request(peer, HandlerId::at(201), Body::medium(&[], &payload))
                    .map_err(|e| e.to_string())?
                    == gex_core::Injected::WouldBlock
                {
                    if t0.elapsed() > std::time::Duration::from_secs(20) {
                        gex_testkit::procs::failed(&format!(
                            "a {max}-byte Medium never fit rank 1's rings"
                        ));
                        std::process::exit(1);
                    }
                    ep.poll();
                }
            } else {
                ep.wait_until(|| got.load(std::sync::atomic::Ordering::Acquire) == 1024);
            }
            gex_testkit::exchange_barrier(&mut ep).map_err(|e| e.to_string())
        })
        .assert_success();
}
