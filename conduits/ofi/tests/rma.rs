//! The RMA conformance suite (gex-testkit's `rma` module, exercising gex-rma) on the ofi
//! conduit: every case runs as a real multi-process job started by gex-testkit's
//! process runner, over libfabric's `tcp;ofi_rxm` and `shm` providers on this host, with
//! native RMA (`FI_RMA`: `fi_writemsg`/`fi_read`) and with `GEX_OFI_RMA=0` (gex-rma's AM
//! reference path). Segments are 2 MiB: the suite sizes its transfers to the segment.
//! `native_path_is_taken` checks that the native path really carries puts and gets.
//! The `*_mr_local` shapes run the suite with `GEX_OFI_MR_LOCAL=1` (the conduit acts as
//! if the provider required `FI_MR_LOCAL`: the suite's heap buffers are registered on
//! demand) and every shape checks after finalisation that no registration is left
//! open; `mr_cache_*` checks the registration cache with `Ofi::stats`, and
//! `relaxed_puts_*` the relaxed implicit-event puts and their flushes.
//!
//! Exclusions: none.

use gex_conduit_ofi::Ofi;
use gex_core::{Blocking, ClientBuilder, Config, Endpoint, EpAddr, Nbi, WaitPolicy};
use gex_rma::{
    AtomicFlags, AtomicOp, AtomicOps, GlobalPtr, NbiCategories, Rma, RmaError, RmaExt, ScopeRmaExt,
};
use gex_testkit::exchange_barrier;
use gex_testkit::procs::ProcRunner;

const SEGMENT: usize = 2 << 20;

/// A client builder whose clients carry the RMA layer (what the RMA suite needs).
type Builder = ClientBuilder<((), Rma)>;

/// AM requests `ep` has sent so far, to every rank.
fn ams_sent(ep: &Endpoint<Ofi>) -> u64 {
    ep.stats().sent.iter().sum()
}

/// The runner of every shape: each rank builds its client with `builder` and
/// [`SEGMENT`]-byte segments, runs the case, and checks after finalisation that no
/// registration is left open ([`no_registration_left`]).
fn runner(builder: impl Fn() -> Builder + 'static) -> ProcRunner<Ofi, ((), Rma)> {
    ProcRunner::new()
        .sized(builder, SEGMENT)
        .after_finalize(no_registration_left)
}

/// Every registration made on demand (FI_MR_LOCAL shapes) is closed once the
/// endpoints are, and none failed.
fn no_registration_left(ofi: &Ofi) -> Result<(), String> {
    let s = ofi.stats();
    if s.mr_closed != s.mr_op_registrations + s.mr_region_registrations || s.mr_failures != 0 {
        return Err(format!("registrations leaked or failed: {s:?}"));
    }
    Ok(())
}

/// A client with the RMA layer and [`SEGMENT`]-byte segments on `boot`, configured
/// by `pairs`.
fn rma_client(
    boot: Box<dyn gex_core::boot::Bootstrap>,
    pairs: &[(&str, &str)],
) -> Result<gex_core::Client<Ofi>, String> {
    gex_testkit::rma::client_builder()
        .segment_size(SEGMENT)
        .config(Config::from_pairs(pairs.iter().copied()))
        .init::<Ofi>(boot)
        .map_err(|e| e.to_string())
}

fn config(provider: &'static str, rma: &'static str) -> impl Fn() -> Builder {
    move || {
        gex_testkit::rma::client_builder().config(Config::from_pairs([
            ("GEX_OFI_PROVIDER", provider),
            ("GEX_OFI_RMA", rma),
        ]))
    }
}

/// The clients of `tcp_native_three_ranks_two_eps_blocking`: native RMA, blocking waits.
fn tcp_native_blocking() -> Builder {
    config("tcp", "1")().wait_policy(WaitPolicy::Block)
}

/// The clients of `tcp_mr_local_three_ranks_two_eps_blocking`: `FI_MR_LOCAL` forced, a
/// two-entry registration cache, blocking waits.
fn tcp_mr_local_blocking() -> Builder {
    gex_testkit::rma::client_builder()
        .config(Config::from_pairs([
            ("GEX_OFI_PROVIDER", "tcp"),
            ("GEX_OFI_MR_LOCAL", "1"),
            ("GEX_OFI_MR_CACHE_ENTRIES", "2"),
        ]))
        .wait_policy(WaitPolicy::Block)
}

gex_testkit::suite_modules! {
    suite: rma,
    conduit: Ofi;

    /// tcp;ofi_rxm, native RMA, two ranks.
    tcp_native: runner(config("tcp", "1")), ranks 2;

    /// tcp;ofi_rxm, native RMA, three ranks with two endpoints each (RMA between
    /// endpoints of different libfabric domains), sleeping in the CQ's wait object.
    tcp_native_three_ranks_two_eps_blocking: runner(tcp_native_blocking),
        ranks 3, endpoints 2;

    /// tcp;ofi_rxm, AM reference path (`GEX_OFI_RMA=0`), two ranks.
    tcp_am: runner(config("tcp", "0")), ranks 2;

    /// shm, native RMA, three ranks.
    shm_native: runner(config("shm", "1")), ranks 3;

    /// shm, AM reference path (`GEX_OFI_RMA=0`), two ranks.
    shm_am: runner(config("shm", "0")), ranks 2;
}

/// One rank's part of `native_path_is_taken_*`: rank 0 puts 1 MiB to rank 1 and gets it
/// back; with native RMA on, the conduit counts native operations and hardly any AM
/// leaves rank 0 (the AM path would need more than 128 Long requests of 8 KiB). Then
/// every rank fetch-adds 100 times to a word of rank 1: the `u64` domain is native
/// exactly when native RMA and atomics are on (both providers grant `FI_ATOMIC`).
fn native_rank(
    boot: Box<dyn gex_core::boot::Bootstrap>,
    provider: &str,
    rma: &str,
    atomics: &str,
) -> Result<(), String> {
    let client = rma_client(
        boot,
        &[
            ("GEX_OFI_PROVIDER", provider),
            ("GEX_OFI_RMA", rma),
            ("GEX_OFI_ATOMICS", atomics),
        ],
    )?;
    let native = rma == "1";
    let report = client.conduit().report().clone();
    let path = report
        .path("RMA put/get")
        .ok_or("no RMA path in the report")?;
    if path.path.starts_with("native") != native {
        return Err(format!(
            "{provider} GEX_OFI_RMA={rma}: report says {path:?}"
        ));
    }
    let es = |e: RmaError| e.to_string();
    let mut ep = client.endpoint(0).map_err(|e| e.to_string())?;
    exchange_barrier(&mut ep).map_err(|e| e.to_string())?;
    const LEN: usize = 1 << 20;
    if ep.rank() == 0 {
        let data: Vec<u8> = (0..LEN).map(|i| (i * 7 + 3) as u8).collect();
        let sent0 = ams_sent(&ep);
        let p = GlobalPtr::<u8>::new(EpAddr::rank(1), 4096);
        ep.put(p, &data, Blocking).map_err(es)?;
        let mut back = vec![0u8; LEN];
        ep.get(&mut back, p, Blocking).map_err(es)?;
        if back != data {
            return Err("1 MiB put/get: data differs".into());
        }
        let ams = ams_sent(&ep) - sent0;
        let s = client.conduit().stats();
        eprintln!("{provider} GEX_OFI_RMA={rma}: {s:?}, {ams} AMs sent for the put and get");
        if native {
            if s.native_puts == 0 || s.native_put_bytes < LEN as u64 {
                return Err(format!("no native put counted: {s:?}"));
            }
            if s.native_gets == 0 || s.native_get_bytes < LEN as u64 {
                return Err(format!("no native get counted: {s:?}"));
            }
            if ams > 8 {
                return Err(format!("{ams} AMs sent for a native 1 MiB put and get"));
            }
        } else if s.native_puts + s.native_gets != 0 || ams < 64 {
            return Err(format!("GEX_OFI_RMA=0 but {s:?} and {ams} AMs"));
        }
    }
    exchange_barrier(&mut ep).map_err(|e| e.to_string())?;
    // Both tested providers grant FI_ATOMIC (tcp;ofi_rxm emulates it in the target's
    // provider progress); the report says whether it is used.
    let want_native = native && atomics == "1";
    let apath = report
        .path("atomics")
        .ok_or("no atomics path in the report")?;
    if apath.path.starts_with("native") != want_native {
        return Err(format!(
            "{provider} GEX_OFI_RMA={rma} GEX_OFI_ATOMICS={atomics}: report says {apath:?}"
        ));
    }
    gex_testkit::rma::finish_with_hundred_fetch_adds(ep, client, want_native, |c| {
        c.conduit().stats().native_atomics
    })
    .map_err(|e| format!("{provider} GEX_OFI_RMA={rma}: {e}"))
}

gex_testkit::procs_tests! {
    ranks 2, native_rank:
    native_path_is_taken_tcp("tcp", "1", "1");
    native_path_is_taken_shm("shm", "1", "1");
    am_path_with_rma_off("tcp", "0", "1");
    /// `GEX_OFI_ATOMICS=0`: native RMA, AM-based atomic domains.
    atomics_off_keeps_native_rma("shm", "1", "0");
}

/// One rank's part of `relaxed_puts_*`: implicit-event puts are relaxed
/// (transmit-complete writes, one flush read per destination at the sync) exactly
/// where the report says so; the counters match, the bytes arrive, and an NBI put
/// copies its source. A put whose source is lent to a scope (`put_from`, what an
/// access region's puts became) is relaxed too, flushed at the scope's end; a blocking
/// put is delivery-complete: never relaxed, nothing to flush.
fn relaxed_rank(
    boot: Box<dyn gex_core::boot::Bootstrap>,
    provider: &str,
    relaxed: &str,
    mr_local: &str,
    expect: bool,
) -> Result<(), String> {
    let client = rma_client(
        boot,
        &[
            ("GEX_OFI_PROVIDER", provider),
            ("GEX_OFI_RELAXED_PUTS", relaxed),
            ("GEX_OFI_MR_LOCAL", mr_local),
        ],
    )?;
    let es = |e: RmaError| e.to_string();
    let path = client
        .conduit()
        .report()
        .path("implicit-event puts")
        .ok_or("no implicit-event put path in the report")?
        .clone();
    if path.path.starts_with("relaxed") != expect {
        return Err(format!(
            "{provider} GEX_OFI_RELAXED_PUTS={relaxed}: report says {path:?}"
        ));
    }
    let ofi = client.conduit().clone();
    let mut ep = client.endpoint(0).map_err(|e| e.to_string())?;
    exchange_barrier(&mut ep).map_err(|e| e.to_string())?;
    const N: usize = 64;
    const LEN: usize = 16 << 10;
    let block = |k: usize| -> Vec<u8> { (0..LEN).map(|i| (i * 13 + k * 7 + 1) as u8).collect() };
    if ep.rank() == 0 {
        let p = GlobalPtr::<u8>::new(EpAddr::rank(1), 0);
        let blocks: Vec<Vec<u8>> = (0..N).map(block).collect();
        let s0 = ofi.stats();
        for (k, b) in blocks.iter().enumerate() {
            ep.put(p.add(k * LEN), b, Nbi).map_err(es)?;
        }
        ep.sync_nbi(NbiCategories::PUTS).map_err(es)?;
        let s1 = ofi.stats();
        let (relaxed_n, flushes) = (
            s1.native_relaxed_puts - s0.native_relaxed_puts,
            s1.native_flushes - s0.native_flushes,
        );
        let want = if expect { (N as u64, 1) } else { (0, 0) };
        if (relaxed_n, flushes) != want || s1.native_puts - s0.native_puts != N as u64 {
            return Err(format!(
                "{provider}: {relaxed_n} relaxed puts and {flushes} flushes for {N} NBI puts and one sync (want {want:?}); {s1:?}"
            ));
        }
        // A sync with nothing new flushes nothing.
        ep.sync_nbi(NbiCategories::PUTS).map_err(es)?;
        if ofi.stats().native_flushes != s1.native_flushes {
            return Err("a sync without puts flushed".into());
        }
        // An NBI put copies its source (overwritten here before the sync), and the
        // sync flushes its destination once.
        let mut src = block(N);
        ep.put(p.add(N * LEN), &src, Nbi).map_err(es)?;
        src.fill(0);
        drop(src);
        ep.sync_nbi(NbiCategories::PUTS).map_err(es)?;
        let s2 = ofi.stats();
        if s2.native_flushes - s1.native_flushes != u64::from(expect) {
            return Err(format!("one NBI put and a sync: {s2:?}"));
        }
        // A scope (what GASNet-EX's access regions became): its puts, from sources
        // lent to the scope, are relaxed like NBI puts, and the scope's end flushes
        // their destination once (its bytes are checked at the target below).
        let lent = block(N + 1);
        ep.scope(|s| s.put_from(p.add((N + 1) * LEN), &lent))
            .map_err(es)?;
        let s3 = ofi.stats();
        if s3.native_flushes - s2.native_flushes != u64::from(expect)
            || s3.native_relaxed_puts - s2.native_relaxed_puts != u64::from(expect)
            || s3.native_puts - s2.native_puts != 1
        {
            return Err(format!(
                "a scoped put and the scope's end (relaxed: {expect}): {s3:?}"
            ));
        }
        // A scope without puts flushes nothing.
        ep.scope(|_| Ok::<(), RmaError>(())).map_err(es)?;
        if ofi.stats().native_flushes != s3.native_flushes {
            return Err("a scope without puts flushed".into());
        }
        // A blocking put is not relaxed.
        ep.put(p.add((N + 2) * LEN), &block(N + 2), Blocking)
            .map_err(es)?;
        if ofi.stats().native_relaxed_puts != s3.native_relaxed_puts {
            return Err("a blocking put was relaxed".into());
        }
    }
    exchange_barrier(&mut ep).map_err(|e| e.to_string())?;
    if ep.rank() == 1 {
        // The target reads its own segment.
        let me = GlobalPtr::<u8>::new(EpAddr::rank(1), 0);
        let mut got = vec![0u8; LEN];
        for k in 0..N + 3 {
            ep.get(&mut got, me.add(k * LEN), Blocking).map_err(es)?;
            if got != block(k) {
                return Err(format!("{provider}: block {k} did not arrive intact"));
            }
        }
    }
    exchange_barrier(&mut ep).map_err(|e| e.to_string())?;
    gex_testkit::finalize(ep, client)
}

gex_testkit::procs_tests! {
    ranks 2, relaxed_rank:
    /// tcp;ofi_rxm orders RMA reads after writes: NBI puts are relaxed.
    relaxed_puts_tcp("tcp", "1", "0", true);
    /// The flush read lands in the slot words, registered under `FI_MR_LOCAL`.
    relaxed_puts_tcp_mr_local("tcp", "1", "1", true);
    /// `GEX_OFI_RELAXED_PUTS=0`: every put asks for `FI_DELIVERY_COMPLETE`, no flushes.
    relaxed_puts_off_tcp("tcp", "0", "0", false);
    /// shm does not order reads after writes: NBI puts stay delivery-complete.
    relaxed_puts_not_offered_shm("shm", "1", "0", false);
}

/// `GEX_OFI_MR_LOCAL=1`: the conduit acts as if the provider required `FI_MR_LOCAL`
/// (descriptors passed, local buffers registered). `config` with that switch.
fn config_mr_local(provider: &'static str) -> impl Fn() -> Builder {
    move || {
        gex_testkit::rma::client_builder().config(Config::from_pairs([
            ("GEX_OFI_PROVIDER", provider),
            ("GEX_OFI_RMA", "1"),
            ("GEX_OFI_MR_LOCAL", "1"),
        ]))
    }
}

gex_testkit::suite_modules! {
    suite: rma,
    conduit: Ofi;

    /// tcp;ofi_rxm, native RMA and atomics as under `FI_MR_LOCAL`: the suite's heap
    /// buffers (outside the segments) are registered per operation, atomics use the
    /// registered slot words.
    tcp_mr_local: runner(config_mr_local("tcp")), ranks 2;

    /// The same with three ranks of two endpoints each (registrations in two domains per
    /// rank), a two-entry cache, and `WaitPolicy::Block`.
    tcp_mr_local_three_ranks_two_eps_blocking: runner(tcp_mr_local_blocking),
        ranks 3, endpoints 2;

    /// shm, native RMA and atomics as under `FI_MR_LOCAL`, three ranks.
    shm_mr_local: runner(config_mr_local("shm")), ranks 3;
}

/// One rank's part of `mr_cache_*`: with `GEX_OFI_MR_LOCAL=1` and a cache of two
/// entries, rank 0 shows with `Ofi::stats` that transfers from buffers outside the
/// segments go native through registrations (per operation for a plain heap buffer,
/// cached for client regions), that a client region hits the cache on reuse, that the
/// cache evicts at its bound, that an ended region's registration is closed, that
/// atomics stay native, and that every registration is closed once the endpoints are.
fn mr_cache_rank(boot: Box<dyn gex_core::boot::Bootstrap>, provider: &str) -> Result<(), String> {
    let client = rma_client(
        boot,
        &[
            ("GEX_OFI_PROVIDER", provider),
            ("GEX_OFI_MR_LOCAL", "1"),
            ("GEX_OFI_MR_CACHE_ENTRIES", "2"),
        ],
    )?;
    let ofi = client.conduit().clone();
    let report = ofi.report().clone();
    let path = report
        .path("RMA local buffers")
        .ok_or("no 'RMA local buffers' path in the report")?;
    if !path.path.starts_with("descriptors") || !path.reason.contains("GEX_OFI_MR_LOCAL=1") {
        return Err(format!("report: {path:?}"));
    }
    let apath = report.path("atomics").ok_or("no atomics path")?;
    if !apath.path.starts_with("native") {
        return Err(format!("atomics not native under FI_MR_LOCAL: {apath:?}"));
    }
    let mut ep = client.endpoint(0).map_err(|e| e.to_string())?;
    exchange_barrier(&mut ep).map_err(|e| e.to_string())?;
    const LEN: usize = 64 << 10;
    let e = |x: RmaError| x.to_string();
    if ep.rank() == 0 {
        let p = GlobalPtr::<u8>::new(EpAddr::rank(1), 4096);
        let am0 = ams_sent(&ep);
        let s0 = ofi.stats();

        // A plain heap buffer: registered for each operation, closed at completion.
        let data: Vec<u8> = (0..LEN).map(|i| (i * 13 + 1) as u8).collect();
        ep.put(p, &data, Blocking).map_err(e)?;
        let mut back = vec![0u8; LEN];
        ep.get(&mut back, p, Blocking).map_err(e)?;
        if back != data {
            return Err("heap buffer put/get: data differs".into());
        }
        let s1 = ofi.stats();
        eprintln!("{provider}: heap put+get: {s1:?}");
        if s1.native_puts - s0.native_puts != 1 || s1.native_gets - s0.native_gets != 1 {
            return Err(format!("heap put/get not native: {s1:?}"));
        }
        if s1.mr_op_registrations - s0.mr_op_registrations != 2 || s1.mr_closed - s0.mr_closed != 2
        {
            return Err(format!(
                "heap put/get: expected 2 registrations made and closed: {s1:?}"
            ));
        }

        // A flood from one heap buffer, lent to a scope (no copies): each put
        // registers or shares a registration with a put still in flight; none goes
        // through AMs.
        const FLOOD: u64 = 16;
        ep.scope(|s| {
            for _ in 0..FLOOD {
                s.put_from(p, &data)?;
            }
            Ok::<(), RmaError>(())
        })
        .map_err(e)?;
        let s2 = ofi.stats();
        eprintln!("{provider}: flood of {FLOOD}: {s2:?}");
        let regs = s2.mr_op_registrations - s1.mr_op_registrations;
        let shared = s2.mr_cache_hits - s1.mr_cache_hits;
        if s2.native_puts - s1.native_puts != FLOOD || regs + shared != FLOOD || regs == 0 {
            return Err(format!(
                "flood: {regs} registrations + {shared} shared for {FLOOD} puts: {s2:?}"
            ));
        }
        if s2.mr_closed - s1.mr_closed != regs {
            return Err(format!("flood: registrations left open: {s2:?}"));
        }

        // Client regions: registered once per endpoint, then hits; the cache (two
        // entries) evicts the least recently used idle one.
        let mut ra = ofi.register(vec![1u8; LEN]);
        let rb = ofi.register(vec![2u8; LEN]);
        let mut rc = ofi.register(vec![3u8; LEN]);
        let s3 = ofi.stats();
        ep.put(p, &ra[..], Blocking).map_err(e)?; // miss: A registered
        ep.put(p, &ra[..LEN / 2], Blocking).map_err(e)?; // hit
        ep.get(&mut ra[LEN / 2..], p, Blocking).map_err(e)?; // hit
        if ra[LEN / 2..] != vec![1u8; LEN / 2][..] {
            return Err("region get: data differs".into());
        }
        let s4 = ofi.stats();
        eprintln!("{provider}: region A x3: {s4:?}");
        if s4.mr_region_registrations - s3.mr_region_registrations != 1
            || s4.mr_cache_hits - s3.mr_cache_hits != 2
            || s4.mr_op_registrations != s3.mr_op_registrations
        {
            return Err(format!(
                "region A: expected 1 registration and 2 hits: {s4:?}"
            ));
        }
        ep.put(p, &rb[..], Blocking).map_err(e)?; // miss: B registered (2 entries)
        ep.get(&mut rc[..], p, Blocking).map_err(e)?; // miss: C registered, A evicted
        if rc[..] != rb[..] {
            return Err("region B -> C: data differs".into());
        }
        ep.put(p, &ra[..], Blocking).map_err(e)?; // miss again: A registered, B evicted
        let s5 = ofi.stats();
        eprintln!("{provider}: regions B, C, A: {s5:?}");
        if s5.mr_region_registrations - s4.mr_region_registrations != 3
            || s5.mr_evictions - s4.mr_evictions != 2
            || s5.mr_cache_hits != s4.mr_cache_hits
        {
            return Err(format!(
                "eviction at 2 entries: expected 3 registrations and 2 evictions: {s5:?}"
            ));
        }
        // Ending C (taking its buffer back) ends its registration at the endpoint's
        // next miss (a heap get).
        let c = rc.into_vec();
        if c != vec![2u8; LEN] {
            return Err("region C's buffer, taken back, differs".into());
        }
        let mut tail = vec![0u8; 8];
        ep.get(&mut tail, p, Blocking).map_err(e)?;
        let s6 = ofi.stats();
        if s6.mr_closed - s5.mr_closed != 2 {
            // C's registration and the heap get's own.
            return Err(format!("ended region: registration not closed: {s6:?}"));
        }
        drop((ra, rb));
        let ams = ams_sent(&ep) - am0;
        if ams > 8 {
            return Err(format!("{ams} AMs sent for native transfers"));
        }
    }
    exchange_barrier(&mut ep).map_err(|e| e.to_string())?;
    // Atomics stay native: operands and results in the registered slot words.
    let world = ep.world();
    let ad = ep
        .atomic_domain::<u64>(&world, AtomicOps::FADD | AtomicOps::GET)
        .map_err(e)?;
    if !ad.is_native() {
        return Err("atomic domain not native under FI_MR_LOCAL".into());
    }
    let word = GlobalPtr::<u64>::new(EpAddr::rank(1), 64);
    let f = AtomicFlags::empty();
    let before = ofi.stats().native_atomics;
    let mut seen = Vec::new();
    for _ in 0..50 {
        seen.push(
            ep.fetch_atomic(&ad, word, AtomicOp::Add(1), f, Blocking)
                .map_err(e)?,
        );
    }
    if ofi.stats().native_atomics - before != 50 || seen.windows(2).any(|w| w[1] <= w[0]) {
        return Err(format!(
            "50 native fetch-adds: counted {}, fetched {seen:?}",
            ofi.stats().native_atomics - before
        ));
    }
    exchange_barrier(&mut ep).map_err(|e| e.to_string())?;
    let total = ep
        .fetch_atomic(&ad, word, AtomicOp::Get, f, Blocking)
        .map_err(e)?;
    if total != 50 * u64::from(ep.size()) {
        return Err(format!("word holds {total} after 50 fetch-adds per rank"));
    }
    exchange_barrier(&mut ep).map_err(|e| e.to_string())?;
    gex_testkit::finalize(ep, client)?;
    // Every registration made on demand is closed with the endpoints.
    let s = ofi.stats();
    eprintln!("{provider}: after finalize: {s:?}");
    if s.mr_closed != s.mr_op_registrations + s.mr_region_registrations || s.mr_failures != 0 {
        return Err(format!("registrations leaked: {s:?}"));
    }
    Ok(())
}

gex_testkit::procs_tests! {
    ranks 2, mr_cache_rank:
    mr_cache_tcp("tcp");
    mr_cache_shm("shm");
}
