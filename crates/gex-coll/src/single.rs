//! Single address mode: every member names every member's buffers by segment offset.

use crate::op::OpKind;

/// Segment offsets of a single-address-mode collective, per team rank (bytes, in the
/// segment of the member's team endpoint). See [`InSegments`](crate::InSegments).
///
/// `src: None` is the in-place variant: each member's input is read from its
/// destination (at block `rank` for gather and gather_all, at the start otherwise).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Single {
    /// Source offset of every member (`None`: in place).
    pub src: Option<Vec<usize>>,
    /// Destination offset of every member.
    pub dst: Vec<usize>,
}

impl Single {
    /// The same source and destination offsets on every member of a team of `size`.
    pub fn uniform(size: u32, src: usize, dst: usize) -> Single {
        Single {
            src: Some(vec![src; size as usize]),
            dst: vec![dst; size as usize],
        }
    }

    /// In place, the same destination offset on every member.
    pub fn in_place(size: u32, dst: usize) -> Single {
        Single {
            src: None,
            dst: vec![dst; size as usize],
        }
    }

    /// These offsets with the root's buffer at `offset` (a root given by data): the
    /// source of a broadcast or scatter (an in-place list gets explicit sources, the
    /// others' unchanged), the destination of a gather or reduce. Lists of the wrong
    /// length are left for the start to refuse.
    pub(crate) fn with_root_buffer(&self, op: OpKind, root: u32, offset: usize) -> Single {
        let mut s = self.clone();
        let list = match op {
            OpKind::Broadcast | OpKind::Scatter => s.src.get_or_insert_with(|| self.dst.clone()),
            OpKind::Gather | OpKind::Reduce => &mut s.dst,
            _ => return s,
        };
        if let Some(x) = list.get_mut(root as usize) {
            *x = offset;
        }
        s
    }
}
