//! The hang report (`Endpoint::report`, docs/launching.md "Faults"): what gex-coll adds
//! for collectives in flight. Two thread ranks on the simulator; rank 1 joins only
//! after rank 0 read its report, so rank 0's collectives wait in a known step
//! (shared-memory algorithms, the shared-memory barrier, a message algorithm).

mod common;

use common::on_sim;
use gex_coll::{Allreduce, Barrier, Broadcast, BuiltinOp, CollExt};
use gex_core::Nb;
use gex_testkit::sim::SimConfig;

#[test]
fn the_report_names_each_collective_in_flight_and_its_step() {
    let gate = std::sync::Barrier::new(2);
    on_sim(2, SimConfig::default(), 1 << 16, |mut ep, w| {
        let me = u64::from(w.rank());
        if me == 1 {
            gate.wait();
        }
        let sum = ep
            .collective(&w, Allreduce::new(vec![1 + me, 2], BuiltinOp::Sum), Nb)
            .unwrap();
        let bar = ep.collective(&w, Barrier::new(), Nb).unwrap();
        // A message algorithm (forced): its line names the schedule's round.
        let msg = ep
            .collective(
                &w,
                Allreduce::new(vec![me], BuiltinOp::Max).algorithm("recdbl"),
                Nb,
            )
            .unwrap();
        if me == 0 {
            for _ in 0..100 {
                ep.poll();
            }
            let report = ep.report();
            let team = format!("on team {:#x}", w.id());
            let line = |kind: &str| {
                report
                    .lines()
                    .find(|l| l.contains(kind) && l.contains(&team))
                    .unwrap_or_else(|| panic!("no {kind} line in:\n{report}"))
                    .to_string()
            };
            // The allreduce is under way, waiting for rank 1 in its first step; the
            // barrier, issued after it on the same team, has the next number.
            let s = line("allreduce");
            assert!(s.contains("seq 0"), "{s}");
            // The simulator's ranks share memory: a shared-memory algorithm, at its
            // first round, waiting for member 1's publication.
            assert!(s.contains("shared memory, member 0 of 2, round 0/"), "{s}");
            assert!(s.contains("waits for member 1's publication"), "{s}");
            assert!(!s.contains("complete"), "{s}");
            let b = line("barrier");
            assert!(b.contains("seq 1"), "{b}");
            let m = report
                .lines()
                .find(|l| l.contains("seq 2"))
                .unwrap_or_else(|| panic!("no seq 2 line in:\n{report}"));
            assert!(
                m.contains("allreduce") && m.contains("schedule round "),
                "{m}"
            );
            assert!(report.contains("busy layers: [") && report.contains("coll"));
            gate.wait();
        }
        assert_eq!(ep.wait(sum).unwrap(), vec![3, 4]);
        ep.wait(bar).unwrap();
        assert_eq!(ep.wait(msg).unwrap(), vec![1]);
        // Nothing of them is left in the report.
        let report = ep.report();
        assert!(!report.contains("on team"), "{report}");
    });
}

/// A small broadcast through the ring names what it waits for: rank 0, a reader,
/// waits for its root's publication (one word: the packed ring, as on a host with
/// fewer CPUs than members) until rank 1 joins.
#[test]
fn the_report_names_a_small_broadcasts_wait() {
    let gate = std::sync::Barrier::new(2);
    on_sim(2, SimConfig::default(), 1 << 16, |mut ep, w| {
        let me = w.rank();
        ep.tuner(|t| t.set_host_cpus(1)).unwrap();
        if me == 1 {
            gate.wait();
        }
        let data = if me == 1 { vec![7u8; 8] } else { vec![0; 8] };
        let ev = ep.collective(&w, Broadcast::new(1, data), Nb).unwrap();
        if me == 0 {
            for _ in 0..100 {
                ep.poll();
            }
            let report = ep.report();
            let line = report
                .lines()
                .find(|l| l.contains("broadcast") && l.contains("seq 0"))
                .unwrap_or_else(|| panic!("no broadcast line in:\n{report}"));
            assert!(
                    line.contains("small broadcast (ring), waits for member 1's small-broadcast publication in packed ring slot 0 of channel 0"),
                    "{line}"
                );
            gate.wait();
        }
        assert_eq!(ep.wait(ev).unwrap(), vec![7u8; 8]);
        assert_eq!(ep.coll_stats().ring_calls, 1);
    });
}
