//! What a bootstrap says, and what a peer publishes at open (addresses, segments), is
//! checked against the job layout and the provider before the ofi conduit uses it
//! (issue 24, point 3). Each job wraps the process runner's bootstrap in gex-testkit's
//! [`Tampered`] on rank 0 (safe code only: any runtime's `impl Bootstrap` could do the
//! same) and runs the conduit alone over `tcp;ofi_rxm` on loopback; rank 0 must fail
//! `init` with an error naming the rank, the endpoint and the field.

use gex_conduit_ofi::Ofi;
use gex_core::boot::Bootstrap;
use gex_core::{Am, Body, ClientBuilder, Config, EpAddr, HandlerId, Token};
use gex_testkit::procs::{Outcome, Procs, Report};
use gex_testkit::tamper::{Tampered, replace_le_u64};

/// Segment length of every endpoint of these jobs.
const SEG: u64 = 4096;

/// Runs a 2-rank job over `tcp;ofi_rxm` whose rank 0 initialises through
/// `tamper(its bootstrap)`; every rank that gets through `init` sends an 8 KiB Long
/// to the other's EP 0 (allowed only by a lying layout), then finalizes.
fn job(tamper: fn(Tampered) -> Tampered) -> Report {
    Procs::new(2).run(move |boot| -> Result<(), String> {
        let boot: Box<dyn Bootstrap> = if boot.rank() == 0 {
            tamper(Tampered::new(boot)).boxed()
        } else {
            boot
        };
        let c = ClientBuilder::new()
            .config(Config::from_pairs([("GEX_OFI_PROVIDER", "tcp")]))
            .segment_size(SEG as usize)
            .init::<Ofi>(boot)
            .map_err(|e| e.to_string())?;
        let mut ep = c.endpoint(0).map_err(|e| e.to_string())?;
        ep.register_at(200, |_t: &mut Token<'_>, _am: Am<'_>| {})
            .map_err(|e| e.to_string())?;
        let peer = EpAddr::rank(1 - c.rank());
        if ep.segment_len_of(peer.rank) != Some(SEG as usize) {
            ep.request(
                peer,
                HandlerId::at(200),
                Body::long(&[], &[0xab; 2 * SEG as usize], 0),
            )
            .map_err(|e| format!("the Long was refused: {e}"))?;
        }
        gex_testkit::exchange_barrier(&mut ep).map_err(|e| e.to_string())?;
        drop(ep);
        c.finalize().map_err(|e| e.to_string())
    })
}

/// Asserts that the job failed cleanly with rank 0 failing `init`, naming `words`.
fn assert_refused(r: &Report, words: &[&str]) {
    r.assert_clean();
    match r.rank(0).map(|x| &x.outcome) {
        Some(Outcome::Failed(m)) if words.iter().all(|w| m.contains(w)) => {}
        other => panic!("rank 0 should have failed naming {words:?}, got {other:?}\n{r}"),
    }
}

/// Rank 0's bootstrap inflates rank 1's segment length (4 KiB to 1 MiB) in the core's
/// layout exchange. Rank 1 publishes the length it registered; rank 0 must refuse it
/// at open instead of validating Longs and RMA to rank 1 against 1 MiB (before, the
/// 8 KiB Long reached rank 1, which ended the job with a corrupt-message panic; a
/// native put would have been refused only by the provider at the target).
#[test]
fn inflated_peer_segments_fail_init() {
    let r = job(|t| {
        t.incoming(|n, all| {
            if n == 0 {
                assert!(replace_le_u64(&mut all[1], SEG, 1 << 20), "a layout blob");
            }
        })
    });
    assert_refused(&r, &["rank 1 EP 0", "segment of 4096 bytes", "1048576"]);
}

/// The conduit's exchange (the second) returns one blob fewer than ranks: an error
/// naming the count, before any address is indexed.
#[test]
fn a_short_address_exchange_is_an_error_not_a_panic() {
    let r = job(|t| {
        t.incoming(|n, all| {
            if n == 1 {
                all.pop();
            }
        })
    });
    assert_refused(&r, &["1 address blobs for 2 ranks"]);
}

/// Cuts the first endpoint's address in an address blob to its first `keep` bytes
/// (the blob: provider length and name, largest Medium, endpoint count, then per
/// endpoint the address length and bytes, ...).
fn cut_first_address(b: &mut Vec<u8>, keep: usize) {
    let plen = u32::from_le_bytes(b[..4].try_into().unwrap()) as usize;
    let at = 4 + plen + 8 + 4;
    let alen = u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize;
    assert!(keep < alen);
    b[at..at + 4].copy_from_slice(&(keep as u32).to_le_bytes());
    b.drain(at + 4 + keep..at + 4 + alen);
}

/// Rank 1's EP 0 address reaches rank 0 cut to 2 bytes. `fi_av_insert` takes no
/// length (tcp reads a whole 16-byte `sockaddr_in`), so before, the provider read 14
/// bytes past the end of the address (undefined behaviour), and what it found there
/// decided the outcome: here an `Invalid argument` naming no rank; a plausible
/// address would have left the wire-up waiting 60 s for a peer at a garbage address.
#[test]
fn a_short_peer_address_is_refused() {
    let r = job(|t| {
        t.incoming(|n, all| {
            if n == 1 {
                cut_first_address(&mut all[1], 2);
            }
        })
    });
    assert_refused(&r, &["rank 1 EP 0", "2-byte address", "16 bytes"]);
}
