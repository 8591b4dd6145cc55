//! The PMI bootstraps: [`PmiClient`], a native client of the PMI-1 "simple" wire
//! protocol, for ranks started by MPICH's Hydra `mpiexec` (or by Slurm's `srun
//! --mpi=pmi2`, whose plugin also serves PMI-1 clients), and [`Pmi2Client`], a
//! native client of PMI-2 for ranks started by `srun --mpi=pmi2` (see
//! [PMI-2](#pmi-2)).
//!
//! No PMI library is linked: the clients speak the protocols themselves over the
//! socket the launcher provides. [`from_env`](crate::from_env) picks PMI-2 when
//! `PMI_FD` and `PMI_JOBID` are set, PMI-1 when `PMI_FD` or `PMI_PORT` is set
//! otherwise, unless `GEX_BOOT` says something else (`pmi1`/`pmi`, `pmi2`); see
//! [`detect`](crate::detect). The rest of this page describes PMI-1 first.
//!
//! # Environment
//!
//! | variable | set by | meaning |
//! |---|---|---|
//! | [`PMI_FD`](crate::env::PMI_FD) | Hydra (default) | number of an inherited, connected stream socket to the launcher's PMI server |
//! | [`PMI_PORT`](crate::env::PMI_PORT) | Hydra with `-pmi-port`, other PMI-1 servers | `host:port` of the PMI server, used when `PMI_FD` is not set |
//! | [`PMI_ID`](crate::env::PMI_ID) | with `PMI_PORT` | identity sent in the `initack` handshake (falls back to `PMI_RANK`) |
//! | [`PMI_RANK`](crate::env::PMI_RANK) | with `PMI_FD` | this process's rank, `0..PMI_SIZE` |
//! | [`PMI_SIZE`](crate::env::PMI_SIZE) | with `PMI_FD` | number of ranks in the job |
//!
//! With `PMI_PORT`, rank and size come from the server's `initack` reply and the
//! `PMI_RANK`/`PMI_SIZE` variables are not needed. Nothing else is read; in
//! particular the fork launcher's `GEX_JOB_ID`, `GEX_LOCAL_RANK` and
//! `GEX_LOCAL_SIZE` are not set under `mpiexec`.
//!
//! # Protocol subset
//!
//! Every request is one line `cmd=NAME key=value …\n` and gets one reply line
//! (except `abort`, which gets none). Keys and values are printable ASCII without
//! spaces or `=`.
//!
//! | request | reply | used for |
//! |---|---|---|
//! | `cmd=initack pmiid=ID` | `cmd=initack`, then `cmd=set size=N`, `cmd=set rank=R`, `cmd=set debug=D` | first message, `PMI_PORT` only |
//! | `cmd=init pmi_version=1 pmi_subversion=1` | `cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0` | version check |
//! | `cmd=get_maxes` | `cmd=maxes kvsname_max=… keylen_max=… vallen_max=…` | size limits (Hydra: 256, 64, 1024) |
//! | `cmd=get_appnum` | `cmd=appnum appnum=A` | [`PmiClient::appnum`] |
//! | `cmd=get_my_kvsname` | `cmd=my_kvsname kvsname=K` | the job's key-value space |
//! | `cmd=put kvsname=K key=… value=…` | `cmd=put_result rc=0 …` | publishing a blob |
//! | `cmd=barrier_in` | `cmd=barrier_out` | barrier; also makes every earlier `put` visible to every rank |
//! | `cmd=get kvsname=K key=…` | `cmd=get_result rc=0 value=…` (`rc` ≠ 0: no such key) | reading a blob, `PMI_process_mapping` |
//! | `cmd=abort exitcode=C` | none: the launcher ends the job | [`abort`](Bootstrap::abort), [`request_exit`](Bootstrap::request_exit) |
//! | `cmd=finalize` | `cmd=finalize_ack` | [`finalize`](Bootstrap::finalize) |
//!
//! # How the collectives map onto the KVS
//!
//! Exchange, barrier and broadcast share one sequence counter `seq`, starting at 0
//! (every rank makes the same calls in the same order, so the counters agree).
//!
//! - A blob is encoded as unpadded base64url (`A-Z a-z 0-9 - _`) and split into
//!   chunks that fit both `vallen_max` and a 1024-byte request line (MPICH's
//!   `PMIU_MAXLINE`): about 680 bytes of blob per chunk under Hydra. Rank `r`
//!   publishes chunk `i` of collective `seq` under the key `gex.<seq>.<r>.<i>`;
//!   chunk 0's value starts with the chunk count and a dot (`3.QUJD…`).
//! - **exchange**: put this rank's chunks, barrier, get every other rank's chunks.
//! - **broadcast**: the root puts its chunks, barrier, the others get them.
//! - **barrier**: `barrier_in` / `barrier_out`.
//!
//! A rank that finds another rank's key missing after the barrier reports
//! [`BootError::Protocol`] (the ranks made different bootstrap calls).
//!
//! # Host ids
//!
//! From the `PMI_process_mapping` key (see [`parse_process_mapping`]) when the
//! launcher publishes it (Hydra and Slurm do). Otherwise the ranks exchange their
//! host names (`uname` node name) with one collective exchange during
//! [`PmiClient::from_env`], and ranks with equal names share a host id (ids are
//! numbered in order of first appearance by rank).
//!
//! # PMI-2
//!
//! [`Pmi2Client`] speaks PMI-2 over the same inherited `PMI_FD` socket: one PMI-1
//! style line `cmd=init pmi_version=2 pmi_subversion=0`, then length-prefixed
//! commands (a 6-byte `%-6d` length field, then `cmd=NAME;key=value;…;`):
//!
//! | request | reply | used for |
//! |---|---|---|
//! | `fullinit;pmirank=R;pmijobid=J;threaded=FALSE` | `fullinit-response;rc=0;rank=R;size=N;appnum=A;…` | rank and size; Slurm refuses a `fullinit` without `pmijobid` (from `PMI_JOBID`) |
//! | `job-getid` | `job-getid-response;jobid=J` | [`Pmi2Client::job_id`] |
//! | `info-getjobattr;key=PMI_process_mapping` | `…;found=TRUE;value=(vector,…)` | host ids (as for PMI-1) |
//! | `kvs-put;key=K;value=V` | `kvs-put-response;rc=0` | publishing a chunk (values ≤ 1024 bytes: 1012 base64 characters per chunk) |
//! | `kvs-fence` | `kvs-fence-response;rc=0` | barrier; makes earlier puts visible |
//! | `kvs-get;srcid=-1;key=K` | `kvs-get-response;found=TRUE;value=V` | reading a chunk |
//! | `abort;isworld=TRUE;msg=M` | none | abort and exit requests (Slurm kills the step) |
//! | `finalize` | `finalize-response;rc=0` | finalize |
//!
//! The collectives are the PMI-1 ones with `kvs-fence` as the barrier. A value never
//! carries `;` (Slurm 22.05 does not undo the protocol's `;;` escape).
//!
//! Which servers: Slurm's `--mpi=pmi2` plugin implements all of it. MPICH's Hydra
//! 4.0 answers PMI-2 too, but its `kvs-fence` is no barrier (its `kvs-get` waits
//! for the key instead, so exchanges still work) and it has no `abort` (the job
//! ends as a Hydra error, exit code 255). [`detect`](crate::detect) therefore picks
//! PMI-2 only when `PMI_JOBID` is set too, as Slurm does and Hydra does not;
//! `GEX_BOOT=pmi2` forces it anyway. When a detected PMI-2 server refuses version 2,
//! the client goes on with PMI-1 on the same connection.
//!
//! # Ending the job
//!
//! PMI-1 has no "end the job with this code" request other than `abort`, so:
//!
//! - [`abort`](Bootstrap::abort) prints `gex: rank R aborted the job (code C): msg`
//!   on stderr (Hydra does not print abort messages), sends `cmd=abort exitcode=C`
//!   and exits with `C` (1 if 0). Hydra kills every other rank and `mpiexec` exits
//!   with `C`.
//! - Hydra kills the job as soon as it handles `abort`, dropping output still in
//!   the ranks' stdout and stderr pipes. So before sending `abort` (for
//!   [`abort`](Bootstrap::abort) and [`request_exit`](Bootstrap::request_exit)) the
//!   client flushes stdout and stderr and, when they are pipes, waits until the
//!   launcher has read them (at most 1 s).
//! - [`request_exit`](Bootstrap::request_exit) (GASNet's `gasnet_exit`) sends
//!   `cmd=abort exitcode=C` without printing anything: that is the only way to ask
//!   the launcher to end the other ranks. `mpiexec` then exits with `C`, also when
//!   `C` is 0.
//! - [`finalize`](Bootstrap::finalize) sends `cmd=finalize` and waits for the
//!   acknowledgement. PMI-1 carries no exit code there: the job's exit code is
//!   decided by `mpiexec` from the processes' exit statuses (Hydra 4.0: their
//!   bitwise OR).
//! - A rank that dies is handled by the launcher, not by this client: Hydra kills
//!   the job when any rank exits with a non-zero code, is killed by a signal, or
//!   closes its PMI connection without finalizing (Hydra 4.0 then exits with 0 if
//!   that rank's own code was 0).
//!
//! The inherited `PMI_FD` socket is adopted by the crate's `inherit` module; this
//! module has no `unsafe` code.

mod b64;
#[macro_use]
mod kvs;
mod mapping;
#[cfg(test)]
mod mock;
mod pmi2;

pub(crate) use pmi2::negotiate;
mod wire;
mod wire2;

pub use mapping::parse_process_mapping;
pub use pmi2::Pmi2Client;

use kvs::{COUNT_PREFIX, Kvs, MIN_CHUNK};
#[cfg_attr(not(feature = "pmix"), allow(unused_imports))]
pub(crate) use kvs::{exchange_host_ids, host_ids_from_names as kvs_host_ids};

use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use gex_core::boot::{BootError, Bootstrap};

use crate::env;
use wire::{Attrs, Conn, MAX_REQUEST_LINE, Msg};

/// Upper bound on the length of the keys this client makes (`gex.<seq>.<rank>.<chunk>`
/// with a `u64` and two `u32` in decimal is at most 46 bytes).
const KEY_BOUND: usize = 48;

/// Longest [`drain_output`] waits for the launcher to read this rank's output.
const OUTPUT_DRAIN: Duration = Duration::from_secs(1);

/// Fixed text of a `put` request line: `cmd=put kvsname=`, ` key=`, ` value=`, `\n`.
const PUT_OVERHEAD: usize = 16 + 5 + 7 + 1;

/// The bootstrap of a rank started by a PMI-1 launcher (Hydra's `mpiexec`, Slurm's
/// `srun --mpi=pmi2`). See the [module documentation](self) for the protocol and
/// the exit semantics.
///
/// Every call blocks until the PMI server answers; if the server goes away the call
/// returns [`BootError::Lost`].
///
/// ```no_run
/// use gex_core::boot::Bootstrap;
/// // Inside a process started by `mpiexec -n 4 ...`:
/// let mut boot = gex_boot::pmi::PmiClient::from_env()?;
/// let all = boot.exchange(&boot.rank().to_le_bytes())?;
/// assert_eq!(all.len(), boot.size() as usize);
/// boot.finalize(0)?;
/// # Ok::<(), gex_core::boot::BootError>(())
/// ```
#[derive(Debug)]
pub struct PmiClient {
    conn: Conn,
    rank: u32,
    size: u32,
    hosts: Vec<u32>,
    kvs: String,
    appnum: i64,
    keylen_max: usize,
    /// Base64 characters per chunk.
    chunk: usize,
    seq: u64,
    finalized: bool,
}

/// How a connection learns its rank and size.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Ident {
    /// From the environment (`PMI_FD` mode).
    Known { rank: u32, size: u32 },
    /// From the server's `initack` reply to this id (`PMI_PORT` mode).
    Handshake { pmiid: u32 },
}

pub(crate) fn env_str(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

pub(crate) fn env_u32(name: &str, why: &str) -> Result<u32, BootError> {
    let v = std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| BootError::Environment(format!("{name} is not set ({why})")))?;
    v.to_str()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .ok_or_else(|| {
            BootError::Environment(format!("{name}={v:?} is not a non-negative integer"))
        })
}

/// The integer attribute `key` of reply `m` as a `T` (`u32`, `usize`): a protocol
/// error when it is missing, not an integer or out of `T`'s range.
fn to_int<T: TryFrom<i64>>(m: &Msg, key: &str) -> Result<T, BootError> {
    let v = m.int(key)?;
    T::try_from(v).map_err(|_| {
        BootError::Protocol(format!(
            "PMI reply cmd={}: {key}={v} is out of range",
            m.cmd
        ))
    })
}

/// Flushes stdout and stderr and, for each of them that is a pipe (as under Hydra,
/// whose proxy reads the other end), waits until the pipe is empty, at most
/// [`OUTPUT_DRAIN`] in all. Hydra kills the whole job as soon as it handles a PMI
/// `abort`, and drops what is still in the ranks' pipes then: without this, the
/// abort message printed just before would often be lost.
pub(crate) fn drain_output() {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    let deadline = Instant::now() + OUTPUT_DRAIN;
    let (out, err) = (std::io::stdout(), std::io::stderr());
    for fd in [out.as_fd(), err.as_fd()] {
        let is_pipe = rustix::fs::fstat(fd).is_ok_and(|st| {
            rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Fifo
        });
        // FIONREAD on either end of a pipe counts the bytes not yet read.
        while is_pipe
            && Instant::now() < deadline
            && rustix::io::ioctl_fionread(fd).is_ok_and(|n| n > 0)
        {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// A rank below a non-zero size, or an environment error.
pub(crate) fn check_rank(rank: u32, size: u32) -> Result<(), BootError> {
    if size == 0 || rank >= size {
        return Err(BootError::Environment(format!(
            "PMI rank {rank} is not below the job size {size}"
        )));
    }
    if size > MAX_JOB_SIZE {
        return Err(BootError::Environment(format!(
            "PMI job size {size} is above the {MAX_JOB_SIZE} ranks gex supports"
        )));
    }
    Ok(())
}

/// Largest job size this client accepts from the environment or a PMI server: a
/// corrupt size must not make it build host tables of billions of entries.
const MAX_JOB_SIZE: u32 = 1 << 24;

impl PmiClient {
    /// Connects to the PMI server described by the environment (see the [module
    /// documentation](self#environment)): the inherited socket `PMI_FD` with
    /// `PMI_RANK` and `PMI_SIZE`, or else `PMI_PORT` with `PMI_ID`. Then performs
    /// the PMI-1 handshake, learns the job's key-value space and limits, and works
    /// out the host ids, which may take one collective exchange (so every rank must
    /// call this).
    ///
    /// # Errors
    /// [`BootError::Environment`] if the variables are missing or malformed or the
    /// descriptor is not a socket; [`BootError::Lost`] if the server is gone;
    /// [`BootError::Protocol`] if it answers something unexpected.
    pub fn from_env() -> Result<Self, BootError> {
        if env_str(env::PMI_FD).is_some() {
            let fd = env_u32(env::PMI_FD, "")?;
            let why = "PMI_FD is set, so the launcher must set it too";
            let rank = env_u32(env::PMI_RANK, why)?;
            let size = env_u32(env::PMI_SIZE, why)?;
            let sock = Self::inherited_socket(fd)?;
            Self::connect(sock, Ident::Known { rank, size })
        } else if let Some(port) = env_str(env::PMI_PORT) {
            let pmiid = if env_str(env::PMI_ID).is_some() {
                env_u32(env::PMI_ID, "")?
            } else {
                env_u32(
                    env::PMI_RANK,
                    "PMI_PORT is set without PMI_ID: one of them is needed",
                )?
            };
            let stream = std::net::TcpStream::connect(port.as_str()).map_err(|e| {
                BootError::Environment(format!(
                    "{}={port:?}: cannot connect to the PMI server: {e}",
                    env::PMI_PORT
                ))
            })?;
            // Every request waits for its reply: do not let Nagle delay it.
            stream.set_nodelay(true)?;
            Self::connect(OwnedFd::from(stream), Ident::Handshake { pmiid })
        } else {
            Err(BootError::Environment(format!(
                "neither {} nor {} is set: this process was not started by a PMI launcher \
                 (mpiexec, srun --mpi=pmi2)",
                env::PMI_FD,
                env::PMI_PORT
            )))
        }
    }

    /// Adopts the PMI socket the launcher left open as descriptor `fd`.
    fn inherited_socket(fd: u32) -> Result<OwnedFd, BootError> {
        crate::inherit::socket(env::PMI_FD, fd, "mpiexec")
    }

    /// Runs the PMI-1 handshake over `sock` and works out the host ids.
    pub(crate) fn connect(sock: OwnedFd, ident: Ident) -> Result<Self, BootError> {
        let mut conn = Conn::new(sock);
        let (rank, size) = match ident {
            Ident::Known { rank, size } => (rank, size),
            Ident::Handshake { pmiid } => Self::initack(&mut conn, pmiid)?,
        };
        check_rank(rank, size)?;
        Self::init_v1(&mut conn)?;
        Self::after_init(conn, rank, size)
    }

    /// `cmd=init pmi_version=1 pmi_subversion=1`, which the server must accept.
    pub(crate) fn init_v1(conn: &mut Conn) -> Result<(), BootError> {
        let m = conn.call(
            "cmd=init pmi_version=1 pmi_subversion=1\n",
            "response_to_init",
        )?;
        if m.rc()? != 0 || m.get("pmi_version").is_some_and(|v| v != "1") {
            return Err(BootError::Protocol(format!(
                "the PMI server refused PMI version 1.1: {m:?}"
            )));
        }
        Ok(())
    }

    /// The rest of the PMI-1 start once the server accepted version 1.1: limits,
    /// key-value space, host ids.
    pub(crate) fn after_init(mut conn: Conn, rank: u32, size: u32) -> Result<Self, BootError> {
        check_rank(rank, size)?;
        let m = conn.call("cmd=get_maxes\n", "maxes")?;
        let kvsname_max = to_int::<usize>(&m, "kvsname_max")?;
        let keylen_max = to_int::<usize>(&m, "keylen_max")?;
        let vallen_max = to_int::<usize>(&m, "vallen_max")?;
        let m = conn.call("cmd=get_appnum\n", "appnum")?;
        let appnum = m.int("appnum")?;
        let m = conn.call("cmd=get_my_kvsname\n", "my_kvsname")?;
        let kvs = m.require("kvsname")?.to_owned();
        if !wire::is_token(&kvs) || kvs.len() >= kvsname_max.max(1) {
            return Err(BootError::Protocol(format!(
                "the PMI server gave an unusable key-value space name {kvs:?}"
            )));
        }
        // Values carry NUL-terminated C strings on the server: vallen_max - 1 bytes,
        // and the whole put line must fit MAX_REQUEST_LINE.
        let room = vallen_max
            .saturating_sub(1)
            .min(MAX_REQUEST_LINE.saturating_sub(PUT_OVERHEAD + kvs.len() + KEY_BOUND));
        let chunk = room.saturating_sub(COUNT_PREFIX);
        if chunk < MIN_CHUNK {
            return Err(BootError::Protocol(format!(
                "the PMI server allows values of only {vallen_max} bytes (key-value space \
                 {kvs:?}): too small to exchange blobs"
            )));
        }
        let mut me = PmiClient {
            conn,
            rank,
            size,
            hosts: Vec::new(),
            kvs,
            appnum,
            keylen_max,
            chunk,
            seq: 0,
            finalized: false,
        };
        let mapping = Kvs::get(&mut me, "PMI_process_mapping")?;
        me.hosts = hosts_of(&mut me, mapping.as_deref(), size)?;
        tracing::debug!(
            rank,
            size,
            kvs = me.kvs.as_str(),
            appnum,
            vallen_max,
            chunk = me.chunk,
            mapping = mapping.as_deref().unwrap_or("(none: host names exchanged)"),
            "PMI-1 bootstrap connected"
        );
        Ok(me)
    }

    /// The `PMI_PORT` handshake: `cmd=initack pmiid=ID`, answered by `cmd=initack`
    /// and three `cmd=set` lines (size, rank, debug).
    fn initack(conn: &mut Conn, pmiid: u32) -> Result<(u32, u32), BootError> {
        conn.call(&format!("cmd=initack pmiid={pmiid}\n"), "initack")?;
        let (mut rank, mut size) = (None, None);
        for _ in 0..3 {
            let m = conn.recv_msg()?;
            if m.cmd != "set" {
                return Err(BootError::Protocol(format!(
                    "expected cmd=set after cmd=initack, got {m:?}"
                )));
            }
            if m.get("size").is_some() {
                size = Some(to_int::<u32>(&m, "size")?);
            }
            if m.get("rank").is_some() {
                rank = Some(to_int::<u32>(&m, "rank")?);
            }
        }
        match (rank, size) {
            (Some(r), Some(s)) => Ok((r, s)),
            _ => Err(BootError::Protocol(
                "the PMI server's initack did not give both rank and size".into(),
            )),
        }
    }

    /// The application number of this process (`mpiexec` runs several programs as
    /// one job with `prog1 : prog2`; they are numbered from 0).
    pub fn appnum(&self) -> i64 {
        self.appnum
    }

    /// The name of the job's PMI key-value space.
    pub fn kvs_name(&self) -> &str {
        &self.kvs
    }

    collective_seq!(finalized);

    /// Sends `cmd=abort exitcode=code` (the server sends no reply; PMI-1 carries no
    /// reason), after letting the launcher read this rank's pending output
    /// ([`drain_output`]).
    fn send_abort(&mut self, code: i32, _why: &str) -> Result<(), BootError> {
        drain_output();
        self.conn.send_line(&format!("cmd=abort exitcode={code}\n"))
    }

    /// Sends `cmd=finalize` and waits for its acknowledgement.
    fn send_finalize(&mut self) -> Result<(), BootError> {
        self.conn.call("cmd=finalize\n", "finalize_ack")?;
        Ok(())
    }
}

impl Kvs for PmiClient {
    kvs_fields!();
    fn key(&self, seq: u64, rank: u32, chunk: usize) -> Result<String, BootError> {
        let k = format!("gex.{seq}.{rank}.{chunk}");
        if k.len() >= self.keylen_max {
            return Err(BootError::Protocol(format!(
                "PMI key {k:?} is longer than the server allows ({} bytes)",
                self.keylen_max
            )));
        }
        Ok(k)
    }

    fn put(&mut self, key: &str, value: &str) -> Result<(), BootError> {
        debug_assert!(wire::is_token(key) && wire::is_token(value));
        let line = format!("cmd=put kvsname={} key={key} value={value}\n", self.kvs);
        debug_assert!(line.len() <= MAX_REQUEST_LINE);
        let m = self.conn.call(&line, "put_result")?;
        if m.rc()? != 0 {
            return Err(BootError::Protocol(format!(
                "PMI put of {key:?} failed: {}",
                m.get("msg").unwrap_or("(no message)")
            )));
        }
        Ok(())
    }

    fn get(&mut self, key: &str) -> Result<Option<String>, BootError> {
        let line = format!("cmd=get kvsname={} key={key}\n", self.kvs);
        let m = self.conn.call(&line, "get_result")?;
        if m.rc()? != 0 {
            return Ok(None);
        }
        Ok(Some(m.require("value")?.to_owned()))
    }

    fn fence(&mut self) -> Result<(), BootError> {
        self.conn.call("cmd=barrier_in\n", "barrier_out")?;
        Ok(())
    }
}

/// [`wire::Msg::parse`] for [`crate::fuzz_api`].
#[cfg(feature = "fuzz")]
pub(crate) fn fuzz_parse(line: &str) -> Result<(String, Vec<(String, String)>), String> {
    Msg::parse(line)
        .map(|m| (m.cmd, m.attrs))
        .map_err(|e| e.to_string())
}

/// [`b64::encode`] for [`crate::fuzz_api`].
#[cfg(feature = "fuzz")]
pub(crate) fn fuzz_b64_encode(data: &[u8]) -> String {
    b64::encode(data)
}

/// [`b64::decode`] for [`crate::fuzz_api`].
#[cfg(feature = "fuzz")]
pub(crate) fn fuzz_b64_decode(s: &str) -> Result<Vec<u8>, String> {
    b64::decode(s).map_err(|e| e.to_string())
}

/// [`PmiClient::connect`] for [`crate::fuzz_api`].
#[cfg(feature = "fuzz")]
pub(crate) fn fuzz_connect(
    sock: OwnedFd,
    rank: u32,
    size: u32,
    handshake: bool,
) -> Result<PmiClient, BootError> {
    let ident = if handshake {
        Ident::Handshake { pmiid: rank }
    } else {
        Ident::Known { rank, size }
    };
    PmiClient::connect(sock, ident)
}

/// The host id of every rank of a PMI client `me`: from the launcher's
/// `PMI_process_mapping` value when it has one that describes the job's `size`
/// ranks, else by exchanging host names (then the job's first collective).
fn hosts_of(
    me: &mut impl Bootstrap,
    mapping: Option<&str>,
    size: u32,
) -> Result<Vec<u32>, BootError> {
    match mapping
        .map(|v| parse_process_mapping(v, size))
        .transpose()?
    {
        Some(Some(ids)) => Ok(ids),
        _ => exchange_host_ids(me),
    }
}

impl Bootstrap for PmiClient {
    bootstrap_identity!("pmi");
    kvs_collectives!();
    // Hydra does not print abort messages: `abort` says it here, once.
    abort_by_request!("PMI", finalize);
}

#[cfg(test)]
mod tests {
    use super::kvs::host_ids_from_names;
    use super::mock::{self, Served, Shared, blob};
    use super::*;
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::net::UnixStream;
    use std::sync::{Arc, Mutex};

    /// How the fake PMI server behaves.
    #[derive(Clone)]
    struct Server {
        size: u32,
        vallen_max: usize,
        mapping: Option<String>,
        handshake: bool,
    }

    impl Server {
        /// A server for `size` clients with the process mapping `mapping`, values of
        /// up to 1024 bytes and no port handshake.
        fn new(size: u32, mapping: Option<&str>) -> Self {
            Server {
                size,
                vallen_max: 1024,
                mapping: mapping.map(Into::into),
                handshake: false,
            }
        }
    }

    /// What the fake server saw.
    #[derive(Default)]
    struct Seen {
        requests: Vec<String>,
        aborts: Vec<i32>,
    }

    /// A PMI-1 server for `size` clients in threads of this process: one thread per
    /// connection, a shared KVS and a barrier. It checks the limits a real server
    /// imposes (line length, value length, printable tokens).
    fn serve(cfg: Server) -> Served<Seen> {
        mock::serve(
            cfg.size,
            move |rank, b, Shared::<Seen> { kvs, barrier, seen }| {
                let mut out = b.try_clone().unwrap();
                let mut reply = |s: &str| out.write_all(s.as_bytes()).unwrap();
                for line in BufReader::new(b).lines() {
                    let line = line.unwrap();
                    assert!(line.len() < MAX_REQUEST_LINE, "request too long: {line}");
                    seen.lock().unwrap().requests.push(line.clone());
                    let m = Msg::parse(&line).unwrap();
                    for (k, v) in &m.attrs {
                        assert!(wire::is_token(k) && wire::is_token(v), "{line}");
                    }
                    match m.cmd.as_str() {
                        "initack" => {
                            assert!(cfg.handshake);
                            assert_eq!(m.get("pmiid"), Some(rank.to_string().as_str()));
                            reply(&format!(
                                "cmd=initack\ncmd=set size={}\ncmd=set rank={rank}\ncmd=set debug=0\n",
                                cfg.size
                            ));
                        }
                        "init" => {
                            reply("cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n")
                        }
                        "get_maxes" => reply(&format!(
                            "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max={}\n",
                            cfg.vallen_max
                        )),
                        "get_appnum" => reply("cmd=appnum appnum=0\n"),
                        "get_my_kvsname" => reply("cmd=my_kvsname kvsname=kvs_test_0\n"),
                        "put" => {
                            let v = m.get("value").unwrap();
                            assert!(v.len() < cfg.vallen_max, "value too long: {line}");
                            kvs.lock()
                                .unwrap()
                                .insert(m.get("key").unwrap().into(), v.into());
                            reply("cmd=put_result rc=0 msg=success\n");
                        }
                        "get" => {
                            assert_eq!(m.get("kvsname"), Some("kvs_test_0"));
                            let key = m.get("key").unwrap();
                            let v = if key == "PMI_process_mapping" {
                                cfg.mapping.clone()
                            } else {
                                kvs.lock().unwrap().get(key).cloned()
                            };
                            match v {
                                Some(v) => {
                                    reply(&format!("cmd=get_result rc=0 msg=success value={v}\n"))
                                }
                                None => reply(&format!(
                                    "cmd=get_result rc=-1 msg=key_{key}_not_found value=unknown\n"
                                )),
                            }
                        }
                        "barrier_in" => {
                            barrier.wait();
                            reply("cmd=barrier_out\n");
                        }
                        "abort" => {
                            seen.lock()
                                .unwrap()
                                .aborts
                                .push(m.int("exitcode").unwrap() as i32);
                            return;
                        }
                        "finalize" => {
                            reply("cmd=finalize_ack\n");
                            return;
                        }
                        other => panic!("unexpected command {other}"),
                    }
                }
            },
        )
    }

    /// Runs `body` on every client of a fake server, each in its own thread.
    fn job<T: Send + 'static>(
        cfg: Server,
        body: impl Fn(PmiClient) -> T + Send + Sync + 'static,
    ) -> (Vec<T>, Arc<Mutex<Seen>>) {
        let (handshake, size) = (cfg.handshake, cfg.size);
        let connect = move |r, sock| {
            let ident = if handshake {
                Ident::Handshake { pmiid: r }
            } else {
                Ident::Known { rank: r, size }
            };
            PmiClient::connect(sock, ident).unwrap()
        };
        mock::job(serve(cfg), connect, body)
    }

    #[test]
    fn collectives_with_small_values_need_many_chunks() {
        let cfg = Server {
            vallen_max: 40,
            ..Server::new(3, Some("(vector,(0,1,3))"))
        };
        let (chunks, _) = job(cfg, |mut c| {
            assert_eq!(c.name(), "pmi");
            assert_eq!(c.host_ids(), &[0, 0, 0]);
            assert_eq!((c.kvs_name(), c.appnum()), ("kvs_test_0", 0));
            let chunk = c.chunk;
            let me = c.rank();
            for len in [0usize, 1, 2, 3, 27, 28, 29, 500, 3000] {
                let lens = |r: u32| len + r as usize;
                let all = c.exchange(&blob(me, lens(me))).unwrap();
                for (r, b) in all.iter().enumerate() {
                    assert_eq!(b, &blob(r as u32, lens(r as u32)), "len {len} rank {r}");
                }
            }
            c.barrier().unwrap();
            let got = c.broadcast(1, &blob(me, 777)).unwrap();
            assert_eq!(got, blob(1, 777));
            assert_eq!(c.broadcast(2, b"").unwrap(), b"");
            c.finalize(0).unwrap();
            assert!(matches!(c.barrier(), Err(BootError::Protocol(_))));
            c.finalize(0).unwrap();
            chunk
        });
        // 40-byte values leave room for 39 - 11 base64 characters per chunk.
        assert_eq!(chunks, [28, 28, 28]);
    }

    #[test]
    fn put_lines_fit_the_line_limit() {
        let cfg = Server {
            vallen_max: 1 << 20,
            ..Server::new(2, Some("(vector,(0,2,1))"))
        };
        let (_, seen) = job(cfg, |mut c| {
            assert_eq!(c.host_ids(), &[0, 1]);
            let all = c.exchange(&blob(c.rank(), 10_000)).unwrap();
            assert_eq!(all[1 - c.rank() as usize], blob(1 - c.rank(), 10_000));
            c.finalize(0).unwrap();
        });
        // The server asserted every line fits; check chunking actually happened.
        let puts = seen
            .lock()
            .unwrap()
            .requests
            .iter()
            .filter(|l| l.starts_with("cmd=put "))
            .count();
        assert!(puts > 2 * 10, "{puts} puts");
    }

    #[test]
    fn port_handshake_gives_rank_and_size() {
        let cfg = Server {
            handshake: true,
            ..Server::new(2, Some("(vector,(0,1,2))"))
        };
        let (ranks, seen) = job(cfg, |mut c| {
            let r = (c.rank(), c.size());
            c.barrier().unwrap();
            c.finalize(0).unwrap();
            r
        });
        assert_eq!(ranks, [(0, 2), (1, 2)]);
        let seen = seen.lock().unwrap();
        assert!(seen.requests.iter().any(|l| l == "cmd=initack pmiid=1"));
    }

    #[test]
    fn without_a_mapping_host_names_are_exchanged() {
        let cfg = Server::new(3, None);
        let (hosts, seen) = job(cfg, |c| {
            // The exchange of host names used sequence number 0.
            assert_eq!(c.seq, 1);
            mock::finalized_host_ids(c)
        });
        assert_eq!(hosts, vec![vec![0, 0, 0]; 3]);
        assert!(
            seen.lock()
                .unwrap()
                .requests
                .iter()
                .any(|l| l.starts_with("cmd=put kvsname=kvs_test_0 key=gex.0.2.0 value=1."))
        );
    }

    #[test]
    fn host_ids_number_names_by_first_appearance() {
        let n = |s: &[&str]| s.iter().map(|x| x.as_bytes().to_vec()).collect::<Vec<_>>();
        assert_eq!(
            host_ids_from_names(&n(&["b", "a", "b", "c", "a"])),
            [0, 1, 0, 2, 1]
        );
        assert_eq!(host_ids_from_names(&n(&["x"])), [0]);
        assert_eq!(host_ids_from_names(&[]), Vec::<u32>::new());
    }

    #[test]
    fn request_exit_sends_abort_with_the_code() {
        let cfg = Server::new(1, Some("(vector,(0,1,1))"));
        let (_, seen) = job(cfg, |mut c| c.request_exit(5));
        assert_eq!(seen.lock().unwrap().aborts, [5]);
    }

    #[test]
    fn mismatched_collectives_are_protocol_errors() {
        let cfg = Server::new(2, Some("(vector,(0,1,1))"));
        let (res, _) = job(cfg, |mut c| {
            let r = if c.rank() == 0 {
                c.barrier().map(|_| Vec::new())
            } else {
                c.exchange(b"x")
            };
            c.finalize(0).unwrap();
            r
        });
        assert!(res[0].is_ok());
        assert!(
            matches!(&res[1], Err(BootError::Protocol(m)) if m.contains("rank 0")),
            "{res:?}"
        );
    }

    /// A scripted server: answers each request line with the next canned reply.
    fn scripted(replies: &'static [&'static str]) -> OwnedFd {
        let (a, b) = UnixStream::pair().unwrap();
        std::thread::spawn(move || {
            let mut out = b.try_clone().unwrap();
            let mut lines = BufReader::new(b).lines();
            for r in replies {
                if lines.next().is_none() {
                    return;
                }
                out.write_all(r.as_bytes()).unwrap();
            }
            // Then hang up.
        });
        OwnedFd::from(a)
    }

    /// Connecting rank 0 of a job of one to a server scripted with `replies` fails with
    /// a protocol error.
    #[track_caller]
    fn assert_protocol_error(replies: &'static [&'static str]) {
        let e =
            PmiClient::connect(scripted(replies), Ident::Known { rank: 0, size: 1 }).unwrap_err();
        assert!(matches!(e, BootError::Protocol(_)), "{e:?}");
    }

    const HELLO: [&str; 4] = [
        "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n",
        "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n",
        "cmd=appnum appnum=3\n",
        "cmd=my_kvsname kvsname=kvs_1\n",
    ];

    #[test]
    fn server_hanging_up_is_lost() {
        static R: [&str; 5] = [
            HELLO[0],
            HELLO[1],
            HELLO[2],
            HELLO[3],
            "cmd=get_result rc=0 msg=success value=(vector,(0,1,1))\n",
        ];
        let mut c = PmiClient::connect(scripted(&R), Ident::Known { rank: 0, size: 2 }).unwrap();
        assert_eq!(c.appnum(), 3);
        assert_eq!(c.host_ids(), &[0, 0]);
        let e = c.barrier().unwrap_err();
        assert!(matches!(e, BootError::Lost(_)), "{e:?}");
    }

    #[test]
    fn version_refusal_is_a_protocol_error() {
        static R: [&str; 1] = ["cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=-1\n"];
        assert_protocol_error(&R);
    }

    #[test]
    fn wrong_reply_is_a_protocol_error() {
        static R: [&str; 1] = ["cmd=barrier_out\n"];
        assert_protocol_error(&R);
    }

    #[test]
    fn tiny_values_are_refused() {
        static R: [&str; 4] = [
            HELLO[0],
            "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=20\n",
            HELLO[2],
            HELLO[3],
        ];
        assert_protocol_error(&R);
    }

    #[test]
    fn bad_mapping_is_a_protocol_error() {
        static R: [&str; 5] = [
            HELLO[0],
            HELLO[1],
            HELLO[2],
            HELLO[3],
            "cmd=get_result rc=0 msg=success value=(vector,(0,1))\n",
        ];
        assert_protocol_error(&R);
    }

    /// Regression (found while writing the `pmi-client` fuzz target): a size of
    /// billions from the server's handshake made the client build a host table of
    /// that many entries (gigabytes, for minutes) before anything failed.
    #[test]
    fn huge_job_size_is_refused() {
        static R: [&str; 1] =
            ["cmd=initack\ncmd=set size=4000000000\ncmd=set rank=0\ncmd=set debug=0\n"];
        let e = PmiClient::connect(scripted(&R), Ident::Handshake { pmiid: 0 }).unwrap_err();
        assert!(
            matches!(&e, BootError::Environment(m) if m.contains("4000000000")),
            "{e:?}"
        );
    }

    /// Regression (found while writing the `pmi-client` fuzz target): a blob that is
    /// not base64 was reported without naming the rank that published it.
    #[test]
    fn corrupt_blob_names_its_rank() {
        static R: [&str; 9] = [
            HELLO[0],
            HELLO[1],
            HELLO[2],
            HELLO[3],
            "cmd=get_result rc=0 msg=success value=(vector,(0,1,1))\n",
            "cmd=put_result rc=0\n",
            "cmd=barrier_out\n",
            "cmd=get_result rc=0 value=1.Zh\n",
            "cmd=finalize_ack\n",
        ];
        let mut c = PmiClient::connect(scripted(&R), Ident::Known { rank: 0, size: 2 }).unwrap();
        let e = c.exchange(b"x").unwrap_err();
        assert!(
            matches!(&e, BootError::Protocol(m) if m.contains("rank 1's blob")),
            "{e:?}"
        );
    }

    #[test]
    fn bad_rank_is_refused_before_talking() {
        let (a, _b) = UnixStream::pair().unwrap();
        let e =
            PmiClient::connect(OwnedFd::from(a), Ident::Known { rank: 2, size: 2 }).unwrap_err();
        assert!(matches!(e, BootError::Environment(_)), "{e:?}");
    }
}
