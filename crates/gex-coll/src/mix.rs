//! Hashing of team identities and descriptors (team ids, beliefs).

/// A 64-bit mix (splitmix64 finaliser).
pub(crate) fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A hash of `parts` (never 0: 0 is the world team's id).
pub(crate) fn mix_all(parts: &[u64]) -> u64 {
    let mut h = 0x6a09_e667_f3bc_c908u64;
    for p in parts {
        h = mix(h ^ p.wrapping_add(0x9e37_79b9_7f4a_7c15));
    }
    // 0 is the world team.
    h.max(1)
}
