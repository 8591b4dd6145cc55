//! The client: one per rank and job. Owns the conduit instance and the bootstrap, and
//! hands out endpoints.

use crate::boot::Bootstrap;
use crate::config::{Config, resolve_wait};
use crate::endpoint::Endpoint;
use crate::error::{EpError, InitError};
use crate::spi::{Conduit, JobLayout, OpenParams};
use crate::types::{EpAddr, Rank};
use gex_sync::wait::WaitPolicy;
use std::any::Any;
use std::sync::{Arc, Mutex};

/// Default number of `sched_yield`s between the spin and the sleep phases of
/// spin-then-block (`GEX_YIELDS`).
pub const DEFAULT_YIELDS: u32 = 64;

/// Default segment length per endpoint.
pub const DEFAULT_SEGMENT_SIZE: usize = 64 << 20;

/// State every endpoint of a client shares (read-only after initialisation).
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) rank: Rank,
    pub(crate) size: u32,
    pub(crate) layout: JobLayout,
    /// `sched_yield`s between spinning and sleeping under spin-then-block.
    pub(crate) yields: u32,
}

/// Builds a [`Client`]. Values given here are overridden by the matching `GEX_*`
/// variables (see [`crate::config::ENV_VARS`]), so a job can be retuned without
/// recompiling.
#[derive(Default)]
pub struct ClientBuilder {
    segment_size: Option<usize>,
    endpoints: Option<u16>,
    wait: Option<WaitPolicy>,
    config: Option<Config>,
    context: Option<Arc<dyn Any + Send + Sync>>,
}

impl std::fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("segment_size", &self.segment_size)
            .field("endpoints", &self.endpoints)
            .field("wait", &self.wait)
            .finish()
    }
}

impl ClientBuilder {
    /// A builder with defaults (one endpoint, 64 MiB segment, automatic wait policy).
    pub fn new() -> Self {
        Self::default()
    }
    /// Segment length of each endpoint of this rank.
    pub fn segment_size(mut self, bytes: usize) -> Self {
        self.segment_size = Some(bytes);
        self
    }
    /// Number of endpoints provisioned (EP 0 plus extra communication domains).
    pub fn endpoints(mut self, n: u16) -> Self {
        self.endpoints = Some(n);
        self
    }
    /// Sets the wait policy (`GEX_WAIT`, when set, overrides it; default automatic).
    pub fn wait_policy(mut self, p: WaitPolicy) -> Self {
        self.wait = Some(p);
        self
    }
    /// Uses this configuration instead of the process environment.
    pub fn config(mut self, c: Config) -> Self {
        self.config = Some(c);
        self
    }
    /// Hands a conduit-specific object to [`Conduit::open`] (e.g. the simulated fabric
    /// of the test kit).
    pub fn conduit_context(mut self, ctx: Arc<dyn Any + Send + Sync>) -> Self {
        self.context = Some(ctx);
        self
    }

    /// Initialises the client: collective over every rank of the job.
    ///
    /// # Errors
    /// [`InitError::Config`] for bad settings, [`InitError::Boot`] if the bootstrap
    /// fails, [`InitError::Conduit`]/[`InitError::Os`] if the conduit cannot open.
    pub fn init<C: Conduit>(self, mut boot: Box<dyn Bootstrap>) -> Result<Client<C>, InitError> {
        let config = self.config.unwrap_or_else(Config::from_env);
        let seg = config.size(
            "GEX_SEGMENT_SIZE",
            self.segment_size.unwrap_or(DEFAULT_SEGMENT_SIZE),
        )?;
        let eps = config.u64("GEX_ENDPOINTS", self.endpoints.unwrap_or(1) as u64)?;
        let eps = u16::try_from(eps).ok().filter(|&e| e >= 1).ok_or_else(|| {
            InitError::Config(format!(
                "GEX_ENDPOINTS/endpoints must be 1..=65535, got {eps}"
            ))
        })?;
        let mode = config.wait_mode()?;
        let rank = boot.rank();
        let size = boot.size();
        if rank == 0 && config.bool("GEX_VERBOSEENV", false)? {
            eprint!(
                "gex: configuration (conduit {}):\n{}",
                C::NAME,
                config.describe()
            );
        }
        // Agree on the job layout.
        let mut mine = Vec::with_capacity(10);
        mine.extend_from_slice(&eps.to_le_bytes());
        mine.extend_from_slice(&(seg as u64).to_le_bytes());
        let all = boot.exchange(&mine)?;
        // The exchange comes from the launcher: check its shape before using it.
        if all.len() != size as usize || all.get(rank as usize) != Some(&mine) {
            return Err(InitError::Boot(crate::boot::BootError::Protocol(format!(
                "the bootstrap exchange returned {} layout blobs for {size} ranks{}",
                all.len(),
                if all.len() == size as usize {
                    ", and not this rank's own blob at its rank"
                } else {
                    ""
                }
            ))));
        }
        let mut layout = JobLayout {
            eps: Vec::new(),
            seg_len: Vec::new(),
            host: boot.host_ids().to_vec(),
        };
        for (r, b) in all.iter().enumerate() {
            if b.len() != 10 {
                return Err(InitError::Boot(crate::boot::BootError::Protocol(format!(
                    "layout blob of rank {r} has {} bytes",
                    b.len()
                ))));
            }
            let eps = u16::from_le_bytes([b[0], b[1]]);
            if eps == 0 {
                return Err(InitError::Boot(crate::boot::BootError::Protocol(format!(
                    "layout blob of rank {r} has no endpoint"
                ))));
            }
            layout.eps.push(eps);
            layout
                .seg_len
                .push(u64::from_le_bytes(b[2..10].try_into().expect("8 bytes")) as usize);
        }
        if layout.host.len() != size as usize {
            return Err(InitError::Config(format!(
                "bootstrap gave {} host ids for {size} ranks",
                layout.host.len()
            )));
        }
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
        let shared = Arc::new(Shared {
            rank,
            size,
            layout,
            yields,
        });
        Ok(Client {
            shared,
            conduit,
            policy,
            eps: Mutex::new(ceps.into_iter().map(Some).collect()),
            boot: Mutex::new(Some(boot)),
            config,
        })
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
    boot: Mutex<Option<Box<dyn Bootstrap>>>,
    config: Config,
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
        C::NAME
    }
    /// The conduit instance.
    pub fn conduit(&self) -> &Arc<C> {
        &self.conduit
    }
    /// The configuration this client was built with.
    pub fn config(&self) -> &Config {
        &self.config
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

    /// Takes endpoint `index` (each can be taken once). EP 0 is the primordial endpoint.
    ///
    /// # Errors
    /// [`EpError::NoSuchEndpoint`] or [`EpError::Taken`].
    pub fn endpoint(&self, index: u16) -> Result<Endpoint<C>, EpError> {
        let mut eps = self.eps.lock().unwrap_or_else(|e| e.into_inner());
        let count = eps.len() as u16;
        let slot = eps
            .get_mut(index as usize)
            .ok_or(EpError::NoSuchEndpoint { index, count })?;
        let cep = slot.take().ok_or(EpError::Taken(index))?;
        Ok(Endpoint::new(
            cep,
            self.shared.clone(),
            self.conduit.clone(),
            self.policy,
        ))
    }

    /// The primordial team: EP 0 of every rank, in rank order.
    pub fn primordial_team(&self) -> Team {
        Team {
            members: (0..self.shared.size).map(EpAddr::rank).collect(),
            me: self.shared.rank,
        }
    }

    /// A bootstrap barrier (slow path; does not poll endpoints — use
    /// [`Endpoint::barrier`] while AM traffic may be in flight).
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
    /// first (for example with [`Endpoint::barrier`]); endpoints should be dropped
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

/// An ordered set of endpoints. Only the primordial team exists in the core; teams
/// split by (color, key) come with the collectives layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Team {
    members: Vec<EpAddr>,
    me: Rank,
}

impl Team {
    /// Number of members.
    pub fn size(&self) -> usize {
        self.members.len()
    }
    /// Members in team-rank order.
    pub fn members(&self) -> &[EpAddr] {
        &self.members
    }
    /// The team rank of the calling rank, if it is a member.
    pub fn my_index(&self) -> Option<usize> {
        self.members.iter().position(|m| m.rank == self.me)
    }
    /// The endpoint of team rank `i`.
    pub fn member(&self, i: usize) -> Option<EpAddr> {
        self.members.get(i).copied()
    }
}
