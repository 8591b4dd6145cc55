//! The errors of gex-overlap's operations.

use gex_rma::RmaError;

/// Why a gex-overlap operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OverlapError {
    /// The buffer offset of a transfer is not a multiple of the page size (pages are
    /// what gets protected and retired).
    #[error("buffer offset {offset} is not a multiple of the page size ({page})")]
    Unaligned {
        /// The offset given.
        offset: usize,
        /// The page size.
        page: usize,
    },
    /// The range does not lie in the buffer.
    #[error("range {offset}+{len} outside a buffer of {buf_len} bytes")]
    OutOfBuffer {
        /// The offset given.
        offset: usize,
        /// The length given.
        len: usize,
        /// The buffer's length.
        buf_len: usize,
    },
    /// The remote range does not lie in the target's segment.
    #[error("remote range {offset}+{len} outside the target's segment of {seg_len} bytes")]
    OutOfSegment {
        /// The remote byte offset.
        offset: usize,
        /// The length.
        len: usize,
        /// The target segment's length.
        seg_len: usize,
    },
    /// A page of the range belongs to a transfer still pending (overlapping pending
    /// ranges are refused: wait for the first with `wait_range` or `retire_all`).
    #[error("page {page} of the buffer is already part of a pending transfer")]
    Overlapping {
        /// The first such page (index in the buffer).
        page: usize,
    },
    /// The endpoint does not carry the overlap layer (build the client with
    /// `.layer::<gex_overlap::Overlap>()`).
    #[error("the endpoint has no overlap layer")]
    NotAttached,
    /// Every slot of the process's buffer registry is taken
    /// ([`MAX_BUFFERS`](crate::MAX_BUFFERS) buffers alive).
    #[error("too many overlap buffers alive")]
    TooManyBuffers,
    /// A system call failed (mapping, `mprotect`, the handler's installation).
    #[error("system call failed: {0}")]
    Os(#[source] std::io::Error),
    /// The fallback path's RMA operation failed (peers whose segment is not mapped).
    #[error(transparent)]
    Rma(#[from] RmaError),
    /// The conduit failed a native transfer (a peer that left, the network).
    #[error("conduit: {0}")]
    Conduit(#[source] gex_core::spi::ConduitError),
    /// A delta buffer's epoch is already open ([`DeltaExt::delta_begin`] twice
    /// without [`DeltaExt::delta_end`]).
    ///
    /// [`DeltaExt::delta_begin`]: crate::DeltaExt::delta_begin
    /// [`DeltaExt::delta_end`]: crate::DeltaExt::delta_end
    #[error("the delta buffer's epoch is already open")]
    EpochOpen,
    /// The operation needs an open epoch of the delta buffer
    /// ([`DeltaExt::delta_begin`](crate::DeltaExt::delta_begin) first).
    #[error("the delta buffer has no open epoch")]
    NoEpoch,
    /// The program wrote (or marked) bytes of a delta buffer that were already sent in
    /// the open epoch: the destination may have been read with the old bytes. The
    /// range is sent again at the epoch's end.
    #[error("byte {offset} of the delta buffer was written after it was sent in this epoch")]
    WrittenAfterSend {
        /// A byte offset in the range written (the first found).
        offset: usize,
    },
    /// A receive window ([`DeltaExt::delta_recv_window`]) on an endpoint without a
    /// progress thread in a job with a rank whose segment this process does not map
    /// (another host, over ofi without `GEX_HYBRID=1`): that rank's sends reach the
    /// window through gex-rma, which completes at this endpoint only while it is
    /// served, and a thread touching a pending page waits in the fault handler, where
    /// nothing serves it. Build the client with a progress thread
    /// (`GEX_PROGRESS_THREAD=1`), or map the peers (`GEX_HYBRID=1` on one host).
    ///
    /// [`DeltaExt::delta_recv_window`]: crate::DeltaExt::delta_recv_window
    #[error(
        "a receive window needs a progress thread here: rank {rank}'s segment is not mapped in this process (GEX_PROGRESS_THREAD=1)"
    )]
    NeedsProgressThread {
        /// The first rank whose segment is not mapped here.
        rank: u32,
    },
    /// A message of the scheduler (a train or a signal, [`SchedExt`]) could not be
    /// sent: the conduit failed or the destination is gone.
    ///
    /// [`SchedExt`]: crate::SchedExt
    #[error("scheduled message: {0}")]
    Am(#[source] gex_core::AmError),
    /// [`SchedExt::sched_request`] with a Long body: scheduled puts ride Short and
    /// Medium requests only (a Long payload lands in the target's segment before its
    /// handler runs; send a Long with [`Endpoint::request`] after
    /// [`SchedExt::sched_flush`]).
    ///
    /// [`SchedExt::sched_request`]: crate::SchedExt::sched_request
    /// [`SchedExt::sched_flush`]: crate::SchedExt::sched_flush
    /// [`Endpoint::request`]: gex_core::Endpoint::request
    #[error("sched_request takes Short and Medium bodies, not a Long")]
    LongRequest,
    /// An overlap profile ([`OverlapProfile`](crate::OverlapProfile),
    /// `GEX_OVERLAP_PROFILE`) could not be read or parsed: the file, the line and the
    /// problem.
    #[error("overlap profile: {0}")]
    Profile(String),
    /// The mover thread is gone (it panicked): the transfer cannot complete.
    #[error("the overlap mover thread is gone")]
    MoverGone,
    /// A delta message ([`apply_delta`](crate::apply_delta), the receive of a delta
    /// sent as a message) does not start with the delta format's magic (`GXDL`) and
    /// version 1: not a delta message, or a newer format. Nothing was written.
    #[error("not a delta message (magic {magic:#010x}, version {version})")]
    NotDelta {
        /// The message's first four bytes (little-endian), or what there is of them.
        magic: u32,
        /// Its version byte.
        version: u8,
    },
    /// A delta message's length does not match its header and runs: it ends inside
    /// the header or inside a run (truncated), or has bytes after its last run.
    /// Nothing was written.
    #[error("delta message of {got} bytes: its header and runs need {need}")]
    DeltaLength {
        /// The length the header and the runs read so far need (for bytes after
        /// the last run: where the last run ends).
        need: usize,
        /// The message's length.
        got: usize,
    },
    /// The gex-msg send or receive of a delta message failed (feature `msg`).
    #[cfg(feature = "msg")]
    #[error("message: {0}")]
    Msg(#[source] gex_msg::MsgError),
}
