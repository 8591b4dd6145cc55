//! gex-boot: the fork launcher's frames (both ways), its job logic, the PMI-1 wire
//! format, base64 values, `PMI_process_mapping`, and the two bootstrap clients
//! talking to a scripted peer.

use super::{few, tag};
use crate::engine::outcome;
use arbitrary::Unstructured;
use gex_boot::fuzz_api::{self as api, Call};
use gex_boot::pmi::parse_process_mapping;
use gex_core::boot::BootError;

// ---- launcher-frame / rank-frame ---------------------------------------------------

pub(crate) fn launcher_frame_seeds() -> Vec<Vec<u8>> {
    let mut v = vec![api::hello_frame(3, 4)];
    for k in 0..6 {
        v.push(api::rank_frame(k, 7, 1, b"a blob", -2));
    }
    v.into_iter().map(|f| f[4..].to_vec()).collect()
}

pub(crate) fn launcher_frame(d: &[u8]) -> u64 {
    match api::decode_to_launcher(d) {
        Ok(f) => {
            assert_eq!(
                u32::from_le_bytes(f[..4].try_into().unwrap()) as usize,
                f.len() - 4
            );
            if !api::is_lossy_abort(d) {
                assert_eq!(&f[4..], d, "an accepted frame does not re-encode to itself");
            }
            outcome(&format!("ok {}", tag(d[0])))
        }
        Err(e) => outcome(&e),
    }
}

pub(crate) fn rank_frame_seeds() -> Vec<Vec<u8>> {
    let blobs = vec![vec![], b"x".to_vec(), vec![7; 40]];
    (0..4)
        .map(|k| api::launcher_frame(k, 5, &[0, 0, 1], &blobs)[4..].to_vec())
        .collect()
}

pub(crate) fn rank_frame(d: &[u8]) -> u64 {
    match api::decode_to_rank(d) {
        Ok(f) => {
            assert_eq!(&f[4..], d, "an accepted frame does not re-encode to itself");
            outcome(&format!("ok {}", tag(d[0])))
        }
        Err(e) => outcome(&e),
    }
}

// ---- frame-stream --------------------------------------------------------------------

pub(crate) fn frame_stream_seeds() -> Vec<Vec<u8>> {
    let mut s = vec![3u8, 2];
    s.extend(api::hello_frame(0, 2));
    s.extend(api::rank_frame(0, 0, 0, b"blob", 0));
    s.extend(api::rank_frame(3, 0, 0, b"", 0));
    vec![s]
}

/// Byte 0 picks the frame limit, byte 1 the chunk size; the rest is the stream.
pub(crate) fn frame_stream(d: &[u8]) -> u64 {
    let [a, b, rest @ ..] = d else {
        return outcome("short");
    };
    let max = [1, 16, 4096, api::MAX_RANK_FRAME][*a as usize % 4];
    let chunk = 1 + *b as usize % 23;
    let pieces: Vec<&[u8]> = rest.chunks(chunk).collect();
    let (frames, err) = api::frames(max, &pieces);
    let (whole, whole_err) = api::frames(max, &[rest]);
    assert_eq!(frames, whole, "frames depend on how the bytes arrived");
    assert_eq!(err, whole_err, "errors depend on how the bytes arrived");
    let used: usize = frames.iter().map(|f| 4 + f.len()).sum();
    assert!(used <= rest.len());
    for f in &frames {
        assert!(
            !f.is_empty() && f.len() <= max,
            "a frame of {} bytes",
            f.len()
        );
    }
    outcome(&format!(
        "{} {}",
        few(frames.len()),
        err.unwrap_or_default()
    ))
}

// ---- launcher-coord ------------------------------------------------------------------

pub(crate) fn coord_seeds() -> Vec<Vec<u8>> {
    // size 2, then HELLO from both, an exchange, a barrier, finalize from both (see
    // `coord` for the encoding).
    vec![
        vec![
            1, 0, 0, 0, 0, 1, 1, 0, 1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 3, 0, 1, 1, 3, 0,
        ],
        vec![2, 1, 0, 0, 0, 1, 1, 0, 1, 1, 5, 2, 9, 9, 0, 2, 0],
    ]
}

/// Drives the launcher's job logic with events decoded from `d`: frames from ranks
/// (well-formed with small sequence numbers, or raw bytes) and rank exits.
pub(crate) fn coord(d: &[u8]) -> u64 {
    let mut u = Unstructured::new(d);
    let size = 1 + usize::from(u.int_in_range(0u8..=3).unwrap_or(0));
    let require_hello = u.arbitrary().unwrap_or(false);
    let mut c = api::Coord::new(size, require_hello);
    let mut last = String::new();
    for _ in 0..64 {
        if u.is_empty() {
            break;
        }
        let rank = usize::from(u.int_in_range(0u8..=(size as u8 - 1)).unwrap_or(0));
        let ending_before = c.is_ending();
        let ev: u8 = u.int_in_range(0..=7).unwrap_or(0);
        let (out, ending, body) = match ev {
            0 => {
                let f = api::hello_frame(rank as u32, size as u32);
                let (o, e) = c.message(rank, &f[4..]);
                (o, e, Some(f[4..].to_vec()))
            }
            1..=4 => {
                let kind: u8 = u.arbitrary().unwrap_or(0);
                let seq = u64::from(u.int_in_range(0u8..=3).unwrap_or(0));
                let root = u32::from(u.int_in_range(0u8..=4).unwrap_or(0));
                let code = i32::from(u.int_in_range(-1i8..=2).unwrap_or(0));
                let blob: Vec<u8> = u.arbitrary().unwrap_or_default();
                let f = api::rank_frame(kind, seq, root, &blob, code);
                let (o, e) = c.message(rank, &f[4..]);
                (o, e, Some(f[4..].to_vec()))
            }
            5 => {
                let raw: Vec<u8> = u.arbitrary().unwrap_or_default();
                let (o, e) = c.message(rank, &raw);
                (o, e, Some(raw))
            }
            _ => {
                let code = i32::from(u.int_in_range(0u8..=2).unwrap_or(0));
                let sig = if u.arbitrary().unwrap_or(false) {
                    Some(9)
                } else {
                    None
                };
                let (o, e) = c.exited(rank, code, sig);
                (o, e, None)
            }
        };
        if ending_before {
            assert!(
                out.is_empty() && ending.is_none(),
                "the job logic acted after the job ended"
            );
        }
        for (to, f) in &out {
            assert!(*to < size, "a frame to rank {to} of {size}");
            api::decode_to_rank(&f[4..])
                .unwrap_or_else(|e| panic!("the launcher sent a malformed frame: {e}"));
        }
        if let Some((code, Some(msg))) = &ending {
            assert!(msg.contains("rank "), "an ending that names no rank: {msg}");
            if let Some(b) = &body {
                if api::decode_to_launcher(b).is_err() {
                    assert!(
                        msg.contains(&format!("rank {rank} sent a malformed")),
                        "a malformed frame from rank {rank} reported as: {msg}"
                    );
                    assert_eq!(*code, 1);
                }
            }
            last = msg.clone();
        }
    }
    let first: Vec<&str> = last.split_whitespace().take(6).collect();
    outcome(&format!(
        "{} {}",
        few(c.job_code().unsigned_abs().min(9) as usize),
        first.join(" ")
    ))
}

// ---- pmi-line ------------------------------------------------------------------------

pub(crate) fn pmi_line_seeds() -> Vec<Vec<u8>> {
    super::text_seeds(&[
        "cmd=get_result rc=0 msg=success value=(vector,(0,1,4))",
        "cmd=put_result rc=-1 msg=duplicate key  given",
        "cmd=x a=b=c",
        "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024",
        "cmd=barrier_out",
    ])
}

/// A reply line (what `recv_line` returns: no newline).
pub(crate) fn pmi_line(d: &[u8]) -> u64 {
    let s = String::from_utf8_lossy(d);
    let line = s.split('\n').next().unwrap_or("");
    match api::pmi_parse(line) {
        Ok((cmd, attrs)) => {
            let mut again = format!("cmd={cmd}");
            for (k, v) in &attrs {
                again.push_str(&format!(" {k}={v}"));
            }
            let (cmd2, attrs2) = api::pmi_parse(&again)
                .unwrap_or_else(|e| panic!("{again:?} (from {line:?}) does not parse: {e}"));
            assert_eq!((&cmd, &attrs), (&cmd2, &attrs2), "{line:?} vs {again:?}");
            outcome(&format!("ok {}", few(attrs.len())))
        }
        Err(e) => outcome(e.split(':').next().unwrap_or("")),
    }
}

// ---- pmi-b64 -------------------------------------------------------------------------

pub(crate) fn b64_seeds() -> Vec<Vec<u8>> {
    vec![b"Zm9vYmFy".to_vec(), b"-_8".to_vec(), b"Zg".to_vec()]
}

pub(crate) fn b64(d: &[u8]) -> u64 {
    let e = api::b64_encode(d);
    assert_eq!(api::b64_decode(&e).as_deref(), Ok(d), "round trip of {d:?}");
    let s = String::from_utf8_lossy(d);
    match api::b64_decode(&s) {
        Ok(v) => {
            assert_eq!(api::b64_encode(&v), s, "accepted a non-canonical encoding");
            outcome("ok")
        }
        Err(_) => outcome("err"),
    }
}

// ---- pmi-mapping ---------------------------------------------------------------------

pub(crate) fn mapping_seeds() -> Vec<Vec<u8>> {
    [
        (4u16, "(vector,(0,2,2))"),
        (7, "(vector,(1,1,1),(0,2,2))"),
        (5, " ( vector , ( 3 , 2 , 1 ) ) "),
        (2, "(vector,(5,0,4),(0,1,2))"),
    ]
    .iter()
    .map(|(n, s)| {
        let mut v = n.to_le_bytes().to_vec();
        v.extend_from_slice(s.as_bytes());
        v
    })
    .collect()
}

/// The blocks of a value the real parser accepted (whitespace between tokens only).
fn reference_blocks(value: &str) -> Vec<(u32, u32, u32)> {
    let s: String = value.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    let body = s
        .strip_prefix("(vector")
        .and_then(|s| s.strip_suffix(')'))
        .expect("accepted value");
    body.split("),(")
        .map(|b| b.trim_start_matches(",(").trim_end_matches(')'))
        .filter(|b| !b.is_empty())
        .map(|b| {
            let n: Vec<u32> = b.split(',').map(|x| x.parse().unwrap()).collect();
            (n[0], n[1], n[2])
        })
        .collect()
}

/// MPICH's dealing as the first gex version wrote it (rounds over every block): the
/// reference the faster one must agree with.
fn reference_ids(blocks: &[(u32, u32, u32)], size: usize) -> Option<Vec<u32>> {
    let mut ids = Vec::new();
    let mut wrapped = false;
    while ids.len() < size {
        let first = if wrapped {
            blocks.iter().position(|b| b.0 == 0).unwrap_or(0)
        } else {
            0
        };
        let before = ids.len();
        'round: for &(start, nodes, per) in &blocks[first..] {
            if start == 0 {
                wrapped = true;
            }
            if per == 0 {
                continue;
            }
            for node in 0..nodes {
                for _ in 0..per {
                    if ids.len() == size {
                        break 'round;
                    }
                    ids.push(start + node);
                }
            }
        }
        if ids.len() == before {
            return None;
        }
    }
    Some(ids)
}

/// Two bytes of job size, then the value.
pub(crate) fn mapping(d: &[u8]) -> u64 {
    let [a, b, rest @ ..] = d else {
        return outcome("short");
    };
    let size = u32::from(u16::from_le_bytes([*a, *b]));
    let value = String::from_utf8_lossy(rest);
    match parse_process_mapping(&value, size) {
        Ok(None) => {
            assert!(value.trim().is_empty());
            outcome("none")
        }
        Ok(Some(ids)) => {
            assert_eq!(ids.len(), size as usize);
            let blocks = reference_blocks(&value);
            let work: u64 = blocks.len() as u64 * u64::from(size);
            if work < 200_000 && blocks.iter().all(|b| b.1 < 1000 && b.2 < 1000) {
                assert_eq!(
                    Some(&ids),
                    reference_ids(&blocks, size as usize).as_ref(),
                    "{value:?} for {size} ranks"
                );
            }
            outcome(&format!("ok {}", few(blocks.len())))
        }
        Err(e) => {
            let e = e.to_string();
            if e.ends_with("its blocks place no rank") {
                // Well-formed, and the reference agrees that nobody can be placed.
                let blocks = reference_blocks(&value);
                assert_eq!(
                    reference_ids(&blocks, size as usize),
                    None,
                    "{value:?}: {e}"
                );
            }
            outcome(e.rsplit(": ").next().unwrap_or(""))
        }
    }
}

// ---- pmi-client / fork-client ----------------------------------------------------------

/// Byte 0: bit 0 the `PMI_PORT` handshake, bits 1–2 size − 1, bits 3–4 the rank
/// (modulo the size). Byte 1: four calls of two bits (exchange, barrier, broadcast
/// from rank 1 modulo the size, finalize). The rest: what the peer sends.
/// (handshake, rank, size, calls, what the peer sends).
type Header<'a> = (bool, u32, u32, Vec<Call>, &'a [u8]);

fn header(d: &[u8]) -> Option<Header<'_>> {
    let [a, b, rest @ ..] = d else {
        return None;
    };
    let size = 1 + u32::from((a >> 1) & 3);
    let rank = u32::from((a >> 3) & 3) % size;
    let calls = (0..4)
        .map(|i| match (b >> (2 * i)) & 3 {
            0 => Call::Exchange(format!("blob of rank {rank}").into_bytes()),
            1 => Call::Barrier,
            2 => Call::Broadcast(1 % size, b"root data".to_vec()),
            _ => Call::Finalize,
        })
        .collect();
    Some((a & 1 != 0, rank, size, calls, rest))
}

fn check_run(size: u32, known_size: bool, calls: &[Call], run: &api::ClientRun) -> String {
    let (conn, res) = run;
    let errs = |e: &BootError| match e {
        BootError::Lost(_) => "lost",
        BootError::Protocol(_) => "protocol",
        BootError::Environment(_) => "environment",
        BootError::Io(_) => "io",
        _ => "other",
    };
    match conn {
        Ok(hosts) => {
            if known_size {
                assert_eq!(hosts.len(), size as usize, "host ids for {size} ranks");
            }
            for (c, r) in calls.iter().zip(res) {
                if let (Call::Exchange(_), Ok(v), true) = (c, r, known_size) {
                    assert_eq!(v.len(), size as usize, "an exchange of {size} ranks");
                }
            }
            let last = res.last().map_or("none".to_string(), |r| match r {
                Ok(_) => "ok".into(),
                Err(e) => errs(e).into(),
            });
            format!("connected {} {last}", few(res.len()))
        }
        Err(e) => format!("refused {}", errs(e)),
    }
}

pub(crate) fn pmi_client_seeds() -> Vec<Vec<u8>> {
    let hello = "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n\
                 cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n\
                 cmd=appnum appnum=0\n\
                 cmd=my_kvsname kvsname=kvs_7_0\n";
    let blob = api::b64_encode(b"blob of rank 1");
    let root = api::b64_encode(b"root data");
    // Rank 0 of 2: mapping, exchange (put, barrier, get), barrier, broadcast from 1
    // (barrier, get), finalize.
    let known = format!(
        "{hello}cmd=get_result rc=0 msg=success value=(vector,(0,1,2))\n\
         cmd=put_result rc=0 msg=success\ncmd=barrier_out\n\
         cmd=get_result rc=0 msg=success value=1.{blob}\n\
         cmd=barrier_out\ncmd=barrier_out\n\
         cmd=get_result rc=0 msg=success value=1.{root}\ncmd=finalize_ack\n"
    );
    let calls = 0b11_10_01_00u8;
    let mut a = vec![0b0000_0010u8, calls];
    a.extend_from_slice(known.as_bytes());
    // The same over the PMI_PORT handshake, without a mapping (host names exchanged).
    let port = format!(
        "cmd=initack\ncmd=set size=2\ncmd=set rank=0\ncmd=set debug=0\n{hello}\
         cmd=get_result rc=-1 msg=key_PMI_process_mapping_not_found\n\
         cmd=put_result rc=0\ncmd=barrier_out\ncmd=get_result rc=0 value=1.{}\n\
         cmd=barrier_out\ncmd=finalize_ack\n",
        api::b64_encode(b"otherhost")
    );
    let mut b = vec![0b0000_0011u8, 0b11_11_11_01];
    b.extend_from_slice(port.as_bytes());
    vec![a, b]
}

pub(crate) fn pmi_client(d: &[u8]) -> u64 {
    let Some((handshake, rank, size, calls, script)) = header(d) else {
        return outcome("short");
    };
    let run = api::pmi_scripted(rank, size, handshake, script.to_vec(), &calls);
    outcome(&check_run(size, !handshake, &calls, &run))
}

pub(crate) fn fork_client_seeds() -> Vec<Vec<u8>> {
    let blobs = vec![b"blob of rank 0".to_vec(), b"blob of rank 1".to_vec()];
    let mut s = vec![0b0000_0010u8, 0b11_10_01_00];
    s.extend(api::launcher_frame(0, 0, &[0, 1], &[]));
    s.extend(api::launcher_frame(1, 0, &[], &blobs));
    s.extend(api::launcher_frame(2, 1, &[], &[]));
    s.extend(api::launcher_frame(3, 2, &[], &[b"root data".to_vec()]));
    vec![s]
}

pub(crate) fn fork_client(d: &[u8]) -> u64 {
    let Some((_, rank, size, calls, script)) = header(d) else {
        return outcome("short");
    };
    let run = api::fork_scripted(rank, size, script.to_vec(), &calls);
    outcome(&check_run(size, true, &calls, &run))
}
