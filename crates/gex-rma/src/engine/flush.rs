//! Flushing relaxed native puts ([`crate::nbi`]) for implicit-event syncs and scopes.

use crate::RmaError;
use crate::nbi::Cat;
use crate::state::Rma;
use gex_core::layer::Cx;
use gex_core::spi::{Conduit, Native};

impl Rma {
    /// Starts a flush ([`ConduitEp::native_flush`](gex_core::spi::ConduitEp::native_flush)) of every destination of relaxed
    /// puts; each flush still pending is counted as a put. Returns false when the
    /// conduit lacked resources (poll and call again: the remaining destinations are
    /// kept).
    pub(crate) fn flush_step<C: Conduit>(&mut self, cx: &mut Cx<'_, C>) -> Result<bool, RmaError> {
        if self.nbi.flushing.is_empty() {
            if self.nbi.unflushed.is_empty() {
                return Ok(true);
            }
            self.nbi.last_dirty = None;
            let mut f = std::mem::take(&mut self.nbi.flushing);
            f.extend(self.nbi.unflushed.drain());
            self.nbi.flushing = f;
        }
        while let Some(&dst) = self.nbi.flushing.last() {
            match cx.native_flush(dst)? {
                Native::Done | Native::Unsupported => {}
                Native::Pending(ticket) => {
                    let id = self.ops.new_op(
                        dst,
                        "flush",
                        std::ptr::null_mut(),
                        0,
                        std::ptr::null_mut(),
                    );
                    if let Some(op) = self.ops.get_mut(&id) {
                        op.done = crate::ops::Done::Count(Cat::Puts);
                    }
                    self.ops.counted[Cat::Puts as usize] += 1;
                    self.track_native(cx, id, ticket, 1, None);
                    self.ops.seal(id);
                }
                Native::WouldBlock => return Ok(false),
            }
            self.nbi.flushing.pop();
        }
        Ok(true)
    }

    /// Advances the flush that ended scopes wait for ([`Layer::end_scope`]): flushes
    /// every destination of relaxed puts, then, once no flush and no counted put is in
    /// flight, completes the scopes' events (a scope may so wait for implicit-event
    /// puts too; never for less than its own).
    ///
    /// [`Layer::end_scope`]: gex_core::layer::Layer::end_scope
    pub(crate) fn scope_flush_step<C: Conduit>(&mut self, cx: &mut Cx<'_, C>) {
        match self.flush_step(cx) {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                for c in self.scope_flush.drain(..) {
                    c.fail(e.clone());
                }
                return;
            }
        }
        if self.nbi.flushing.is_empty()
            && self.nbi.unflushed.is_empty()
            && self.ops.counted[Cat::Puts as usize] == 0
        {
            for c in self.scope_flush.drain(..) {
                c.ok();
            }
        }
    }
}
