//! Opening the node-local part of a job: the shared regions of every rank of this
//! host, mapped into this one, and the endpoints over their rings.

use super::*;

impl Smp {
    /// Opens the node-local part of a job: rings, doorbells, auxiliary areas and
    /// segments shared by the ranks on this rank's host (`params.layout.host`), mapped
    /// into each of them. Collective over every rank of the job (one bootstrap
    /// exchange and one barrier), also on hosts with a single rank. The endpoints can
    /// only address ranks of this host (see the `NearConduit` implementation).
    pub(crate) fn open_node(
        boot: &mut dyn Bootstrap,
        params: &OpenParams<'_>,
    ) -> Result<(Arc<Smp>, Vec<SmpEp>), InitError> {
        let jl = params.layout;
        let n = jl.size() as usize;
        let rank = params.rank as usize;
        let (ring_cap, max_medium) = ring_settings(params.config)?;
        // The ranks of this host, in rank order, and their global EP numbering.
        let overflow = params.config.size("GEX_SMP_OVERFLOW", DEFAULT_OVERFLOW)?;
        let ranks: Vec<u32> = jl.neighbours(params.rank);
        let mut local_of = vec![NOT_LOCAL; n];
        let mut g_base = vec![usize::MAX; n];
        let mut total = 0usize;
        let slots_of = |r: usize| (jl.max_eps[r].max(jl.eps[r])) as usize;
        for (li, &r) in ranks.iter().enumerate() {
            local_of[r as usize] = li as u32;
            g_base[r as usize] = total;
            total += slots_of(r as usize);
        }
        let me = local_of[rank] as usize;
        let my_eps = jl.eps[rank] as usize;
        let mine = Layout::new(
            my_eps,
            slots_of(rank),
            total,
            ring_cap,
            jl.seg_len[rank],
            params.aux_len,
        )
        .ok_or_else(|| InitError::Config("smp region size overflows".into()))?;
        let (fd, own) = region::create(&mine, params.rank, max_medium)?;
        for e in 0..my_eps {
            // SAFETY: initialised by `create`, inside the mapping.
            let bell = unsafe { &*own.at(mine.bell(e)).cast::<Doorbell>() };
            bell.set_may_block(params.wait != WaitPolicy::Spin);
        }
        let mut blob = Vec::with_capacity(16);
        let my_pid = rustix::process::getpid().as_raw_nonzero().get() as u32;
        blob.extend_from_slice(&my_pid.to_le_bytes());
        blob.extend_from_slice(&(rustix::fd::AsRawFd::as_raw_fd(&fd)).to_le_bytes());
        blob.extend_from_slice(&(mine.len as u64).to_le_bytes());
        let all = boot.exchange(&blob)?;
        // Every rank's blob, indexed by rank: the bootstrap (a safe trait) is checked.
        if all.len() != n {
            return Err(InitError::Conduit {
                conduit: "smp",
                msg: format!(
                    "the bootstrap exchange returned {} region blobs for {n} ranks",
                    all.len()
                ),
            });
        }
        let mut peers = Peers::new(params.rank);
        let mut same_process = 0usize;
        let mut own = Some(own);
        let mut maps = Vec::with_capacity(ranks.len());
        let mut layouts = Vec::with_capacity(ranks.len());
        let mut max_med = Vec::with_capacity(ranks.len());
        for &r in &ranks {
            // What the job layout says rank r's region holds; its header must agree
            // before anything uses the region (`region::check_region`).
            let want = region::Expect {
                eps: jl.eps[r as usize] as usize,
                slots: slots_of(r as usize),
                total_eps: total,
                seg_len: jl.seg_len[r as usize],
                aux_len: params.aux_len,
            };
            let r = r as usize;
            if r == rank {
                let m = own.take().expect("own mapping");
                let (l, max) = region::check_region(&m, r as u32, want)?;
                maps.push(m);
                layouts.push(l);
                max_med.push(max);
                continue;
            }
            let (pid, pfd, len) = region_blob(r, &all[r])?;
            // The pidfd first: mapping the region through /proc/<pid> then proves that
            // the pidfd names the process that owns it. A thread rank of this very
            // process is not watched: its process ends only with this one (a thread
            // rank that dies is reported by its thread launcher, `gex_boot::threads`).
            if pid != my_pid {
                peers.watch(r as u32, pid);
            } else {
                same_process += 1;
            }
            let (m, l, max) = region::map_peer(r as u32, pid, pfd, len, want)?;
            maps.push(m);
            layouts.push(l);
            max_med.push(max);
        }
        // Everyone has mapped everyone: the descriptor (the region's last name) can go.
        boot.barrier()?;
        drop(fd);
        let smp = Arc::new(Smp {
            maps,
            layouts,
            ranks,
            local_of,
            g_base,
            max_medium: max_med,
            peers,
            me,
            total,
            may_block: params.wait != WaitPolicy::Spin,
            overflow,
        });
        let eps = (0..my_eps).map(|e| smp.make_ep(me, e)).collect();
        tracing::debug!(
            rank,
            ranks = n,
            neighbours = smp.ranks.len(),
            watched = smp.peers.watched(),
            same_process,
            ring_cap,
            max_medium,
            "smp open"
        );
        Ok((smp, eps))
    }

    /// Whether `rank` is on this host (its memory is mapped here). False for ranks
    /// outside the job.
    #[inline(always)]
    pub fn is_neighbour(&self, rank: u32) -> bool {
        self.local_of
            .get(rank as usize)
            .is_some_and(|&l| l != NOT_LOCAL)
    }

    /// The ranks of this host (this rank included), in rank order.
    pub fn neighbours(&self) -> &[u32] {
        &self.ranks
    }

    /// Whether `dst` is an endpoint of a rank on this host.
    #[inline(always)]
    pub(super) fn has(&self, dst: EpAddr) -> bool {
        let l = self
            .local_of
            .get(dst.rank as usize)
            .copied()
            .unwrap_or(NOT_LOCAL);
        l != NOT_LOCAL && (dst.ep as usize) < self.layouts[l as usize].slots
    }
}

impl Smp {
    /// The state of `dst`'s slot (local rank `li`) with one `Acquire` load: `Ok` if
    /// open, else [`ConduitError::NoEndpoint`] naming the state.
    pub(super) fn slot_open(&self, li: usize, dst: EpAddr) -> Result<(), ConduitError> {
        match self.maps[li]
            .state(&self.layouts[li], dst.ep as usize)
            .load(gex_sync::atomic::Ordering::Acquire)
        {
            region::OPEN => Ok(()),
            region::CLOSED => Err(ConduitError::NoEndpoint {
                dst,
                state: "closed",
            }),
            _ => Err(ConduitError::NoEndpoint {
                dst,
                state: "not created yet",
            }),
        }
    }

    /// The ring from global EP `g` to EP `ep` of the rank with local index `r`.
    pub(super) fn ring_ptrs(
        &self,
        r: usize,
        ep: usize,
        g: usize,
        reply: bool,
    ) -> (*const ring::RingCtl, *mut u8, usize) {
        let l = &self.layouts[r];
        let base = self.maps[r].at(l.ring(ep, g, reply));
        // SAFETY: base + DATA_OFFSET + cap is inside the ring's slot of the mapping.
        let data = unsafe { base.add(ring::DATA_OFFSET) };
        (base.cast_const().cast(), data, l.ring_cap)
    }

    /// Endpoint `e` of the rank with local index `me` (its slot is open).
    pub(super) fn make_ep(self: &Arc<Self>, me: usize, e: usize) -> SmpEp {
        let total = self.total;
        let me_g = self.g_base[self.ranks[me] as usize] + e;
        let me_runtime = e >= self.layouts[me].eps;
        let mut tx = Tx {
            req: Vec::with_capacity(total),
            rep: Vec::with_capacity(total),
            dst: Vec::with_capacity(total),
            runtime: Vec::with_capacity(total),
            me_g,
            me_runtime,
            conduit: self.clone(),
            bells: Vec::with_capacity(total),
            segs: Vec::with_capacity(total),
            aux: Vec::with_capacity(total),
            g_base: self.g_base.clone(),
            pending: (0..total).map(|_| VecDeque::new()).collect(),
            npending: 0,
            ovf: (0..total).map(|_| VecDeque::new()).collect(),
            ovf_bytes: vec![0; total],
            novf: 0,
            ovf_cap: self.overflow,
        };
        let ml = &self.layouts[me];
        let mut rx = Rx {
            req: Vec::with_capacity(total),
            rep: Vec::with_capacity(total),
            src: Vec::with_capacity(total),
            active: Vec::new(),
            is_active: Vec::with_capacity(total),
            contacts: Raw::new(self.maps[me].at(ml.contacts(e))),
            seen_contacts: 0,
            seg: Seg {
                base: Raw::new(self.maps[me].at(ml.segment(e))),
                len: ml.seg_len,
            },
        };
        for (r, l) in self.layouts.iter().enumerate() {
            let global = self.ranks[r];
            for de in 0..l.slots {
                let g = self.g_base[global as usize] + de;
                debug_assert_eq!(g, tx.dst.len());
                // Rings to a slot made at run time exist once its owner opened it; an
                // endpoint made at run time announces its first contact: both connect
                // on first use.
                let eager = de < l.eps && !me_runtime;
                for reply in [false, true] {
                    let p = eager.then(|| {
                        let (ctl, data, cap) = self.ring_ptrs(r, de, me_g, reply);
                        // SAFETY: ctl/data/cap describe a ring of a live mapping,
                        // initialised at `region::create` (`de` was made at init); this
                        // endpoint is its only producer (me_g -> (r, de)).
                        unsafe { Producer::new(ctl, data, cap) }
                    });
                    if reply {
                        tx.rep.push(p)
                    } else {
                        tx.req.push(p)
                    }
                }
                tx.dst.push(EpAddr::new(global, de as u16));
                tx.runtime.push(de >= l.eps);
                tx.bells.push(Raw::new(self.maps[r].at(l.bell(de))));
                tx.aux.push(Raw::new(self.maps[r].at(l.aux(de))));
                tx.segs.push(Seg {
                    base: Raw::new(self.maps[r].at(l.segment(de))),
                    len: l.seg_len,
                });
                for reply in [false, true] {
                    let (ctl, data, cap) = self.ring_ptrs(me, e, g, reply);
                    // SAFETY: this endpoint's slot is open, so its incoming rings were
                    // initialised (`region::create` or `open_endpoint`); this endpoint
                    // is the only consumer of (g -> me).
                    let c = unsafe { Consumer::new(ctl, data, cap) };
                    if reply {
                        rx.rep.push(c)
                    } else {
                        rx.req.push(c)
                    }
                }
                rx.src.push(EpAddr::new(global, de as u16));
                let known = de < l.eps;
                rx.is_active.push(known);
                if known {
                    rx.active.push(g);
                }
            }
        }
        rx.rescan(self);
        let max_medium = self.max_medium[me];
        SmpEp {
            index: e as u16,
            tx,
            rx,
            bell: Raw::new(self.maps[me].at(ml.bell(e))),
            seen: 0,
            limits: Limits {
                max_args: 16,
                max_medium,
                max_long: usize::MAX,
            },
            np: None,
            watch: Watch::new(),
            conduit: self.clone(),
        }
    }
}

/// `GEX_SMP_RING_SIZE` (a power of two the ring supports) and `GEX_SMP_MAX_MEDIUM`
/// (fits a ring of that size): (ring capacity, largest Medium payload).
fn ring_settings(config: &gex_core::config::Config) -> Result<(usize, usize), InitError> {
    let ring_cap = config.size("GEX_SMP_RING_SIZE", DEFAULT_RING_SIZE)?;
    if !ring::is_valid_capacity(ring_cap) || ring_cap < region::MIN_RING {
        return Err(InitError::Config(format!(
            "GEX_SMP_RING_SIZE={ring_cap}: must be a power of two between {} and {}",
            region::MIN_RING,
            ring::MAX_CAPACITY
        )));
    }
    let max_medium = config.size("GEX_SMP_MAX_MEDIUM", DEFAULT_MAX_MEDIUM)?;
    let room = ring::max_body(ring_cap) - NP_ARGS_AREA;
    if max_medium > room {
        return Err(InitError::Config(format!(
            "GEX_SMP_MAX_MEDIUM={max_medium} does not fit a {ring_cap}-byte ring (at most {room}); raise GEX_SMP_RING_SIZE"
        )));
    }
    Ok((ring_cap, max_medium))
}

/// Rank `r`'s region blob of the bootstrap exchange, checked: (its pid, its region's
/// descriptor number in that process, the region's length).
fn region_blob(r: usize, b: &[u8]) -> Result<(u32, u32, usize), InitError> {
    if b.len() != 16 {
        return Err(InitError::Conduit {
            conduit: "smp",
            msg: format!("rank {r} sent a {}-byte region blob, not 16", b.len()),
        });
    }
    let pid = u32::from_le_bytes(b[0..4].try_into().expect("4"));
    let pfd = u32::from_le_bytes(b[4..8].try_into().expect("4"));
    let len = u64::from_le_bytes(b[8..16].try_into().expect("8"));
    let len = usize::try_from(len).map_err(|_| InitError::Conduit {
        conduit: "smp",
        msg: format!("rank {r}'s region blob says {len} bytes, more than this machine maps"),
    })?;
    Ok((pid, pfd, len))
}
