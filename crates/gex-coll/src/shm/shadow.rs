//! Loom builds only: the shadow cells that stand for plain bytes of the models'
//! areas and segments, so that loom checks the plain copies of the code under test
//! for races ([`touch`], called by [`crate::shm`]'s copies; the cells are made and
//! registered by [`crate::loomkit`]).
#![allow(unsafe_code)]

use loom::cell::UnsafeCell;
use std::sync::{Arc, Mutex};

/// A shadowed byte range and its cell.
pub(crate) struct Cell {
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) cell: Arc<Shadow>,
}

/// A loom cell that stands for plain bytes (it holds nothing itself).
pub(crate) struct Shadow(UnsafeCell<()>);

impl Shadow {
    /// A new cell.
    pub(crate) fn new() -> Shadow {
        Shadow(UnsafeCell::new(()))
    }
}

// SAFETY: the cell holds no data; its accesses are loom's bookkeeping, which loom
// checks for races (that is its purpose).
unsafe impl Send for Shadow {}
// SAFETY: as above.
unsafe impl Sync for Shadow {}

/// Every shadowed range of the live [`Shared`]s (disjoint: by address).
pub(crate) static SHADOW: Mutex<Vec<Cell>> = Mutex::new(Vec::new());

/// Accesses the shadow cells of `len` bytes at `p` (reading, or writing if `write`);
/// bytes nobody shadows are ignored. Called by the code under test.
pub(crate) fn touch(p: *const u8, len: usize, write: bool) {
    let (a, b) = (p as usize, p as usize + len.max(1));
    let cells: Vec<_> = SHADOW
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .filter(|c| c.start < b && a < c.end)
        .map(|c| c.cell.clone())
        .collect();
    for c in cells {
        if write {
            c.0.with_mut(|_| ());
        } else {
            c.0.with(|_| ());
        }
    }
}
