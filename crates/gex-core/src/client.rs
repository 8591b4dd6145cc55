//! The client: one per rank and job. Owns the conduit instance and the bootstrap, and
//! hands out endpoints.

use crate::boot::{BootError, Bootstrap};
use crate::config::{Config, EnvVar, resolve_wait};
use crate::endpoint::{Endpoint, OwnedEndpoint};
use crate::error::{EpError, InitError};
use crate::layer::{Attacher, Layer, LayerInfo, LayerSet, Place};
use crate::spi::{Conduit, ConduitEp, JobLayout, OpenParams};
use crate::types::{EpIndex, Rank};
use gex_sync::wait::WaitPolicy;
use std::any::Any;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Default number of `sched_yield`s between the spin and the sleep phases of
/// spin-then-block (`GEX_YIELDS`).
pub const DEFAULT_YIELDS: u32 = 64;

/// Default of `GEX_SHARE_INTERVAL`: under spin-then-block, a rank that keeps injecting
/// yields its core at least this often.
pub const DEFAULT_SHARE_INTERVAL: Duration = Duration::from_micros(20);

/// Default segment length per endpoint.
pub const DEFAULT_SEGMENT_SIZE: usize = 64 << 20;

/// Default endpoint capacity of a rank (`GEX_MAX_ENDPOINTS`): the endpoints made at
/// initialisation plus those [`Client::create_endpoint`] may make.
pub const DEFAULT_MAX_ENDPOINTS: u16 = 16;

/// Default longest nap of an idle progress thread (`GEX_PROGRESS_INTERVAL`).
pub const DEFAULT_PROGRESS_INTERVAL: Duration = Duration::from_micros(20);

/// State every endpoint of a client shares (read-only after initialisation).
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) rank: Rank,
    pub(crate) size: u32,
    pub(crate) layout: JobLayout,
    /// `sched_yield`s between spinning and sleeping under spin-then-block.
    pub(crate) yields: u32,
    /// A wait without progress for this long prints the endpoint's report (None: never).
    pub(crate) stall_report: Option<Duration>,
    /// Under spin-then-block: the longest an endpoint injects without yielding its
    /// core (`GEX_SHARE_INTERVAL`; None: never yields while injecting).
    pub(crate) share: Option<Duration>,
    /// The configuration the client was built with.
    pub(crate) config: Config,
    /// Endpoint indices the core accepts per rank: `layout.max_eps` when the conduit
    /// opens endpoints at run time ([`crate::spi::Capabilities::RUNTIME_ENDPOINTS`]),
    /// `layout.eps` otherwise.
    pub(crate) cap: Vec<u16>,
    /// Whether the conduit opens endpoints at run time.
    pub(crate) runtime_eps: bool,
}

/// The shape of the job, for choosing settings that depend on it
/// ([`ClientBuilder::segment_size_with`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobShape {
    /// Ranks in the job.
    pub size: u32,
    /// This rank.
    pub rank: u32,
    /// Ranks on this rank's host (this one included).
    pub local_size: u32,
}

/// How the segment length is chosen.
enum SegSize {
    Fixed(usize),
    Per(Box<dyn Fn(JobShape) -> usize + Send>),
}

/// Builds a [`Client`]. Values given here are overridden by the matching `GEX_*`
/// variables (see [`crate::config::ENV_VARS`]), so a job can be retuned without
/// recompiling.
///
/// `L` is the list of layers every endpoint of the client carries, added with
/// [`layer`](Self::layer).
pub struct ClientBuilder<L: LayerSet = ()> {
    segment_size: Option<SegSize>,
    endpoints: Option<u16>,
    max_endpoints: Option<u16>,
    wait: Option<WaitPolicy>,
    config: Option<Config>,
    context: Option<Arc<dyn Any + Send + Sync>>,
    progress_thread: Option<bool>,
    _layers: PhantomData<fn() -> L>,
}

impl Default for ClientBuilder<()> {
    fn default() -> Self {
        Self::new()
    }
}

impl<L: LayerSet> std::fmt::Debug for ClientBuilder<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut layers = Vec::new();
        L::infos(&mut layers);
        f.debug_struct("ClientBuilder")
            .field(
                "segment_size",
                &match &self.segment_size {
                    None => "default".to_string(),
                    Some(SegSize::Fixed(n)) => n.to_string(),
                    Some(SegSize::Per(_)) => "per job".to_string(),
                },
            )
            .field("endpoints", &self.endpoints)
            .field("max_endpoints", &self.max_endpoints)
            .field("wait", &self.wait)
            .field("progress_thread", &self.progress_thread)
            .field("layers", &layers.iter().map(|l| l.name).collect::<Vec<_>>())
            .finish()
    }
}

impl ClientBuilder<()> {
    /// A builder with defaults (one endpoint, 64 MiB segment, automatic wait policy,
    /// no layers, no progress thread).
    pub fn new() -> Self {
        ClientBuilder {
            segment_size: None,
            endpoints: None,
            max_endpoints: None,
            wait: None,
            config: None,
            context: None,
            progress_thread: None,
            _layers: PhantomData,
        }
    }
}

/// Builder methods of [`ClientBuilder`] that set one optional field:
/// `name(value) -> Self` stores `Some(value)` in `field` (`name` unless given).
macro_rules! option_setters {
    ($($(#[$doc:meta])* $name:ident $(=> $field:ident)?: $ty:ty;)+) => {$(
        $(#[$doc])*
        pub fn $name(mut self, value: $ty) -> Self {
            option_setters!(@set self, $name $($field)?) = Some(value);
            self
        }
    )+};
    (@set $s:ident, $name:ident) => { $s.$name };
    (@set $s:ident, $name:ident $field:ident) => { $s.$field };
}

impl<L: LayerSet> ClientBuilder<L> {
    /// Adds layer `X` after the layers added before (the order must be the same on
    /// every rank; a layer that uses another is added after it).
    pub fn layer<X: Layer>(self) -> ClientBuilder<(L, X)> {
        ClientBuilder {
            segment_size: self.segment_size,
            endpoints: self.endpoints,
            max_endpoints: self.max_endpoints,
            wait: self.wait,
            config: self.config,
            context: self.context,
            progress_thread: self.progress_thread,
            _layers: PhantomData,
        }
    }
    /// Segment length of each endpoint of this rank.
    pub fn segment_size(mut self, bytes: usize) -> Self {
        self.segment_size = Some(SegSize::Fixed(bytes));
        self
    }
    /// Segment length chosen from the job's shape once it is known (e.g. a share of a
    /// host's memory per local rank). `GEX_SEGMENT_SIZE` still overrides it.
    ///
    /// ```
    /// use gex_core::{boot::Singleton, loopback::Loopback, ClientBuilder};
    /// let c = ClientBuilder::new()
    ///     .segment_size_with(|job| (1 << 20) / job.local_size as usize)
    ///     .init::<Loopback>(Box::new(Singleton::new()))?;
    /// assert_eq!(c.layout().seg_len[0], 1 << 20);
    /// # Ok::<(), gex_core::InitError>(())
    /// ```
    pub fn segment_size_with(mut self, f: impl Fn(JobShape) -> usize + Send + 'static) -> Self {
        self.segment_size = Some(SegSize::Per(Box::new(f)));
        self
    }
    option_setters! {
        /// Number of endpoints provisioned (EP 0 plus extra communication domains).
        endpoints: u16;
        /// Endpoint capacity of this rank: the endpoints made at init plus those
        /// [`Client::create_endpoint`] may make over the client's life (`GEX_MAX_ENDPOINTS`,
        /// when set, overrides it; default [`DEFAULT_MAX_ENDPOINTS`]; never below
        /// [`endpoints`](Self::endpoints)).
        ///
        /// ```
        /// use gex_core::{ClientBuilder, boot::Singleton, loopback::Loopback};
        /// let client = ClientBuilder::new()
        ///     .segment_size(4096)
        ///     .max_endpoints(3)
        ///     .init::<Loopback>(Box::new(Singleton::new()))?;
        /// let (_a, _b) = (client.create_endpoint()?, client.create_endpoint()?);
        /// assert!(client.create_endpoint().is_err()); // 1 at init + 2 at run time
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        max_endpoints: u16;
        /// Sets the wait policy (`GEX_WAIT`, when set, overrides it; default automatic).
        wait_policy => wait: WaitPolicy;
        /// Gives every endpoint a progress thread that polls it while the rank computes
        /// outside gex, so peers' AM-path operations are served (`GEX_PROGRESS_THREAD`
        /// overrides it). Endpoint calls then take a lock word the thread shares.
        progress_thread: bool;
        /// Uses this configuration **instead of** the process environment: no `GEX_*`
        /// variable of the environment is read (tests and embedders that want a fixed
        /// configuration). To change a few settings and keep the environment's, use
        /// [`setting`](Self::setting), or start from [`Config::from_env`] and
        /// [`Config::set`].
        ///
        /// ```
        /// use gex_core::{ClientBuilder, Config};
        /// // Only GEX_WAIT is set: a GEX_SPIN in the environment is ignored.
        /// let b = ClientBuilder::new().config(Config::from_pairs([("GEX_WAIT", "block")]));
        /// # let _ = b;
        /// ```
        config: Config;
    }
    /// Sets one `GEX_*` setting over the configuration: the process environment's (read
    /// now, at the first `setting`) unless [`config`](Self::config) gave one before.
    /// A later `config` replaces everything set so far.
    ///
    /// ```
    /// use gex_core::{boot::Singleton, loopback::Loopback, ClientBuilder};
    /// let client = ClientBuilder::new()
    ///     .setting("GEX_WAIT", "block")
    ///     .init::<Loopback>(Box::new(Singleton::new()))?;
    /// assert_eq!(client.config().get("GEX_WAIT"), Some("block"));
    /// # Ok::<(), gex_core::InitError>(())
    /// ```
    pub fn setting(mut self, name: &str, value: impl Into<String>) -> Self {
        self.config
            .get_or_insert_with(Config::from_env)
            .set(name, value);
        self
    }
    option_setters! {
        /// Hands a conduit-specific object to [`Conduit::open`] (e.g. the simulated fabric
        /// of the test kit).
        conduit_context => context: Arc<dyn Any + Send + Sync>;
    }

    /// Every `GEX_*` registry a client of conduit `C` built by this builder reads:
    /// the core's, the conduit's and each layer's.
    pub fn env_registries_of<C: Conduit>(&self) -> Vec<&'static [EnvVar]> {
        Self::env_registries::<C>()
    }

    fn env_registries<C: Conduit>() -> Vec<&'static [EnvVar]> {
        let mut infos = Vec::new();
        L::infos(&mut infos);
        let mut v: Vec<&'static [EnvVar]> = vec![crate::config::ENV_VARS];
        v.extend(C::env_registries());
        v.extend(infos.iter().map(|i| i.env_vars));
        v
    }

    /// The endpoints opened at init and the most a rank may have (`GEX_ENDPOINTS`,
    /// `GEX_MAX_ENDPOINTS` over the builder's values), checked.
    fn endpoint_counts(&self, config: &Config) -> Result<(u16, u16), InitError> {
        let eps = config.u64("GEX_ENDPOINTS", self.endpoints.unwrap_or(1) as u64)?;
        let eps = u16::try_from(eps).ok().filter(|&e| e >= 1).ok_or_else(|| {
            InitError::Config(format!(
                "GEX_ENDPOINTS/endpoints must be 1..=65535, got {eps}"
            ))
        })?;
        let max_eps = config.u64(
            "GEX_MAX_ENDPOINTS",
            u64::from(self.max_endpoints.unwrap_or(DEFAULT_MAX_ENDPOINTS)),
        )?;
        let max_eps = u16::try_from(max_eps).map_err(|_| {
            InitError::Config(format!(
                "GEX_MAX_ENDPOINTS must be 0..=65535, got {max_eps}"
            ))
        })?;
        Ok((eps, max_eps.max(eps)))
    }

    /// Initialises the client: collective over every rank of the job.
    ///
    /// What the bootstrap says is checked before it is used (the bootstrap is a safe
    /// trait): this rank below the job size, one host id per rank, and in the layout
    /// exchange one blob per rank, this rank's own unchanged, every blob naming the
    /// rank at its index, the same job size and the host this rank's bootstrap gives
    /// that rank. The conduit then checks what its peers publish against the agreed
    /// layout (see the conduit guide).
    ///
    /// # Errors
    /// [`InitError::Config`] for bad settings or layers that do not fit (handler or
    /// auxiliary budgets), or a bootstrap whose host ids are not one per rank;
    /// [`InitError::Boot`] if the bootstrap fails, or says something inconsistent
    /// ([`BootError::Protocol`] naming the rank and the field: a rank outside the job,
    /// a layout exchange that disagrees with it); [`InitError::Conduit`]/
    /// [`InitError::Os`] if the conduit cannot open, or a peer published something that
    /// disagrees with the layout.
    pub fn init<C: Conduit>(
        mut self,
        mut boot: Box<dyn Bootstrap>,
    ) -> Result<Client<C>, InitError> {
        let config = self.config.take().unwrap_or_else(Config::from_env);
        let (shape, hosts) = checked_shape(&*boot)?;
        let JobShape { size, rank, .. } = shape;
        let default_seg = match &self.segment_size {
            None => DEFAULT_SEGMENT_SIZE,
            Some(SegSize::Fixed(n)) => *n,
            Some(SegSize::Per(f)) => f(shape),
        };
        let seg = config.size("GEX_SEGMENT_SIZE", default_seg)?;
        let (eps, max_eps) = self.endpoint_counts(&config)?;
        let progress = config.bool("GEX_PROGRESS_THREAD", self.progress_thread.unwrap_or(false))?;
        let interval = config.duration("GEX_PROGRESS_INTERVAL", DEFAULT_PROGRESS_INTERVAL)?;
        let mode = config.wait_mode()?;
        // The layers: handler blocks and auxiliary slices, identical on every rank.
        let mut infos = Vec::new();
        L::infos(&mut infos);
        let places = places(&infos)?;
        let aux_len = places
            .iter()
            .map(|p| p.aux_off + p.aux_len)
            .max()
            .unwrap_or(0);
        if rank == 0 && config.bool("GEX_VERBOSEENV", false)? {
            eprint!(
                "gex: configuration (conduit {}, layers [{}]):\n{}",
                config.get("GEX_CONDUIT").unwrap_or(C::NAME),
                infos.iter().map(|i| i.name).collect::<Vec<_>>().join(", "),
                config.describe(&Self::env_registries::<C>())
            );
        }
        // Agree on the job layout: every rank publishes its part, checked against what
        // this rank's bootstrap says (`agree_layout`).
        let mine = LayoutBlob {
            rank,
            size,
            eps,
            seg: seg as u64,
            host: hosts[rank as usize],
            pid: std::process::id(),
            max_eps,
        }
        .encode();
        let all = boot.exchange(&mine)?;
        let layout = agree_layout(rank, &hosts, &mine, &all)?;
        check_threads_asked(&config, &layout, rank)?;
        let on_host = layout.neighbours(rank).len();
        // GEX_WAIT, when set, overrides the builder like every other GEX_* variable.
        let mode = match (config.get("GEX_WAIT"), self.wait) {
            (None, Some(p)) => crate::config::WaitMode::Fixed(p),
            _ => mode,
        };
        let policy = resolve_wait(mode, on_host);
        let (conduit, ceps) = {
            let params = OpenParams {
                rank,
                layout: &layout,
                wait: policy,
                config: &config,
                context: self.context.as_deref(),
                aux_len,
            };
            C::open(&mut *boot, &params)?
        };
        if ceps.len() != eps as usize {
            return Err(InitError::Conduit {
                conduit: C::NAME,
                msg: format!("opened {} endpoints, {eps} asked", ceps.len()),
            });
        }
        tracing::debug!(
            rank,
            size,
            conduit = C::NAME,
            ?policy,
            "gex client initialised"
        );
        let yields = config.u64("GEX_YIELDS", DEFAULT_YIELDS as u64)?;
        let yields = u32::try_from(yields)
            .map_err(|_| InitError::Config("GEX_YIELDS is too large".into()))?;
        let stall = config.u64("GEX_STALL_REPORT", 60)?;
        let share = config.duration("GEX_SHARE_INTERVAL", DEFAULT_SHARE_INTERVAL)?;
        let share = (!share.is_zero()).then_some(share);
        if config.bool("GEX_REPORT_SIGNAL", true)? {
            gex_sync::signal::install_report_signal();
        }
        let runtime = ceps.first().is_some_and(|e| {
            e.capabilities()
                .contains(crate::spi::Capabilities::RUNTIME_ENDPOINTS)
        });
        let cap = if runtime {
            layout.max_eps.clone()
        } else {
            layout.eps.clone()
        };
        let next = layout.eps[rank as usize];
        let shared = Arc::new(Shared {
            rank,
            size,
            cap,
            runtime_eps: runtime,
            layout,
            yields,
            stall_report: (stall > 0).then(|| Duration::from_secs(stall)),
            share,
            config,
        });
        let mut attachers = Vec::new();
        L::attachers::<C>(&mut attachers);
        Ok(Client {
            shared,
            conduit,
            policy,
            eps: Mutex::new(ceps.into_iter().map(Some).collect()),
            next: Mutex::new(next),
            boot: Mutex::new(Some(boot)),
            layers: attachers.into_iter().zip(places).collect(),
            infos,
            progress: progress.then_some(interval),
        })
    }
}

/// This rank's place in the job and the host id of every rank, as the bootstrap says
/// them, checked first (`Bootstrap` is a safe trait): the rank below the job size, one
/// host id per rank.
fn checked_shape(boot: &dyn Bootstrap) -> Result<(JobShape, Vec<u32>), InitError> {
    let rank = boot.rank();
    let size = boot.size();
    if rank >= size {
        return Err(InitError::Boot(BootError::Protocol(format!(
            "the {} bootstrap says this is rank {rank} of a job of {size} ranks",
            boot.name()
        ))));
    }
    let hosts = boot.host_ids().to_vec();
    if hosts.len() != size as usize {
        return Err(InitError::Config(format!(
            "bootstrap gave {} host ids for {size} ranks",
            hosts.len()
        )));
    }
    let local_size = hosts
        .iter()
        .filter(|&&h| Some(&h) == hosts.get(rank as usize))
        .count() as u32;
    let shape = JobShape {
        size,
        rank,
        local_size,
    };
    Ok((shape, hosts))
}

/// What every rank publishes in the layout exchange of [`ClientBuilder::init`]: who it
/// is (as its own bootstrap says) and its part of the [`JobLayout`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LayoutBlob {
    rank: u32,
    size: u32,
    eps: u16,
    seg: u64,
    host: u32,
    pid: u32,
    max_eps: u16,
}

impl LayoutBlob {
    /// Bytes of an encoded blob: rank, size, endpoints, segment length, host id,
    /// process id, endpoint capacity (little-endian).
    const LEN: usize = 4 + 4 + 2 + 8 + 4 + 4 + 2;

    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(Self::LEN);
        b.extend_from_slice(&self.rank.to_le_bytes());
        b.extend_from_slice(&self.size.to_le_bytes());
        b.extend_from_slice(&self.eps.to_le_bytes());
        b.extend_from_slice(&self.seg.to_le_bytes());
        b.extend_from_slice(&self.host.to_le_bytes());
        b.extend_from_slice(&self.pid.to_le_bytes());
        b.extend_from_slice(&self.max_eps.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Option<LayoutBlob> {
        let b: &[u8; Self::LEN] = b.try_into().ok()?;
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut seg = [0u8; 8];
        seg.copy_from_slice(&b[10..18]);
        Some(LayoutBlob {
            rank: u32_at(0),
            size: u32_at(4),
            eps: u16::from_le_bytes([b[8], b[9]]),
            seg: u64::from_le_bytes(seg),
            host: u32_at(18),
            pid: u32_at(22),
            max_eps: u16::from_le_bytes([b[26], b[27]]),
        })
    }
}

/// The job layout from the blobs `all` of the layout exchange, as rank `rank` (whose
/// bootstrap gave `hosts`, and which published `mine`) checks them: one blob per rank,
/// this rank's own unchanged, and each naming the rank at its index, the job size and
/// the host this rank's bootstrap says, and at least one endpoint. The exchange comes
/// from the bootstrap, a safe trait: nothing here trusts it, allocates what it claims
/// or panics on it.
///
/// # Errors
/// [`InitError::Boot`] ([`BootError::Protocol`]) naming the rank whose blob disagrees
/// and the field.
fn agree_layout(
    rank: u32,
    hosts: &[u32],
    mine: &[u8],
    all: &[Vec<u8>],
) -> Result<JobLayout, InitError> {
    let size = hosts.len();
    let bad = |m: String| InitError::Boot(BootError::Protocol(m));
    if all.len() != size || all.get(rank as usize).map(Vec::as_slice) != Some(mine) {
        return Err(bad(format!(
            "the bootstrap exchange returned {} layout blobs for {size} ranks{}",
            all.len(),
            if all.len() == size {
                ", and not this rank's own blob at its rank"
            } else {
                ""
            }
        )));
    }
    let mut layout = JobLayout {
        eps: Vec::with_capacity(size),
        max_eps: Vec::with_capacity(size),
        seg_len: Vec::with_capacity(size),
        host: hosts.to_vec(),
        process: Vec::with_capacity(size),
    };
    for (r, b) in all.iter().enumerate() {
        let p = LayoutBlob::decode(b).ok_or_else(|| {
            bad(format!(
                "layout blob of rank {r} has {} bytes, not {}",
                b.len(),
                LayoutBlob::LEN
            ))
        })?;
        if p.rank as usize != r {
            return Err(bad(format!(
                "rank {r}'s layout blob says it is rank {}",
                p.rank
            )));
        }
        if p.size as usize != size {
            return Err(bad(format!(
                "rank {r}'s layout blob says the job has {} ranks, this rank's bootstrap says {size}",
                p.size
            )));
        }
        if p.host != hosts[r] {
            return Err(bad(format!(
                "rank {r}'s layout blob says it is on host {}, this rank's bootstrap says host {}",
                p.host, hosts[r]
            )));
        }
        if p.eps == 0 {
            return Err(bad(format!("layout blob of rank {r} has no endpoint")));
        }
        if p.max_eps < p.eps {
            return Err(bad(format!(
                "layout blob of rank {r} has a capacity of {} endpoints, below its {}",
                p.max_eps, p.eps
            )));
        }
        let seg = usize::try_from(p.seg).map_err(|_| {
            bad(format!(
                "rank {r}'s layout blob has a segment of {} bytes, more than this machine addresses",
                p.seg
            ))
        })?;
        layout.eps.push(p.eps);
        layout.max_eps.push(p.max_eps);
        layout.seg_len.push(seg);
        layout.process.push(p.pid);
    }
    Ok(layout)
}

/// Handler blocks and auxiliary slices of `infos`' layers, in order.
fn places(infos: &[LayerInfo]) -> Result<Vec<Place>, InitError> {
    let mut base = crate::endpoint::FIRST_LAYER_HANDLER as usize;
    let mut aux = 0usize;
    let mut out = Vec::with_capacity(infos.len());
    if infos.len() > 64 {
        return Err(InitError::Config(format!(
            "{} layers; at most 64 fit an endpoint",
            infos.len()
        )));
    }
    for (index, i) in infos.iter().enumerate() {
        if base + i.handlers as usize > crate::types::FIRST_CLIENT_HANDLER as usize {
            return Err(InitError::Config(format!(
                "layer {} needs {} handler indices; only {} of 16..128 are left",
                i.name,
                i.handlers,
                (crate::types::FIRST_CLIENT_HANDLER as usize).saturating_sub(base)
            )));
        }
        let aux_end = aux
            .checked_add(i.aux_bytes)
            .filter(|&e| e <= isize::MAX as usize)
            .ok_or_else(|| {
                InitError::Config(format!(
                    "layer {} needs {} bytes of auxiliary area; with the layers before it that \
                     is more than an address space holds",
                    i.name, i.aux_bytes
                ))
            })?;
        out.push(Place {
            index,
            name: i.name,
            base: base as u8,
            count: i.handlers,
            aux_off: aux,
            aux_len: i.aux_bytes,
        });
        base += i.handlers as usize;
        aux = aux_end;
    }
    Ok(out)
}

/// Refuses a process that made one rank while the launcher asked for thread ranks
/// (`GEX_THREADS=T`, `T > 1`, set by `gex-run --threads T`): the job would otherwise
/// run with a `T`-th of the ranks asked, silently. Every process of such a job runs the
/// same program, so every rank fails alike, before any conduit resource exists.
fn check_threads_asked(config: &Config, layout: &JobLayout, rank: Rank) -> Result<(), InitError> {
    let asked = config
        .get("GEX_THREADS")
        .and_then(|v| v.trim().parse::<u32>().ok())
        .filter(|&t| t > 1);
    match asked {
        Some(t) if layout.process_peers(rank).len() == 1 => Err(InitError::Config(format!(
            "GEX_THREADS={t} asks for {t} thread ranks per process (gex-run --threads), but \
             this process made one rank: start the ranks with \
             gex::run_threads_from_env (or gex_boot::threads::run_from_env), or unset GEX_THREADS"
        ))),
        _ => Ok(()),
    }
}

/// A rank's handle on the job: conduit, bootstrap and endpoints.
///
/// Dropping the client finalises it (a collective: every rank must drop or
/// [`finalize`](Client::finalize) its client). [`exit`](Client::exit) ends the whole job
/// from any one rank.
pub struct Client<C: Conduit> {
    shared: Arc<Shared>,
    conduit: Arc<C>,
    policy: WaitPolicy,
    eps: Mutex<Vec<Option<C::Ep>>>,
    /// The next index [`create_endpoint`](Self::create_endpoint) hands out.
    next: Mutex<u16>,
    boot: Mutex<Option<Box<dyn Bootstrap>>>,
    layers: Vec<(Attacher<C>, Place)>,
    infos: Vec<LayerInfo>,
    progress: Option<Duration>,
}

impl<C: Conduit> std::fmt::Debug for Client<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("conduit", &C::NAME)
            .field("rank", &self.shared.rank)
            .field("size", &self.shared.size)
            .finish()
    }
}

impl<C: Conduit> Client<C> {
    /// This rank.
    pub fn rank(&self) -> Rank {
        self.shared.rank
    }
    /// Ranks in the job.
    pub fn size(&self) -> u32 {
        self.shared.size
    }
    /// The conduit's name.
    pub fn conduit_name(&self) -> &'static str {
        self.conduit.name()
    }
    /// The conduit instance.
    pub fn conduit(&self) -> &Arc<C> {
        &self.conduit
    }
    /// The configuration this client was built with.
    pub fn config(&self) -> &Config {
        &self.shared.config
    }
    /// The layers every endpoint of this client carries, in attach order.
    pub fn layers(&self) -> &[LayerInfo] {
        &self.infos
    }
    /// The agreed job layout (endpoints, segment lengths and hosts of every rank).
    pub fn layout(&self) -> &JobLayout {
        &self.shared.layout
    }
    /// The wait policy new endpoints follow.
    pub fn wait_policy(&self) -> WaitPolicy {
        self.policy
    }
    /// Ranks sharing this rank's host (the neighbourhood), including this rank.
    pub fn neighbours(&self) -> Vec<Rank> {
        self.shared.layout.neighbours(self.shared.rank)
    }
    /// Endpoints provisioned on this rank.
    pub fn endpoint_count(&self) -> u16 {
        self.shared.layout.eps[self.shared.rank as usize]
    }

    /// Endpoint indices of `rank` that may be addressed: its capacity
    /// (`layout().max_eps[rank]`) when the conduit makes endpoints at run time, the
    /// endpoints it made at init otherwise; `None` for a rank outside the job. A send
    /// to an index at or above it is [`AmError::BadEndpoint`](crate::AmError::BadEndpoint);
    /// below it but not open on `rank`, [`ConduitError::NoEndpoint`](crate::spi::ConduitError::NoEndpoint).
    pub fn endpoint_capacity(&self, rank: Rank) -> Option<u16> {
        self.shared.cap.get(rank as usize).copied()
    }
    /// Whether the conduit makes endpoints at run time ([`create_endpoint`](Self::create_endpoint)).
    pub fn runtime_endpoints(&self) -> bool {
        self.shared.runtime_eps
    }

    /// The endpoint around the conduit's endpoint `cep` (index `index`, made at init
    /// or at run time): the layers attached, the progress thread started if asked.
    fn wrap(&self, cep: C::Ep, index: EpIndex) -> Result<OwnedEndpoint<C>, EpError> {
        let uid = (Arc::as_ptr(&self.shared) as u64) ^ (u64::from(index) << 48);
        Endpoint::new(
            cep,
            self.shared.clone(),
            self.conduit.clone(),
            self.policy,
            &self.layers,
            self.progress,
            uid,
        )
        .map_err(|e| EpError::Layer(e.to_string()))
    }

    /// Takes endpoint `index` (each can be taken once), with the client's layers
    /// attached. EP 0 is the primordial endpoint.
    ///
    /// # Errors
    /// [`EpError::NoSuchEndpoint`], [`EpError::Taken`], or [`EpError::Layer`] if a
    /// layer cannot attach.
    pub fn endpoint(&self, index: u16) -> Result<OwnedEndpoint<C>, EpError> {
        let cep = {
            let mut eps = self.eps.lock().unwrap_or_else(|e| e.into_inner());
            let count = eps.len() as u16;
            let slot = eps
                .get_mut(index as usize)
                .ok_or(EpError::NoSuchEndpoint { index, count })?;
            slot.take().ok_or(EpError::Taken(index))?
        };
        self.wrap(cep, index)
    }

    /// Makes a new endpoint after initialisation (an endpoint made at run time), with
    /// the client's layers attached as to the endpoints made at init. Not collective:
    /// peers reach it as `(rank, index)` (its [`Endpoint::addr`]) from now on, and find
    /// it on first contact; an endpoint of theirs polls it only once it has sent to it
    /// or received from it, and each endpoint polls only its own queues (the AM poll
    /// mask: a thread driving this endpoint never touches another endpoint's queues or
    /// locks). A peer that sends to the index before this call (or after the endpoint
    /// is dropped) gets [`ConduitError::NoEndpoint`](crate::spi::ConduitError::NoEndpoint),
    /// never a hang.
    ///
    /// Indices are handed out in order from `layout().eps[rank]` and **never reused**:
    /// dropping the endpoint closes it for good, and the client makes at most
    /// `layout().max_eps[rank] - layout().eps[rank]` endpoints over its life
    /// (`GEX_MAX_ENDPOINTS`, default [`DEFAULT_MAX_ENDPOINTS`], counts both kinds).
    /// Reduce traffic to an endpoint to nothing (e.g. with a barrier of the
    /// collectives layer) before dropping it: messages still in flight to it are
    /// discarded with its queues. The endpoint has its own segment (of this rank's
    /// segment length), which the RMA layer reaches as `(rank, index)` like an
    /// endpoint made at init; layers that reach peers' memory without a message ask
    /// [`ConduitEp::peer_open`](crate::spi::ConduitEp::peer_open) first.
    ///
    /// # Errors
    /// [`EpError::Full`] once the capacity is used up; [`EpError::Conduit`] with
    /// [`ConduitError::Unsupported`](crate::spi::ConduitError::Unsupported) if the
    /// conduit cannot (no [`Capabilities::RUNTIME_ENDPOINTS`](crate::spi::Capabilities::RUNTIME_ENDPOINTS));
    /// [`EpError::Layer`] if a layer cannot attach.
    pub fn create_endpoint(&self) -> Result<OwnedEndpoint<C>, EpError> {
        let rank = self.shared.rank as usize;
        let cap = self.shared.cap[rank];
        let index = {
            let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
            if *next >= cap {
                if !self.shared.runtime_eps {
                    return Err(EpError::Conduit(crate::spi::ConduitError::Unsupported {
                        conduit: self.conduit.name(),
                        what: "endpoints made at run time",
                    }));
                }
                return Err(EpError::Full {
                    capacity: self.shared.layout.max_eps[rank],
                    init: self.shared.layout.eps[rank],
                });
            }
            let i = *next;
            *next += 1;
            i
        };
        let cep = C::open_endpoint(&self.conduit, index).map_err(EpError::Conduit)?;
        if cep.index() != index {
            return Err(EpError::Conduit(crate::spi::ConduitError::Contract(
                format!("open_endpoint({index}) returned endpoint {}", cep.index()),
            )));
        }
        self.wrap(cep, index)
    }

    /// A bootstrap barrier (slow path; does not poll endpoints — while AM traffic may
    /// be in flight, use a barrier that polls: the collectives layer's, or an
    /// [`Endpoint::exchange`] over the primordial team).
    ///
    /// # Errors
    /// [`InitError::Boot`] if the bootstrap failed.
    pub fn boot_barrier(&self) -> Result<(), InitError> {
        let mut b = self.boot.lock().unwrap_or_else(|e| e.into_inner());
        match b.as_mut() {
            Some(b) => Ok(b.barrier()?),
            None => Ok(()),
        }
    }

    /// Finalises the client (collective): closes the endpoints it still holds, waits
    /// for every rank (the conduit keeps serving peers' operations on this rank's closed
    /// endpoints meanwhile, see [`Conduit::finalize`](crate::spi::Conduit::finalize)),
    /// then tells the launcher this rank finished cleanly. AM traffic must be quiesced
    /// first (for example with the collectives layer's barrier, or an
    /// [`Endpoint::exchange`] over the primordial team); endpoints should be dropped
    /// before, since one still held is not served during the wait.
    ///
    /// # Errors
    /// [`InitError::Boot`] if the bootstrap failed.
    pub fn finalize(self) -> Result<(), InitError> {
        self.finalize_inner()
    }

    fn finalize_inner(&self) -> Result<(), InitError> {
        let mut b = self.boot.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(mut boot) = b.take() {
            // Endpoints never taken are closed first, like those the application
            // dropped; the conduit then serves its peers through the job-wide barrier.
            self.eps.lock().unwrap_or_else(|e| e.into_inner()).clear();
            self.conduit.finalize(&mut || boot.barrier())?;
            boot.finalize(0)?;
        }
        Ok(())
    }

    /// Ends the whole job with `code` from this rank (GASNet's `gasnet_exit`): the
    /// launcher terminates every other rank and the job exits with `code`.
    pub fn exit(&self, code: i32) -> ! {
        let mut b = self.boot.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(boot) = b.as_mut() {
            boot.request_exit(code);
        }
        std::process::exit(code)
    }

    /// Aborts the whole job with `code`, printing `msg` once.
    pub fn abort(&self, code: i32, msg: &str) -> ! {
        let mut b = self.boot.lock().unwrap_or_else(|e| e.into_inner());
        match b.as_mut() {
            Some(boot) => boot.abort(code, msg),
            None => {
                eprintln!("gex: rank {} aborted: {msg}", self.shared.rank);
                std::process::exit(if code == 0 { 1 } else { code })
            }
        }
    }
}

impl<C: Conduit> Drop for Client<C> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        if let Err(e) = self.finalize_inner() {
            eprintln!("gex: rank {}: finalisation failed: {e}", self.shared.rank);
        }
    }
}
