//! # gex
//!
//! The facade of gex, a communication layer for PGAS runtimes modeled on GASNet-EX.
//! One dependency gives a program everything it needs:
//!
//! - the whole core API, re-exported: [`Client`], [`ClientBuilder`], [`Endpoint`],
//!   [`Token`], [`Am`], [`EpAddr`], [`Flags`], the errors, [`config`], [`spi`], ...;
//! - [`boot`]: launching and bootstrap (`gex-boot`): [`boot::from_env`],
//!   [`boot::spawn_self`], the fork launcher behind `gex-run`;
//! - [`conduit`]: the conduits compiled in (feature `smp`, on by default, and the
//!   one-rank [`Loopback`], always);
//! - conduit selection at run time: [`init_with`] and the [`Job`] trait.
//!
//! ## Choosing a conduit
//!
//! A conduit is a type parameter of [`Client`] (`Client<Smp>`), so the data path is
//! monomorphised: no dynamic dispatch, no function-pointer tables. Choosing one at run
//! time therefore means running *generic code* for the chosen type. That is what
//! [`Job`] is for: its [`run`](Job::run) method is generic over the conduit, and
//! [`init_with`] instantiates it for the conduit named by `GEX_CONDUIT` (default:
//! [`DEFAULT_CONDUIT`]). [`conduits`] lists the names compiled in.
//!
//! When a program only ever uses the default conduit, [`init`] returns a
//! [`Client<DefaultConduit>`] directly.
//!
//! | conduit | feature | jobs |
//! |---|---|---|
//! | `smp` | `smp` (default) | processes on one host, over shared memory |
//! | `loopback` | always | one rank (singleton programs, examples, tests) |
//! | `ofi` | `ofi` (off by default) | libfabric (system libfabric >= 1.17): `tcp;ofi_rxm`, `shm`, ...; with shared memory between the ranks of a host in jobs that span several (`conduit::ofi::OfiHybrid`, `GEX_HYBRID`) |
//!
//! ## Example
//!
//! ```
//! use gex::{Am, Client, ClientBuilder, EpAddr, Flags, Job, Token};
//! use gex::spi::Conduit;
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicU32, Ordering};
//!
//! /// Every rank pings the next one and waits for the reply.
//! struct Ring;
//!
//! impl Job for Ring {
//!     type Output = Result<u32, gex::AmError>;
//!     fn run<C: Conduit>(self, client: Client<C>) -> Self::Output {
//!         let mut ep = client.endpoint(0).expect("EP 0 is available");
//!         let (me, n) = (client.rank(), client.size());
//!         let got = Arc::new(AtomicU32::new(u32::MAX));
//!         let g = got.clone();
//!         ep.register(128, |t: &mut Token<'_>, am: Am<'_>| {
//!             t.reply_short(129, am.args()).expect("reply");
//!         }).expect("register");
//!         ep.register(129, move |_t: &mut Token<'_>, am: Am<'_>| {
//!             g.store(am.args()[0], Ordering::Relaxed);
//!         }).expect("register");
//!         let _sent = ep.request_short(EpAddr::rank((me + 1) % n), 128, &[me], Flags::empty())?;
//!         ep.wait_until(|| got.load(Ordering::Relaxed) == me);
//!         ep.barrier()?;
//!         Ok(n)
//!     }
//! }
//!
//! // Run outside a launcher, this is a job of one rank; under `gex-run -n 4` it
//! // would be one of four. The conduit comes from GEX_CONDUIT.
//! let ranks = gex::init_with(ClientBuilder::new().segment_size(1 << 16), Ring)??;
//! assert!(ranks >= 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! See `examples/hello.rs` for a complete program that launches itself on 4 ranks.

pub use gex_core::*;

use gex_core::boot::Bootstrap;
use gex_core::spi::Conduit;

/// Launching and bootstrap: the `gex-boot` crate, plus the bootstrap contract of the
/// core ([`Bootstrap`], [`BootError`](boot::BootError),
/// [`Singleton`](boot::Singleton)).
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

    /// The hybrid conduit: a shared-memory conduit inside each host composed with a
    /// network conduit between hosts (feature `ofi`, which composes
    /// [`ofi::OfiHybrid`]).
    #[cfg(feature = "ofi")]
    pub mod hybrid {
        pub use gex_conduit_hybrid::*;
    }
}

pub use gex_core::loopback::Loopback;

/// The conduit [`init`] uses: `smp` when the `smp` feature is on (the default),
/// otherwise [`Loopback`].
///
/// ```
/// use gex::spi::Conduit;
/// assert_eq!(<gex::DefaultConduit as Conduit>::NAME, gex::DEFAULT_CONDUIT);
/// ```
#[cfg(feature = "smp")]
pub type DefaultConduit = gex_conduit_smp::Smp;

/// The conduit [`init`] uses: `smp` when the `smp` feature is on (the default),
/// otherwise [`Loopback`].
///
/// ```
/// use gex::spi::Conduit;
/// assert_eq!(<gex::DefaultConduit as Conduit>::NAME, gex::DEFAULT_CONDUIT);
/// ```
#[cfg(not(feature = "smp"))]
pub type DefaultConduit = Loopback;

/// Name of [`DefaultConduit`], the conduit chosen when `GEX_CONDUIT` is unset.
///
/// ```
/// assert_eq!(gex::conduits()[0], gex::DEFAULT_CONDUIT);
/// ```
pub const DEFAULT_CONDUIT: &str = <DefaultConduit as Conduit>::NAME;

/// The environment variable that names the conduit (`GEX_CONDUIT`).
///
/// ```
/// assert_eq!(gex::CONDUIT_VAR, "GEX_CONDUIT");
/// ```
pub const CONDUIT_VAR: &str = "GEX_CONDUIT";

const CONDUITS: &[&str] = &[
    #[cfg(feature = "smp")]
    "smp",
    "loopback",
    #[cfg(feature = "ofi")]
    "ofi",
];

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

/// Work to run on a client whose conduit is chosen at run time.
///
/// [`run`](Job::run) is generic over the conduit; [`init_with`] (or
/// [`init_with_boot`]) calls it once, with the client of the conduit selected, so the
/// whole job is compiled for each conduit and runs without dynamic dispatch.
///
/// ```
/// use gex::{Client, ClientBuilder, Job};
/// use gex::spi::Conduit;
///
/// struct Describe;
/// impl Job for Describe {
///     type Output = String;
///     fn run<C: Conduit>(self, client: Client<C>) -> String {
///         format!("rank {} of {} on {}", client.rank(), client.size(), client.conduit_name())
///     }
/// }
///
/// let boot = Box::new(gex::boot::Singleton::new());
/// let s = gex::init_with_boot(ClientBuilder::new().segment_size(4096), boot, Some("loopback"), Describe)?;
/// assert_eq!(s, "rank 0 of 1 on loopback");
/// # Ok::<(), gex::InitError>(())
/// ```
pub trait Job {
    /// What the job returns.
    type Output;
    /// Runs the job on `client` (a rank of the job, conduit `C`).
    fn run<C: Conduit>(self, client: Client<C>) -> Self::Output;
}

/// Initialises this rank and runs `job` on it: the bootstrap comes from the
/// environment ([`boot::from_env`]: the launcher's, or a job of one rank), the conduit
/// from `GEX_CONDUIT` (default [`DEFAULT_CONDUIT`]). Collective over every rank.
///
/// `GEX_CONDUIT` is read from the process environment (not from a
/// [`config::Config`] given to the builder); use [`init_with_boot`] to name the
/// conduit explicitly.
///
/// ```
/// use gex::{Client, ClientBuilder, Job};
/// use gex::spi::Conduit;
///
/// struct Size;
/// impl Job for Size {
///     type Output = u32;
///     fn run<C: Conduit>(self, client: Client<C>) -> u32 { client.size() }
/// }
/// assert_eq!(gex::init_with(ClientBuilder::new().segment_size(4096), Size)?, 1);
/// # Ok::<(), gex::InitError>(())
/// ```
///
/// # Errors
/// [`InitError::Config`] if `GEX_CONDUIT` names a conduit that is not compiled in
/// (the message lists those that are) or a setting is invalid; [`InitError::Boot`]
/// if the bootstrap fails; [`InitError::Conduit`] or [`InitError::Os`] if the conduit
/// cannot open.
pub fn init_with<J: Job>(builder: ClientBuilder, job: J) -> Result<J::Output, InitError> {
    let env = config::Config::from_env();
    let name = select_conduit(env.get(CONDUIT_VAR))?;
    let boot = gex_boot::from_env()?;
    dispatch(name, builder, boot, job)
}

/// Like [`init_with`], with the bootstrap given (for example the one
/// [`boot::spawn_self`] returned) and the conduit named explicitly: `None` falls back
/// to `GEX_CONDUIT`, then to [`DEFAULT_CONDUIT`].
///
/// ```
/// use gex::{Client, ClientBuilder, Job};
/// use gex::spi::Conduit;
///
/// struct Name;
/// impl Job for Name {
///     type Output = &'static str;
///     fn run<C: Conduit>(self, client: Client<C>) -> &'static str { client.conduit_name() }
/// }
/// let boot = gex::boot::from_env()?;
/// let name = gex::init_with_boot(ClientBuilder::new().segment_size(4096), boot, Some("loopback"), Name)?;
/// assert_eq!(name, "loopback");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// As [`init_with`].
pub fn init_with_boot<J: Job>(
    builder: ClientBuilder,
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

fn dispatch<J: Job>(
    name: &'static str,
    builder: ClientBuilder,
    boot: Box<dyn Bootstrap>,
    job: J,
) -> Result<J::Output, InitError> {
    match name {
        #[cfg(feature = "smp")]
        "smp" => Ok(job.run(builder.init::<gex_conduit_smp::Smp>(boot)?)),
        "loopback" => Ok(job.run(builder.init::<Loopback>(boot)?)),
        #[cfg(feature = "ofi")]
        "ofi" => Ok(job.run(builder.init::<conduit::ofi::OfiHybrid>(boot)?)),
        other => Err(InitError::Config(format!(
            "conduit {other:?} is not compiled in (compiled in: {})",
            CONDUITS.join(", ")
        ))),
    }
}

/// Initialises this rank on [`DefaultConduit`] with default settings: the bootstrap
/// from the environment ([`boot::from_env`]). Collective over every rank.
///
/// ```
/// let client = gex::init()?;
/// assert!(client.rank() < client.size());
/// # Ok::<(), gex::InitError>(())
/// ```
///
/// # Errors
/// As [`init_from`].
pub fn init() -> Result<Client<DefaultConduit>, InitError> {
    init_from(ClientBuilder::new())
}

/// Initialises this rank on [`DefaultConduit`] with the settings of `builder`; the
/// bootstrap comes from the environment. Collective over every rank.
///
/// ```
/// let client = gex::init_from(gex::ClientBuilder::new().segment_size(1 << 20))?;
/// let ep = client.endpoint(0)?;
/// assert!(ep.segment().len() >= 1 << 20);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// [`InitError::Config`] if `GEX_CONDUIT` names another conduit than
/// [`DEFAULT_CONDUIT`] (use [`init_with`] to choose at run time) or a setting is
/// invalid; otherwise as [`init_with`].
pub fn init_from(builder: ClientBuilder) -> Result<Client<DefaultConduit>, InitError> {
    let env = config::Config::from_env();
    let name = select_conduit(env.get(CONDUIT_VAR))?;
    if name != DEFAULT_CONDUIT {
        return Err(InitError::Config(format!(
            "{CONDUIT_VAR}={name} but gex::init uses the default conduit {DEFAULT_CONDUIT}; \
             use gex::init_with to choose the conduit at run time"
        )));
    }
    builder.init::<DefaultConduit>(gex_boot::from_env()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_conduit_lists_compiled_in() {
        // A real conduit that this build lacks (ofi is compiled in with feature `ofi`).
        let missing = if conduits().contains(&"ofi") {
            "ibv"
        } else {
            "ofi"
        };
        let e = select_conduit(Some(missing)).unwrap_err().to_string();
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
        fn run<C: Conduit>(self, client: Client<C>) -> Self::Output {
            (client.rank(), client.size(), client.conduit_name())
        }
    }

    #[test]
    fn loopback_job_runs() {
        let boot = Box::new(boot::Singleton::new());
        let r = init_with_boot(
            ClientBuilder::new().segment_size(4096),
            boot,
            Some("loopback"),
            Count,
        )
        .unwrap();
        assert_eq!(r, (0, 1, "loopback"));
    }

    #[test]
    fn unknown_conduit_is_an_error_not_a_panic() {
        let boot = Box::new(boot::Singleton::new());
        let r = init_with_boot(ClientBuilder::new(), boot, Some("nope"), Count);
        assert!(matches!(r, Err(InitError::Config(_))));
    }
}
