//! # gex
//!
//! The facade of gex, a communication layer for PGAS runtimes modeled on GASNet-EX.
//! One dependency gives a program everything:
//!
//! - the core API, re-exported: [`ClientBuilder`], [`Token`], [`Am`], [`EpAddr`],
//!   [`Event`] and the modes [`Blocking`], [`Nb`], [`Nbi`], [`Team`], the errors,
//!   [`config`], [`spi`], [`layer`], ...;
//! - one-sided RMA and remote atomics ([`rma`], feature `rma`, on by default) and
//!   teams, the barrier and collectives ([`coll`], feature `coll`, on by default), as
//!   layers of every endpoint: their operations are methods of the endpoint once the
//!   [`prelude`] is in scope;
//! - [`boot`]: launching and bootstrap (`gex-boot`);
//! - the conduits compiled in ([`conduit`]), chosen at run time without generics:
//!   [`Client`] and [`Endpoint`] are the types of the conduit named by `GEX_CONDUIT`
//!   ([`AnyConduit`]).
//!
//! ## Hello world
//!
//! ```no_run
//! use gex::prelude::*;
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     // Under a launcher (gex-run, mpiexec, srun) this process is one rank;
//!     // started alone, it runs itself on 4 ranks.
//!     let client = gex::launch_or_start(4, gex::builder().segment_size(1 << 20))?;
//!     let mut ep = client.endpoint(0)?;
//!     let world = ep.world();
//!     let me = world.rank() as u64;
//!     let sum = ep.collective(&world, Allreduce::new(vec![me], BuiltinOp::Sum), Blocking)?;
//!     println!("rank {me}: the ranks add up to {}", sum[0]);
//!     Ok(())
//! }
//! ```
//!
//! ## Starting a job
//!
//! There is one way to start a rank: [`start`]`(builder)` builds this rank's client
//! with the builder's settings and layers, the bootstrap of the launcher that started
//! the process (gex-run, `mpiexec`, `srun`, `mpirun`; alone, a job of one rank) and the
//! conduit `GEX_CONDUIT` names. Every other entry point is that call with one thing
//! changed, and says which in its name:
//!
//! | call | what changes |
//! |---|---|
//! | [`init`]`()` | `start(gex::builder())`: default settings and layers |
//! | [`launch_or_start`]`(n, builder)` | started alone, the program first launches itself on `n` ranks (this process then waits and exits with the job's code) |
//! | [`init_with`]`(builder, job)` | runs a [`Job`] monomorphised for the conduit instead of returning a [`Client`] of [`AnyConduit`] |
//! | [`launch_or_run`]`(n, builder, job)` | both of the above |
//! | [`init_with_boot`]`(builder, boot, conduit, job)` | the bootstrap and conduit given instead of read from the environment |
//! | [`run_threads`]`(n, builder, f)` | the ranks are `n` threads of this process, each running `f` on its client |
//! | [`run_threads_from_env`]`(builder, f)` | `GEX_THREADS` thread ranks in each process of a launched job |
//!
//! Below the facade, `builder.init::<C>(boot)` ([`ClientBuilder::init`]) is what all of
//! them call. docs/launching.md describes the launchers.
//!
//! ## Choosing a conduit
//!
//! [`Client`] is `gex_core::Client<AnyConduit>`: the conduit is picked when the job
//! starts (`GEX_CONDUIT`, default [`DEFAULT_CONDUIT`]) and every conduit call is a
//! `match` on it. For the fully monomorphised path, name the conduit type
//! (`builder.init::<gex::conduit::smp::Smp>(boot)`) or use [`Job`], whose generic
//! [`run`](Job::run) is instantiated for the conduit chosen at run time.
//!
//! | conduit | feature | jobs |
//! |---|---|---|
//! | `smp` | `smp` (default) | processes on one host, over shared memory |
//! | `loopback` | always | one rank (singleton programs, examples, tests) |
//! | `ofi` | `ofi` (off by default) | libfabric (system libfabric >= 1.17): `tcp;ofi_rxm`, `shm`, ...; with shared memory between the ranks of a host in jobs that span several (`conduit::ofi::OfiHybrid`, `GEX_HYBRID`) |
//! | `ibv` | `ibv` (emulation only), `ibv-verbs` (libibverbs) (off by default) | InfiniBand and RoCE RC queue pairs (`GEX_IBV_PROVIDER=verbs`), or the software RC emulation on one host (`GEX_IBV_PROVIDER=emu`); with shared memory between the ranks of a host in jobs that span several (`conduit::ibv::IbvHybrid`); docs/ibv.md |

pub use gex_core::*;

mod any;
pub use any::{AnyConduit, AnyEp};

use gex_core::boot::Bootstrap;
use gex_core::layer::LayerSet;
use gex_core::spi::Conduit;

/// The core crate, for its generic types (`gex::core::Client<C>`, `gex::core::Endpoint<C>`).
pub use gex_core as core;

/// One-sided RMA and remote atomics (the `gex-rma` crate): a layer of every endpoint;
/// its operations are methods of the endpoint ([`rma::RmaExt`]).
#[cfg(feature = "rma")]
pub use gex_rma as rma;

/// Teams, the barrier and collectives (the `gex-coll` crate): a layer of every
/// endpoint; its operations are methods of the endpoint ([`coll::CollExt`]).
#[cfg(feature = "coll")]
pub use gex_coll as coll;

/// Two-sided tagged messaging, MPI style (the `gex-msg` crate): a layer of every
/// endpoint when the feature `msg` is on; its operations are methods of the endpoint
/// ([`msg::MsgExt`]).
#[cfg(feature = "msg")]
pub use gex_msg as msg;

/// Demand-driven synchronisation (the `gex-overlap` crate) when the feature `overlap`
/// is on: not a default layer; add it with `.layer::<overlap::Overlap>()`
/// ([`overlap::OverlapExt`]).
#[cfg(feature = "overlap")]
pub use gex_overlap as overlap;

/// A client: `gex::Client` is one whose conduit is chosen at run time (`GEX_CONDUIT`,
/// [`AnyConduit`]); `gex::Client<C>` names one of conduit `C`, as a [`Job`]'s `run`
/// receives it.
///
/// ```
/// struct Hello;
/// impl gex::Job for Hello {
///     type Output = u32;
///     fn run<C: gex::spi::Conduit>(self, client: gex::Client<C>) -> u32 {
///         client.size()
///     }
/// }
/// let boot = gex::boot::from_env()?;
/// assert_eq!(gex::init_with_boot(gex::builder(), boot, None, Hello)?, 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub type Client<C = AnyConduit> = gex_core::Client<C>;
/// An endpoint (of the conduit chosen at run time unless `C` names one): where the
/// operations are (write `&mut gex::Endpoint` in signatures, `&mut gex::Endpoint<C>`
/// in code generic over the conduit).
pub type Endpoint<C = AnyConduit> = gex_core::Endpoint<C>;
/// The owner of an [`Endpoint`], from [`Client::endpoint`](gex_core::Client::endpoint).
pub type OwnedEndpoint<C = AnyConduit> = gex_core::OwnedEndpoint<C>;
/// A scope of an [`Endpoint`] (see [`gex_core::Endpoint::scope`]).
pub type Scope<'s, 'env, C = AnyConduit> = gex_core::Scope<'s, 'env, C>;

/// The layers every endpoint carries by default: gex-rma and gex-coll (with the
/// features `rma` and `coll`, both on by default), then gex-msg (feature `msg`, off
/// by default).
#[cfg(all(feature = "coll", not(feature = "msg")))]
pub type DefaultLayers = (((), gex_rma::Rma), gex_coll::Coll);
/// The layers every endpoint carries by default.
#[cfg(all(feature = "coll", feature = "msg"))]
pub type DefaultLayers = ((((), gex_rma::Rma), gex_coll::Coll), gex_msg::Msg);
/// The layers every endpoint carries by default.
#[cfg(all(feature = "rma", not(feature = "coll"), not(feature = "msg")))]
pub type DefaultLayers = ((), gex_rma::Rma);
/// The layers every endpoint carries by default.
#[cfg(all(feature = "rma", not(feature = "coll"), feature = "msg"))]
pub type DefaultLayers = (((), gex_rma::Rma), gex_msg::Msg);
/// The layers every endpoint carries by default.
#[cfg(all(not(feature = "rma"), not(feature = "msg")))]
pub type DefaultLayers = ();
/// The layers every endpoint carries by default.
#[cfg(all(not(feature = "rma"), feature = "msg"))]
pub type DefaultLayers = ((), gex_msg::Msg);

/// A client builder with the [`DefaultLayers`].
///
/// ```
/// let b = gex::builder().segment_size(1 << 20).endpoints(2);
/// # let _ = b;
/// ```
pub fn builder() -> ClientBuilder<DefaultLayers> {
    let b = ClientBuilder::new();
    #[cfg(feature = "rma")]
    let b = b.layer::<gex_rma::Rma>();
    #[cfg(feature = "coll")]
    let b = b.layer::<gex_coll::Coll>();
    #[cfg(feature = "msg")]
    let b = b.layer::<gex_msg::Msg>();
    b
}

/// What most programs `use`: the modes, addresses, handler types, and the extension
/// traits that put the layers' operations on the endpoint.
pub mod prelude {
    #[cfg(feature = "coll")]
    pub use gex_coll::{
        Allreduce, Barrier, Broadcast, BuiltinOp, CollError, CollExt, Exchange, Gather, GatherAll,
        OpKind, Reduce, ReduceOp, ReduceScatter, Scan, Scatter, Scratch,
    };
    pub use gex_core::{
        Am, Blocking, Body, Config, EpAddr, Event, HandlerId, Injected, Nb, Nbi, Team, Token,
    };
    #[cfg(feature = "msg")]
    pub use gex_msg::{Comm, MsgExt};
    #[cfg(feature = "rma")]
    pub use gex_rma::{
        AtomicFlags, AtomicOp, AtomicOps, GlobalPtr, NbiCategories, RmaError, RmaExt, ScopeRmaExt,
        Strided, Vis,
    };
}

/// Launching and bootstrap: the `gex-boot` crate, plus the bootstrap contract of the
/// core ([`Bootstrap`], [`BootError`](boot::BootError), [`Singleton`](boot::Singleton)).
///
/// ```
/// // Outside a launcher the bootstrap is a job of one rank.
/// let boot = gex::boot::from_env()?;
/// assert_eq!((boot.rank(), boot.size()), (0, 1));
/// # Ok::<(), gex::boot::BootError>(())
/// ```
pub mod boot {
    pub use gex_boot::*;
    pub use gex_core::boot::{BootError, Bootstrap, Singleton};
}

/// The conduits compiled into this build.
///
/// ```
/// use gex::conduit::Loopback;
/// use gex::spi::Conduit;
/// assert_eq!(Loopback::NAME, "loopback");
/// assert!(gex::conduits().contains(&Loopback::NAME));
/// ```
pub mod conduit {
    pub use gex_core::loopback::{Loopback, LoopbackEp};

    /// The shared-memory conduit: ranks are processes on one host (feature `smp`).
    ///
    /// ```
    /// use gex::spi::Conduit;
    /// assert_eq!(gex::conduit::smp::Smp::NAME, "smp");
    /// ```
    #[cfg(feature = "smp")]
    pub mod smp {
        pub use gex_conduit_smp::*;
    }

    /// The libfabric conduit (feature `ofi`, off by default).
    #[cfg(feature = "ofi")]
    pub mod ofi {
        pub use gex_conduit_ofi::*;

        /// The conduit `GEX_CONDUIT=ofi` runs: libfabric between hosts and the smp
        /// conduit's shared memory between the ranks of one host (a hybrid job, see
        /// `GEX_HYBRID`); in other jobs the ofi conduit alone, through it.
        /// `client.conduit().far()` is the [`Ofi`] conduit (its report and counters).
        pub type OfiHybrid = gex_conduit_hybrid::Hybrid<gex_conduit_smp::Smp, Ofi>;
    }

    /// The ibverbs conduit (feature `ibv`, off by default; `ibv-verbs` for real
    /// devices).
    #[cfg(feature = "ibv")]
    pub mod ibv {
        pub use gex_conduit_ibv::*;

        /// The conduit `GEX_CONDUIT=ibv` runs: verbs between hosts and the smp
        /// conduit's shared memory between the ranks of one host (a hybrid job, see
        /// `GEX_HYBRID`); in other jobs the ibv conduit alone, through it.
        /// `client.conduit().far()` is the [`Ibv`] conduit.
        pub type IbvHybrid = gex_conduit_hybrid::Hybrid<gex_conduit_smp::Smp, Ibv>;
    }

    /// The hybrid conduit: a shared-memory conduit inside each host composed with a
    /// network conduit between hosts (features `ofi` and `ibv`, which compose
    /// `ofi::OfiHybrid` and `ibv::IbvHybrid`).
    #[cfg(any(feature = "ofi", feature = "ibv"))]
    pub mod hybrid {
        pub use gex_conduit_hybrid::*;
    }
}

/// The `GEX_*` settings of the facade.
pub const ENV_VARS: &[config::EnvVar] = &[config::EnvVar {
    name: "GEX_CONDUIT",
    default: "smp",
    doc: "Conduit to use, among those compiled in (facade, gex-perf, gex-run --conduit).",
}];

/// Every `GEX_*` variable a program built with this facade may read: the core's, the
/// launcher's, the facade's, and those of every conduit and layer compiled in
/// (`gex-info env` prints them).
///
/// ```
/// assert!(gex::env_vars().iter().any(|v| v.name == "GEX_WAIT"));
/// assert!(gex::env_vars().iter().any(|v| v.name == "GEX_CONDUIT"));
/// ```
pub fn env_vars() -> Vec<config::EnvVar> {
    let mut regs: Vec<&'static [config::EnvVar]> = vec![config::ENV_VARS, gex_boot::ENV_VARS];
    regs.extend(AnyConduit::env_registries());
    let mut infos = Vec::new();
    DefaultLayers::infos(&mut infos);
    regs.extend(infos.iter().map(|i| i.env_vars));
    let mut out: Vec<config::EnvVar> = Vec::new();
    for v in regs.into_iter().flatten() {
        if !out.iter().any(|o| o.name == v.name) {
            out.push(*v);
        }
    }
    out
}

/// The conduit chosen when `GEX_CONDUIT` is unset: `smp` when the `smp` feature is on
/// (the default), otherwise `loopback`.
#[cfg(feature = "smp")]
pub type DefaultConduit = gex_conduit_smp::Smp;

/// The conduit chosen when `GEX_CONDUIT` is unset.
#[cfg(not(feature = "smp"))]
pub type DefaultConduit = gex_core::loopback::Loopback;

/// Name of [`DefaultConduit`], the conduit chosen when `GEX_CONDUIT` is unset.
///
/// ```
/// assert_eq!(gex::conduits()[0], gex::DEFAULT_CONDUIT);
/// ```
pub const DEFAULT_CONDUIT: &str = <DefaultConduit as Conduit>::NAME;

/// The environment variable that names the conduit (`GEX_CONDUIT`).
pub const CONDUIT_VAR: &str = "GEX_CONDUIT";

/// The one list of the conduits this build can run, the default first: calls the
/// macro `$cb` with `Variant(conduit type)` entries, each under its feature's `cfg`.
/// `AnyConduit`, `conduits()` and `init_with_boot`'s dispatch all expand it, so a
/// conduit is added in one place.
macro_rules! for_each_conduit {
    ($cb:ident) => {
        $cb! {
            #[cfg(feature = "smp")]
            Smp(gex_conduit_smp::Smp),
            Loopback(gex_core::loopback::Loopback),
            #[cfg(feature = "ofi")]
            Ofi($crate::conduit::ofi::OfiHybrid),
            #[cfg(feature = "ibv")]
            Ibv($crate::conduit::ibv::IbvHybrid),
        }
    };
}
pub(crate) use for_each_conduit;

/// The names of [`for_each_conduit!`]'s list, from each conduit's `Conduit::NAME`.
macro_rules! conduit_names {
    ($( $(#[$m:meta])* $v:ident($t:ty) ),+ $(,)?) => {
        &[ $( $(#[$m])* <$t as Conduit>::NAME, )+ ]
    };
}

const CONDUITS: &[&str] = for_each_conduit!(conduit_names);

/// Names of the conduits compiled into this build, the default first.
///
/// ```
/// assert!(gex::conduits().contains(&"loopback"));
/// assert_eq!(gex::conduits()[0], gex::DEFAULT_CONDUIT);
/// ```
pub fn conduits() -> &'static [&'static str] {
    CONDUITS
}

/// Resolves a conduit name as `GEX_CONDUIT` would give it: `None` or an empty name
/// means [`DEFAULT_CONDUIT`]; names are compared without case and surrounding blanks.
///
/// ```
/// assert_eq!(gex::select_conduit(None)?, gex::DEFAULT_CONDUIT);
/// assert_eq!(gex::select_conduit(Some(" Loopback "))?, "loopback");
/// let e = gex::select_conduit(Some("carrier-pigeon")).unwrap_err();
/// assert!(e.to_string().contains("loopback"), "{e}");
/// # Ok::<(), gex::InitError>(())
/// ```
///
/// # Errors
/// [`InitError::Config`] for a name that is not compiled in, listing those that are.
pub fn select_conduit(name: Option<&str>) -> Result<&'static str, InitError> {
    let wanted = name
        .map(|n| n.trim().to_ascii_lowercase())
        .unwrap_or_default();
    if wanted.is_empty() {
        return Ok(DEFAULT_CONDUIT);
    }
    CONDUITS.iter().copied().find(|c| *c == wanted).ok_or_else(|| {
        InitError::Config(format!(
            "unknown conduit {:?} (from {CONDUIT_VAR} or chosen by the program); compiled in: {}",
            name.unwrap_or_default(),
            CONDUITS.join(", ")
        ))
    })
}

/// Initialises this rank with the [`DefaultLayers`] and default settings: the
/// bootstrap from the environment ([`boot::from_env`]: the launcher's, or a job of one
/// rank), the conduit from `GEX_CONDUIT`. Collective over every rank.
///
/// ```
/// let client = gex::init()?;
/// assert!(client.rank() < client.size());
/// # Ok::<(), gex::InitError>(())
/// ```
///
/// # Errors
/// As [`start`].
pub fn init() -> Result<Client, InitError> {
    start(builder())
}

/// Initialises this rank with `builder`'s settings and layers; the bootstrap comes from
/// the environment and the conduit from `GEX_CONDUIT` (read from the builder's
/// configuration, which is the process environment unless one was given). Collective
/// over every rank.
///
/// ```
/// let client = gex::start(gex::builder().segment_size(1 << 20))?;
/// let ep = client.endpoint(0)?;
/// assert!(ep.segment().len() >= 1 << 20);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// [`InitError::Config`] if `GEX_CONDUIT` names a conduit that is not compiled in (the
/// message lists those that are) or a setting is invalid; [`InitError::Boot`] if the
/// bootstrap fails; [`InitError::Conduit`] or [`InitError::Os`] if the conduit cannot
/// open.
pub fn start<L: LayerSet>(
    builder: ClientBuilder<L>,
) -> Result<gex_core::Client<AnyConduit>, InitError> {
    builder.init::<AnyConduit>(gex_boot::from_env()?)
}

/// Starts this program as a job of `ranks` ranks when it was started alone, or joins
/// the job of the launcher that started it (gex-run, mpiexec, srun: `ranks` is then
/// ignored). In the process that launched the job, this does not return: it waits for
/// the job and exits with the job's exit code. In every rank it returns the client, as
/// [`start`].
///
/// # Errors
/// As [`start`]; [`InitError::Boot`] if the job cannot be launched.
pub fn launch_or_start<L: LayerSet>(
    ranks: u32,
    builder: ClientBuilder<L>,
) -> Result<gex_core::Client<AnyConduit>, InitError> {
    builder.init::<AnyConduit>(self_launch(ranks)?)
}

/// The bootstrap of this rank of a self-launched job ([`gex_boot::spawn_self`]): in the
/// process that launched the job, waits for it and exits with its code.
fn self_launch(ranks: u32) -> Result<Box<dyn Bootstrap>, InitError> {
    match gex_boot::spawn_self(ranks) {
        Ok(gex_boot::Role::Launcher(code)) => std::process::exit(code),
        Ok(gex_boot::Role::Rank(boot)) => Ok(boot),
        Err(e) => Err(InitError::Boot(gex_core::boot::BootError::Environment(
            e.to_string(),
        ))),
    }
}

/// Runs a job of `ranks` **thread ranks** of this process: one thread per rank, each
/// building its client with `builder()` on its own thread bootstrap
/// ([`boot::threads`]) and the conduit named by `GEX_CONDUIT` (default `smp`: the
/// ranks share memory as process ranks of one host do), then running `f` on it. Returns
/// what every rank's `f` returned, in rank order. `f` should finalise its client
/// (`client.finalize()`, collective) before it returns. See `docs/threads.md` for what
/// thread ranks share.
///
/// ```
/// use gex::prelude::*;
///
/// let sums = gex::run_threads(3, || gex::builder().segment_size(1 << 16), |client| {
///     let mut ep = client.endpoint(0).unwrap();
///     let world = ep.world();
///     let me = world.rank() as u64;
///     let sum = ep.collective(&world, Allreduce::new(vec![me], BuiltinOp::Sum), Blocking).unwrap();
///     drop(ep);
///     client.finalize().unwrap();
///     sum[0]
/// })?;
/// assert_eq!(sums, vec![3, 3, 3]);
/// # Ok::<(), gex::boot::threads::ThreadsError>(())
/// ```
///
/// # Errors
/// [`ThreadsError::Init`](boot::threads::ThreadsError::Init) naming the first rank
/// whose client could not be built (the others are released and report nothing);
/// otherwise as [`boot::threads::run`] (a rank that panicked, by its number).
pub fn run_threads<L: LayerSet, T: Send>(
    ranks: u32,
    builder: impl Fn() -> ClientBuilder<L> + Sync,
    f: impl Fn(Client) -> T + Sync,
) -> Result<Vec<T>, gex_boot::threads::ThreadsError> {
    let outs = gex_boot::threads::run(ranks, |boot| init_thread_rank(boot, &builder, &f))?;
    first_init_error(outs)
}

/// Runs this process's **thread ranks** of a job started by a launcher
/// (`gex-run -n P --threads T`, or `mpiexec`/`srun` with `GEX_THREADS=T` exported): `T`
/// thread ranks (`GEX_THREADS`, default 1) over the process's bootstrap, each building
/// its client with `builder()` and the conduit named by `GEX_CONDUIT`, then running `f`
/// on it, as [`run_threads`] does for a job of one process. Started alone (no launcher)
/// it runs `GEX_THREADS` thread ranks of a one-process job. Returns what this process's
/// ranks' `f` returned, in rank order.
///
/// ```
/// // Started alone with GEX_THREADS unset: one thread rank.
/// let ranks = gex::run_threads_from_env(
///     || gex::builder().segment_size(1 << 16),
///     |client| {
///         let r = (client.rank(), client.size());
///         client.finalize().unwrap();
///         r
///     },
/// )?;
/// assert_eq!(ranks, vec![(0, 1)]);
/// # Ok::<(), gex::boot::threads::ThreadsError>(())
/// ```
///
/// # Errors
/// As [`run_threads`], and [`ThreadsError::Boot`](boot::threads::ThreadsError::Boot)
/// if `GEX_THREADS` is not a number of at least 1 or the process's bootstrap cannot
/// be made ([`boot::threads::run_from_env`]).
pub fn run_threads_from_env<L: LayerSet, T: Send>(
    builder: impl Fn() -> ClientBuilder<L> + Sync,
    f: impl Fn(Client) -> T + Sync,
) -> Result<Vec<T>, gex_boot::threads::ThreadsError> {
    let outs = gex_boot::threads::run_from_env(|boot| init_thread_rank(boot, &builder, &f))?;
    first_init_error(outs)
}

/// One thread rank of [`run_threads`] / [`run_threads_from_env`]: builds its client
/// and runs `f`; a failed init poisons the job (the other ranks are released) and
/// comes back with the rank's number.
fn init_thread_rank<L: LayerSet, T>(
    boot: gex_boot::threads::ThreadBoot,
    builder: &impl Fn() -> ClientBuilder<L>,
    f: &impl Fn(Client) -> T,
) -> Result<T, (u32, InitError)> {
    let (job, rank) = (boot.job().clone(), boot.rank());
    builder()
        .init::<AnyConduit>(Box::new(boot))
        .map(f)
        .map_err(|e| {
            job.poison(&format!("rank {rank} could not initialise its client: {e}"));
            (rank, e)
        })
}

/// Every rank's result, or the first init error not caused by another rank's (those
/// are `Lost`), else the first.
fn first_init_error<T>(
    outs: Vec<Result<T, (u32, InitError)>>,
) -> Result<Vec<T>, gex_boot::threads::ThreadsError> {
    let lost = |e: &InitError| matches!(e, InitError::Boot(gex_core::boot::BootError::Lost(_)));
    let mut first: Option<(u32, InitError)> = None;
    let mut done = Vec::with_capacity(outs.len());
    for o in outs {
        match o {
            Ok(t) => done.push(t),
            Err((r, e)) => match &first {
                Some((_, f)) if !lost(f) || lost(&e) => {}
                _ => first = Some((r, e)),
            },
        }
    }
    match first {
        Some((rank, source)) => Err(gex_boot::threads::ThreadsError::Init { rank, source }),
        None => Ok(done),
    }
}

/// Work to run on a client whose conduit is chosen at run time, monomorphised for it.
///
/// [`run`](Job::run) is generic over the conduit; [`init_with`] (or
/// [`init_with_boot`]) calls it once, with the client of the conduit selected, so the
/// whole job is compiled for each conduit and runs without even the `match` of
/// [`AnyConduit`].
///
/// ```
/// use gex::{ClientBuilder, Job};
/// use gex::spi::Conduit;
///
/// struct Describe;
/// impl Job for Describe {
///     type Output = String;
///     fn run<C: Conduit>(self, client: gex::Client<C>) -> String {
///         format!("rank {} of {} on {}", client.rank(), client.size(), client.conduit_name())
///     }
/// }
///
/// let boot = Box::new(gex::boot::Singleton::new());
/// let s = gex::init_with_boot(gex::builder().segment_size(4096), boot, Some("loopback"), Describe)?;
/// assert_eq!(s, "rank 0 of 1 on loopback");
/// # Ok::<(), gex::InitError>(())
/// ```
pub trait Job {
    /// What the job returns.
    type Output;
    /// Runs the job on `client` (a rank of the job, conduit `C`).
    fn run<C: Conduit>(self, client: gex_core::Client<C>) -> Self::Output;
}

/// Initialises this rank and runs `job` on it, monomorphised for the conduit named by
/// `GEX_CONDUIT`; the bootstrap comes from the environment. Collective over every rank.
///
/// # Errors
/// As [`start`].
pub fn init_with<L: LayerSet, J: Job>(
    builder: ClientBuilder<L>,
    job: J,
) -> Result<J::Output, InitError> {
    init_with_boot(builder, gex_boot::from_env()?, None, job)
}

/// The self-launching form of [`init_with`], as [`launch_or_start`] is of [`start`]:
/// started alone, this program launches itself as a job of `ranks` ranks (the process
/// that launched waits for the job and exits with its exit code: this does not return
/// there); started by a launcher (gex-run, mpiexec, srun, mpirun), it joins that job.
/// In every rank it runs `job` monomorphised for the conduit named by `GEX_CONDUIT` and
/// returns its output.
///
/// ```no_run
/// use gex::{Job, spi::Conduit};
/// struct Hello;
/// impl Job for Hello {
///     type Output = ();
///     fn run<C: Conduit>(self, client: gex::Client<C>) {
///         println!("rank {} of {}", client.rank(), client.size());
///         client.finalize().unwrap();
///     }
/// }
/// gex::launch_or_run(4, gex::builder(), Hello)?;
/// # Ok::<(), gex::InitError>(())
/// ```
///
/// # Errors
/// As [`launch_or_start`].
pub fn launch_or_run<L: LayerSet, J: Job>(
    ranks: u32,
    builder: ClientBuilder<L>,
    job: J,
) -> Result<J::Output, InitError> {
    init_with_boot(builder, self_launch(ranks)?, None, job)
}

/// Like [`init_with`], with the bootstrap given (for example the one
/// [`boot::spawn_self`] returned) and the conduit named explicitly: `None` falls back
/// to `GEX_CONDUIT`, then to [`DEFAULT_CONDUIT`].
///
/// # Errors
/// As [`init_with`].
pub fn init_with_boot<L: LayerSet, J: Job>(
    builder: ClientBuilder<L>,
    boot: Box<dyn Bootstrap>,
    conduit: Option<&str>,
    job: J,
) -> Result<J::Output, InitError> {
    let name = match conduit {
        Some(n) => select_conduit(Some(n))?,
        None => select_conduit(config::Config::from_env().get(CONDUIT_VAR))?,
    };
    dispatch(name, builder, boot, job)
}

fn dispatch<L: LayerSet, J: Job>(
    name: &'static str,
    builder: ClientBuilder<L>,
    boot: Box<dyn Bootstrap>,
    job: J,
) -> Result<J::Output, InitError> {
    macro_rules! run_named {
        ($( $(#[$m:meta])* $v:ident($t:ty) ),+ $(,)?) => {
            $(
                $(#[$m])*
                if name == <$t as Conduit>::NAME {
                    return Ok(job.run(builder.init::<$t>(boot)?));
                }
            )+
        };
    }
    for_each_conduit!(run_named);
    Err(InitError::Config(format!(
        "conduit {name:?} is not compiled in (compiled in: {})",
        CONDUITS.join(", ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_conduit_lists_compiled_in() {
        let e = select_conduit(Some("carrier-pigeon"))
            .unwrap_err()
            .to_string();
        for c in conduits() {
            assert!(e.contains(c), "{e}");
        }
        assert!(e.contains("GEX_CONDUIT"), "{e}");
    }

    #[test]
    fn default_and_case() {
        assert_eq!(select_conduit(Some("")).unwrap(), DEFAULT_CONDUIT);
        assert_eq!(select_conduit(Some("LOOPBACK")).unwrap(), "loopback");
    }

    struct Count;
    impl Job for Count {
        type Output = (u32, u32, &'static str);
        fn run<C: Conduit>(self, client: gex_core::Client<C>) -> Self::Output {
            (client.rank(), client.size(), client.conduit_name())
        }
    }

    #[test]
    fn loopback_job_runs() {
        let boot = Box::new(boot::Singleton::new());
        let r =
            init_with_boot(builder().segment_size(4096), boot, Some("loopback"), Count).unwrap();
        assert_eq!(r, (0, 1, "loopback"));
    }

    #[test]
    fn unknown_conduit_is_an_error_not_a_panic() {
        let boot = Box::new(boot::Singleton::new());
        let r = init_with_boot(ClientBuilder::new(), boot, Some("nope"), Count);
        assert!(matches!(r, Err(InitError::Config(_))));
    }

    #[test]
    fn the_conduit_is_chosen_at_run_time_without_generics() {
        let c: Client = builder()
            .segment_size(4096)
            .config(config::Config::from_pairs([("GEX_CONDUIT", "loopback")]))
            .init::<AnyConduit>(Box::new(boot::Singleton::new()))
            .unwrap();
        assert_eq!(c.conduit_name(), "loopback");
        let ep: OwnedEndpoint = c.endpoint(0).unwrap();
        assert_eq!(ep.conduit_name(), "loopback");
        #[cfg(all(feature = "coll", not(feature = "msg")))]
        assert_eq!(ep.layers(), ["rma", "coll"]);
        #[cfg(all(feature = "coll", feature = "msg"))]
        assert_eq!(ep.layers(), ["rma", "coll", "msg"]);
    }

    #[test]
    fn every_registry_is_collected_once() {
        let v = env_vars();
        let mut names: Vec<_> = v.iter().map(|e| e.name).collect();
        names.sort();
        let n = names.len();
        names.dedup();
        assert_eq!(n, names.len());
        assert!(names.contains(&"GEX_BOOT"));
        #[cfg(feature = "smp")]
        assert!(names.contains(&"GEX_SMP_RING_SIZE"));
        #[cfg(feature = "coll")]
        assert!(names.contains(&"GEX_COLL_TUNE"));
    }
}
