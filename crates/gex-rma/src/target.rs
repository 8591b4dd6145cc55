//! The targets of operations: which endpoints exist and how long their segments are
//! (the checks every operation runs first), and which segments the conduit maps here
//! (the direct path, cached per rank for the fast paths). Its own state, read by the
//! engine, the atomics and the API; it knows nothing of operations in flight.
//!
//! # Safety
//! The cached mappings in [`Targets::direct`] point at segments the conduit maps for
//! its whole life (the endpoint holds the conduit, and the layer holding this lives
//! inside the endpoint). They are handed out only for ranges checked against both the
//! published segment length and the mapped length ([`Targets::mapping`],
//! [`Targets::direct_at`]), and only the state's own endpoint's context fills them
//! (the core pairs them: `layer::with`, `Cx::with_other`).
#![allow(unsafe_code)]

use crate::RmaError;
use crate::path::{OpKind, Path, PathIn};
use gex_core::layer::Cx;
use gex_core::spi::Conduit;
use gex_core::{Capabilities, EpAddr};
use std::ptr::NonNull;

/// The targets of one endpoint's operations (see the module documentation).
#[derive(Debug)]
pub(crate) struct Targets {
    /// This endpoint.
    pub(crate) me: EpAddr,
    /// Ranks in the job.
    size: u32,
    /// Published segment length of every rank (each of its endpoints, made at init
    /// or at run time, has a segment of this length).
    seg_lens: Vec<usize>,
    /// Endpoint indices every rank may be addressed at (its capacity when the
    /// conduit makes endpoints at run time: [`Cx::endpoint_capacity`]); at or above,
    /// [`RmaError::BadEndpoint`].
    cap: Vec<u16>,
    /// Endpoints every rank made at init: indices at or above are endpoints made at
    /// run time, whose state is asked per operation ([`Targets::mapping`]) and whose
    /// mappings are never cached.
    init_eps: Vec<u16>,
    /// The conduit's capabilities (without the native ones when the AM path is forced).
    pub(crate) caps: Capabilities,
    /// The AM path is forced (`--cfg gex_force_am_rma` or `GEX_RMA_PATH=am`).
    pub(crate) force_am: bool,
    /// Per rank: the cached mapping of its endpoint with this endpoint's index and the
    /// length a range must stay within ([`Targets::mapping`] fills it, only for an
    /// endpoint that rank made at init; the fast paths' whole question in one entry,
    /// [`Targets::direct_at`]).
    direct: Vec<Direct>,
}

/// One rank's entry of [`Targets::direct`]: the conduit's answer about its segment, once
/// asked.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Direct {
    /// Base of the mapping (null: not mapped, or not asked yet).
    pub(crate) base: *mut u8,
    /// Bytes a direct range must stay within; 0 without a mapping.
    pub(crate) len: usize,
    /// The conduit was asked ([`ConduitEp::peer_segment`](gex_core::spi::ConduitEp::peer_segment)).
    pub(crate) asked: bool,
}

impl Direct {
    /// Not asked yet.
    pub(crate) const NONE: Direct = Direct {
        base: std::ptr::null_mut(),
        len: 0,
        asked: false,
    };
}

impl Targets {
    /// The targets of endpoint `me` in a job with these segment lengths, endpoint
    /// capacities and init endpoints (one entry per rank).
    pub(crate) fn new(
        me: EpAddr,
        size: u32,
        seg_lens: Vec<usize>,
        cap: Vec<u16>,
        init_eps: Vec<u16>,
        caps: Capabilities,
        force_am: bool,
    ) -> Self {
        Targets {
            me,
            size,
            direct: vec![Direct::NONE; size as usize],
            seg_lens,
            cap,
            init_eps,
            caps,
            force_am,
        }
    }

    /// Checks rank and endpoint index (below the rank's capacity); returns the
    /// target's segment length. Whether an endpoint made at run time is open is
    /// asked of the conduit when the operation starts ([`Targets::mapping`]).
    #[inline]
    pub(crate) fn check_target(&self, dst: EpAddr) -> Result<usize, RmaError> {
        if dst.rank >= self.size {
            return Err(RmaError::BadRank {
                rank: dst.rank,
                size: self.size,
            });
        }
        let r = dst.rank as usize;
        if dst.ep >= self.cap[r] {
            return Err(RmaError::BadEndpoint { dst });
        }
        Ok(self.seg_lens[r])
    }

    /// Checks that `[offset, offset + len)` lies in `dst`'s segment.
    #[inline]
    pub(crate) fn check_range(
        &self,
        dst: EpAddr,
        offset: usize,
        len: usize,
    ) -> Result<(), RmaError> {
        let seg_len = self.check_target(dst)?;
        if in_bounds(offset, len, seg_len) {
            Ok(())
        } else {
            Err(RmaError::OutOfSegment {
                dst,
                offset,
                len,
                seg_len,
            })
        }
    }

    /// True if (checked) `dst` is an endpoint its rank made at run time.
    #[inline(always)]
    pub(crate) fn made_at_run_time(&self, dst: EpAddr) -> bool {
        self.init_eps
            .get(dst.rank as usize)
            .is_none_or(|&e| dst.ep >= e)
    }

    /// The local mapping of (checked) `dst`'s segment if the bytes `0..end` of it lie
    /// within what is mapped here and within its published length (every remote range
    /// of the operation ends at or before `end`), unless the AM path is forced. `None`
    /// otherwise: the operation takes the native or AM path, so no direct copy ever
    /// passes the smaller of the two lengths (a conduit may map less than the layout
    /// says: `peer_segment`'s length is at most the layout's).
    ///
    /// Every operation asks it when it starts, so this is also where an endpoint made
    /// at run time is checked to be open (one question to the conduit per operation:
    /// its mapping is never cached, so a close is seen by the next operation).
    ///
    /// # Errors
    /// [`RmaError::NoEndpoint`] if `dst` is an endpoint made at run time that is not
    /// open (not created yet, or closed).
    #[inline]
    pub(crate) fn mapping<C: Conduit>(
        &mut self,
        cx: &Cx<'_, C>,
        dst: EpAddr,
        end: usize,
    ) -> Result<Option<NonNull<u8>>, RmaError> {
        let runtime = self.made_at_run_time(dst);
        if runtime {
            cx.peer_open(dst)?;
        }
        if self.force_am {
            return Ok(None);
        }
        let r = dst.rank as usize;
        let (base, len) = if dst.ep != self.me.ep || runtime {
            let (Some((p, len)), Some(&seg)) = (cx.peer_segment(dst), self.seg_lens.get(r)) else {
                return Ok(None);
            };
            (p.as_ptr(), len.min(seg))
        } else {
            if !self.direct[r].asked {
                // `dst` was checked (rank, endpoint); the range bound is the smaller
                // of the published and the mapped length.
                self.direct[r] = match cx.peer_segment(dst) {
                    Some((base, len)) => Direct {
                        base: base.as_ptr(),
                        len: len.min(self.seg_lens[r]),
                        asked: true,
                    },
                    None => Direct {
                        asked: true,
                        ..Direct::NONE
                    },
                };
            }
            (self.direct[r].base, self.direct[r].len)
        };
        if end > len {
            return Ok(None);
        }
        Ok(NonNull::new(base))
    }

    /// The address of `[offset, offset + len)` of `dst`'s segment if that range is on
    /// the direct path and its mapping is already cached (no conduit call): the whole
    /// check of the put, get and atomic fast paths, one entry loaded. Once the
    /// conduit was asked, an empty range at offset 0 passes whatever the mapping (its
    /// copy moves nothing; the target was checked when it was asked). `None` for
    /// anything else (not asked yet, never for an endpoint made at run time, not
    /// mapped, the AM path forced, a bad range: the slow path decides and reports
    /// errors).
    #[inline(always)]
    pub(crate) fn direct_at(&self, dst: EpAddr, offset: usize, len: usize) -> Option<*mut u8> {
        if dst.ep != self.me.ep {
            return None;
        }
        let d = self.direct.get(dst.rank as usize)?;
        let end = offset.checked_add(len)?;
        if end > d.len || !d.asked {
            return None;
        }
        // SAFETY: with `d.len > 0`, `d.base` is a cached mapping of `d.len` bytes
        // (`Direct`) and `end <= d.len` keeps the range inside it; with `d.len == 0`
        // (nothing mapped, `d.base` may be null), `offset == len == 0`: a zero offset
        // is always in bounds, and the caller's copy of `len` bytes moves none.
        Some(unsafe { d.base.add(offset) })
    }

    /// The path of an operation (see [`crate::path`]).
    #[inline]
    pub(crate) fn path(
        &self,
        op: OpKind,
        size: usize,
        offset: usize,
        pieces: usize,
        mapped: bool,
    ) -> Path {
        crate::path::select(PathIn {
            op,
            size,
            offset,
            pieces,
            mapped,
            caps: self.caps,
            force_am: self.force_am,
        })
    }
}

/// Whether `[off, off + len)` lies in a segment of `seg_len` bytes (an overflowing end
/// does not).
#[inline]
pub(crate) fn in_bounds(off: usize, len: usize, seg_len: usize) -> bool {
    off.checked_add(len).is_some_and(|e| e <= seg_len)
}
