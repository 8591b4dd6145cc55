//! The LogGP terms every cost model is written in.

use super::log_ceil;
use super::tree::Tree;
use crate::loggp::LogGP;
use crate::op::{SyncMode, Transport};

/// A query's LogGP terms: team size `p` (at least 2) and block bytes `n`.
pub(crate) struct Cost<'a> {
    /// The parameters.
    pub(crate) m: &'a LogGP,
    /// Team size.
    pub(crate) p: u32,
    /// Team size as a float.
    pub(crate) pf: f64,
    /// Block bytes as a float.
    pub(crate) nf: f64,
    /// ⌈log2 p⌉.
    pub(crate) lg2: f64,
}

impl<'a> Cost<'a> {
    /// The terms of `p` members and `n` bytes.
    pub(crate) fn new(m: &'a LogGP, p: u32, n: usize) -> Cost<'a> {
        Cost {
            m,
            p,
            pf: f64::from(p),
            nf: n as f64,
            lg2: f64::from(log_ceil(p, 2)),
        }
    }

    /// One message of `k` bytes end to end.
    pub(crate) fn msg(&self, k: f64) -> f64 {
        let m = self.m;
        m.l + 2.0 * m.o + (k - 1.0).max(0.0) * m.big_g + k * m.copy
    }

    /// The injection time of one more message of `k` bytes.
    pub(crate) fn inj(&self, k: f64) -> f64 {
        let m = self.m;
        m.g.max(m.o + (k - 1.0).max(0.0) * m.big_g)
    }

    /// The time of a broadcast (or reduction) of `bytes` along tree `t`, chains
    /// pipelined by `seg` bytes (0: not).
    pub(crate) fn tree(&self, t: Tree, bytes: f64, seg: usize) -> f64 {
        let p = self.p;
        match t {
            Tree::Knomial(k) => {
                let k = k.min(p);
                f64::from(log_ceil(p, k)) * (f64::from(k - 2) * self.inj(bytes) + self.msg(bytes))
            }
            Tree::Kary(k) => {
                let mut depth = 0u32;
                let (mut level, mut covered) = (1u64, 1u64);
                while covered < u64::from(p) {
                    level *= u64::from(k);
                    covered += level;
                    depth += 1;
                }
                f64::from(depth)
                    * (f64::from(k.saturating_sub(1)) * self.inj(bytes) + self.msg(bytes))
            }
            Tree::Chain => {
                let seg = if seg == 0 {
                    bytes
                } else {
                    (seg as f64).min(bytes)
                };
                let nseg = if seg > 0.0 {
                    (bytes / seg).ceil().max(1.0)
                } else {
                    1.0
                };
                (self.pf - 2.0 + nseg) * self.msg(seg)
            }
            // Every hop of the deepest path is its sender's first send (the chain
            // of the current dimension is served first; its last member turns
            // into the next dimension first).
            Tree::Fork(g) => f64::from(g.depth(p)) * self.msg(bytes),
        }
    }

    /// What `transport` adds to (or takes from) an eager schedule whose deepest path
    /// has `hops` hops, with input synchronisation `input`.
    pub(crate) fn transport_extra(&self, transport: Transport, hops: f64, input: SyncMode) -> f64 {
        let m = self.m;
        match transport {
            Transport::Eager => 0.0,
            // No receiver copy; in-my adds a ready message per hop, hidden behind the
            // data's own latency except for the first.
            Transport::Put => {
                -(self.nf * m.copy) * hops
                    + if input == SyncMode::My {
                        self.msg(0.0)
                    } else {
                        0.0
                    }
            }
            // Announce, get (request + reply), acknowledge: per hop about three
            // latencies instead of one.
            Transport::Rendezvous => hops * (2.0 * m.l + 4.0 * m.o) - (self.nf * m.copy) * hops,
        }
    }
}
