//! What every descriptor of [`crate::desc`] holds ([`Spec`]): the operation, its
//! root, its data (owned, slices, in place or segment offsets), its reduction and
//! options, and the checks of its lengths. The calls of [`crate::calls`] run it.

use crate::error::CollError;
use crate::op::{Elem, OpKind, Opts, ReduceArg};
use crate::root::Root;
use crate::single::Single;

/// The data of a descriptor.
pub(crate) enum SpecData<'a, T> {
    Owned(Vec<T>),
    Slices(&'a [T], &'a mut [T]),
    InPlace(&'a mut [T]),
    Segments(Single),
}

/// What every descriptor holds.
pub(crate) struct Spec<'a, T> {
    pub(crate) kind: OpKind,
    pub(crate) root: Root,
    /// Elements per block when the data does not say (scatter, single mode).
    pub(crate) count: Option<usize>,
    pub(crate) data: SpecData<'a, T>,
    pub(crate) reduce: Option<ReduceArg<'a, T>>,
    pub(crate) opts: Opts<'a>,
}

impl<'a, T: Elem> Spec<'a, T> {
    pub(crate) fn new(
        kind: OpKind,
        root: Root,
        data: SpecData<'a, T>,
        reduce: Option<ReduceArg<'a, T>>,
    ) -> Self {
        Spec {
            kind,
            root,
            count: None,
            data,
            reduce,
            opts: Opts::default(),
        }
    }

    /// Checks the lengths of this member's buffers for a team of `p`, this member
    /// being `me`, with `count` elements per block.
    #[inline]
    pub(crate) fn check(
        &self,
        p: usize,
        me: u32,
        root: u32,
        count: usize,
    ) -> Result<(), CollError> {
        use OpKind::*;
        let is_root = me == root;
        let (kind, n) = (self.kind, count);
        let c = |what, expected: usize, got: usize| check_len(what, expected, got);
        match &self.data {
            SpecData::Owned(v) => match kind {
                Scatter if is_root => c("scatter input", p * n, v.len()),
                Exchange => c("exchange input", v.len().div_ceil(p) * p, v.len()),
                ReduceScatter => c("reduce_scatter input", v.len().div_ceil(p) * p, v.len()),
                _ => Ok(()),
            },
            SpecData::Slices(s, d) => match kind {
                Scatter if is_root => c("scatter input", p * d.len(), s.len()),
                Gather if is_root => c("gather output", s.len() * p, d.len()),
                GatherAll => c("gather_all output", s.len() * p, d.len()),
                Exchange => {
                    c("exchange input", s.len().div_ceil(p) * p, s.len())?;
                    c("exchange output", s.len(), d.len())
                }
                Reduce if is_root => c("reduce output", s.len(), d.len()),
                Allreduce | Scan => c("output", s.len(), d.len()),
                Exscan => c("exscan output", s.len(), d.len()),
                ReduceScatter => c("reduce_scatter input", d.len() * p, s.len()),
                _ => Ok(()),
            },
            SpecData::InPlace(_) | SpecData::Segments(_) => Ok(()),
        }
    }
}

impl<T> SpecData<'_, T> {
    /// (input, output) lengths as given.
    pub(crate) fn lens(&self) -> (usize, usize) {
        match self {
            SpecData::Owned(v) => (v.len(), 0),
            SpecData::Slices(s, d) => (s.len(), d.len()),
            SpecData::InPlace(b) => (b.len(), b.len()),
            SpecData::Segments(_) => (0, 0),
        }
    }
}

impl<T: Elem> SpecData<'_, T> {
    /// This member's input and output slices for `kind` (root `root`): a broadcast
    /// root's output is its input (empty output), members without input or output
    /// get empty ones, an allreduce in place reads a copy of its input (`tmp`).
    #[inline]
    pub(crate) fn io<'s>(
        &'s mut self,
        kind: OpKind,
        p: u32,
        me: u32,
        root: u32,
        tmp: &'s mut Vec<T>,
    ) -> (&'s [T], &'s mut [T]) {
        use OpKind::*;
        let is_root = me == root;
        match self {
            SpecData::InPlace(b) => match (kind, is_root) {
                (Broadcast, true) => (&b[..], &mut []),
                (Broadcast, false) => (&[], &mut b[..]),
                _ => {
                    // This member's contribution is combined in rank order with the
                    // others', so the input is kept apart.
                    tmp.clear();
                    tmp.extend_from_slice(b);
                    (&tmp[..], &mut b[..])
                }
            },
            SpecData::Slices(s, d) => {
                let (in_blocks, out_blocks) = kind.shape(p, me, root);
                let input: &[T] = if in_blocks == 0 { &[] } else { s };
                let out: &mut [T] = if out_blocks == 0 { &mut [] } else { d };
                (input, out)
            }
            SpecData::Owned(v) => (&v[..], &mut []),
            SpecData::Segments(_) => (&[], &mut []),
        }
    }

    /// Elements per block for `kind` on `p` members (`explicit` when given).
    #[inline]
    pub(crate) fn count(&self, kind: OpKind, p: usize, explicit: Option<usize>) -> usize {
        use OpKind::*;
        let (i, o) = self.lens();
        let p = p.max(1);
        match (self, kind) {
            (_, Scatter) => explicit.unwrap_or(o),
            (SpecData::Owned(_), Exchange | ReduceScatter) => i / p,
            (SpecData::Slices(..), Exchange) => i / p,
            (SpecData::Slices(..), ReduceScatter) => o,
            (SpecData::Segments(_), _) => explicit.unwrap_or(0),
            _ => explicit.unwrap_or(i),
        }
    }
}

fn check_len(what: &'static str, expected: usize, got: usize) -> Result<(), CollError> {
    if expected == got {
        Ok(())
    } else {
        Err(CollError::BadLength {
            what,
            expected,
            got,
        })
    }
}
