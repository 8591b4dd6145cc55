//! The RMA conformance suite (gex-testkit's `rma` module, exercising gex-rma) on the ofi
//! conduit: every case runs as a real multi-process job launched by gex-boot's
//! self-launcher, over libfabric's `tcp;ofi_rxm` and `shm` providers on this host, with
//! native RMA (`FI_RMA`: `fi_writemsg`/`fi_read`) and with `GEX_OFI_RMA=0` (gex-rma's AM
//! reference path). Segments are 2 MiB: the suite sizes its transfers to the segment.
//! `native_path_is_taken` checks that the native path really carries puts and gets.
//!
//! Exclusions: none.

use gex_conduit_ofi::Ofi;
use gex_core::{ClientBuilder, Config, EpAddr, WaitPolicy};
use gex_rma::{AtomicFlags, AtomicOp, AtomicOps, RmaEp};
use gex_testkit::conformance::{self, Case, Job};

const SEGMENT: usize = 2 << 20;

/// Launches `job.ranks` processes of this test binary; each rank runs the case.
fn run(
    job: &Job<'_>,
    case: &Case<Ofi>,
    builder: impl FnOnce() -> ClientBuilder,
) -> Result<(), String> {
    match gex_boot::spawn_self_test(job.ranks, job.test_path).map_err(|e| e.to_string())? {
        gex_boot::Role::Launcher(0) => Ok(()),
        gex_boot::Role::Launcher(code) => Err(format!("job exited with code {code}")),
        gex_boot::Role::Rank(boot) => {
            conformance::rank_watchdog(job.test_path);
            let client = builder()
                .segment_size(SEGMENT)
                .endpoints(job.endpoints)
                .init::<Ofi>(boot)
                .map_err(|e| e.to_string())?;
            if let Err(e) = conformance::run_on_rank(&client, case) {
                client.abort(1, &e);
            }
            client.finalize().map_err(|e| e.to_string())
        }
    }
}

fn config(provider: &'static str, rma: &'static str) -> impl FnOnce() -> ClientBuilder {
    move || {
        ClientBuilder::new().config(Config::from_pairs([
            ("GEX_OFI_PROVIDER", provider),
            ("GEX_OFI_RMA", rma),
        ]))
    }
}

/// tcp;ofi_rxm, native RMA, two ranks.
mod tcp_native {
    use super::*;
    fn runner(job: &Job<'_>, case: &Case<Ofi>) -> Result<(), String> {
        run(job, case, config("tcp", "1"))
    }
    gex_testkit::rma_conformance_tests! {
        conduit: Ofi,
        runner: runner,
        ranks: 2,
    }
}

/// tcp;ofi_rxm, native RMA, three ranks with two endpoints each (RMA between
/// endpoints of different libfabric domains), sleeping in the CQ's wait object.
mod tcp_native_three_ranks_two_eps_blocking {
    use super::*;
    fn runner(job: &Job<'_>, case: &Case<Ofi>) -> Result<(), String> {
        run(job, case, || {
            config("tcp", "1")().wait_policy(WaitPolicy::Block)
        })
    }
    gex_testkit::rma_conformance_tests! {
        conduit: Ofi,
        runner: runner,
        ranks: 3,
        endpoints: 2,
    }
}

/// tcp;ofi_rxm, AM reference path (`GEX_OFI_RMA=0`), two ranks.
mod tcp_am {
    use super::*;
    fn runner(job: &Job<'_>, case: &Case<Ofi>) -> Result<(), String> {
        run(job, case, config("tcp", "0"))
    }
    gex_testkit::rma_conformance_tests! {
        conduit: Ofi,
        runner: runner,
        ranks: 2,
    }
}

/// shm, native RMA, three ranks.
mod shm_native {
    use super::*;
    fn runner(job: &Job<'_>, case: &Case<Ofi>) -> Result<(), String> {
        run(job, case, config("shm", "1"))
    }
    gex_testkit::rma_conformance_tests! {
        conduit: Ofi,
        runner: runner,
        ranks: 3,
    }
}

/// shm, AM reference path (`GEX_OFI_RMA=0`), two ranks.
mod shm_am {
    use super::*;
    fn runner(job: &Job<'_>, case: &Case<Ofi>) -> Result<(), String> {
        run(job, case, config("shm", "0"))
    }
    gex_testkit::rma_conformance_tests! {
        conduit: Ofi,
        runner: runner,
        ranks: 2,
    }
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
    let client = ClientBuilder::new()
        .segment_size(SEGMENT)
        .config(Config::from_pairs([
            ("GEX_OFI_PROVIDER", provider),
            ("GEX_OFI_RMA", rma),
            ("GEX_OFI_ATOMICS", atomics),
        ]))
        .init::<Ofi>(boot)
        .map_err(|e| e.to_string())?;
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
    let ep = client.endpoint(0).map_err(|e| e.to_string())?;
    let mut r = RmaEp::new(ep).map_err(|e| e.to_string())?;
    r.barrier().map_err(|e| e.to_string())?;
    const LEN: usize = 1 << 20;
    if r.rank() == 0 {
        let data: Vec<u8> = (0..LEN).map(|i| (i * 7 + 3) as u8).collect();
        let sent0: u64 = r.endpoint().stats().sent.iter().sum();
        let p = r.global_ptr::<u8>(EpAddr::rank(1), 4096);
        r.put(p, &data).map_err(|e| e.to_string())?;
        let mut back = vec![0u8; LEN];
        r.get(&mut back, p).map_err(|e| e.to_string())?;
        if back != data {
            return Err("1 MiB put/get: data differs".into());
        }
        let ams = r.endpoint().stats().sent.iter().sum::<u64>() - sent0;
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
    r.barrier().map_err(|e| e.to_string())?;
    let ad = r
        .atomic_domain::<u64>(AtomicOps::FADD | AtomicOps::GET)
        .map_err(|e| e.to_string())?;
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
    if ad.is_native() != want_native {
        return Err(format!(
            "{provider} GEX_OFI_RMA={rma}: atomic domain native = {}, expected {want_native}",
            ad.is_native()
        ));
    }
    let word = r.global_ptr::<u64>(EpAddr::rank(1), 64);
    let f = AtomicFlags::empty();
    let before = client.conduit().stats().native_atomics;
    for _ in 0..100 {
        ad.fetch(&mut r, AtomicOp::Fadd, word, 1, 0, f)
            .map_err(|e| e.to_string())?;
    }
    let counted = client.conduit().stats().native_atomics - before;
    if counted != if want_native { 100 } else { 0 } {
        return Err(format!(
            "{counted} native atomics counted for 100 fetch-adds"
        ));
    }
    r.barrier().map_err(|e| e.to_string())?;
    let total = ad
        .fetch(&mut r, AtomicOp::Get, word, 0, 0, f)
        .map_err(|e| e.to_string())?;
    if total != 100 * u64::from(r.size()) {
        return Err(format!("word holds {total} after 100 fetch-adds per rank"));
    }
    r.barrier().map_err(|e| e.to_string())?;
    drop(r);
    client.finalize().map_err(|e| e.to_string())
}

fn native_job(test: &str, provider: &str, rma: &str, atomics: &str) {
    match gex_boot::spawn_self_test(2, test).expect("spawn") {
        gex_boot::Role::Launcher(code) => assert_eq!(code, 0, "{test}: job failed"),
        gex_boot::Role::Rank(boot) => {
            conformance::rank_watchdog(test);
            let code = match native_rank(boot, provider, rma, atomics) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("{test}: {e}");
                    1
                }
            };
            std::process::exit(code);
        }
    }
}

#[test]
fn native_path_is_taken_tcp() {
    native_job("native_path_is_taken_tcp", "tcp", "1", "1");
}

#[test]
fn native_path_is_taken_shm() {
    native_job("native_path_is_taken_shm", "shm", "1", "1");
}

#[test]
fn am_path_with_rma_off() {
    native_job("am_path_with_rma_off", "tcp", "0", "1");
}

/// `GEX_OFI_ATOMICS=0`: native RMA, AM-based atomic domains.
#[test]
fn atomics_off_keeps_native_rma() {
    native_job("atomics_off_keeps_native_rma", "shm", "1", "0");
}
