//! Sequential reference of every collective, shared by the tests.
#![allow(dead_code, unreachable_pub)]

use gex_coll::{OpKind, ReduceFn};

/// Expected output of every rank for `op` on `inputs` (bytes per rank), blocks of `n`
/// bytes, reduction `f` combining in rank order.
pub fn reference(
    op: OpKind,
    root: usize,
    n: usize,
    inputs: &[Vec<u8>],
    f: Option<&ReduceFn>,
) -> Vec<Vec<u8>> {
    let p = inputs.len();
    let fold = |parts: &mut dyn Iterator<Item = Vec<u8>>| -> Vec<u8> {
        let mut acc: Option<Vec<u8>> = None;
        for x in parts {
            acc = Some(match acc {
                None => x,
                Some(mut a) => {
                    (f.expect("reduction"))(&mut a, &x, false);
                    a
                }
            });
        }
        acc.unwrap_or_default()
    };
    let block = |r: usize, b: usize| inputs[r][b * n..(b + 1) * n].to_vec();
    (0..p)
        .map(|i| match op {
            OpKind::Barrier => vec![],
            OpKind::Broadcast => inputs[root][..n].to_vec(),
            OpKind::Scatter => block(root, i),
            OpKind::Gather if i == root => (0..p).flat_map(|r| block(r, 0)).collect(),
            OpKind::Gather => vec![],
            OpKind::GatherAll => (0..p).flat_map(|r| block(r, 0)).collect(),
            OpKind::Exchange => (0..p).flat_map(|r| block(r, i)).collect(),
            OpKind::Reduce if i == root => fold(&mut (0..p).map(|r| block(r, 0))),
            OpKind::Reduce => vec![],
            OpKind::Allreduce => fold(&mut (0..p).map(|r| block(r, 0))),
            OpKind::ReduceScatter => fold(&mut (0..p).map(|r| block(r, i))),
            OpKind::Scan => fold(&mut (0..=i).map(|r| block(r, 0))),
            OpKind::Exscan if i == 0 => vec![],
            OpKind::Exscan => fold(&mut (0..i).map(|r| block(r, 0))),
        })
        .collect()
}

/// 2x2 matrix product with wrapping arithmetic: associative, not commutative.
pub fn matmul(a: &[u64; 4], b: &[u64; 4]) -> [u64; 4] {
    let m = |x: u64, y: u64| x.wrapping_mul(y);
    [
        m(a[0], b[0]).wrapping_add(m(a[1], b[2])),
        m(a[0], b[1]).wrapping_add(m(a[1], b[3])),
        m(a[2], b[0]).wrapping_add(m(a[3], b[2])),
        m(a[2], b[1]).wrapping_add(m(a[3], b[3])),
    ]
}

/// Deterministic pseudo-random bytes for (rank, salt).
pub fn bytes(rank: usize, salt: u64, len: usize) -> Vec<u8> {
    let mut x = (rank as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ salt.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}
