//! The RMA conformance suite (gex-testkit's `rma` module) on the simulated fabric.
//!
//! Run it both ways:
//! `cargo test -p gex-testkit --test rma_sim` and
//! `RUSTFLAGS="--cfg gex_force_am_rma" CARGO_TARGET_DIR=target/force-am cargo test -p gex-testkit --test rma_sim`.
//!
//! `r4_native` runs the suite with the simulated NIC on (native RMA between hosts, NIC
//! atomics everywhere); `native_paths` proves those paths are taken.
//!
//! Exclusions: none. The atomic cases (`rma_atomic_*`) run on every module; the
//! `prop_atomics` property test checks concurrent commutative atomics against a model.
#![cfg(feature = "rma")]

use gex_core::{ClientBuilder, Endpoint};
use gex_rma::Rma;
use gex_testkit::conformance::{self, Case, Job, Runner};
use gex_testkit::sim::{Sim, SimConfig, run_sim};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Starts simulated jobs whose clients carry the RMA layer (what the RMA suite needs).
#[derive(Clone, Debug)]
struct SimRunner {
    cfg: SimConfig,
    segment_size: usize,
}

impl SimRunner {
    fn new(cfg: SimConfig) -> Self {
        SimRunner {
            cfg,
            segment_size: 64 << 10,
        }
    }
    fn segment_size(mut self, bytes: usize) -> Self {
        self.segment_size = bytes;
        self
    }
}

impl Runner<Sim> for SimRunner {
    fn run(&self, job: &Job<'_>, case: &Case<Sim>) -> Result<(), String> {
        let (seg, eps) = (self.segment_size, job.endpoints);
        catch_unwind(AssertUnwindSafe(|| {
            run_sim(
                job.ranks,
                self.cfg.clone(),
                || {
                    ClientBuilder::new()
                        .layer::<Rma>()
                        .segment_size(seg)
                        .endpoints(eps)
                },
                |client| {
                    if let Err(e) = conformance::run_on_rank(&client, case) {
                        panic!("{e}");
                    }
                },
            )
        }))
        .map(|_| ())
        .map_err(|p| {
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "(non-string panic)".into())
        })
    }
}

/// A barrier of the endpoint's primordial team (the core's all-gather of nothing).
fn barrier(r: &mut Endpoint<Sim>) -> Result<(), String> {
    let w = r.world();
    r.exchange(&w, &[]).map(|_| ()).map_err(|e| e.to_string())
}

/// True if this build or job forces gex-rma's AM path.
fn forced() -> bool {
    cfg!(gex_force_am_rma) || std::env::var("GEX_RMA_PATH").is_ok_and(|v| v.trim() == "am")
}

/// The fabric of `r5_no_shm`.
fn no_shm_cfg() -> SimConfig {
    let mut c = SimConfig::default().reorder(true).seed(11);
    c.shared_memory = false;
    c.max_medium = 1024;
    c
}

/// The fabric of `r4_native`.
fn native_cfg() -> SimConfig {
    SimConfig::default()
        .reorder(true)
        .seed(5)
        .ranks_per_host(2)
        .latency(gex_testkit::sim::Delay::polls(2))
        .native(true, true)
}

gex_testkit::suite_modules! {
    suite: rma,
    conduit: Sim;

    /// Two ranks sharing memory: the direct path (unless forced to AM).
    r2_shared: SimRunner::new(SimConfig::default()).segment_size(4 << 20), ranks 2;

    /// Three ranks, one per host (no shared memory between them), reordering on: the AM
    /// reference path with out-of-order delivery; 17 MiB segments for the 16 MiB case.
    r3_am_reorder: SimRunner::new(SimConfig::default().reorder(true).ranks_per_host(1).seed(7))
        .segment_size(17 << 20), ranks 3;

    /// Five ranks, shared memory switched off in the fabric, small Medium limit (so VIS
    /// packing and get chunking split often), reordering on.
    r5_no_shm: SimRunner::new(no_shm_cfg()).segment_size(2 << 20), ranks 5;

    /// Seven ranks, three per simulated host (groups of 3, 3 and 1): the hierarchical
    /// barrier (shared-memory groups, AM rounds between their leaders), shared-memory
    /// RMA inside a host and the AM path between hosts, with reordering.
    r7_three_per_host: SimRunner::new(SimConfig::default().reorder(true).ranks_per_host(3).seed(5))
        .segment_size(4 << 20), ranks 7;

    /// Four ranks on two hosts (two per host) with the simulated NIC on: neighbours use
    /// the mapping, the other host native RMA (completed two polls after it starts, so
    /// the `Pending` path runs), and every atomic domain NIC atomics (all ops offered);
    /// reordering on for the AM traffic that remains (memset, barrier). 17 MiB segments
    /// for the 16 MiB case.
    r4_native: SimRunner::new(native_cfg()).segment_size(17 << 20), ranks 4;
}

/// The native paths are really taken (the simulated NIC counts what it performed, and
/// no AM carries the data), pending operations are tracked by events, and a domain
/// whose op set the NIC does not fully offer falls back to CPU atomics. With
/// `gex_force_am_rma` the NIC must stay unused.
mod native_paths {
    use super::{barrier, forced};
    use gex_core::spi::AtomicBase;
    use gex_core::{AnyEvent, Blocking, ClientBuilder, Endpoint, EpAddr, Nb, Nbi};
    use gex_rma::{
        AtomicDomain, AtomicFlags, AtomicOp, AtomicOps, GlobalPtr, NbiCategories, Rma, RmaExt,
        ScopeRmaExt, Strided,
    };
    use gex_testkit::sim::{Delay, NativeCounts, Sim, SimConfig, run_sim};

    type Ep = Endpoint<Sim>;

    fn counts(r: &mut Ep) -> NativeCounts {
        gex_core::layer::with::<Rma, _, _>(&mut *r, |_, cx| cx.conduit().native_counts())
            .expect("the rma layer")
    }

    /// Messages this endpoint has sent so far.
    fn sent(r: &Ep) -> u64 {
        r.stats().sent.iter().sum()
    }

    fn check(what: &str, ok: bool) -> Result<(), String> {
        if ok { Ok(()) } else { Err(what.to_string()) }
    }

    /// Runs `body` on rank 0 of a 2-rank job (one rank per host, the simulated NIC
    /// on for RMA and atomics, `Delay::polls(3)`), between two barriers, with an atomic
    /// domain for `u64` (FADD, GET, SET) that every rank created (creation is
    /// collective); asserts that every rank succeeded.
    fn on_rank_0(body: impl Fn(&mut Ep, &AtomicDomain<u64>) -> Result<(), String> + Send + Sync) {
        let cfg = SimConfig::default()
            .ranks_per_host(1)
            .latency(Delay::polls(3))
            .native(true, true);
        let out = run_sim(
            2,
            cfg,
            || ClientBuilder::new().layer::<Rma>().segment_size(1 << 16),
            |client| -> Result<(), String> {
                let mut r = client.endpoint(0).unwrap();
                let world = r.world();
                let ad = r
                    .atomic_domain::<u64>(&world, AtomicOps::FADD | AtomicOps::GET | AtomicOps::SET)
                    .map_err(|e| e.to_string())?;
                barrier(&mut r)?;
                let result = if r.rank() == 0 {
                    body(&mut r, &ad)
                } else {
                    Ok(())
                };
                barrier(&mut r)?;
                result
            },
        );
        for (rank, o) in out.into_iter().enumerate() {
            assert_eq!(o, Ok(()), "rank {rank}");
        }
    }

    #[test]
    fn rma_and_atomics_go_through_the_nic() {
        on_rank_0(|r, ad| {
            let es = |e: gex_rma::RmaError| e.to_string();
            let p = GlobalPtr::<u8>::new(EpAddr::rank(1), 100);
            let data: Vec<u8> = (0..3000u32).map(|i| (i * 7 + 1) as u8).collect();
            let (c0, s0) = (counts(r), sent(r));
            // Blocking put and get: no AM at all on the native path.
            r.put(p, &data, Blocking).map_err(es)?;
            let mut back = vec![0u8; data.len()];
            r.get(&mut back, p, Blocking).map_err(es)?;
            check("blocking round trip", back == data)?;
            let c1 = counts(r);
            if forced() {
                check("forced AM: NIC unused", c1 == NativeCounts::default())?;
                check("forced AM: messages sent", sent(r) > s0)?;
            } else {
                check(
                    "one native put, one get",
                    (c1.puts, c1.gets) == (c0.puts + 1, c0.gets + 1),
                )?;
                check("no AM for native put/get", sent(r) == s0)?;
            }
            // NB put of a temporary: pending after the call (3-poll
            // latency), the source reusable at once (copied).
            let mut tmp = vec![9u8; 500];
            let ev = r.put(p.add(4000), &tmp, Nb).map_err(es)?;
            check("NB put is pending on return", !ev.is_done())?;
            tmp.fill(1);
            r.wait(ev).map_err(es)?;
            let ev = r.get(vec![0u8; 500], p.add(4000), Nb).map_err(es)?;
            check(
                "NB get sees the original source",
                r.wait(ev).map_err(es)? == vec![9u8; 500],
            )?;
            // NBI and VIS (a reflection: 4 one-element chunks).
            r.put(p.add(5000), &tmp, Nbi).map_err(es)?;
            let rev = Strided {
                counts: &[4],
                remote_strides: &[-1],
                local_start: 0,
                local_strides: &[1],
            };
            r.put_strided(p.add(6003), &[1u8, 2, 3, 4], rev, Blocking)
                .map_err(es)?;
            r.sync_nbi(NbiCategories::PUTS).map_err(es)?;
            let mut four = [0u8; 4];
            r.get(&mut four, p.add(6000), Blocking).map_err(es)?;
            check("strided reflection", four == [4, 3, 2, 1])?;
            let mut nbi = vec![0u8; 500];
            r.get(&mut nbi, p.add(5000), Blocking).map_err(es)?;
            check("NBI put", nbi == tmp)?;
            let c2 = counts(r);
            if !forced() {
                // NB put, NBI put, 4 strided pieces; NB get, 2 gets.
                check(
                    "native NB/NBI/VIS",
                    (c2.puts, c2.gets) == (c1.puts + 6, c1.gets + 3),
                )?;
            }
            // Atomics: a fully offered domain uses the NIC for every target,
            // this rank included.
            check("domain native iff not forced", ad.is_native() != forced())?;
            let f = AtomicFlags::empty();
            for t in 0..2 {
                let w = GlobalPtr::<u64>::new(EpAddr::rank(t), 8192);
                r.atomic(ad, w, AtomicOp::Set(40), f, Blocking)
                    .map_err(es)?;
                let old = r
                    .fetch_atomic(ad, w, AtomicOp::Add(2), f, Blocking)
                    .map_err(es)?;
                let ev = r.fetch_atomic(ad, w, AtomicOp::Add(3), f, Nb).map_err(es)?;
                let old2 = r.wait(ev).map_err(es)?;
                let now = r
                    .fetch_atomic(ad, w, AtomicOp::Get, f, Blocking)
                    .map_err(es)?;
                check("native fetch-add values", (old, old2, now) == (40, 42, 45))?;
            }
            let c3 = counts(r);
            let want = if forced() { 0 } else { c2.atomics + 8 };
            check(
                &format!("NIC atomics {} (want {want})", c3.atomics),
                c3.atomics == want,
            )?;
            Ok(())
        });
    }

    /// Implicit-event puts are relaxed (complete locally; the simulated NIC holds their
    /// bytes until a flush) and every kind of sync of puts flushes each destination
    /// once: `sync_nbi(PUTS)`, `test_nbi(PUTS)`, `sync_nbi(ALL)`; a sync with nothing
    /// to flush flushes nothing; puts with an explicit event and blocking puts stay
    /// complete at the target (not relaxed); puts whose source is lent to a scope are
    /// relaxed, and the scope's end flushes them.
    /// A fetching NIC atomic whose old value nobody wants (`atomic` of `Get`, which
    /// only fetches, in every mode; `fetch_atomic` in mode NBI) still gets a word for
    /// the NIC to land it in:
    /// the conduit contract allows a null result only for a non-fetching operation (the
    /// simulated conduit refuses it as a contract error). Failed before: gex-rma passed
    /// null with `fetch: true`.
    #[test]
    fn fetching_nic_atomics_whose_value_is_discarded_get_a_landing_word() {
        on_rank_0(|r, ad| {
            let es = |e: gex_rma::RmaError| e.to_string();
            let f = AtomicFlags::empty();
            for t in 0..2 {
                let w = GlobalPtr::<u64>::new(EpAddr::rank(t), 4096);
                r.atomic(ad, w, AtomicOp::Set(10), f, Blocking)
                    .map_err(es)?;
                r.atomic(ad, w, AtomicOp::Get, f, Blocking).map_err(es)?;
                let ev = r.atomic(ad, w, AtomicOp::Get, f, Nb).map_err(es)?;
                r.wait(ev).map_err(es)?;
                r.atomic(ad, w, AtomicOp::Get, f, Nbi).map_err(es)?;
                r.fetch_atomic(ad, w, AtomicOp::Add(4), f, Nbi)
                    .map_err(es)?;
                r.fetch_atomic(ad, w, AtomicOp::Add(6), f, Nbi)
                    .map_err(es)?;
                r.sync_nbi(NbiCategories::ATOMICS).map_err(es)?;
                let now = r
                    .fetch_atomic(ad, w, AtomicOp::Get, f, Blocking)
                    .map_err(es)?;
                check(&format!("discarded fetch-adds: {now} (want 20)"), now == 20)?;
            }
            Ok(())
        });
    }

    #[test]
    fn nbi_puts_are_relaxed_and_flushed_by_their_sync() {
        if forced() {
            return;
        }
        on_rank_0(|r, _ad| {
            let es = |e: gex_rma::RmaError| e.to_string();
            let p = GlobalPtr::<u8>::new(EpAddr::rank(1), 0);
            let read = |r: &mut Ep, off: usize, n: usize| -> Result<Vec<u8>, String> {
                let mut v = vec![0u8; n];
                r.get(&mut v, p.add(off), Blocking).map_err(es)?;
                Ok(v)
            };
            let c0 = counts(r);
            let a = vec![3u8; 700];
            let b = vec![4u8; 900];
            r.put(p.add(0), &a, Nbi).map_err(es)?;
            r.put_vis(
                gex_rma::Vis::Strided {
                    ptr: p.add(3000),
                    shape: Strided {
                        counts: &[2],
                        remote_strides: &[10],
                        local_start: 0,
                        local_strides: &[1],
                    },
                },
                &[7u8, 8],
                Nbi,
            )
            .map_err(es)?;
            r.sync_nbi(NbiCategories::PUTS).map_err(es)?;
            let c1 = counts(r);
            check(
                "two relaxed puts (1 + 2 strided pieces), one flush",
                (c1.relaxed_puts - c0.relaxed_puts, c1.flushes - c0.flushes) == (3, 1),
            )?;
            check("NBI put landed", read(r, 0, 700)? == a)?;
            check(
                "VIS NBI landed",
                read(r, 3000, 11)? == [7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 8],
            )?;
            // A source lent to a scope (the old deferred-LC NBI put): no copy, relaxed
            // like an NBI put, and the scope's end flushes its destination once, so
            // its bytes (which the simulated NIC holds until a flush) are at the
            // target when the scope returns.
            let c1b = counts(r);
            r.scope(|s| s.put_from(p.add(1000), &b)).map_err(es)?;
            let c1c = counts(r);
            check(
                "a scoped put is one relaxed native put, flushed once at the scope's end",
                (
                    c1c.puts - c1b.puts,
                    c1c.relaxed_puts - c1b.relaxed_puts,
                    c1c.flushes - c1b.flushes,
                ) == (1, 1, 1),
            )?;
            check("scoped put landed", read(r, 1000, 900)? == b)?;
            // Nothing to flush: no flush.
            r.sync_nbi(NbiCategories::PUTS).map_err(es)?;
            check(
                "empty sync flushes nothing",
                counts(r).flushes == c1c.flushes,
            )?;
            // test_nbi(PUTS) until true.
            r.put(p.add(5000), &[5u8; 64], Nbi).map_err(es)?;
            while !r.test_nbi(NbiCategories::PUTS).map_err(es)? {}
            check("test_nbi landed", read(r, 5000, 64)? == vec![5u8; 64])?;
            // sync_nbi(ALL).
            r.put(p.add(6000), &[6u8; 64], Nbi).map_err(es)?;
            r.sync_nbi(NbiCategories::ALL).map_err(es)?;
            check("sync_nbi(ALL) landed", read(r, 6000, 64)? == vec![6u8; 64])?;
            // A sync of other categories leaves the puts unflushed; a later sync of
            // puts flushes them once.
            let c2 = counts(r);
            r.put(p.add(7000), &[9u8; 128], Nbi).map_err(es)?;
            r.sync_nbi(NbiCategories::GETS | NbiCategories::ATOMICS)
                .map_err(es)?;
            check(
                "a sync of gets and atomics does not flush",
                counts(r).flushes == c2.flushes,
            )?;
            r.sync_nbi(NbiCategories::PUTS).map_err(es)?;
            check("flushed once", counts(r).flushes == c2.flushes + 1)?;
            check("puts landed", read(r, 7000, 128)? == vec![9u8; 128])?;
            // Explicit events and blocking puts are not relaxed.
            let c3 = counts(r);
            let ev = r.put(p.add(8000), &[1u8; 32], Nb).map_err(es)?;
            r.wait(ev).map_err(es)?;
            r.put(p.add(8100), &[2u8; 32], Blocking).map_err(es)?;
            let c4 = counts(r);
            check(
                "explicit and blocking puts complete at the target",
                c4.relaxed_puts == c3.relaxed_puts
                    && c4.flushes == c3.flushes
                    && c4.puts == c3.puts + 2,
            )?;
            check("explicit put landed", read(r, 8000, 32)? == vec![1u8; 32])?;
            Ok(())
        });
    }

    /// `wait_some` (and `wait`) poll at least once even when an event handed to them
    /// is already complete. A loop calling `wait_some` until every event has been seen
    /// must therefore let a pending put finish; before the fix, a call returned
    /// at once without polling while a native operation was pending, and such a loop
    /// starved the network of a hybrid ofi job (the peer's AMs and the target side of
    /// its gets went unserved until the case timed out).
    #[test]
    fn waits_on_complete_events_still_poll() {
        on_rank_0(|r, _ad| {
            let es = |e: gex_rma::RmaError| e.to_string();
            let p = GlobalPtr::<u8>::new(EpAddr::rank(1), 64);
            let done = r.memset(p, 1, 0, Nb).map_err(es)?;
            check("an empty memset is complete at once", done.is_done())?;
            let put = r.put(p, &[9u8; 2000], Nb).map_err(es)?;
            check("the put is pending", !put.is_done())?;
            // Bounded by time, not by a call count: the put needs rank 1's thread to
            // run (it serves the AM or the simulated NIC's target side), and on a
            // loaded machine that thread may not be scheduled for many of rank 0's
            // calls. Without the fix the loop never ends, so the deadline still
            // catches the regression.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            let mut calls = 0u64;
            while !put.is_done() && std::time::Instant::now() < deadline {
                let d = r
                    .wait_some(&[&done as &dyn AnyEvent, &put])
                    .map_err(|e| e.to_string())?;
                check("wait_some reports the complete event", d.contains(&0))?;
                calls += 1;
            }
            check(
                &format!("the put completed after {calls} wait_some calls (20 s limit)"),
                put.is_done(),
            )?;
            r.wait(done).map_err(es)?;
            r.wait(put).map_err(es)
        });
    }

    #[test]
    fn partly_offered_op_set_falls_back_to_cpu_atomics() {
        let mut cfg = SimConfig::default().ranks_per_host(1).native(false, true);
        cfg.native_atomic_bases = Some(vec![AtomicBase::Add, AtomicBase::Get, AtomicBase::Set]);
        let out = run_sim(
            2,
            cfg,
            || ClientBuilder::new().layer::<Rma>().segment_size(1 << 12),
            |client| -> Result<(), String> {
                let es = |e: gex_rma::RmaError| e.to_string();
                let mut r = client.endpoint(0).unwrap();
                barrier(&mut r)?;
                let f = AtomicFlags::empty();
                let world = r.world();
                let offered = r
                    .atomic_domain::<i64>(&world, AtomicOps::FADD | AtomicOps::GET)
                    .map_err(es)?;
                let partly = r
                    .atomic_domain::<i64>(
                        &world,
                        AtomicOps::FADD | AtomicOps::GET | AtomicOps::FMULT,
                    )
                    .map_err(es)?;
                check("offered domain native", offered.is_native() != forced())?;
                check("partly offered domain not native", !partly.is_native())?;
                // Both ranks hammer rank 1's word through the CPU-atomic domain.
                let w = GlobalPtr::<i64>::new(EpAddr::rank(1), 64);
                let before = counts(&mut r);
                for _ in 0..50 {
                    r.fetch_atomic(&partly, w, AtomicOp::Add(1), f, Blocking)
                        .map_err(es)?;
                }
                check(
                    "no NIC atomics for the fallback domain",
                    counts(&mut r) == before,
                )?;
                barrier(&mut r)?;
                let v = r
                    .fetch_atomic(&partly, w, AtomicOp::Mult(2), f, Blocking)
                    .map_err(es)?;
                barrier(&mut r)?;
                let end = r
                    .fetch_atomic(&partly, w, AtomicOp::Get, f, Blocking)
                    .map_err(es)?;
                check("fallback results", end == 400 && (v == 100 || v == 200))?;
                // The offered domain on another word does use the NIC.
                let w2 = GlobalPtr::<i64>::new(EpAddr::rank(0), 128);
                r.fetch_atomic(&offered, w2, AtomicOp::Add(5), f, Blocking)
                    .map_err(es)?;
                let nic = counts(&mut r).atomics - before.atomics;
                check(
                    &format!("offered domain: {nic} NIC atomics"),
                    nic == u64::from(!forced()),
                )?;
                barrier(&mut r)?;
                let got = r
                    .fetch_atomic(&offered, w2, AtomicOp::Get, f, Blocking)
                    .map_err(es)?;
                check("offered domain result", got == 10)?;
                barrier(&mut r)?;
                Ok(())
            },
        );
        for (rank, o) in out.into_iter().enumerate() {
            assert_eq!(o, Ok(()), "rank {rank}");
        }
    }
}

/// A conduit may map less of a neighbour's segment than the layout says
/// (`peer_segment`'s length is at most the layout's): every direct path of gex-rma
/// (the cached fast path and the slow ones, to the same endpoint index and to another)
/// then stays within the mapping, and what lies past it goes through AMs. The sim maps
/// 4 KiB of 16 KiB segments here. Failed before: the slow direct paths checked ranges
/// against the layout only and copied through the mapping past its length.
mod mapped_len {
    use super::barrier;
    use gex_core::{Blocking, ClientBuilder, Endpoint, EpAddr};
    use gex_rma::{AtomicFlags, AtomicOp, AtomicOps, GlobalPtr, Rma, RmaExt, Strided};
    use gex_testkit::sim::{Sim, SimConfig, run_sim};
    use std::sync::atomic::{AtomicBool, Ordering};

    const MAPPED: usize = 4096;
    const PAST: usize = 8192;

    fn sent(r: &Endpoint<Sim>) -> u64 {
        r.stats().sent.iter().sum()
    }

    /// Runs `op` and checks that it sent messages (it did not copy through the mapping).
    fn via_ams(
        r: &mut Endpoint<Sim>,
        what: &str,
        op: impl FnOnce(&mut Endpoint<Sim>) -> Result<(), gex_rma::RmaError>,
    ) -> Result<(), String> {
        let before = sent(r);
        op(r).map_err(|e| format!("{what}: {e}"))?;
        if sent(r) == before {
            return Err(format!(
                "{what} past the {MAPPED}-byte mapping took the direct path (no message)"
            ));
        }
        Ok(())
    }

    #[test]
    fn direct_paths_stay_within_the_mapped_length() {
        if super::forced() {
            return;
        }
        let cfg = SimConfig {
            mapped_len: Some(MAPPED),
            ..SimConfig::default()
        };
        let stop = AtomicBool::new(false);
        let out = run_sim(
            2,
            cfg,
            || {
                ClientBuilder::new()
                    .layer::<Rma>()
                    .segment_size(4 * MAPPED)
                    .endpoints(2)
            },
            |client| -> Result<(), String> {
                let mut r = client.endpoint(0).unwrap();
                let mut r1 = client.endpoint(1).unwrap();
                let world = r.world();
                let ad = r
                    .atomic_domain::<u64>(&world, AtomicOps::SET | AtomicOps::FADD)
                    .map_err(|e| e.to_string())?;
                barrier(&mut r)?;
                if client.rank() == 1 {
                    while !stop.load(Ordering::Acquire) {
                        r.poll();
                        r1.poll();
                    }
                    barrier(&mut r)?;
                    return Ok(());
                }
                let result = (|| -> Result<(), String> {
                    let es = |e: gex_rma::RmaError| e.to_string();
                    // Rank 1's endpoint 0 (the cached mapping) and endpoint 1 (another
                    // index: asked each time).
                    for dst in [EpAddr::new(1, 0), EpAddr::new(1, 1)] {
                        let p = GlobalPtr::<u8>::new(dst, PAST);
                        // Warm the cache with a direct put inside the mapping.
                        r.put(GlobalPtr::<u8>::new(dst, 0), &[1u8; 8], Blocking)
                            .map_err(es)?;
                        let data: Vec<u8> = (0..100u8).collect();
                        via_ams(&mut r, "a put", |r| r.put(p, &data, Blocking))?;
                        let mut back = vec![0u8; 100];
                        via_ams(&mut r, "a get", |r| r.get(&mut back[..], p, Blocking))?;
                        if back != data {
                            return Err(format!("get past the mapping: {back:?}"));
                        }
                        via_ams(&mut r, "a value get", |r| {
                            r.get_val(p.add(10), Blocking).map(drop)
                        })?;
                        via_ams(&mut r, "a get into a Vec", |r| {
                            r.get(vec![0u8; 100], p, Blocking).map(drop)
                        })?;
                        let shape = Strided {
                            counts: &[2, 4],
                            remote_strides: &[1, 16],
                            local_start: 0,
                            local_strides: &[1, 2],
                        };
                        via_ams(&mut r, "a strided put", |r| {
                            r.put_strided(p.add(200), &[5u8; 8], shape, Blocking)
                        })?;
                        via_ams(&mut r, "a memset", |r| {
                            r.memset(p.add(400), 9, 64, Blocking)
                        })?;
                        let mut m = vec![0u8; 64];
                        r.get(&mut m[..], p.add(400), Blocking).map_err(es)?;
                        if m != [9u8; 64] {
                            return Err("memset past the mapping".into());
                        }
                    }
                    let w = GlobalPtr::<u64>::new(EpAddr::new(1, 0), PAST + 1024);
                    let f = AtomicFlags::empty();
                    via_ams(&mut r, "an atomic", |r| {
                        r.atomic(&ad, w, AtomicOp::Set(5), f, Blocking)
                    })?;
                    via_ams(&mut r, "a fetch", |r| {
                        r.fetch_atomic(&ad, w, AtomicOp::Add(1), f, Blocking)
                            .map(drop)
                    })?;
                    let v = r
                        .fetch_atomic(&ad, w, AtomicOp::Add(0), f, Blocking)
                        .map_err(es)?;
                    if v != 6 {
                        return Err(format!("atomics past the mapping: {v}"));
                    }
                    Ok(())
                })();
                stop.store(true, Ordering::Release);
                barrier(&mut r)?;
                result
            },
        );
        for (rank, o) in out.into_iter().enumerate() {
            assert_eq!(o, Ok(()), "rank {rank}");
        }
    }
}

/// Property test: random strided shapes (0–3 dimensions, counts 0–5, strides −6..=6 on
/// both sides) put and got by rank 0 into rank 1's segment, on the direct or the AM
/// path, against a sequential model of the remote region.
mod prop_strided {
    use super::barrier;
    use gex_core::{Blocking, ClientBuilder, EpAddr};
    use gex_rma::{GlobalPtr, Rma, RmaExt, Strided};
    use gex_testkit::sim::{SimConfig, run_sim};
    use proptest::prelude::*;
    use std::collections::HashSet;

    /// Elements of the remote region.
    const M: usize = 4096;

    type Shape = (Vec<usize>, Vec<isize>, Vec<isize>);

    fn arb_shape() -> impl Strategy<Value = Shape> {
        (0usize..=3).prop_flat_map(|d| {
            (
                prop::collection::vec(0usize..6, d),
                prop::collection::vec(-6isize..=6, d),
                prop::collection::vec(-6isize..=6, d),
            )
        })
    }

    /// (remote, local) element index of every element, in iteration order, and the
    /// smallest remote/local index relative to element (0, .., 0).
    fn elems(c: &[usize], rs: &[isize], ls: &[isize]) -> (Vec<(i64, i64)>, i64, i64) {
        let mut out = Vec::new();
        let (mut rmin, mut lmin) = (0, 0);
        if !c.contains(&0) {
            let mut idx = vec![0usize; c.len()];
            'outer: loop {
                let r: i64 = idx.iter().zip(rs).map(|(i, s)| *i as i64 * *s as i64).sum();
                let l: i64 = idx.iter().zip(ls).map(|(i, s)| *i as i64 * *s as i64).sum();
                rmin = rmin.min(r);
                lmin = lmin.min(l);
                out.push((r, l));
                for d in 0..c.len() {
                    idx[d] += 1;
                    if idx[d] < c[d] {
                        continue 'outer;
                    }
                    idx[d] = 0;
                }
                break;
            }
        }
        (out, rmin, lmin)
    }

    fn run(shapes: &[Shape], shared: bool, seed: u64) -> Result<(), String> {
        let mut cfg = SimConfig::default().reorder(true).seed(seed);
        cfg.shared_memory = shared;
        cfg.max_medium = 512;
        let out = run_sim(
            2,
            cfg,
            || ClientBuilder::new().layer::<Rma>().segment_size(M * 4),
            |client| -> Result<(), String> {
                let mut r = client.endpoint(0).unwrap();
                barrier(&mut r)?;
                if r.rank() == 0 {
                    let region = GlobalPtr::<u32>::new(EpAddr::rank(1), 0);
                    let mut model = vec![0u32; M];
                    let mut val = seed as u32;
                    for (k, (c, rs, ls)) in shapes.iter().enumerate() {
                        let (el, rmin, lmin) = elems(c, rs, ls);
                        let base = (-rmin) as usize + 3;
                        let start = (-lmin) as usize;
                        let llen = el
                            .iter()
                            .map(|e| (e.1 - lmin) as usize + 1)
                            .max()
                            .unwrap_or(0)
                            + 2;
                        let sh = Strided {
                            counts: c,
                            remote_strides: rs,
                            local_start: start,
                            local_strides: ls,
                        };
                        let p = region.add(base);
                        let what = format!("shape {k}: {c:?} {rs:?} {ls:?}");
                        let rem: Vec<usize> =
                            el.iter().map(|e| (base as i64 + e.0) as usize).collect();
                        let loc: Vec<usize> =
                            el.iter().map(|e| (start as i64 + e.1) as usize).collect();
                        if rem.iter().collect::<HashSet<_>>().len() == rem.len() {
                            let src: Vec<u32> =
                                (0..llen).map(|i| val.wrapping_add(i as u32)).collect();
                            val = val.wrapping_add(llen as u32);
                            for (ri, li) in rem.iter().zip(&loc) {
                                model[*ri] = src[*li];
                            }
                            r.put_strided(p, &src, sh, Blocking)
                                .map_err(|e| format!("{what}: {e}"))?;
                            let mut back = vec![0u32; M];
                            r.get(&mut back, region, Blocking)
                                .map_err(|e| e.to_string())?;
                            if back != model {
                                return Err(format!(
                                    "{what}: region differs from the model after put"
                                ));
                            }
                        }
                        if loc.iter().collect::<HashSet<_>>().len() == loc.len() {
                            let mut want = vec![u32::MAX; llen];
                            for (ri, li) in rem.iter().zip(&loc) {
                                want[*li] = model[*ri];
                            }
                            let mut got = vec![u32::MAX; llen];
                            r.get_strided(&mut got, p, sh, Blocking)
                                .map_err(|e| format!("{what}: {e}"))?;
                            if got != want {
                                return Err(format!("{what}: strided get differs from the model"));
                            }
                        }
                    }
                }
                barrier(&mut r)?;
                Ok(())
            },
        );
        out.into_iter().collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
        #[test]
        fn strided_matches_model(
            shapes in prop::collection::vec(arb_shape(), 1..10),
            shared in any::<bool>(),
            seed in any::<u64>(),
        ) {
            prop_assert_eq!(run(&shapes, shared, seed), Ok(()));
        }
    }
}

/// Property test: random sequences of commutative atomic operations issued concurrently
/// by three ranks (blocking, NB or NBI) on a few words of every rank, direct or AM path,
/// checked against a sequential model of the final values (the operations on one word
/// commute, so any interleaving gives the model's result).
mod prop_atomics {
    use super::barrier;
    use gex_core::spi::Conduit;
    use gex_core::{AnyEvent, Blocking, ClientBuilder, Endpoint, EpAddr, Event, Nb, Nbi};
    use gex_rma::{
        AtomicDomain, AtomicFlags, AtomicOp, AtomicOps, AtomicType, GlobalPtr, NbiCategories, Rma,
        RmaError, RmaExt,
    };
    use gex_testkit::sim::{SimConfig, run_sim};
    use proptest::prelude::*;

    const RANKS: u32 = 3;
    /// Words per rank: 0 u64 add/sub/inc/dec, 1 u64 xor, 2 i64 min, 3 i64 max,
    /// 4 u32 or, 5 f64 add of small integers (exact).
    const WORDS: usize = 6;

    /// (target rank, word, op variant, operand, completion mode)
    type Step = (u32, usize, u8, u64, u8);

    fn arb_steps() -> impl Strategy<Value = Vec<Step>> {
        prop::collection::vec(
            (0..RANKS, 0..WORDS, any::<u8>(), any::<u64>(), 0u8..3),
            0..40,
        )
    }

    /// The operation of variant `v` on `word` with operand `x`: (fetching form, op).
    fn op_of<T: Copy>(word: usize, v: u8, x: T) -> (bool, AtomicOp<T>) {
        use AtomicOp::*;
        let op = match word {
            0 => [Add(x), Sub(x), Inc, Dec][v as usize % 8 / 2],
            1 => Xor(x),
            2 => Min(x),
            3 => Max(x),
            4 => Or(x),
            _ => Add(x),
        };
        (v % 2 == 1, op)
    }

    /// Issues `op` (in its fetching form, the value discarded, or not) in mode `mode`
    /// (0 blocking, 1 NB, else NBI): the event of a non-fetching NB one (a fetching
    /// one is waited for here).
    fn issue<C: Conduit, T: AtomicType>(
        r: &mut Endpoint<C>,
        ad: &AtomicDomain<T>,
        p: GlobalPtr<T>,
        (fetch, op): (bool, AtomicOp<T>),
        mode: u8,
    ) -> Result<Option<Event<(), RmaError>>, RmaError> {
        let f = AtomicFlags::empty();
        match (fetch, mode) {
            (false, 0) => r.atomic(ad, p, op, f, Blocking).map(|()| None),
            (false, 1) => r.atomic(ad, p, op, f, Nb).map(Some),
            (false, _) => r.atomic(ad, p, op, f, Nbi).map(|()| None),
            (true, 0) => r.fetch_atomic(ad, p, op, f, Blocking).map(|_| None),
            (true, 1) => {
                let e = r.fetch_atomic(ad, p, op, f, Nb)?;
                r.wait(e).map(|_| None)
            }
            (true, _) => r.fetch_atomic(ad, p, op, f, Nbi).map(|()| None),
        }
    }

    /// Final words of every rank, from the sequential model.
    fn model(all: &[Vec<Step>]) -> Vec<[u64; WORDS]> {
        let init = [0u64, 0, i64::MAX as u64, i64::MIN as u64, 0, 0f64.to_bits()];
        let mut m = vec![init; RANKS as usize];
        for &(t, w, v, x, _) in all.iter().flatten() {
            let word = &mut m[t as usize][w];
            let (_, op) = op_of(w, v, x);
            *word = match (w, op) {
                (0, AtomicOp::Add(x)) => word.wrapping_add(x),
                (0, AtomicOp::Sub(x)) => word.wrapping_sub(x),
                (0, AtomicOp::Inc) => word.wrapping_add(1),
                (0, _) => word.wrapping_sub(1),
                (1, _) => *word ^ x,
                (2, _) => (*word as i64).min(x as i64) as u64,
                (3, _) => (*word as i64).max(x as i64) as u64,
                (4, _) => u64::from(*word as u32 | x as u32),
                _ => (f64::from_bits(*word) + (x % 100) as f64).to_bits(),
            };
        }
        m
    }

    fn run(all: &[Vec<Step>], shared: bool, seed: u64) -> Result<(), String> {
        let mut cfg = SimConfig::default().reorder(true).seed(seed);
        cfg.shared_memory = shared;
        cfg.timeout = std::time::Duration::from_secs(10);
        let want = model(all);
        let out = run_sim(
            RANKS,
            cfg,
            || ClientBuilder::new().layer::<Rma>().segment_size(1 << 12),
            |client| -> Result<(), String> {
                let es = |e: gex_rma::RmaError| e.to_string();
                let mut r = client.endpoint(0).unwrap();
                let f = AtomicFlags::empty();
                let world = r.world();
                let u64d = r
                    .atomic_domain::<u64>(&world, AtomicOps::all())
                    .map_err(es)?;
                let i64d = r
                    .atomic_domain::<i64>(&world, AtomicOps::all())
                    .map_err(es)?;
                let u32d = r
                    .atomic_domain::<u32>(&world, AtomicOps::all())
                    .map_err(es)?;
                let f64d = r
                    .atomic_domain::<f64>(&world, AtomicOps::all() - AtomicOps::BITWISE)
                    .map_err(es)?;
                let me = r.addr();
                let ptr = |rank: u32, w: usize| GlobalPtr::<u64>::new(EpAddr::rank(rank), w * 8);
                for (w, v) in [(2, i64::MAX as u64), (3, i64::MIN as u64)] {
                    r.atomic(&u64d, ptr(me.rank, w), AtomicOp::Set(v), f, Blocking)
                        .map_err(es)?;
                }
                barrier(&mut r)?;
                let mut evs = Vec::new();
                for &(t, w, v, x, mode) in &all[me.rank as usize] {
                    let p = ptr(t, w);
                    let (a, off) = (p.addr(), p.offset);
                    let ev = match w {
                        0 | 1 => issue(&mut r, &u64d, p, op_of(w, v, x), mode),
                        2 | 3 => {
                            let p = GlobalPtr::<i64>::new(a, off);
                            issue(&mut r, &i64d, p, op_of(w, v, x as i64), mode)
                        }
                        4 => {
                            let p = GlobalPtr::<u32>::new(a, off);
                            issue(&mut r, &u32d, p, op_of(w, v, x as u32), 1)
                        }
                        _ => {
                            let p = GlobalPtr::<f64>::new(a, off);
                            issue(&mut r, &f64d, p, op_of(w, v, (x % 100) as f64), 2)
                        }
                    }
                    .map_err(es)?;
                    evs.extend(ev);
                }
                {
                    let refs: Vec<&dyn AnyEvent> = evs.iter().map(|e| e as &dyn AnyEvent).collect();
                    r.wait_all(&refs).map_err(|e| e.to_string())?;
                }
                for ev in evs {
                    r.wait(ev).map_err(es)?;
                }
                r.sync_nbi(NbiCategories::ALL).map_err(es)?;
                barrier(&mut r)?;
                // Check, but reach the final barrier either way (peers wait there).
                let mut check = Ok(());
                if me.rank == 0 {
                    for t in 0..RANKS {
                        let mut got = [0u64; WORDS];
                        r.get(&mut got, ptr(t, 0), Blocking).map_err(es)?;
                        got[4] &= 0xffff_ffff;
                        if got != want[t as usize] && check.is_ok() {
                            check = Err(format!(
                                "rank {t}: words {got:x?}, model {:x?}",
                                want[t as usize]
                            ));
                        }
                    }
                }
                barrier(&mut r)?;
                check?;
                if gex_core::layer::with::<Rma, _, _>(&mut *r, |l, _| l.dropped_messages())
                    != Some(0)
                {
                    return Err("dropped messages".into());
                }
                Ok(())
            },
        );
        out.into_iter().collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, max_shrink_iters: 16, ..ProptestConfig::default() })]
        #[test]
        fn atomics_match_model(
            all in prop::collection::vec(arb_steps(), RANKS as usize),
            shared in any::<bool>(),
            seed in any::<u64>(),
        ) {
            prop_assert_eq!(run(&all, shared, seed), Ok(()));
        }
    }
}
