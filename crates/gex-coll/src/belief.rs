//! The descriptor members of a collective compare ([`Desc`]) and its digest, the
//! collective's *belief* ([`crate::rootcheck`] checks them; [`crate::msg`] carries
//! them in probes).

use crate::error::{Disagreement, FIELDS, sync_code};
use crate::mix::mix_all;
use crate::op::{OpKind, SyncModes};

/// What members of a collective must pass alike, as four words: block bytes; the
/// operation, element type code, reduction code, sync modes and root (one word); the
/// element size; and a context (0 for a program's collective, a digest of the parent
/// collective for a stage of a hierarchical one). Fields that do not apply to the
/// operation (the root of an unrooted one, the operator of one that does not reduce)
/// are 0, so that members differing there agree.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Desc(pub(crate) [u64; 4]);

impl Desc {
    /// The descriptor of operation `kind` from `root` over elements of type code and
    /// size `(ty, elem)` ([`crate::op::elem_code`]), blocks of `bytes`, reduction code
    /// `red` ([`crate::op::reduce_name`]) and sync modes `sync`.
    #[inline(always)]
    pub(crate) fn new(
        kind: OpKind,
        root: u32,
        (ty, elem): (u8, usize),
        bytes: usize,
        red: u8,
        sync: SyncModes,
    ) -> Desc {
        let root = if kind.rooted() { root } else { 0 };
        let red = if kind.reduces() { red } else { 0 };
        let ty = if kind == OpKind::Barrier { 0 } else { ty };
        let sync = sync_code(sync.input) * 3 + sync_code(sync.output);
        let w1 = kind as u64
            | (u64::from(ty) << 8)
            | (u64::from(red) << 16)
            | (sync << 24)
            | (u64::from(root) << 32);
        Desc([bytes as u64, w1, elem as u64, 0])
    }

    /// The descriptor of a call of operation `kind` from `root` over `count` elements
    /// of `elem` bytes, with `(type, reduction)` codes `codes` and sync modes `sync` (as
    /// [`Desc::new`], blocks of `elem × count` bytes).
    #[inline(always)]
    pub(crate) fn of_call(
        kind: OpKind,
        root: u32,
        codes: (u8, u8),
        (elem, count): (usize, usize),
        sync: SyncModes,
    ) -> Desc {
        let (ty, red) = codes;
        Desc::new(kind, root, (ty, elem), elem * count, red, sync)
    }

    /// The key of a small broadcast's descriptor in the ring's cache
    /// ([`Coll::ring_base`](crate::layer::Coll)): a broadcast from `root` of `n`
    /// bytes, elements of type code and size `(ty, elem)`, sync modes `sync`, no
    /// context; `n` and `elem` at most 255 (the ring carries 56 bytes).
    #[inline(always)]
    pub(crate) fn ring_key(root: u32, n: usize, (ty, elem): (u8, usize), sync: SyncModes) -> u64 {
        (u64::from(root) << 32)
            | ((n as u64) << 24)
            | ((elem as u64) << 16)
            | (u64::from(ty) << 8)
            | (sync_code(sync.input) << 2)
            | sync_code(sync.output)
    }

    /// This descriptor's key in the ring's cache ([`Desc::ring_key`]), if it has one
    /// (a broadcast of at most 255 bytes without context).
    pub(crate) fn ring_key_of(&self) -> Option<u64> {
        let [n, w1, elem, ctx] = self.0;
        let ok = w1 & 0xff == OpKind::Broadcast as u64 && ctx == 0 && n <= 0xff && elem <= 0xff;
        ok.then(|| {
            let (ty, sync) = ((w1 >> 8) & 0xff, (w1 >> 24) & 0xff);
            ((w1 >> 32) << 32)
                | (n << 24)
                | (elem << 16)
                | (ty << 8)
                | ((sync / 3) << 2)
                | (sync % 3)
        })
    }

    /// The descriptor of a barrier under sync modes `sync` (its entry is a block of
    /// [`crate::barrier::ENTRY_LEN`] bytes).
    #[inline]
    pub(crate) fn barrier(sync: SyncModes) -> Desc {
        let n = crate::barrier::ENTRY_LEN;
        Desc::new(OpKind::Barrier, 0, (0, n), n, 0, sync)
    }

    /// The descriptor of a stage of this (hierarchical) collective, which `ctx`
    /// identifies: members of a stage compare the parent's fields.
    pub(crate) fn stage(self, ctx: u64) -> Desc {
        let mut d = self;
        d.0[3] = mix_all(&[self.0[3], ctx]);
        d
    }

    /// The belief: a digest of the descriptor, never 0.
    #[inline]
    pub(crate) fn belief(&self) -> u32 {
        (mix_all(&self.0) as u32).max(1)
    }

    /// Every field's value, in [`FIELDS`] order.
    fn fields(&self) -> [u64; 8] {
        let w1 = self.0[1];
        [
            w1 & 0xff,
            w1 >> 32,
            (w1 >> 8) & 0xff,
            self.0[2],
            self.0[0],
            (w1 >> 16) & 0xff,
            (w1 >> 24) & 0xff,
            self.0[3],
        ]
    }

    /// The first field in which this descriptor (member `me`'s) and `other` (member
    /// `q`'s) differ.
    pub(crate) fn disagreement(&self, me: u32, other: &Desc, q: u32) -> Option<Disagreement> {
        let (a, b) = (self.fields(), other.fields());
        let i = (0..FIELDS.len()).find(|&i| a[i] != b[i])?;
        Some(Disagreement {
            field: FIELDS[i],
            member: me,
            value: a[i],
            other: q,
            other_value: b[i],
        })
    }
}
