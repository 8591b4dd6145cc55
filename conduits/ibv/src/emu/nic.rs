//! The emulated NIC's threads: the target side of a connection (executing requests
//! against the device's memory regions), the initiator side (answers and
//! completions) and the receiving side of a UD queue pair.

use super::*;

/// The receiving side of a UD queue pair: places datagrams into posted receives.
pub(super) fn ud_receive(dev: Weak<Dev>, qp: Weak<UdInner>, sock: UnixDatagram) {
    let mut buf = vec![0u8; DGRAM_HDR + MAX_DGRAM];
    loop {
        let got = sock.recv(&mut buf);
        let (Some(d), Some(q)) = (dev.upgrade(), qp.upgrade()) else {
            return;
        };
        if d.closing.load(Ordering::Acquire) {
            return;
        }
        let n = match got {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) =>
            {
                continue;
            }
            Err(_) => return,
        };
        if n < DGRAM_HDR || u32_at(&buf, 0) != Some(q.qkey) {
            continue; // not for this queue key: dropped, as a port does
        }
        let data = &buf[DGRAM_HDR..n];
        let Some(r) = q.rq.lock().unwrap_or_else(|e| e.into_inner()).pop_front() else {
            continue; // no receive posted: a UD datagram is dropped
        };
        let len = GRH_LEN + data.len();
        let status = if len > r.sge.len as usize {
            WcStatus::LocalLengthError
        } else {
            let mut grh = [0u8; GRH_LEN];
            // Byte 0: IP version 6, as a real GRH; bytes 8..24: the source GID
            // (unknown here, left zero).
            grh[0] = 0x60;
            let wrote = d.with_region(r.sge.lkey, r.sge.addr, len, Access::LOCAL_WRITE, |p| {
                // SAFETY: inside a registered region (checked for `len` bytes), under
                // the table's read lock.
                unsafe {
                    nic_write(p, &grh);
                    nic_write(p.add(GRH_LEN), data);
                }
            });
            if wrote.is_some() {
                WcStatus::Success
            } else {
                WcStatus::LocalProtectionError
            }
        };
        q.cq.push(Wc {
            wr_id: r.wr_id,
            status,
            opcode: WcOpcode::Recv,
            byte_len: len as u32,
            qp_num: q.qpn,
        });
    }
}
/// Writes `data` at `dst` as the emulated NIC does: an aligned 8-byte word whole.
///
/// # Safety
/// `dst..dst+data.len()` must be valid for writes (a registered region, under the
/// region table's read lock).
pub(super) unsafe fn nic_write(dst: *mut u8, data: &[u8]) {
    if data.len() == 8 && (dst as usize) % 8 == 0 {
        let v = u64::from_ne_bytes(data.try_into().expect("8 bytes"));
        // SAFETY: aligned and valid for 8 bytes (caller); others access it through
        // gex-sync's words and copies.
        unsafe { gex_sync::word::store64(dst, v, Ordering::Release) };
    } else {
        // SAFETY: valid for writes of data.len() bytes (caller).
        unsafe { gex_sync::copy::atomic_write(dst, data) };
    }
}

/// Reads `len` bytes at `src` as the emulated NIC does.
///
/// # Safety
/// `src..src+len` must be valid for reads (a registered region, under the table's lock).
pub(super) unsafe fn nic_read(src: *const u8, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    if len == 8 && (src as usize) % 8 == 0 {
        // SAFETY: aligned and valid for 8 bytes (caller).
        let v = unsafe { gex_sync::word::load64(src, Ordering::Acquire) };
        out.copy_from_slice(&v.to_ne_bytes());
    } else {
        // SAFETY: valid for reads of len bytes (caller).
        unsafe { gex_sync::copy::atomic_read(src, &mut out) };
    }
    out
}

/// The target side of one connection: executes requests for queue pair `qpn`.
pub(super) fn serve(dev: Weak<Dev>, mut s: UnixStream) {
    let Some((HELLO, body)) = read_frame(&mut s) else {
        return;
    };
    let Some(qpn) = u32_at(&body, 0) else { return };
    let qp = match dev.upgrade() {
        Some(d) => d
            .qps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&qpn)
            .cloned(),
        None => return,
    };
    let Some(qp) = qp else {
        let _ = s.write_all(&frame(
            NAK,
            &[&status_code(WcStatus::RetryExceeded).to_le_bytes()],
        ));
        return;
    };
    while let Some((kind, body)) = read_frame(&mut s) {
        let Some(d) = dev.upgrade() else { return };
        if d.closing.load(Ordering::Acquire) {
            return;
        }
        let answer = execute(&d, &qp, kind, &body);
        drop(d);
        let answer = match answer {
            Ok(a) => a,
            Err(st) => frame(NAK, &[&status_code(st).to_le_bytes()]),
        };
        if s.write_all(&answer).is_err() {
            return;
        }
    }
}

fn execute(d: &Dev, qp: &QpInner, kind: u8, b: &[u8]) -> Result<Vec<u8>, WcStatus> {
    let bad = WcStatus::RemoteInvalidRequest;
    let acc = WcStatus::RemoteAccessError;
    match kind {
        SEND => {
            let recv = take_recv(d, qp)?;
            let len = b.len();
            let done = if len > recv.sge.len as usize {
                None
            } else {
                d.with_region(
                    recv.sge.lkey,
                    recv.sge.addr,
                    len,
                    Access::LOCAL_WRITE,
                    |p| {
                        // SAFETY: inside a registered region, under the table's read lock.
                        unsafe { nic_write(p, b) }
                    },
                )
            };
            let (status, rc) = match done {
                Some(()) => (WcStatus::Success, Ok(frame(ACK, &[]))),
                None if len > recv.sge.len as usize => (WcStatus::LocalLengthError, Err(bad)),
                None => (WcStatus::LocalProtectionError, Err(bad)),
            };
            qp.cq.push(Wc {
                wr_id: recv.wr_id,
                status,
                opcode: WcOpcode::Recv,
                byte_len: len as u32,
                qp_num: qp.qpn,
            });
            rc
        }
        WRITE => {
            let addr = u64_at(b, 0).ok_or(bad)?;
            let rkey = u32_at(b, 8).ok_or(bad)?;
            let data = &b[12..];
            d.with_region(rkey, addr, data.len(), Access::REMOTE_WRITE, |p| {
                // SAFETY: inside a registered region, under the table's read lock.
                unsafe { nic_write(p, data) }
            })
            .ok_or(acc)?;
            Ok(frame(ACK, &[]))
        }
        READ => {
            let addr = u64_at(b, 0).ok_or(bad)?;
            let rkey = u32_at(b, 8).ok_or(bad)?;
            let len = u32_at(b, 12).ok_or(bad)? as usize;
            let data = d
                .with_region(rkey, addr, len, Access::REMOTE_READ, |p| {
                    // SAFETY: inside a registered region, under the table's read lock.
                    unsafe { nic_read(p, len) }
                })
                .ok_or(acc)?;
            Ok(frame(DATA, &[&data]))
        }
        FADD | CSWAP => {
            let addr = u64_at(b, 0).ok_or(bad)?;
            let rkey = u32_at(b, 8).ok_or(bad)?;
            let a = u64_at(b, 12).ok_or(bad)?;
            let c = u64_at(b, 20).ok_or(bad)?;
            if addr % 8 != 0 {
                return Err(bad);
            }
            let old = d
                .with_region(rkey, addr, 8, Access::REMOTE_ATOMIC, |p| {
                    // SAFETY: aligned, inside a registered region, under the read lock;
                    // gex-sync's word operations are atomic against each other and
                    // never a mixed-size race with copies of the same bytes.
                    unsafe {
                        if kind == FADD {
                            gex_sync::word::fetch_add64(p, a)
                        } else {
                            gex_sync::word::cas64(p, a, c)
                        }
                    }
                })
                .ok_or(acc)?;
            Ok(frame(OLD, &[&old.to_le_bytes()]))
        }
        _ => Err(bad),
    }
}

/// Takes a receive from the queue pair's SRQ, waiting (RNR retries) while none is there.
fn take_recv(d: &Dev, qp: &QpInner) -> Result<Recv, WcStatus> {
    let mut q = qp.srq.q.lock().unwrap_or_else(|e| e.into_inner());
    let mut tries = 0u32;
    loop {
        if let Some(r) = q.pop_front() {
            return Ok(r);
        }
        let limit = qp.rnr_retry.load(Ordering::Relaxed);
        if (limit < 7 && tries >= limit) || d.closing.load(Ordering::Acquire) {
            return Err(WcStatus::RnrRetryExceeded);
        }
        tries = tries.saturating_add(1);
        q = qp
            .srq
            .cv
            .wait_timeout(q, RNR_TIMER)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}

/// The initiator side of one connection: reads answers in order and completes requests.
pub(super) fn answers(dev: Weak<Dev>, qp: Weak<QpInner>, mut s: UnixStream) {
    loop {
        let f = read_frame(&mut s);
        let Some(qp) = qp.upgrade() else { return };
        let Some((kind, body)) = f else {
            qp.fail(WcStatus::RetryExceeded);
            return;
        };
        let Some(o) = qp
            .outstanding
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front()
        else {
            // An answer to nothing: a broken peer.
            qp.fail(WcStatus::RetryExceeded);
            return;
        };
        let mut status = WcStatus::Success;
        match kind {
            ACK => {}
            NAK => status = code_status(u32_at(&body, 0).unwrap_or(0)),
            DATA | OLD => {
                let wrote = dev.upgrade().and_then(|d| {
                    let n = body.len().min(o.sge.len as usize);
                    d.with_region(o.sge.lkey, o.sge.addr, n, Access::LOCAL_WRITE, |p| {
                        // SAFETY: inside a registered region, under the read lock.
                        unsafe { nic_write(p, &body[..n]) }
                    })
                });
                if wrote.is_none() {
                    status = WcStatus::LocalProtectionError;
                }
            }
            _ => status = WcStatus::RetryExceeded,
        }
        if status != WcStatus::Success {
            // Put it back first so that `fail` completes it with its status.
            qp.outstanding
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push_front(o);
            qp.fail(status);
            if let Some(c) = qp.conn.lock().unwrap_or_else(|e| e.into_inner()).take() {
                let _ = c.stream.shutdown(std::net::Shutdown::Both);
            }
            return;
        }
        if o.signaled {
            qp.cq.push(Wc {
                wr_id: o.wr_id,
                status,
                opcode: o.opcode,
                byte_len: o.sge.len,
                qp_num: qp.qpn,
            });
        }
    }
}
