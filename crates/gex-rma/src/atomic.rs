//! Remote atomics: atomic domains over (team, type, op set), created collectively.
//!
//! An [`AtomicDomain<T>`] is created by every member of a [`Team`] with
//! [`RmaExt::atomic_domain`](crate::RmaExt::atomic_domain), naming the element type `T`
//! ([`AtomicType`]: `i32`, `u32`, `i64`, `u64`, `f32`, `f64`) and the operations it will
//! use ([`AtomicOps`]). Creation is collective: the members exchange their requests
//! ([`Endpoint::exchange`](gex_core::Endpoint::exchange)), every member's type and op
//! set must be equal ([`RmaError::DomainMismatch`] otherwise, on every member), and
//! the implementation is decided the same way on every member: NIC atomics only if
//! every member's conduit offers the whole op set for the type, CPU atomics otherwise.
//! So no two ranks can mix NIC and CPU atomics on the same words, which are not
//! coherent with each other.
//!
//! # Implementation
//! - **CPU**: an operation on a word the conduit maps here is a CPU atomic through the
//!   mapping (direct path); on other words a Short AM carries it to the target, whose
//!   handler performs the same CPU atomic on its own segment and replies (the old value
//!   for fetching operations, an acknowledgement otherwise). Both use the processor's
//!   atomics on the same memory, so they are coherent with each other.
//! - **NIC**: every operation, to any member including this one, goes through the
//!   conduit's [`native_atomic`](gex_core::spi::ConduitEp::native_atomic). Never when
//!   the AM path is forced (`--cfg gex_force_am_rma`, `GEX_RMA_PATH=am`).
//!
//! # Rules
//! - The target word must be naturally aligned ([`RmaError::Misaligned`]), inside the
//!   target's segment ([`RmaError::OutOfSegment`]) and on a member of the domain's team
//!   ([`RmaError::NotInTeam`]).
//! - Concurrent accesses to a word used by atomic operations should all be atomic
//!   operations (of domains of the same type): mixing them with put/get/memset on the
//!   same word at the same time gives unspecified values, as in GASNet-EX, and not
//!   undefined behaviour: CPU atomics are [`gex_sync::word`] operations, defined over
//!   bytes like the byte-wise copies of put and get, so the race is never mixed-size
//!   (on x86-64; elsewhere the standard atomics, see that module).
//! - Ordering: by default an operation is `Relaxed` (like GASNet-EX without flags).
//!   [`AtomicFlags::ACQUIRE`] and [`AtomicFlags::RELEASE`] give the operation acquire
//!   and/or release semantics at the target word (`Acquire`, `Release` or `AcqRel`; a
//!   `get` with `RELEASE` is preceded by a release fence, a `set` with `ACQUIRE` is
//!   followed by an acquire fence). Completion of the operation (blocking return, event,
//!   sync) orders it with respect to the initiator's later operations.
//! - Floats: add, sub, mult, min, max, inc and dec are compare-and-swap loops on the bit
//!   pattern; `cswap`/`fcswap` compare bit patterns (so `-0.0 != 0.0` and a NaN equals
//!   itself); min/max keep the old value unless the operand compares smaller/larger (so
//!   a NaN operand never wins). Bitwise operations exist only for integer types
//!   ([`RmaError::BadOpSet`] when a float domain asks for them).
//! - Integers wrap (two's complement) on add, sub, mult, inc and dec.
//!
//! # Safety
//! The unsafe code runs [`gex_sync::word`] operations on addresses inside a segment:
//! the local one (AM handler) or a peer's mapping (direct path). The address was checked
//! to be inside the segment and naturally aligned for the width; the segment stays
//! mapped for the life of the conduit, which the endpoint keeps alive; every
//! concurrent access to the word in this process is a word operation or a byte-wise
//! copy of `gex_sync::copy`. It also stores fetched values
//! into result locations under the rules of [`crate::state`] (a word the operation owns,
//! or a destination borrowed for a scope).
#![allow(unsafe_code)]

use crate::RmaError;
use crate::aop::*;
use crate::engine::{Fail, How, Step};
use crate::native::NativeStep;
use crate::nbi::Cat;
use crate::ops::Handout;
use crate::path::{OpKind, Path};
use crate::state::Rma;
use gex_core::event::{Data, Finish};
use gex_core::layer::Cx;
use gex_core::spi::{Conduit, ConduitEp, NativeAtomic};
use gex_core::{Am, Event, Team};
use std::marker::PhantomData;

/// An atomic domain: the element type `T`, the agreed set of operations and the team
/// whose members' segments its operations target, with the implementation (NIC or CPU)
/// every member agreed on. Made collectively by
/// [`RmaExt::atomic_domain`](crate::RmaExt::atomic_domain); a small descriptor that
/// operations borrow ([`RmaExt::atomic`](crate::RmaExt::atomic),
/// [`RmaExt::fetch_atomic`](crate::RmaExt::fetch_atomic)).
///
/// ```
/// use gex_core::{boot::Singleton, loopback::Loopback, Blocking, ClientBuilder};
/// use gex_rma::{AtomicFlags, AtomicOp, AtomicOps, GlobalPtr, Rma, RmaError, RmaExt};
///
/// let client = ClientBuilder::new().layer::<Rma>().segment_size(4096)
///     .init::<Loopback>(Box::new(Singleton::new()))?;
/// let mut ep = client.endpoint(0)?;
/// let world = ep.world();
/// let ad = ep.atomic_domain::<u64>(&world, AtomicOps::FADD | AtomicOps::FCSWAP | AtomicOps::GET)?;
/// let p = GlobalPtr::<u64>::new(ep.addr(), 64);
/// let f = AtomicFlags::empty();
/// assert_eq!(ep.fetch_atomic(&ad, p, AtomicOp::Add(5), f, Blocking)?, 0);
/// let swap = AtomicOp::CompareSwap { expected: 5, new: 9 };
/// assert_eq!(ep.fetch_atomic(&ad, p, swap, f, Blocking)?, 5);
/// assert_eq!(ep.fetch_atomic(&ad, p, AtomicOp::Get, f, Blocking)?, 9);
/// assert_eq!(
///     ep.atomic(&ad, p, AtomicOp::Max(1), f, Blocking),
///     Err(RmaError::OpNotInDomain { op: AtomicOps::MAX })
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct AtomicDomain<T> {
    ops: AtomicOps,
    /// Every operation goes through the conduit's NIC atomics.
    nic: bool,
    team: Team,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for AtomicDomain<T> {
    fn clone(&self) -> Self {
        AtomicDomain {
            ops: self.ops,
            nic: self.nic,
            team: self.team.clone(),
            _t: PhantomData,
        }
    }
}

impl<T: AtomicType> AtomicDomain<T> {
    /// The agreed op set.
    pub fn ops(&self) -> AtomicOps {
        self.ops
    }
    /// True if this domain performs every operation with the conduit's NIC atomics
    /// (agreed at creation: every member's conduit offers
    /// [`NATIVE_ATOMICS`](gex_core::Capabilities::NATIVE_ATOMICS) and every operation of
    /// the op set for this type); false: CPU atomics, directly or through AMs.
    pub fn is_native(&self) -> bool {
        self.nic
    }
    /// The team whose members' words the domain's operations target.
    pub fn team(&self) -> &Team {
        &self.team
    }
}

/// Length of the agreement blob: kind code, op set, NIC offer.
const AGREE_LEN: usize = 6;

impl Rma {
    /// This member's request for a domain of `T` with `ops`: the blob to exchange,
    /// and the error of an op set the type does not support (the blob is exchanged
    /// anyway, so the other members do not wait for this one).
    pub(crate) fn domain_request<C: Conduit, T: AtomicType>(
        &self,
        cx: &mut Cx<'_, C>,
        ops: AtomicOps,
    ) -> ([u8; AGREE_LEN], Option<RmaError>) {
        let bad = (T::KIND.is_float() && ops.intersects(AtomicOps::BITWISE)).then(|| {
            RmaError::BadOpSet {
                ops: ops & AtomicOps::BITWISE,
            }
        });
        let offers = self.t.caps.contains(gex_core::Capabilities::NATIVE_ATOMICS) && {
            let cep = cx.conduit();
            Code::ALL
                .iter()
                .filter(|op| ops.contains(op.flag()))
                .all(|op| {
                    let (base, fetch) = op.native();
                    cep.native_atomic_supported(T::KIND, base, fetch)
                })
        };
        let mut b = [0u8; AGREE_LEN];
        b[0] = T::KIND.code() as u8;
        b[1..5].copy_from_slice(&ops.bits().to_le_bytes());
        b[5] = u8::from(offers && bad.is_none());
        (b, bad)
    }
}

/// Decides a domain from every member's request (team-rank order): equal requests
/// give the domain (NIC only if every member offers it), different ones
/// [`RmaError::DomainMismatch`] naming the job ranks that differ from team rank 0.
pub(crate) fn agree<T: AtomicType>(
    team: &Team,
    ops: AtomicOps,
    all: &[Vec<u8>],
) -> Result<AtomicDomain<T>, RmaError> {
    let first = all.first().map(|b| b.get(..5)).unwrap_or(None);
    let ranks: Vec<u32> = all
        .iter()
        .enumerate()
        .filter(|(_, b)| b.len() != AGREE_LEN || b.get(..5) != first)
        .filter_map(|(i, _)| team.job_rank(i as u32))
        .collect();
    if !ranks.is_empty() {
        return Err(RmaError::DomainMismatch { ranks });
    }
    let nic = all.iter().all(|b| b[5] == 1);
    Ok(AtomicDomain {
        ops,
        nic,
        team: team.clone(),
        _t: PhantomData,
    })
}

impl<T: AtomicType> AtomicDomain<T> {
    /// True if `dst` is a member of the domain's team.
    #[inline(always)]
    fn has_member(&self, dst: gex_core::EpAddr) -> bool {
        if self.team.id() == 0 {
            dst.ep == self.team.me().ep
        } else {
            self.team.rank_of(dst).is_some()
        }
    }
}

/// Where the old value of an atomic goes: the event's output and a borrowed
/// destination.
#[derive(Debug)]
pub(crate) struct AtomicOut<T, O: Send + 'static> {
    /// A borrowed destination of the fetched value (scoped fetches), written at
    /// completion.
    pub(crate) result: Option<*mut T>,
    /// The event's output is made of the old value (`finish`): the target must send it.
    pub(crate) want: bool,
    /// Makes the output from the completion data.
    pub(crate) finish: Finish<O>,
}

impl<T, O: Send + 'static> Clone for AtomicOut<T, O> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T, O: Send + 'static> Copy for AtomicOut<T, O> {}

/// An atomic being issued: its entry in the op table once made, its event once the
/// completion is decided. The state [`drive`](crate::ext) advances.
#[derive(Debug)]
pub(crate) struct AtomicIssue<O: Send + 'static> {
    pub(crate) id: Option<u32>,
    pub(crate) ev: Option<Event<O, RmaError>>,
}

impl<O: Send + 'static> AtomicIssue<O> {
    pub(crate) fn new() -> Self {
        AtomicIssue { id: None, ev: None }
    }
}

impl Rma {
    /// The fastest path of an atomic, run under
    /// [`layer::state`](gex_core::layer::state): a
    /// CPU atomic in a domain that allows the operation, on an aligned word of a member
    /// whose segment mapping is cached, executes now and gives the old value's bits;
    /// anything else gives `None` and takes [`atomic_step`](Self::atomic_step), which
    /// reports any error.
    #[inline(always)]
    pub(crate) fn atomic_fast<T: AtomicType>(
        &self,
        ad: &AtomicDomain<T>,
        req: &AtomicReq<T>,
    ) -> Option<u64> {
        let size = std::mem::size_of::<T>();
        let p = req.ptr;
        let dst = p.addr();
        if ad.nic || !ad.ops.contains(req.code.flag()) || p.offset % size != 0 {
            return None;
        }
        if !ad.has_member(dst) {
            return None;
        }
        let at = self.t.direct_at(dst, p.offset, size)?;
        if at as usize % size != 0 {
            return None;
        }
        // SAFETY: inside the mapped segment and aligned (checked); every access to the
        // word is atomic (module rules).
        Some(unsafe { exec(at, T::KIND, req.code.base(), req.a, req.b, req.flags) })
    }

    /// The first step of an atomic: checks it, performs it now on the direct path
    /// (`Ok(Some(old))`), or makes its entry in the op table (`Ok(None)`, `st.id` set).
    ///
    /// # Safety
    /// `result`, if given, is writable for one `T` (module `# Safety`).
    unsafe fn atomic_start<C: Conduit, T: AtomicType>(
        &mut self,
        cx: &mut Cx<'_, C>,
        ad: &AtomicDomain<T>,
        req: &AtomicReq<T>,
        result: Option<*mut T>,
    ) -> Result<Result<u64, u32>, RmaError> {
        let size = std::mem::size_of::<T>();
        let (p, op) = (req.ptr, req.code);
        let dst = p.addr();
        if !ad.ops.contains(op.flag()) {
            return Err(RmaError::OpNotInDomain { op: op.flag() });
        }
        if !ad.has_member(dst) {
            return Err(RmaError::NotInTeam { dst });
        }
        self.t.check_range(dst, p.offset, size)?;
        let misaligned = RmaError::Misaligned {
            dst,
            offset: p.offset,
            align: size,
        };
        if p.offset % size != 0 {
            return Err(misaligned);
        }
        let base = self.t.mapping(cx, dst, p.offset + size)?;
        let path = self.t.path(
            OpKind::Atomic { nic: ad.nic },
            size,
            p.offset,
            1,
            base.is_some(),
        );
        if let (Path::Direct, Some(base)) = (path, base) {
            // SAFETY: the offset is inside the mapped segment (checked).
            let at = unsafe { base.as_ptr().add(p.offset) };
            if at as usize % size != 0 {
                return Err(misaligned);
            }
            // SAFETY: inside the mapped segment and aligned (checked); every access
            // to the word is atomic (module rules).
            let old = unsafe { exec(at, T::KIND, op.base(), req.a, req.b, req.flags) };
            if let Some(r) = result {
                // SAFETY: writable (contract).
                unsafe { r.write_unaligned(T::from_bits(old)) };
            }
            return Ok(Ok(old));
        }
        // A fetching NIC atomic always gets a word to land the old value in, also
        // when nobody wants it (`atomic` of a fetching form, `fetch_atomic` in mode
        // NBI): the conduit contract allows a null result only for an operation that
        // does not fetch (the NIC writes the old value through it).
        let land = if path == Path::Native && op.is_fetching() {
            Box::into_raw(Box::new(0u64))
        } else {
            std::ptr::null_mut()
        };
        let i = self
            .ops
            .new_op(dst, "atomic", std::ptr::null_mut(), 0, land);
        if let (Some(r), Some(e)) = (result, self.ops.get_mut(&i)) {
            e.result = Some((r.cast(), size));
        }
        Ok(Err(i))
    }

    /// Issues atomic `req` of entry `i`, on the NIC or as a Short AM: true once
    /// started, false under back-pressure. `fetching`: the target sends the old value
    /// back (AM path).
    fn atomic_issue<C: Conduit, T: AtomicType>(
        &mut self,
        cx: &mut Cx<'_, C>,
        nic: bool,
        req: &AtomicReq<T>,
        i: u32,
        fetching: bool,
    ) -> Result<bool, RmaError> {
        let (p, op, f) = (req.ptr, req.code, req.flags);
        let dst = p.addr();
        if nic && !self.t.force_am {
            let (base, fetch) = op.native();
            let na = NativeAtomic {
                dst,
                offset: p.offset,
                kind: T::KIND,
                base,
                fetch,
                a: req.a,
                b: req.b,
                acquire: f.contains(AtomicFlags::ACQUIRE),
                release: f.contains(AtomicFlags::RELEASE),
            };
            let land = self.ops.get(&i).map_or(std::ptr::null_mut(), |e| e.land);
            // SAFETY: the word was checked; `land` is owned by the entry until it
            // completes.
            return match unsafe { self.native_atomic(cx, i, &na, land) }? {
                NativeStep::Done => Ok(true),
                NativeStep::Blocked => Ok(false),
                NativeStep::Unsupported => Err(RmaError::Am(gex_core::AmError::Conduit(
                    gex_core::spi::ConduitError::Contract(format!(
                        "{}: native atomic {:?} on {:?} refused after being offered",
                        C::NAME,
                        na.base,
                        na.kind
                    )),
                ))),
            };
        }
        let code =
            op as u32 | (T::KIND.code() << 8) | (f.bits() << 16) | if fetching { WANT } else { 0 };
        // [op, code, offset, a, b]: the 64-bit words as (low, high) halves.
        let mut args = [i, code, 0, 0, 0, 0, 0, 0];
        for (k, w) in [p.offset as u64, req.a, req.b].into_iter().enumerate() {
            args[2 + 2 * k] = w as u32;
            args[3 + 2 * k] = (w >> 32) as u32;
        }
        let sent = crate::am::send_short(cx, dst, self.h.atomic, &args)?;
        if sent {
            self.ops.bump(i, 1);
        }
        Ok(sent)
    }

    /// One step of atomic `req` of domain `ad`; the old value goes to `out`.
    ///
    /// # Safety
    /// `out.result`, if given, is writable for one `T` and untouched by anyone else
    /// until the operation completes (module `# Safety`).
    pub(crate) unsafe fn atomic_step<C: Conduit, T: AtomicType, O: Send + 'static>(
        &mut self,
        cx: &mut Cx<'_, C>,
        ad: &AtomicDomain<T>,
        req: AtomicReq<T>,
        how: How,
        out: AtomicOut<T, O>,
        st: &mut AtomicIssue<O>,
    ) -> Result<Step<O>, Fail<O>> {
        let i = match st.id {
            Some(i) => i,
            // SAFETY: forwarded contract.
            None => match unsafe { self.atomic_start(cx, ad, &req, out.result) }? {
                Ok(old) => return Ok(Step::Now((out.finish)(Data::Word(old), None))),
                Err(i) => {
                    st.id = Some(i);
                    i
                }
            },
        };
        let fetching = req.code.is_fetching() && (out.want || out.result.is_some());
        match self.atomic_issue(cx, ad.nic, &req, i, fetching) {
            Ok(false) => Ok(Step::Blocked),
            Ok(true) => {
                let mut out = Handout {
                    hold: &mut None,
                    finish: out.finish,
                    ev: &mut st.ev,
                };
                if self.ops.get(&i).is_some_and(|e| e.remaining > 0) {
                    self.ops.open(cx, i, how.counted(Cat::Atomics), &mut out);
                }
                let d = match self.ops.seal(i) {
                    Some(w) => Data::Word(w),
                    None => Data::Unit,
                };
                Ok(out.step(d))
            }
            Err(err) => {
                // Nothing was started: a single unit failed to start.
                self.ops.remove(&i);
                Err(Fail { err, ev: None })
            }
        }
    }

    /// Atomic reply: `[op, old lo, old hi]`.
    pub(crate) fn on_atomic_reply(&mut self, am: &Am<'_>) {
        let a = am.args();
        let ok = a.len() >= 3
            && match self.ops.get_mut(&a[0]) {
                Some(e) if !e.abandoned => {
                    e.word = join64(a[1], a[2]);
                    true
                }
                _ => false,
            }
            && self.ops.credit(a[0], 1);
        if !ok {
            self.served.dropped += 1;
        }
    }
}
