//! Entry points for the fuzz targets of `benches/gex-fuzz`: the decoders of what other
//! ranks send over the network (message headers, the address blob of `open`),
//! callable from outside the crate. Not part of the API: hidden from the
//! documentation, may change with any release, and nothing else may use it.

use gex_core::{Category, Kind};

/// Largest argument count the conduit accepts.
pub const MAX_ARGS: usize = crate::config::MAX_ARGS;
/// Bytes of the fixed header.
pub const HEADER: usize = crate::wire::HEADER;

/// A decoded message (what `poll` hands to the core, before its checks against this
/// rank's endpoints and segment).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// Handler index.
    pub handler: u8,
    /// The category; `None` for a credit-only message.
    pub category: Option<Category>,
    /// Request or reply.
    pub kind: Kind,
    /// The wire-up flag of a credit-only message.
    pub hello: bool,
    /// Claimed source rank.
    pub src_rank: u32,
    /// Claimed source endpoint.
    pub src_ep: u16,
    /// Credits returned.
    pub credits: u16,
    /// Long: destination offset.
    pub offset: usize,
    /// The arguments.
    pub args: Vec<u32>,
    /// The payload (a control message's body).
    pub payload: Vec<u8>,
    /// The operation of a control message (the conduit's own traffic about endpoints
    /// made at run time); 0 for every other message.
    pub ctl: u8,
}

/// Encodes an AM as the conduit sends it, with `credits` returned.
#[allow(clippy::too_many_arguments)]
pub fn encode(
    src_rank: u32,
    src_ep: u16,
    handler: u8,
    kind: Kind,
    category: Category,
    args: &[u32],
    payload: &[u8],
    offset: usize,
    credits: u16,
) -> Vec<u8> {
    let mut out = vec![0u8; crate::wire::wire_len(category, args.len(), payload.len())];
    crate::wire::encode(
        &mut out, src_rank, src_ep, handler, kind, category, args, payload, offset,
    );
    crate::wire::set_credits(&mut out, credits);
    out
}

/// Encodes a credit-only message.
pub fn encode_credit(src_rank: u32, src_ep: u16, hello: bool, credits: u16) -> Vec<u8> {
    let mut h = [0u8; crate::wire::HEADER];
    crate::wire::encode_credit(&mut h, src_rank, src_ep, hello);
    crate::wire::set_credits(&mut h, credits);
    h.to_vec()
}

/// Encodes a control message (operation `op`, `body`) with `credits` returned.
pub fn encode_ctl(src_rank: u32, src_ep: u16, op: u8, body: &[u8], credits: u16) -> Vec<u8> {
    let mut v = vec![0u8; crate::wire::HEADER + body.len()];
    crate::wire::encode_ctl(&mut v, src_rank, src_ep, op, body);
    crate::wire::set_credits(&mut v, credits);
    v
}

/// Decodes a received message as `poll` does.
///
/// # Errors
/// What the conduit would report before ending the rank.
pub fn decode(msg: &[u8], max_args: usize) -> Result<Message, String> {
    let h = crate::wire::decode(msg, max_args)?;
    let mut a = [0u32; 32];
    let args = crate::wire::args(msg, &h, &mut a).to_vec();
    Ok(Message {
        handler: h.handler,
        category: h.category,
        kind: h.kind,
        hello: h.hello,
        src_rank: h.src_rank,
        src_ep: h.src_ep,
        credits: h.credits,
        offset: h.offset,
        args,
        payload: msg[h.payload_at()..].to_vec(),
        ctl: h.ctl,
    })
}

/// The source a message claims, for naming the sender of a rejected message.
pub fn claimed_source(msg: &[u8]) -> Option<(u32, u16)> {
    crate::wire::claimed_source(msg)
}

/// A rank's address blob: provider, largest Medium, (address, segment base, segment
/// length, key) per endpoint.
pub type PeerBlob = (String, u64, Vec<(Vec<u8>, u64, u64, u64)>);

/// Encodes an address blob as `open` publishes it.
pub fn encode_peer_blob(b: &PeerBlob) -> Vec<u8> {
    crate::wire::PeerBlob {
        provider: b.0.clone(),
        max_medium: b.1,
        eps: b
            .2
            .iter()
            .map(|(addr, seg_base, seg_len, key)| crate::wire::PublishedEp {
                addr: addr.clone(),
                seg_base: *seg_base,
                seg_len: *seg_len,
                key: *key,
            })
            .collect(),
    }
    .encode()
}

/// Decodes another rank's address blob as `open` does.
///
/// # Errors
/// What `open` would report.
pub fn decode_peer_blob(b: &[u8]) -> Result<PeerBlob, String> {
    let p = crate::wire::PeerBlob::decode(b)?;
    let eps = p
        .eps
        .into_iter()
        .map(|e| (e.addr, e.seg_base, e.seg_len, e.key))
        .collect();
    Ok((p.provider, p.max_medium, eps))
}
