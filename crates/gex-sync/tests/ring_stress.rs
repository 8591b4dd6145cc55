//! Two threads, one ring, a million records of varied sizes (300 under Miri, where each
//! costs milliseconds); the consumer checks order and content of every byte. The consumer sleeps on a doorbell when the ring is empty, so the
//! test also exercises `ring` + `wait_until` under load (2 cores shared with other work).
#![cfg(not(gex_loom))]

use std::sync::Arc;
use std::time::Duration;

use gex_sync::ring;
use gex_sync::wait::{Doorbell, WaitPolicy};

const RECORDS: u64 = if cfg!(miri) { 300 } else { 1_000_000 };

/// Body length for record `seq`: mostly small, sometimes large, sometimes exactly maximal.
fn body_len(seq: u64, max: usize) -> usize {
    match seq % 101 {
        0 => max,
        1..=4 => (seq as usize * 7919) % (max + 1),
        _ => (seq as usize * 13) % 97,
    }
}

fn byte(seq: u64, i: usize) -> u8 {
    (seq as u8).wrapping_mul(7) ^ (i as u8) ^ (i >> 8) as u8
}

fn stress(cap: usize) {
    let (mut tx, mut rx) = ring::channel(cap);
    let max = tx.max_body();
    let bell = Arc::new(Doorbell::new());
    bell.set_may_block(true);

    let consumer = {
        let bell = bell.clone();
        std::thread::spawn(move || {
            let mut bytes = 0u64;
            for seq in 0..RECORDS {
                let ok = bell.wait_until_timeout(
                    WaitPolicy::SpinThenBlock { spins: 200 },
                    Duration::from_secs(60),
                    || rx.has_data(),
                );
                assert!(ok, "consumer starved at record {seq}");
                let (user, body) = rx.peek().expect("has_data promised a record");
                assert_eq!(user, seq as u32, "order");
                let len = body_len(seq, max);
                assert_eq!(body.len(), len, "length of record {seq}");
                // Sequence number first, then a pattern.
                let n = len.min(8);
                assert_eq!(body[..n], seq.to_le_bytes()[..n], "seq in record {seq}");
                for (i, &b) in body.iter().enumerate().skip(8) {
                    assert_eq!(b, byte(seq, i), "byte {i} of record {seq}");
                }
                bytes += len as u64;
                rx.pop();
            }
            assert_eq!(rx.peek(), None);
            bytes
        })
    };

    let mut sent = 0u64;
    let mut full = 0u64;
    for seq in 0..RECORDS {
        let len = body_len(seq, max);
        let mut spins = 0u32;
        loop {
            if let Some(mut r) = tx.reserve(len) {
                let body = r.body();
                let head = len.min(8);
                body[..head].copy_from_slice(&seq.to_le_bytes()[..head]);
                for (i, b) in body.iter_mut().enumerate().skip(8) {
                    *b = byte(seq, i);
                }
                r.commit(seq as u32, len);
                break;
            }
            full += 1;
            spins += 1;
            if spins % 64 == 0 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        bell.ring();
        sent += len as u64;
    }
    assert_eq!(consumer.join().unwrap(), sent);
    assert!(tx.is_empty());
    eprintln!("cap {cap}: {RECORDS} records, {sent} bytes, {full} full polls");
}

#[test]
fn one_million_records_cap_4096() {
    stress(4096);
}

#[test]
fn one_million_records_cap_256() {
    stress(256);
}
