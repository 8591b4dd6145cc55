//! The wire-up at the end of `open`: every endpoint says hello to every other endpoint
//! of the job and waits to hear from all of them (bounded by `WIREUP_TIMEOUT`), so
//! connections exist before the first AM and an unreachable peer is reported at
//! initialisation; then, with the `shm` provider, the names of this rank's shared
//! regions are unlinked (every peer has mapped them), so nothing is left in /dev/shm
//! even after `kill -9`.
//!
//! # Safety
//! `shm_unlink` only removes a name; the mappings of this process and its peers stay.
#![allow(unsafe_code)]

use crate::config::{WIREUP_TIMEOUT, conduit_err};
use crate::ep::OfiEp;
use crate::wire::{self, HEADER};
use gex_core::InitError;
use gex_core::spi::{Deliver, Incoming, ReplyTx};
use std::time::Instant;

/// A [`Deliver`] for the wire-up, where only hello messages may arrive.
struct NoDeliver;
impl Deliver for NoDeliver {
    fn deliver(&mut self, msg: &Incoming<'_>, _tx: &mut dyn ReplyTx) {
        panic!(
            "gex ofi: an active message from {} arrived during initialisation",
            msg.src
        );
    }
}

/// Wire-up: every endpoint says hello to every other endpoint of the job and waits to
/// hear from all of them, so that connections exist before any AM (a
/// connection-oriented provider under ofi_rxm connects lazily, and a lazy connection
/// needs both sides to make progress) and an unreachable peer is reported here, by
/// name, instead of hanging later.
///
/// `init` lists the global numbers of the endpoints made at init (those made at run
/// time introduce themselves on first contact).
pub(crate) fn wireup(eps: &mut [OfiEp], init: &[usize], prov: &str) -> Result<(), InitError> {
    let t0 = Instant::now();
    let total = init.len();
    let mut next = vec![0usize; eps.len()];
    loop {
        let mut all_sent = true;
        let mut all_heard = true;
        for (e, ep) in eps.iter_mut().enumerate() {
            let own = ep.tx.g(gex_core::EpAddr::new(ep.tx.rank, e as u16));
            send_hellos(ep, &mut next[e], own, init)?;
            all_sent &= next[e] == total;
            ep.progress(&mut NoDeliver, usize::MAX);
            all_heard &= ep.rx.hellos + 1 >= total;
        }
        if all_sent && all_heard {
            return Ok(());
        }
        if t0.elapsed() > WIREUP_TIMEOUT {
            let status: Vec<String> = eps
                .iter()
                .enumerate()
                .map(|(e, ep)| {
                    format!(
                        "EP {e} sent {}/{total}, heard from {}/{total}",
                        next[e],
                        ep.rx.hellos + 1
                    )
                })
                .collect();
            return Err(conduit_err(format!(
                "{prov}: wire-up did not complete within {WIREUP_TIMEOUT:?} ({}): a peer is unreachable over this provider",
                status.join("; ")
            )));
        }
        std::thread::yield_now();
    }
}

/// Sends `ep`'s hellos to the endpoints `init[*next..]`, while the provider takes them.
fn send_hellos(
    ep: &mut OfiEp,
    next: &mut usize,
    own: usize,
    init: &[usize],
) -> Result<(), InitError> {
    while *next < init.len() {
        let g = init[*next];
        if g == own {
            // Not to itself: its own progress serves both ends of a connection to
            // itself, so that one can be made lazily, if an AM to self ever needs it.
            // Made here, its two sockets would join the provider's poll set for the
            // whole job (tcp: every progress pass polls them).
            *next += 1;
            continue;
        }
        let (rank, index) = (ep.tx.rank, ep.tx.index);
        let sent = ep
            .tx
            .send_now(g, HEADER, |b| {
                let mut h = [0u8; HEADER];
                wire::encode_credit(&mut h, rank, index, true);
                b.copy_from_slice(&h);
            })
            .map_err(|x| conduit_err(format!("wire-up: {x}")))?;
        if !sent {
            return Ok(());
        }
        *next += 1;
    }
    Ok(())
}

/// With `shm`: every peer has now mapped each of this rank's shm regions (a hello from
/// a peer was written into the region, and every peer inserted every address before
/// saying hello). Their names are no longer needed: unlink them now, so that nothing is
/// left in /dev/shm even if this rank is killed with SIGKILL, which the provider's own
/// cleanup (at close, or in its handlers of catchable signals) cannot see.
pub(crate) fn unlink_names(prov: &str, names: &[Vec<u8>]) -> Result<(), InitError> {
    if prov != "shm" {
        return Ok(());
    }
    for (e, name) in names.iter().enumerate() {
        unlink_shm_region(name)
            .map_err(|x| conduit_err(format!("shm: EP {e}: shm_unlink: {x}")))?;
    }
    Ok(())
}

/// Unlinks the shm region named by an address of libfabric's `shm` provider.
///
/// libfabric 1.17's `shm` names an endpoint `fi_shm://<pid>:<uid>:<index>` (NUL
/// terminated) and backs it with the POSIX shared-memory object `/<pid>:<uid>:<index>`
/// (`/dev/shm/<pid>:<uid>:<index>`), which peers open by name when they insert the
/// address into their AV, and which the provider unlinks itself only when the endpoint
/// is closed or on a catchable signal. An address of another form (another version's
/// format) is left alone: `Ok(false)`. An object already gone is not an error.
fn unlink_shm_region(addr: &[u8]) -> Result<bool, std::io::Error> {
    let addr = addr.split(|&b| b == 0).next().unwrap_or_default();
    let Some(rest) = addr.strip_prefix(b"fi_shm://") else {
        return Ok(false);
    };
    if rest.is_empty() || rest.contains(&b'/') {
        return Ok(false);
    }
    let mut path = Vec::with_capacity(rest.len() + 2);
    path.push(b'/');
    path.extend_from_slice(rest);
    let path = std::ffi::CString::new(path).map_err(std::io::Error::other)?;
    // SAFETY: a NUL-terminated name; shm_unlink only removes the name (the mappings of
    // this process and its peers stay valid).
    if unsafe { libc::shm_unlink(path.as_ptr()) } == 0 {
        return Ok(true);
    }
    match std::io::Error::last_os_error() {
        e if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        e => Err(e),
    }
}
