//! `ClientBuilder::init` against a bootstrap that says something inconsistent (a
//! corrupt launcher, or a runtime's own `impl Bootstrap`, a safe trait): a rank
//! outside the job, or an exchange that returns something other than what the ranks
//! sent. An error naming the rank and the field, never a panic or an allocation of
//! what a blob claims. The `core-layout` fuzz target of `benches/gex-fuzz` explores
//! the same path with random exchanges; the conduits' checks of what peers publish
//! are tested in their crates (`conduits/smp/tests/peer_trust.rs`, ...).

mod common;

use common::TestBoot;
use gex_core::InitError;
use gex_core::boot::BootError;

/// A layout blob as rank `rank` of a job of `size` ranks on host 0 publishes it: rank,
/// size, endpoints, segment length, host, process id, endpoint capacity (the default
/// `GEX_MAX_ENDPOINTS`, 16, or `eps` if more) (little-endian).
fn blob_of(rank: u32, size: u32, eps: u16, seg: u64, host: u32) -> Vec<u8> {
    let mut b = rank.to_le_bytes().to_vec();
    b.extend(size.to_le_bytes());
    b.extend(eps.to_le_bytes());
    b.extend(seg.to_le_bytes());
    b.extend(host.to_le_bytes());
    b.extend(std::process::id().to_le_bytes());
    b.extend(eps.max(16).to_le_bytes());
    b
}

/// Rank `rank`'s blob in a job of `size` ranks, on host 0.
fn blob(rank: u32, size: u32, eps: u16, seg: u64) -> Vec<u8> {
    blob_of(rank, size, eps, seg, 0)
}

/// `init` of rank `rank` of `size` ranks (all on host 0) whose exchange returns
/// `blobs`; the text of a `BootError::Protocol`.
fn init_as(rank: u32, size: u32, blobs: Vec<Vec<u8>>) -> Result<(), String> {
    TestBoot::with_blobs(rank, size, blobs)
        .init()
        .map(|c| c.finalize().unwrap())
        .map_err(|e| match e {
            InitError::Boot(BootError::Protocol(m)) => m,
            other => format!("another error: {other}"),
        })
}

fn init(size: u32, blobs: Vec<Vec<u8>>) -> Result<(), String> {
    init_as(0, size, blobs)
}

/// Asserts that [`init_as`] fails with an error whose text contains `want`.
#[track_caller]
fn refused_as(rank: u32, size: u32, blobs: Vec<Vec<u8>>, want: &str) {
    let e = init_as(rank, size, blobs).unwrap_err();
    assert!(e.contains(want), "{e}");
}

/// Asserts that [`init`] fails with an error whose text contains `want`.
#[track_caller]
fn refused(size: u32, blobs: Vec<Vec<u8>>, want: &str) {
    refused_as(0, size, blobs, want);
}

/// Asserts that rank 0 of 2, given its own blob and rank 1's `theirs`, refuses the
/// exchange with an error whose text contains `want`.
#[track_caller]
fn refused_by_rank_0(theirs: Vec<u8>, want: &str) {
    refused(2, vec![blob(0, 2, 1, 4096), theirs], want);
}

#[test]
fn an_honest_exchange_works() {
    init(1, vec![blob(0, 1, 1, 4096)]).unwrap();
}

/// Regression (found by the `core-layout` fuzz target, input `00 01`): an exchange
/// with fewer blobs than ranks made the loopback conduit index past the end of the
/// layout (a panic inside `init`).
#[test]
fn too_few_blobs_is_an_error() {
    refused(1, vec![], "0 layout blobs for 1 ranks");
    refused(2, vec![blob(0, 2, 1, 4096)], "1 layout blobs for 2 ranks");
}

/// Regression (found while writing the `core-layout` fuzz target): this rank's own
/// entry was taken from the exchange, so a corrupt launcher could make it allocate a
/// segment of any size it named.
#[test]
fn a_changed_own_blob_is_an_error() {
    refused(1, vec![blob(0, 1, 1, 1 << 60)], "not this rank's own blob");
}

/// Regression (found while writing the `core-layout` fuzz target): a rank with no
/// endpoint was accepted into the layout.
#[test]
fn a_rank_without_endpoints_is_an_error() {
    refused_by_rank_0(blob(1, 2, 0, 4096), "rank 1 has no endpoint");
}

/// A bootstrap that says this is rank 1 of a job of 1 (or of 0 ranks): an error naming
/// the rank and the size before anything is indexed by the rank.
#[test]
fn a_rank_outside_the_job_is_an_error() {
    refused_as(
        1,
        1,
        vec![blob(1, 1, 1, 4096)],
        "rank 1 of a job of 1 ranks",
    );
    refused_as(0, 0, vec![], "rank 0 of a job of 0 ranks");
}

/// An exchange with more blobs than ranks.
#[test]
fn too_many_blobs_is_an_error() {
    refused(
        1,
        vec![blob(0, 1, 1, 4096), blob(0, 1, 1, 4096)],
        "2 layout blobs for 1 ranks",
    );
}

/// Every layout blob names the rank that sent it: a blob at another index (a rank
/// whose bootstrap gives it another rank, blobs out of order) is refused by every rank
/// that receives it, naming both.
#[test]
fn a_blob_naming_another_rank_is_an_error() {
    refused_by_rank_0(
        blob(0, 2, 1, 4096),
        "rank 1's layout blob says it is rank 0",
    );
    // Rank 0's own blob says rank 0, rank 1's says 2.
    refused_by_rank_0(
        blob(2, 2, 1, 4096),
        "rank 1's layout blob says it is rank 2",
    );
}

/// A rank whose bootstrap gives another job size.
#[test]
fn a_blob_with_another_job_size_is_an_error() {
    refused_by_rank_0(
        blob(1, 3, 1, 4096),
        "rank 1's layout blob says the job has 3 ranks, this rank's bootstrap says 2",
    );
}

/// A rank whose bootstrap puts it on another host than this rank's bootstrap does
/// (so one would map the other's memory while the other does not expect it).
#[test]
fn a_blob_on_another_host_is_an_error() {
    refused_by_rank_0(
        blob_of(1, 2, 1, 4096, 7),
        "rank 1's layout blob says it is on host 7, this rank's bootstrap says host 0",
    );
}

/// Blobs of another length (also the 10-byte blobs of the format before the rank,
/// size and host were added) are refused naming the rank.
#[test]
fn a_blob_of_another_shape_is_an_error() {
    let mut short = blob(1, 2, 1, 4096);
    short.pop();
    refused_by_rank_0(short, "layout blob of rank 1 has 27 bytes, not 28");
    refused_by_rank_0(
        vec![1, 0, 0, 16, 0, 0, 0, 0, 0, 0],
        "layout blob of rank 1 has 10 bytes",
    );
}

/// A rank whose blob claims an endpoint capacity below its endpoints made at init is
/// refused naming the rank (every conduit may size per-endpoint state by it).
#[test]
fn a_capacity_below_the_endpoints_is_an_error() {
    let mut b = blob(1, 2, 3, 4096);
    let n = b.len();
    b[n - 2..].copy_from_slice(&2u16.to_le_bytes());
    refused_by_rank_0(b, "rank 1 has a capacity of 2 endpoints, below its 3");
}
