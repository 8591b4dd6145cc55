//! Contexts: the lock-free mirror of each context's team ([`CTX_TEAMS`]) and the
//! contexts' own endpoints ([`Slot`]), whose puts, gets and quiet to PEs the conduit
//! does not map take no state lock.

use super::*;

/// How many context handles [`CTX_TEAMS`] mirrors.
const CTX_MIRROR: usize = 256;
/// The contexts of the first [`CTX_MIRROR`] handle indices, for lookups without the
/// lock: the team index + 1 of a live context, 0 otherwise. A copy of `State::ctxs`,
/// written under the lock by [`State::set_ctx`].
static CTX_TEAMS: [AtomicUsize; CTX_MIRROR] = [const { AtomicUsize::new(0) }; CTX_MIRROR];

/// A context's own endpoint (issue 27 point 2; docs/shmem.md, "Contexts"): slot `i`
/// belongs to context index `i` (for `i <` [`CTX_MIRROR`]). Its endpoint is made once
/// (by the first `shmem_ctx_create` that gets index `i` while some PE is reached
/// through an endpoint), under the state lock, and kept for the life of the process: a
/// destroyed context leaves it in the slot, and the next context given index `i` reuses
/// it (`shmem_ctx_create` prefers free indices whose slot has one). Its puts, gets and
/// quiet to PEs the conduit does not map go through it, to the target's endpoint 0
/// (which holds the symmetric heap), without the state lock.
pub(crate) struct Slot {
    ep: OnceLock<SlotEp>,
    /// The tag ([`thread_tag`]) of the thread owning the live private context of this
    /// slot, 0 when the context is not private (or none is live). Set from 0 only under
    /// `lock`; set back to 0 only by the owner (`shmem_ctx_destroy`).
    owner: AtomicUsize,
    /// An NBI put went through the endpoint since the context's last quiet.
    nbi: AtomicBool,
    /// Operations the endpoint carried (`gexshmem_ctx_endpoint`: the tests' proof that a
    /// context's operations went through its own endpoint).
    ops: AtomicU64,
    /// Held around every use of the endpoint by a context that is not private.
    lock: Mutex<()>,
}

/// A slot's endpoint and its index.
struct SlotEp {
    index: u16,
    ep: std::cell::UnsafeCell<CtxEp>,
}

/// What a context's operations through its endpoint use.
pub(crate) struct CtxEp {
    ep: OwnedEndpoint,
    /// The buffer of its gets (kept: no allocation once grown).
    buf: Vec<u8>,
    /// Per PE: this endpoint has reached its endpoint 0 ([`CtxEp::reach`]).
    reached: Vec<bool>,
}

impl CtxEp {
    /// Makes sure this endpoint has reached PE `pe`'s endpoint 0 once (a Short request
    /// to the PE's no-op handler, sent with `try_request` while serving endpoint 0
    /// between attempts). The first contact of an endpoint made at run time waits for
    /// the peer's endpoint 0 (ofi: the discovery of addresses and the provider's
    /// connection); a blocking gex operation would wait for it inside gex, polling
    /// only this endpoint, and when every thread of the peer PE waits so too, no one
    /// polls the peer's endpoint 0.
    fn reach(&mut self, pe: u32, hello: HandlerId) -> Result<(), ShmemError> {
        if self.reached.get(pe as usize).copied().unwrap_or(true) {
            return Ok(());
        }
        let mut spins = 0u32;
        while self
            .ep
            .try_request(EpAddr::new(pe, 0), hello, Body::short(&[]))?
            == Injected::WouldBlock
        {
            self.ep.poll();
            serve();
            spins += 1;
            if spins > 64 {
                std::thread::yield_now();
            }
        }
        self.reached[pe as usize] = true;
        Ok(())
    }

    /// Waits for `ev` on the context's endpoint while serving the PE's endpoint 0: a
    /// thread waiting here may be the only one of its PE in the library, and other PEs'
    /// requests to this PE's heap (gex-rma's AM path, ofi's discovery of this endpoint)
    /// are answered by endpoint 0 only when someone polls it.
    fn wait<T: Send + 'static>(&mut self, ev: Event<T, RmaError>) -> Result<T, ShmemError> {
        let mut spins = 0u32;
        while !self.ep.test(&ev).map_err(RmaError::from)? {
            serve();
            spins += 1;
            if spins > 64 {
                std::thread::yield_now();
            }
        }
        Ok(self.ep.wait(ev)?)
    }
}

// SAFETY: `ep` is reached only through `with_slot_ep`, which makes one `&mut` at a time:
// for a private context only the owner thread (`Slot::owner` equal to its tag, which
// only that thread sets back to 0), otherwise only a holder of `Slot::lock` that found
// `owner` 0 under it (and `owner` leaves 0 only under that lock). `OwnedEndpoint` is
// `Send`: using it from one thread at a time is what gex asks.
unsafe impl Sync for SlotEp {}

impl Slot {
    const fn new() -> Slot {
        Slot {
            ep: OnceLock::new(),
            owner: AtomicUsize::new(0),
            nbi: AtomicBool::new(false),
            ops: AtomicU64::new(0),
            lock: Mutex::new(()),
        }
    }
}

/// The context slots (see [`Slot`]).
static SLOTS: [Slot; CTX_MIRROR] = [const { Slot::new() }; CTX_MIRROR];

/// Runs `f` on the endpoint of context index `i` (see [`Slot`]): `None` when it has
/// none (the context rides the PE's endpoint).
fn with_slot_ep<R>(
    i: usize,
    f: impl FnOnce(&mut CtxEp, &Slot) -> Result<R, ShmemError>,
) -> Option<Result<R, ShmemError>> {
    let slot = SLOTS.get(i)?;
    let cell = slot.ep.get()?;
    let owner = slot.owner.load(Ordering::Acquire);
    if owner != 0 {
        if owner != thread_tag() {
            return Some(Err(ShmemError::Invalid(
                "a private context used by a thread that did not create it".into(),
            )));
        }
        // SAFETY: this thread owns the private context (`owner` is its tag, and only it
        // sets it back): no other `&mut` of the endpoint exists (`SlotEp`'s rule).
        return Some(f(unsafe { &mut *cell.ep.get() }, slot));
    }
    let _g = slot.lock.lock().unwrap_or_else(|p| p.into_inner());
    if slot.owner.load(Ordering::Acquire) != 0 {
        return Some(Err(ShmemError::BadCtx));
    }
    // SAFETY: `lock` is held and `owner` is 0 under it: the only `&mut` (`SlotEp`'s rule).
    Some(f(unsafe { &mut *cell.ep.get() }, slot))
}

/// One operation `f` on the `len` bytes at heap address `addr` of (world) PE `pe` (the
/// global pointer `f` gets) through context index `i`'s own endpoint, once `pe` is
/// reached, counted in the slot's operations when it succeeds; `None` as
/// [`with_slot_ep`], or when the range is not in the heap.
fn with_heap_op(
    i: usize,
    addr: usize,
    len: usize,
    pe: u32,
    f: impl FnOnce(&mut CtxEp, &Slot, GlobalPtr<u8>) -> Result<(), ShmemError>,
) -> Option<Result<(), ShmemError>> {
    let p = published()?;
    let g = p.remote_heap(addr, len, pe)?;
    with_slot_ep(i, |c, slot| {
        c.reach(pe, p.hello)?;
        f(c, slot, g)?;
        slot.ops.fetch_add(1, Ordering::Relaxed);
        Ok(())
    })
}

/// The put of `src` to heap address `dst` of (world) PE `pe` on context index `i`'s own
/// endpoint, to `pe`'s endpoint 0; `None`: the context has no endpoint, or `dst` is not
/// in the heap (the PE's path decides).
pub(crate) fn ctx_put(
    i: usize,
    dst: usize,
    src: &[u8],
    pe: u32,
    nbi: bool,
) -> Option<Result<(), ShmemError>> {
    with_heap_op(i, dst, src.len(), pe, |c, slot, g| {
        if nbi {
            c.ep.put(g, src, Nbi)?;
            slot.nbi.store(true, Ordering::Release);
        } else {
            let ev = c.ep.put(g, src, Nb)?;
            c.wait(ev)?;
        }
        Ok(())
    })
}

/// The get into `dst` from heap address `src` of `pe` on context index `i`'s own
/// endpoint, as [`ctx_put`].
pub(crate) fn ctx_get(
    i: usize,
    dst: &mut [u8],
    src: usize,
    pe: u32,
) -> Option<Result<(), ShmemError>> {
    with_heap_op(i, src, dst.len(), pe, |c, _, g| {
        let mut buf = std::mem::take(&mut c.buf);
        buf.clear();
        buf.resize(dst.len(), 0);
        let ev = c.ep.get(buf, g, Nb)?;
        let buf = c.wait(ev)?;
        dst.copy_from_slice(&buf);
        c.buf = buf;
        Ok(())
    })
}

/// Context index `i`'s quiet: its own endpoint's NBI puts (if it has one and issued
/// any), then what the PE's quiet completes (what the context sent through the PE's
/// endpoint: static data).
pub(crate) fn ctx_quiet(i: usize) -> Result<(), ShmemError> {
    if let Some(r) = with_slot_ep(i, |c, slot| {
        if slot.nbi.load(Ordering::Acquire) {
            slot.nbi.store(false, Ordering::Release);
            // As `CtxEp::wait`: serve endpoint 0 meanwhile.
            let mut spins = 0u32;
            while !c.ep.test_nbi(NbiCategories::ALL)? {
                serve();
                spins += 1;
                if spins > 64 {
                    std::thread::yield_now();
                }
            }
        }
        Ok(())
    }) {
        r?;
    }
    quiet()
}

/// `gexshmem_ctx_endpoint`: the index of context index `i`'s own endpoint (0: it has
/// none) and the operations it carried.
pub(crate) fn ctx_endpoint(i: usize) -> (u16, u64) {
    SLOTS.get(i).map_or((0, 0), |s| {
        (
            s.ep.get().map_or(0, |e| e.index),
            s.ops.load(Ordering::Relaxed),
        )
    })
}

/// What the mirror says of context index `i`: `Some(Some(team))` live, `Some(None)` not
/// live, `None` not mirrored (look in `State::ctxs`).
#[inline]
pub(crate) fn ctx_team(i: usize) -> Option<Option<usize>> {
    let v = CTX_TEAMS.get(i)?.load(Ordering::Acquire);
    Some(v.checked_sub(1))
}

/// The contexts of the state: made, ended and mirrored under the state lock.
impl State {
    /// Makes a context on team index `team` (private: only the calling thread uses
    /// it) and returns its index. A free index whose slot already has an endpoint is
    /// taken first (a destroyed context's endpoint is reused); else the first free index,
    /// whose slot gets a new endpoint when some PE is reached through an endpoint. When
    /// gex cannot make one (`EpError::Full` past `GEX_MAX_ENDPOINTS`, a conduit without
    /// endpoints made at run time, an index past the slots), the context rides the PE's
    /// endpoint: creation does not fail for it (docs/shmem.md, "Contexts").
    pub(crate) fn new_ctx(&mut self, team: usize, private: bool) -> Result<usize, ShmemError> {
        self.team(team)?;
        let n = self.ctxs.len();
        let reuse =
            (1..n.min(CTX_MIRROR)).find(|&j| self.ctxs[j].is_none() && SLOTS[j].ep.get().is_some());
        let i = reuse.unwrap_or_else(|| self.ctxs.iter().position(Option::is_none).unwrap_or(n));
        if let Some(slot) = SLOTS.get(i) {
            if slot.ep.get().is_none() && PE.get().is_some_and(|p| p.ctx_eps) {
                let made = self.client.as_ref().and_then(|c| c.create_endpoint().ok());
                // gex checks a request's handler against the sender's table too.
                let hello = PE.get().map(|p| p.hello);
                if let Some(mut ep) = made.filter(|_| hello.is_some()) {
                    if let Some(h) = hello {
                        ep.register_at(h.index(), |_t: &mut Token<'_>, _am: Am<'_>| {})?;
                    }
                    let index = ep.addr().ep;
                    let _ = slot.ep.set(SlotEp {
                        index,
                        ep: std::cell::UnsafeCell::new(CtxEp {
                            ep,
                            buf: Vec::new(),
                            reached: vec![false; self.npes as usize],
                        }),
                    });
                }
            }
            let _g = slot.lock.lock().unwrap_or_else(|p| p.into_inner());
            slot.nbi.store(false, Ordering::Release);
            slot.ops.store(0, Ordering::Relaxed);
            slot.owner
                .store(if private { thread_tag() } else { 0 }, Ordering::Release);
        }
        self.set_ctx(i, Some(team));
        Ok(i)
    }

    /// Ends context index `i` (not the default one): quiet, then not live; its slot's
    /// endpoint stays for the next context of that index. The caller quieted the
    /// context's own endpoint.
    pub(crate) fn end_ctx(&mut self, i: usize) -> Result<(), ShmemError> {
        if i == 0 {
            return Err(ShmemError::Invalid(
                "shmem_ctx_destroy of SHMEM_CTX_DEFAULT".into(),
            ));
        }
        if !matches!(self.ctxs.get(i), Some(Some(_))) {
            return Err(ShmemError::BadCtx);
        }
        let slot = SLOTS.get(i);
        if let Some(o) = slot.map(|s| s.owner.load(Ordering::Acquire)) {
            if o != 0 && o != thread_tag() {
                return Err(ShmemError::Invalid(
                    "a private context destroyed by a thread that did not create it".into(),
                ));
            }
        }
        self.quiet()?;
        self.set_ctx(i, None);
        if let Some(s) = slot {
            s.owner.store(0, Ordering::Release);
        }
        Ok(())
    }

    /// Sets context index `i` to live on team index `team` (or not live), in the table
    /// and its lock-free mirror.
    pub(crate) fn set_ctx(&mut self, i: usize, team: Option<usize>) {
        if self.ctxs.len() <= i {
            self.ctxs.resize(i + 1, None);
        }
        self.ctxs[i] = team;
        if let Some(m) = CTX_TEAMS.get(i) {
            m.store(team.map_or(0, |t| t + 1), Ordering::Release);
        }
    }
}
