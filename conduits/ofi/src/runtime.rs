//! Endpoints made at run time (`Conduit::open_endpoint`, `Client::create_endpoint`):
//! opening one, the directory of this rank's endpoints, and finding a peer's on first
//! contact, without a collective.
//!
//! - **Opening.** An endpoint made at run time gets what one made at init gets (its own
//!   domain, CQ, AV, RDM endpoint, buffer pools and RMA slots), its own segment, and
//!   registers that segment and the segments of the endpoints made at init in its own
//!   domain (redundant registration, seed 002). Its AV starts with the addresses of
//!   every endpoint made at init (known since `open`) and its own. It is then published
//!   in this rank's directory ([`Runtime`]): address, segment base and key.
//! - **Discovery.** Endpoint `j` of rank `r` is numbered globally like every other
//!   (`crate::open::Job`). A request to it from an endpoint that has not reached it yet
//!   ([`Reach::Unknown`]) sends a control message `CTL_ADDR_REQ` ("where is your
//!   endpoint `j`", with the asker's own address) to endpoint 0 of rank `r`, whose
//!   address everyone has known since `open`, and answers back-pressure
//!   (`WouldBlock`) until the answer `CTL_ADDR_ANS` (open with its address, not created
//!   yet, or closed) has been read by the asker's own `poll`. The asker's address,
//!   recorded in rank `r`'s table of names on the way, lets every endpoint of `r` answer
//!   it later. Endpoints of this rank are looked up in the directory directly. An
//!   endpoint made at run time registers itself the same way with every rank it sends
//!   to (a request from it to endpoint 0 of that rank first), so the receiver finds its
//!   address when it must reply.
//! - **Who answers.** Endpoint 0's `poll` (a control message to it is handled like any
//!   message it receives); the directory is a small lock per index, taken on these
//!   paths only, never by `poll` of an endpoint for its own traffic.
//! - **Closing.** Dropping an endpoint made at run time marks it closed in the
//!   directory (later answers say so) and sends `CTL_CLOSED` to every endpoint that
//!   looked it up; their next request to it fails with `ConduitError::NoEndpoint`.

use crate::Ofi;
use crate::close::Grave;
use crate::config::Settings;
use crate::ep::OfiEp;
use crate::fabric::NOT_AVAIL;
use crate::mem::Mem;
use crate::open::{EpEnv, Job, Parts, Plan, assemble, check_address};
use crate::tx::LocalHub;
use crate::wire::{
    self, AddrAns, CTL_ADDR_ANS, CTL_ADDR_REQ, CTL_CLOSED, HEADER, Header, ST_ABSENT, ST_CLOSED,
    ST_OPEN,
};
use gex_core::spi::{Capabilities, ConduitError, Limits};
use gex_core::{EpAddr, EpIndex};
use std::sync::{Arc, Mutex, OnceLock};

/// How far requests from an endpoint to a peer endpoint are possible.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reach {
    /// Its address is in this endpoint's AV and the peer's rank knows this endpoint's:
    /// requests go.
    Ready,
    /// Not looked up yet.
    Unknown,
    /// Asked its rank's endpoint 0; this many answers are still to come (the last one
    /// decides: answers come back in order).
    Asking(u8),
    /// Its rank answered "not created yet": an immediate request (`imm`) reports it at
    /// once and asks again in the background (`asked`), so a later answer "open" lets a
    /// later one through; a request that may wait asks again and waits for the answer
    /// (so a program that synchronised with the peer after it created the endpoint
    /// never sees a stale answer).
    Absent {
        /// A new question is on its way.
        asked: bool,
        /// The answer has not been reported to a request yet.
        fresh: bool,
    },
    /// Closed (indices are never reused).
    Closed,
}

/// An endpoint of this rank as the directory publishes it.
#[derive(Clone, Debug)]
pub(crate) struct Published {
    /// Its fabric address (`fi_getname`).
    pub(crate) name: Vec<u8>,
    /// The RMA address of its segment's offset 0 (0 without `FI_MR_VIRT_ADDR`).
    pub(crate) seg_base: u64,
    /// The key of its segment's registration in its own domain.
    pub(crate) key: u64,
}

/// One index of this rank's directory.
#[derive(Debug)]
struct Slot {
    /// `ST_ABSENT`, `ST_OPEN` or `ST_CLOSED`.
    state: u8,
    published: Option<Published>,
    /// Global numbers of the endpoints that looked it up while open: told when it closes.
    askers: Vec<usize>,
}

/// What [`Runtime::new`] is made of (what `open` decided and learnt).
pub(crate) struct RuntimeIn {
    /// Whether endpoints may be made at run time.
    pub(crate) enabled: bool,
    pub(crate) job: Job,
    pub(crate) plan: Plan,
    pub(crate) s: Settings,
    pub(crate) limits: Limits,
    pub(crate) caps: Capabilities,
    /// The address of every endpoint made at init, by global number.
    pub(crate) names: Vec<Option<Vec<u8>>>,
    /// This rank's endpoints made at init.
    pub(crate) published: Vec<Published>,
}

/// The state endpoints made at run time need, kept in the conduit.
#[derive(Debug)]
pub(crate) struct Runtime {
    /// Whether endpoints may be made at run time (not as the far part of a hybrid
    /// conduit, not with `shm`).
    pub(crate) enabled: bool,
    pub(crate) job: Job,
    pub(crate) plan: Plan,
    pub(crate) s: Settings,
    limits: Limits,
    caps: Capabilities,
    /// The address of every endpoint of the job this rank has learnt, by global
    /// number: those made at init (from `open`), this rank's (when made), and peers'
    /// made at run time that asked this rank's endpoint 0 for an address.
    pub(crate) names: Vec<OnceLock<Vec<u8>>>,
    /// This rank's endpoints, by index (its capacity).
    dir: Vec<Mutex<Slot>>,
    /// Segments of this rank's endpoints made at run time (index - endpoints made at
    /// init), freed with the conduit.
    segs: Vec<OnceLock<Mem>>,
    /// Serialises `open_endpoint` (a domain opened from the fabric at a time).
    opening: Mutex<()>,
    /// The in-process path between this rank's endpoints (when enabled).
    pub(crate) hub: Option<Arc<LocalHub>>,
}

impl Runtime {
    pub(crate) fn new(i: RuntimeIn) -> Runtime {
        let rank = i.job.rank;
        let cap = i.job.cap[rank] as usize;
        let names = i
            .names
            .into_iter()
            .map(|n| {
                let l = OnceLock::new();
                if let Some(n) = n {
                    let _ = l.set(n);
                }
                l
            })
            .collect();
        let mut published = i.published.into_iter();
        let dir = (0..cap)
            .map(|_| {
                let p = published.next();
                Mutex::new(Slot {
                    state: if p.is_some() { ST_OPEN } else { ST_ABSENT },
                    published: p,
                    askers: Vec::new(),
                })
            })
            .collect();
        Runtime {
            hub: i
                .enabled
                .then(|| Arc::new(LocalHub::new(cap, i.plan.stride))),
            segs: (i.job.my_eps..cap).map(|_| OnceLock::new()).collect(),
            enabled: i.enabled,
            job: i.job,
            plan: i.plan,
            s: i.s,
            limits: i.limits,
            caps: i.caps,
            names,
            dir,
            opening: Mutex::new(()),
        }
    }

    fn slot(&self, index: usize) -> std::sync::MutexGuard<'_, Slot> {
        self.dir[index].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// This rank's endpoint `index` for the endpoint `asker` (global number): its
    /// state and, when open, what it published; an open endpoint made at run time
    /// remembers the asker, to tell it when it closes.
    fn lookup(&self, index: usize, asker: usize) -> (u8, Option<Published>) {
        let Some(slot) = self.dir.get(index) else {
            return (ST_ABSENT, None);
        };
        let mut s = slot.lock().unwrap_or_else(|e| e.into_inner());
        if s.state == ST_OPEN && index >= self.job.my_eps && !s.askers.contains(&asker) {
            s.askers.push(asker);
        }
        (s.state, s.published.clone())
    }

    /// Whether `name`, from a peer endpoint (rank `r`, index `e`), has this provider's
    /// address form (see `open::check_address`).
    fn valid_name(&self, r: u32, e: u16, name: &[u8]) -> bool {
        let own = self.job.g_base[self.job.rank];
        let own = self.names[own].get().map_or(&[][..], |n| &n[..]);
        check_address(r as usize, e as usize, name, own, &self.plan).is_ok()
    }
}

/// A `ConduitError::NoEndpoint`.
fn no_endpoint(dst: EpAddr, state: &'static str) -> ConduitError {
    ConduitError::NoEndpoint { dst, state }
}

/// `Conduit::open_endpoint`: see the module documentation.
pub(crate) fn open_endpoint(ofi: &Arc<Ofi>, index: EpIndex) -> Result<OfiEp, ConduitError> {
    let rt = &ofi.rt;
    if !rt.enabled {
        return Err(ConduitError::Unsupported {
            conduit: "ofi",
            what: if ofi.shared.is_some() {
                "endpoints made at run time as the far part of a hybrid conduit"
            } else {
                "endpoints made at run time with the shm provider"
            },
        });
    }
    let _one = rt.opening.lock().unwrap_or_else(|e| e.into_inner());
    let job = &rt.job;
    let i = index as usize;
    let cap = job.cap[job.rank] as usize;
    if i < job.my_eps || i >= cap {
        return Err(ConduitError::Contract(format!(
            "ofi: open_endpoint({index}) outside the run-time indices {}..{cap}",
            job.my_eps
        )));
    }
    if rt.slot(i).state != ST_ABSENT {
        return Err(ConduitError::Contract(format!(
            "ofi: open_endpoint({index}): endpoint {index} was opened before"
        )));
    }
    let failed = |e: gex_core::InitError| ConduitError::Network(e.to_string());
    let seg = Mem::new(job.seg_len).map_err(failed)?;
    if rt.segs[i - job.my_eps].set(seg).is_err() {
        return Err(ConduitError::Contract(format!(
            "ofi: open_endpoint({index}): a segment exists already"
        )));
    }
    let seg = rt.segs[i - job.my_eps].get().expect("set above");
    let env = EpEnv {
        fab: &ofi.fabric,
        info: &ofi.info,
        plan: &rt.plan,
        s: &rt.s,
        segs: &ofi.segs,
        extra: Some((i, seg)),
        job,
        regions: &ofi.regions,
    };
    let mut waitable = true;
    let mut local =
        crate::open::open_endpoint(&env, i, &ofi.mr_counters[i], &mut waitable).map_err(failed)?;
    // Its AV: every endpoint made at init, and itself.
    let own = job.g_base[job.rank] + i;
    let _ = rt.names[own].set(local.name.clone());
    let mut addrs = vec![NOT_AVAIL; job.total];
    let mut reach = vec![Reach::Unknown; job.total];
    for g in job.init_globals().into_iter().chain([own]) {
        let name = rt.names[g].get().expect("known since open");
        addrs[g] = local.objs.av.insert(name).map_err(|x| {
            ConduitError::Network(format!(
                "ofi({}) EP {i}: fi_av_insert(address of endpoint {g}): {x}",
                rt.plan.prov
            ))
        })?;
    }
    // This rank's endpoints made at init find its address in `names`; peers' learn it
    // when it first asks their endpoint 0.
    for e in 0..job.my_eps {
        reach[job.g_base[job.rank] + e] = Reach::Ready;
    }
    reach[own] = Reach::Ready;
    let mut caps = rt.caps;
    caps.set(
        Capabilities::BLOCKING_WAIT,
        caps.contains(Capabilities::BLOCKING_WAIT) && waitable,
    );
    let published = Published {
        name: local.name.clone(),
        seg_base: if rt.plan.virt_addr {
            seg.base() as u64
        } else {
            0
        },
        key: local.own_key,
    };
    let parts = Parts {
        local,
        index: i,
        addrs,
        reach,
        seg: seg.base(),
        limits: rt.limits,
        caps,
    };
    let ep = assemble(ofi, parts, job, &rt.plan, &rt.s).map_err(failed)?;
    // Reachable from now on.
    let mut s = rt.slot(i);
    s.published = Some(published);
    s.state = ST_OPEN;
    Ok(ep)
}

impl OfiEp {
    /// Whether requests to `g` (`dst`) may go now, for a peer endpoint not (yet)
    /// [`Reach::Ready`]: looks it up (this rank's directory, or a `CTL_ADDR_REQ` to its
    /// rank's endpoint 0, answering `false` until the answer comes), or reports it not
    /// open.
    ///
    /// # Errors
    /// [`ConduitError::NoEndpoint`] for an endpoint not created yet or closed;
    /// [`ConduitError::Network`] if the provider fails.
    #[cold]
    pub(crate) fn reach_slow(
        &mut self,
        g: usize,
        dst: EpAddr,
        imm: bool,
    ) -> Result<bool, ConduitError> {
        match self.tx.reach[g] {
            Reach::Ready => Ok(true),
            Reach::Asking(_) => Ok(false),
            Reach::Closed => Err(no_endpoint(dst, "closed")),
            Reach::Absent { asked, fresh: true } => {
                self.tx.reach[g] = Reach::Absent {
                    asked,
                    fresh: false,
                };
                Err(no_endpoint(dst, "not created yet"))
            }
            Reach::Absent { asked, .. } if !imm => {
                // Ask afresh and wait for that answer (one asked before may be stale).
                let sent = self.ask(dst)?;
                self.tx.reach[g] = match (asked, sent) {
                    (true, true) => Reach::Asking(2),
                    (true, false) | (false, true) => Reach::Asking(1),
                    (false, false) => Reach::Absent {
                        asked: false,
                        fresh: false,
                    },
                };
                Ok(false)
            }
            Reach::Absent { asked: true, .. } => Err(no_endpoint(dst, "not created yet")),
            Reach::Absent { asked: false, .. } => {
                if self.ask(dst)? {
                    self.tx.reach[g] = Reach::Absent {
                        asked: true,
                        fresh: false,
                    };
                }
                Err(no_endpoint(dst, "not created yet"))
            }
            Reach::Unknown => self.discover(g, dst),
        }
    }

    /// Sends a `CTL_ADDR_REQ` for `dst` (another rank's endpoint) to its rank's
    /// endpoint 0; `Ok(false)`: no resources now.
    fn ask(&mut self, dst: EpAddr) -> Result<bool, ConduitError> {
        let conduit = self.conduit.clone();
        let own = self.tx.g(EpAddr::new(self.tx.rank, self.index));
        let name = conduit.rt.names[own].get().expect("own address known");
        let body = wire::addr_req(dst.ep, name);
        let g0 = self.tx.g(EpAddr::new(dst.rank, 0));
        self.tx.send_ctl(g0, CTL_ADDR_REQ, &body)
    }

    fn discover(&mut self, g: usize, dst: EpAddr) -> Result<bool, ConduitError> {
        let conduit = self.conduit.clone();
        let rt = &conduit.rt;
        let me = self.tx.rank;
        let own = self.tx.g(EpAddr::new(me, self.index));
        if dst.rank == me {
            return match rt.lookup(dst.ep as usize, own) {
                (ST_OPEN, Some(p)) => {
                    self.add_peer(g, &p.name)?;
                    self.tx.reach[g] = Reach::Ready;
                    Ok(true)
                }
                (ST_CLOSED, _) => {
                    self.tx.reach[g] = Reach::Closed;
                    Err(no_endpoint(dst, "closed"))
                }
                _ => Err(no_endpoint(dst, "not created yet")),
            };
        }
        if self.ask(dst)? {
            self.tx.reach[g] = Reach::Asking(1);
        }
        Ok(false)
    }

    /// Inserts `name` into this endpoint's AV as endpoint `g`'s, unless it is there.
    fn add_peer(&mut self, g: usize, name: &[u8]) -> Result<(), ConduitError> {
        if self.tx.addrs[g] != NOT_AVAIL {
            return Ok(());
        }
        let a = self.objs.av.insert(name).map_err(|x| {
            ConduitError::Network(format!(
                "{}: fi_av_insert(address of endpoint {g}): {x}",
                self.tx.who
            ))
        })?;
        self.tx.addrs[g] = a;
        Ok(())
    }

    /// A message came from `g` (rank `rank`, index `ep`), an endpoint made at run time
    /// not in this endpoint's AV: its address is in the conduit's table (it asked this
    /// rank's endpoint 0 before sending here, or is of this rank).
    #[cold]
    pub(crate) fn learn(&mut self, g: usize, rank: u32, ep: u16) {
        let conduit = self.conduit.clone();
        let Some(name) = conduit.rt.names[g].get() else {
            self.die(format!(
                "a message from rank {rank} EP {ep}, an endpoint made at run time that never asked this rank's endpoint 0 for an address"
            ));
        };
        if let Err(e) = self.add_peer(g, name) {
            self.die(e.to_string());
        }
    }

    /// A control message from `g` (see the module documentation).
    #[cold]
    pub(crate) fn control(&mut self, g: usize, h: &Header, body: &[u8]) {
        let conduit = self.conduit.clone();
        let rt = &conduit.rt;
        let (rank, ep) = (h.src_rank, h.src_ep);
        match h.ctl {
            CTL_ADDR_REQ => {
                let (index, name) = wire::parse_addr_req(body).unwrap_or_else(|e| {
                    self.die(format!(
                        "malformed control message from rank {rank} EP {ep}: {e}"
                    ))
                });
                if !rt.enabled || !rt.valid_name(rank, ep, name) {
                    self.die(format!(
                        "rank {rank} EP {ep} asked for an address, giving a {}-byte address of its own that is not one of this provider's",
                        name.len()
                    ));
                }
                let _ = rt.names[g].set(name.to_vec());
                let name = rt.names[g].get().expect("set above");
                if let Err(e) = self.add_peer(g, name) {
                    self.die(e.to_string());
                }
                let ans = match rt.lookup(index as usize, g) {
                    (ST_OPEN, Some(p)) => AddrAns {
                        index,
                        state: ST_OPEN,
                        seg_base: p.seg_base,
                        key: p.key,
                        name: &p.name,
                    }
                    .encode(),
                    (state, _) => AddrAns {
                        index,
                        state: if state == ST_CLOSED {
                            ST_CLOSED
                        } else {
                            ST_ABSENT
                        },
                        seg_base: 0,
                        key: 0,
                        name: &[],
                    }
                    .encode(),
                };
                if let Err(e) = self.queue_ctl(g, CTL_ADDR_ANS, &ans) {
                    self.die(format!("answering rank {rank} EP {ep}: {e}"));
                }
            }
            CTL_ADDR_ANS => {
                let a = wire::parse_addr_ans(body).unwrap_or_else(|e| {
                    self.die(format!(
                        "malformed control message from rank {rank} EP {ep}: {e}"
                    ))
                });
                let Some(t) = self.rx.g_of(rank, a.index) else {
                    self.die(format!(
                        "rank {rank} answered for its endpoint {}, beyond its capacity",
                        a.index
                    ));
                };
                match self.tx.reach[t] {
                    Reach::Asking(n) if n > 1 => {
                        self.tx.reach[t] = Reach::Asking(n - 1);
                        return;
                    }
                    Reach::Asking(_) | Reach::Absent { asked: true, .. } => {}
                    _ => return,
                }
                self.tx.reach[t] = match a.state {
                    ST_OPEN => {
                        if !rt.valid_name(rank, a.index, a.name) {
                            self.die(format!(
                                "rank {rank} answered for its endpoint {} with a {}-byte address that is not one of this provider's",
                                a.index,
                                a.name.len()
                            ));
                        }
                        let _ = rt.names[t].set(a.name.to_vec());
                        let name = rt.names[t].get().expect("set above");
                        if let Err(e) = self.add_peer(t, name) {
                            self.die(e.to_string());
                        }
                        Reach::Ready
                    }
                    ST_CLOSED => Reach::Closed,
                    _ => Reach::Absent {
                        asked: false,
                        fresh: true,
                    },
                };
            }
            _ => {
                // CTL_CLOSED: replies still queued to it are dropped with it.
                self.tx.reach[g] = Reach::Closed;
                while self.tx.queued[g].pop_front().is_some() {
                    self.tx.nqueued -= 1;
                    self.tx.credits.release(g);
                }
            }
        }
    }

    /// Sends a control message to `g` now, or queues it (sent from `poll`, in order).
    fn queue_ctl(&mut self, g: usize, op: u8, body: &[u8]) -> Result<(), ConduitError> {
        if self.tx.ctl.is_empty() && self.tx.send_ctl(g, op, body)? {
            return Ok(());
        }
        let mut m = vec![0u8; HEADER + body.len()];
        wire::encode_ctl(&mut m, self.tx.rank, self.index, op, body);
        self.tx.ctl.push_back((g, m));
        Ok(())
    }
}

impl crate::tx::Tx {
    /// Sends control message `op` with `body` to `g` now; `Ok(false)`: no resources.
    pub(crate) fn send_ctl(&mut self, g: usize, op: u8, body: &[u8]) -> Result<bool, ConduitError> {
        let (rank, index) = (self.rank, self.index);
        self.send_now(g, HEADER + body.len(), |b| {
            wire::encode_ctl(b, rank, index, op, body)
        })
    }

    /// Sends queued control messages, oldest first, while resources last.
    #[cold]
    pub(crate) fn flush_ctl(&mut self) -> Result<(), ConduitError> {
        while let Some((g, m)) = self.ctl.pop_front() {
            if !self.send_now(g, m.len(), |b| b.copy_from_slice(&m))? {
                self.ctl.push_front((g, m));
                break;
            }
        }
        Ok(())
    }
}

/// How long a dropped endpoint keeps trying (serving its grave between tries) to send
/// its closing notices, which the provider may refuse while it connects to a peer that
/// does not poll, before it gives up on those not sent.
const NOTICE_LIMIT: std::time::Duration = std::time::Duration::from_secs(1);

impl Ofi {
    /// Closes endpoint `index` (made at run time) in the directory, and tells the
    /// endpoints that looked it up, from its grave, best effort (a notice the provider
    /// has not taken within [`NOTICE_LIMIT`] is not sent: that peer's requests are then
    /// discarded like those in flight at the close).
    pub(crate) fn close_runtime(&self, index: usize, grave: &mut Grave) {
        let rt = &self.rt;
        let askers = {
            let mut s = rt.slot(index);
            s.state = ST_CLOSED;
            std::mem::take(&mut s.askers)
        };
        let own = rt.job.g_base[rt.job.rank] + index;
        let t0 = std::time::Instant::now();
        for g in askers {
            if g == own {
                continue;
            }
            if grave.tx.addrs[g] == NOT_AVAIL {
                let Some(name) = rt.names[g].get() else {
                    continue;
                };
                match grave.objs.av.insert(name) {
                    Ok(a) => grave.tx.addrs[g] = a,
                    Err(_) => continue,
                }
            }
            while let Ok(false) = grave.tx.send_ctl(g, CTL_CLOSED, &[]) {
                if t0.elapsed() > NOTICE_LIMIT {
                    break;
                }
                grave.serve();
                std::thread::yield_now();
            }
        }
    }
}
