//! Teams: ordered sets of endpoints with their own collective sequence numbers and
//! optional scratch space.

use gex_core::{EpAddr, Rank};
use gex_sync::atomic::{AtomicU32, Ordering};
use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::sync::{Arc, Mutex};

/// Where a new team's scratch space comes from (per member, in its segment).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Scratch {
    /// No scratch space.
    #[default]
    None,
    /// This client-given range of the member's segment: `(offset, len)` in bytes.
    Given(usize, usize),
    /// Allocate this many bytes from the scratch region configured with
    /// [`CollEp::set_scratch_region`](crate::CollEp::set_scratch_region); freed by
    /// [`CollEp::destroy_team`](crate::CollEp::destroy_team).
    Alloc(usize),
}

/// An ordered set of endpoints that run collectives together.
///
/// Cheap to clone (shared). Every member must start the collectives of a team in the
/// same order: each collective takes the team's next sequence number, and messages
/// carry (team id, sequence number), so collectives in flight at once on one or many
/// teams never mix.
#[derive(Clone)]
pub struct Team {
    pub(crate) inner: Arc<TeamInner>,
}

pub(crate) struct TeamInner {
    pub(crate) id: u64,
    pub(crate) members: Vec<EpAddr>,
    pub(crate) me: u32,
    pub(crate) seq: AtomicU32,
    pub(crate) splits: AtomicU32,
    pub(crate) creates: Mutex<HashMap<u64, u32>>,
    /// Per member: (offset, len) of its scratch space.
    pub(crate) scratch: Vec<(usize, usize)>,
    /// The range this endpoint allocated for the team (freed on destroy).
    pub(crate) allocated: Option<Range<usize>>,
    /// The team's shared-memory channel, if it has one.
    pub(crate) shm: Option<crate::shm::ShmTeam>,
    /// Sub-teams of a team spanning hosts (set once, at creation).
    pub(crate) hier: std::sync::OnceLock<crate::hier::Hier>,
}

impl fmt::Debug for Team {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Team")
            .field("id", &format_args!("{:#x}", self.inner.id))
            .field("size", &self.size())
            .field("rank", &self.rank())
            .finish()
    }
}

impl PartialEq for Team {
    fn eq(&self, o: &Team) -> bool {
        self.inner.id == o.inner.id
    }
}

impl Team {
    pub(crate) fn new(
        id: u64,
        members: Vec<EpAddr>,
        me: u32,
        scratch: Vec<(usize, usize)>,
        allocated: Option<Range<usize>>,
        shm: Option<crate::shm::ShmTeam>,
    ) -> Team {
        Team {
            inner: Arc::new(TeamInner {
                id,
                members,
                me,
                seq: AtomicU32::new(0),
                splits: AtomicU32::new(0),
                creates: Mutex::new(HashMap::new()),
                scratch,
                allocated,
                shm,
                hier: std::sync::OnceLock::new(),
            }),
        }
    }

    /// The team's job-wide identifier (0 for the world team).
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// Number of members.
    pub fn size(&self) -> u32 {
        self.inner.members.len() as u32
    }

    /// The calling member's team rank.
    pub fn rank(&self) -> u32 {
        self.inner.me
    }

    /// Members (endpoints) in team-rank order.
    pub fn members(&self) -> &[EpAddr] {
        &self.inner.members
    }

    /// The endpoint of team rank `i`.
    pub fn member(&self, i: u32) -> Option<EpAddr> {
        self.inner.members.get(i as usize).copied()
    }

    /// The job rank of team rank `i`.
    pub fn job_rank(&self, i: u32) -> Option<Rank> {
        self.member(i).map(|a| a.rank)
    }

    /// The team rank of endpoint `addr`, if it is a member.
    pub fn rank_of(&self, addr: EpAddr) -> Option<u32> {
        self.inner
            .members
            .iter()
            .position(|m| *m == addr)
            .map(|i| i as u32)
    }

    /// The team rank of the member on job rank `rank` (first one, if a rank has
    /// several endpoints in the team).
    pub fn rank_of_job_rank(&self, rank: Rank) -> Option<u32> {
        self.inner
            .members
            .iter()
            .position(|m| m.rank == rank)
            .map(|i| i as u32)
    }

    /// Scratch space of every member: `(offset, len)` in its segment (empty if the team
    /// has none).
    pub fn scratch(&self) -> &[(usize, usize)] {
        &self.inner.scratch
    }

    pub(crate) fn next_seq(&self) -> u32 {
        self.inner.seq.fetch_add(1, Ordering::Relaxed)
    }
}

/// A 64-bit mix (splitmix64 finaliser).
pub(crate) fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

pub(crate) fn mix_all(parts: &[u64]) -> u64 {
    let mut h = 0x6a09_e667_f3bc_c908u64;
    for p in parts {
        h = mix(h ^ p.wrapping_add(0x9e37_79b9_7f4a_7c15));
    }
    // 0 is the world team.
    h.max(1)
}

/// First-fit allocator over the scratch region of the segment.
#[derive(Debug, Default)]
pub(crate) struct SegAlloc {
    free: Vec<Range<usize>>,
}

impl SegAlloc {
    pub(crate) fn new(region: Range<usize>) -> SegAlloc {
        SegAlloc {
            free: if region.is_empty() {
                vec![]
            } else {
                vec![region]
            },
        }
    }

    pub(crate) fn alloc(&mut self, len: usize) -> Option<Range<usize>> {
        let len = len.max(1).div_ceil(64) * 64;
        let i = self.free.iter().position(|r| r.len() >= len)?;
        let r = self.free[i].clone();
        let out = r.start..r.start + len;
        if r.len() == len {
            self.free.remove(i);
        } else {
            self.free[i] = out.end..r.end;
        }
        Some(out)
    }

    pub(crate) fn release(&mut self, r: Range<usize>) {
        self.free.push(r);
        self.free.sort_by_key(|r| r.start);
        let mut merged: Vec<Range<usize>> = Vec::with_capacity(self.free.len());
        for r in self.free.drain(..) {
            match merged.last_mut() {
                Some(l) if l.end == r.start => l.end = r.end,
                _ => merged.push(r),
            }
        }
        self.free = merged;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_release_merge() {
        let mut a = SegAlloc::new(0..1024);
        let x = a.alloc(100).unwrap();
        let y = a.alloc(500).unwrap();
        assert_eq!(x, 0..128);
        assert_eq!(y, 128..640);
        assert!(a.alloc(600).is_none());
        a.release(x);
        a.release(y);
        assert_eq!(a.alloc(1024), Some(0..1024));
    }

    #[test]
    fn ids_differ() {
        assert_ne!(mix_all(&[0, 0, 1]), mix_all(&[0, 0, 2]));
        assert_ne!(mix_all(&[0, 1, 1]), 0);
    }
}
