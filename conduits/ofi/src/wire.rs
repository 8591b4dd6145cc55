//! The ofi conduit's message format and credit accounting: pure logic, no I/O, so it is
//! unit-tested here and identical whatever the provider.
//!
//! # Message format
//! One libfabric message (`FI_MSG`) carries one AM:
//!
//! | bytes | field |
//! |---|---|
//! | 0 | handler index (control messages: the operation, [`CTL_ADDR_REQ`], [`CTL_ADDR_ANS`] or [`CTL_CLOSED`]) |
//! | 1 | bits 0–1 category (0 Short, 1 Medium, 2 Long, 3 credit-only), bit 2 reply (AMs only), bit 3 hello (credit-only only), bit 4 control (credit-only only), bits 5–7 reserved (0) |
//! | 2 | number of arguments |
//! | 3 | reserved (0) |
//! | 4–5 | source endpoint index (little-endian) |
//! | 6–7 | request credits returned to the receiver (little-endian) |
//! | 8–11 | source rank |
//! | 12–15 | payload length |
//! | 16–23 | Long only: destination offset in the target endpoint's segment |
//! | then | arguments (4 bytes each, little-endian), then the payload |
//!
//! # Control messages
//! Credit-only messages with the control bit carry the conduit's own traffic about
//! endpoints made at run time (docs/ofi.md, "Endpoints made at run time"); their body
//! (the payload length says how long) is:
//!
//! | operation | body |
//! |---|---|
//! | [`CTL_ADDR_REQ`] "where is your endpoint `index`", to a rank's endpoint 0 | `index` (LE `u16`), the asking endpoint's own fabric address |
//! | [`CTL_ADDR_ANS`] the answer | `index` (LE `u16`), state (0 not created yet, 1 open, 2 closed), segment base (LE `u64`), segment key (LE `u64`), then (open) its fabric address |
//! | [`CTL_CLOSED`] "the endpoint sending this is closed" | empty |
//!
//! They spend no request credit.
//!
//! # Credits
//! Every ordered pair (sending EP, receiving EP) starts with `credits` request credits.
//! A request spends one; the receiver owes it back once the request has been delivered
//! and its reply, if any, has left. Owed credits ride on any message going back to the
//! requester (the header's credit field), or on a credit-only message once half the
//! window is owed. So at most `credits` requests per pair are ever unprocessed at a
//! receiver, and replies that cannot leave at once (queued locally, never blocking) are
//! bounded by the same number: a reply holds back its request's credit until it leaves.

use gex_core::{Category, Kind};

/// Fixed header length.
pub(crate) const HEADER: usize = 16;
/// Extra header bytes of a Long message (the destination offset).
pub(crate) const LONG_EXTRA: usize = 8;
/// Category code of a credit-only message (no handler runs).
pub(crate) const CAT_CREDIT: u8 = 3;
const F_REPLY: u8 = 1 << 2;
const F_HELLO: u8 = 1 << 3;
const F_CTRL: u8 = 1 << 4;
/// Control operation: "what is the address of your endpoint `index`" (to endpoint 0).
pub(crate) const CTL_ADDR_REQ: u8 = 1;
/// Control operation: the answer to a [`CTL_ADDR_REQ`].
pub(crate) const CTL_ADDR_ANS: u8 = 2;
/// Control operation: the sending endpoint (made at run time) is closed.
pub(crate) const CTL_CLOSED: u8 = 3;
/// State in a [`CTL_ADDR_ANS`]: not created yet.
pub(crate) const ST_ABSENT: u8 = 0;
/// State in a [`CTL_ADDR_ANS`]: open.
pub(crate) const ST_OPEN: u8 = 1;
/// State in a [`CTL_ADDR_ANS`]: closed.
pub(crate) const ST_CLOSED: u8 = 2;

/// Bytes a message with `nargs` arguments and `payload` bytes takes on the wire.
#[inline(always)]
pub(crate) fn wire_len(category: Category, nargs: usize, payload: usize) -> usize {
    HEADER
        + if category == Category::Long {
            LONG_EXTRA
        } else {
            0
        }
        + 4 * nargs
        + payload
}

/// The decoded fixed part of a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) handler: u8,
    /// `None` for a credit-only message.
    pub(crate) category: Option<Category>,
    pub(crate) kind: Kind,
    pub(crate) hello: bool,
    /// The control operation of a control message (0: not one).
    pub(crate) ctl: u8,
    pub(crate) nargs: usize,
    pub(crate) src_rank: u32,
    pub(crate) src_ep: u16,
    pub(crate) credits: u16,
    pub(crate) len: usize,
    pub(crate) offset: usize,
}

impl Header {
    /// Offset of the arguments in the message.
    #[inline(always)]
    pub(crate) fn args_at(&self) -> usize {
        HEADER
            + if self.category == Some(Category::Long) {
                LONG_EXTRA
            } else {
                0
            }
    }
    /// Offset of the payload in the message.
    #[inline(always)]
    pub(crate) fn payload_at(&self) -> usize {
        self.args_at() + 4 * self.nargs
    }
}

fn cat_code(c: Category) -> u8 {
    match c {
        Category::Short => 0,
        Category::Medium => 1,
        Category::Long => 2,
    }
}

/// Writes a message into `out` (exactly [`wire_len`] bytes). The credit field is 0;
/// [`set_credits`] fills it in when the message actually leaves.
#[inline]
#[allow(clippy::too_many_arguments)]
pub(crate) fn encode(
    out: &mut [u8],
    src_rank: u32,
    src_ep: u16,
    handler: u8,
    kind: Kind,
    category: Category,
    args: &[u32],
    payload: &[u8],
    offset: usize,
) {
    debug_assert_eq!(out.len(), wire_len(category, args.len(), payload.len()));
    out[0] = handler;
    out[1] = cat_code(category) | if kind == Kind::Reply { F_REPLY } else { 0 };
    out[2] = args.len() as u8;
    out[3] = 0;
    out[4..6].copy_from_slice(&src_ep.to_le_bytes());
    out[6..8].copy_from_slice(&0u16.to_le_bytes());
    out[8..12].copy_from_slice(&src_rank.to_le_bytes());
    out[12..16].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    let mut at = HEADER;
    if category == Category::Long {
        out[at..at + 8].copy_from_slice(&(offset as u64).to_le_bytes());
        at += LONG_EXTRA;
    }
    for a in args {
        out[at..at + 4].copy_from_slice(&a.to_le_bytes());
        at += 4;
    }
    out[at..].copy_from_slice(payload);
}

/// Writes a credit-only message (`hello` marks the wire-up message of `open`).
pub(crate) fn encode_credit(out: &mut [u8; HEADER], src_rank: u32, src_ep: u16, hello: bool) {
    *out = [0; HEADER];
    out[1] = CAT_CREDIT | if hello { F_HELLO } else { 0 };
    out[4..6].copy_from_slice(&src_ep.to_le_bytes());
    out[8..12].copy_from_slice(&src_rank.to_le_bytes());
}

/// Writes a control message (operation `op`, `body`) into `out`, which must be
/// exactly `HEADER + body.len()` bytes.
pub(crate) fn encode_ctl(out: &mut [u8], src_rank: u32, src_ep: u16, op: u8, body: &[u8]) {
    debug_assert_eq!(out.len(), HEADER + body.len());
    out[..HEADER].fill(0);
    out[0] = op;
    out[1] = CAT_CREDIT | F_CTRL;
    out[4..6].copy_from_slice(&src_ep.to_le_bytes());
    out[8..12].copy_from_slice(&src_rank.to_le_bytes());
    out[12..16].copy_from_slice(&(body.len() as u32).to_le_bytes());
    out[HEADER..].copy_from_slice(body);
}

/// The body of a [`CTL_ADDR_REQ`]: the index asked for, then the asker's address.
pub(crate) fn addr_req(index: u16, name: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(2 + name.len());
    b.extend_from_slice(&index.to_le_bytes());
    b.extend_from_slice(name);
    b
}

/// Decodes the body of a [`CTL_ADDR_REQ`]: (index, the asker's address).
pub(crate) fn parse_addr_req(body: &[u8]) -> Result<(u16, &[u8]), String> {
    match body {
        [a, b, name @ ..] if !name.is_empty() => Ok((u16::from_le_bytes([*a, *b]), name)),
        _ => Err(format!("{}-byte address request", body.len())),
    }
}

/// A decoded [`CTL_ADDR_ANS`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AddrAns<'a> {
    pub(crate) index: u16,
    /// [`ST_ABSENT`], [`ST_OPEN`] or [`ST_CLOSED`].
    pub(crate) state: u8,
    pub(crate) seg_base: u64,
    pub(crate) key: u64,
    /// The endpoint's address (empty unless open).
    pub(crate) name: &'a [u8],
}

/// Fixed part of a [`CTL_ADDR_ANS`] body.
const ANS_FIXED: usize = 2 + 1 + 8 + 8;

impl AddrAns<'_> {
    /// The body's bytes.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(ANS_FIXED + self.name.len());
        b.extend_from_slice(&self.index.to_le_bytes());
        b.push(self.state);
        b.extend_from_slice(&self.seg_base.to_le_bytes());
        b.extend_from_slice(&self.key.to_le_bytes());
        b.extend_from_slice(self.name);
        b
    }
}

/// Decodes the body of a [`CTL_ADDR_ANS`] (an open endpoint's answer must name an
/// address; the others must not).
pub(crate) fn parse_addr_ans(body: &[u8]) -> Result<AddrAns<'_>, String> {
    if body.len() < ANS_FIXED {
        return Err(format!("{}-byte address answer", body.len()));
    }
    let u64_at = |i: usize| u64::from_le_bytes(body[i..i + 8].try_into().expect("8 bytes"));
    let a = AddrAns {
        index: u16::from_le_bytes([body[0], body[1]]),
        state: body[2],
        seg_base: u64_at(3),
        key: u64_at(11),
        name: &body[ANS_FIXED..],
    };
    match (a.state, a.name.is_empty()) {
        (ST_OPEN, false) | (ST_ABSENT | ST_CLOSED, true) => Ok(a),
        (s, _) => Err(format!(
            "address answer with state {s} and a {}-byte address",
            a.name.len()
        )),
    }
}

/// Sets the credit field of an encoded message.
#[inline(always)]
pub(crate) fn set_credits(msg: &mut [u8], credits: u16) {
    msg[6..8].copy_from_slice(&credits.to_le_bytes());
}

/// The source a message claims (rank, endpoint), if it is long enough to say: for
/// naming the sender of a message that [`decode`] rejects.
pub(crate) fn claimed_source(msg: &[u8]) -> Option<(u32, u16)> {
    let ep = msg.get(4..6)?;
    let rank = msg.get(8..12)?;
    Some((
        u32::from_le_bytes(rank.try_into().ok()?),
        u16::from_le_bytes(ep.try_into().ok()?),
    ))
}

/// Decodes and checks a received message of `msg.len()` bytes. `max_args` bounds the
/// argument count. Returns a description of the problem for a malformed message:
/// anything the encoder would not have written (reserved bits set, a hello flag on
/// an AM, a credit-only message with a body, a length that disagrees with the header).
pub(crate) fn decode(msg: &[u8], max_args: usize) -> Result<Header, String> {
    if msg.len() < HEADER {
        return Err(format!(
            "{}-byte message is shorter than a header",
            msg.len()
        ));
    }
    if msg[1] & !(3 | F_REPLY | F_HELLO | F_CTRL) != 0 || msg[3] != 0 {
        return Err(format!(
            "reserved header bits set (flags {:#04x}, reserved byte {:#04x})",
            msg[1], msg[3]
        ));
    }
    let u16_at = |i: usize| u16::from_le_bytes([msg[i], msg[i + 1]]);
    let u32_at = |i: usize| u32::from_le_bytes([msg[i], msg[i + 1], msg[i + 2], msg[i + 3]]);
    let category = match msg[1] & 3 {
        0 => Some(Category::Short),
        1 => Some(Category::Medium),
        2 => Some(Category::Long),
        _ => None,
    };
    let mut h = Header {
        handler: msg[0],
        category,
        kind: if msg[1] & F_REPLY != 0 {
            Kind::Reply
        } else {
            Kind::Request
        },
        hello: msg[1] & F_HELLO != 0,
        ctl: 0,
        nargs: msg[2] as usize,
        src_ep: u16_at(4),
        credits: u16_at(6),
        src_rank: u32_at(8),
        len: u32_at(12) as usize,
        offset: 0,
    };
    if h.nargs > max_args {
        return Err(format!("{} arguments (at most {max_args})", h.nargs));
    }
    if category == Some(Category::Long) {
        if msg.len() < HEADER + LONG_EXTRA {
            return Err("Long message without its offset".into());
        }
        let mut o = [0u8; 8];
        o.copy_from_slice(&msg[HEADER..HEADER + 8]);
        h.offset = usize::try_from(u64::from_le_bytes(o)).map_err(|_| "offset overflows")?;
    }
    if msg[1] & F_CTRL != 0 {
        if category.is_some() || h.hello || h.kind == Kind::Reply || h.nargs != 0 {
            return Err("control flag on a message that is not credit-only".into());
        }
        if !(CTL_ADDR_REQ..=CTL_CLOSED).contains(&h.handler) {
            return Err(format!("unknown control operation {}", h.handler));
        }
        h.ctl = h.handler;
    } else if category.is_none() && (h.nargs != 0 || h.len != 0 || h.handler != 0) {
        return Err("credit-only message with a body".into());
    }
    if category.is_some() && h.hello {
        return Err("hello flag on an active message".into());
    }
    if category.is_none() && h.kind == Kind::Reply {
        return Err("reply flag on a credit-only message".into());
    }
    let want = h.payload_at() + h.len;
    if msg.len() != want {
        return Err(format!(
            "{} bytes received, header says {want} ({} args, {} payload bytes)",
            msg.len(),
            h.nargs,
            h.len
        ));
    }
    Ok(h)
}

/// What one rank publishes at `open` (through the bootstrap exchange): its provider,
/// its largest Medium payload and, per endpoint, its fabric address and its segment
/// (base, length, key).
///
/// | bytes | field |
/// |---|---|
/// | 4 + n | provider name: length (LE `u32`), then the name |
/// | 8 | largest Medium payload (LE `u64`) |
/// | 4 | endpoint count (LE `u32`) |
/// | per endpoint | address: length (LE `u32`) and bytes; segment base (LE `u64`); segment length (LE `u64`); segment key (LE `u64`) |
///
/// Decoding checks only the encoding; `open` checks the contents against the job
/// layout (endpoint count, segment lengths) and the provider (addresses).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PeerBlob {
    pub(crate) provider: String,
    pub(crate) max_medium: u64,
    /// Every endpoint's address and segment.
    pub(crate) eps: Vec<PublishedEp>,
}

/// One endpoint in a [`PeerBlob`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PublishedEp {
    /// Its fabric address (`fi_getname`).
    pub(crate) addr: Vec<u8>,
    /// The RMA address of its segment's offset 0 (its virtual address).
    pub(crate) seg_base: u64,
    /// Its segment's length (what it registered).
    pub(crate) seg_len: u64,
    /// The key of its segment's registration.
    pub(crate) key: u64,
}

impl PeerBlob {
    /// The blob's bytes.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        let put = |b: &mut Vec<u8>, x: &[u8]| {
            b.extend_from_slice(&(x.len() as u32).to_le_bytes());
            b.extend_from_slice(x);
        };
        put(&mut b, self.provider.as_bytes());
        b.extend_from_slice(&self.max_medium.to_le_bytes());
        b.extend_from_slice(&(self.eps.len() as u32).to_le_bytes());
        for e in &self.eps {
            put(&mut b, &e.addr);
            b.extend_from_slice(&e.seg_base.to_le_bytes());
            b.extend_from_slice(&e.seg_len.to_le_bytes());
            b.extend_from_slice(&e.key.to_le_bytes());
        }
        b
    }

    /// Decodes another rank's blob.
    ///
    /// # Errors
    /// A description of the problem: a field cut short, or bytes after the last
    /// endpoint.
    pub(crate) fn decode(b: &[u8]) -> Result<PeerBlob, String> {
        let mut at = 0usize;
        let mut take = |k: usize, what: &str| -> Result<&[u8], String> {
            let x = b.get(at..).and_then(|rest| rest.get(..k)).ok_or_else(|| {
                format!(
                    "{what} ({k} bytes) at byte {at} runs past the end of the {}-byte blob",
                    b.len()
                )
            })?;
            at += k;
            Ok(x)
        };
        let u32_of = |x: &[u8]| u32::from_le_bytes(x.try_into().expect("4 bytes"));
        let u64_of = |x: &[u8]| u64::from_le_bytes(x.try_into().expect("8 bytes"));
        let plen = u32_of(take(4, "provider length")?) as usize;
        let provider = String::from_utf8_lossy(take(plen, "provider name")?).into_owned();
        let max_medium = u64_of(take(8, "largest Medium")?);
        let k = u32_of(take(4, "endpoint count")?) as usize;
        // Not `with_capacity(k)`: `k` is what the blob claims.
        let mut eps = Vec::new();
        for _ in 0..k {
            let l = u32_of(take(4, "address length")?) as usize;
            let addr = take(l, "address")?.to_vec();
            let seg_base = u64_of(take(8, "segment base")?);
            let seg_len = u64_of(take(8, "segment length")?);
            let key = u64_of(take(8, "segment key")?);
            eps.push(PublishedEp {
                addr,
                seg_base,
                seg_len,
                key,
            });
        }
        if at != b.len() {
            return Err(format!(
                "{} bytes after the last of its {k} endpoints",
                b.len() - at
            ));
        }
        Ok(PeerBlob {
            provider,
            max_medium,
            eps,
        })
    }
}

/// Reads the arguments of a decoded message into `out`; returns them as a slice.
#[inline]
pub(crate) fn args<'a>(msg: &[u8], h: &Header, out: &'a mut [u32; 32]) -> &'a [u32] {
    let at = h.args_at();
    for (i, o) in out.iter_mut().take(h.nargs).enumerate() {
        let p = at + 4 * i;
        *o = u32::from_le_bytes([msg[p], msg[p + 1], msg[p + 2], msg[p + 3]]);
    }
    &out[..h.nargs]
}

/// Credit accounting of one endpoint toward every endpoint of the job (indexed by
/// global endpoint number). See the [module documentation](self).
#[derive(Debug)]
pub(crate) struct Credits {
    window: u16,
    /// Requests this EP may still send to each peer.
    avail: Vec<u16>,
    /// Requests from each peer delivered here and not yet credited back.
    owed: Vec<u32>,
    /// Replies to each peer queued locally (each holds back one owed credit).
    held: Vec<u32>,
}

impl Credits {
    /// For the hang report: `(peer, available, owed, held)` of every peer whose
    /// credits are not at rest (some used, owed or held back).
    pub(crate) fn unsettled(&self) -> impl Iterator<Item = (usize, u16, u32, u32)> + '_ {
        (0..self.avail.len())
            .map(|g| (g, self.avail[g], self.owed[g], self.held[g]))
            .filter(move |&(_, a, o, h)| a != self.window || o != 0 || h != 0)
    }

    /// `window` credits toward each of `peers` endpoints.
    pub(crate) fn new(peers: usize, window: u16) -> Self {
        Credits {
            window,
            avail: vec![window; peers],
            owed: vec![0; peers],
            held: vec![0; peers],
        }
    }

    /// Takes a request credit toward `g`; false if none is left.
    #[inline(always)]
    pub(crate) fn take(&mut self, g: usize) -> bool {
        if self.avail[g] == 0 {
            return false;
        }
        self.avail[g] -= 1;
        true
    }

    /// Gives back a credit taken by [`Credits::take`] whose request did not leave.
    #[inline(always)]
    pub(crate) fn untake(&mut self, g: usize) {
        self.avail[g] += 1;
    }

    /// Credits returned by `g` (the header of a message from it).
    #[inline(always)]
    pub(crate) fn returned(&mut self, g: usize, n: u16) {
        self.avail[g] = self.avail[g].saturating_add(n).min(self.window);
    }

    /// A request from `g` is about to be delivered.
    #[inline(always)]
    pub(crate) fn delivered(&mut self, g: usize) {
        self.owed[g] += 1;
    }

    /// A reply to `g` was queued instead of sent.
    pub(crate) fn hold(&mut self, g: usize) {
        self.held[g] += 1;
    }

    /// A queued reply to `g` is being sent.
    pub(crate) fn release(&mut self, g: usize) {
        self.held[g] -= 1;
    }

    /// Credits a message to `g` leaving now may carry back.
    #[inline(always)]
    pub(crate) fn returnable(&self, g: usize) -> u16 {
        self.owed[g]
            .saturating_sub(self.held[g])
            .min(u32::from(u16::MAX)) as u16
    }

    /// A message carrying `n` credits to `g` has left.
    #[inline(always)]
    pub(crate) fn sent_back(&mut self, g: usize, n: u16) {
        self.owed[g] -= u32::from(n);
    }

    /// True if a credit-only message to `g` is due (half the window owed).
    #[inline(always)]
    pub(crate) fn due(&self, g: usize) -> bool {
        u32::from(self.returnable(g)) * 2 >= u32::from(self.window).max(2)
    }

    /// Requests this EP may still send to `g`.
    #[cfg(test)]
    pub(crate) fn available(&self, g: usize) -> u16 {
        self.avail[g]
    }

    /// True if requests to `g` are outstanding (not all credits came back): this EP
    /// waits on `g`.
    #[inline]
    pub(crate) fn outstanding(&self, g: usize) -> bool {
        self.avail[g] < self.window
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(cat: Category, kind: Kind, args: &[u32], payload: &[u8], offset: usize) {
        let mut buf = vec![0u8; wire_len(cat, args.len(), payload.len())];
        encode(&mut buf, 7, 3, 200, kind, cat, args, payload, offset);
        set_credits(&mut buf, 41);
        let h = decode(&buf, 16).expect("decodes");
        assert_eq!(h.handler, 200);
        assert_eq!(h.category, Some(cat));
        assert_eq!(h.kind, kind);
        assert_eq!((h.src_rank, h.src_ep, h.credits), (7, 3, 41));
        assert_eq!(h.len, payload.len());
        let mut a = [0; 32];
        assert_eq!(args_of(&buf, &h, &mut a), args);
        assert_eq!(&buf[h.payload_at()..], payload);
        if cat == Category::Long {
            assert_eq!(h.offset, offset);
        }
        assert_eq!(buf[1] & F_REPLY != 0, kind == Kind::Reply);
    }

    fn args_of<'a>(b: &[u8], h: &Header, a: &'a mut [u32; 32]) -> &'a [u32] {
        args(b, h, a)
    }

    #[test]
    fn messages_round_trip() {
        roundtrip(Category::Short, Kind::Request, &[], &[], 0);
        roundtrip(Category::Short, Kind::Reply, &[1, 2, u32::MAX], &[], 0);
        roundtrip(Category::Medium, Kind::Request, &[5; 16], &[9; 100], 0);
        roundtrip(Category::Long, Kind::Reply, &[3], &[1, 2, 3], 1 << 40);
        roundtrip(Category::Long, Kind::Request, &[], &[], 0);
    }

    #[test]
    fn credit_messages() {
        let mut b = [0u8; HEADER];
        encode_credit(&mut b, 2, 1, true);
        set_credits(&mut b, 9);
        let h = decode(&b, 16).unwrap();
        assert_eq!(h.category, None);
        assert!(h.hello);
        assert_eq!((h.src_rank, h.src_ep, h.credits), (2, 1, 9));
    }

    #[test]
    fn control_messages_round_trip_and_reject_garbage() {
        let body = addr_req(5, b"addr");
        let mut b = vec![0u8; HEADER + body.len()];
        encode_ctl(&mut b, 3, 7, CTL_ADDR_REQ, &body);
        set_credits(&mut b, 2);
        let h = decode(&b, 16).unwrap();
        assert_eq!(
            (h.category, h.ctl, h.src_rank, h.src_ep),
            (None, CTL_ADDR_REQ, 3, 7)
        );
        assert_eq!(h.credits, 2);
        assert_eq!(parse_addr_req(&b[h.payload_at()..]), Ok((5, &b"addr"[..])));
        assert!(
            parse_addr_req(&[1, 0]).is_err(),
            "an asker without an address"
        );
        let open = AddrAns {
            index: 9,
            state: ST_OPEN,
            seg_base: 0x1000,
            key: 77,
            name: b"xyz",
        };
        assert_eq!(parse_addr_ans(&open.encode()), Ok(open.clone()));
        let closed = AddrAns {
            state: ST_CLOSED,
            name: b"",
            ..open.clone()
        };
        assert_eq!(parse_addr_ans(&closed.encode()), Ok(closed));
        let bad = AddrAns {
            state: ST_ABSENT,
            ..open.clone()
        };
        assert!(
            parse_addr_ans(&bad.encode()).is_err(),
            "an absent endpoint with an address"
        );
        let bad = AddrAns { state: 7, ..open };
        assert!(parse_addr_ans(&bad.encode()).is_err());
        assert!(parse_addr_ans(&[0; 5]).is_err());
        // An unknown operation, and the control flag on an AM.
        let mut b = vec![0u8; HEADER];
        encode_ctl(&mut b, 0, 0, CTL_CLOSED, &[]);
        assert_eq!(decode(&b, 16).unwrap().ctl, CTL_CLOSED);
        b[0] = 9;
        assert!(decode(&b, 16).is_err());
        let mut b = vec![0u8; HEADER];
        encode_ctl(&mut b, 0, 0, CTL_CLOSED, &[]);
        b[1] = 1 | F_CTRL;
        assert!(decode(&b, 16).is_err());
    }

    #[test]
    fn malformed_messages_are_rejected() {
        assert!(decode(&[0; 8], 16).is_err());
        let mut b = vec![0u8; wire_len(Category::Medium, 2, 4)];
        encode(
            &mut b,
            0,
            0,
            1,
            Kind::Request,
            Category::Medium,
            &[1, 2],
            &[0; 4],
            0,
        );
        assert!(decode(&b[..b.len() - 1], 16).is_err());
        assert!(decode(&b, 1).is_err());
        let mut c = [0u8; HEADER];
        encode_credit(&mut c, 0, 0, false);
        c[2] = 1;
        assert!(decode(&c, 16).is_err());
    }

    /// Regression (found while writing the `ofi-wire` fuzz target, and by it): reserved
    /// header bits, a hello flag on an AM, a handler index or the reply flag on a
    /// credit-only message were accepted, so a corrupt header could pass as a valid
    /// message.
    #[test]
    fn reserved_bits_are_rejected() {
        let mut b = vec![0u8; wire_len(Category::Short, 0, 0)];
        encode(&mut b, 0, 0, 1, Kind::Request, Category::Short, &[], &[], 0);
        assert!(decode(&b, 16).is_ok());
        for (at, bits, what) in [
            (1, 0x20, "reserved header bits"),
            (
                1,
                F_CTRL,
                "control flag on a message that is not credit-only",
            ),
            (1, 0x80, "reserved header bits"),
            (3, 0x01, "reserved header bits"),
            (1, F_HELLO, "hello flag on an active message"),
        ] {
            let mut c = b.clone();
            c[at] |= bits;
            let e = decode(&c, 16).unwrap_err();
            assert!(e.contains(what), "{e}");
        }
        let mut c = [0u8; HEADER];
        encode_credit(&mut c, 0, 0, true);
        c[0] = 5;
        assert!(decode(&c, 16).unwrap_err().contains("credit-only"));
        // Found by the `ofi-wire` fuzz target (16 bytes: 00 0f 00…): the reply flag on
        // a credit-only message was accepted.
        let mut c = [0u8; HEADER];
        c[1] = 0x0f;
        assert!(
            decode(&c, 16)
                .unwrap_err()
                .contains("reply flag on a credit-only")
        );
    }

    #[test]
    fn claimed_source_names_the_sender() {
        let mut b = vec![0u8; wire_len(Category::Short, 0, 0)];
        encode(&mut b, 9, 3, 1, Kind::Request, Category::Short, &[], &[], 0);
        assert_eq!(claimed_source(&b), Some((9, 3)));
        assert_eq!(claimed_source(&b[..11]), None);
    }

    #[test]
    fn peer_blobs_round_trip_and_reject_garbage() {
        let p = PeerBlob {
            provider: "tcp;ofi_rxm".into(),
            max_medium: 65536,
            eps: vec![
                PublishedEp {
                    addr: vec![1, 2, 3],
                    seg_base: 4096,
                    seg_len: 1 << 20,
                    key: 7,
                },
                PublishedEp {
                    addr: vec![],
                    seg_base: 0,
                    seg_len: 0,
                    key: u64::MAX,
                },
            ],
        };
        let b = p.encode();
        assert_eq!(PeerBlob::decode(&b).unwrap(), p);
        for n in 0..b.len() {
            assert!(PeerBlob::decode(&b[..n]).is_err(), "cut at {n}");
        }
        let mut long = b.clone();
        long.push(0);
        assert!(
            PeerBlob::decode(&long)
                .unwrap_err()
                .contains("1 bytes after")
        );
        // A huge endpoint count in a short blob is an error, not a huge allocation.
        let mut c = Vec::new();
        c.extend(0u32.to_le_bytes());
        c.extend(0u64.to_le_bytes());
        c.extend(u32::MAX.to_le_bytes());
        assert!(PeerBlob::decode(&c).is_err());
    }

    #[test]
    fn credits_bound_requests_and_held_replies() {
        let mut c = Credits::new(2, 4);
        for _ in 0..4 {
            assert!(c.take(1));
        }
        assert!(!c.take(1));
        c.untake(1);
        assert!(c.take(1));
        // The peer delivered three of them, replied to one at once and queued one.
        let mut peer = Credits::new(2, 4);
        for _ in 0..3 {
            peer.delivered(0);
        }
        peer.hold(0);
        assert_eq!(peer.returnable(0), 2);
        assert!(peer.due(0));
        peer.sent_back(0, 2);
        assert_eq!(peer.returnable(0), 0);
        peer.release(0);
        assert_eq!(peer.returnable(0), 1);
        c.returned(1, 2);
        assert_eq!(c.available(1), 2);
        c.returned(1, 100);
        assert_eq!(c.available(1), 4, "never above the window");
    }
}
