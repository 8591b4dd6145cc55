//! The ofi conduit: the header of every message received from the network and the
//! address blob every rank publishes at `open`.

use super::few;
use crate::engine::outcome;
use gex_conduit_ofi::fuzz_api as ofi;
use gex_core::{Category, Kind};

pub(crate) fn wire_seeds() -> Vec<Vec<u8>> {
    vec![
        ofi::encode(
            7,
            3,
            200,
            Kind::Request,
            Category::Short,
            &[1, 2],
            &[],
            0,
            5,
        ),
        ofi::encode(
            1,
            0,
            9,
            Kind::Reply,
            Category::Medium,
            &[5; 16],
            &[9; 40],
            0,
            0,
        ),
        ofi::encode(
            2,
            1,
            3,
            Kind::Request,
            Category::Long,
            &[3],
            &[1, 2, 3],
            1 << 40,
            1,
        ),
        ofi::encode_credit(4, 2, true, 8),
        ofi::encode_credit(4, 2, false, 0),
        // Control messages (run-time endpoints): an address request and a closing notice.
        ofi::encode_ctl(3, 0, 1, &[2, 0, 9, 9, 9, 9], 0),
        ofi::encode_ctl(3, 1, 3, &[], 2),
    ]
}

/// A received message: what `poll` accepts is exactly what a sender's encoder makes
/// of the decoded fields, and a rejected message still says who it claims to be from
/// when it is long enough.
pub(crate) fn wire(d: &[u8]) -> u64 {
    match ofi::decode(d, ofi::MAX_ARGS) {
        Ok(m) => {
            let again = match m.category {
                Some(c) => ofi::encode(
                    m.src_rank, m.src_ep, m.handler, m.kind, c, &m.args, &m.payload, m.offset,
                    m.credits,
                ),
                None if m.ctl != 0 => {
                    assert!(m.args.is_empty() && !m.hello && m.kind == Kind::Request);
                    ofi::encode_ctl(m.src_rank, m.src_ep, m.ctl, &m.payload, m.credits)
                }
                None => {
                    assert!(m.args.is_empty() && m.payload.is_empty());
                    assert_eq!(
                        m.kind,
                        Kind::Request,
                        "a credit-only message with the reply flag"
                    );
                    ofi::encode_credit(m.src_rank, m.src_ep, m.hello, m.credits)
                }
            };
            assert_eq!(again, d, "an accepted message is not what a sender writes");
            assert_eq!(ofi::claimed_source(d), Some((m.src_rank, m.src_ep)));
            outcome(&format!("ok {:?} {:?}", m.category, m.kind))
        }
        Err(e) => {
            assert_eq!(ofi::claimed_source(d).is_some(), d.len() >= 12);
            outcome(&e)
        }
    }
}

pub(crate) fn blob_seeds() -> Vec<Vec<u8>> {
    vec![
        ofi::encode_peer_blob(&(
            "tcp;ofi_rxm".into(),
            65536,
            vec![
                (vec![2, 0, 0x1f, 0x90, 127, 0, 0, 1], 4096, 1 << 20, 7),
                (vec![1; 16], 0, 4096, 9),
            ],
        )),
        ofi::encode_peer_blob(&("shm".into(), 0, vec![])),
    ]
}

/// Another rank's address blob: accepted blobs re-encode to themselves (when the
/// provider name is UTF-8: it is read leniently).
pub(crate) fn blob(d: &[u8]) -> u64 {
    match ofi::decode_peer_blob(d) {
        Ok(p) => {
            let plen = u32::from_le_bytes(d[..4].try_into().unwrap()) as usize;
            if std::str::from_utf8(&d[4..4 + plen]).is_ok() {
                assert_eq!(
                    ofi::encode_peer_blob(&p),
                    d,
                    "an accepted blob is not canonical"
                );
            }
            outcome(&format!("ok {}", few(p.2.len())))
        }
        Err(e) => outcome(&e),
    }
}
