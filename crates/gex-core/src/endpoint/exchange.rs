//! The core's all-gather over a team ([`Endpoint::exchange`]): a setup-time agreement
//! service for layers (an atomic domain's operation set, a team's layout) and
//! programs. Every member sends its blob to every other member as Medium AMs (chunked)
//! and polls until it has every other member's: simple and slow (n² messages), not a
//! collective algorithm; collectives belong to the collectives layer.

use super::am::{Am, Body};
use super::{Endpoint, H_EXCHANGE};
use crate::error::AmError;
use crate::spi::Conduit;
use crate::team::Team;
use std::collections::HashMap;

/// (team id, exchange number, source team rank).
type Key = (u64, u32, u32);

#[derive(Debug, Default)]
struct Partial {
    buf: Vec<u8>,
    got: usize,
    /// What the sender said the exchange is for ([`Endpoint::exchange_tagged`]).
    tag: u32,
}

/// What the exchange handler has received.
#[derive(Debug, Default)]
pub(crate) struct Mailbox {
    parts: HashMap<Key, Partial>,
    /// Exchanges started per team on this endpoint.
    seq: HashMap<u64, u32>,
    /// Malformed messages dropped.
    dropped: u64,
}

impl Mailbox {
    /// Handles `[team lo, team hi, seq, src team rank, total, offset, tag]` + a chunk.
    pub(crate) fn deliver(&mut self, am: &Am<'_>) {
        let a = am.args();
        if a.len() < 7 {
            self.dropped += 1;
            return;
        }
        let key = (u64::from(a[0]) | (u64::from(a[1]) << 32), a[2], a[3]);
        let (total, off, tag) = (a[4] as usize, a[5] as usize, a[6]);
        let p = am.payload();
        let e = self.parts.entry(key).or_insert_with(|| Partial {
            buf: vec![0; total],
            got: 0,
            tag,
        });
        match off.checked_add(p.len()) {
            Some(end) if e.buf.len() == total && end <= total => {
                e.buf[off..end].copy_from_slice(p);
                e.got += p.len();
            }
            _ => self.dropped += 1,
        }
    }

    fn complete(&self, key: Key) -> bool {
        self.parts.get(&key).is_some_and(|p| p.got >= p.buf.len())
    }

    /// The tag of a part that arrived for `key` with another tag than `tag`.
    fn mismatch(&self, key: Key, tag: u32) -> Option<u32> {
        self.parts.get(&key).map(|p| p.tag).filter(|&t| t != tag)
    }
}

impl<C: Conduit> Endpoint<C> {
    /// All-gather of one blob per member of `team` (sizes may differ): returns every
    /// member's blob in team-rank order. Collective over `team` (every member calls it,
    /// in the same order as its other exchanges on the team). Meant for setup-time
    /// agreement (slow: n² messages); use the collectives layer for data.
    ///
    /// ```
    /// # use gex_core::{boot::Singleton, loopback::Loopback, ClientBuilder};
    /// # let client = ClientBuilder::new().segment_size(4096).init::<Loopback>(Box::new(Singleton::new()))?;
    /// # let mut ep = client.endpoint(0)?;
    /// let world = ep.world();
    /// let all = ep.exchange(&world, b"mine")?;
    /// assert_eq!(all, vec![b"mine".to_vec()]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`AmError::NotMember`] if this endpoint is not `team.me()`;
    /// [`AmError::Conduit`] if the network fails.
    pub fn exchange(&mut self, team: &Team, blob: &[u8]) -> Result<Vec<Vec<u8>>, AmError> {
        self.exchange_tagged(team, 0, blob)
    }

    /// As [`exchange`](Self::exchange), naming what the exchange is for: every member
    /// must pass the same `tag` to its n-th exchange on the team. A member whose n-th
    /// exchange has another tag (it is at another point of the program) makes the
    /// exchange fail with [`AmError::ExchangeMismatch`] on the members that receive its
    /// part, instead of pairing unrelated exchanges. Layers use distinct tags for their
    /// agreements.
    ///
    /// # Errors
    /// As [`exchange`](Self::exchange), plus [`AmError::ExchangeMismatch`].
    pub fn exchange_tagged(
        &mut self,
        team: &Team,
        tag: u32,
        blob: &[u8],
    ) -> Result<Vec<Vec<u8>>, AmError> {
        let me = self.addr();
        if team.me() != me {
            return Err(AmError::NotMember(me));
        }
        let id = team.id();
        let mut g = self.inner();
        let seq = {
            let s = g.core.xchg.seq.entry(id).or_insert(0);
            let v = *s;
            *s = s.wrapping_add(1);
            v
        };
        let rank = team.rank();
        let (lo, hi) = (id as u32, (id >> 32) as u32);
        let total = u32::try_from(blob.len()).map_err(|_| AmError::PayloadTooLarge {
            len: blob.len(),
            max: u32::MAX as usize,
        })?;
        for (i, &dst) in team.members().iter().enumerate() {
            if i as u32 == rank {
                continue;
            }
            let chunk = g.core.max_medium(dst).max(1);
            let mut off = 0usize;
            loop {
                let end = (off + chunk).min(blob.len());
                let args = [lo, hi, seq, rank, total, off as u32, tag];
                g.request(
                    dst,
                    H_EXCHANGE,
                    Body::medium(&args, &blob[off..end]),
                    H_EXCHANGE,
                )?;
                off = end;
                if off >= blob.len() {
                    break;
                }
            }
        }
        let n = team.size();
        let mut clash = None;
        g.wait_for(None, |inner| {
            let x = &inner.core.xchg;
            clash = (0..n)
                .filter(|&r| r != rank)
                .find_map(|r| x.mismatch((id, seq, r), tag).map(|t| (r, t)));
            clash.is_some() || (0..n).all(|r| r == rank || x.complete((id, seq, r)))
        });
        if let Some((r, theirs)) = clash {
            g.rethrow();
            return Err(AmError::ExchangeMismatch {
                peer: team.member(r).unwrap_or(me),
                ours: tag,
                theirs,
            });
        }
        let mut out = Vec::with_capacity(n as usize);
        for r in 0..n {
            if r == rank {
                out.push(blob.to_vec());
            } else {
                let p = g
                    .core
                    .xchg
                    .parts
                    .remove(&(id, seq, r))
                    .expect("complete parts are present");
                out.push(p.buf);
            }
        }
        // A handler's panic caught meanwhile ends the call once the exchange is whole
        // (so the team's sequence stays in step with the other members').
        g.rethrow();
        Ok(out)
    }
}
