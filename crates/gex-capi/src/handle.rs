//! The objects behind the C handles (`gex_client_t`, `gex_ep_t`, `gex_team_t`,
//! `gex_atomic_domain_t`; the events are in [`crate::event`]), and the rules of use
//! the ABI checks: one thread at a time per endpoint, no endpoint call from inside an
//! AM handler.

use crate::status::{Error, gex_status_t};
use gex_facade::Team;
use gex_sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::cell::Cell;
use std::sync::{Arc, Mutex, TryLockError};

/// A client: this process's rank of the job (`gex_client_init` .. `gex_client_finalize`).
#[derive(Debug)]
pub struct gex_client_t {
    magic: AtomicU64,
    /// The facade's client.
    pub client: gex_facade::Client,
    /// Endpoints open (their handles not closed yet).
    pub open: Arc<AtomicUsize>,
}

crate::ptr::magic!(gex_client_t, 0x6765_785f_636c_6e74, "client");

impl gex_client_t {
    /// A handle around `client`.
    pub fn new(client: gex_facade::Client) -> Self {
        gex_client_t {
            magic: AtomicU64::new(0),
            client,
            open: Arc::new(AtomicUsize::new(0)),
        }
    }
}

/// What an endpoint handle guards: the facade's endpoint, its world team, and the
/// implicit-event gets the C layer tracks itself.
#[derive(Debug)]
pub struct EpState {
    /// The endpoint.
    pub ep: gex_facade::OwnedEndpoint,
    /// Every rank's endpoint of the same index.
    pub world: Team,
    /// NBI gets (`gex_get_nbi` and the VIS gets' `_nbi` forms) not synced yet: each is
    /// a nonblocking get whose bytes go to the caller's buffer when `gex_nbi_sync`/`gex_nbi_test` completes it
    /// (gex-rma's own NBI gets land in a buffer they own, which C cannot name).
    pub nbi_gets: Vec<Box<dyn crate::event::Pending + Send>>,
}

/// An endpoint (`gex_ep_open` .. `gex_ep_close`).
#[derive(Debug)]
pub struct gex_ep_t {
    magic: AtomicU64,
    state: Mutex<EpState>,
    open: Arc<AtomicUsize>,
    /// This endpoint's index.
    pub index: u16,
    /// This endpoint's rank.
    pub rank: u32,
    /// Ranks in the job.
    pub size: u32,
}

crate::ptr::magic!(gex_ep_t, 0x6765_785f_6570_5f5f, "endpoint");

thread_local! {
    /// True while this thread runs a C AM handler.
    static IN_HANDLER: Cell<bool> = const { Cell::new(false) };
}

/// True while the calling thread runs a C AM handler.
pub fn in_handler() -> bool {
    IN_HANDLER.with(Cell::get)
}

/// Marks the calling thread as running a C AM handler until dropped (restoring what
/// it was: handlers do not nest on one thread, but the mark is restored all the same).
#[derive(Debug)]
pub struct HandlerMark {
    was: bool,
}

impl HandlerMark {
    /// Sets the mark.
    pub fn set() -> Self {
        HandlerMark {
            was: IN_HANDLER.with(|h| h.replace(true)),
        }
    }
}

impl Drop for HandlerMark {
    fn drop(&mut self) {
        IN_HANDLER.with(|h| h.set(self.was));
    }
}

impl gex_ep_t {
    /// A handle around endpoint `ep` of a client whose open-endpoint count is `open`
    /// (incremented here, decremented when the handle is dropped).
    pub fn new(ep: gex_facade::OwnedEndpoint, open: Arc<AtomicUsize>) -> Self {
        open.fetch_add(1, Ordering::AcqRel);
        let world = ep.world();
        gex_ep_t {
            magic: AtomicU64::new(0),
            index: ep.index(),
            rank: ep.rank(),
            size: ep.size(),
            state: Mutex::new(EpState {
                ep,
                world,
                nbi_gets: Vec::new(),
            }),
            open,
        }
    }

    /// Runs `f` on the endpoint, as the one thread inside it.
    ///
    /// # Errors
    /// `GEX_ERR_IN_HANDLER` from inside an AM handler; `GEX_ERR_BUSY` if another thread
    /// is inside a call on this endpoint; `GEX_ERR_PANIC` if an earlier call panicked
    /// inside it (its state may be inconsistent); else `f`'s.
    pub fn with<R>(&self, f: impl FnOnce(&mut EpState) -> Result<R, Error>) -> Result<R, Error> {
        if in_handler() {
            return Err(Error::new(
                gex_status_t::GEX_ERR_IN_HANDLER,
                "endpoint calls are not allowed inside an AM handler (only the token's reply)",
            ));
        }
        let mut g = match self.state.try_lock() {
            Ok(g) => g,
            Err(TryLockError::WouldBlock) => {
                return Err(Error::new(
                    gex_status_t::GEX_ERR_BUSY,
                    format!(
                        "another thread is inside a call on endpoint {} of rank {}",
                        self.index, self.rank
                    ),
                ));
            }
            Err(TryLockError::Poisoned(_)) => {
                return Err(Error::new(
                    gex_status_t::GEX_ERR_PANIC,
                    "an earlier call panicked inside this endpoint; it cannot be used",
                ));
            }
        };
        f(&mut g)
    }
}

impl Drop for gex_ep_t {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The RMA layer's atomic domain of one of the element types of the C ABI.
#[derive(Debug)]
#[allow(missing_docs)]
pub enum AnyDomain {
    U64(gex_facade::rma::AtomicDomain<u64>),
    I64(gex_facade::rma::AtomicDomain<i64>),
    U32(gex_facade::rma::AtomicDomain<u32>),
    I32(gex_facade::rma::AtomicDomain<i32>),
    F64(gex_facade::rma::AtomicDomain<f64>),
    F32(gex_facade::rma::AtomicDomain<f32>),
}

/// A domain of remote atomics on one element type over the members of a team
/// (`gex_atomic_domain_create` / `gex_atomic_domain_create_ex` ..
/// `gex_atomic_domain_free`).
#[derive(Debug)]
pub struct gex_atomic_domain_t {
    magic: AtomicU64,
    /// The RMA layer's domain.
    pub ad: AnyDomain,
    /// The index of the endpoints it was created on.
    pub index: u16,
}

crate::ptr::magic!(gex_atomic_domain_t, 0x6765_785f_6164_6f6d, "atomic domain");

impl gex_atomic_domain_t {
    /// A handle around `ad`, created on the endpoints of index `index`.
    pub fn new(ad: AnyDomain, index: u16) -> Self {
        gex_atomic_domain_t {
            magic: AtomicU64::new(0),
            ad,
            index,
        }
    }
}

/// A team: the endpoints of one index of some ranks, in team-rank order
/// (`gex_team_world` / `gex_team_split` .. `gex_team_free`).
#[derive(Debug)]
pub struct gex_team_t {
    magic: AtomicU64,
    /// The core's team.
    pub team: Team,
    /// True for the world team (not destroyed by `gex_team_free`).
    pub world: bool,
}

crate::ptr::magic!(gex_team_t, 0x6765_785f_7465_616d, "team");

impl gex_team_t {
    /// A handle around `team`.
    pub fn new(team: Team, world: bool) -> Self {
        gex_team_t {
            magic: AtomicU64::new(0),
            team,
            world,
        }
    }

    /// The team, checked to be one of endpoint `ep`'s (this rank's endpoint of its
    /// index is a member).
    ///
    /// # Errors
    /// `GEX_ERR_INVALID` for a team of another endpoint.
    pub fn of(&self, ep: &gex_ep_t) -> Result<&Team, Error> {
        let me = self.team.me();
        if me.rank != ep.rank || me.ep != ep.index {
            return Err(Error::invalid(format!(
                "the team belongs to endpoint {} of rank {}, not to endpoint {} of rank {}",
                me.ep, me.rank, ep.index, ep.rank
            )));
        }
        Ok(&self.team)
    }
}

// The C caller may use a client, an endpoint (one thread at a time, which
// `gex_ep_t::with` enforces) and an atomic domain from any thread, through shared
// references made from its pointers: each must be `Send + Sync`.
const _: () = {
    const fn shareable<T: Send + Sync>() {}
    shareable::<gex_client_t>();
    shareable::<gex_ep_t>();
    shareable::<gex_atomic_domain_t>();
    shareable::<gex_team_t>();
};
