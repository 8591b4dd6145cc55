//! What the ibv conduit's thread-rank tests share: a client over the emulation and a
//! bounded wait for a count. Each test file uses part of it.
#![allow(dead_code)]

use gex_conduit_ibv::Ibv;
use gex_core::layer::LayerSet;
use gex_core::{Client, ClientBuilder, Config};
use gex_testkit::boot::ThreadBoot;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A client from `builder` over the emulation (`GEX_IBV_PROVIDER=emu` and `extra`), with
/// `segment` bytes of segment, on the thread rank `boot`.
///
/// # Panics
/// If `init` fails.
pub(crate) fn emu_client<L: LayerSet>(
    builder: ClientBuilder<L>,
    boot: ThreadBoot,
    extra: &[(&str, &str)],
    segment: usize,
) -> Client<Ibv> {
    let mut pairs = vec![("GEX_IBV_PROVIDER", "emu")];
    pairs.extend_from_slice(extra);
    builder
        .config(Config::from_pairs(pairs))
        .segment_size(segment)
        .init::<Ibv>(Box::new(boot))
        .expect("init over the emulation")
}

/// Waits (polling `ep`) until `count` reaches `n`, for at most `limit`.
///
/// # Panics
/// If it does not in time, naming how many of `n` `what` arrived.
pub(crate) fn wait_for_count(
    ep: &mut gex_core::Endpoint<Ibv>,
    count: &AtomicU64,
    n: u64,
    limit: Duration,
    what: &str,
) {
    let ok = ep.wait_until_timeout(|| count.load(Ordering::Relaxed) >= n, limit);
    assert!(
        ok,
        "only {} of {n} {what} arrived",
        count.load(Ordering::Relaxed)
    );
}
