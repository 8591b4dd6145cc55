//! Path selection: which of the three data paths an operation takes, as a pure function
//! of what is known when it starts (UCX-style protocol selection, without I/O).
//!
//! | path | when | how |
//! |---|---|---|
//! | [`Path::Nothing`] | zero bytes to move | nothing; complete at once (after validation) |
//! | [`Path::Direct`] | the conduit maps the target's segment here (a neighbour, or this endpoint) | a `memcpy` / CPU atomic through the mapping; complete on return |
//! | [`Path::Native`] | not mapped, and the conduit offers native RMA (NIC atomics for a domain that agreed on them) | the network moves the bytes ([`ConduitEp::native_put`](gex_core::spi::ConduitEp::native_put), ...) |
//! | [`Path::AmShort`] | a put of at most [`SHORT_PUT_MAX`] bytes on the AM path | one Short AM carrying the bytes in its arguments |
//! | [`Path::Am`] | otherwise | the AM reference protocol (Long puts, Short gets answered by Medium replies, packed VIS pieces) |
//!
//! Forcing the AM path (`--cfg gex_force_am_rma` or `GEX_RMA_PATH=am`) turns every
//! direct and native choice into the AM one, NIC atomic domains included.

use gex_core::Capabilities;

/// The kind of operation being placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OpKind {
    /// A put (contiguous or one VIS transfer).
    Put,
    /// A get.
    Get,
    /// A memset (no native form).
    Memset,
    /// An atomic of a domain; `nic`: the domain agreed on NIC atomics.
    Atomic {
        /// The domain uses the conduit's NIC atomics for every target.
        nic: bool,
    },
}

/// The path an operation takes (see the module table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Path {
    /// Nothing to move.
    Nothing,
    /// Copy (or CPU atomic) through the local mapping of the target's segment.
    Direct,
    /// The conduit's native operations.
    Native,
    /// One Short AM with the bytes in its arguments (small puts).
    AmShort,
    /// The AM reference protocol.
    Am,
}

/// Largest put carried in the arguments of one Short AM: every conduit carries at least
/// [`gex_core::spi::MIN_MAX_ARGS`] arguments, three of which are the header.
pub(crate) const SHORT_PUT_MAX: usize = 4 * (gex_core::spi::MIN_MAX_ARGS - 3);

/// Offsets below this fit the 24 high bits of a small put's offset word.
pub(crate) const SHORT_PUT_OFF_LIMIT: usize = 1 << 56;

/// Everything the choice depends on.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PathIn {
    /// The operation.
    pub(crate) op: OpKind,
    /// Bytes to move (the element size for atomics).
    pub(crate) size: usize,
    /// Byte offset of the (first) remote byte.
    pub(crate) offset: usize,
    /// Pieces of the transfer (1 for contiguous operations).
    pub(crate) pieces: usize,
    /// The conduit maps the target's segment here.
    pub(crate) mapped: bool,
    /// The conduit's capabilities.
    pub(crate) caps: Capabilities,
    /// The AM path is forced (cfg or `GEX_RMA_PATH=am`).
    pub(crate) force_am: bool,
}

/// Chooses the path of one operation (see the module documentation).
#[inline]
pub(crate) fn select(i: PathIn) -> Path {
    if let OpKind::Atomic { nic } = i.op {
        return if i.force_am {
            Path::Am
        } else if nic {
            // NIC and CPU atomics are not coherent: a NIC domain uses the NIC for
            // every target, mapped ones (this endpoint) included.
            Path::Native
        } else if i.mapped {
            Path::Direct
        } else {
            Path::Am
        };
    }
    if i.size == 0 {
        return Path::Nothing;
    }
    if i.mapped && !i.force_am {
        return Path::Direct;
    }
    let native = !i.force_am && i.caps.contains(Capabilities::NATIVE_RMA);
    match i.op {
        OpKind::Put | OpKind::Get if native => Path::Native,
        OpKind::Put
            if i.pieces == 1 && i.size <= SHORT_PUT_MAX && i.offset < SHORT_PUT_OFF_LIMIT =>
        {
            Path::AmShort
        }
        _ => Path::Am,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base(op: OpKind) -> PathIn {
        PathIn {
            op,
            size: 8,
            offset: 64,
            pieces: 1,
            mapped: false,
            caps: Capabilities::empty(),
            force_am: false,
        }
    }

    #[test]
    fn mapped_targets_take_the_direct_path_unless_forced() {
        for op in [OpKind::Put, OpKind::Get, OpKind::Memset] {
            let i = PathIn {
                mapped: true,
                caps: Capabilities::NATIVE_RMA | Capabilities::SHARED_MEMORY,
                ..base(op)
            };
            assert_eq!(select(i), Path::Direct, "{op:?}");
            assert_eq!(
                select(PathIn {
                    force_am: true,
                    ..i
                }),
                if op == OpKind::Put {
                    Path::AmShort
                } else {
                    Path::Am
                },
                "{op:?} forced"
            );
        }
    }

    #[test]
    fn zero_bytes_move_nothing_on_every_path() {
        for mapped in [false, true] {
            for force_am in [false, true] {
                let i = PathIn {
                    size: 0,
                    mapped,
                    force_am,
                    ..base(OpKind::Get)
                };
                assert_eq!(select(i), Path::Nothing);
            }
        }
    }

    #[test]
    fn native_rma_serves_unmapped_puts_and_gets_only() {
        let caps = Capabilities::NATIVE_RMA;
        assert_eq!(
            select(PathIn {
                caps,
                ..base(OpKind::Put)
            }),
            Path::Native
        );
        assert_eq!(
            select(PathIn {
                caps,
                ..base(OpKind::Get)
            }),
            Path::Native
        );
        assert_eq!(
            select(PathIn {
                caps,
                ..base(OpKind::Memset)
            }),
            Path::Am
        );
        assert_eq!(
            select(PathIn {
                caps,
                force_am: true,
                size: 4096,
                ..base(OpKind::Put)
            }),
            Path::Am
        );
    }

    #[test]
    fn small_contiguous_puts_ride_in_the_arguments() {
        assert_eq!(select(base(OpKind::Put)), Path::AmShort);
        let at = |size, offset, pieces| {
            select(PathIn {
                size,
                offset,
                pieces,
                ..base(OpKind::Put)
            })
        };
        assert_eq!(at(SHORT_PUT_MAX, 0, 1), Path::AmShort);
        assert_eq!(at(SHORT_PUT_MAX + 1, 0, 1), Path::Am);
        assert_eq!(at(8, SHORT_PUT_OFF_LIMIT, 1), Path::Am);
        assert_eq!(at(8, 0, 2), Path::Am, "VIS pieces are packed instead");
        assert_eq!(select(base(OpKind::Get)), Path::Am);
        const { assert!(SHORT_PUT_MAX < 256, "the length must fit 8 bits") };
    }

    #[test]
    fn atomics_follow_their_domain() {
        let nic = |nic, mapped, force_am| {
            select(PathIn {
                mapped,
                force_am,
                ..base(OpKind::Atomic { nic })
            })
        };
        assert_eq!(
            nic(true, true, false),
            Path::Native,
            "NIC domains use the NIC everywhere"
        );
        assert_eq!(nic(true, false, false), Path::Native);
        assert_eq!(nic(false, true, false), Path::Direct);
        assert_eq!(nic(false, false, false), Path::Am);
        assert_eq!(nic(false, true, true), Path::Am);
        assert_eq!(nic(true, true, true), Path::Am);
    }
}
