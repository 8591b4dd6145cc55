//! Typed global pointers and VIS shapes.

use gex_core::{EpAddr, EpIndex, Rank};
use std::marker::PhantomData;

/// A typed pointer into the segment of endpoint `(rank, ep)`: the byte `offset` from
/// the segment's base, holding values of type `T`.
///
/// Creating one checks nothing; every operation range-checks the bytes it touches
/// against the target's published segment length. Arithmetic saturates, so an
/// overflowing pointer is reported as [`RmaError::OutOfSegment`](crate::RmaError::OutOfSegment)
/// by the operation, never wrapped into a valid-looking offset.
///
/// ```
/// use gex_core::EpAddr;
/// use gex_rma::GlobalPtr;
/// let p = GlobalPtr::<u32>::new(EpAddr::new(1, 0), 64);
/// assert_eq!(p.add(3).byte_offset(), 76);
/// assert_eq!(p.cast::<u8>().add(3).byte_offset(), 67);
/// assert_eq!(p.addr(), EpAddr::new(1, 0));
/// ```
pub struct GlobalPtr<T> {
    /// Rank owning the segment.
    pub rank: Rank,
    /// Endpoint index within that rank.
    pub ep: EpIndex,
    /// Byte offset from the segment's base.
    pub offset: usize,
    _t: PhantomData<fn() -> T>,
}

impl<T> GlobalPtr<T> {
    /// A pointer to **byte** `offset` of the segment of `addr`.
    ///
    /// Offsets into a segment are bytes throughout gex (a segment holds values of many
    /// types; `byte_offset`, Long AM offsets and `Segment` agree), while arithmetic on
    /// a typed pointer counts elements, as `<*const T>::add` does:
    /// [`add`](Self::add) counts `T`s, [`byte_add`](Self::byte_add) bytes, and
    /// [`at_index`](Self::at_index) builds a pointer from an element index.
    ///
    /// ```
    /// use gex_core::EpAddr;
    /// use gex_rma::GlobalPtr;
    /// let a = EpAddr::new(0, 0);
    /// assert_eq!(GlobalPtr::<u64>::new(a, 16), GlobalPtr::<u64>::at_index(a, 2));
    /// assert_eq!(GlobalPtr::<u64>::new(a, 16).add(1).byte_offset(), 24);
    /// assert_eq!(GlobalPtr::<u64>::new(a, 16).byte_add(1).byte_offset(), 17);
    /// ```
    pub const fn new(addr: EpAddr, offset: usize) -> Self {
        GlobalPtr {
            rank: addr.rank,
            ep: addr.ep,
            offset,
            _t: PhantomData,
        }
    }
    /// The target endpoint.
    pub const fn addr(&self) -> EpAddr {
        EpAddr::new(self.rank, self.ep)
    }
    /// The byte offset from the segment's base.
    pub const fn byte_offset(&self) -> usize {
        self.offset
    }
    /// The pointer `n` elements further (saturating).
    pub const fn add(self, n: usize) -> Self {
        let step = n.saturating_mul(std::mem::size_of::<T>());
        GlobalPtr {
            offset: self.offset.saturating_add(step),
            ..self
        }
    }
    /// The pointer `n` bytes further (saturating), still holding `T`s.
    pub const fn byte_add(self, n: usize) -> Self {
        GlobalPtr {
            offset: self.offset.saturating_add(n),
            ..self
        }
    }
    /// A pointer to element `index` of the segment of `addr` seen as an array of `T`
    /// (byte offset `index * size_of::<T>()`, saturating).
    pub const fn at_index(addr: EpAddr, index: usize) -> Self {
        Self::new(addr, 0).add(index)
    }
    /// The same address, viewed as holding `U`s.
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
            "GlobalPtr<{}>(rank {} ep {} +{})",
            std::any::type_name::<T>(),
            self.rank,
            self.ep,
            self.offset
        )
    }
}

/// The shape of a strided transfer. Dimension 0 is the innermost. Element
/// `(i_0, .., i_{n-1})`, with `i_d < counts[d]`, is at remote element index
/// `Σ i_d * remote_strides[d]` from the global pointer and at local element index
/// `local_start + Σ i_d * local_strides[d]`. Strides are in elements and may be
/// negative (reflections) or zero; a zero remote stride on a put makes elements
/// overwrite each other in an unspecified order. A shape with any count 0 moves
/// nothing; a shape with no dimensions moves one element.
#[derive(Clone, Copy, Debug)]
pub struct Strided<'a> {
    /// Elements per dimension.
    pub counts: &'a [usize],
    /// Remote stride of each dimension, in elements.
    pub remote_strides: &'a [isize],
    /// Local element index of element `(0, .., 0)`.
    pub local_start: usize,
    /// Local stride of each dimension, in elements.
    pub local_strides: &'a [isize],
}

/// The remote side of a VIS (vector, indexed, strided) transfer; every piece targets
/// the same endpoint. The local side is one slice: for `Strided`, addressed by the
/// shape; for `Vector` and `Indexed`, packed (piece after piece, in list order).
#[derive(Clone, Copy, Debug)]
pub enum Vis<'a, T> {
    /// A strided region starting at `ptr`.
    Strided {
        /// Remote element `(0, .., 0)`.
        ptr: GlobalPtr<T>,
        /// The shape.
        shape: Strided<'a>,
    },
    /// Pieces `(start, elements)`.
    Vector(&'a [(GlobalPtr<T>, usize)]),
    /// Pieces of `each` elements starting at each pointer.
    Indexed {
        /// Start of every piece.
        ptrs: &'a [GlobalPtr<T>],
        /// Elements per piece.
        each: usize,
    },
}
