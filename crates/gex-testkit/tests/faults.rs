//! The conformance suite must fail on a broken conduit: each test injects one
//! deliberate bug into the simulator and checks that the case meant to catch it fails,
//! for the right reason.

use gex_testkit::conformance::{self, Job, Runner};
use gex_testkit::sim::{Fault, Sim, SimConfig, SimRunner};
use std::time::Duration;

/// The request each endpoint loses or duplicates in `many_in_flight`: one of its data
/// requests (16 per peer under Miri, 10 000 otherwise).
const NTH: u64 = if cfg!(miri) { 12 } else { 500 };

/// The watchdog of a job that fails by itself: under Miri, whose clock advances with
/// the code it interprets, a case takes more than 5 s of that clock before it gets
/// to the fault (every copy into a segment is a loop of atomic accesses there).
const WATCHDOG: Duration = Duration::from_secs(if cfg!(miri) { 120 } else { 5 });

/// Runs `case` on `ranks` ranks of a simulator with `fault`; returns the failure text.
fn fails(case: &str, ranks: u32, fault: Fault) -> String {
    fails_within(case, ranks, fault, WATCHDOG)
}

/// As [`fails`], with the job's watchdog at `timeout`.
fn fails_within(case: &str, ranks: u32, fault: Fault, timeout: Duration) -> String {
    let mut cfg = SimConfig::default().timeout(timeout);
    cfg.fault = fault;
    let c = conformance::case::<Sim>(case).expect("a case");
    let job = Job {
        case,
        ranks,
        endpoints: 1,
        test_path: case,
    };
    match SimRunner::new(cfg).run(&job, &c) {
        Ok(()) => panic!("case {case} passed on a simulator with {fault:?}"),
        Err(e) => e,
    }
}

/// Runs `case` on 2 ranks of a simulator with `fault`: it must fail saying one of
/// `any_of` (the failure names the case and fault otherwise).
fn caught(case: &str, fault: Fault, any_of: &[&str]) {
    let e = fails(case, 2, fault);
    assert!(
        any_of.iter().any(|m| e.contains(m)),
        "{case} with {fault:?}: none of {any_of:?} in: {e}"
    );
}

#[test]
fn lost_messages_are_caught() {
    // The job cannot complete: the watchdog (5 s here) reports it.
    let e = fails_within(
        "many_in_flight",
        2,
        Fault::DropRequest(NTH),
        Duration::from_secs(5),
    );
    assert!(e.contains("watchdog") || e.contains("timed out"), "{e}");
}

#[test]
fn duplicated_messages_are_caught() {
    caught(
        "many_in_flight",
        Fault::DuplicateRequest(NTH),
        &["duplicate"],
    );
    caught(
        "long_offsets",
        Fault::DuplicateRequest(3),
        &["Long requests arrived"],
    );
}

#[test]
fn corrupt_payloads_are_caught() {
    caught("am_categories", Fault::CorruptMedium, &["payload differs"]);
    caught(
        "payload_source_reuse",
        Fault::CorruptMedium,
        &["payload differs"],
    );
}

#[test]
fn misplaced_long_payloads_are_caught() {
    caught(
        "long_offsets",
        Fault::ShiftLong,
        &["payload differs", "segment byte"],
    );
    caught("am_categories", Fault::ShiftLong, &["Long"]);
}

#[test]
fn phantom_sends_behind_wouldblock_are_caught() {
    caught(
        "immediate_flood",
        Fault::IgnoreImmediate,
        &["lost or phantom", "duplicate message"],
    );
}

#[test]
#[cfg_attr(
    miri,
    ignore = "counts block() returns in a 300 ms window: under Miri a call costs milliseconds of its clock, so a fake blocking wait stays under the bound"
)]
fn false_capability_flags_are_caught() {
    caught("capabilities", Fault::FakeBlockingWait, &["BLOCKING_WAIT"]);
}
