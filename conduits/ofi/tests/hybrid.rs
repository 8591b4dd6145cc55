//! Hybrid jobs on one machine: a 4-rank job whose host list names two "hosts" (`a*2,b*2`,
//! gex-boot's host layout without `--host-exec`, so `GEX_LOCAL_*` and the host ids say
//! two hosts while every process runs here). Ranks of one host talk through the smp
//! conduit's shared memory, the two hosts through libfabric's `tcp;ofi_rxm` on `lo`
//! (`GEX_OFI_DOMAIN=lo`: the "hosts" share this machine's loopback).
//!
//! Runs the core conformance suite (1 and 2 endpoints per rank) and the RMA suite in
//! that shape, the core suite on 3 ranks of one host with `GEX_OFI_HYBRID=1`
//! (`one_host_forced`: every peer through shared memory), and `paths_are_counted` / `hybrid_off_uses_the_network_only` check with
//! `Ofi::stats()` which path each peer's traffic took. `conduits/ofi/tests/netns.rs`
//! runs the same across two network namespaces.
//!
//! Exclusions: none.

mod hybrid_common;

use gex_conduit_ofi::Ofi;
use gex_core::{ClientBuilder, Config};
use gex_testkit::conformance::{self, Case, Job};

/// The host of every rank: the first half on `a`, the others on `b`.
fn hosts(ranks: u32) -> Vec<&'static str> {
    (0..ranks)
        .map(|r| if r < ranks / 2 { "a" } else { "b" })
        .collect()
}

/// The ranks on `rank`'s host.
fn neighbours(ranks: u32, rank: u32) -> Vec<u32> {
    let h = hosts(ranks);
    (0..ranks)
        .filter(|&r| h[r as usize] == h[rank as usize])
        .collect()
}

fn config(extra: &[(&'static str, &'static str)]) -> Config {
    let mut pairs = vec![("GEX_OFI_PROVIDER", "tcp"), ("GEX_OFI_DOMAIN", "lo")];
    pairs.extend_from_slice(extra);
    Config::from_pairs(pairs)
}

/// Launches the job on two "hosts"; each rank checks it is hybrid and runs the case.
fn run(job: &Job<'_>, case: &Case<Ofi>, segment: usize) -> Result<(), String> {
    run_on(job, case, segment, true)
}

/// Launches the job on two "hosts" (`two_hosts`) or one host with `GEX_OFI_HYBRID=1`;
/// each rank checks which ranks it reaches through shared memory and runs the case.
fn run_on(job: &Job<'_>, case: &Case<Ofi>, segment: usize, two_hosts: bool) -> Result<(), String> {
    let h = if two_hosts {
        hosts(job.ranks)
    } else {
        vec!["a"; job.ranks as usize]
    };
    match gex_boot::spawn_self_test_with(job.ranks, job.test_path, |s| s.hosts(h))
        .map_err(|e| e.to_string())?
    {
        gex_boot::Role::Launcher(0) => Ok(()),
        gex_boot::Role::Launcher(code) => Err(format!("job exited with code {code}")),
        gex_boot::Role::Rank(boot) => {
            conformance::rank_watchdog(job.test_path);
            let extra: &[(&'static str, &'static str)] = if two_hosts {
                &[]
            } else {
                &[("GEX_OFI_HYBRID", "1")]
            };
            let client = ClientBuilder::new()
                .config(config(extra))
                .segment_size(segment)
                .endpoints(job.endpoints)
                .init::<Ofi>(boot)
                .map_err(|e| e.to_string())?;
            let me = client.rank();
            let want = if two_hosts {
                neighbours(job.ranks, me)
            } else {
                (0..job.ranks).collect()
            };
            let check = if client.conduit().shared_memory_peers() != want.as_slice() {
                Err(format!(
                    "rank {me}: shared-memory peers {:?}, want {want:?}",
                    client.conduit().shared_memory_peers()
                ))
            } else {
                conformance::run_on_rank(&client, case)
            };
            if let Err(e) = check {
                client.abort(1, &e);
            }
            client.finalize().map_err(|e| e.to_string())
        }
    }
}

fn core_runner(job: &Job<'_>, case: &Case<Ofi>) -> Result<(), String> {
    run(job, case, 256 << 10)
}

fn rma_runner(job: &Job<'_>, case: &Case<Ofi>) -> Result<(), String> {
    run(job, case, 2 << 20)
}

/// 4 ranks on two "hosts", one endpoint each.
mod two_hosts {
    use super::*;
    gex_testkit::conformance_tests! {
        conduit: Ofi,
        runner: core_runner,
        ranks: 4,
    }
}

/// 4 ranks on two "hosts", two endpoints each (rings between every pair of endpoints
/// of a host, one libfabric domain per endpoint across hosts).
mod two_hosts_two_eps {
    use super::*;
    gex_testkit::conformance_tests! {
        conduit: Ofi,
        runner: core_runner,
        ranks: 4,
        endpoints: 2,
    }
}

/// The RMA suite (gex-rma) on 4 ranks on two "hosts": direct copies and CPU atomics
/// within a host, native `FI_RMA` across; atomic domains native (NIC) for all peers
/// where `FI_ATOMIC` offers every operation.
mod rma_two_hosts {
    use super::*;
    gex_testkit::rma_conformance_tests! {
        conduit: Ofi,
        runner: rma_runner,
        ranks: 4,
    }
}

/// One host, 3 ranks, `GEX_OFI_HYBRID=1`: every peer through shared memory; libfabric
/// carries only what gex-rma asks of the NIC (native atomic domains).
mod one_host_forced {
    use super::*;
    fn runner(job: &Job<'_>, case: &Case<Ofi>) -> Result<(), String> {
        run_on(job, case, 256 << 10, false)
    }
    gex_testkit::conformance_tests! {
        conduit: Ofi,
        runner: runner,
        ranks: 3,
    }
}

/// Runs `check` on every rank of a 4-rank job on two "hosts" with `extra` settings.
fn paths_job(test: &str, extra: &'static [(&'static str, &'static str)], hybrid: bool) {
    match gex_boot::spawn_self_test_with(4, test, |s| s.hosts(hosts(4))).expect("spawn") {
        gex_boot::Role::Launcher(code) => assert_eq!(code, 0, "{test}: job failed"),
        gex_boot::Role::Rank(boot) => {
            conformance::rank_watchdog(test);
            let result = ClientBuilder::new()
                .config(config(extra))
                .segment_size(1 << 20)
                .init::<Ofi>(boot)
                .map_err(|e| e.to_string())
                .and_then(|client| {
                    let me = client.rank();
                    let r = hybrid_common::check_paths(&client, hybrid, &neighbours(4, me));
                    if let Err(e) = &r {
                        client.abort(1, e);
                    }
                    client.finalize().map_err(|e| e.to_string())
                });
            let code = match result {
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

/// Hybrid by default: requests to the rank's own host go through the rings, the others
/// through libfabric; puts across hosts are native, puts to a neighbour plain copies.
#[test]
fn paths_are_counted() {
    paths_job("paths_are_counted", &[], true);
}

/// `GEX_OFI_HYBRID=0`: every peer through libfabric, no segment mapped.
#[test]
fn hybrid_off_uses_the_network_only() {
    paths_job(
        "hybrid_off_uses_the_network_only",
        &[("GEX_OFI_HYBRID", "0")],
        false,
    );
}
