//! [`ScopeRmaExt`], implemented for [`Scope`]: the operations that lend a buffer to
//! the transfer for the life of a [scope](gex_core::Endpoint::scope).
//!
//! # Safety
//! As [`crate::ext`]: a destination or source lent to a scope (`&'env mut`,
//! `&'env`) is tracked under the scope's tag, and the scope waits for it before the
//! borrow ends, also after a failure or a panic ([`end_scoped`]).
#![allow(unsafe_code)]

use crate::RmaError;
use crate::aop::{AtomicFlags, AtomicOp, AtomicReq, AtomicType};
use crate::atomic::{AtomicDomain, AtomicIssue, AtomicOut};
use crate::drive::{drive, end_scoped, raw};
use crate::engine::{GetTo, How, Xfer};
use crate::ext::{get_bytes, put_from_slow, vis_chunks};
use crate::ptr::{GlobalPtr, Vis};
use crate::state::Rma;
use crate::vis::Chunk;
use bytemuck::Pod;
use gex_core::event::finish_unit;
use gex_core::spi::Conduit;
use gex_core::{Endpoint, Scope};

/// Operations that lend a buffer to the transfer for the life of a
/// [scope](gex_core::Endpoint::scope): implemented for [`Scope`]; `use gex_rma::ScopeRmaExt;`.
///
/// Each starts the operation without waiting and tracks it under the scope's tag;
/// the scope returns only once every one has completed (on success, error and panic),
/// so the borrowed buffer is free again exactly when the borrow ends.
/// [`Scope::sync`] waits for them earlier. The buffer cannot be used inside the scope
/// after it was lent (the borrow checker refuses it).
///
/// ```
/// use gex_core::{boot::Singleton, loopback::Loopback, Blocking, ClientBuilder};
/// use gex_rma::{GlobalPtr, Rma, RmaError, RmaExt, ScopeRmaExt};
///
/// let client = ClientBuilder::new().layer::<Rma>().segment_size(4096)
///     .init::<Loopback>(Box::new(Singleton::new()))?;
/// let mut ep = client.endpoint(0)?;
/// let p = GlobalPtr::<u16>::new(ep.addr(), 0);
/// ep.put(p, &[1, 2, 3, 4, 5, 6], Blocking)?;
/// let (mut a, mut b) = ([0u16; 3], [0u16; 3]);
/// let src = [7u16; 2];
/// // The closure's error type is named once, on its return type (docs/rma.md, Scopes).
/// ep.scope(|s| -> Result<(), RmaError> {
///     s.get_into(&mut a, p)?;
///     s.get_into(&mut b, p.add(3))?;
///     s.put_from(p.add(6), &src)?;
///     Ok(())
/// })?;
/// assert_eq!((a, b), ([1, 2, 3], [4, 5, 6]));
/// assert_eq!(ep.get_val(p.add(7), Blocking)?, 7);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait ScopeRmaExt<'env, C: Conduit> {
    /// Gets `dst.len()` elements from `src` into `dst`, lent for the scope.
    ///
    /// # Errors
    /// As [`RmaExt::get`](crate::RmaExt::get) (nothing is started on a validation error).
    fn get_into<T: Pod>(&mut self, dst: &'env mut [T], src: GlobalPtr<T>) -> Result<(), RmaError>;

    /// VIS get into `dst`, lent for the scope.
    ///
    /// # Errors
    /// As [`RmaExt::get_vis`](crate::RmaExt::get_vis).
    fn get_vis_into<T: Pod>(&mut self, dst: &'env mut [T], src: Vis<'_, T>)
    -> Result<(), RmaError>;

    /// Puts `src`, lent for the scope: no copy is made (the network may read the
    /// buffer after the call returns, the bulk form of a put); complete at the target
    /// when the scope returns.
    ///
    /// # Errors
    /// As [`RmaExt::put`](crate::RmaExt::put).
    fn put_from<T: Pod>(&mut self, dst: GlobalPtr<T>, src: &'env [T]) -> Result<(), RmaError>;

    /// Fetching atomic (the fetching form of `op`, as
    /// [`RmaExt::fetch_atomic`](crate::RmaExt::fetch_atomic)) whose old value is stored into `dst`, lent for the
    /// scope.
    ///
    /// # Errors
    /// As [`RmaExt::fetch_atomic`](crate::RmaExt::fetch_atomic).
    fn fetch_into<T: AtomicType>(
        &mut self,
        ad: &AtomicDomain<T>,
        p: GlobalPtr<T>,
        op: AtomicOp<T>,
        f: AtomicFlags,
        dst: &'env mut T,
    ) -> Result<(), RmaError>;
}

/// A get of transfer `x` into the `bytes` bytes at `p`, lent to the scope of `tag`:
/// tracked under the tag (also after a failure: [`end_scoped`] tracks what is in
/// flight), so the scope waits for it before the borrow ends.
///
/// # Safety
/// `p` is valid for writes of `bytes` bytes and lent to the scope of `tag`: nothing
/// else uses that memory until the scope has waited for its operations.
unsafe fn get_scoped<C: Conduit>(
    ep: &mut Endpoint<C>,
    tag: u32,
    x: Xfer<'_>,
    (p, bytes): (*mut u8, usize),
    check: impl Fn(&Rma) -> Result<(), RmaError>,
) -> Result<(), RmaError> {
    let to = GetTo::Ptr(p, bytes);
    // SAFETY: forwarded contract; the scope waits for the operation before it returns.
    let r = unsafe { get_bytes(ep, x, to, How::scoped(), (None, finish_unit), check, raw) }?;
    end_scoped(ep, tag, r)
}

impl<'env, C: Conduit> ScopeRmaExt<'env, C> for Scope<'_, 'env, C> {
    fn get_into<T: Pod>(&mut self, dst: &'env mut [T], src: GlobalPtr<T>) -> Result<(), RmaError> {
        let bytes = std::mem::size_of_val(dst);
        let p = dst.as_mut_ptr().cast::<u8>();
        let (a, off) = (src.addr(), src.offset);
        // The direct path to a cached mapping: complete now, nothing to track.
        if crate::state::fast(self, move |r| {
            // SAFETY: `dst` is borrowed for the scope and written only by the copy.
            unsafe { r.get_fast(a, off, p, bytes) }
        }) == Some(true)
        {
            return Ok(());
        }
        let tag = self.tag();
        let chunks = [Chunk::whole(off, bytes)];
        let x = Xfer::new(a, &chunks);
        // SAFETY: `dst` is borrowed for the scope of `tag`.
        unsafe { get_scoped(self, tag, x, (p, bytes), |r| r.t.check_range(a, off, bytes)) }
    }

    fn get_vis_into<T: Pod>(
        &mut self,
        dst: &'env mut [T],
        src: Vis<'_, T>,
    ) -> Result<(), RmaError> {
        let tag = self.tag();
        let bytes = std::mem::size_of_val(dst);
        let (a, chunks) = vis_chunks(self, &src, dst.len())?;
        let p = dst.as_mut_ptr().cast::<u8>();
        let x = Xfer::new(a, &chunks);
        // SAFETY: `dst` is borrowed for the scope of `tag`.
        unsafe { get_scoped(self, tag, x, (p, bytes), |_| Ok(())) }
    }

    #[inline(always)]
    fn put_from<T: Pod>(&mut self, dst: GlobalPtr<T>, src: &'env [T]) -> Result<(), RmaError> {
        let bytes: &[u8] = bytemuck::cast_slice(src);
        let (a, off) = (dst.addr(), dst.offset);
        // The direct path to a cached mapping: complete now, nothing to track.
        if crate::state::fast(self, move |r| r.put_fast(a, off, bytes)) == Some(true) {
            return Ok(());
        }
        let tag = self.tag();
        // SAFETY: `src` is lent for `'env`, which outlives the scope of `tag`.
        unsafe { put_from_slow(self, tag, a, off, bytes) }
    }

    fn fetch_into<T: AtomicType>(
        &mut self,
        ad: &AtomicDomain<T>,
        p: GlobalPtr<T>,
        op: AtomicOp<T>,
        f: AtomicFlags,
        dst: &'env mut T,
    ) -> Result<(), RmaError> {
        let tag = self.tag();
        let req = AtomicReq::new(p, op, true, f);
        let out = AtomicOut {
            result: Some(dst as *mut T),
            want: false,
            finish: finish_unit,
        };
        let r = drive(self, AtomicIssue::new(), |r, cx, st| {
            // SAFETY: `dst` is borrowed for the scope, which waits for the operation.
            let step = unsafe { r.atomic_step(cx, ad, req, How::scoped(), out, st) };
            raw(cx, step)
        })?;
        end_scoped(self, tag, r)
    }
}
