//! The operations: [`MsgExt`] on [`Endpoint`].

use crate::direct::Read;
use crate::engine::{Envelope, Pattern};
use crate::error::MsgError;
use crate::landing::Landing;
use crate::layer::{Arrival, F_SYNC, LendTo, Msg, PostedRecv, Source, Status, split_status};
use crate::pair::Took;
use gex_core::event::{Data, finish_unit};
use gex_core::layer::{self, Cx};
use gex_core::spi::Conduit;
use gex_core::{Blocking, Endpoint, Event, Mode, Nb};

/// The largest valid tag (tags are `0..=TAG_MAX`; a larger one is
/// [`MsgError::TagOutOfRange`]).
pub const TAG_MAX: u32 = i32::MAX as u32;

/// The implicit-event tag the layer's operations are tracked under (mode `Nbi` is not
/// offered; the constant names the layer's tag for `layer::finish`).
const IMPLICIT_TAG: u32 = 0x6d73_6700;

/// A communication context (MPI's communicator id): messages match only receives of
/// the same context. Ranks are world ranks in every context.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Comm(u32);

impl Comm {
    /// The default context (id 0).
    pub const WORLD: Comm = Comm(0);
    /// Context `id`.
    pub const fn new(id: u32) -> Comm {
        Comm(id)
    }
    /// Its id.
    pub const fn id(self) -> u32 {
        self.0
    }
}

/// A persistent send (MPI's `Send_init`): an envelope checked once, for sends started
/// again and again with [`MsgExt::start_send`]. Bound to nothing: it may be started
/// on any endpoint carrying the layer (the rank is checked again, one comparison).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PersistentSend {
    comm: Comm,
    dst: u32,
    tag: u32,
    sync: bool,
}

/// A persistent receive (MPI's `Recv_init`): a pattern checked once, for receives
/// started again and again with [`MsgExt::start_recv`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PersistentRecv {
    comm: Comm,
    src: Option<u32>,
    tag: Option<u32>,
}

/// A received message: its bytes (cut to the message's length) and its status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Received {
    /// The message (the receive buffer, cut to the message's length).
    pub data: Vec<u8>,
    /// Who sent it, with which tag, and its length.
    pub status: Status,
}

fn finish_recv(d: Data, _: Option<Received>) -> Received {
    let (data, status) = split_status(d);
    Received { data, status }
}

fn check_tag(tag: u32) -> Result<(), MsgError> {
    if tag > TAG_MAX {
        return Err(MsgError::TagOutOfRange { tag, max: TAG_MAX });
    }
    Ok(())
}

fn check_rank(rank: u32, size: u32) -> Result<(), MsgError> {
    if rank >= size {
        return Err(MsgError::BadRank { rank, size });
    }
    Ok(())
}

fn pattern(m: &Msg, comm: Comm, src: Option<u32>, tag: Option<u32>) -> Result<Pattern, MsgError> {
    if let Some(s) = src {
        check_rank(s, m.size())?;
    }
    if let Some(t) = tag {
        check_tag(t)?;
    }
    Ok(Pattern {
        src,
        tag,
        ctx: comm.id(),
    })
}

/// Posts a receive of up to `cap` bytes matching `pat` into `buf`; the event
/// completes with the message.
fn post<C: Conduit>(
    m: &mut Msg,
    cx: &mut Cx<'_, C>,
    pat: Pattern,
    buf: Vec<u8>,
    cap: usize,
) -> Event<Received, MsgError> {
    // Enqueue-and-probe: what the near path's queues hold for `pat` is in the engine
    // before the receive is posted (so it matches in order).
    if m.near.covers(pat.src) {
        m.near_drain(pat.src);
        // The progress hook probes the queues while receives are posted.
        cx.set_busy();
    }
    let (ev, done) = cx.pending::<Received, MsgError>(None, finish_recv);
    if let Some((recv, env, a)) = m.matcher.post(pat, PostedRecv { buf, cap, done }) {
        m.deliver_posted(env, a, recv);
        m.pump(cx);
        cx.set_busy();
    }
    ev
}

/// Two-sided tagged messaging on an endpoint (the [`Msg`] layer's operations).
///
/// Peers are world ranks; a message goes from an endpoint to the endpoint of the same
/// index on the destination rank. Receives and probes take `src: Option<u32>` and
/// `tag: Option<u32>`: `None` is MPI's `ANY_SOURCE` / `ANY_TAG`. Messages from one
/// source in one [`Comm`] are received in the order they were sent, among the receives
/// that match them (MPI's non-overtaking rule).
///
/// # Errors
/// Every method: [`MsgError::NoLayer`] if the endpoint does not carry [`Msg`];
/// [`MsgError::BadRank`] for a rank outside the job; [`MsgError::TagOutOfRange`] for a
/// tag above [`TAG_MAX`]. Receives: [`MsgError::Truncated`] when the matched message is
/// longer than the buffer (the message is consumed). Waits:
/// [`MsgError::Event`]; injection: [`MsgError::Am`].
pub trait MsgExt {
    /// Sends `data` to `dst` with `tag` (standard mode): returns once `data` may be
    /// reused (eager: copied into the network; rendezvous: copied by the layer and the
    /// request sent; both may complete before the message is received).
    ///
    /// ```
    /// use gex_core::{boot::Singleton, loopback::Loopback, ClientBuilder};
    /// use gex_msg::{Comm, Msg, MsgExt};
    ///
    /// let client = ClientBuilder::new().layer::<Msg>()
    ///     .init::<Loopback>(Box::new(Singleton::new()))?;
    /// let mut ep = client.endpoint(0)?;
    /// ep.send(Comm::WORLD, 0, 7, b"hello")?;
    /// let mut buf = [0u8; 16];
    /// let st = ep.recv(Comm::WORLD, Some(0), Some(7), &mut buf)?;
    /// assert_eq!(&buf[..st.len], b"hello");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn send(&mut self, comm: Comm, dst: u32, tag: u32, data: &[u8]) -> Result<(), MsgError>;
    /// As [`send`](Self::send), nonblocking: the event completes when the send would
    /// have returned. `data` is copied (or injected) before the call returns.
    fn isend(
        &mut self,
        comm: Comm,
        dst: u32,
        tag: u32,
        data: &[u8],
    ) -> Result<Event<(), MsgError>, MsgError>;
    /// Synchronous send: returns only once a receive at `dst` has matched the message.
    ///
    /// ```
    /// use gex_core::{boot::Singleton, loopback::Loopback, ClientBuilder};
    /// use gex_msg::{Comm, Msg, MsgExt};
    ///
    /// let client = ClientBuilder::new().layer::<Msg>()
    ///     .init::<Loopback>(Box::new(Singleton::new()))?;
    /// let mut ep = client.endpoint(0)?;
    /// let s = ep.issend(Comm::WORLD, 0, 1, b"sync")?;
    /// ep.poll();
    /// assert!(!s.is_done()); // no receive matched it yet
    /// let mut buf = [0u8; 4];
    /// ep.recv(Comm::WORLD, None, None, &mut buf)?;
    /// ep.wait(s)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn ssend(&mut self, comm: Comm, dst: u32, tag: u32, data: &[u8]) -> Result<(), MsgError>;
    /// As [`ssend`](Self::ssend), nonblocking.
    fn issend(
        &mut self,
        comm: Comm,
        dst: u32,
        tag: u32,
        data: &[u8],
    ) -> Result<Event<(), MsgError>, MsgError>;
    /// Ready send (MPI's `rsend`): the program promises that the matching receive is
    /// already posted. gex-msg sends it as a standard send (which MPI allows): a
    /// broken promise is not detected, the message is simply queued as unexpected.
    fn rsend(&mut self, comm: Comm, dst: u32, tag: u32, data: &[u8]) -> Result<(), MsgError>;
    /// Receives a message matching (`src`, `tag`) in `comm` into `buf`; returns its
    /// status (`status.len` bytes of `buf` were written).
    fn recv(
        &mut self,
        comm: Comm,
        src: Option<u32>,
        tag: Option<u32>,
        buf: &mut [u8],
    ) -> Result<Status, MsgError>;
    /// Posts a receive into the owned `buf` (its length is the largest message
    /// accepted); the event gives the buffer back, cut to the message, with its status.
    /// The event owns the buffer, so dropping or forgetting it before completion is
    /// harmless.
    ///
    /// ```
    /// use gex_core::{boot::Singleton, loopback::Loopback, ClientBuilder};
    /// use gex_msg::{Comm, Msg, MsgExt};
    ///
    /// let client = ClientBuilder::new().layer::<Msg>()
    ///     .init::<Loopback>(Box::new(Singleton::new()))?;
    /// let mut ep = client.endpoint(0)?;
    /// let ev = ep.irecv(Comm::WORLD, None, None, vec![0; 64])?; // any source, any tag
    /// ep.send(Comm::WORLD, 0, 3, &[1, 2, 3])?;
    /// let got = ep.wait(ev)?;
    /// assert_eq!((got.data, got.status.tag), (vec![1, 2, 3], 3));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn irecv(
        &mut self,
        comm: Comm,
        src: Option<u32>,
        tag: Option<u32>,
        buf: Vec<u8>,
    ) -> Result<Event<Received, MsgError>, MsgError>;
    /// The status of a message a receive of (`src`, `tag`) would match now, without
    /// receiving it; `None` if there is none yet. Polls once first.
    fn iprobe(
        &mut self,
        comm: Comm,
        src: Option<u32>,
        tag: Option<u32>,
    ) -> Result<Option<Status>, MsgError>;
    /// Waits until a message matching (`src`, `tag`) has arrived; returns its status
    /// (a receive of the same pattern posted next receives it).
    ///
    /// ```
    /// use gex_core::{boot::Singleton, loopback::Loopback, ClientBuilder};
    /// use gex_msg::{Comm, Msg, MsgExt};
    ///
    /// let client = ClientBuilder::new().layer::<Msg>()
    ///     .init::<Loopback>(Box::new(Singleton::new()))?;
    /// let mut ep = client.endpoint(0)?;
    /// ep.send(Comm::WORLD, 0, 4, &[9; 300])?;
    /// let st = ep.probe(Comm::WORLD, None, None)?; // size the buffer from the status
    /// let mut buf = vec![0u8; st.len];
    /// ep.recv(Comm::WORLD, Some(st.source), Some(st.tag), &mut buf)?;
    /// assert_eq!(buf, [9; 300]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn probe(&mut self, comm: Comm, src: Option<u32>, tag: Option<u32>)
    -> Result<Status, MsgError>;
    /// A persistent send to `dst` with `tag` (synchronous if `sync`), checked now.
    ///
    /// ```
    /// use gex_core::{boot::Singleton, loopback::Loopback, ClientBuilder};
    /// use gex_msg::{Comm, Msg, MsgExt};
    ///
    /// let client = ClientBuilder::new().layer::<Msg>()
    ///     .init::<Loopback>(Box::new(Singleton::new()))?;
    /// let mut ep = client.endpoint(0)?;
    /// let tx = ep.send_init(Comm::WORLD, 0, 2, false)?;
    /// let rx = ep.recv_init(Comm::WORLD, Some(0), Some(2))?;
    /// for i in 0..3u8 {
    ///     let r = ep.start_recv(&rx, vec![0; 1])?;
    ///     let s = ep.start_send(&tx, &[i])?;
    ///     assert_eq!(ep.wait(r)?.data, [i]);
    ///     ep.wait(s)?;
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn send_init(
        &mut self,
        comm: Comm,
        dst: u32,
        tag: u32,
        sync: bool,
    ) -> Result<PersistentSend, MsgError>;
    /// A persistent receive from (`src`, `tag`), checked now.
    fn recv_init(
        &mut self,
        comm: Comm,
        src: Option<u32>,
        tag: Option<u32>,
    ) -> Result<PersistentRecv, MsgError>;
    /// Starts one send of `req` with `data` (as [`isend`](Self::isend) or
    /// [`issend`](Self::issend)).
    fn start_send(
        &mut self,
        req: &PersistentSend,
        data: &[u8],
    ) -> Result<Event<(), MsgError>, MsgError>;
    /// Starts one receive of `req` into `buf` (as [`irecv`](Self::irecv)).
    fn start_recv(
        &mut self,
        req: &PersistentRecv,
        buf: Vec<u8>,
    ) -> Result<Event<Received, MsgError>, MsgError>;
    /// Sends `data` to `dst` and receives into `buf` from (`src`, `tag`) at the same
    /// time (no deadlock when two ranks exchange); returns the receive's status.
    ///
    /// ```
    /// use gex_core::{boot::Singleton, loopback::Loopback, ClientBuilder};
    /// use gex_msg::{Comm, Msg, MsgExt};
    ///
    /// let client = ClientBuilder::new().layer::<Msg>()
    ///     .init::<Loopback>(Box::new(Singleton::new()))?;
    /// let mut ep = client.endpoint(0)?;
    /// let (me, n) = (ep.addr().rank, 1);
    /// let mut got = [0u8; 8];
    /// // Around a ring: send to the next rank, receive from the previous one.
    /// let st = ep.sendrecv(Comm::WORLD, (me + 1) % n, 0, b"token", Some((me + n - 1) % n), Some(0), &mut got)?;
    /// assert_eq!(&got[..st.len], b"token");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[allow(clippy::too_many_arguments)]
    fn sendrecv(
        &mut self,
        comm: Comm,
        dst: u32,
        send_tag: u32,
        data: &[u8],
        src: Option<u32>,
        recv_tag: Option<u32>,
        buf: &mut [u8],
    ) -> Result<Status, MsgError>;
}

fn send_as<M: Mode, C: Conduit>(
    ep: &mut Endpoint<C>,
    comm: Comm,
    dst: u32,
    tag: u32,
    data: &[u8],
    sync: bool,
) -> Result<M::Out<(), MsgError>, MsgError> {
    match start(ep, comm, dst, tag, data, sync, false)? {
        Started::Done => Ok(layer::done::<(), MsgError, M, C>(ep, ())),
        Started::Pending(ev) => layer::finish::<(), MsgError, M, C>(ep, ev, IMPLICIT_TAG),
        Started::Lent(..) | Started::Coop { .. } => unreachable!("not lent unless asked"),
    }
}

/// How a send started.
enum Started<'a> {
    /// Complete (queued on the near path, or an eager send injected now).
    Done,
    /// In flight: complete with its event.
    Pending(Event<(), MsgError>),
    /// A blocking send's slice lent in place (send id, loan): see `send_blocking`.
    Lent(u32, crate::direct::Loan<'a>),
    /// A blocking send's slice lent to another process of the host for the
    /// cooperative copy (module `coop`): see `coop_send`.
    Coop {
        sreq: u32,
        generation: u64,
        pid: u64,
    },
}

/// Checks and starts a send; `lend`: a rendezvous to another thread rank of this
/// process may lend `data` in place (the blocking standard send only).
fn start<'a, C: Conduit>(
    ep: &mut Endpoint<C>,
    comm: Comm,
    dst: u32,
    tag: u32,
    data: &'a [u8],
    sync: bool,
    lend: bool,
) -> Result<Started<'a>, MsgError> {
    layer::with::<Msg, C, _>(ep, |m, cx| {
        let m = m.get_mut();
        check_rank(dst, m.size())?;
        check_tag(tag)?;
        // The fast paths: a standard send queued on the near path, or a standard
        // eager send injected now, is complete (no event).
        if !sync && m.try_near(cx, dst, tag, comm.id(), data) {
            return Ok(Started::Done);
        }
        if !sync && m.try_eager_now(cx, !lend, dst, tag, comm.id(), data)? {
            return Ok(Started::Done);
        }
        if lend && !sync {
            match m.lends(cx, dst, data) {
                Some(LendTo::Process) => {
                    let (sreq, loan) = m.start_lent_send(cx, dst, tag, comm.id(), data);
                    return Ok(Started::Lent(sreq, loan));
                }
                Some(LendTo::Host(pid)) => {
                    let (sreq, generation) = m.start_coop_send(cx, dst, tag, comm.id(), data);
                    return Ok(Started::Coop {
                        sreq,
                        generation,
                        pid,
                    });
                }
                None => {}
            }
        }
        let (ev, done) = cx.pending::<(), MsgError>(None, finish_unit);
        m.start_send(cx, dst, tag, comm.id(), data, sync, done)?;
        Ok::<_, MsgError>(Started::Pending(ev))
    })
    .ok_or(MsgError::NoLayer)?
}

/// The blocking standard send. A rendezvous message to another thread rank of this
/// process lends `data` itself (module `direct`): the receiver copies straight from it
/// (the only copy) while this call waits; if no receiver has taken it within a budget
/// (`GEX_MSG_LEND_WAIT`, default 20 µs, plus about the time a copy of `data` takes), or the receiver asks for chunks,
/// the loan is withdrawn into a copy of the layer's and the call returns as any
/// standard send does (so crossing sends do not deadlock). Every other send is
/// `send_as`'s.
fn send_blocking<C: Conduit>(
    ep: &mut Endpoint<C>,
    comm: Comm,
    dst: u32,
    tag: u32,
    data: &[u8],
) -> Result<(), MsgError> {
    let (sreq, mut loan) = match start(ep, comm, dst, tag, data, false, true)? {
        Started::Done => {
            layer::done::<(), MsgError, Blocking, C>(ep, ());
            return Ok(());
        }
        Started::Pending(ev) => {
            return layer::finish::<(), MsgError, Blocking, C>(ep, ev, IMPLICIT_TAG);
        }
        Started::Lent(sreq, loan) => (sreq, loan),
        Started::Coop {
            sreq,
            generation,
            pid,
        } => return coop_send(ep, sreq, generation, pid, data),
    };
    let budget = layer::state::<Msg, C, _>(ep, |m| m.lend_budget(data.len())).unwrap_or_default();
    let start = std::time::Instant::now();
    let mut spins = 0u32;
    loop {
        match loan.state() {
            Read::Done | Read::Gone => break,
            // The receiver is copying: nothing to poll for; yield now and then in
            // case it shares this core.
            Read::Reading => {
                spins += 1;
                if spins % 256 == 0 {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
            Read::Ready => {
                let cleared = layer::state::<Msg, C, _>(ep, |m| m.cleared(sreq)).unwrap_or(true);
                if cleared || start.elapsed() > budget {
                    loan.withdraw();
                    break;
                }
                layer::poll(ep);
            }
        }
    }
    // Nobody reads `data` any more (`loan`'s drop would withdraw it too, on unwind).
    drop(loan);
    // Chunks, if the receiver asked for them, go from the copy as the endpoint is polled.
    layer::with::<Msg, C, _>(ep, |m, cx| {
        m.get_mut().pump(cx);
        cx.set_busy();
    });
    Ok(())
}

/// The blocking standard send of a rendezvous message to another process of this
/// host: `data` is lent for the cooperative copy (module `coop`). The receiver, once
/// it matched the message, copies it straight from `data` while this call copies its
/// share of the chunks into the receiver's buffer; if no receiver claimed the loan
/// within the same budget as `send_blocking`'s, or the receiver asks for chunks, the
/// loan is withdrawn into a copy of the layer's and the call returns as any standard
/// send does. It returns only once nobody reads `data` (or its receiver died).
fn coop_send<C: Conduit>(
    ep: &mut Endpoint<C>,
    sreq: u32,
    generation: u64,
    pid: u64,
    data: &[u8],
) -> Result<(), MsgError> {
    use crate::coop::Step;
    let budget = layer::state::<Msg, C, _>(ep, |m| m.lend_budget(data.len())).unwrap_or_default();
    let start = std::time::Instant::now();
    let mut spins = 0u32;
    // Ends the loan if a poll below unwinds (a panicking handler).
    let guard = layer::state::<Msg, C, _>(ep, |m| m.coop_guard(generation, pid, data)).flatten();
    loop {
        let expired = start.elapsed() > budget;
        let step = layer::state::<Msg, C, _>(ep, |m| {
            m.get_mut().coop_step(sreq, generation, pid, data, expired)
        })
        .unwrap_or(Step::Failed);
        match step {
            Step::Ready => {
                layer::poll(ep);
            }
            // The receiver is copying (this side helped with what it could claim):
            // nothing to poll for. Check now and then that it still lives.
            Step::Reading => {
                spins = spins.wrapping_add(1);
                if spins % 4096 == 0 {
                    if !crate::coop::process_alive(pid) {
                        break;
                    }
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
            Step::Done | Step::Withdrawn | Step::Failed => break,
        }
    }
    if let Some(g) = guard {
        g.disarm();
    }
    // Chunks, if the receiver asks for them, go from the copy as the endpoint is polled.
    layer::with::<Msg, C, _>(ep, |m, cx| {
        m.get_mut().pump(cx);
        cx.set_busy();
    });
    Ok(())
}

impl<C: Conduit> MsgExt for Endpoint<C> {
    fn send(&mut self, comm: Comm, dst: u32, tag: u32, data: &[u8]) -> Result<(), MsgError> {
        send_blocking(self, comm, dst, tag, data)
    }

    fn isend(
        &mut self,
        comm: Comm,
        dst: u32,
        tag: u32,
        data: &[u8],
    ) -> Result<Event<(), MsgError>, MsgError> {
        send_as::<Nb, C>(self, comm, dst, tag, data, false)
    }

    fn ssend(&mut self, comm: Comm, dst: u32, tag: u32, data: &[u8]) -> Result<(), MsgError> {
        send_as::<Blocking, C>(self, comm, dst, tag, data, true)
    }

    fn issend(
        &mut self,
        comm: Comm,
        dst: u32,
        tag: u32,
        data: &[u8],
    ) -> Result<Event<(), MsgError>, MsgError> {
        send_as::<Nb, C>(self, comm, dst, tag, data, true)
    }

    fn rsend(&mut self, comm: Comm, dst: u32, tag: u32, data: &[u8]) -> Result<(), MsgError> {
        send_blocking(self, comm, dst, tag, data)
    }

    fn recv(
        &mut self,
        comm: Comm,
        src: Option<u32>,
        tag: Option<u32>,
        buf: &mut [u8],
    ) -> Result<Status, MsgError> {
        // The message is taken when it is here (waiting as a probe does, without
        // posting a receive: no event, no allocation), so a near-path message is
        // copied straight from its queue's slot into `buf`, an eager one straight from
        // the unexpected queue, and a single-copy rendezvous one straight from the
        // sender's buffer (the caller's buffer is never lent to the layer). No receive
        // posted on this endpoint can come between (the endpoint is driven by this
        // call), so the message taken is the one a receive posted now would match:
        // the engine's matching messages come first, then the near-path queues the
        // receive can match (`near_take` leaves a message that an earlier posted
        // receive wants, or that is not next in its source's order, to the engine).
        let pat = layer::with::<Msg, C, _>(self, |m, _| pattern(&m, comm, src, tag))
            .ok_or(MsgError::NoLayer)??;
        loop {
            let (now, armed) = layer::with::<Msg, C, _>(self, |m, cx| {
                let m = m.get_mut();
                let now = loop {
                    match recv_now(m, cx, &pat, buf) {
                        Now::Wait => {}
                        now => break now,
                    }
                    if !m.near.covers(pat.src) {
                        break Now::Wait;
                    }
                    let took = m.near_take(&pat, buf);
                    // What matching released may have queued answers.
                    m.flush(cx);
                    match took {
                        Took::Msg(r) => break Now::Done(r),
                        // The engine may now hold a message `pat` matches.
                        Took::Engine => continue,
                        Took::Nothing => break Now::Wait,
                    }
                };
                // Nothing queued matches: the first eager message that does while
                // this call waits lands straight in `buf` (module `landing`). Not
                // armed when no eager message can land: from one source on the near
                // path, a message that fits `buf` comes through its queue.
                let arm = matches!(now, Now::Wait) && may_land(m, &pat, buf.len());
                if arm {
                    m.landing = Some(Landing::new(pat, buf));
                }
                (now, arm)
            })
            .ok_or(MsgError::NoLayer)?;
            match now {
                Now::Done(r) => return r,
                Now::Posted(ev) => {
                    let got =
                        layer::finish::<Received, MsgError, Blocking, C>(self, ev, IMPLICIT_TAG)?;
                    buf[..got.data.len()].copy_from_slice(&got.data);
                    return Ok(got.status);
                }
                Now::Wait if !armed => {
                    layer::wait_until::<Msg, C>(self, |m| {
                        m.near.ready(pat.src) || m.matcher.probe(&pat).is_some()
                    });
                }
                Now::Wait => {
                    // Takes the landing back however the wait ends (unwinding too).
                    let armed = Armed(&mut *self);
                    layer::wait_until::<Msg, C>(armed.0, |m| {
                        m.landing.as_ref().is_some_and(|l| l.got.is_some())
                            || m.near.ready(pat.src)
                            || m.matcher.probe(&pat).is_some()
                    });
                    if let Some(r) = armed.take() {
                        return r;
                    }
                }
            }
        }
    }

    fn irecv(
        &mut self,
        comm: Comm,
        src: Option<u32>,
        tag: Option<u32>,
        buf: Vec<u8>,
    ) -> Result<Event<Received, MsgError>, MsgError> {
        layer::with::<Msg, C, _>(self, |m, cx| {
            let m = m.get_mut();
            let pat = pattern(m, comm, src, tag)?;
            let cap = buf.len();
            Ok(post(m, cx, pat, buf, cap))
        })
        .ok_or(MsgError::NoLayer)?
    }

    fn iprobe(
        &mut self,
        comm: Comm,
        src: Option<u32>,
        tag: Option<u32>,
    ) -> Result<Option<Status>, MsgError> {
        let pat = layer::with::<Msg, C, _>(self, |m, _| pattern(&m, comm, src, tag))
            .ok_or(MsgError::NoLayer)??;
        layer::poll(self);
        Ok(layer::with::<Msg, C, _>(self, |m, cx| probe_near(m.get_mut(), cx, &pat)).flatten())
    }

    fn probe(
        &mut self,
        comm: Comm,
        src: Option<u32>,
        tag: Option<u32>,
    ) -> Result<Status, MsgError> {
        let pat = layer::with::<Msg, C, _>(self, |m, _| pattern(&m, comm, src, tag))
            .ok_or(MsgError::NoLayer)??;
        loop {
            if let Some(st) =
                layer::with::<Msg, C, _>(self, |m, cx| probe_near(m.get_mut(), cx, &pat))
                    .ok_or(MsgError::NoLayer)?
            {
                return Ok(st);
            }
            layer::wait_until::<Msg, C>(self, |m| {
                m.near.ready(pat.src) || m.matcher.probe(&pat).is_some()
            });
        }
    }

    fn send_init(
        &mut self,
        comm: Comm,
        dst: u32,
        tag: u32,
        sync: bool,
    ) -> Result<PersistentSend, MsgError> {
        let size = layer::state::<Msg, C, _>(self, |m| m.size()).ok_or(MsgError::NoLayer)?;
        check_rank(dst, size)?;
        check_tag(tag)?;
        Ok(PersistentSend {
            comm,
            dst,
            tag,
            sync,
        })
    }

    fn recv_init(
        &mut self,
        comm: Comm,
        src: Option<u32>,
        tag: Option<u32>,
    ) -> Result<PersistentRecv, MsgError> {
        layer::state::<Msg, C, _>(self, |m| pattern(&m, comm, src, tag))
            .ok_or(MsgError::NoLayer)??;
        Ok(PersistentRecv { comm, src, tag })
    }

    fn start_send(
        &mut self,
        req: &PersistentSend,
        data: &[u8],
    ) -> Result<Event<(), MsgError>, MsgError> {
        send_as::<Nb, C>(self, req.comm, req.dst, req.tag, data, req.sync)
    }

    fn start_recv(
        &mut self,
        req: &PersistentRecv,
        buf: Vec<u8>,
    ) -> Result<Event<Received, MsgError>, MsgError> {
        self.irecv(req.comm, req.src, req.tag, buf)
    }

    fn sendrecv(
        &mut self,
        comm: Comm,
        dst: u32,
        send_tag: u32,
        data: &[u8],
        src: Option<u32>,
        recv_tag: Option<u32>,
        buf: &mut [u8],
    ) -> Result<Status, MsgError> {
        let sent = self.isend(comm, dst, send_tag, data)?;
        let st = self.recv(comm, src, recv_tag, buf);
        let s = self.wait(sent);
        let st = st?;
        s?;
        Ok(st)
    }
}

/// A blocking receive's landing armed in its endpoint's layer state: taken back
/// (disarmed) by [`take`](Self::take) or the drop, before the receive's slice is used
/// again.
struct Armed<'a, C: Conduit>(&'a mut Endpoint<C>);

impl<C: Conduit> Armed<'_, C> {
    /// Disarms; what landed, if a message did.
    fn take(mut self) -> Option<Result<Status, MsgError>> {
        let got = self.disarm();
        // Disarmed: nothing left for the drop (the guard holds only a reference).
        std::mem::forget(self);
        got
    }

    fn disarm(&mut self) -> Option<Result<Status, MsgError>> {
        layer::with::<Msg, C, _>(self.0, |m, _| m.get_mut().landing.take())
            .flatten()
            .and_then(|l| l.got)
    }
}

impl<C: Conduit> Drop for Armed<'_, C> {
    fn drop(&mut self) {
        self.disarm();
    }
}

/// True if a waiting blocking receive of `pat` into `len` bytes arms its landing:
/// unless it takes one source on the near path and `len` is at most a queue slot's
/// payload. Those messages come through the queue (a synchronous send, or one whose
/// queue was full, still comes by AM, into the unexpected queue as without a
/// landing), so arming and disarming would be work on every wait for nothing.
#[inline]
fn may_land(m: &Msg, pat: &Pattern, len: usize) -> bool {
    len > crate::near::PAYLOAD_MAX || pat.src.is_none() || !m.near.covers(pat.src)
}

/// A probe that first feeds the near path's queues it can match to the engine.
fn probe_near<C: Conduit>(m: &mut Msg, cx: &mut Cx<'_, C>, pat: &Pattern) -> Option<Status> {
    if m.near.covers(pat.src) {
        m.near_drain(pat.src);
        m.flush(cx);
    }
    probe_status(m, pat)
}

fn probe_status(m: &Msg, pat: &Pattern) -> Option<Status> {
    m.matcher.probe(pat).map(|(e, a)| Status {
        source: e.src,
        tag: e.tag,
        len: a.len(),
    })
}

/// What a blocking receive did now.
enum Now {
    /// It took a message and is complete.
    Done(Result<Status, MsgError>),
    /// It took a rendezvous message that comes in chunks, into a buffer of its own.
    Posted(Event<Received, MsgError>),
    /// No message matches yet.
    Wait,
}

/// The blocking receive's step: takes the earliest message matching `pat`, if any,
/// and copies it into `buf` (eager, or a single-copy rendezvous), or receives it in
/// chunks into a buffer of the layer's.
fn recv_now<C: Conduit>(m: &mut Msg, cx: &mut Cx<'_, C>, pat: &Pattern, buf: &mut [u8]) -> Now {
    let Some((env, a)) = m.matcher.take(pat) else {
        return Now::Wait;
    };
    let now = match a {
        Arrival::Eager { data, flags, sreq } => {
            m.ack_if_sync(env, flags, sreq);
            Now::Done(copy_out(env, &data, buf))
        }
        Arrival::Rts {
            len,
            flags,
            sreq,
            key,
        } => {
            let status = Status {
                source: env.src,
                tag: env.tag,
                len,
            };
            if len > buf.len() {
                m.refuse_rts(env.src, sreq);
                Now::Done(Err(MsgError::Truncated {
                    len,
                    capacity: buf.len(),
                    source_rank: env.src,
                    tag: env.tag,
                }))
            } else {
                let copied = match m.single_copy_source(env.src, len, flags, key) {
                    Some(Source::Lent(d)) => {
                        d.copy_to(&mut buf[..len]);
                        true
                    }
                    Some(Source::Cma { pid, addr }) => {
                        let ok = gex_sync::cma::cma_read(pid, addr, &mut buf[..len]).is_ok();
                        if !ok {
                            m.note_fallback();
                        }
                        ok
                    }
                    Some(Source::Coop {
                        pid,
                        addr,
                        generation,
                    }) => match m.coop_read(env.src, pid, addr, generation, &mut buf[..len]) {
                        crate::coop::Received::Read => true,
                        crate::coop::Received::Failed => false,
                        // Came late: the sender has a copy; `deliver` asks where it
                        // is (the offer is still in the flags).
                        crate::coop::Received::NotLent => {
                            let (ev, done) = cx.pending::<Received, MsgError>(None, finish_recv);
                            let a = Arrival::Rts {
                                len,
                                flags,
                                sreq,
                                key,
                            };
                            let recv = PostedRecv {
                                buf: Vec::new(),
                                cap: buf.len(),
                                done,
                            };
                            m.deliver_owned(env, a, recv);
                            m.pump(cx);
                            cx.set_busy();
                            return Now::Posted(ev);
                        }
                    },
                    None => false,
                };
                if copied {
                    let dst = m.peer(env.src);
                    m.read_done(dst, sreq);
                    Now::Done(Ok(status))
                } else {
                    // In chunks, into a buffer of the layer's (no second offer).
                    let (ev, done) = cx.pending::<Received, MsgError>(None, finish_recv);
                    let a = Arrival::Rts {
                        len,
                        flags: flags & F_SYNC,
                        sreq,
                        key,
                    };
                    let recv = PostedRecv {
                        buf: Vec::new(),
                        cap: buf.len(),
                        done,
                    };
                    m.deliver_owned(env, a, recv);
                    Now::Posted(ev)
                }
            }
        }
    };
    m.pump(cx);
    cx.set_busy();
    now
}

pub(crate) fn copy_out(env: Envelope, data: &[u8], buf: &mut [u8]) -> Result<Status, MsgError> {
    if data.len() > buf.len() {
        return Err(MsgError::Truncated {
            len: data.len(),
            capacity: buf.len(),
            source_rank: env.src,
            tag: env.tag,
        });
    }
    buf[..data.len()].copy_from_slice(data);
    Ok(Status {
        source: env.src,
        tag: env.tag,
        len: data.len(),
    })
}
