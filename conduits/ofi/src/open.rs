//! Opening the conduit (`Conduit::open`), one named step per function:
//!
//! 1. [`Job::new`]: the job as this rank sees it (global endpoint numbering, hosts);
//! 2. the settings (`config`) and the provider's offer (`select`), then
//!    [`check_reach`]: a loopback-only offer, or `shm`, cannot reach other hosts;
//! 3. [`Plan::new`]: what every endpoint will be (buffer sizes, native RMA and atomics,
//!    relaxed puts, waiting);
//! 4. [`segments`]: this rank's segments, allocated here or, as the far part of a
//!    hybrid conduit (`FarConduit::open_far`), the near part's shared ones;
//! 5. [`open_endpoint`] for each endpoint: its domain, CQ, AV and RDM endpoint
//!    ([`open_objects`]), its buffer pools, slot table and registrations
//!    ([`register_memory`]);
//! 6. [`exchange`]: provider, Medium limit, addresses and segment keys of every rank
//!    through the bootstrap, the addresses inserted into each endpoint's AV
//!    ([`insert_addresses`]);
//! 7. the conduit object with its report, then the endpoints with their receive
//!    buffers posted ([`make_endpoints`]);
//! 8. `wireup::wireup`: every endpoint says hello to every other one and hears from
//!    all of them; with `shm` the names of this rank's regions are then unlinked
//!    (`wireup::unlink_names`);
//! 9. a bootstrap barrier.
//!
//! # Safety
//! Memory registered with libfabric here (pools, slot words, segments), or posted to it
//! (receive buffers), outlives its registrations and the endpoint, on every path,
//! errors included: registrations and the endpoint are closed with the endpoint's
//! objects (`ep::Objects`), which every owner declares, and so drops, before the pools
//! and slots ([`Local`], then the `OfiEp` and its `Grave`: the Safety sections of
//! `close` and `mem`); a registration made before a later one fails is closed by
//! [`register_memory`]'s return, while the pools still live; receive buffers are
//! posted only once they belong to an `OfiEp` ([`make_endpoints`]); segments are
//! declared before the endpoints' parts in [`open`] and then owned by the `Ofi`, which
//! closes its graves before it frees them.
#![allow(unsafe_code)]

use crate::Ofi;
use crate::conduit::RemoteSeg;
use crate::config::{
    CQ_SIZE, MAX_ARGS, MULTI_BUFS, RECV_BUFS, SEND_BUFS, Settings, conduit_err, settings,
};
use crate::ep::{Objects, OfiEp};
use crate::fabric::{Attrs, Av, Cq, Domain, Errno, Fabric, Info, Mr, flags};
use crate::mem::{Mem, Pool};
use crate::mr::{CacheConfig, MrCache, MrCounters, Registry};
use crate::report::{self, ReportIn};
use crate::rma::Rma;
use crate::runtime::{Published, Reach, Runtime, RuntimeIn};
use crate::rx::Rx;
use crate::select::{Chosen, choose, is_loopback, relaxed_limit};
use crate::stats::EpCounters;
use crate::tx::{LocalPath, Tx};
use crate::wire;
use crate::wireup::{unlink_names, wireup};
use gex_core::boot::Bootstrap;
use gex_core::spi::{Capabilities, Limits, OpenParams, SharedSegments};
use gex_core::{Category, InitError, WaitPolicy};
use std::mem::ManuallyDrop;
use std::sync::{Arc, Mutex};

/// Opens the conduit: the steps of the module documentation, in order. `shared`: the
/// segments of the near part of a hybrid conduit this one is the far part of.
pub(crate) fn open(
    boot: &mut dyn Bootstrap,
    params: &OpenParams<'_>,
    shared: Option<SharedSegments>,
) -> Result<(Arc<Ofi>, Vec<OfiEp>), InitError> {
    let job = Job::new(params, false);
    let s = settings(params)?;
    let chosen = choose(&s, job.single_host)?;
    // Endpoints made at run time: not as the far part of a hybrid conduit (which does
    // not offer them), nor with `shm`, whose region names are unlinked after the
    // wire-up (a later endpoint could not insert its peers' addresses).
    let runtime = shared.is_none() && chosen.attrs.provider != "shm";
    let job = Job::new(params, runtime);
    check_reach(&job, &s, &chosen.attrs)?;
    let plan = Plan::new(&s, &chosen, params, shared.is_some())?;
    let segs = segments(&job, shared.as_ref())?;
    let fab = Fabric::open(&chosen.info)
        .map_err(|e| fi_init(&plan.prov, format!("fi_fabric({})", chosen.attrs.fabric), e))?;
    let regions = Arc::new(Registry::default());
    let my_cap = job.cap[job.rank] as usize;
    let mr_counters: Vec<Arc<MrCounters>> = (0..my_cap)
        .map(|_| Arc::new(MrCounters::default()))
        .collect();
    let env = EpEnv {
        fab: &fab,
        info: &chosen.info,
        plan: &plan,
        s: &s,
        segs: &segs,
        extra: None,
        job: &job,
        regions: &regions,
    };
    let mut waitable = true;
    let mut locals = Vec::with_capacity(job.my_eps);
    for (e, mr_stats) in mr_counters.iter().take(job.my_eps).enumerate() {
        locals.push(open_endpoint(&env, e, mr_stats, &mut waitable)?);
    }
    let peers = exchange(boot, params, &job, &plan, &s, &locals, &segs)?;
    let addrs = insert_addresses(&mut locals, &peers.addrs, &plan.prov)?;
    let report = report::build(&ReportIn {
        s: &s,
        chosen: &chosen,
        plan: &plan,
        waitable,
        near: shared.as_ref().map(SharedSegments::near_ranks),
    });
    tracing::debug!(rank = job.rank, provider = %plan.prov, "ofi conduit open:\n{report}");
    let mut caps = capabilities(&plan, waitable);
    caps.set(Capabilities::RUNTIME_ENDPOINTS, runtime);
    let limits = Limits {
        max_args: MAX_ARGS,
        max_medium: peers.max_medium,
        max_long: peers.max_medium,
    };
    let published: Vec<Published> = locals
        .iter()
        .zip(&segs)
        .map(|(l, seg)| Published {
            name: l.name.clone(),
            seg_base: if plan.virt_addr { seg.base() as u64 } else { 0 },
            key: l.own_key,
        })
        .collect();
    let ofi = Arc::new(Ofi {
        report,
        seg_len: job.seg_len,
        remote: peers.remote,
        counters: (0..my_cap).map(|_| EpCounters::default()).collect(),
        mr_counters,
        regions,
        fabric: fab,
        info: chosen.info,
        shared,
        graves: Mutex::new(Vec::new()),
        rt: Runtime::new(RuntimeIn {
            enabled: runtime,
            job,
            plan,
            s,
            limits,
            caps,
            names: peers.addrs,
            published,
        }),
        segs,
    });
    let names: Vec<Vec<u8>> = locals.iter().map(|l| l.name.clone()).collect();
    let made = Made {
        locals,
        addrs,
        limits,
        caps,
    };
    let rt = &ofi.rt;
    let mut eps = make_endpoints(&ofi, made, &rt.job, &rt.plan, &rt.s)?;
    wireup(&mut eps, &rt.job.init_globals(), &rt.plan.prov)?;
    unlink_names(&rt.plan.prov, &names)?;
    boot.barrier()?;
    Ok((ofi, eps))
}

/// An `InitError` naming the provider, what failed and libfabric's error.
pub(crate) fn fi_init(prov: &str, what: String, e: Errno) -> InitError {
    conduit_err(format!("{prov}: {what}: {e}"))
}

/// The job as this rank sees it.
///
/// Endpoints are numbered globally over every rank's *capacity* (`cap`): its endpoint
/// capacity (`JobLayout::max_eps`) when the conduit makes endpoints at run time, else
/// the endpoints made at init; endpoint `e` of rank `r` is number `g_base[r] + e`.
#[derive(Debug)]
pub(crate) struct Job {
    /// This rank.
    pub(crate) rank: usize,
    /// First global endpoint number of every rank.
    pub(crate) g_base: Vec<usize>,
    /// Addressable endpoints of every rank (see above).
    pub(crate) cap: Vec<u16>,
    /// Endpoints every rank made at init.
    pub(crate) eps: Vec<u16>,
    /// Global endpoint numbers of the job (the sum of `cap`).
    pub(crate) total: usize,
    /// Endpoints of this rank made at init.
    pub(crate) my_eps: usize,
    /// Segment length of this rank's endpoints.
    pub(crate) seg_len: usize,
    /// Distinct hosts.
    hosts: usize,
    /// Whether every rank is on one host.
    single_host: bool,
}

impl Job {
    fn new(params: &OpenParams<'_>, runtime: bool) -> Job {
        let jl = params.layout;
        let rank = params.rank as usize;
        let cap: Vec<u16> = if runtime {
            jl.eps
                .iter()
                .zip(&jl.max_eps)
                .map(|(&e, &m)| e.max(m))
                .collect()
        } else {
            jl.eps.clone()
        };
        let mut g_base = Vec::with_capacity(cap.len());
        let mut total = 0usize;
        for &e in &cap {
            g_base.push(total);
            total += e as usize;
        }
        let mut h = jl.host.clone();
        h.sort_unstable();
        h.dedup();
        Job {
            rank,
            g_base,
            cap,
            eps: jl.eps.clone(),
            total,
            my_eps: jl.eps[rank] as usize,
            seg_len: jl.seg_len[rank],
            hosts: h.len(),
            single_host: h.len() <= 1,
        }
    }
}

impl Job {
    /// Global numbers of every endpoint made at init, in rank and index order.
    pub(crate) fn init_globals(&self) -> Vec<usize> {
        (0..self.eps.len())
            .flat_map(|r| (0..self.eps[r] as usize).map(move |e| self.g_base[r] + e))
            .collect()
    }
    /// Whether global number `g` is an endpoint made at init.
    pub(crate) fn is_init(&self, g: usize) -> bool {
        let r = self.g_base.partition_point(|&b| b <= g) - 1;
        g - self.g_base[r] < self.eps[r] as usize
    }
}

/// Fails at once when the chosen offer cannot reach every host of the job: the
/// loopback interface (unless named on purpose) or `shm` in a job of several hosts.
fn check_reach(job: &Job, s: &Settings, a: &Attrs) -> Result<(), InitError> {
    let (hosts, prov) = (job.hosts, &a.provider);
    if hosts > 1 && s.domain.is_none() && is_loopback(a) {
        return Err(conduit_err(format!(
            "{prov}: fi_getinfo offers only the loopback interface (domain {}, fabric {}) but this job spans {hosts} hosts, which it cannot reach: bring a network interface up (with carrier) or name one with GEX_OFI_DOMAIN or FI_TCP_IFACE",
            a.domain, a.fabric
        )));
    }
    if hosts > 1 && prov == "shm" {
        return Err(conduit_err(format!(
            "shm: fi_getinfo chose the shm provider, which reaches only processes of one host, but this job spans {hosts} hosts: choose a network provider (GEX_OFI_PROVIDER)"
        )));
    }
    Ok(())
}

/// What every endpoint of this rank will be, decided before any is opened (and those
/// made at run time too).
#[derive(Debug)]
pub(crate) struct Plan {
    /// The provider, as libfabric names it.
    pub(crate) prov: String,
    /// The provider's attributes.
    pub(crate) attrs: Attrs,
    /// `FI_MR_LOCAL`: the provider's, or `GEX_OFI_MR_LOCAL=1` (testing aid: descriptors
    /// are passed and local buffers registered although the provider does not ask).
    pub(crate) mr_local: bool,
    /// `FI_MR_ENDPOINT`: registrations are bound to the endpoint and enabled.
    pub(crate) mr_endpoint: bool,
    /// `FI_MR_VIRT_ADDR`: remote addresses are virtual, else offsets.
    pub(crate) virt_addr: bool,
    /// Multi-receive buffers.
    pub(crate) multi: bool,
    /// Native RMA.
    pub(crate) rma: bool,
    /// Native atomics.
    pub(crate) atomics: bool,
    /// The largest relaxed put, or why puts are not relaxed.
    pub(crate) relaxed: Result<usize, String>,
    /// Bytes per send buffer (the largest message, rounded to 64).
    pub(crate) stride: usize,
    /// Receive buffers per endpoint, and their size.
    pub(crate) rx_count: usize,
    pub(crate) rx_stride: usize,
    /// Whether CQs get a wait object: the wait policy may block, and the conduit is
    /// not the far part of a hybrid conduit (which never calls `block` on it: it naps
    /// on the near part, watching both).
    pub(crate) wait_obj: bool,
    /// Opened as the far part of a hybrid conduit.
    pub(crate) far: bool,
}

impl Plan {
    fn new(
        s: &Settings,
        chosen: &Chosen,
        params: &OpenParams<'_>,
        far: bool,
    ) -> Result<Plan, InitError> {
        let a = &chosen.attrs;
        let prov = a.provider.clone();
        let wire_max = wire::wire_len(Category::Long, MAX_ARGS, s.max_medium);
        if wire_max > a.max_msg_size {
            return Err(conduit_err(format!(
                "{prov}: messages of {wire_max} bytes exceed the provider's max_msg_size {} (lower GEX_OFI_MAX_MEDIUM)",
                a.max_msg_size
            )));
        }
        let stride = wire_max.next_multiple_of(64);
        let multi = chosen.multi_recv.is_ok();
        let (rx_count, rx_stride) = if multi {
            (MULTI_BUFS, (256 << 10).max(stride * 16))
        } else {
            (RECV_BUFS, stride)
        };
        let rma = chosen.rma.is_ok();
        Ok(Plan {
            mr_local: a.mr_mode & flags::MR_LOCAL != 0 || s.force_mr_local,
            mr_endpoint: a.mr_mode & flags::MR_ENDPOINT != 0,
            virt_addr: a.mr_mode & flags::MR_VIRT_ADDR != 0,
            multi,
            rma,
            atomics: rma && chosen.atomics.is_ok(),
            relaxed: relaxed_limit(rma, s.relaxed_puts, a),
            stride,
            rx_count,
            rx_stride,
            wait_obj: params.wait != WaitPolicy::Spin && !far,
            far,
            attrs: a.clone(),
            prov,
        })
    }

    /// The largest relaxed put (0: none).
    pub(crate) fn relaxed_max(&self) -> usize {
        self.relaxed.as_ref().map_or(0, |&m| m)
    }
}

/// This rank's segments: zero-filled allocations, or (far part of a hybrid conduit)
/// the near part's segments, mapped by every rank of the host, which the conduit keeps
/// mapped by holding `shared`.
fn segments(job: &Job, shared: Option<&SharedSegments>) -> Result<Vec<Mem>, InitError> {
    let Some(shared) = shared else {
        return (0..job.my_eps).map(|_| Mem::new(job.seg_len)).collect();
    };
    if shared.len() != job.my_eps {
        return Err(conduit_err(format!(
            "the near part of the hybrid conduit offers {} segments for {} endpoints",
            shared.len(),
            job.my_eps
        )));
    }
    (0..job.my_eps)
        .map(|e| match shared.segment(e) {
            (base, len) if len >= job.seg_len => Ok(Mem::shared(base)),
            (_, len) => Err(conduit_err(format!(
                "the near part's segment of EP {e} has {len} bytes, the layout says {}",
                job.seg_len
            ))),
        })
        .collect()
}

/// What opening each endpoint needs.
pub(crate) struct EpEnv<'a> {
    pub(crate) fab: &'a Fabric,
    pub(crate) info: &'a Info,
    pub(crate) plan: &'a Plan,
    pub(crate) s: &'a Settings,
    /// The segments of the endpoints made at init (registered in every domain).
    pub(crate) segs: &'a [Mem],
    /// An endpoint made at run time: its index and its own segment (registered in its
    /// domain besides those above).
    pub(crate) extra: Option<(usize, &'a Mem)>,
    pub(crate) job: &'a Job,
    pub(crate) regions: &'a Arc<Registry>,
}

/// One endpoint, opened but not yet connected to its peers. Field order is drop order:
/// the libfabric objects (endpoint, registrations) before the memory they name.
pub(crate) struct Local {
    pub(crate) objs: Objects,
    pub(crate) tx_pool: Pool,
    pub(crate) rx_pool: Pool,
    pub(crate) rma: Rma,
    /// Its address (`fi_getname`).
    pub(crate) name: Vec<u8>,
    /// The key of its own segment's registration in its domain (0 without RMA).
    pub(crate) own_key: u64,
}

/// Opens endpoint `e`: its libfabric objects, pools, slot table and registrations.
/// Clears `waitable` if its CQ has no wait object.
pub(crate) fn open_endpoint(
    env: &EpEnv<'_>,
    e: usize,
    mr_stats: &Arc<MrCounters>,
    waitable: &mut bool,
) -> Result<Local, InitError> {
    let plan = env.plan;
    let (domain, cq, av, ep, name) = open_objects(env, e, waitable)?;
    let mut tx_pool = Pool::new(SEND_BUFS, plan.stride)?;
    let mut rx_pool = Pool::new(plan.rx_count, plan.rx_stride)?;
    let mut rma = Rma::new(plan.rma, plan.atomics, plan.relaxed_max(), env.job.total)?;
    let reg = Registrar {
        domain: &domain,
        ep: &ep,
        prov: &plan.prov,
        e,
        bind: plan.mr_endpoint,
    };
    let (mrs, fixed, own_key) = register_memory(env, &reg, &mut tx_pool, &mut rx_pool, &mut rma)?;
    let cache = MrCache::new(
        CacheConfig {
            on: plan.mr_local && plan.rma,
            bind: plan.mr_endpoint,
            max_entries: env.s.mr_cache_entries,
            max_bytes: env.s.mr_cache_bytes,
            key_base: (e as u64) << 32,
        },
        fixed,
        env.regions.clone(),
        mr_stats.clone(),
    );
    Ok(Local {
        objs: Objects {
            ep,
            cache,
            _mrs: mrs,
            cq,
            av,
            domain,
        },
        tx_pool,
        rx_pool,
        rma,
        name,
        own_key,
    })
}

/// Endpoint `e`'s domain, CQ (with a wait object if the plan asks for one and the
/// provider offers it), AV and enabled RDM endpoint, and its address.
fn open_objects(
    env: &EpEnv<'_>,
    e: usize,
    waitable: &mut bool,
) -> Result<(Domain, Cq, Av, crate::fabric::Endpoint, Vec<u8>), InitError> {
    let (plan, total) = (env.plan, env.job.total);
    let p = plan.prov.as_str();
    let err = |what: String| move |x: Errno| fi_init(p, format!("EP {e}: {what}"), x);
    let domain = Domain::open(env.fab, env.info)
        .map_err(err(format!("fi_domain({})", plan.attrs.domain)))?;
    let cq = match Cq::open(&domain, CQ_SIZE, plan.wait_obj) {
        Ok(cq) => cq,
        Err(_) if plan.wait_obj => {
            *waitable = false;
            Cq::open(&domain, CQ_SIZE, false).map_err(err("fi_cq_open".into()))?
        }
        Err(x) => return Err(err("fi_cq_open".into())(x)),
    };
    *waitable &= cq.waitable();
    let av = Av::open(&domain, total).map_err(err(format!("fi_av_open({total} addresses)")))?;
    let mut ep =
        crate::fabric::Endpoint::open(&domain, env.info).map_err(err("fi_endpoint".into()))?;
    ep.bind_cq(&cq).map_err(err("fi_ep_bind(cq)".into()))?;
    ep.bind_av(&av).map_err(err("fi_ep_bind(av)".into()))?;
    ep.enable().map_err(err("fi_enable".into()))?;
    // After fi_enable: shm 1.17 creates its receive context there.
    if plan.multi {
        ep.set_min_multi_recv(plan.stride)
            .map_err(err("fi_setopt(FI_OPT_MIN_MULTI_RECV)".into()))?;
    }
    let name = ep.name().map_err(err("fi_getname".into()))?;
    Ok((domain, cq, av, ep, name))
}

/// Registers memory in one endpoint's domain (and binds it to the endpoint under
/// `FI_MR_ENDPOINT`).
struct Registrar<'a> {
    domain: &'a Domain,
    ep: &'a crate::fabric::Endpoint,
    prov: &'a str,
    e: usize,
    bind: bool,
}

impl Registrar<'_> {
    /// Registers `len` bytes at `base` with `access` and requested `key`; `what`
    /// names the memory in errors. The memory must outlive the registration.
    fn register(
        &self,
        base: *const u8,
        len: usize,
        access: u64,
        key: u64,
        what: &str,
    ) -> Result<Mr, InitError> {
        let e = self.e;
        // SAFETY: the memory (a pool, the slot words or a segment) outlives the
        // registration on every path (module Safety section): the MR is closed with
        // the endpoint's `Objects`, which every owner drops before the pools and slots
        // (`Local`, `Grave`; `OfiEp` through its grave), or, if `register_memory` fails
        // later, with its `mrs` while the pools still live in `open_endpoint`; the
        // segments outlive every endpoint.
        let mut mr = unsafe { Mr::register(self.domain, base, len, access, key) }.map_err(|x| {
            fi_init(
                self.prov,
                format!("EP {e}: fi_mr_reg({what}, {len} bytes)"),
                x,
            )
        })?;
        if self.bind {
            mr.bind(self.ep).map_err(|x| {
                fi_init(
                    self.prov,
                    format!("EP {e}: fi_mr_bind/fi_mr_enable({what})"),
                    x,
                )
            })?;
        }
        Ok(mr)
    }
}

/// Memory registered at open, in which local buffers of native operations need no
/// registration of their own (see `MrCache`): (base, length, descriptor).
type Fixed = Vec<(usize, usize, crate::fabric::Desc)>;

/// Registers an endpoint's memory: under `FI_MR_LOCAL` its pools and slot words; with
/// native RMA every segment of this rank (redundant registration, so any endpoint can
/// use any local segment as an RMA source or target without sharing a domain, seed
/// 002). Returns the registrations, the table of registered memory and the key of the
/// endpoint's own segment.
fn register_memory(
    env: &EpEnv<'_>,
    reg: &Registrar<'_>,
    tx_pool: &mut Pool,
    rx_pool: &mut Pool,
    rma: &mut Rma,
) -> Result<(Vec<Mr>, Fixed, u64), InitError> {
    let plan = env.plan;
    let key_base = (reg.e as u64) << 32;
    let mut mrs = Vec::new();
    let mut fixed = Vec::new();
    if plan.mr_local {
        // The pools may also be the local side of RMA (READ/WRITE).
        for (pool, access, key, what) in [
            (tx_pool, flags::SEND, 1, "send buffers"),
            (rx_pool, flags::RECV, 2, "receive buffers"),
        ] {
            let (base, len) = (pool.mem.base(), pool.len());
            let mr = reg.register(
                base,
                len,
                access | flags::READ | flags::WRITE,
                key_base | key,
                what,
            )?;
            pool.desc = mr.desc();
            fixed.push((base as usize, len, mr.desc()));
            mrs.push(mr);
        }
        if plan.rma {
            // The slots' operand, compare and result words (atomics), and the
            // landing word of a flush's read.
            let mr = reg.register(
                rma.words.base(),
                rma.words_len(),
                flags::READ | flags::WRITE,
                key_base | 3,
                "slot words (atomic operands, flush reads)",
            )?;
            rma.words_desc = mr.desc();
            mrs.push(mr);
        }
    }
    let mut own_key = 0u64;
    if plan.rma {
        let access = flags::READ
            | flags::WRITE
            | flags::REMOTE_READ
            | flags::REMOTE_WRITE
            | flags::SEND
            | flags::RECV;
        // The segment of EP `e`, at `at` in the table: segments first, the most common
        // local buffers.
        let mut segment = |e: usize, sm: &Mem, at: usize| {
            let len = env.job.seg_len;
            let key = key_base | (16 + e as u64);
            let mr = reg.register(sm.base(), len, access, key, &format!("segment of EP {e}"))?;
            fixed.insert(at, (sm.base() as usize, len, mr.desc()));
            let key = mr.key();
            mrs.push(mr);
            Ok::<_, InitError>(key)
        };
        for (j, sm) in env.segs.iter().enumerate() {
            let key = segment(j, sm, j)?;
            if j == reg.e {
                own_key = key;
            }
        }
        if let Some((e, sm)) = env.extra {
            // An endpoint made at run time: its own segment, in its own domain only.
            own_key = segment(e, sm, 0)?;
        }
    }
    Ok((mrs, fixed, own_key))
}

/// What every rank published.
struct Peers {
    /// Address of every endpoint of the job made at init, by global number (`None`
    /// for the numbers of endpoints made at run time).
    addrs: Vec<Option<Vec<u8>>>,
    /// Segment of every endpoint of the job (`None` without native RMA).
    remote: Vec<Option<RemoteSeg>>,
    /// The smallest Medium limit of all ranks.
    max_medium: usize,
}

/// Exchanges provider, Medium limit, addresses and segment keys of every rank through
/// the bootstrap and checks that every rank opened the same provider.
fn exchange(
    boot: &mut dyn Bootstrap,
    params: &OpenParams<'_>,
    job: &Job,
    plan: &Plan,
    s: &Settings,
    locals: &[Local],
    segs: &[Mem],
) -> Result<Peers, InitError> {
    let blob = wire::PeerBlob {
        provider: plan.prov.clone(),
        max_medium: s.max_medium as u64,
        eps: locals
            .iter()
            .zip(segs)
            .map(|(l, seg)| wire::PublishedEp {
                addr: l.name.clone(),
                seg_base: seg.base() as u64,
                // What `register_memory` registered (and `segments` allocated or
                // checked the near part's segment holds).
                seg_len: job.seg_len as u64,
                key: l.own_key,
            })
            .collect(),
    }
    .encode();
    let all = boot.exchange(&blob)?;
    // Indexed by rank: the bootstrap (a safe trait) is checked, not trusted.
    let size = params.layout.eps.len();
    if all.len() != size {
        return Err(conduit_err(format!(
            "the bootstrap exchange returned {} address blobs for {size} ranks",
            all.len()
        )));
    }
    let mut peers = Peers {
        addrs: Vec::with_capacity(job.total),
        remote: Vec::with_capacity(job.total),
        max_medium: s.max_medium,
    };
    let own_addr = locals.first().map_or(&[][..], |l| &l.name[..]);
    for (r, b) in all.iter().enumerate() {
        parse_blob(&mut peers, r, b, params, job, plan, own_addr)?;
    }
    Ok(peers)
}

/// Adds rank `r`'s published blob `b` to `peers`, after checking it against the job
/// layout (its endpoint count, each endpoint's segment length) and this rank's
/// provider (the provider's name; every address of the provider's form: as long as
/// this rank's own address `own_addr`, or for string addresses NUL-terminated).
#[allow(clippy::too_many_arguments)]
fn parse_blob(
    peers: &mut Peers,
    r: usize,
    b: &[u8],
    params: &OpenParams<'_>,
    job: &Job,
    plan: &Plan,
    own_addr: &[u8],
) -> Result<(), InitError> {
    let jl = params.layout;
    let prov = &plan.prov;
    let pb = wire::PeerBlob::decode(b)
        .map_err(|e| conduit_err(format!("rank {r} sent a malformed address blob: {e}")))?;
    let p = pb.provider;
    if &p != prov {
        return Err(conduit_err(format!(
            "rank {r} opened provider {p}, this rank (rank {}) {prov}: every rank must use the same provider (GEX_OFI_PROVIDER, FI_PROVIDER)",
            job.rank
        )));
    }
    peers.max_medium = peers
        .max_medium
        .min(usize::try_from(pb.max_medium).unwrap_or(usize::MAX));
    let k = pb.eps.len();
    if k != jl.eps[r] as usize {
        return Err(conduit_err(format!(
            "rank {r} published {k} endpoints, the layout says {}",
            jl.eps[r]
        )));
    }
    for (e, p) in pb.eps.into_iter().enumerate() {
        // The core validates every Long and RMA range to rank r against the layout;
        // the segment behind this endpoint's key must be that long.
        if usize::try_from(p.seg_len).ok() != Some(jl.seg_len[r]) {
            return Err(conduit_err(format!(
                "rank {r} EP {e} published a segment of {} bytes, the job layout says {}",
                p.seg_len, jl.seg_len[r]
            )));
        }
        check_address(r, e, &p.addr, own_addr, plan)?;
        peers.addrs.push(Some(p.addr));
        peers.remote.push(plan.rma.then_some(RemoteSeg {
            base: if plan.virt_addr { p.seg_base } else { 0 },
            len: jl.seg_len[r],
            key: p.key,
        }));
    }
    // Numbers of the endpoints it may make at run time: found on first contact.
    for _ in k..job.cap[r] as usize {
        peers.addrs.push(None);
        peers.remote.push(None);
    }
    Ok(())
}

/// Checks that endpoint `e` of rank `r` published an address of this provider's form:
/// a NUL-terminated string for string formats (`FI_ADDR_STR`, e.g. `shm`), else as
/// long as this rank's own address `own` (one binary format per provider and fabric,
/// e.g. a 16-byte `sockaddr_in` under `tcp`). `fi_av_insert` takes no length, so the
/// provider would otherwise read past a short address or parse a wrong one.
pub(crate) fn check_address(
    r: usize,
    e: usize,
    addr: &[u8],
    own: &[u8],
    plan: &Plan,
) -> Result<(), InitError> {
    let prov = &plan.prov;
    let ok = if plan.attrs.addr_str {
        addr.len() <= MAX_STR_ADDR && addr.contains(&0)
    } else {
        addr.len() == own.len()
    };
    if ok {
        return Ok(());
    }
    Err(conduit_err(format!(
        "rank {r} EP {e} published a {}-byte address, which is not a {prov} address ({})",
        addr.len(),
        if plan.attrs.addr_str {
            format!("a NUL-terminated string of at most {MAX_STR_ADDR} bytes")
        } else {
            format!("{} bytes, as this rank's", own.len())
        }
    )))
}

/// The longest string address accepted from a peer (`shm`'s are about 30 bytes).
const MAX_STR_ADDR: usize = 4096;

/// Inserts every known endpoint's address into each local endpoint's AV; returns, per
/// local endpoint, the AV address of every endpoint of the job
/// ([`NOT_AVAIL`](crate::fabric::NOT_AVAIL) for those not known).
pub(crate) fn insert_addresses(
    locals: &mut [Local],
    addrs: &[Option<Vec<u8>>],
    prov: &str,
) -> Result<Vec<Vec<u64>>, InitError> {
    let mut per_ep = Vec::with_capacity(locals.len());
    for (e, l) in locals.iter_mut().enumerate() {
        let mut v = Vec::with_capacity(addrs.len());
        for (g, name) in addrs.iter().enumerate() {
            let Some(name) = name else {
                v.push(crate::fabric::NOT_AVAIL);
                continue;
            };
            v.push(l.objs.av.insert(name).map_err(|x| {
                fi_init(
                    prov,
                    format!("EP {e}: fi_av_insert(address of endpoint {g})"),
                    x,
                )
            })?);
        }
        per_ep.push(v);
    }
    Ok(per_ep)
}

/// The capability flags of every endpoint.
fn capabilities(plan: &Plan, waitable: bool) -> Capabilities {
    let mut caps = Capabilities::empty();
    caps.set(Capabilities::BLOCKING_WAIT, waitable && plan.wait_obj);
    caps.set(Capabilities::NATIVE_RMA, plan.rma);
    caps.set(Capabilities::NATIVE_ATOMICS, plan.atomics);
    caps
}

/// The opened parts every endpoint is made of.
struct Made {
    locals: Vec<Local>,
    addrs: Vec<Vec<u64>>,
    limits: Limits,
    caps: Capabilities,
}

/// Makes the endpoints from their opened parts and posts their receive buffers (each
/// endpoint's once it is an `OfiEp`, whose drop closes the libfabric endpoint before it
/// frees the buffers).
fn make_endpoints(
    ofi: &Arc<Ofi>,
    made: Made,
    job: &Job,
    plan: &Plan,
    s: &Settings,
) -> Result<Vec<OfiEp>, InitError> {
    let Made {
        locals,
        addrs,
        limits,
        caps,
    } = made;
    let mut eps = Vec::with_capacity(job.my_eps);
    for (e, (l, addrs)) in locals.into_iter().zip(addrs).enumerate() {
        // Every endpoint made at init is reached at once; those made at run time are
        // found on first contact.
        let reach = (0..job.total)
            .map(|g| {
                if job.is_init(g) {
                    Reach::Ready
                } else {
                    Reach::Unknown
                }
            })
            .collect();
        let parts = Parts {
            local: l,
            index: e,
            addrs,
            reach,
            seg: ofi.segs[e].base(),
            limits,
            caps,
        };
        eps.push(assemble(ofi, parts, job, plan, s)?);
    }
    Ok(eps)
}

/// What [`assemble`] makes an endpoint of.
pub(crate) struct Parts {
    pub(crate) local: Local,
    pub(crate) index: usize,
    /// AV address of every endpoint of the job (`NOT_AVAIL`: not known yet).
    pub(crate) addrs: Vec<u64>,
    /// How far every endpoint of the job is reached (see [`Reach`]).
    pub(crate) reach: Vec<Reach>,
    /// Its segment.
    pub(crate) seg: *mut u8,
    pub(crate) limits: Limits,
    pub(crate) caps: Capabilities,
}

/// Makes an endpoint (made at init or at run time) from its opened parts and posts its
/// receive buffers (once it is an `OfiEp`, whose drop closes the libfabric endpoint
/// before it frees the buffers).
pub(crate) fn assemble(
    ofi: &Arc<Ofi>,
    p: Parts,
    job: &Job,
    plan: &Plan,
    s: &Settings,
) -> Result<OfiEp, InitError> {
    let (l, e) = (p.local, p.index);
    let rank = job.rank as u32;
    let h = l.objs.ep.handle();
    let who: Arc<str> = format!("ofi({}) rank {rank} EP {e}", plan.prov).into();
    let mut tx = Tx::new(
        h,
        rank,
        e as u16,
        job.g_base.clone(),
        p.addrs,
        plan.attrs.inject_size,
        l.tx_pool,
        s.credits,
        who,
        plan.prov != "shm",
    );
    tx.reach = p.reach;
    let mut rx = Rx::new(
        h,
        l.rx_pool,
        plan.multi,
        p.seg,
        job.seg_len,
        job.g_base.clone(),
        job.cap.clone(),
    );
    if let Some(hub) = &ofi.rt.hub {
        let cap = job.cap[job.rank] as usize;
        tx.local = LocalPath {
            hub: Some(hub.clone()),
            lo: job.g_base[job.rank],
            cap,
            init: job.my_eps,
            runtime: e >= job.my_eps,
            out: (0..cap).map(|_| None).collect(),
        };
        rx.hub = Some(hub.clone());
        rx.index = e;
    }
    let mut ep = OfiEp {
        tx: ManuallyDrop::new(tx),
        rx: ManuallyDrop::new(rx),
        rma: ManuallyDrop::new(l.rma),
        objs: ManuallyDrop::new(l.objs),
        index: e as u16,
        limits: p.limits,
        caps: p.caps,
        conduit: ofi.clone(),
    };
    // Posted only now that the buffers belong to an `OfiEp`: on every path from
    // here (this error's included: dropping `ep` moves its parts into a grave,
    // endpoint first) the libfabric endpoint is closed before the receive pool is
    // freed. Posting from the local `Rx` freed the pool first on this error.
    ep.post_receives()
        .map_err(|x| fi_init(&plan.prov, format!("EP {e}: fi_recvmsg"), x))?;
    Ok(ep)
}

#[cfg(test)]
mod tests {
    use crate::Ofi;
    use crate::test_hooks::{self, Event};
    use gex_core::boot::Singleton;
    use gex_core::{ClientBuilder, Config};

    /// A receive post that fails in `make_endpoints` (the second of the endpoint's
    /// buffers, after the first was posted) ends `open` with an error naming
    /// `fi_recvmsg`; on that path every posted buffer outlives its endpoint: the
    /// endpoint is closed before the receive pool is freed.
    #[test]
    fn a_failed_receive_post_closes_the_endpoint_before_freeing_its_buffers() {
        test_hooks::start_log();
        test_hooks::fail_post_after(1);
        let r = ClientBuilder::new()
            .segment_size(1 << 16)
            .config(Config::from_pairs([("GEX_OFI_PROVIDER", "tcp")]))
            .init::<Ofi>(Box::new(Singleton::new()));
        let log = test_hooks::take_log();
        let err = match r {
            Ok(_) => panic!("open succeeded although a receive post failed"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("fi_recvmsg"), "{err}");
        let posted: Vec<(usize, usize)> = log
            .iter()
            .filter_map(|e| match *e {
                Event::Posted { ep, buf } => Some((ep, buf)),
                _ => None,
            })
            .collect();
        assert_eq!(
            posted.len(),
            1,
            "one buffer posted before the failure: {log:?}"
        );
        for (ep, buf) in posted {
            let closed = log.iter().position(|e| *e == Event::Closed { ep });
            let freed = log.iter().position(
                |e| matches!(*e, Event::Freed { base, len } if base <= buf && buf < base + len),
            );
            let (Some(closed), Some(freed)) = (closed, freed) else {
                panic!("endpoint closed at {closed:?}, buffer freed at {freed:?}: {log:?}");
            };
            assert!(
                closed < freed,
                "the receive buffer at {buf:#x} was freed (event {freed}) while posted to its endpoint, closed only later (event {closed}): {log:?}"
            );
        }
    }
}
