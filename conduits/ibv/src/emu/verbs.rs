//! [`Verbs`] over the emulated devices: opening, registration, queue pairs and
//! completion queues, posting and polling.

use super::nic::{answers, nic_read, serve, ud_receive};
use super::*;

impl Verbs for EmuVerbs {
    type Mr = EmuMr;
    type Cq = EmuCq;
    type Srq = EmuSrq;
    type Qp = EmuQp;
    type UdQp = EmuUdQp;
    type Ah = EmuAh;
    const PROVIDER: &'static str = "emu";

    fn devices() -> Result<Vec<DeviceInfo>, VerbsError> {
        Ok(vec![DeviceInfo {
            name: DEVICE_NAME.into(),
            ports: vec![emu_port()],
        }])
    }

    fn open(device: Option<&str>, port: u8, _gid_index: u32) -> Result<Self, VerbsError> {
        if let Some(d) = device
            && d != DEVICE_NAME
        {
            return Err(VerbsError::NoDevice(format!(
                " named {d} (the emulation has {DEVICE_NAME})"
            )));
        }
        if port != 1 {
            return Err(VerbsError::Invalid(format!(
                "{DEVICE_NAME} has port 1 only, not {port}"
            )));
        }
        let mut gid = [0u8; 16];
        gid[..4].copy_from_slice(&std::process::id().to_le_bytes());
        gid[4..8].copy_from_slice(&DEVICE_COUNTER.fetch_add(1, Ordering::Relaxed).to_le_bytes());
        let nonce = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        gid[8..].copy_from_slice(&nonce.to_le_bytes());
        let addr =
            SocketAddr::from_abstract_name(socket_name(&gid)).map_err(|e| call("bind", e))?;
        let listener = UnixListener::bind_addr(&addr).map_err(|e| call("bind", e))?;
        let dev = Arc::new(Dev {
            gid,
            port: emu_port(),
            mrs: RwLock::new(HashMap::new()),
            next_key: AtomicU32::new(1),
            qps: Mutex::new(HashMap::new()),
            next_qpn: AtomicU32::new(0x100),
            corrupt_rkeys: AtomicU32::new(0),
            closing: AtomicBool::new(false),
            streams: Mutex::new(Vec::new()),
            lose_datagrams: AtomicU32::new(0),
            duplicate_datagrams: AtomicU32::new(0),
            rc_qps: AtomicU64::new(0),
            ud_qps: AtomicU64::new(0),
            reg_mrs: AtomicU64::new(0),
            datagrams: AtomicU64::new(0),
            datagrams_lost: AtomicU64::new(0),
        });
        let weak = Arc::downgrade(&dev);
        std::thread::Builder::new()
            .name("gex-ibv-emu".into())
            .spawn(move || {
                for s in listener.incoming() {
                    let Some(d) = weak.upgrade() else { return };
                    if d.closing.load(Ordering::Acquire) {
                        return;
                    }
                    let Ok(s) = s else { continue };
                    if let Ok(c) = s.try_clone() {
                        d.streams.lock().unwrap_or_else(|e| e.into_inner()).push(c);
                    }
                    drop(d);
                    let w = weak.clone();
                    let _ = std::thread::Builder::new()
                        .name("gex-ibv-emu-t".into())
                        .spawn(move || serve(w, s));
                }
            })
            .map_err(|e| call("thread", e))?;
        Ok(EmuVerbs { dev })
    }

    fn device_name(&self) -> &str {
        DEVICE_NAME
    }
    fn port(&self) -> &PortInfo {
        &self.dev.port
    }
    fn gid(&self) -> [u8; 16] {
        self.dev.gid
    }

    unsafe fn reg_mr(
        &self,
        addr: *mut u8,
        len: usize,
        access: Access,
    ) -> Result<Self::Mr, VerbsError> {
        if (addr as usize).checked_add(len).is_none() {
            return Err(VerbsError::Invalid("region wraps the address space".into()));
        }
        let mut mrs = self.dev.mrs.write().unwrap_or_else(|e| e.into_inner());
        let mut key = new_key(&self.dev);
        while mrs.contains_key(&key) {
            key = new_key(&self.dev);
        }
        mrs.insert(
            key,
            MrEntry {
                addr: addr as usize,
                len,
                access,
            },
        );
        self.dev.reg_mrs.fetch_add(1, Ordering::Relaxed);
        Ok(EmuMr {
            key,
            dev: self.dev.clone(),
        })
    }
    fn lkey(mr: &Self::Mr) -> u32 {
        mr.key
    }
    fn rkey(mr: &Self::Mr) -> u32 {
        mr.key
    }

    fn create_cq(&self, depth: u32) -> Result<Self::Cq, VerbsError> {
        Ok(EmuCq {
            inner: Arc::new(CqInner {
                state: Mutex::new(CqState {
                    entries: VecDeque::new(),
                    depth: depth.max(1) as usize,
                    overrun: false,
                }),
                cv: Condvar::new(),
            }),
        })
    }

    fn create_srq(&self, depth: u32) -> Result<Self::Srq, VerbsError> {
        Ok(EmuSrq {
            inner: Arc::new(SrqInner {
                q: Mutex::new(VecDeque::new()),
                depth: depth.max(1) as usize,
                cv: Condvar::new(),
            }),
        })
    }

    fn create_qp(
        &self,
        cq: &Self::Cq,
        srq: &Self::Srq,
        caps: QpCaps,
    ) -> Result<Self::Qp, VerbsError> {
        let qpn = self.dev.next_qpn.fetch_add(1, Ordering::Relaxed) & 0x00ff_ffff;
        let inner = Arc::new(QpInner {
            qpn,
            cq: cq.inner.clone(),
            srq: srq.inner.clone(),
            max_send_wr: caps.max_send_wr.max(1) as usize,
            max_inline: caps.max_inline,
            rnr_retry: AtomicU32::new(7),
            error: AtomicBool::new(false),
            pending_error: AtomicU32::new(0),
            conn: Mutex::new(None),
            outstanding: Mutex::new(VecDeque::new()),
        });
        self.dev
            .qps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(qpn, inner.clone());
        self.dev.rc_qps.fetch_add(1, Ordering::Relaxed);
        Ok(EmuQp {
            inner,
            dev: self.dev.clone(),
        })
    }

    fn qp_addr(&self, qp: &Self::Qp) -> QpAddr {
        self.dev.addr(qp.inner.qpn)
    }

    fn connect(
        &self,
        qp: &Self::Qp,
        remote: &QpAddr,
        params: &ConnectParams,
    ) -> Result<(), VerbsError> {
        let mut conn = qp.inner.conn.lock().unwrap_or_else(|e| e.into_inner());
        if conn.is_some() {
            return Err(VerbsError::Invalid("queue pair already connected".into()));
        }
        qp.inner
            .rnr_retry
            .store(params.rnr_retry.min(7) as u32, Ordering::Relaxed);
        let addr = SocketAddr::from_abstract_name(socket_name(&remote.gid))
            .map_err(|e| call("connect", e))?;
        let mut stream = UnixStream::connect_addr(&addr).map_err(|e| {
            call(
                "ibv_modify_qp(RTR)",
                format!("peer device unreachable: {e}"),
            )
        })?;
        stream
            .write_all(&frame(HELLO, &[&remote.qpn.to_le_bytes()]))
            .map_err(|e| call("ibv_modify_qp(RTR)", e))?;
        let reader = stream.try_clone().map_err(|e| call("connect", e))?;
        if let Ok(c) = stream.try_clone() {
            self.dev
                .streams
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(c);
        }
        let (w, q) = (Arc::downgrade(&self.dev), Arc::downgrade(&qp.inner));
        std::thread::Builder::new()
            .name("gex-ibv-emu-i".into())
            .spawn(move || answers(w, q, reader))
            .map_err(|e| call("thread", e))?;
        *conn = Some(Conn { stream });
        Ok(())
    }

    unsafe fn post_send(&self, qp: &Self::Qp, wr: &SendWr) -> Result<(), VerbsError> {
        let q = &qp.inner;
        let mut conn = q.conn.lock().unwrap_or_else(|e| e.into_inner());
        let opcode = match wr.op {
            SendOp::Send => WcOpcode::Send,
            SendOp::Write { .. } => WcOpcode::Write,
            SendOp::Read { .. } => WcOpcode::Read,
            SendOp::FetchAdd { .. } => WcOpcode::FetchAdd,
            SendOp::CmpSwap { .. } => WcOpcode::CmpSwap,
        };
        let o = Outstanding {
            wr_id: wr.wr_id,
            opcode,
            signaled: wr.signaled,
            sge: wr.sge,
        };
        if q.error.load(Ordering::Acquire) || conn.is_none() {
            if conn.is_none() && !q.error.load(Ordering::Acquire) {
                return Err(VerbsError::Invalid("queue pair not connected".into()));
            }
            // A queue pair in error flushes what is posted (the first request after an
            // idle failure reports it).
            let status = match q.pending_error.swap(0, Ordering::AcqRel) {
                0 => WcStatus::WrFlushError,
                c => code_status(c),
            };
            q.cq.push(Wc {
                wr_id: wr.wr_id,
                status,
                opcode,
                byte_len: 0,
                qp_num: q.qpn,
            });
            return Ok(());
        }
        if wr.inline && wr.sge.len > q.max_inline {
            return Err(VerbsError::Invalid(format!(
                "{} inline bytes, at most {}",
                wr.sge.len, q.max_inline
            )));
        }
        let mut outstanding = q.outstanding.lock().unwrap_or_else(|e| e.into_inner());
        if outstanding.len() >= q.max_send_wr {
            return Err(VerbsError::QueueFull);
        }
        // The source of SEND and WRITE is read now (a NIC reads it later: reading at once
        // is one of the behaviours the caller's contract allows).
        let src = |d: &Dev| -> Option<Vec<u8>> {
            let len = wr.sge.len as usize;
            if wr.inline {
                // SAFETY: the caller's buffer is valid for reads of its length (inline
                // data is read at post time).
                return Some(unsafe { nic_read(wr.sge.addr as usize as *const u8, len) });
            }
            d.with_region(wr.sge.lkey, wr.sge.addr, len, Access::empty(), |p| {
                // SAFETY: inside a registered region, under the read lock.
                unsafe { nic_read(p, len) }
            })
        };
        let f = match wr.op {
            SendOp::Send => src(&self.dev).map(|data| frame(SEND, &[&data])),
            SendOp::Write { remote_addr, rkey } => src(&self.dev).map(|data| {
                frame(
                    WRITE,
                    &[
                        &remote_addr.to_le_bytes(),
                        &self.rkey_of(rkey).to_le_bytes(),
                        &data,
                    ],
                )
            }),
            SendOp::Read { remote_addr, rkey } => Some(frame(
                READ,
                &[
                    &remote_addr.to_le_bytes(),
                    &self.rkey_of(rkey).to_le_bytes(),
                    &wr.sge.len.to_le_bytes(),
                ],
            )),
            SendOp::FetchAdd {
                remote_addr,
                rkey,
                add,
            } => Some(frame(
                FADD,
                &[
                    &remote_addr.to_le_bytes(),
                    &self.rkey_of(rkey).to_le_bytes(),
                    &add.to_le_bytes(),
                    &[0; 8],
                ],
            )),
            SendOp::CmpSwap {
                remote_addr,
                rkey,
                compare,
                swap,
            } => Some(frame(
                CSWAP,
                &[
                    &remote_addr.to_le_bytes(),
                    &self.rkey_of(rkey).to_le_bytes(),
                    &compare.to_le_bytes(),
                    &swap.to_le_bytes(),
                ],
            )),
        };
        let Some(f) = f else {
            // A local protection error completes the request and the queue pair fails.
            drop(outstanding);
            drop(conn);
            q.outstanding
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push_back(o);
            q.fail(WcStatus::LocalProtectionError);
            return Ok(());
        };
        outstanding.push_back(o);
        drop(outstanding);
        let c = conn.as_mut().expect("connected");
        if c.stream.write_all(&f).is_err() {
            // The answers thread sees the end of the stream and fails the queue pair.
            let _ = c.stream.shutdown(std::net::Shutdown::Both);
        }
        Ok(())
    }

    unsafe fn post_srq_recv(
        &self,
        srq: &Self::Srq,
        wr_id: u64,
        sge: Sge,
    ) -> Result<(), VerbsError> {
        let mut q = srq.inner.q.lock().unwrap_or_else(|e| e.into_inner());
        if q.len() >= srq.inner.depth {
            return Err(VerbsError::QueueFull);
        }
        q.push_back(Recv { wr_id, sge });
        drop(q);
        srq.inner.cv.notify_all();
        Ok(())
    }

    fn poll_cq(&self, cq: &Self::Cq, out: &mut [Wc]) -> Result<usize, VerbsError> {
        let mut s = cq.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.overrun {
            return Err(VerbsError::CqOverrun);
        }
        let mut n = 0;
        while n < out.len() {
            match s.entries.pop_front() {
                Some(wc) => {
                    out[n] = wc;
                    n += 1;
                }
                None => break,
            }
        }
        Ok(n)
    }

    fn arm_cq(&self, _cq: &Self::Cq) -> Result<(), VerbsError> {
        // The emulated channel is the queue's condition variable, signalled by every
        // completion: nothing to arm.
        Ok(())
    }

    fn wait_cq(&self, cq: &Self::Cq, timeout: Duration) -> Result<bool, VerbsError> {
        let deadline = Instant::now() + timeout;
        let mut s = cq.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if !s.entries.is_empty() || s.overrun {
                return Ok(true);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(false);
            }
            s = cq
                .inner
                .cv
                .wait_timeout(s, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
    fn create_ud_qp(
        &self,
        cq: &Self::Cq,
        caps: QpCaps,
        recv_depth: u32,
        qkey: u32,
    ) -> Result<Self::UdQp, VerbsError> {
        let qpn = self.dev.next_qpn.fetch_add(1, Ordering::Relaxed) & 0x00ff_ffff;
        let addr = SocketAddr::from_abstract_name(ud_socket_name(&self.dev.gid, qpn))
            .map_err(|e| call("ibv_create_qp(UD)", e))?;
        let sock = UnixDatagram::bind_addr(&addr).map_err(|e| call("ibv_create_qp(UD)", e))?;
        let reader = sock.try_clone().map_err(|e| call("ibv_create_qp(UD)", e))?;
        reader
            .set_read_timeout(Some(UD_WAKE))
            .map_err(|e| call("ibv_create_qp(UD)", e))?;
        let inner = Arc::new(UdInner {
            qpn,
            qkey,
            cq: cq.inner.clone(),
            rq: Mutex::new(VecDeque::new()),
            depth: recv_depth.max(1) as usize,
            max_inline: caps.max_inline,
            sock,
        });
        let (w, q) = (Arc::downgrade(&self.dev), Arc::downgrade(&inner));
        std::thread::Builder::new()
            .name("gex-ibv-emu-ud".into())
            .spawn(move || ud_receive(w, q, reader))
            .map_err(|e| call("thread", e))?;
        self.dev.ud_qps.fetch_add(1, Ordering::Relaxed);
        Ok(EmuUdQp {
            inner,
            _dev: self.dev.clone(),
        })
    }

    fn ud_addr(&self, qp: &Self::UdQp) -> QpAddr {
        self.dev.addr(qp.inner.qpn)
    }

    fn create_ah(&self, remote: &QpAddr, _gid_index: u8) -> Result<Self::Ah, VerbsError> {
        Ok(EmuAh { gid: remote.gid })
    }

    unsafe fn post_ud_send(
        &self,
        qp: &Self::UdQp,
        ah: &Self::Ah,
        dest: UdDest,
        wr_id: u64,
        sge: Sge,
        inline: bool,
    ) -> Result<(), VerbsError> {
        let q = &qp.inner;
        let len = sge.len as usize;
        if len > MAX_DGRAM {
            return Err(VerbsError::Invalid(format!(
                "a datagram of {len} bytes, at most {MAX_DGRAM}"
            )));
        }
        if inline && sge.len > q.max_inline {
            return Err(VerbsError::Invalid(format!(
                "{len} inline bytes, at most {}",
                q.max_inline
            )));
        }
        let data = if inline {
            // SAFETY: the caller's buffer is valid for reads of its length (inline data
            // is read at post time).
            Some(unsafe { nic_read(sge.addr as usize as *const u8, len) })
        } else {
            self.dev
                .with_region(sge.lkey, sge.addr, len, Access::empty(), |p| {
                    // SAFETY: inside a registered region, under the read lock.
                    unsafe { nic_read(p, len) }
                })
        };
        let status = match data {
            None => WcStatus::LocalProtectionError,
            Some(data) => {
                let mut dgram = Vec::with_capacity(DGRAM_HDR + len);
                dgram.extend_from_slice(&dest.qkey.to_le_bytes());
                dgram.extend_from_slice(&q.qpn.to_le_bytes());
                dgram.extend_from_slice(&data);
                self.dev.datagrams.fetch_add(1, Ordering::Relaxed);
                if Dev::take_fault(&self.dev.lose_datagrams) {
                    self.dev.datagrams_lost.fetch_add(1, Ordering::Relaxed);
                } else {
                    let copies = if Dev::take_fault(&self.dev.duplicate_datagrams) {
                        2
                    } else {
                        1
                    };
                    if let Ok(to) =
                        SocketAddr::from_abstract_name(ud_socket_name(&ah.gid, dest.qpn))
                    {
                        for _ in 0..copies {
                            // A datagram nobody receives (no such queue pair, a full
                            // socket buffer) is lost, as on a fabric.
                            let _ = q.sock.send_to_addr(&dgram, &to);
                        }
                    }
                }
                WcStatus::Success
            }
        };
        q.cq.push(Wc {
            wr_id,
            status,
            opcode: WcOpcode::Send,
            byte_len: sge.len,
            qp_num: q.qpn,
        });
        Ok(())
    }

    unsafe fn post_ud_recv(&self, qp: &Self::UdQp, wr_id: u64, sge: Sge) -> Result<(), VerbsError> {
        let mut q = qp.inner.rq.lock().unwrap_or_else(|e| e.into_inner());
        if q.len() >= qp.inner.depth {
            return Err(VerbsError::QueueFull);
        }
        q.push_back(Recv { wr_id, sge });
        Ok(())
    }
}

fn call(call: &'static str, e: impl std::fmt::Display) -> VerbsError {
    VerbsError::Call {
        call,
        reason: e.to_string(),
    }
}
