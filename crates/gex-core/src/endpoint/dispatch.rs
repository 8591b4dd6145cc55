//! Delivery of incoming messages: one table says who owns each handler index (a client
//! handler, a layer's block, the core), and each message runs its owner's handler with
//! a [`Token`] for the reply.
//!
//! A handler that panics does not unwind through the conduit's receive loop: the
//! panic is caught here, kept in `Core::panicked` (the first one; later ones were
//! printed by the panic hook and are dropped), and the poll goes on with the next
//! message. The call that ran the poll raises it (module `progress`). A handler that
//! panicked is called again for later messages, with its captured state as the panic
//! left it (as a thread would find it behind a `Mutex` without poisoning).
//!
//! A layer's handler may run a client handler on the message it handles
//! ([`Token::deliver_client`]): its token then points at the dispatcher's
//! [`Clients`] (the client handler table and the panic slot), one pointer written for
//! a layer's message only; a client handler's token has none. The client path is
//! otherwise what it was (one null pointer more in its token).

use super::am::{Am, Handler, LongPayload, Token};
use super::exchange::Mailbox;
use super::{Core, EpStats, H_EXCHANGE, OWN_CLIENT, OWN_CORE, OWN_NONE};
use crate::client::Shared;
use crate::layer::LayerSlot;
use crate::spi::{Conduit, ConduitEp, Deliver, Incoming, Limits, ReplyTx};
use crate::types::{Category, EpAddr, FIRST_CLIENT_HANDLER};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;

/// What running a client handler needs: the table and where a handler's panic is
/// kept. Part of the dispatcher; a layer's token points at it
/// ([`Token::deliver_client`]).
pub(crate) struct Clients<'e> {
    pub(crate) handlers: &'e mut [Option<Handler>],
    /// Where a handler's panic is kept.
    pub(crate) panicked: &'e mut Option<Box<dyn std::any::Any + Send>>,
}

struct Dispatch<'e, C: Conduit> {
    clients: Clients<'e>,
    owner: &'e [u8; 256],
    layers: &'e mut [LayerSlot<C>],
    xchg: &'e mut Mailbox,
    stats: &'e mut EpStats,
    /// Layers whose progress hook runs on the next polls (a layer whose handler ran
    /// is one: what its handler recorded may let its work advance).
    busy: &'e mut u64,
    shared: &'e Shared,
    limits: &'e [Limits],
    me: EpAddr,
    /// This endpoint's segment (Long payloads land in it).
    seg: (NonNull<u8>, usize),
}

impl<C: Conduit> Deliver for Dispatch<'_, C> {
    // Inlined into the conduit's receive loop: the message's fields then stay in
    // registers instead of going through an `Incoming` in memory and a copy of the
    // `Am` (whose wide reloads of narrow stores stall store forwarding: a short AM
    // flood was 1.5x the build before the layer redesign).
    #[inline(always)]
    fn deliver(&mut self, m: &Incoming<'_>, tx: &mut dyn ReplyTx) {
        self.stats.received[m.src.rank as usize] += 1;
        let long = if m.category == Category::Long {
            let (base, seg_len) = self.seg;
            assert!(
                m.offset.checked_add(m.len).is_some_and(|e| e <= seg_len),
                "gex: {} received a Long from {} outside its segment ([{}, +{}) of {seg_len})",
                self.me,
                m.src,
                m.offset,
                m.len
            );
            Some(LongPayload::new(base, m.offset, m.len))
        } else {
            None
        };
        am_trace!(
            "deliver",
            m.src,
            m.handler,
            m.category,
            if m.category == Category::Long {
                m.len
            } else {
                m.payload.len()
            }
        );
        // Built where each handler is called (not once before the match and copied):
        // the copy's wide reloads of the fields' narrow stores stall store forwarding.
        let am = || Am {
            src: m.src,
            category: m.category,
            kind: m.kind,
            args: m.args,
            payload: if long.is_some() { &[] } else { m.payload },
            long,
        };
        let own = self.owner[m.handler as usize];
        let min_handler = if own == OWN_CLIENT {
            FIRST_CLIENT_HANDLER
        } else {
            super::FIRST_LAYER_HANDLER
        };
        let mut t = Token {
            tx,
            src: m.src,
            kind: m.kind,
            replied: false,
            shared: self.shared,
            owner: self.owner,
            limits: self.limits,
            min_handler,
            // The one field a delivery writes for `deliver_client`: null here, the
            // dispatcher's `Clients` for a layer's handler (below).
            clients: None,
        };
        match own {
            OWN_CLIENT => {
                let h = self.clients.handlers[m.handler as usize]
                    .as_mut()
                    .expect("the owner table says a client handler is here");
                let r = catch_unwind(AssertUnwindSafe(|| h(&mut t, am())));
                if let Err(p) = r {
                    caught(self.clients.panicked, p);
                }
            }
            OWN_CORE => {
                if m.handler == H_EXCHANGE {
                    self.xchg.deliver(&am());
                }
            }
            OWN_NONE => panic!(
                "gex: {} received an AM for unregistered handler {} from {} \
                 (handler tables must be identical on every rank)",
                self.me, m.handler, m.src
            ),
            l => {
                let slot = &mut self.layers[l as usize];
                let local = m.handler - slot.place.base;
                // A layer's handler may run a client handler through its token
                // (`Token::deliver_client`). The pointer is used only while this
                // handler runs, during which nothing here touches `self.clients`.
                t.clients = Some(NonNull::from(&mut self.clients).cast());
                let r = catch_unwind(AssertUnwindSafe(|| slot.run_handle(local, &mut t, am())));
                if let Err(p) = r {
                    caught(self.clients.panicked, p);
                }
                *self.busy |= 1 << l;
            }
        }
        if t.replied {
            self.stats.sent[m.src.rank as usize] += 1;
        }
    }
}

/// Keeps the first caught panic.
#[cold]
#[inline(never)]
pub(crate) fn caught(
    slot: &mut Option<Box<dyn std::any::Any + Send>>,
    p: Box<dyn std::any::Any + Send>,
) {
    if slot.is_none() {
        *slot = Some(p);
    }
}

impl<C: Conduit> Core<C> {
    /// Drains incoming messages of the conduit, running their handlers.
    #[inline]
    pub(crate) fn poll_conduit(&mut self, layers: &mut [LayerSlot<C>]) -> usize {
        let seg = self.cep.local_segment();
        let mut d = Dispatch::<C> {
            clients: Clients {
                handlers: &mut self.handlers,
                panicked: &mut self.panicked,
            },
            owner: &self.owner,
            layers,
            xchg: &mut self.xchg,
            stats: &mut self.stats,
            busy: &mut self.busy,
            shared: &self.shared,
            limits: &self.limits,
            me: self.me,
            seg,
        };
        self.cep.poll(&mut d, 64)
    }
}
