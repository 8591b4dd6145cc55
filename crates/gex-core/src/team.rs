//! Teams: ordered sets of endpoints that act together. One type for every layer.
//!
//! The core makes the primordial team of an endpoint ([`Endpoint::world`](crate::Endpoint::world):
//! the endpoints with its index on every rank, in rank order). Layers make others (the
//! collectives layer splits teams by colour and key) and attach their own per-team
//! state as an *extension* when they create one ([`Team::with_ext`], [`Team::ext`]).

use crate::types::{EpAddr, Rank};
use std::any::{Any, TypeId};
use std::sync::Arc;

/// An ordered set of endpoints (team ranks `0..size`), cheap to clone (shared).
///
/// ```
/// use gex_core::{EpAddr, Team};
/// let t = Team::new(7, vec![EpAddr::rank(2), EpAddr::rank(5)], 1);
/// assert_eq!((t.id(), t.size(), t.rank()), (7, 2, 1));
/// assert_eq!(t.rank_of(EpAddr::rank(2)), Some(0));
/// assert_eq!(t.me(), EpAddr::rank(5));
/// ```
#[derive(Clone)]
pub struct Team {
    inner: Arc<TeamInner>,
}

struct TeamInner {
    id: u64,
    members: Vec<EpAddr>,
    me: u32,
    /// The extension and its type (kept apart, so that [`Team::ext`] compares it
    /// without a call through the vtable: it runs on every collective call).
    ext: Option<(TypeId, Arc<dyn Any + Send + Sync>)>,
}

impl std::fmt::Debug for Team {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Team")
            .field("id", &format_args!("{:#x}", self.inner.id))
            .field("size", &self.size())
            .field("rank", &self.rank())
            .finish()
    }
}

impl PartialEq for Team {
    /// Teams are equal when they have the same id and members.
    fn eq(&self, o: &Team) -> bool {
        self.inner.id == o.inner.id && self.inner.members == o.inner.members
    }
}

impl Team {
    /// A team `id` of `members` (team-rank order) in which the caller is team rank
    /// `me`. Ids must be the same on every member and distinct between teams that
    /// exist at once (the primordial team has id 0).
    ///
    /// # Panics
    /// If `me` is not a team rank.
    pub fn new(id: u64, members: Vec<EpAddr>, me: u32) -> Team {
        Self::build(id, members, me, None)
    }

    /// As [`new`](Self::new), with a layer's per-team state attached.
    ///
    /// # Panics
    /// If `me` is not a team rank.
    pub fn with_ext(
        id: u64,
        members: Vec<EpAddr>,
        me: u32,
        ext: Arc<dyn Any + Send + Sync>,
    ) -> Team {
        Self::build(id, members, me, Some(ext))
    }

    fn build(
        id: u64,
        members: Vec<EpAddr>,
        me: u32,
        ext: Option<Arc<dyn Any + Send + Sync>>,
    ) -> Team {
        assert!(
            (me as usize) < members.len(),
            "team rank {me} is not in a team of {}",
            members.len()
        );
        Team {
            inner: Arc::new(TeamInner {
                id,
                members,
                me,
                // The value's type, not the `Arc`'s.
                ext: ext.map(|e| (Any::type_id(&*e), e)),
            }),
        }
    }

    /// The team's job-wide identifier (0 for a primordial team).
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
    /// The calling member's endpoint.
    pub fn me(&self) -> EpAddr {
        self.inner.members[self.inner.me as usize]
    }
    /// Members in team-rank order.
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
    /// The team rank of the first member on job rank `rank`.
    pub fn rank_of_job_rank(&self, rank: Rank) -> Option<u32> {
        self.inner
            .members
            .iter()
            .position(|m| m.rank == rank)
            .map(|i| i as u32)
    }
    /// The per-team state of type `X` a layer attached when it made the team.
    #[inline]
    pub fn ext<X: Any + Send + Sync>(&self) -> Option<&X> {
        let (t, e) = self.inner.ext.as_ref()?;
        if *t != TypeId::of::<X>() {
            return None;
        }
        #[allow(unsafe_code)]
        // SAFETY: `t` is the type id of the value `e` points to (taken from it when the
        // team was built, and neither changes since), and it is `X`'s: `e` points to an
        // `X` (what `downcast_ref` checks and casts the same way), alive while `self`
        // holds the `Arc`.
        Some(unsafe { &*Arc::as_ptr(e).cast::<X>() })
    }
    /// True if `self` and `other` are the same team value (not only equal).
    pub fn same(&self, other: &Team) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}
