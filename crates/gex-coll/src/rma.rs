//! TEMPORARY stand-in for the parts of gex-rma's layer that gex-coll uses, until the
//! `rma-layer` branch lands (then this module re-exports gex-rma). Same shapes:
//! `GlobalPtr`, `RmaError`, the `Rma` layer and `Rma::try_get_owned`.
#![allow(unsafe_code, missing_docs, dead_code)]

use gex_core::event::Event;
use gex_core::layer::{Cx, Layer};
use gex_core::spi::Conduit;
use gex_core::{AmError, EpAddr, EpIndex, EventError, InitError, Rank};
use std::marker::PhantomData;
use thiserror::Error;

pub struct GlobalPtr<T> {
    pub rank: Rank,
    pub ep: EpIndex,
    pub offset: usize,
    _t: PhantomData<fn() -> T>,
}

impl<T> GlobalPtr<T> {
    pub const fn new(addr: EpAddr, offset: usize) -> Self {
        GlobalPtr {
            rank: addr.rank,
            ep: addr.ep,
            offset,
            _t: PhantomData,
        }
    }
    pub const fn addr(&self) -> EpAddr {
        EpAddr::new(self.rank, self.ep)
    }
    pub const fn byte_offset(&self) -> usize {
        self.offset
    }
    pub const fn cast<U>(self) -> GlobalPtr<U> {
        GlobalPtr {
            rank: self.rank,
            ep: self.ep,
            offset: self.offset,
            _t: PhantomData,
        }
    }
}
impl<T> Clone for GlobalPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for GlobalPtr<T> {}
impl<T> PartialEq for GlobalPtr<T> {
    fn eq(&self, o: &Self) -> bool {
        (self.rank, self.ep, self.offset) == (o.rank, o.ep, o.offset)
    }
}
impl<T> Eq for GlobalPtr<T> {}
impl<T> std::hash::Hash for GlobalPtr<T> {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        (self.rank, self.ep, self.offset).hash(h)
    }
}
impl<T> std::fmt::Debug for GlobalPtr<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "GlobalPtr(rank {} ep {} +{})",
            self.rank, self.ep, self.offset
        )
    }
}

#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RmaError {
    #[error(
        "remote range [{offset}, {offset}+{len}) is outside the {seg_len}-byte segment of {dst}"
    )]
    OutOfSegment {
        dst: EpAddr,
        offset: usize,
        len: usize,
        seg_len: usize,
    },
    #[error(transparent)]
    Am(#[from] AmError),
    #[error(transparent)]
    Event(#[from] EventError),
    #[error("shim: {0} is not mapped")]
    Unmapped(EpAddr),
}

#[derive(Debug, Default)]
pub struct Rma;

impl Layer for Rma {
    const NAME: &'static str = "rma";
    fn attach<C: Conduit>(_cx: &mut Cx<'_, C>) -> Result<Self, InitError> {
        Ok(Rma)
    }
}

impl Rma {
    pub fn try_get_owned<C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        mut dst: Vec<u8>,
        src: GlobalPtr<u8>,
    ) -> Result<Result<Event<Vec<u8>, RmaError>, Vec<u8>>, RmaError> {
        let Some((base, len)) = cx.peer_segment(src.addr()) else {
            return Err(RmaError::Unmapped(src.addr()));
        };
        if src.offset.checked_add(dst.len()).is_none_or(|e| e > len) {
            return Err(RmaError::OutOfSegment {
                dst: src.addr(),
                offset: src.offset,
                len: dst.len(),
                seg_len: len,
            });
        }
        // SAFETY: in bounds of the mapped segment (checked); atomic copies.
        unsafe { gex_sync::copy::atomic_read(base.as_ptr().add(src.offset), &mut dst) };
        Ok(Ok(cx.ready(Ok(dst))))
    }
}
