//! VIS (vector, indexed, strided) decomposition: a [`Vis`] description over a local
//! buffer becomes a list of validated byte [`Chunk`]s (adjacent pieces merged), which
//! every data path then moves. Pure: no I/O, no unsafe.

use crate::RmaError;
use crate::ptr::{GlobalPtr, Strided, Vis};
use gex_core::EpAddr;

/// A byte range to move: `len` bytes at `remote` in the target segment and at `local`
/// from the start of the local buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Chunk {
    pub(crate) remote: usize,
    pub(crate) local: usize,
    pub(crate) len: usize,
}

impl Chunk {
    /// The one chunk of a contiguous transfer: `len` bytes at offset `remote` of the
    /// target, from the start of the local buffer.
    pub(crate) const fn whole(remote: usize, len: usize) -> Self {
        Chunk {
            remote,
            local: 0,
            len,
        }
    }
}

/// Decomposes `vis` over a local buffer of `local_len` elements into validated chunks.
/// `seg_len_of` checks a target and returns its segment length; `me` is the target of
/// an empty list.
///
/// # Errors
/// [`RmaError::ShapeMismatch`], [`RmaError::MixedTargets`],
/// [`RmaError::LocalOutOfBounds`], [`RmaError::OutOfSegment`] and the target errors
/// of `seg_len_of`.
pub(crate) fn chunks<T>(
    vis: &Vis<'_, T>,
    local_len: usize,
    me: EpAddr,
    seg_len_of: &dyn Fn(EpAddr) -> Result<usize, RmaError>,
) -> Result<(EpAddr, Vec<Chunk>), RmaError> {
    let es = std::mem::size_of::<T>();
    let mut out: Vec<Chunk> = Vec::new();
    // (base ptr, remote element offset from it, local element index, elements)
    let mut push = |p: GlobalPtr<T>, rel: i128, loc: i128, n: usize| -> Result<(), RmaError> {
        let dst = p.addr();
        let seg_len = seg_len_of(dst)?;
        if loc < 0 || loc as u128 + n as u128 > local_len as u128 {
            return Err(RmaError::LocalOutOfBounds {
                start: loc.max(0).min(usize::MAX as i128) as usize,
                len: n,
                slice_len: local_len,
            });
        }
        let len = n * es;
        let rb = p.offset as i128 + rel * es as i128;
        if rb < 0 || rb + len as i128 > seg_len as i128 {
            return Err(RmaError::OutOfSegment {
                dst,
                offset: if rb < 0 {
                    usize::MAX
                } else {
                    rb.min(usize::MAX as i128) as usize
                },
                len,
                seg_len,
            });
        }
        if n == 0 {
            return Ok(());
        }
        let c = Chunk {
            remote: rb as usize,
            local: loc as usize * es,
            len,
        };
        match out.last_mut() {
            Some(l) if l.remote + l.len == c.remote && l.local + l.len == c.local => l.len += c.len,
            _ => out.push(c),
        }
        Ok(())
    };
    let target = match vis {
        Vis::Strided { ptr, shape } => {
            seg_len_of(ptr.addr())?;
            strided_walk(*ptr, shape, &mut push)?;
            ptr.addr()
        }
        Vis::Vector(list) => {
            let total = list.iter().try_fold(0usize, |a, p| a.checked_add(p.1));
            if total != Some(local_len) {
                return Err(RmaError::ShapeMismatch(format!(
                    "vector pieces hold {} elements, the local buffer {local_len}",
                    total.map_or("more than usize::MAX".to_string(), |t| t.to_string())
                )));
            }
            let target = list.first().map(|p| p.0.addr());
            let mut loc = 0usize;
            for &(p, n) in list.iter() {
                let t = target.unwrap_or(p.addr());
                if p.addr() != t {
                    return Err(RmaError::MixedTargets {
                        first: t,
                        other: p.addr(),
                    });
                }
                push(p, 0, loc as i128, n)?;
                loc += n;
            }
            target.unwrap_or(me)
        }
        Vis::Indexed { ptrs, each } => {
            if ptrs.len().checked_mul(*each) != Some(local_len) {
                return Err(RmaError::ShapeMismatch(format!(
                    "{} pieces of {each} elements do not match the local buffer of {local_len}",
                    ptrs.len()
                )));
            }
            let target = ptrs.first().map(|p| p.addr());
            for (i, &p) in ptrs.iter().enumerate() {
                let t = target.unwrap_or(p.addr());
                if p.addr() != t {
                    return Err(RmaError::MixedTargets {
                        first: t,
                        other: p.addr(),
                    });
                }
                push(p, 0, (i as i128) * (*each as i128), *each)?;
            }
            target.unwrap_or(me)
        }
    };
    Ok((target, out))
}

type Push<'p, T> = dyn FnMut(GlobalPtr<T>, i128, i128, usize) -> Result<(), RmaError> + 'p;

/// Walks a strided shape, calling `push(ptr, remote element offset, local element
/// index, elements)` per contiguous run (dimension 0 is a run when both strides are 1).
fn strided_walk<T>(
    ptr: GlobalPtr<T>,
    s: &Strided<'_>,
    push: &mut Push<'_, T>,
) -> Result<(), RmaError> {
    let n = s.counts.len();
    if s.remote_strides.len() != n || s.local_strides.len() != n {
        return Err(RmaError::ShapeMismatch(format!(
            "{n} counts, {} remote strides, {} local strides",
            s.remote_strides.len(),
            s.local_strides.len()
        )));
    }
    if s.counts.contains(&0) {
        return Ok(());
    }
    let run = n > 0 && s.remote_strides[0] == 1 && s.local_strides[0] == 1;
    let first_dim = usize::from(run);
    let run_len = if run { s.counts[0] } else { 1 };
    let mut idx = vec![0usize; n];
    loop {
        let (mut r, mut l) = (0i128, s.local_start as i128);
        for (d, &i) in idx.iter().enumerate().skip(first_dim) {
            r += i as i128 * s.remote_strides[d] as i128;
            l += i as i128 * s.local_strides[d] as i128;
        }
        push(ptr, r, l, run_len)?;
        // Next multi-index over dims first_dim..n.
        let mut d = first_dim;
        loop {
            if d == n {
                return Ok(());
            }
            idx[d] += 1;
            if idx[d] < s.counts[d] {
                break;
            }
            idx[d] = 0;
            d += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(_: EpAddr) -> Result<usize, RmaError> {
        Ok(1024)
    }

    #[test]
    fn a_reflection_is_one_chunk_per_element_and_runs_merge() {
        let p = GlobalPtr::<u32>::new(EpAddr::rank(0), 64);
        let rev = Strided {
            counts: &[4],
            remote_strides: &[-1],
            local_start: 0,
            local_strides: &[1],
        };
        let (t, c) = chunks(
            &Vis::Strided {
                ptr: p.add(3),
                shape: rev,
            },
            4,
            EpAddr::rank(0),
            &seg,
        )
        .unwrap();
        assert_eq!(t, EpAddr::rank(0));
        assert_eq!(c.len(), 4);
        assert_eq!(
            c[0],
            Chunk {
                remote: 76,
                local: 0,
                len: 4
            }
        );
        let rows = Strided {
            counts: &[4, 2],
            remote_strides: &[1, 4],
            local_start: 0,
            local_strides: &[1, 4],
        };
        let (_, c) = chunks(
            &Vis::Strided {
                ptr: p,
                shape: rows,
            },
            8,
            EpAddr::rank(0),
            &seg,
        )
        .unwrap();
        assert_eq!(
            c,
            vec![Chunk {
                remote: 64,
                local: 0,
                len: 32
            }],
            "adjacent rows merge"
        );
    }

    #[test]
    fn shapes_are_checked_before_anything_moves() {
        let p = GlobalPtr::<u8>::new(EpAddr::rank(0), 0);
        let e = chunks(&Vis::Vector(&[(p, 8)]), 9, EpAddr::rank(0), &seg).unwrap_err();
        assert!(matches!(e, RmaError::ShapeMismatch(_)));
        let q = GlobalPtr::<u8>::new(EpAddr::rank(1), 0);
        let e = chunks(&Vis::Vector(&[(p, 1), (q, 1)]), 2, EpAddr::rank(0), &seg).unwrap_err();
        assert_eq!(
            e,
            RmaError::MixedTargets {
                first: EpAddr::rank(0),
                other: EpAddr::rank(1)
            }
        );
        let low = Strided {
            counts: &[4],
            remote_strides: &[-1],
            local_start: 0,
            local_strides: &[1],
        };
        let e = chunks(
            &Vis::Strided {
                ptr: p.add(2),
                shape: low,
            },
            4,
            EpAddr::rank(0),
            &seg,
        )
        .unwrap_err();
        assert!(matches!(
            e,
            RmaError::OutOfSegment {
                offset: usize::MAX,
                ..
            }
        ));
    }
}
