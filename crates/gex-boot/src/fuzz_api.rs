//! Entry points for the fuzz targets of `benches/gex-fuzz`: the decoders of what the
//! launcher, the ranks and PMI servers send each other, callable from outside the
//! crate. Not part of the API: hidden from the documentation, may change with any
//! release, and nothing else may use it.

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;

use gex_core::boot::{BootError, Bootstrap};

use crate::coord::{self, Coordinator};
use crate::proto::{self, FrameBuf, ToLauncher, ToRank};

/// Largest frame body the launcher accepts from a rank.
pub const MAX_RANK_FRAME: usize = proto::MAX_RANK_FRAME;

/// Decodes a frame body sent by a rank; on success returns the frame the launcher's
/// encoder makes of the decoded message (length prefix included).
///
/// # Errors
/// The decoder's description of a malformed frame.
pub fn decode_to_launcher(body: &[u8]) -> Result<Vec<u8>, String> {
    let m = ToLauncher::decode(body).map_err(|e| e.0)?;
    m.encode().map_err(|e| format!("re-encoding {m:?}: {e}"))
}

/// Whether `body` decodes to an ABORT whose message is not UTF-8 (the decoder replaces
/// what is not, so it does not re-encode to the same bytes).
pub fn is_lossy_abort(body: &[u8]) -> bool {
    matches!(ToLauncher::decode(body), Ok(ToLauncher::Abort { .. }))
        && body.len() > 5
        && std::str::from_utf8(&body[5..]).is_err()
}

/// Decodes a frame body sent by the launcher; on success returns the frame the
/// encoder makes of the decoded message.
///
/// # Errors
/// The decoder's description of a malformed frame.
pub fn decode_to_rank(body: &[u8]) -> Result<Vec<u8>, String> {
    let m = ToRank::decode(body).map_err(|e| e.0)?;
    m.encode().map_err(|e| format!("re-encoding {m:?}: {e}"))
}

/// Feeds `chunks` to a frame buffer that accepts bodies of at most `max` bytes, as the
/// launcher does with what a rank's socket delivers; returns the complete frame
/// bodies cut so far and the error that stopped it, if any.
pub fn frames(max: usize, chunks: &[&[u8]]) -> (Vec<Vec<u8>>, Option<String>) {
    let mut fb = FrameBuf::new(max);
    let mut out = Vec::new();
    for c in chunks {
        fb.push(c);
        loop {
            match fb.next_frame() {
                Ok(Some(f)) => out.push(f),
                Ok(None) => break,
                Err(e) => return (out, Some(e.0)),
            }
        }
    }
    (out, None)
}

/// The launcher's job logic (I/O free), driven by a fuzz target.
#[derive(Debug)]
pub struct Coord(Coordinator);

/// What one step of [`Coord`] returned: the frames to send (rank, frame) and, if the
/// job is ending, its code and message.
pub type Step = (Vec<(usize, Vec<u8>)>, Option<(i32, Option<String>)>);

impl Coord {
    /// A job of `size` ranks.
    pub fn new(size: usize, require_hello: bool) -> Self {
        Coord(Coordinator::new(size, require_hello))
    }
    /// A frame body from `rank` (`rank < size`).
    pub fn message(&mut self, rank: usize, body: &[u8]) -> Step {
        let mut out = Vec::new();
        let e = self.0.message(rank, body, &mut out);
        (out, e.map(|e| (e.code, e.message)))
    }
    /// Rank `rank` exited with `code`, or was killed by `signal` if given.
    pub fn exited(&mut self, rank: usize, code: i32, signal: Option<i32>) -> Step {
        let st = match signal {
            Some(s) => coord::Status::Signal(s),
            None => coord::Status::Code(code),
        };
        (
            Vec::new(),
            self.0.exited(rank, st).map(|e| (e.code, e.message)),
        )
    }
    /// Whether the job is ending.
    pub fn is_ending(&self) -> bool {
        self.0.is_ending()
    }
    /// The job's exit code so far.
    pub fn job_code(&self) -> i32 {
        self.0.job_code()
    }
}

/// A frame a rank sends: HELLO.
pub fn hello_frame(rank: u32, size: u32) -> Vec<u8> {
    frame(ToLauncher::Hello {
        version: proto::VERSION,
        rank,
        size,
    })
}

/// A frame a rank sends: EXCHANGE (`kind` 0), BARRIER (1), BROADCAST from `root`
/// (2), FINALIZE (3), EXIT (4) or ABORT (5), with `seq`, `blob`, `code`.
pub fn rank_frame(kind: u8, seq: u64, root: u32, blob: &[u8], code: i32) -> Vec<u8> {
    frame(match kind % 6 {
        0 => ToLauncher::Exchange {
            seq,
            blob: blob.to_vec(),
        },
        1 => ToLauncher::Barrier { seq },
        2 => ToLauncher::Broadcast {
            seq,
            root,
            blob: blob.to_vec(),
        },
        3 => ToLauncher::Finalize { code },
        4 => ToLauncher::Exit { code },
        _ => ToLauncher::Abort {
            code,
            msg: String::from_utf8_lossy(blob).into_owned(),
        },
    })
}

/// A frame the launcher sends: WELCOME (`kind` 0), EXCHANGED (1), BARRIER_DONE (2),
/// BROADCAST_DONE (3).
pub fn launcher_frame(kind: u8, seq: u64, hosts: &[u32], blobs: &[Vec<u8>]) -> Vec<u8> {
    let m = match kind % 4 {
        0 => ToRank::Welcome {
            hosts: hosts.to_vec(),
        },
        1 => ToRank::Exchanged {
            seq,
            blobs: blobs.to_vec(),
        },
        2 => ToRank::BarrierDone { seq },
        _ => ToRank::BroadcastDone {
            seq,
            blob: blobs.first().cloned().unwrap_or_default(),
        },
    };
    m.encode().expect("small frame")
}

fn frame(m: ToLauncher) -> Vec<u8> {
    m.encode().expect("small frame")
}

/// Parses one PMI-1 reply line (without its newline) into (command, attributes).
///
/// # Errors
/// The parser's message.
pub fn pmi_parse(line: &str) -> Result<(String, Vec<(String, String)>), String> {
    crate::pmi::fuzz_parse(line)
}

/// Encodes a blob as PMI values carry it.
pub fn b64_encode(data: &[u8]) -> String {
    crate::pmi::fuzz_b64_encode(data)
}

/// Decodes a PMI value produced by [`b64_encode`].
///
/// # Errors
/// The decoder's message.
pub fn b64_decode(s: &str) -> Result<Vec<u8>, String> {
    crate::pmi::fuzz_b64_decode(s)
}

/// One bootstrap call a fuzz target makes after connecting.
#[derive(Clone, Debug)]
pub enum Call {
    /// `exchange(blob)`.
    Exchange(Vec<u8>),
    /// `barrier()`.
    Barrier,
    /// `broadcast(root, blob)`.
    Broadcast(u32, Vec<u8>),
    /// `finalize(0)`.
    Finalize,
}

/// A connected socket whose other end, in a thread, writes `script` (all of it, at
/// once), shuts its sending side and then reads and discards until the client closes:
/// a server that answers with canned bytes whatever is asked, and never makes the
/// client wait for bytes that are not coming.
fn scripted_peer(script: Vec<u8>) -> (OwnedFd, std::thread::JoinHandle<()>) {
    let (a, mut b) = UnixStream::pair().expect("socketpair");
    let t = std::thread::spawn(move || {
        let _ = b.write_all(&script);
        let _ = b.shutdown(std::net::Shutdown::Write);
        let mut sink = [0u8; 4096];
        while matches!(b.read(&mut sink), Ok(n) if n > 0) {}
    });
    (OwnedFd::from(a), t)
}

fn run_calls(boot: &mut dyn Bootstrap, calls: &[Call]) -> Vec<Result<Vec<Vec<u8>>, BootError>> {
    let mut out = Vec::new();
    for c in calls {
        let r = match c {
            Call::Exchange(b) => boot.exchange(b),
            Call::Barrier => boot.barrier().map(|_| Vec::new()),
            Call::Broadcast(root, b) => boot.broadcast(*root, b).map(|x| vec![x]),
            Call::Finalize => boot.finalize(0).map(|_| Vec::new()),
        };
        let stop = r.is_err();
        out.push(r);
        if stop {
            break;
        }
    }
    out
}

/// The run of a scripted client that connected as `r` says: its host ids and the
/// results of `calls` until one fails; the client is closed before the scripted peer
/// `t` is joined.
fn client_run<C: Bootstrap>(
    r: Result<C, BootError>,
    calls: &[Call],
    t: std::thread::JoinHandle<()>,
) -> ClientRun {
    let out = match r {
        Ok(mut c) => {
            let hosts = c.host_ids().to_vec();
            let res = run_calls(&mut c, calls);
            drop(c);
            (Ok(hosts), res)
        }
        Err(e) => (Err(e), Vec::new()),
    };
    let _ = t.join();
    out
}

/// What a scripted client run gave: the connection's result (host ids), then each
/// call's.
pub type ClientRun = (
    Result<Vec<u32>, BootError>,
    Vec<Result<Vec<Vec<u8>>, BootError>>,
);

/// Connects a PMI-1 client as `rank` of `size` (`handshake`: the `PMI_PORT` way, rank
/// and size from the server) to a server that answers with `script`, then makes
/// `calls` until one fails.
pub fn pmi_scripted(
    rank: u32,
    size: u32,
    handshake: bool,
    script: Vec<u8>,
    calls: &[Call],
) -> ClientRun {
    let (sock, t) = scripted_peer(script);
    let r = crate::pmi::fuzz_connect(sock, rank, size, handshake);
    client_run(r, calls, t)
}

/// Connects a fork-launcher client as `rank` of `size` to a launcher that answers with
/// `script` (raw frames), then makes `calls` until one fails.
pub fn fork_scripted(rank: u32, size: u32, script: Vec<u8>, calls: &[Call]) -> ClientRun {
    let (sock, t) = scripted_peer(script);
    let r = crate::fork::ForkClient::connect(sock, rank, size);
    client_run(r, calls, t)
}
