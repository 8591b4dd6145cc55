//! A tiny seeded generator (SplitMix64): deterministic, dependency-free, good enough
//! for delivery schedules and test patterns (not for cryptography).

/// SplitMix64 (Steele, Lea, Flood 2014): one 64-bit state word, full period.
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix64(self.state)
    }

    /// A value uniformly drawn from `0..=max` (tiny modulo bias, irrelevant here).
    pub fn up_to(&mut self, max: u64) -> u64 {
        match max {
            0 => 0,
            u64::MAX => self.next_u64(),
            m => self.next_u64() % (m + 1),
        }
    }
}

/// The SplitMix64 finaliser: a bijective 64-bit mixer.
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Hashes a few words into one (order matters).
pub fn hash_words(words: &[u64]) -> u64 {
    let mut h = 0x6a09_e667_f3bc_c908u64;
    for &w in words {
        h = mix64(h ^ w.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_seed_dependent() {
        let a: Vec<u64> = (0..8)
            .scan(SplitMix64::new(7), |r, _| Some(r.next_u64()))
            .collect();
        let b: Vec<u64> = (0..8)
            .scan(SplitMix64::new(7), |r, _| Some(r.next_u64()))
            .collect();
        let c: Vec<u64> = (0..8)
            .scan(SplitMix64::new(8), |r, _| Some(r.next_u64()))
            .collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
        let mut r = SplitMix64::new(1);
        assert!((0..1000).all(|_| r.up_to(3) <= 3));
        assert_eq!(r.up_to(0), 0);
        assert_ne!(hash_words(&[1, 2]), hash_words(&[2, 1]));
    }
}
