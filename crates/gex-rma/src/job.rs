//! A transfer in progress ([`Job`]): its path, its entry in the op table and its
//! cursors, which the engine ([`crate::engine`]) advances step by step; and a get
//! whose requests wait for room ([`Deferred`]), kept in the layer's state.

use crate::am::AmCursor;
use crate::path::Path;
use crate::vis::Chunk;
use gex_core::EpAddr;
use std::sync::Arc;

/// A transfer in progress.
#[derive(Debug)]
pub(crate) struct Job {
    pub(crate) path: Path,
    /// Its entry in the op table.
    pub(crate) id: u32,
    /// Native cursor (chunk index).
    pub(crate) ci: usize,
    pub(crate) am: AmCursor,
    /// A copy of a put's source read by pending native puts.
    pub(crate) copy: Option<Arc<[u8]>>,
    /// A unit (message, native operation) has started.
    pub(crate) started: bool,
}

impl Job {
    /// A job of operation `id` on `path` at its start (`copy`: a put's source copy).
    #[inline(always)]
    pub(crate) fn new(path: Path, id: u32, copy: Option<Arc<[u8]>>) -> Self {
        Job {
            path,
            id,
            ci: 0,
            am: AmCursor::default(),
            copy,
            started: false,
        }
    }

    /// The job's entry in the op table (none for a blocking short put, which
    /// completes by counting fast acknowledgements: id 0, never an entry's).
    #[inline(always)]
    pub(crate) fn entry(&self) -> Option<u32> {
        (self.id != 0).then_some(self.id)
    }
}

/// A get started by [`try_get_owned`](crate::try_get_owned) whose requests met back-pressure.
#[derive(Debug)]
pub(crate) struct Deferred {
    pub(crate) src: EpAddr,
    pub(crate) chunks: [Chunk; 1],
    pub(crate) dst: *mut u8,
    pub(crate) job: Job,
}
