//! Loom models of the shared-memory channel's slot protocol (`src/shm/`, `ShmOp`:
//! `publish`, `step`, `write`, `read`): run with
//! `RUSTFLAGS="--cfg gex_loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p gex-coll --release --test loom_channel`
//! (or `ci/loom.sh`).
//!
//! Two members (threads) run the real `ShmOp` over real areas whose flag words are
//! loom atomics (`gex_coll::loomkit`): a publisher waits until every reader of its
//! slot's previous publication acknowledged (`ACK`, acquire), writes its data (or
//! `REF`, a reference into its segment), stores the round's tag in `POST` (release);
//! a reader waits for the tag (acquire), loads `REF`, copies, and adds one to `ACK`
//! (release). The slot bytes and the segments are plain memory with loom shadow
//! cells (`shm::shadow::touch`, its cells made by `loomkit`, called by `ShmOp::write` and `ShmOp::read`), so loom
//! reports a read of a slot not ordered after its write, and a slot or input
//! rewritten before its readers' reads are ordered before the rewrite; every output
//! is checked byte for byte (a stale `REF` or slot gives another member's, round's or
//! collective's bytes).
//!
//! **The models fail when the code is broken** (mutations of `src/shm/` tried by
//! hand, each one reverted; what loom reported):
//! - `POST` store `Release` → `Relaxed` (`publish`): both models, `Causality
//!   violation: Concurrent read and write accesses` (a slot / segment read not
//!   ordered after its write);
//! - `POST` load `Acquire` → `Relaxed` (`step`): slot reuse, the same;
//! - `ACK` `fetch_add` `Release` → `Relaxed` (`step`): slot reuse, `Causality
//!   violation: Concurrent read and write accesses to UnsafeCell` (the root's rewrite
//!   of slot 0 not ordered after the reader's copy);
//! - `ACK` load `Acquire` → `Relaxed` (`Area::acks`): both models, the same (by
//!   reference: the rewrite of the input in the segment);
//! - the publisher's wait for `ACK` before reusing a slot removed: slot reuse,
//!   causality violation;
//! - the by-reference publisher's final wait for `ACK` removed: by reference,
//!   causality violation on the segment.
//!
//! A gather_all does not catch the `ACK` mutations: every member reads the others'
//! next round before rewriting a slot, which orders the rewrite already; hence the
//! scatter (its root reads nothing).
#![cfg(gex_loom)]

use gex_coll::loomkit::{BYREF_MIN, Coll, Member, Shared, slot_cap};
use gex_coll::{OpKind, SyncModes};
use loom::thread;

/// The byte `i` of member `q`'s input of collective `seq` (differs between members,
/// collectives and chunks of a block).
fn byte(q: u32, seq: u32, i: usize) -> u8 {
    (q as usize * 131 + seq as usize * 37 + i / 4093) as u8
}

fn input(q: u32, seq: u32, n: usize) -> Vec<u8> {
    (0..n).map(|i| byte(q, seq, i)).collect()
}

/// Steps `c` to completion, spinning on the flag it waits for between steps.
fn run(m: &mut Member, mut c: Coll, input: &[u8], out: &mut [u8]) {
    c.keep_own(input, out);
    while !c.step(m, input, out) {
        while !c.ready() {
            gex_sync::hint::spin_loop();
        }
    }
}

/// Checks a gather_all's output: block `q` is member `q`'s input of `seq`.
fn check(me: u32, seq: u32, n: usize, out: &[u8]) {
    for (q, block) in out.chunks(n).enumerate() {
        assert!(
            block == input(q as u32, seq, n).as_slice(),
            "member {me}, collective {seq}: block of member {q} is stale or torn"
        );
    }
}

/// Runs `body(member, rank)` on two members (rank 1 on a new thread).
fn two(seg_len: usize, body: fn(&Shared, Member)) {
    let shared = Shared::new(2, seg_len);
    let m0 = Member::new(&shared, 0);
    let m1 = Member::new(&shared, 1);
    let s1 = shared.clone();
    let h = thread::spawn(move || body(&s1, m1));
    body(&shared, m0);
    h.join().unwrap();
}

/// Slot reuse inside one collective: a scatter from member 0 of blocks of two slots
/// and 16 bytes takes three data rounds, in large slots 0, 1 and 0 again. The root
/// reads nothing from its reader, so only the reader's acknowledgement of round 0
/// orders its reads of slot 0 before the root's rewrite in round 2. Private inputs:
/// the data go through the slots.
#[test]
fn loom_channel_slot_reuse() {
    loom::model(|| {
        two(0, |_, mut m| {
            let n = 2 * slot_cap() + 16;
            let me = m.me();
            let inp = if me == 0 {
                [input(0, 0, n), input(1, 0, n)].concat()
            } else {
                Vec::new()
            };
            let mut out = vec![0u8; n];
            let c = m.collective(OpKind::Scatter, n, SyncModes::default(), 0);
            run(&mut m, c, &inp, &mut out);
            assert!(
                out == input(me, 0, n),
                "member {me}: its block of the scatter is stale or torn"
            );
        });
    });
}

/// References and slot reuse across collectives: gather_alls of 16 KiB blocks (one
/// round each: collective `seq` takes large slot `seq mod 2`), the first two
/// published by reference from the same place of each member's segment, which the
/// member rewrites with its next input as soon as the collective returned; the third
/// from private memory through slot 0 again (`REF` 0 after a reference).
#[test]
fn loom_channel_by_reference() {
    loom::model(|| {
        two(BYREF_MIN, |shared, mut m| {
            let n = BYREF_MIN;
            let me = m.me();
            shared.write_segment(me, 0, &input(me, 0, n));
            for seq in 0..3 {
                let mut out = vec![0u8; 2 * n];
                let mut c = m.collective(OpKind::GatherAll, n, SyncModes::default(), seq);
                if seq < 2 {
                    // SAFETY: this member's own segment, which nothing writes until
                    // the `write_segment` below, after the slice's last use.
                    #[allow(unsafe_code)]
                    let inp = unsafe { shared.segment(me, 0, n) };
                    assert!(
                        c.publish_by_reference(&m, inp),
                        "a segment input goes by reference"
                    );
                    run(&mut m, c, inp, &mut out);
                    // Returned: every reader took its piece; the input may change.
                    shared.write_segment(me, 0, &input(me, seq + 1, n));
                } else {
                    let inp = input(me, seq, n);
                    assert!(!c.publish_by_reference(&m, &inp));
                    run(&mut m, c, &inp, &mut out);
                }
                check(me, seq, n, &out);
            }
        });
    });
}
