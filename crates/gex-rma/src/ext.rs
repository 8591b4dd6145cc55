//! The API: [`RmaExt`], implemented for [`Endpoint`], with one method per operation and
//! the completion mode as a parameter ([`Blocking`], [`Nb`], [`Nbi`]); [`ScopeRmaExt`],
//! implemented for [`Scope`], with the operations that lend a buffer to the transfer
//! for the life of the scope; and [`GetDst`], the destinations a get accepts in each
//! mode.
//!
//! Every operation takes the layer's state briefly ([`layer::state`],
//! [`layer::with`]), then waits, if it must, through the endpoint ([`layer::finish`],
//! [`layer::wait_until`], [`layer::retry`] under back-pressure), so that every layer's
//! handlers and progress hooks run meanwhile.
//! An operation complete during the call (the direct path) returns its output through
//! [`Cx::done`] without building an event.
//!
//! # Safety
//! The unsafe code hands raw destinations to the engine ([`crate::engine`]) under the
//! lifetime rule of [`crate::state`], which this module enforces with types:
//! - a borrowed destination (`&mut [T]`) is only accepted in blocking mode
//!   ([`GetDst`]), and a blocking call returns only after its operation completed, or,
//!   after a failure, after the units already in flight did; it waits through
//!   [`layer::finish`] in blocking mode, which waits on every path (a handler's panic
//!   is raised once the operation is complete; any other panic waits for it while it
//!   unwinds); before that, while it is being issued, a panic unwinding out of
//!   [`drive`] cancels it and waits for its native operations in flight;
//! - an owned `Vec<T>` moves into the operation's event (or, in NBI mode, its entry),
//!   which keeps its heap block alive until the operation is done with it;
//! - a destination lent to a scope (`&'env mut`) is tracked under the scope's tag, and
//!   the scope waits for it before the borrow ends, also after a failure or a panic.
#![allow(unsafe_code)]

use crate::RmaError;
use crate::aop::{AtomicFlags, AtomicOp, AtomicOps, AtomicReq, AtomicType, fetch_finish};
use crate::atomic::{AtomicDomain, AtomicIssue, AtomicOut, agree};
use crate::drive::{drive, end, end_scoped, fin, raw};
use crate::engine::{Fail, Fill, GetTo, How, Job, Step, Xfer};
use crate::nbi::NbiCategories;
use crate::ops::Handout;
use crate::ptr::{GlobalPtr, Strided, Vis};
use crate::state::Rma;
use crate::vis::Chunk;
use bytemuck::Pod;
use gex_core::event::{Data, Finish, finish_held, finish_unit};
use gex_core::layer::{self, Cx};
use gex_core::spi::Conduit;
use gex_core::{Blocking, Endpoint, EpAddr, Mode, ModeKind, Team};

/// The [`Endpoint::exchange_tagged`] tag of atomic-domain agreement ("rmaD").
const ATOMIC_DOMAIN_TAG: u32 = 0x726d_6144;

/// A contiguous put past its fastest path (the mapping not cached yet, or no mapping).
#[inline(never)]
fn put_slow<C: Conduit, M: Mode>(
    ep: &mut Endpoint<C>,
    a: EpAddr,
    off: usize,
    bytes: &[u8],
) -> Result<M::Out<(), RmaError>, RmaError> {
    // The direct path: a bounds check and a copy, no event.
    if let Some(Some(out)) = crate::state::with(ep, |r, cx| {
        r.put_now(cx, a, off, bytes)
            .then(|| cx.done::<(), RmaError, M>(()))
    }) {
        return Ok(out);
    }
    let r = put_contiguous(ep, a, off, bytes, How::new(M::KIND), fin::<C, (), M>)?;
    end::<C, (), M>(ep, r, M::KIND == ModeKind::Blocking)
}

/// [`put_bytes`] of `bytes` to one checked range at `off` of `a`.
fn put_contiguous<C: Conduit, X>(
    ep: &mut Endpoint<C>,
    a: EpAddr,
    off: usize,
    bytes: &[u8],
    how: How,
    conv: impl Fn(&Cx<'_, C>, Result<Step<()>, Fail<()>>) -> Option<X>,
) -> Result<X, RmaError> {
    let chunks = [Chunk::whole(off, bytes.len())];
    put_bytes(
        ep,
        a,
        &chunks,
        bytes,
        how,
        |r| r.t.check_range(a, off, bytes.len()),
        conv,
    )
}

/// A scoped put past its fastest path: tracked under the scope's `tag`.
///
/// # Safety
/// `bytes` stays borrowed (unwritten, alive) until the scope of `tag` has waited for
/// its operations: a source lent to the scope ([`ScopeRmaExt::put_from`]).
#[inline(never)]
pub(crate) unsafe fn put_from_slow<C: Conduit>(
    ep: &mut Endpoint<C>,
    tag: u32,
    a: EpAddr,
    off: usize,
    bytes: &[u8],
) -> Result<(), RmaError> {
    let r = put_contiguous(ep, a, off, bytes, How::scoped(), raw)?;
    end_scoped(ep, tag, r)
}

/// An atomic past its direct path (AM, native, or a mapping not cached yet): steps
/// under back-pressure, then ends as mode `M` asks. `want`: the old value is wanted.
#[inline(never)]
fn atomic_slow<C: Conduit, T: AtomicType, M: Mode, O: Send + 'static>(
    ep: &mut Endpoint<C>,
    ad: &AtomicDomain<T>,
    req: AtomicReq<T>,
    want: bool,
    finish: Finish<O>,
) -> Result<M::Out<O, RmaError>, RmaError> {
    let how = How::new(M::KIND);
    let out = AtomicOut {
        result: None,
        want,
        finish,
    };
    let r = drive(ep, AtomicIssue::new(), |r, cx, st| {
        // SAFETY: no result location (a fetched value comes with the completion).
        let step = unsafe { r.atomic_step(cx, ad, req, how, out, st) };
        fin::<C, O, M>(cx, step)
    })?;
    end::<C, O, M>(ep, r, false)
}

/// A put of validated-on-first-step `chunks` of `bytes` to `dst`; `conv` turns the
/// final step into the caller's result (inside the layer's closure).
#[inline(always)]
fn put_bytes<C: Conduit, X>(
    ep: &mut Endpoint<C>,
    dst: EpAddr,
    chunks: &[Chunk],
    bytes: &[u8],
    how: How,
    check: impl Fn(&Rma) -> Result<(), RmaError>,
    conv: impl Fn(&Cx<'_, C>, Result<Step<()>, Fail<()>>) -> Option<X>,
) -> Result<X, RmaError> {
    let mut ev = None;
    drive(ep, None::<Job>, |r, cx, job| {
        if job.is_none() {
            if let Err(e) = check(r) {
                return conv(cx, Err(Fail::from(e)));
            }
        }
        let s = r.put_step(cx, Xfer { peer: dst, chunks }, bytes, how, job, &mut ev);
        conv(cx, s)
    })
}

/// A get of transfer `x` into `to`; the output is `finish` of `hold` (`made`);
/// `conv` as for [`put_bytes`].
///
/// # Safety
/// A [`GetTo::Ptr`] destination is writable for its length and untouched by anyone
/// else until the operation completes (the callers: a blocking call waits, an owned
/// buffer moves into the event, a scoped borrow lasts until the scope's end).
#[inline(always)]
pub(crate) unsafe fn get_bytes<C: Conduit, O: Send + 'static, X>(
    ep: &mut Endpoint<C>,
    x: Xfer<'_>,
    to: GetTo,
    how: How,
    (hold, finish): (Option<O>, Finish<O>),
    check: impl Fn(&Rma) -> Result<(), RmaError>,
    conv: impl Fn(&Cx<'_, C>, Result<Step<O>, Fail<O>>) -> Option<X>,
) -> Result<X, RmaError> {
    // `hold` (an owned destination) outlives `drive`, whose guard waits for what is
    // in flight before it is dropped, also while a panic unwinds.
    let (mut ev, mut hold) = (None, hold);
    drive(ep, None::<Job>, |r, cx, job| {
        if job.is_none() {
            if let Err(e) = check(r) {
                return conv(cx, Err(Fail::from(e)));
            }
        }
        let out = Handout {
            hold: &mut hold,
            finish,
            ev: &mut ev,
        };
        // SAFETY: forwarded contract.
        let s = unsafe { r.get_step(cx, x, to, how, job, out) };
        conv(cx, s)
    })
}

/// The validated chunks of a VIS transfer over a local buffer of `n` elements.
pub(crate) fn vis_chunks<C: Conduit, T>(
    ep: &mut Endpoint<C>,
    vis: &Vis<'_, T>,
    n: usize,
) -> Result<(EpAddr, Vec<Chunk>), RmaError> {
    crate::state::with(ep, |r, _| {
        crate::vis::chunks(vis, n, r.t.me, &|a| r.t.check_target(a))
    })
    .ok_or(RmaError::NoLayer)?
}

mod sealed {
    pub trait Sealed<T> {}
    impl<T> Sealed<T> for &mut [T] {}
    impl<T, const N: usize> Sealed<T> for &mut [T; N] {}
    impl<T> Sealed<T> for &mut Vec<T> {}
    impl<T> Sealed<T> for Vec<T> {}
    pub trait SealedMode {}
    impl SealedMode for gex_core::Blocking {}
}

/// The modes a borrowed get destination (`&mut [T]`, `&mut [T; N]`, `&mut Vec<T>`) may
/// use: [`Blocking`] only, since a nonblocking transfer could outlive the borrow. Sealed;
/// it exists so that the compiler says why when another mode is asked for.
#[diagnostic::on_unimplemented(
    message = "a borrowed destination (`&mut [T]`, `&mut [T; N]`, `&mut Vec<T>`) takes only `Blocking`, not `{Self}`: a nonblocking get could outlive the borrow",
    label = "this mode needs an owned destination",
    note = "pass an owned `Vec<T>` (its event gives it back), or lend the buffer to a nonblocking get inside `Endpoint::scope` (`ScopeRmaExt::get_into`)"
)]
pub trait BorrowedDstMode: Mode + sealed::SealedMode {}
impl BorrowedDstMode for Blocking {}

/// Where a get may write its elements in mode `M`, and what the get then returns.
/// Sealed. Implemented by
///
/// | destination | modes | returns |
/// |---|---|---|
/// | `&mut [T]`, `&mut [T; N]`, `&mut Vec<T>` (its current length) | [`Blocking`] only ([`BorrowedDstMode`]: another mode is a compile error saying why) | `()` |
/// | `Vec<T>` (owned; its length is the element count) | every mode | `M::Out<Vec<T>, RmaError>`: the filled vector ([`Blocking`]), an [`Event`](gex_core::Event) that gives it back ([`Nb`](gex_core::Nb)), nothing ([`Nbi`](gex_core::Nbi): kept alive until the sync) |
///
/// A borrowed destination with a nonblocking mode does not compile: the transfer could
/// outlive the borrow. Lend a buffer to a nonblocking get inside
/// [`Endpoint::scope`] instead ([`ScopeRmaExt::get_into`](crate::ScopeRmaExt::get_into)).
///
/// ```compile_fail
/// # use gex_core::{boot::Singleton, loopback::Loopback, ClientBuilder, Nb};
/// # use gex_rma::{GlobalPtr, Rma, RmaExt};
/// # let client = ClientBuilder::new().layer::<Rma>().init::<Loopback>(Box::new(Singleton::new())).unwrap();
/// # let mut ep = client.endpoint(0).unwrap();
/// let mut buf = [0u32; 4];
/// let ev = ep.get(&mut buf, GlobalPtr::<u32>::new(ep.addr(), 0), Nb); // does not compile
/// ```
pub trait GetDst<T: Pod + Send, M: Mode>: sealed::Sealed<T> {
    /// What the get returns.
    type Out;
    #[doc(hidden)]
    fn get_from<C: Conduit>(
        self,
        ep: &mut Endpoint<C>,
        src: Source<'_, T>,
    ) -> Result<Self::Out, RmaError>;
}

/// The remote side of a get (contiguous or VIS).
#[doc(hidden)]
#[derive(Debug)]
pub enum Source<'a, T> {
    /// `n` elements from a pointer (`n` given by the destination).
    Ptr(GlobalPtr<T>),
    /// A VIS description.
    Vis(Vis<'a, T>),
}

/// Chunks and a check for a get of `n` elements from `src`.
fn source_chunks<C: Conduit, T>(
    ep: &mut Endpoint<C>,
    src: &Source<'_, T>,
    n: usize,
) -> Result<(EpAddr, Vec<Chunk>, bool), RmaError> {
    match src {
        Source::Ptr(p) => {
            let len = n * std::mem::size_of::<T>();
            Ok((p.addr(), vec![Chunk::whole(p.offset, len)], true))
        }
        Source::Vis(v) => {
            let (a, c) = vis_chunks(ep, v, n)?;
            Ok((a, c, false))
        }
    }
}

/// A blocking get into a borrowed slice.
#[inline(always)]
fn get_borrowed<C: Conduit, T: Pod>(
    ep: &mut Endpoint<C>,
    dst: &mut [T],
    src: Source<'_, T>,
) -> Result<(), RmaError> {
    let n = dst.len();
    let bytes = std::mem::size_of_val(dst);
    let p = dst.as_mut_ptr().cast::<u8>();
    if let Source::Ptr(gp) = src {
        let (a, off) = (gp.addr(), gp.offset);
        // The direct path to a cached mapping: a bounds check and a copy, no event.
        if crate::state::fast(ep, move |r| {
            // SAFETY: `dst` is borrowed for the call and written only by the copy.
            unsafe { r.get_fast(a, off, p, bytes) }
        }) == Some(true)
        {
            return Ok(());
        }
        // SAFETY: `p` is `dst`'s, which is borrowed for the call.
        return unsafe { get_borrowed_slow(ep, a, off, p, bytes) };
    }
    // SAFETY: as above.
    unsafe { get_borrowed_rest(ep, p, bytes, n, src) }
}

/// [`get_borrowed`] past the fastest path, for a pointer source at `off` of `a`.
/// It takes the source's parts, not the [`Source`], so that the fast path keeps them
/// in registers: an enum passed to it was built on the stack on every call and read
/// back, which made each fast call wait for its own stores (and, when the stack
/// slot's page offset met the copy's destination, for the copy's).
///
/// # Safety
/// `p` is valid for writes of `bytes` bytes until this returns, and nothing else uses
/// that memory meanwhile.
#[inline(never)]
unsafe fn get_borrowed_slow<C: Conduit>(
    ep: &mut Endpoint<C>,
    a: EpAddr,
    off: usize,
    p: *mut u8,
    bytes: usize,
) -> Result<(), RmaError> {
    // The direct path: a bounds check and a copy, no event.
    // SAFETY: `p` is writable for `bytes` bytes and ours for the call (contract).
    if crate::state::with(ep, |r, cx| unsafe { r.get_now(cx, a, off, p, bytes) }) == Some(true) {
        return Ok(());
    }
    let chunks = [Chunk::whole(off, bytes)];
    // SAFETY: the contract.
    unsafe { get_blocking(ep, a, &chunks, p, bytes, |r| r.t.check_range(a, off, bytes)) }
}

/// [`get_borrowed`] from a non-pointer source.
///
/// # Safety
/// As [`get_borrowed_slow`].
#[inline(never)]
unsafe fn get_borrowed_rest<C: Conduit, T: Pod>(
    ep: &mut Endpoint<C>,
    p: *mut u8,
    bytes: usize,
    n: usize,
    src: Source<'_, T>,
) -> Result<(), RmaError> {
    let (a, chunks, _) = source_chunks(ep, &src, n)?;
    // SAFETY: the contract.
    unsafe { get_blocking(ep, a, &chunks, p, bytes, |_| Ok(())) }
}

/// The blocking get of `chunks` of `a` into `p` (`bytes` bytes), `check` on its first
/// step: the tail of [`get_borrowed_slow`] and [`get_borrowed_rest`].
///
/// # Safety
/// As [`get_borrowed_slow`].
#[inline(always)]
unsafe fn get_blocking<C: Conduit>(
    ep: &mut Endpoint<C>,
    a: EpAddr,
    chunks: &[Chunk],
    p: *mut u8,
    bytes: usize,
    check: impl Fn(&Rma) -> Result<(), RmaError>,
) -> Result<(), RmaError> {
    // SAFETY: `p` is ours until this returns (contract), and it returns only after the
    // operation completed (or, after a failure, its units in flight did: `end`).
    let r = unsafe {
        get_bytes(
            ep,
            Xfer { peer: a, chunks },
            GetTo::Ptr(p, bytes),
            How::new(ModeKind::Blocking),
            (None, finish_unit),
            check,
            fin::<C, (), Blocking>,
        )
    }?;
    end::<C, (), Blocking>(ep, r, true)
}

impl<T: Pod + Send, M: BorrowedDstMode> GetDst<T, M> for &mut [T] {
    type Out = ();
    #[inline(always)]
    fn get_from<C: Conduit>(
        self,
        ep: &mut Endpoint<C>,
        src: Source<'_, T>,
    ) -> Result<(), RmaError> {
        get_borrowed(ep, self, src)
    }
}

impl<T: Pod + Send, M: BorrowedDstMode, const N: usize> GetDst<T, M> for &mut [T; N] {
    type Out = ();
    fn get_from<C: Conduit>(
        self,
        ep: &mut Endpoint<C>,
        src: Source<'_, T>,
    ) -> Result<(), RmaError> {
        get_borrowed(ep, &mut self[..], src)
    }
}

impl<T: Pod + Send, M: BorrowedDstMode> GetDst<T, M> for &mut Vec<T> {
    type Out = ();
    fn get_from<C: Conduit>(
        self,
        ep: &mut Endpoint<C>,
        src: Source<'_, T>,
    ) -> Result<(), RmaError> {
        get_borrowed(ep, &mut self[..], src)
    }
}

impl<T: Pod + Send, M: Mode> GetDst<T, M> for Vec<T> {
    type Out = M::Out<Vec<T>, RmaError>;
    fn get_from<C: Conduit>(
        mut self,
        ep: &mut Endpoint<C>,
        src: Source<'_, T>,
    ) -> Result<Self::Out, RmaError> {
        let n = self.len();
        let bytes = std::mem::size_of_val(&self[..]);
        let p = self.as_mut_ptr().cast::<u8>();
        if let Source::Ptr(gp) = &src {
            // The direct path: a bounds check and a copy, no event.
            let (a, off) = (gp.addr(), gp.offset);
            let mut v = Some(self);
            let fast = crate::state::with(ep, |r, cx| {
                // SAFETY: the vector is ours for the call and written only by the copy.
                let now = unsafe { r.get_now(cx, a, off, p, bytes) };
                now.then(|| cx.done::<Vec<T>, RmaError, M>(v.take().unwrap_or_default()))
            });
            if let Some(Some(out)) = fast {
                return Ok(out);
            }
            self = v.take().unwrap_or_default();
        }
        let (a, chunks, contiguous) = source_chunks(ep, &src, n)?;
        let off = chunks.first().map_or(0, |c| c.remote);
        // SAFETY: the vector's heap block moves into the event (or, for NBI, the
        // operation's entry), which keeps it alive and untouched until the operation
        // is done with it, also if the event is dropped or leaked.
        let r = unsafe {
            get_bytes(
                ep,
                Xfer::new(a, &chunks),
                GetTo::Ptr(p, bytes),
                How::new(M::KIND),
                (Some(self), finish_held),
                |r| {
                    if contiguous {
                        r.t.check_range(a, off, bytes)
                    } else {
                        Ok(())
                    }
                },
                fin::<C, Vec<T>, M>,
            )
        }?;
        end::<C, Vec<T>, M>(ep, r, false)
    }
}

/// The output of a value get from its landed word.
fn val_finish<T: Pod + Send>(d: Data, _: Option<T>) -> T {
    let w = match d {
        Data::Word(w) => w,
        _ => 0,
    };
    let b = w.to_ne_bytes();
    bytemuck::pod_read_unaligned(&b[..std::mem::size_of::<T>()])
}

/// The shaped forms of [`RmaExt::put_vis`] and [`RmaExt::get_vis`] (provided methods):
/// each takes its parameters, then the mode, and forwards to `$fwd($args.., mode)`
/// with its [`Vis`]; their errors are those of `put_vis`.
macro_rules! vis_forms {
    () => {};
    ($(#[$doc:meta])* put fn $($rest:tt)*) => {
        vis_forms!(@fn [$(#[$doc])*] [T: Pod, M: Mode] [M::Out<(), RmaError>] $($rest)*);
    };
    ($(#[$doc:meta])* get fn $($rest:tt)*) => {
        vis_forms!(@fn [$(#[$doc])*] [T: Pod + Send, D: GetDst<T, M>, M: Mode] [D::Out] $($rest)*);
    };
    (@fn [$($doc:tt)*] [$($g:tt)*] [$($out:tt)*]
        $name:ident($($p:ident: $t:ty),*) => $fwd:ident($($arg:expr),*); $($rest:tt)*) => {
        $($doc)*
        ///
        /// # Errors
        /// As [`put_vis`](Self::put_vis).
        fn $name<$($g)*>(&mut self, $($p: $t,)* mode: M) -> Result<$($out)*, RmaError> {
            self.$fwd($($arg,)* mode)
        }
        vis_forms!($($rest)*);
    };
}

/// One-sided operations on an endpoint carrying the [`Rma`] layer: `use gex_rma::RmaExt;`
/// (the `gex` facade's prelude re-exports it).
///
/// Every operation takes a mode value and returns `M::Out<T, RmaError>`:
///
/// | mode | returns | completion |
/// |---|---|---|
/// | [`Blocking`] | `T` | complete on return (a put's bytes are at the target) |
/// | [`Nb`](gex_core::Nb) | [`Event<T, RmaError>`](gex_core::Event) | wait with [`Endpoint::wait`] (or test, `wait_all`, ...) |
/// | [`Nbi`](gex_core::Nbi) | `()` | [`sync_nbi`](Self::sync_nbi) of its category waits for it |
///
/// Sources (`&[T]`) may be reused as soon as a call returns, in every mode. Each
/// operation validates all its arguments before moving any byte
/// ([`RmaError::OutOfSegment`], ...). Direct-path operations (the target shares memory)
/// are complete on return in every mode.
///
/// ```
/// use gex_core::{boot::Singleton, loopback::Loopback, Blocking, ClientBuilder, Nb, Nbi};
/// use gex_rma::{GlobalPtr, NbiCategories, Rma, RmaExt, Strided, Vis};
///
/// let client = ClientBuilder::new().layer::<Rma>().segment_size(1 << 16)
///     .init::<Loopback>(Box::new(Singleton::new()))?;
/// let mut ep = client.endpoint(0)?;
/// let p = GlobalPtr::<u32>::new(ep.addr(), 64);
///
/// ep.put(p, &[1, 2, 3, 4], Blocking)?;
/// let mut back = [0u32; 4];
/// ep.get(&mut back, p, Blocking)?;
/// assert_eq!(back, [1, 2, 3, 4]);
///
/// // Nonblocking get into an owned buffer: the event gives it back.
/// let ev = ep.get(vec![0u32; 2], p.add(2), Nb)?;
/// assert_eq!(ep.wait(ev)?, [3, 4]);
///
/// // Implicit-event puts, completed by a sync of their category.
/// ep.put(p, &[9, 9], Nbi)?;
/// ep.put_val(p.add(2), 7, Nbi)?;
/// ep.sync_nbi(NbiCategories::PUTS)?;
/// assert_eq!(ep.get_val(p.add(2), Blocking)?, 7);
///
/// // A reflection: read the four values backwards.
/// let mut rev = [0u32; 4];
/// let shape = Strided { counts: &[4], remote_strides: &[-1], local_start: 0, local_strides: &[1] };
/// ep.get_strided(&mut rev, p.add(3), shape, Blocking)?;
/// assert_eq!(rev, [4, 7, 9, 9]);
///
/// // Out-of-segment accesses are errors, never stray writes.
/// assert!(ep.put_val(GlobalPtr::<u64>::new(ep.addr(), (1 << 16) - 4), 7, Blocking).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait RmaExt<C: Conduit> {
    /// Puts `src` at `dst..dst + src.len()`.
    ///
    /// # Errors
    /// [`RmaError::NoLayer`], [`RmaError::BadRank`], [`RmaError::BadEndpoint`],
    /// [`RmaError::OutOfSegment`], [`RmaError::Am`] (the conduit failed).
    fn put<T: Pod, M: Mode>(
        &mut self,
        dst: GlobalPtr<T>,
        src: &[T],
        mode: M,
    ) -> Result<M::Out<(), RmaError>, RmaError>;

    /// Puts one value of at most 8 bytes (a larger `T` does not compile).
    ///
    /// # Errors
    /// As [`put`](Self::put).
    fn put_val<T: Pod, M: Mode>(
        &mut self,
        dst: GlobalPtr<T>,
        v: T,
        mode: M,
    ) -> Result<M::Out<(), RmaError>, RmaError>;

    /// Gets `src..src + n` into `dst` (`n` elements: the destination's length); the
    /// destinations and what each mode returns are listed at [`GetDst`].
    ///
    /// # Errors
    /// As [`put`](Self::put).
    fn get<T: Pod + Send, D: GetDst<T, M>, M: Mode>(
        &mut self,
        dst: D,
        src: GlobalPtr<T>,
        mode: M,
    ) -> Result<D::Out, RmaError>;

    /// Gets one value of at most 8 bytes (a larger `T` does not compile).
    ///
    /// # Errors
    /// As [`put`](Self::put).
    fn get_val<T: Pod + Send, M: Mode>(
        &mut self,
        src: GlobalPtr<T>,
        mode: M,
    ) -> Result<M::Out<T, RmaError>, RmaError>;

    /// Sets `len` bytes at `dst` to `byte` (NBI: counted with the puts).
    ///
    /// # Errors
    /// As [`put`](Self::put).
    fn memset<M: Mode>(
        &mut self,
        dst: GlobalPtr<u8>,
        byte: u8,
        len: usize,
        mode: M,
    ) -> Result<M::Out<(), RmaError>, RmaError>;

    /// VIS put: the remote side is `dst` (strided, vector or indexed), the local side
    /// `src` (see [`Vis`]).
    ///
    /// # Errors
    /// As [`put`](Self::put), plus [`RmaError::LocalOutOfBounds`],
    /// [`RmaError::ShapeMismatch`], [`RmaError::MixedTargets`]; all checked before any
    /// byte moves.
    fn put_vis<T: Pod, M: Mode>(
        &mut self,
        dst: Vis<'_, T>,
        src: &[T],
        mode: M,
    ) -> Result<M::Out<(), RmaError>, RmaError>;

    /// VIS get into `dst` (destinations as for [`get`](Self::get)).
    ///
    /// # Errors
    /// As [`put_vis`](Self::put_vis).
    fn get_vis<T: Pod + Send, D: GetDst<T, M>, M: Mode>(
        &mut self,
        dst: D,
        src: Vis<'_, T>,
        mode: M,
    ) -> Result<D::Out, RmaError>;

    vis_forms! {
        /// Strided put (see [`Strided`]).
        put fn put_strided(dst: GlobalPtr<T>, src: &[T], shape: Strided<'_>)
            => put_vis(Vis::Strided { ptr: dst, shape }, src);
        /// Strided get (see [`Strided`]).
        get fn get_strided(dst: D, src: GlobalPtr<T>, shape: Strided<'_>)
            => get_vis(dst, Vis::Strided { ptr: src, shape });
        /// Vector put: pieces `(ptr, elements)`, taken from `src` in order.
        put fn put_vector(dst: &[(GlobalPtr<T>, usize)], src: &[T])
            => put_vis(Vis::Vector(dst), src);
        /// Vector get: pieces `(ptr, elements)`, stored into `dst` in order.
        get fn get_vector(dst: D, src: &[(GlobalPtr<T>, usize)])
            => get_vis(dst, Vis::Vector(src));
        /// Indexed put: `each` elements at every pointer, taken from `src` in order.
        put fn put_indexed(dst: &[GlobalPtr<T>], each: usize, src: &[T])
            => put_vis(Vis::Indexed { ptrs: dst, each }, src);
        /// Indexed get: `each` elements at every pointer, stored into `dst` in order.
        get fn get_indexed(dst: D, src: &[GlobalPtr<T>], each: usize)
            => get_vis(dst, Vis::Indexed { ptrs: src, each });
    }

    /// Creates an atomic domain for `T` with the operations `ops` on the members of
    /// `team` (see [`AtomicDomain`]).
    ///
    /// # Collective
    /// Every member of `team` calls it, in the same order as its other exchanges on
    /// the team. The members' types and op sets must be equal; NIC atomics are used only
    /// if every member's conduit offers the whole set, so every member decides alike.
    ///
    /// # Errors
    /// [`RmaError::BadOpSet`] if `T` is a float type and `ops` has bitwise operations;
    /// [`RmaError::DomainMismatch`] if members asked for different types or op sets
    /// (on every member); [`RmaError::Am`] if this endpoint is not a member of `team` or
    /// the exchange failed; [`RmaError::NoLayer`].
    fn atomic_domain<T: AtomicType>(
        &mut self,
        team: &Team,
        ops: AtomicOps,
    ) -> Result<AtomicDomain<T>, RmaError>;

    /// Atomic `op` (with its operands) of domain `ad` on the word at `p`, in its
    /// non-fetching form (see [`AtomicOp`]: `Get` and `Swap`, which only fetch, run
    /// with their old value discarded); the domain must allow
    /// [`op.flag()`](AtomicOp::flag). NBI: counted with the atomics.
    ///
    /// # Errors
    /// [`RmaError::OpNotInDomain`], [`RmaError::NotInTeam`], [`RmaError::Misaligned`],
    /// and as [`put`](Self::put); nothing is performed on error.
    fn atomic<T: AtomicType, M: Mode>(
        &mut self,
        ad: &AtomicDomain<T>,
        p: GlobalPtr<T>,
        op: AtomicOp<T>,
        f: AtomicFlags,
        mode: M,
    ) -> Result<M::Out<(), RmaError>, RmaError>;

    /// Fetching atomic: `op` in its fetching form (see [`AtomicOp`]: `Set` fetches as
    /// a swap); the domain must allow [`op.fetch_flag()`](AtomicOp::fetch_flag).
    /// Returns the word's value before `op` (in mode NBI the value is discarded: fetch
    /// into a buffer lent to a scope with [`ScopeRmaExt::fetch_into`](crate::ScopeRmaExt::fetch_into)).
    ///
    /// # Errors
    /// As [`atomic`](Self::atomic).
    fn fetch_atomic<T: AtomicType, M: Mode>(
        &mut self,
        ad: &AtomicDomain<T>,
        p: GlobalPtr<T>,
        op: AtomicOp<T>,
        f: AtomicFlags,
        mode: M,
    ) -> Result<M::Out<T, RmaError>, RmaError>;

    /// Waits for every implicit-event ([`Nbi`](gex_core::Nbi)) operation of the
    /// categories `cats` issued so far (puts: their bytes are at their targets; relaxed
    /// native puts are flushed first).
    ///
    /// # Errors
    /// [`RmaError::NoLayer`]; [`RmaError::Am`] if a flush failed in the conduit.
    fn sync_nbi(&mut self, cats: NbiCategories) -> Result<(), RmaError>;

    /// Polls once and reports whether every implicit-event operation of `cats` is
    /// complete (starting the flushes of relaxed puts if `cats` has puts).
    ///
    /// # Errors
    /// As [`sync_nbi`](Self::sync_nbi).
    fn test_nbi(&mut self, cats: NbiCategories) -> Result<bool, RmaError>;
}

impl<C: Conduit> RmaExt<C> for Endpoint<C> {
    #[inline(always)]
    fn put<T: Pod, M: Mode>(
        &mut self,
        dst: GlobalPtr<T>,
        src: &[T],
        _mode: M,
    ) -> Result<M::Out<(), RmaError>, RmaError> {
        let bytes: &[u8] = bytemuck::cast_slice(src);
        let (a, off) = (dst.addr(), dst.offset);
        // The direct path to a cached mapping: a bounds check and a copy, no event.
        if crate::state::fast(self, move |r| r.put_fast(a, off, bytes)) == Some(true) {
            return Ok(layer::done::<(), RmaError, M, C>(self, ()));
        }
        put_slow::<C, M>(self, a, off, bytes)
    }

    #[inline]
    fn put_val<T: Pod, M: Mode>(
        &mut self,
        dst: GlobalPtr<T>,
        v: T,
        mode: M,
    ) -> Result<M::Out<(), RmaError>, RmaError> {
        const {
            assert!(
                std::mem::size_of::<T>() <= 8,
                "put_val takes values of at most 8 bytes"
            )
        };
        self.put(dst, std::slice::from_ref(&v), mode)
    }

    #[inline(always)]
    fn get<T: Pod + Send, D: GetDst<T, M>, M: Mode>(
        &mut self,
        dst: D,
        src: GlobalPtr<T>,
        _mode: M,
    ) -> Result<D::Out, RmaError> {
        dst.get_from(self, Source::Ptr(src))
    }

    #[inline]
    fn get_val<T: Pod + Send, M: Mode>(
        &mut self,
        src: GlobalPtr<T>,
        _mode: M,
    ) -> Result<M::Out<T, RmaError>, RmaError> {
        const {
            assert!(
                std::mem::size_of::<T>() <= 8,
                "get_val takes values of at most 8 bytes"
            )
        };
        let n = std::mem::size_of::<T>();
        let (a, off) = (src.addr(), src.offset);
        // The direct path to a cached mapping: a bounds check and a copy, no event.
        let mut v = T::zeroed();
        let pv = (&raw mut v).cast::<u8>();
        // SAFETY: `pv` is a local of `n` bytes, written only by the copy.
        let now = crate::state::fast(self, move |r| unsafe { r.get_fast(a, off, pv, n) });
        if now == Some(true) {
            return Ok(layer::done::<T, RmaError, M, C>(self, v));
        }
        // The direct path: a bounds check and a copy, no event.
        let fast = crate::state::with(self, |r, cx| {
            let mut v = T::zeroed();
            // SAFETY: `v` is a local of `n` bytes.
            let now = unsafe { r.get_now(cx, a, off, (&raw mut v).cast(), n) };
            now.then(|| cx.done::<T, RmaError, M>(v))
        });
        if let Some(Some(out)) = fast {
            return Ok(out);
        }
        if M::KIND == ModeKind::Blocking {
            // Blocking: into a local, which outlives the wait (no landing word).
            let mut v = T::zeroed();
            get_borrowed(self, std::slice::from_mut(&mut v), Source::Ptr(src))?;
            return crate::state::with(self, |_, cx| cx.done::<T, RmaError, M>(v))
                .ok_or(RmaError::NoLayer);
        }
        let chunks = [Chunk::whole(off, n)];
        // SAFETY: a landed get writes only the word its entry owns.
        let r = unsafe {
            get_bytes(
                self,
                Xfer::new(a, &chunks),
                GetTo::Land(n),
                How::new(M::KIND),
                (None, val_finish::<T>),
                |r| r.t.check_range(a, off, n),
                fin::<C, T, M>,
            )
        }?;
        end::<C, T, M>(self, r, false)
    }

    fn memset<M: Mode>(
        &mut self,
        dst: GlobalPtr<u8>,
        byte: u8,
        len: usize,
        _mode: M,
    ) -> Result<M::Out<(), RmaError>, RmaError> {
        let (a, off) = (dst.addr(), dst.offset);
        let how = How::new(M::KIND);
        let mut ev = None;
        let r = drive(self, None::<Job>, |r, cx, job| {
            if job.is_none() {
                if let Err(e) = r.t.check_range(a, off, len) {
                    return fin::<C, (), M>(cx, Err(Fail::from(e)));
                }
            }
            let fill = Fill {
                dst: a,
                offset: off,
                byte,
                len,
            };
            let st = r.memset_step(cx, fill, how, job, &mut ev);
            fin::<C, (), M>(cx, st)
        })?;
        end::<C, (), M>(self, r, false)
    }

    fn put_vis<T: Pod, M: Mode>(
        &mut self,
        dst: Vis<'_, T>,
        src: &[T],
        _mode: M,
    ) -> Result<M::Out<(), RmaError>, RmaError> {
        let (a, chunks) = vis_chunks(self, &dst, src.len())?;
        let r = put_bytes(
            self,
            a,
            &chunks,
            bytemuck::cast_slice(src),
            How::new(M::KIND),
            |_| Ok(()),
            fin::<C, (), M>,
        )?;
        end::<C, (), M>(self, r, M::KIND == ModeKind::Blocking)
    }

    fn get_vis<T: Pod + Send, D: GetDst<T, M>, M: Mode>(
        &mut self,
        dst: D,
        src: Vis<'_, T>,
        _mode: M,
    ) -> Result<D::Out, RmaError> {
        dst.get_from(self, Source::Vis(src))
    }

    fn atomic_domain<T: AtomicType>(
        &mut self,
        team: &Team,
        ops: AtomicOps,
    ) -> Result<AtomicDomain<T>, RmaError> {
        let (blob, bad) = crate::state::with(self, |r, cx| r.domain_request::<C, T>(cx, ops))
            .ok_or(RmaError::NoLayer)?;
        // A tag of its own: a member at another collective call gets an error, not a
        // pairing with an unrelated exchange.
        let all = self.exchange_tagged(team, ATOMIC_DOMAIN_TAG, &blob)?;
        if let Some(e) = bad {
            return Err(e);
        }
        agree(team, ops, &all)
    }

    #[inline]
    fn atomic<T: AtomicType, M: Mode>(
        &mut self,
        ad: &AtomicDomain<T>,
        p: GlobalPtr<T>,
        op: AtomicOp<T>,
        f: AtomicFlags,
        _mode: M,
    ) -> Result<M::Out<(), RmaError>, RmaError> {
        let req = AtomicReq::new(p, op, false, f);
        // The direct path to a cached mapping: a CPU atomic, no event. (Through the
        // cache alone: the request is too large to pass to `state::fast`'s closure
        // without storing it on every call; with a progress thread the slow path
        // takes the direct path under the lock.)
        if crate::state::cached(self)
            .and_then(|r| r.atomic_fast(ad, &req))
            .is_some()
        {
            return Ok(layer::done::<(), RmaError, M, C>(self, ()));
        }
        atomic_slow::<C, T, M, ()>(self, ad, req, false, finish_unit)
    }

    #[inline]
    fn fetch_atomic<T: AtomicType, M: Mode>(
        &mut self,
        ad: &AtomicDomain<T>,
        p: GlobalPtr<T>,
        op: AtomicOp<T>,
        f: AtomicFlags,
        _mode: M,
    ) -> Result<M::Out<T, RmaError>, RmaError> {
        let req = AtomicReq::new(p, op, true, f);
        // The direct path to a cached mapping: a CPU atomic, no event (as in `atomic`).
        if let Some(old) = crate::state::cached(self).and_then(|r| r.atomic_fast(ad, &req)) {
            return Ok(layer::done::<T, RmaError, M, C>(self, T::from_bits(old)));
        }
        let want = M::KIND != ModeKind::Nbi;
        atomic_slow::<C, T, M, T>(self, ad, req, want, fetch_finish::<T>)
    }

    fn sync_nbi(&mut self, cats: NbiCategories) -> Result<(), RmaError> {
        if !layer::is_attached::<Rma, C>(self) {
            return Err(RmaError::NoLayer);
        }
        if cats.contains(NbiCategories::PUTS) {
            drive(self, (), |r, cx, ()| match r.flush_step(cx) {
                Ok(true) => Some(Ok(())),
                Ok(false) => None,
                Err(e) => Some(Err(e)),
            })??;
        }
        layer::wait_until::<Rma, C>(self, |r| r.nbi.quiet(cats, &r.ops.counted));
        Ok(())
    }

    fn test_nbi(&mut self, cats: NbiCategories) -> Result<bool, RmaError> {
        if cats.contains(NbiCategories::PUTS) {
            crate::state::with(self, |r, cx| r.flush_step(cx)).ok_or(RmaError::NoLayer)??;
        }
        self.poll();
        crate::state::with(self, |r, _| r.nbi.quiet(cats, &r.ops.counted)).ok_or(RmaError::NoLayer)
    }
}
