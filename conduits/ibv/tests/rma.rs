//! The RMA conformance suite (gex-testkit's `rma` module, exercising gex-rma) on the ibv
//! conduit over the software RC emulation: with native RMA (RDMA WRITE/READ) and NIC
//! atomics (64-bit fetch-add and compare-swap), and with `GEX_IBV_RMA=0` (gex-rma's AM
//! reference path). Segments are 2 MiB: the suite sizes its transfers to the segment.
//!
//! Exclusions: none.

use gex_conduit_ibv::Ibv;
use gex_core::{ClientBuilder, Config, WaitPolicy};
use gex_rma::Rma;
use gex_testkit::procs::ProcRunner;

const SEGMENT: usize = 2 << 20;

type Builder = ClientBuilder<((), Rma)>;

fn runner(builder: impl Fn() -> Builder + 'static) -> ProcRunner<Ibv, ((), Rma)> {
    ProcRunner::new()
        .sized(builder, SEGMENT)
        .timeout(std::time::Duration::from_secs(180))
}

fn config(rma: &'static str) -> impl Fn() -> Builder {
    move || {
        gex_testkit::rma::client_builder().config(Config::from_pairs([
            ("GEX_IBV_PROVIDER", "emu"),
            ("GEX_IBV_RMA", rma),
        ]))
    }
}

/// The clients of `native_two_eps_blocking`: native RMA, blocking waits.
fn native_blocking() -> Builder {
    config("1")().wait_policy(WaitPolicy::Block)
}

gex_testkit::suite_modules! {
    suite: rma,
    conduit: Ibv;

    /// Native RMA and NIC atomics, three ranks.
    native: runner(config("1")), ranks 3;

    /// Native RMA, two ranks with two endpoints each, blocking waits.
    native_two_eps_blocking: runner(native_blocking), ranks 2, endpoints 2;

    /// gex-rma's AM reference path (`GEX_IBV_RMA=0`), two ranks.
    am_path: runner(config("0")), ranks 2;
}

/// One rank's part of `native_path_is_taken` / `am_path_with_rma_off`: a 1 MiB put and
/// get (a directly registered buffer) and a 4 KiB one (a bounce buffer) from rank 0 to
/// rank 1 go as RDMA WRITE/READ (counted, almost no AMs) exactly when native RMA is on,
/// and a u64 atomic domain with fetch-add and get uses the NIC exactly then too; the
/// values arrive either way.
fn native_rank(boot: Box<dyn gex_core::boot::Bootstrap>, rma: &'static str) -> Result<(), String> {
    use gex_core::{Blocking, EpAddr};
    use gex_rma::{GlobalPtr, RmaError, RmaExt};
    use gex_testkit::exchange_barrier;
    let native = rma == "1";
    let client = config(rma)()
        .segment_size(SEGMENT)
        .init::<Ibv>(boot)
        .map_err(|e| e.to_string())?;
    let es = |e: RmaError| e.to_string();
    let mut ep = client.endpoint(0).map_err(|e| e.to_string())?;
    exchange_barrier(&mut ep).map_err(|e| e.to_string())?;
    if ep.rank() == 0 {
        for len in [4096usize, 1 << 20] {
            let data: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
            let sent0: u64 = ep.stats().sent.iter().sum();
            let s0 = client.conduit().stats();
            let p = GlobalPtr::<u8>::new(EpAddr::rank(1), 4096);
            ep.put(p, &data, Blocking).map_err(es)?;
            let mut back = vec![0u8; len];
            ep.get(&mut back, p, Blocking).map_err(es)?;
            if back != data {
                return Err(format!("{len}-byte put/get: data differs"));
            }
            let ams = ep.stats().sent.iter().sum::<u64>() - sent0;
            let s = client.conduit().stats();
            let (puts, gets) = (
                s.native_puts - s0.native_puts,
                s.native_gets - s0.native_gets,
            );
            if native && (puts == 0 || gets == 0 || ams > 4) {
                return Err(format!(
                    "{len} bytes: {puts} native puts, {gets} gets, {ams} AMs"
                ));
            }
            if !native && (puts + gets != 0 || ams == 0) {
                return Err(format!(
                    "GEX_IBV_RMA=0 but {puts} puts, {gets} gets, {ams} AMs"
                ));
            }
        }
    }
    gex_testkit::rma::finish_with_hundred_fetch_adds(ep, client, native, |c| {
        c.conduit().stats().native_atomics
    })
    .map_err(|e| format!("GEX_IBV_RMA={rma}: {e}"))
}

/// A 2-rank job of the test `test` running [`native_rank`] with `GEX_IBV_RMA=rma`.
fn native_job(test: &str, rma: &'static str) {
    gex_testkit::procs::Procs::new(2)
        .test(test)
        .run(|boot| native_rank(boot, rma))
        .assert_success();
}

#[test]
fn native_path_is_taken() {
    native_job("native_path_is_taken", "1");
}

#[test]
fn am_path_with_rma_off() {
    native_job("am_path_with_rma_off", "0");
}
