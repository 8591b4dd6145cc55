//! The libibverbs provider ([`RdmaVerbs`], cargo feature `verbs`): the [`Verbs`] trait
//! over `rdma-sys`. Every libibverbs call of the conduit is in this file.
//!
//! # Safety
//! Each handle owns one verbs object created from a live context and destroys it once
//! when dropped; every handle holds an `Arc` of the context (and protection domain), so
//! the context is closed after every object made from it. Pointers passed to libibverbs
//! point at live locals or at memory whose validity the caller promised (`reg_mr`,
//! `post_send`, `post_srq_recv`: the trait's `# Safety`). Posting to a queue pair or
//! polling a completion queue from several threads is allowed by libibverbs (they lock
//! internally), so the handles are `Send + Sync`.
#![allow(unsafe_code)]

use crate::verbs::{
    Access, ConnectParams, DeviceInfo, LinkLayer, PortInfo, QpAddr, QpCaps, SendOp, SendWr, Sge,
    UdDest, Verbs, VerbsError, Wc, WcOpcode, WcStatus,
};
use rdma_sys as ib;
use std::ffi::CStr;
use std::ptr::{self, NonNull};
use std::sync::Arc;
use std::time::Duration;

fn errno(call: &'static str) -> VerbsError {
    VerbsError::Call {
        call,
        reason: std::io::Error::last_os_error().to_string(),
    }
}

fn rc(call: &'static str, r: i32) -> Result<(), VerbsError> {
    if r == 0 {
        Ok(())
    } else {
        Err(VerbsError::Call {
            call,
            reason: std::io::Error::from_raw_os_error(r.abs()).to_string(),
        })
    }
}

/// The device context and its protection domain.
struct Ctx {
    ctx: NonNull<ib::ibv_context>,
    pd: NonNull<ib::ibv_pd>,
}

// SAFETY: libibverbs contexts and protection domains may be used from any thread.
unsafe impl Send for Ctx {}
// SAFETY: as above.
unsafe impl Sync for Ctx {}

impl Drop for Ctx {
    fn drop(&mut self) {
        // SAFETY: created by `open`; every object made from them is gone (they hold
        // this `Arc`).
        unsafe {
            ib::ibv_dealloc_pd(self.pd.as_ptr());
            ib::ibv_close_device(self.ctx.as_ptr());
        }
    }
}

/// A device port opened through libibverbs.
pub(crate) struct RdmaVerbs {
    ctx: Arc<Ctx>,
    name: String,
    port: PortInfo,
    gid: [u8; 16],
}

/// Handle types of verbs objects: each owns one object, made from a live context by
/// `RdmaVerbs` (field `$ptr`, with `$field`s of its own), and holds an `Arc` of the
/// context; `Send + Sync`, and destroyed once when dropped by `$destroy`, in order.
macro_rules! verbs_handles {
    ($(
        $(#[$doc:meta])*
        $name:ident { $($field:ident: $ty:ty),* $(,)? } drop $($destroy:ident($ptr:ident)),+;
    )+) => {$(
        $(#[$doc])*
        pub(crate) struct $name {
            $($field: $ty,)*
            _ctx: Arc<Ctx>,
        }
        // SAFETY: libibverbs objects may be used from any thread: it locks its queue
        // pairs, receive and completion queues internally, and registrations and
        // address handles are immutable once made (only their keys are read).
        unsafe impl Send for $name {}
        // SAFETY: as above.
        unsafe impl Sync for $name {}
        impl Drop for $name {
            fn drop(&mut self) {
                // SAFETY: made by `RdmaVerbs` from a live context (this handle's `Arc`
                // keeps it open) and destroyed once, here, after the objects that use it
                // (the field orders the type's documentation names).
                unsafe { $(ib::$destroy(self.$ptr.as_ptr());)+ }
            }
        }
    )+};
}

verbs_handles! {
    /// A registered memory region (registered by `reg_mr`).
    RdmaMr { mr: NonNull<ib::ibv_mr> } drop ibv_dereg_mr(mr);
    /// A completion queue with its completion channel (made by `create_cq`); its queue
    /// pairs are destroyed first (they are dropped first: the conduit's field order).
    RdmaCq {
        cq: NonNull<ib::ibv_cq>,
        channel: NonNull<ib::ibv_comp_channel>,
    } drop ibv_destroy_cq(cq), ibv_destroy_comp_channel(channel);
    /// A shared receive queue (made by `create_srq`).
    RdmaSrq { srq: NonNull<ib::ibv_srq> } drop ibv_destroy_srq(srq);
    /// An RC queue pair (made by `create_qp`).
    RdmaQp {
        qp: NonNull<ib::ibv_qp>,
        port: u8,
        mtu: u32,
    } drop ibv_destroy_qp(qp);
    /// An unreliable-datagram queue pair (made by `create_ud_qp`).
    RdmaUdQp { qp: NonNull<ib::ibv_qp> } drop ibv_destroy_qp(qp);
    /// An address handle (made by `create_ah`), destroyed after the UD queue pair that
    /// sends through it (the conduit's field order), so no posted send refers to it.
    RdmaAh { ah: NonNull<ib::ibv_ah> } drop ibv_destroy_ah(ah);
}

fn link_layer(code: u8) -> LinkLayer {
    match code {
        0 | 1 => LinkLayer::InfiniBand,
        2 => LinkLayer::Ethernet,
        c => LinkLayer::Other(c),
    }
}

fn mtu_bytes(m: ib::ibv_mtu::Type) -> u32 {
    if (1..=5).contains(&m) { 128 << m } else { 0 }
}

/// # Safety
/// `ctx` is an open context.
unsafe fn query_port(ctx: *mut ib::ibv_context, port: u8) -> Result<PortInfo, VerbsError> {
    // SAFETY: a zeroed plain C struct is a valid output buffer.
    let mut a: ib::ibv_port_attr = unsafe { std::mem::zeroed() };
    // SAFETY: live context, live output buffer.
    rc("ibv_query_port", unsafe {
        ib::___ibv_query_port(ctx, port, &mut a)
    })?;
    Ok(PortInfo {
        port,
        active: a.state == ib::ibv_port_state::IBV_PORT_ACTIVE,
        link_layer: link_layer(a.link_layer),
        lid: a.lid,
        mtu: mtu_bytes(a.active_mtu),
        gid_table_len: a.gid_tbl_len.max(0) as u32,
    })
}

/// The device list, freed when dropped.
struct List(*mut *mut ib::ibv_device, usize);
impl List {
    /// The list; `None` when the kernel has no RDMA subsystem at all (`ENOSYS`: no
    /// device either).
    fn get() -> Result<Option<List>, VerbsError> {
        let mut n = 0;
        // SAFETY: `n` is a live output.
        let l = unsafe { ib::__ibv_get_device_list(&mut n) };
        if l.is_null() {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ENOSYS) {
                return Ok(None);
            }
            return Err(VerbsError::Call {
                call: "ibv_get_device_list",
                reason: e.to_string(),
            });
        }
        Ok(Some(List(l, n.max(0) as usize)))
    }
    fn devices(&self) -> impl Iterator<Item = *mut ib::ibv_device> + '_ {
        // SAFETY: the list holds `self.1` entries.
        (0..self.1).map(|i| unsafe { *self.0.add(i) })
    }
}
impl Drop for List {
    fn drop(&mut self) {
        // SAFETY: from ibv_get_device_list, freed once.
        unsafe { ib::ibv_free_device_list(self.0) };
    }
}

fn dev_name(d: *mut ib::ibv_device) -> String {
    // SAFETY: a device of a live list; the name is a NUL-terminated string.
    let p = unsafe { ib::ibv_get_device_name(d) };
    if p.is_null() {
        return String::new();
    }
    // SAFETY: as above.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

fn access_bits(a: Access) -> i32 {
    let mut f = 0u32;
    if a.contains(Access::LOCAL_WRITE) {
        f |= ib::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
    }
    if a.contains(Access::REMOTE_WRITE) {
        f |= ib::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0
            | ib::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
    }
    if a.contains(Access::REMOTE_READ) {
        f |= ib::ibv_access_flags::IBV_ACCESS_REMOTE_READ.0;
    }
    if a.contains(Access::REMOTE_ATOMIC) {
        f |= ib::ibv_access_flags::IBV_ACCESS_REMOTE_ATOMIC.0
            | ib::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
    }
    f as i32
}

fn status(s: ib::ibv_wc_status::Type) -> WcStatus {
    use ib::ibv_wc_status as w;
    match s {
        w::IBV_WC_SUCCESS => WcStatus::Success,
        w::IBV_WC_LOC_LEN_ERR => WcStatus::LocalLengthError,
        w::IBV_WC_LOC_PROT_ERR => WcStatus::LocalProtectionError,
        w::IBV_WC_WR_FLUSH_ERR => WcStatus::WrFlushError,
        w::IBV_WC_REM_ACCESS_ERR => WcStatus::RemoteAccessError,
        w::IBV_WC_REM_INV_REQ_ERR => WcStatus::RemoteInvalidRequest,
        w::IBV_WC_RETRY_EXC_ERR => WcStatus::RetryExceeded,
        w::IBV_WC_RNR_RETRY_EXC_ERR => WcStatus::RnrRetryExceeded,
        other => WcStatus::Other(other),
    }
}

fn opcode(o: ib::ibv_wc_opcode::Type) -> WcOpcode {
    use ib::ibv_wc_opcode as w;
    match o {
        w::IBV_WC_RDMA_WRITE => WcOpcode::Write,
        w::IBV_WC_RDMA_READ => WcOpcode::Read,
        w::IBV_WC_FETCH_ADD => WcOpcode::FetchAdd,
        w::IBV_WC_COMP_SWAP => WcOpcode::CmpSwap,
        o if o & w::IBV_WC_RECV != 0 => WcOpcode::Recv,
        _ => WcOpcode::Send,
    }
}

fn modify(
    qp: &RdmaQp,
    attr: &mut ib::ibv_qp_attr,
    mask: u32,
    what: &'static str,
) -> Result<(), VerbsError> {
    modify_raw(qp.qp, attr, mask, what)
}

fn modify_raw(
    qp: NonNull<ib::ibv_qp>,
    attr: &mut ib::ibv_qp_attr,
    mask: u32,
    what: &'static str,
) -> Result<(), VerbsError> {
    // SAFETY: a live queue pair (owned by the caller's handle) and a live attribute
    // struct.
    rc(what, unsafe {
        ib::ibv_modify_qp(qp.as_ptr(), attr, mask as i32)
    })
}

fn post_result(r: i32) -> Result<(), VerbsError> {
    match r {
        0 => Ok(()),
        libc::ENOMEM => Err(VerbsError::QueueFull),
        e => Err(VerbsError::Invalid(
            std::io::Error::from_raw_os_error(e).to_string(),
        )),
    }
}

/// Posts one receive of `sge` under `wr_id` through `post` (`ibv_post_srq_recv` or
/// `ibv_post_recv`), handed the work request and the bad-request output, locals live
/// for the call.
fn post_one_recv(
    wr_id: u64,
    sge: Sge,
    post: impl FnOnce(&mut ib::ibv_recv_wr, &mut *mut ib::ibv_recv_wr) -> i32,
) -> Result<(), VerbsError> {
    let mut s = ib::ibv_sge {
        addr: sge.addr,
        length: sge.len,
        lkey: sge.lkey,
    };
    let mut w = ib::ibv_recv_wr {
        wr_id,
        next: ptr::null_mut(),
        sg_list: &mut s,
        num_sge: 1,
    };
    let mut bad = ptr::null_mut();
    post_result(post(&mut w, &mut bad))
}

impl Verbs for RdmaVerbs {
    type Mr = RdmaMr;
    type Cq = RdmaCq;
    type Srq = RdmaSrq;
    type Qp = RdmaQp;
    type UdQp = RdmaUdQp;
    type Ah = RdmaAh;
    const PROVIDER: &'static str = "verbs";

    fn devices() -> Result<Vec<DeviceInfo>, VerbsError> {
        let Some(list) = List::get()? else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for d in list.devices() {
            let name = dev_name(d);
            // SAFETY: a device of the live list.
            let ctx = unsafe { ib::ibv_open_device(d) };
            if ctx.is_null() {
                out.push(DeviceInfo {
                    name,
                    ports: Vec::new(),
                });
                continue;
            }
            // SAFETY: zeroed C struct as output.
            let mut attr: ib::ibv_device_attr = unsafe { std::mem::zeroed() };
            // SAFETY: live context and output.
            let nports = if unsafe { ib::ibv_query_device(ctx, &mut attr) } == 0 {
                attr.phys_port_cnt
            } else {
                0
            };
            let ports = (1..=nports)
                // SAFETY: live context.
                .filter_map(|p| unsafe { query_port(ctx, p) }.ok())
                .collect();
            // SAFETY: opened above.
            unsafe { ib::ibv_close_device(ctx) };
            out.push(DeviceInfo { name, ports });
        }
        Ok(out)
    }

    fn open(device: Option<&str>, port: u8, gid_index: u32) -> Result<Self, VerbsError> {
        let list = List::get()?.ok_or_else(|| {
            VerbsError::NoDevice(" (ibv_get_device_list: the kernel has no RDMA support)".into())
        })?;
        let d = list
            .devices()
            .find(|&d| device.is_none_or(|want| dev_name(d) == want))
            .ok_or_else(|| {
                VerbsError::NoDevice(match device {
                    Some(n) => format!(" named {n}"),
                    None => " (ibv_get_device_list found none)".into(),
                })
            })?;
        let name = dev_name(d);
        // SAFETY: a device of the live list.
        let ctx = NonNull::new(unsafe { ib::ibv_open_device(d) })
            .ok_or_else(|| errno("ibv_open_device"))?;
        // SAFETY: live context.
        let pd = match NonNull::new(unsafe { ib::ibv_alloc_pd(ctx.as_ptr()) }) {
            Some(pd) => pd,
            None => {
                let e = errno("ibv_alloc_pd");
                // SAFETY: opened above.
                unsafe { ib::ibv_close_device(ctx.as_ptr()) };
                return Err(e);
            }
        };
        let ctx = Arc::new(Ctx { ctx, pd });
        // SAFETY: live context.
        let port_info = unsafe { query_port(ctx.ctx.as_ptr(), port) }?;
        // SAFETY: zeroed union as output.
        let mut gid: ib::ibv_gid = unsafe { std::mem::zeroed() };
        // SAFETY: live context and output.
        let r = unsafe { ib::ibv_query_gid(ctx.ctx.as_ptr(), port, gid_index as i32, &mut gid) };
        // SAFETY: every bit pattern of the union is a valid `raw`.
        let gid = if r == 0 { unsafe { gid.raw } } else { [0; 16] };
        Ok(RdmaVerbs {
            ctx,
            name,
            port: port_info,
            gid,
        })
    }

    fn device_name(&self) -> &str {
        &self.name
    }
    fn port(&self) -> &PortInfo {
        &self.port
    }
    fn gid(&self) -> [u8; 16] {
        self.gid
    }

    unsafe fn reg_mr(
        &self,
        addr: *mut u8,
        len: usize,
        access: Access,
    ) -> Result<RdmaMr, VerbsError> {
        // SAFETY: the caller keeps the memory valid until the region is dropped.
        let mr =
            unsafe { ib::ibv_reg_mr(self.ctx.pd.as_ptr(), addr.cast(), len, access_bits(access)) };
        let mr = NonNull::new(mr).ok_or_else(|| errno("ibv_reg_mr"))?;
        Ok(RdmaMr {
            mr,
            _ctx: self.ctx.clone(),
        })
    }
    fn lkey(mr: &RdmaMr) -> u32 {
        // SAFETY: a live registration.
        unsafe { mr.mr.as_ref() }.lkey
    }
    fn rkey(mr: &RdmaMr) -> u32 {
        // SAFETY: a live registration.
        unsafe { mr.mr.as_ref() }.rkey
    }

    fn create_cq(&self, depth: u32) -> Result<RdmaCq, VerbsError> {
        // SAFETY: live context.
        let ch = NonNull::new(unsafe { ib::ibv_create_comp_channel(self.ctx.ctx.as_ptr()) })
            .ok_or_else(|| errno("ibv_create_comp_channel"))?;
        // SAFETY: live context and channel.
        let cq = unsafe {
            ib::ibv_create_cq(
                self.ctx.ctx.as_ptr(),
                depth as i32,
                ptr::null_mut(),
                ch.as_ptr(),
                0,
            )
        };
        match NonNull::new(cq) {
            Some(cq) => Ok(RdmaCq {
                cq,
                channel: ch,
                _ctx: self.ctx.clone(),
            }),
            None => {
                let e = errno("ibv_create_cq");
                // SAFETY: created above, unused.
                unsafe { ib::ibv_destroy_comp_channel(ch.as_ptr()) };
                Err(e)
            }
        }
    }

    fn create_srq(&self, depth: u32) -> Result<RdmaSrq, VerbsError> {
        // SAFETY: zeroed C struct.
        let mut a: ib::ibv_srq_init_attr = unsafe { std::mem::zeroed() };
        a.attr.max_wr = depth;
        a.attr.max_sge = 1;
        // SAFETY: live protection domain and attributes.
        let srq = unsafe { ib::ibv_create_srq(self.ctx.pd.as_ptr(), &mut a) };
        let srq = NonNull::new(srq).ok_or_else(|| errno("ibv_create_srq"))?;
        Ok(RdmaSrq {
            srq,
            _ctx: self.ctx.clone(),
        })
    }

    fn create_qp(&self, cq: &RdmaCq, srq: &RdmaSrq, caps: QpCaps) -> Result<RdmaQp, VerbsError> {
        // SAFETY: zeroed C struct.
        let mut a: ib::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        a.send_cq = cq.cq.as_ptr();
        a.recv_cq = cq.cq.as_ptr();
        a.srq = srq.srq.as_ptr();
        a.cap.max_send_wr = caps.max_send_wr;
        a.cap.max_send_sge = 1;
        a.cap.max_inline_data = caps.max_inline;
        a.qp_type = ib::ibv_qp_type::IBV_QPT_RC;
        // SAFETY: live protection domain, queues and attributes.
        let qp = unsafe { ib::ibv_create_qp(self.ctx.pd.as_ptr(), &mut a) };
        let qp = NonNull::new(qp).ok_or_else(|| errno("ibv_create_qp"))?;
        Ok(RdmaQp {
            qp,
            port: self.port.port,
            mtu: self.port.mtu,
            _ctx: self.ctx.clone(),
        })
    }

    fn qp_addr(&self, qp: &RdmaQp) -> QpAddr {
        // SAFETY: a live queue pair.
        let qpn = unsafe { qp.qp.as_ref() }.qp_num;
        QpAddr {
            lid: self.port.lid,
            gid: self.gid,
            qpn,
            psn: qpn & 0xff_ffff,
        }
    }

    fn connect(&self, qp: &RdmaQp, remote: &QpAddr, p: &ConnectParams) -> Result<(), VerbsError> {
        use ib::ibv_qp_attr_mask as m;
        use ib::ibv_qp_state as s;
        // SAFETY: zeroed C struct.
        let mut a: ib::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = s::IBV_QPS_INIT;
        a.port_num = qp.port;
        a.pkey_index = 0;
        a.qp_access_flags = access_bits(Access::all()) as u32;
        modify(
            qp,
            &mut a,
            (m::IBV_QP_STATE | m::IBV_QP_PKEY_INDEX | m::IBV_QP_PORT | m::IBV_QP_ACCESS_FLAGS).0,
            "ibv_modify_qp(INIT)",
        )?;

        // SAFETY: zeroed C struct.
        let mut a: ib::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = s::IBV_QPS_RTR;
        a.path_mtu = match qp.mtu {
            4096 => ib::ibv_mtu::IBV_MTU_4096,
            2048 => ib::ibv_mtu::IBV_MTU_2048,
            512 => ib::ibv_mtu::IBV_MTU_512,
            256 => ib::ibv_mtu::IBV_MTU_256,
            _ => ib::ibv_mtu::IBV_MTU_1024,
        };
        a.dest_qp_num = remote.qpn;
        a.rq_psn = remote.psn;
        a.max_dest_rd_atomic = 16;
        a.min_rnr_timer = 12;
        a.ah_attr.dlid = remote.lid;
        a.ah_attr.port_num = qp.port;
        if remote.gid != [0; 16] {
            a.ah_attr.is_global = 1;
            a.ah_attr.grh.dgid.raw = remote.gid;
            a.ah_attr.grh.sgid_index = p.gid_index;
            a.ah_attr.grh.hop_limit = 64;
        }
        modify(
            qp,
            &mut a,
            (m::IBV_QP_STATE
                | m::IBV_QP_AV
                | m::IBV_QP_PATH_MTU
                | m::IBV_QP_DEST_QPN
                | m::IBV_QP_RQ_PSN
                | m::IBV_QP_MAX_DEST_RD_ATOMIC
                | m::IBV_QP_MIN_RNR_TIMER)
                .0,
            "ibv_modify_qp(RTR)",
        )?;

        // SAFETY: zeroed C struct.
        let mut a: ib::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = s::IBV_QPS_RTS;
        a.timeout = 14;
        a.retry_cnt = p.retry_cnt.min(7);
        a.rnr_retry = p.rnr_retry.min(7);
        // SAFETY: a live queue pair.
        a.sq_psn = unsafe { qp.qp.as_ref() }.qp_num & 0xff_ffff;
        a.max_rd_atomic = 16;
        modify(
            qp,
            &mut a,
            (m::IBV_QP_STATE
                | m::IBV_QP_TIMEOUT
                | m::IBV_QP_RETRY_CNT
                | m::IBV_QP_RNR_RETRY
                | m::IBV_QP_SQ_PSN
                | m::IBV_QP_MAX_QP_RD_ATOMIC)
                .0,
            "ibv_modify_qp(RTS)",
        )
    }

    unsafe fn post_send(&self, qp: &RdmaQp, wr: &SendWr) -> Result<(), VerbsError> {
        use ib::ibv_send_flags as f;
        use ib::ibv_wr_opcode as o;
        let mut sge = ib::ibv_sge {
            addr: wr.sge.addr,
            length: wr.sge.len,
            lkey: wr.sge.lkey,
        };
        // SAFETY: zeroed C struct (null pointers, zero unions).
        let mut w: ib::ibv_send_wr = unsafe { std::mem::zeroed() };
        w.wr_id = wr.wr_id;
        w.sg_list = &mut sge;
        w.num_sge = 1;
        let mut flags = 0;
        if wr.signaled {
            flags |= f::IBV_SEND_SIGNALED.0;
        }
        if wr.inline {
            flags |= f::IBV_SEND_INLINE.0;
        }
        w.send_flags = flags;
        match wr.op {
            SendOp::Send => w.opcode = o::IBV_WR_SEND,
            SendOp::Write { remote_addr, rkey } => {
                w.opcode = o::IBV_WR_RDMA_WRITE;
                w.wr.rdma = ib::rdma_t { remote_addr, rkey };
            }
            SendOp::Read { remote_addr, rkey } => {
                w.opcode = o::IBV_WR_RDMA_READ;
                w.wr.rdma = ib::rdma_t { remote_addr, rkey };
            }
            SendOp::FetchAdd {
                remote_addr,
                rkey,
                add,
            } => {
                w.opcode = o::IBV_WR_ATOMIC_FETCH_AND_ADD;
                w.wr.atomic = ib::atomic_t {
                    remote_addr,
                    compare_add: add,
                    swap: 0,
                    rkey,
                };
            }
            SendOp::CmpSwap {
                remote_addr,
                rkey,
                compare,
                swap,
            } => {
                w.opcode = o::IBV_WR_ATOMIC_CMP_AND_SWP;
                w.wr.atomic = ib::atomic_t {
                    remote_addr,
                    compare_add: compare,
                    swap,
                    rkey,
                };
            }
        }
        let mut bad = ptr::null_mut();
        // SAFETY: a live queue pair; the request and its scatter entry are live locals
        // (libibverbs copies them, and inline data, during the call); the buffer's
        // validity is the caller's promise.
        let r = unsafe { ib::ibv_post_send(qp.qp.as_ptr(), &mut w, &mut bad) };
        match r {
            0 => Ok(()),
            libc::ENOMEM => Err(VerbsError::QueueFull),
            e => Err(VerbsError::Invalid(
                std::io::Error::from_raw_os_error(e).to_string(),
            )),
        }
    }

    unsafe fn post_srq_recv(&self, srq: &RdmaSrq, wr_id: u64, sge: Sge) -> Result<(), VerbsError> {
        post_one_recv(wr_id, sge, |w, bad| {
            // SAFETY: a live queue; the request and its scatter entry are live locals
            // for the call; the buffer is the caller's promise.
            unsafe { ib::ibv_post_srq_recv(srq.srq.as_ptr(), w, bad) }
        })
    }

    fn poll_cq(&self, cq: &RdmaCq, out: &mut [Wc]) -> Result<usize, VerbsError> {
        // SAFETY: zeroed C structs as outputs.
        let mut wcs: [ib::ibv_wc; 16] = unsafe { std::mem::zeroed() };
        let want = out.len().min(wcs.len()) as i32;
        // SAFETY: a live queue and `want` live outputs.
        let n = unsafe { ib::ibv_poll_cq(cq.cq.as_ptr(), want, wcs.as_mut_ptr()) };
        if n < 0 {
            return Err(VerbsError::CqOverrun);
        }
        for (o, w) in out.iter_mut().zip(&wcs[..n as usize]) {
            *o = Wc {
                wr_id: w.wr_id,
                status: status(w.status),
                opcode: opcode(w.opcode),
                byte_len: w.byte_len,
                qp_num: w.qp_num,
            };
        }
        Ok(n as usize)
    }

    fn arm_cq(&self, cq: &RdmaCq) -> Result<(), VerbsError> {
        // SAFETY: a live queue.
        rc("ibv_req_notify_cq", unsafe {
            ib::ibv_req_notify_cq(cq.cq.as_ptr(), 0)
        })
    }

    fn wait_cq(&self, cq: &RdmaCq, timeout: Duration) -> Result<bool, VerbsError> {
        // SAFETY: a live channel.
        let fd = unsafe { cq.channel.as_ref() }.fd;
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one live pollfd.
        let r = unsafe { libc::poll(&mut p, 1, ms) };
        if r <= 0 {
            return Ok(false);
        }
        let mut ev_cq = ptr::null_mut();
        let mut ctx = ptr::null_mut();
        // SAFETY: the channel is readable; outputs are live locals.
        if unsafe { ib::ibv_get_cq_event(cq.channel.as_ptr(), &mut ev_cq, &mut ctx) } == 0 {
            // SAFETY: one event of this queue was taken.
            unsafe { ib::ibv_ack_cq_events(ev_cq, 1) };
        }
        Ok(true)
    }

    fn create_ud_qp(
        &self,
        cq: &RdmaCq,
        caps: QpCaps,
        recv_depth: u32,
        qkey: u32,
    ) -> Result<RdmaUdQp, VerbsError> {
        use ib::ibv_qp_attr_mask as m;
        use ib::ibv_qp_state as s;
        // SAFETY: zeroed C struct.
        let mut a: ib::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        a.send_cq = cq.cq.as_ptr();
        a.recv_cq = cq.cq.as_ptr();
        a.cap.max_send_wr = caps.max_send_wr;
        a.cap.max_recv_wr = recv_depth;
        a.cap.max_send_sge = 1;
        a.cap.max_recv_sge = 1;
        a.cap.max_inline_data = caps.max_inline;
        a.qp_type = ib::ibv_qp_type::IBV_QPT_UD;
        // SAFETY: live protection domain, queue and attributes.
        let qp = unsafe { ib::ibv_create_qp(self.ctx.pd.as_ptr(), &mut a) };
        let qp = NonNull::new(qp).ok_or_else(|| errno("ibv_create_qp(UD)"))?;
        // Owned from here: an error below destroys it.
        let ud = RdmaUdQp {
            qp,
            _ctx: self.ctx.clone(),
        };
        // SAFETY: zeroed C struct.
        let mut a: ib::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = s::IBV_QPS_INIT;
        a.pkey_index = 0;
        a.port_num = self.port.port;
        a.qkey = qkey;
        modify_raw(
            ud.qp,
            &mut a,
            (m::IBV_QP_STATE | m::IBV_QP_PKEY_INDEX | m::IBV_QP_PORT | m::IBV_QP_QKEY).0,
            "ibv_modify_qp(UD INIT)",
        )?;
        // SAFETY: zeroed C struct.
        let mut a: ib::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = s::IBV_QPS_RTR;
        modify_raw(ud.qp, &mut a, m::IBV_QP_STATE.0, "ibv_modify_qp(UD RTR)")?;
        // SAFETY: zeroed C struct.
        let mut a: ib::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = s::IBV_QPS_RTS;
        // SAFETY: a live queue pair.
        a.sq_psn = unsafe { ud.qp.as_ref() }.qp_num & 0xff_ffff;
        modify_raw(
            ud.qp,
            &mut a,
            (m::IBV_QP_STATE | m::IBV_QP_SQ_PSN).0,
            "ibv_modify_qp(UD RTS)",
        )?;
        Ok(ud)
    }

    fn ud_addr(&self, qp: &RdmaUdQp) -> QpAddr {
        // SAFETY: a live queue pair.
        let qpn = unsafe { qp.qp.as_ref() }.qp_num;
        QpAddr {
            lid: self.port.lid,
            gid: self.gid,
            qpn,
            psn: 0,
        }
    }

    fn create_ah(&self, remote: &QpAddr, gid_index: u8) -> Result<RdmaAh, VerbsError> {
        // SAFETY: zeroed C struct.
        let mut a: ib::ibv_ah_attr = unsafe { std::mem::zeroed() };
        a.dlid = remote.lid;
        a.port_num = self.port.port;
        if remote.gid != [0; 16] {
            a.is_global = 1;
            a.grh.dgid.raw = remote.gid;
            a.grh.sgid_index = gid_index;
            a.grh.hop_limit = 64;
        }
        // SAFETY: live protection domain and attributes.
        let ah = unsafe { ib::ibv_create_ah(self.ctx.pd.as_ptr(), &mut a) };
        let ah = NonNull::new(ah).ok_or_else(|| errno("ibv_create_ah"))?;
        Ok(RdmaAh {
            ah,
            _ctx: self.ctx.clone(),
        })
    }

    unsafe fn post_ud_send(
        &self,
        qp: &RdmaUdQp,
        ah: &RdmaAh,
        dest: UdDest,
        wr_id: u64,
        sge: Sge,
        inline: bool,
    ) -> Result<(), VerbsError> {
        use ib::ibv_send_flags as f;
        let mut s = ib::ibv_sge {
            addr: sge.addr,
            length: sge.len,
            lkey: sge.lkey,
        };
        // SAFETY: zeroed C struct (null pointers, zero unions).
        let mut w: ib::ibv_send_wr = unsafe { std::mem::zeroed() };
        w.wr_id = wr_id;
        w.sg_list = &mut s;
        w.num_sge = 1;
        w.opcode = ib::ibv_wr_opcode::IBV_WR_SEND;
        w.send_flags = f::IBV_SEND_SIGNALED.0 | if inline { f::IBV_SEND_INLINE.0 } else { 0 };
        w.wr.ud = ib::ud_t {
            ah: ah.ah.as_ptr(),
            remote_qpn: dest.qpn,
            remote_qkey: dest.qkey,
        };
        let mut bad = ptr::null_mut();
        // SAFETY: a live queue pair and address handle (the handle is only read while
        // posting: the NIC copies the route into the work queue entry); locals copied
        // during the call; the buffer's validity is the caller's promise.
        post_result(unsafe { ib::ibv_post_send(qp.qp.as_ptr(), &mut w, &mut bad) })
    }

    unsafe fn post_ud_recv(&self, qp: &RdmaUdQp, wr_id: u64, sge: Sge) -> Result<(), VerbsError> {
        post_one_recv(wr_id, sge, |w, bad| {
            // SAFETY: a live queue pair; the request and its scatter entry are live
            // locals for the call; the buffer is the caller's promise.
            unsafe { ib::ibv_post_recv(qp.qp.as_ptr(), w, bad) }
        })
    }
}
