//! [`Rma`], the RMA layer: its state (one per endpoint, owned by the endpoint) and its
//! side of the layer contract (attach, handler dispatch, progress hook).
//!
//! The state is made of components with their own state and a narrow interface, the
//! dependencies flowing one way (API → engine → components):
//! - [`Targets`] ([`crate::target`]): the addressing checks and the direct path's
//!   mappings;
//! - [`OpTable`] ([`crate::ops`]): the operations in flight and the implicit-event
//!   counters;
//! - [`Nbi`] ([`crate::nbi`]): the relaxed native puts to flush;
//! - the native tickets ([`crate::native`]) and the AM protocol's handlers
//!   ([`crate::am`], [`Handlers`]), with this endpoint's segment.

use crate::RmaError;
use crate::am::{Handlers, h};
use crate::served::Served;
use crate::state::Rma;
use crate::target::Targets;
use gex_core::layer::{Attach, Cx, Layer, Progress};
use gex_core::spi::Conduit;
use gex_core::{Am, Capabilities, InitError, Token};

/// Reads `GEX_RMA_PATH`.
fn force_am(cx: &gex_core::Config) -> Result<bool, InitError> {
    let am = match cx
        .get("GEX_RMA_PATH")
        .map(|v| v.trim().to_ascii_lowercase())
    {
        None => false,
        Some(v) if v.is_empty() || v == "auto" => false,
        Some(v) if v == "am" => true,
        Some(v) => {
            return Err(InitError::Config(format!(
                "GEX_RMA_PATH must be `auto` or `am`, got `{v}`"
            )));
        }
    };
    Ok(am || cfg!(gex_force_am_rma))
}

impl Layer for Rma {
    const NAME: &'static str = "rma";
    const HANDLERS: u8 = h::COUNT;
    const ENV_VARS: &'static [gex_core::config::EnvVar] = crate::ENV_VARS;

    fn attach<C: Conduit>(cx: &mut Attach<'_, C, Self>) -> Result<Self, InitError> {
        let force_am = force_am(cx.config())?;
        let me = cx.addr();
        let (seg, seg_len) = cx.peer_segment(me).ok_or_else(|| InitError::Layer {
            layer: Self::NAME,
            msg: "the conduit does not map this endpoint's own segment".into(),
        })?;
        let size = cx.size();
        let layout = cx.layout();
        let seg_lens = layout.seg_len.clone();
        let init_eps = layout.eps.clone();
        let cap = (0..size)
            .map(|r| cx.endpoint_capacity(r).unwrap_or(0))
            .collect();
        let mut caps = cx.capabilities();
        if force_am {
            caps.remove(Capabilities::NATIVE_RMA | Capabilities::NATIVE_ATOMICS);
        }
        let h = Handlers {
            put_long: cx.handler(h::PUT_LONG),
            put_packed: cx.handler(h::PUT_PACKED),
            ack: cx.handler(h::ACK),
            get: cx.handler(h::GET),
            get_packed: cx.handler(h::GET_PACKED),
            get_reply: cx.handler(h::GET_REPLY),
            memset: cx.handler(h::MEMSET),
            put_short: cx.handler(h::PUT_SHORT),
            ack_fast: cx.handler(h::ACK_FAST),
            put_short_b: cx.handler(h::PUT_SHORT_B),
            atomic: cx.handler(h::ATOMIC),
            atomic_reply: cx.handler(h::ATOMIC_REPLY),
        };
        Ok(Rma::new(
            h,
            Served::new(h, seg, seg_len),
            Targets::new(me, size, seg_lens, cap, init_eps, caps, force_am),
        ))
    }

    fn handle(self: std::pin::Pin<&mut Self>, hi: u8, t: &mut Token<'_>, am: Am<'_>) {
        let this = Rma::unpin(self);
        match hi {
            h::PUT_LONG => this.served.on_put_long(t, &am),
            h::PUT_PACKED => this.served.on_put_packed(t, &am),
            h::ACK => this.on_ack(&am),
            h::GET => this.served.on_get(t, &am),
            h::GET_PACKED => this.served.on_get_packed(t, &am),
            h::GET_REPLY => this.on_get_reply(&am),
            h::MEMSET => this.served.on_memset(t, &am),
            h::PUT_SHORT => this.served.on_put_short(t, &am),
            h::ACK_FAST => this.fast_acks += 1,
            h::PUT_SHORT_B => this.served.on_put_short_b(t, &am),
            h::ATOMIC => this.served.on_atomic(t, &am),
            h::ATOMIC_REPLY => this.on_atomic_reply(&am),
            _ => this.served.dropped += 1,
        }
    }

    fn describe(&self) -> String {
        let mut lines = Vec::new();
        // Operations in flight, by peer and kind.
        let mut by: std::collections::BTreeMap<(u32, u16, &str), (usize, usize)> =
            std::collections::BTreeMap::new();
        for op in self.ops.values() {
            let e = by.entry((op.peer.rank, op.peer.ep, op.what)).or_default();
            e.0 += 1;
            e.1 += op.remaining;
        }
        for ((rank, ep, what), (n, units)) in by {
            lines.push(format!(
                "{n} {what} operation(s) to rank {rank} ep {ep} in flight ({units} units outstanding)"
            ));
        }
        let [puts, gets, atomics] = self.ops.counted;
        if puts + gets + atomics > 0 {
            lines.push(format!(
                "implicit-event operations not synced: {puts} puts, {gets} gets, {atomics} atomics"
            ));
        }
        if !self.native.is_empty() {
            lines.push(format!(
                "{} native transfers awaiting completion",
                self.native.len()
            ));
        }
        if !self.deferred.is_empty() {
            lines.push(format!(
                "{} gets of other layers wait for send resources",
                self.deferred.len()
            ));
        }
        if self.served.dropped > 0 {
            lines.push(format!(
                "{} reference-protocol messages dropped",
                self.served.dropped
            ));
        }
        lines.join("\n")
    }

    /// Scoped puts on the native path are relaxed (complete when their source is free,
    /// as implicit-event puts): a scope that issued one gets an event under its tag
    /// that completes when a flush of every relaxed put has (the progress hook drives
    /// it).
    fn end_scope<C: Conduit>(self: std::pin::Pin<&mut Self>, cx: &mut Cx<'_, C>, tag: u32) {
        let this = Rma::unpin(self);
        if !std::mem::take(&mut this.scope_relaxed) {
            return;
        }
        let (ev, done) = cx.pending::<(), RmaError>(None, gex_core::event::finish_unit);
        cx.track_implicit(tag, ev);
        this.scope_flush.push(done);
        this.scope_flush_step(cx);
        cx.set_busy();
    }

    fn progress<C: Conduit>(self: std::pin::Pin<&mut Self>, cx: &mut Cx<'_, C>) -> Progress {
        let this = Rma::unpin(self);
        this.retire_native(cx);
        if !this.deferred.is_empty() {
            this.pump_deferred(cx);
        }
        if !this.scope_flush.is_empty() {
            this.scope_flush_step(cx);
        }
        if this.native.is_empty() && this.deferred.is_empty() && this.scope_flush.is_empty() {
            Progress::Idle
        } else {
            // Native completions and freed send resources wake nobody.
            Progress::Spinning
        }
    }
}
