//! Opening an endpoint: the device, its registered buffers and queue pairs
//! ([`Unconnected`]), then the endpoint once the peers' addresses are known.

use super::*;

impl<V: Verbs> Unconnected<V> {
    /// Opens the device, registers `seg` and the buffers, posts the receives and
    /// creates one queue pair per peer endpoint (`npeers`).
    pub(crate) fn new(
        v: V,
        seg: (NonNull<u8>, usize),
        shape: &Shape,
        npeers: usize,
    ) -> Result<Self, String> {
        let e = |what: &str, e: VerbsError| format!("{what}: {e}");
        let buf = shape.buf_len();
        let nrecv = npeers * 2 * shape.credits as usize;
        let alloc = |len: usize, what: &str| {
            Mem::new(len).ok_or_else(|| format!("cannot allocate {len} bytes of {what}"))
        };
        let recv = alloc(nrecv * buf, "receive buffers")?;
        let send = alloc(shape.send_slots * buf, "send buffers")?;
        let credit_in = alloc(npeers * 16, "credit words")?;
        let credit_out = alloc(npeers * 16, "credit words")?;
        let rma = alloc(RMA_SLOTS * RMA_CHUNK, "RMA bounce buffers")?;
        let remote = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
        // SAFETY: each block lives in `Res` next to its region, dropped after it (field
        // order); the segment lives in the conduit, which outlives every endpoint's
        // resources.
        let reg = |m: *mut u8, len: usize, a: Access| unsafe { v.reg_mr(m, len, a) };
        let seg_mr = reg(seg.0.as_ptr(), seg.1, remote | Access::REMOTE_ATOMIC)
            .map_err(|x| e("registering the segment", x))?;
        let recv_mr = reg(recv.at(0), recv.len(), Access::LOCAL_WRITE)
            .map_err(|x| e("registering receive buffers", x))?;
        let send_mr = reg(send.at(0), send.len(), Access::LOCAL_WRITE)
            .map_err(|x| e("registering send buffers", x))?;
        let credit_in_mr = reg(credit_in.at(0), credit_in.len(), remote)
            .map_err(|x| e("registering credit words", x))?;
        let credit_out_mr = reg(credit_out.at(0), credit_out.len(), Access::LOCAL_WRITE)
            .map_err(|x| e("registering credit words", x))?;
        let rma_mr = reg(rma.at(0), rma.len(), Access::LOCAL_WRITE)
            .map_err(|x| e("registering RMA buffers", x))?;
        let cq_depth = nrecv as u32 + npeers as u32 * shape.sq_depth() + 64;
        let cq = v.create_cq(cq_depth).map_err(|x| e("ibv_create_cq", x))?;
        let srq = v
            .create_srq(nrecv as u32)
            .map_err(|x| e("ibv_create_srq", x))?;
        for i in 0..nrecv {
            let sge = Sge {
                addr: recv.at(i * buf) as u64,
                len: buf as u32,
                lkey: V::lkey(&recv_mr),
            };
            // SAFETY: a buffer of the registered receive block, not accessed until its
            // completion is polled.
            unsafe { v.post_srq_recv(&srq, wrid::make(wrid::RECV, 0, i as u32), sge) }
                .map_err(|x| e("ibv_post_srq_recv", x))?;
        }
        let caps = QpCaps {
            max_send_wr: shape.sq_depth(),
            max_inline: MAX_INLINE,
        };
        let qps = if shape.lazy {
            Vec::new()
        } else {
            (0..npeers)
                .map(|_| {
                    v.create_qp(&cq, &srq, caps)
                        .map_err(|x| e("ibv_create_qp", x))
                })
                .collect::<Result<Vec<_>, _>>()?
        };
        let ud = if shape.lazy {
            Some(UdParts::new(&v)?)
        } else {
            None
        };
        Ok(Unconnected {
            ud,
            res: Res {
                srq: Arc::new(srq),
                cq: Arc::new(cq),
                seg_mr,
                recv_mr,
                send_mr,
                credit_in_mr,
                credit_out_mr,
                rma_mr,
                recv,
                send,
                credit_in,
                credit_out,
                rma,
                v: Arc::new(v),
            },
            qps,
            seg,
        })
    }

    /// The UD queue pair's address (lazy wire-up).
    pub(crate) fn ud_addr(&self) -> Option<QpAddr> {
        self.ud.as_ref().map(|u| u.addr(&self.res.v))
    }

    /// What this endpoint publishes of itself: segment address, length and key, credit
    /// words' address and key.
    pub(crate) fn published(&self) -> (u64, u64, u32, u64, u32) {
        (
            self.seg.0.as_ptr() as u64,
            self.seg.1 as u64,
            V::rkey(&self.res.seg_mr),
            self.res.credit_in.at(0) as u64,
            V::rkey(&self.res.credit_in_mr),
        )
    }

    /// Finishes the endpoint once its queue pairs are connected (eager), or with the
    /// peers' UD addresses `ud_peers` (lazy).
    #[expect(clippy::too_many_arguments, reason = "one call site, in open")]
    pub(crate) fn into_ep(
        self,
        index: EpIndex,
        rank: u32,
        base: Vec<u32>,
        infos: Vec<PeerInfo>,
        ud_peers: Vec<QpAddr>,
        shape: Shape,
        stats: std::sync::Arc<Counters>,
    ) -> Result<Ep<V>, String> {
        let me = base[rank as usize] + index as u32;
        let mut by_qpn = HashMap::new();
        let mut qps = self.qps.into_iter();
        let peers: Vec<Peer<V>> = infos
            .into_iter()
            .enumerate()
            .map(|(g, info)| {
                let qp = qps.next();
                if let Some(qp) = &qp {
                    by_qpn.insert(self.res.v.qp_addr(qp).qpn, g as u32);
                }
                Peer {
                    info,
                    ready: qp.is_some(),
                    qp: qp.map(Arc::new),
                    sq_used: 0,
                    sent_req: 0,
                    sent_rep: 0,
                    consumed_req: 0,
                    consumed_rep: 0,
                    credited_req: 0,
                    credited_rep: 0,
                    deferred: VecDeque::new(),
                    failed: None,
                }
            })
            .collect();
        let recv_count = (peers.len() * 2 * shape.credits as usize) as u32;
        let addrs: Vec<EpAddr> = peers.iter().map(|p| p.info.addr).collect();
        let ud = self.ud;
        let mut ep = Ep {
            index,
            rank,
            me,
            shape,
            peers,
            base,
            by_qpn,
            free_slots: (0..shape.send_slots as u32).rev().collect(),
            recv_count,
            seg: self.seg,
            rma_ops: vec![RmaOp::default(); RMA_SLOTS],
            free_rma: (0..RMA_SLOTS as u32).rev().collect(),
            next_ticket: 1,
            done_tickets: Vec::with_capacity(RMA_SLOTS),
            deferred_total: 0,
            owed_credits: false,
            stash: VecDeque::with_capacity(recv_count as usize),
            stats,
            op_mrs: (0..RMA_SLOTS).map(|_| None).collect(),
            op_cached: vec![0; RMA_SLOTS],
            rcache: Vec::new(),
            rcache_gen: 0,
            rcache_clock: 0,
            chan: None,
            awaiting: Vec::new(),
            res: self.res,
        };
        if let Some(parts) = ud {
            let p = Params {
                me,
                rank,
                index,
                addrs,
                ud_peers,
                caps: QpCaps {
                    max_send_wr: shape.sq_depth(),
                    max_inline: MAX_INLINE,
                },
                gid_index: shape.gid_index,
                timeout: shape.connect_timeout,
            };
            let ch = Arc::new(Channel::new(
                parts,
                p,
                ep.res.v.clone(),
                ep.res.cq.clone(),
                ep.res.srq.clone(),
            ));
            let thread = ch.spawn()?;
            ep.chan = Some((ch, Some(thread)));
        }
        Ok(ep)
    }
}
