//! [`AnyConduit`]: the conduit chosen at run time, as an enum over the conduits compiled
//! in, so a program picks its network from `GEX_CONDUIT` without being generic.
//!
//! Every conduit call is a `match` on the variant (a predictable branch), then the
//! conduit's own monomorphised code: no trait objects, no function-pointer tables. A
//! program that wants the fully monomorphised path names a conduit type instead
//! ([`gex_core::Client<Smp>`](gex_core::Client), or [`crate::Job`]).
//!
//! # Safety
//! The `unsafe` methods of the conduit contract (native RMA and atomics) forward to
//! the chosen conduit's, with the caller's promises unchanged.
#![allow(unsafe_code)]

use gex_core::boot::Bootstrap;
use gex_core::config::EnvVar;
use gex_core::spi::{
    AtomicBase, AtomicKind, Capabilities, Conduit, ConduitEp, ConduitError, Deliver, Limits,
    Native, NativeAtomic, NativeResult, OpenParams, OutMsg, OwnedInjected, OwnedMsg, Prepare,
    PrepareReq, SegRange, Sleeper,
};
use gex_core::{EpAddr, EpIndex, InitError, Injected};
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Duration;

/// Generates `AnyConduit`, `AnyEp` and their trait impls from the facade's conduit list
/// (`for_each_conduit!`: `Variant(conduit type)` entries under their features' `cfg`).
macro_rules! any_conduit {
    ($( $(#[$m:meta])* $v:ident($t:ty) ),+ $(,)?) => {
        /// The conduit chosen at run time (`GEX_CONDUIT`, default
        /// [`DEFAULT_CONDUIT`](crate::DEFAULT_CONDUIT)): one variant per conduit compiled
        /// in.
        #[derive(Debug)]
        #[non_exhaustive]
        pub enum AnyConduit {
            $( $(#[$m])* #[doc = concat!("The `", stringify!($v), "` conduit.")] $v(Arc<$t>), )+
        }

        /// An endpoint of [`AnyConduit`].
        // The variants differ in size (the loopback endpoint is a few words, the
        // network ones hold their queues inline); boxing them would put an indirection
        // on every conduit call of the hot path, and an endpoint exists once per rank.
        #[allow(clippy::large_enum_variant)]
        #[derive(Debug)]
        #[non_exhaustive]
        pub enum AnyEp {
            $( $(#[$m])* #[doc = concat!("An endpoint of the `", stringify!($v), "` conduit.")] $v(<$t as Conduit>::Ep), )+
        }

        impl AnyConduit {
            fn open_named(
                name: &str,
                boot: &mut dyn Bootstrap,
                params: &OpenParams<'_>,
            ) -> Result<(Arc<Self>, Vec<AnyEp>), InitError> {
                $(
                    $(#[$m])*
                    if name == <$t as Conduit>::NAME {
                        let (c, eps) = <$t as Conduit>::open(boot, params)?;
                        return Ok((Arc::new(AnyConduit::$v(c)), eps.into_iter().map(AnyEp::$v).collect()));
                    }
                )+
                Err(InitError::Config(format!(
                    "conduit {name:?} is not compiled in (compiled in: {})",
                    crate::conduits().join(", ")
                )))
            }
        }

        // SAFETY: every call goes to the chosen conduit's own `unsafe impl`.
        unsafe impl Conduit for AnyConduit {
            type Ep = AnyEp;
            const NAME: &'static str = "any";

            fn env_registries() -> Vec<&'static [EnvVar]> {
                let mut v = vec![crate::ENV_VARS];
                $( $(#[$m])* v.extend(<$t as Conduit>::env_registries()); )+
                v
            }

            fn name(&self) -> &'static str {
                match self { $( $(#[$m])* AnyConduit::$v(c) => c.name(), )+ }
            }

            fn open(
                boot: &mut dyn Bootstrap,
                params: &OpenParams<'_>,
            ) -> Result<(Arc<Self>, Vec<AnyEp>), InitError> {
                let name = crate::select_conduit(params.config.get(crate::CONDUIT_VAR))?;
                Self::open_named(name, boot, params)
            }

            fn finalize(
                &self,
                barrier: &mut dyn FnMut() -> Result<(), gex_core::boot::BootError>,
            ) -> Result<(), gex_core::boot::BootError> {
                match self { $( $(#[$m])* AnyConduit::$v(c) => c.finalize(barrier), )+ }
            }

            fn open_endpoint(self: &Arc<Self>, index: EpIndex) -> Result<AnyEp, ConduitError> {
                match &**self { $( $(#[$m])* AnyConduit::$v(c) => <$t as Conduit>::open_endpoint(c, index).map(AnyEp::$v), )+ }
            }
        }

        // SAFETY: as for `AnyConduit`.
        unsafe impl ConduitEp for AnyEp {
            #[inline]
            fn index(&self) -> EpIndex {
                match self { $( $(#[$m])* AnyEp::$v(e) => e.index(), )+ }
            }
            #[inline]
            fn capabilities(&self) -> Capabilities {
                match self { $( $(#[$m])* AnyEp::$v(e) => e.capabilities(), )+ }
            }
            #[inline]
            fn limits(&self, dst: EpAddr) -> Limits {
                match self { $( $(#[$m])* AnyEp::$v(e) => e.limits(dst), )+ }
            }
            #[inline]
            fn local_segment(&self) -> (NonNull<u8>, usize) {
                match self { $( $(#[$m])* AnyEp::$v(e) => e.local_segment(), )+ }
            }
            #[inline]
            fn peer_segment(&self, dst: EpAddr) -> Option<(NonNull<u8>, usize)> {
                match self { $( $(#[$m])* AnyEp::$v(e) => e.peer_segment(dst), )+ }
            }
            #[inline]
            fn peer_open(&self, dst: EpAddr) -> Result<(), ConduitError> {
                match self { $( $(#[$m])* AnyEp::$v(e) => e.peer_open(dst), )+ }
            }
            #[inline]
            fn inject(&mut self, msg: &OutMsg<'_>, imm: bool) -> Result<Injected, ConduitError> {
                match self { $( $(#[$m])* AnyEp::$v(e) => e.inject(msg, imm), )+ }
            }
            #[inline]
            fn inject_owned(&mut self, msg: OwnedMsg<'_>, imm: bool) -> Result<OwnedInjected, ConduitError> {
                match self { $( $(#[$m])* AnyEp::$v(e) => e.inject_owned(msg, imm), )+ }
            }
            #[inline]
            fn lc_test(&mut self, ticket: u64) -> Option<Vec<u8>> {
                match self { $( $(#[$m])* AnyEp::$v(e) => e.lc_test(ticket), )+ }
            }
            #[inline]
            fn poll<D: Deliver>(&mut self, d: &mut D, budget: usize) -> usize {
                match self { $( $(#[$m])* AnyEp::$v(e) => e.poll(d, budget), )+ }
            }
            #[inline]
            fn has_incoming(&self) -> bool {
                match self { $( $(#[$m])* AnyEp::$v(e) => e.has_incoming(), )+ }
            }
            #[inline]
            fn has_outgoing(&self) -> bool {
                match self { $( $(#[$m])* AnyEp::$v(e) => e.has_outgoing(), )+ }
            }
            #[inline]
            fn block(&mut self, timeout: Duration) {
                match self { $( $(#[$m])* AnyEp::$v(e) => e.block(timeout), )+ }
            }
            fn sleeper(&mut self) -> Option<Sleeper> {
                match self { $( $(#[$m])* AnyEp::$v(e) => e.sleeper(), )+ }
            }
            fn describe(&self) -> String {
                match self { $( $(#[$m])* AnyEp::$v(e) => e.describe(), )+ }
            }
            #[inline]
            fn prepare(&mut self, req: &PrepareReq, imm: bool) -> Result<Prepare, ConduitError> {
                match self { $( $(#[$m])* AnyEp::$v(e) => e.prepare(req, imm), )+ }
            }
            #[inline]
            fn commit(&mut self, msg: &OutMsg<'_>) -> Result<(), ConduitError> {
                match self { $( $(#[$m])* AnyEp::$v(e) => e.commit(msg), )+ }
            }
            #[inline]
            fn cancel(&mut self) {
                match self { $( $(#[$m])* AnyEp::$v(e) => e.cancel(), )+ }
            }
            #[inline]
            fn aux(&self, dst: EpAddr) -> Option<NonNull<u8>> {
                match self { $( $(#[$m])* AnyEp::$v(e) => e.aux(dst), )+ }
            }
            #[inline]
            fn wake(&self, dst: EpAddr) {
                match self { $( $(#[$m])* AnyEp::$v(e) => e.wake(dst), )+ }
            }
            #[inline]
            unsafe fn native_put(&mut self, to: SegRange, src: *const u8) -> NativeResult {
                // SAFETY: forwarded contract.
                match self { $( $(#[$m])* AnyEp::$v(e) => unsafe { e.native_put(to, src) }, )+ }
            }
            #[inline]
            unsafe fn native_put_relaxed(&mut self, to: SegRange, src: *const u8) -> NativeResult {
                // SAFETY: forwarded contract.
                match self { $( $(#[$m])* AnyEp::$v(e) => unsafe { e.native_put_relaxed(to, src) }, )+ }
            }
            #[inline]
            fn native_flush(&mut self, dst: EpAddr) -> Result<Native, ConduitError> {
                match self { $( $(#[$m])* AnyEp::$v(e) => e.native_flush(dst), )+ }
            }
            #[inline]
            unsafe fn native_get(&mut self, from: SegRange, out: *mut u8) -> NativeResult {
                // SAFETY: forwarded contract.
                match self { $( $(#[$m])* AnyEp::$v(e) => unsafe { e.native_get(from, out) }, )+ }
            }
            #[inline]
            fn native_atomic_supported(&self, kind: AtomicKind, base: AtomicBase, fetch: bool) -> bool {
                match self { $( $(#[$m])* AnyEp::$v(e) => e.native_atomic_supported(kind, base, fetch), )+ }
            }
            #[inline]
            unsafe fn native_atomic(&mut self, op: &NativeAtomic, result: *mut u64) -> NativeResult {
                // SAFETY: forwarded contract.
                match self { $( $(#[$m])* AnyEp::$v(e) => unsafe { e.native_atomic(op, result) }, )+ }
            }
            #[inline]
            fn native_test(&mut self, ticket: u64) -> bool {
                match self { $( $(#[$m])* AnyEp::$v(e) => e.native_test(ticket), )+ }
            }
        }
    };
}

crate::for_each_conduit!(any_conduit);
