//! Configuration of the simulated fabric.

use gex_core::InitError;
use gex_core::config::Config;
use std::time::Duration;

/// A delay in the simulator's two clocks. A message is deliverable once **both** parts
/// have elapsed since it was queued:
/// - `polls`: the receiving endpoint has polled this many times (deterministic, the
///   clock of choice for reproducible tests);
/// - `nanos`: this much wall-clock time has passed (realistic, not reproducible).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Delay {
    /// Receiver polls.
    pub polls: u64,
    /// Wall-clock nanoseconds.
    pub nanos: u64,
}

impl Delay {
    /// No delay.
    pub const ZERO: Delay = Delay { polls: 0, nanos: 0 };
    /// A delay of `n` receiver polls.
    pub const fn polls(n: u64) -> Self {
        Delay { polls: n, nanos: 0 }
    }
    /// A delay of `n` nanoseconds.
    pub const fn nanos(n: u64) -> Self {
        Delay { polls: 0, nanos: n }
    }
    /// True if both parts are zero.
    pub const fn is_zero(&self) -> bool {
        self.polls == 0 && self.nanos == 0
    }
}

/// A deliberate conduit bug, for checking that the conformance suite (and other tests)
/// catch it. Not for anything else.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Fault {
    /// A correct conduit.
    #[default]
    None,
    /// Each endpoint's `n`-th request (1-based) is reported sent but never delivered.
    DropRequest(u64),
    /// Each endpoint's `n`-th request is delivered twice.
    DuplicateRequest(u64),
    /// The last byte of every Medium payload of 2 bytes or more is inverted on delivery.
    CorruptMedium,
    /// Long payloads are written one byte after their offset (when that fits).
    ShiftLong,
    /// A non-waiting request that finds its lane full is sent anyway, yet reported as
    /// `WouldBlock`.
    IgnoreImmediate,
    /// `BLOCKING_WAIT` is reported, but `block` returns at once.
    FakeBlockingWait,
}

/// Configuration of a simulated fabric ([`SimFabric`](super::SimFabric)).
///
/// Delivery model: every message gets a due time = queueing time + `latency` + a
/// random extra delay drawn uniformly from `0..=jitter` (each part separately), and a
/// random tie-break key. Both draws come from a generator owned by the *sending*
/// endpoint and seeded by `(seed, sender rank, sender EP)`, so the schedule of each
/// sender's stream is a pure function of the seed and the stream.
/// - `reorder == false`: per (sender EP, receiver EP, request/reply) FIFO; a message
///   waits for the ones queued before it on the same lane.
/// - `reorder == true`: deliverable messages are delivered in (due, key) order, so
///   messages overtake each other, also messages of one sender to one receiver.
///
/// With poll-based delays only, and a receiver that starts polling after its senders
/// queued, the delivery order is fully reproducible from the seed (tested); wall-clock
/// delays and thread interleavings make it reproducible only per sender stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimConfig {
    /// Seed of every sender's schedule generator (`GEX_SIM_SEED`).
    pub seed: u64,
    /// One-way latency (`GEX_SIM_LATENCY_NS` sets `latency.nanos`). LogGP's *L*.
    pub latency: Delay,
    /// Upper bound of the random extra delay of each message.
    pub jitter: Delay,
    /// LogGP's *g* (minimum interval between injections of one endpoint). Kept for the
    /// performance model of the autotuner; **not enforced** by the simulator yet.
    pub gap: Delay,
    /// Let messages overtake each other (`GEX_SIM_REORDER`), see the type docs.
    pub reorder: bool,
    /// Bytes of requests in flight per ordered endpoint pair before request injection
    /// reports back-pressure (each message costs [`MSG_OVERHEAD`](super::MSG_OVERHEAD)
    /// plus 4 bytes per argument plus its payload). A message is always accepted into
    /// an empty lane. Replies never count and never block.
    pub ring_capacity: usize,
    /// Maximum number of AM arguments (at least 16).
    pub max_args: usize,
    /// Largest Medium payload to a peer on the same host.
    pub max_medium: usize,
    /// Largest Medium payload to a peer on another host (`None`: same as `max_medium`).
    /// Per-peer limits exercise the core's per-peer queries.
    pub max_medium_off_host: Option<usize>,
    /// Largest Long payload (also bounded by the target segment).
    pub max_long: usize,
    /// [`run_sim`](super::run_sim) places rank `r` on host `r / ranks_per_host`
    /// (0: every rank on host 0). Ranks on different hosts do not map each other's
    /// segments.
    pub ranks_per_host: u32,
    /// Host of every rank, by rank (empty: from `ranks_per_host`); a job with more
    /// ranks than listed puts the others on host 0. Places ranks round-robin or on
    /// hosts of unequal sizes.
    pub placement: Vec<u32>,
    /// Map neighbours' segments ([`Capabilities::SHARED_MEMORY`](gex_core::Capabilities)).
    pub shared_memory: bool,
    /// With `shared_memory`: `peer_segment` reports at most this many bytes of another
    /// endpoint's segment (`None`: all of it). The conduit contract lets a conduit map
    /// less than the layout's length; what lies past the mapping must then take the AM
    /// or native path, which tests check with this.
    pub mapped_len: Option<usize>,
    /// Sleep in `block` on a per-endpoint doorbell
    /// ([`Capabilities::BLOCKING_WAIT`](gex_core::Capabilities)); otherwise `block` only
    /// yields the CPU.
    pub blocking_wait: bool,
    /// With `blocking_wait`: sleep this long in `block` at most instead of the
    /// endpoint's timeout (`None`: the endpoint's, 10 ms). A long nap turns a lost
    /// wake-up into a stall a test can see, instead of a 10 ms delay.
    pub nap: Option<Duration>,
    /// Build negotiated payloads in a conduit-owned buffer
    /// ([`Capabilities::NP_IN_PLACE`](gex_core::Capabilities)); otherwise the core's
    /// bounce buffer is used.
    pub np_in_place: bool,
    /// Owned Medium payloads ([`request_owned`](gex_core::Endpoint::request_owned))
    /// travel with the message and are handed back only once it was delivered
    /// (deferred local completion); otherwise they complete at injection.
    pub deferred_lc: bool,
    /// Yield the CPU on a poll that found nothing deliverable and on back-pressure, so
    /// many rank threads on few cores still make progress quickly.
    pub yield_when_idle: bool,
    /// A simulated NIC for native RMA
    /// ([`Capabilities::NATIVE_RMA`](gex_core::Capabilities)): `native_put`/`native_get`
    /// to peers on *other* simulated hosts answer `Pending`, and the initiator's thread
    /// moves the bytes at a later poll (after `latency`, at least one poll); peers on
    /// the same host answer `Unsupported`.
    pub native_rma: bool,
    /// With `native_rma`: `native_put_relaxed` completes once the NIC has read the
    /// source and holds the bytes until a `native_flush` of the target (default true,
    /// so every native-RMA test checks that the layers above flush; false: relaxed puts
    /// are plain puts and flushes are no-ops).
    pub relaxed_puts: bool,
    /// Simulated NIC atomics ([`Capabilities::NATIVE_ATOMICS`](gex_core::Capabilities))
    /// for every peer, this rank included, performed like native RMA at a later poll
    /// of the initiator, as CPU atomics (sequentially consistent) on the target's
    /// segment memory.
    pub native_atomics: bool,
    /// With `native_atomics`: the operations offered (`None`: all of them, bitwise
    /// ones for integers only). Lets tests check that a domain whose op set is not
    /// fully offered falls back to CPU atomics.
    pub native_atomic_bases: Option<Vec<gex_core::spi::AtomicBase>>,
    /// With `native_rma` or `native_atomics`: native operations one endpoint may have
    /// queued on its NIC (issued, not yet performed) before the next answers
    /// [`Native::WouldBlock`](gex_core::spi::Native::WouldBlock) (`None`: no limit).
    /// Lets tests block a transfer by back-pressure while its first pieces are in
    /// flight.
    pub native_queue: Option<usize>,
    /// A deliberate bug to inject (default: none). For testing tests.
    pub fault: Fault,
    /// Watchdog of [`run_sim`](super::run_sim) and bound of every bootstrap collective:
    /// a job still running after this long fails loudly.
    pub timeout: Duration,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            seed: 0,
            latency: Delay::ZERO,
            jitter: Delay::ZERO,
            gap: Delay::ZERO,
            reorder: false,
            // Under Miri 8 KiB: lanes fill after a few dozen requests, so floods that
            // must see back-pressure stay short.
            ring_capacity: if cfg!(miri) { 8 << 10 } else { 64 << 10 },
            max_args: 16,
            // 4 KiB under Miri: the conformance cases send maximal payloads.
            max_medium: if cfg!(miri) { 4 << 10 } else { 16 << 10 },
            max_medium_off_host: None,
            max_long: 1 << 20,
            ranks_per_host: 0,
            placement: Vec::new(),
            shared_memory: true,
            mapped_len: None,
            blocking_wait: true,
            nap: None,
            np_in_place: true,
            deferred_lc: true,
            yield_when_idle: true,
            native_rma: false,
            relaxed_puts: true,
            native_atomics: false,
            native_atomic_bases: None,
            native_queue: None,
            fault: Fault::None,
            // Under Miri a case takes minutes of its clock, which advances with the
            // interpreted code.
            timeout: Duration::from_secs(if cfg!(miri) { 600 } else { 60 }),
        }
    }
}

/// Builder methods of [`SimConfig`] that set one field: `name(value) -> Self`.
macro_rules! setters {
    ($($(#[$doc:meta])* $field:ident: $ty:ty;)+) => {$(
        $(#[$doc])*
        pub fn $field(mut self, $field: $ty) -> Self {
            self.$field = $field;
            self
        }
    )+};
}

impl SimConfig {
    /// The defaults overridden by `GEX_SIM_SEED`, `GEX_SIM_LATENCY_NS` and
    /// `GEX_SIM_REORDER` from the process environment.
    ///
    /// # Errors
    /// [`InitError::Config`] naming a malformed variable.
    pub fn from_env() -> Result<Self, InitError> {
        Self::default().with_config(&Config::from_env())
    }

    /// `self` overridden by the `GEX_SIM_*` variables set in `c` (unset ones keep
    /// their value). When a reorder is switched on this way and no jitter was set, a
    /// jitter of 4 polls is added so that overtaking happens across polls too.
    ///
    /// # Errors
    /// [`InitError::Config`] naming a malformed variable.
    pub fn with_config(mut self, c: &Config) -> Result<Self, InitError> {
        self.seed = c.u64("GEX_SIM_SEED", self.seed)?;
        self.latency.nanos = c.u64("GEX_SIM_LATENCY_NS", self.latency.nanos)?;
        let reorder = c.bool("GEX_SIM_REORDER", self.reorder)?;
        if reorder && !self.reorder && self.jitter.is_zero() {
            self.jitter = Delay::polls(4);
        }
        self.reorder = reorder;
        Ok(self)
    }

    setters! {
        /// Sets the seed.
        seed: u64;
        /// Sets the latency.
        latency: Delay;
        /// Sets the jitter.
        jitter: Delay;
        /// Switches reordering on or off.
        reorder: bool;
        /// Sets the request capacity per endpoint pair, in bytes.
        ring_capacity: usize;
        /// Sets the number of ranks per simulated host (0: one host).
        ranks_per_host: u32;
        /// Places rank `r` on host `hosts[r]` (instead of `ranks_per_host`).
        placement: Vec<u32>;
    }
    /// Switches the simulated NIC (native RMA and NIC atomics) on or off.
    pub fn native(mut self, rma: bool, atomics: bool) -> Self {
        self.native_rma = rma;
        self.native_atomics = atomics;
        self
    }
    /// Sets the longest sleep in `block` (the `nap` field).
    pub fn nap(mut self, nap: Duration) -> Self {
        self.nap = Some(nap);
        self
    }
    setters! {
        /// Sets the watchdog timeout.
        timeout: Duration;
    }

    /// Host id of every rank of a job of `ranks` ranks, from `placement` or
    /// `ranks_per_host`.
    pub fn hosts(&self, ranks: u32) -> Vec<u32> {
        (0..ranks)
            .map(|r| match self.placement.get(r as usize) {
                Some(&h) => h,
                None if !self.placement.is_empty() => 0,
                None => r.checked_div(self.ranks_per_host).unwrap_or(0),
            })
            .collect()
    }

    pub(crate) fn validate(&self) -> Result<(), String> {
        if self.max_args < gex_core::spi::MIN_MAX_ARGS {
            return Err(format!(
                "max_args {} is below the minimum {}",
                self.max_args,
                gex_core::spi::MIN_MAX_ARGS
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_overrides() {
        let c = Config::from_pairs([
            ("GEX_SIM_SEED", "42"),
            ("GEX_SIM_LATENCY_NS", "1500"),
            ("GEX_SIM_REORDER", "1"),
        ]);
        let s = SimConfig::default().with_config(&c).unwrap();
        assert_eq!(s.seed, 42);
        assert_eq!(s.latency, Delay::nanos(1500));
        assert!(s.reorder);
        assert_eq!(s.jitter, Delay::polls(4));
        let bad = Config::from_pairs([("GEX_SIM_SEED", "x")]);
        assert!(
            SimConfig::default()
                .with_config(&bad)
                .unwrap_err()
                .to_string()
                .contains("GEX_SIM_SEED")
        );
        let none = SimConfig::default()
            .seed(9)
            .with_config(&Config::default())
            .unwrap();
        assert_eq!(none.seed, 9);
    }

    #[test]
    fn hosts_layout() {
        assert_eq!(SimConfig::default().hosts(3), vec![0, 0, 0]);
        assert_eq!(
            SimConfig::default().ranks_per_host(2).hosts(5),
            vec![0, 0, 1, 1, 2]
        );
        assert_eq!(
            SimConfig::default()
                .ranks_per_host(2)
                .placement(vec![0, 1, 2, 0])
                .hosts(5),
            vec![0, 1, 2, 0, 0]
        );
    }
}
