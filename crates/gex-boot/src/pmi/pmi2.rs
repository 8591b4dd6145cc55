//! The PMI-2 client ([`Pmi2Client`]): Slurm's `srun --mpi=pmi2`, and MPICH's Hydra
//! when a client asks it for version 2.
//!
//! # Protocol subset
//!
//! The client opens with one PMI-1 style line, `cmd=init pmi_version=2
//! pmi_subversion=0`, answered by `cmd=response_to_init … rc=0` when the server
//! speaks PMI-2. Everything after that is PMI-2 framing (see `wire2`): a 6-byte length
//! field and `cmd=NAME;key=value;…;`.
//!
//! | request | reply | used for |
//! |---|---|---|
//! | `fullinit;pmirank=R;pmijobid=J;threaded=FALSE` | `fullinit-response;rc=0;rank=R;size=N;appnum=A;…` | rank and size (Slurm needs `pmijobid`, from `PMI_JOBID`) |
//! | `job-getid` | `job-getid-response;jobid=J` | [`Pmi2Client::job_id`] |
//! | `info-getjobattr;key=PMI_process_mapping` | `…;found=TRUE;value=(vector,…)` | host ids |
//! | `kvs-put;key=K;value=V` | `kvs-put-response;rc=0` | publishing a chunk |
//! | `kvs-fence` | `kvs-fence-response;rc=0` | barrier; makes every earlier put visible |
//! | `kvs-get;srcid=-1;key=K` | `kvs-get-response;found=TRUE;value=V` | reading a chunk |
//! | `abort;isworld=TRUE;msg=M` | none | [`abort`](Bootstrap::abort), [`request_exit`](Bootstrap::request_exit) |
//! | `finalize` | `finalize-response;rc=0` | [`finalize`](Bootstrap::finalize) |
//!
//! Values are at most 1024 bytes (`PMI2_MAX_VALLEN`), so a chunk carries 1012 base64
//! characters after room for the chunk count; keys are the PMI-1 client's
//! (`gex.<seq>.<rank>.<chunk>`). The collectives are the PMI-1 client's, with
//! `kvs-fence` as the barrier.

// The parent module allows `unsafe` for one borrow of an inherited descriptor;
// nothing here needs it.
#![deny(unsafe_code)]

use std::os::fd::OwnedFd;

use gex_core::boot::{BootError, Bootstrap};

use super::kvs::{COUNT_PREFIX, Kvs};
use super::wire::{Attrs, Conn};
use super::wire2;
use super::{PmiClient, check_rank, drain_output, env_str, env_u32, hosts_of};
use crate::env;

/// `PMI2_MAX_VALLEN`: the longest value the reference client and servers accept.
const MAX_VALUE: usize = 1024;

/// Upper bound on the length of the keys this client makes (as for PMI-1).
const MAX_KEY: usize = 64;

/// The bootstrap of a rank started by a PMI-2 launcher (Slurm's `srun --mpi=pmi2`;
/// Hydra's `mpiexec` with `GEX_BOOT=pmi2`, with the limits said in
/// [`pmi`](super#pmi-2)). See [`pmi`](super#pmi-2) for the protocol and
/// [`pmi`](super#ending-the-job) for the exit semantics.
///
/// ```no_run
/// use gex_core::boot::Bootstrap;
/// // Inside a process started by `srun --mpi=pmi2 -n 4 ...`:
/// let mut boot = gex_boot::pmi::Pmi2Client::from_env()?;
/// assert_eq!(boot.name(), "pmi2");
/// let all = boot.exchange(&boot.rank().to_le_bytes())?;
/// assert_eq!(all.len(), boot.size() as usize);
/// boot.finalize(0)?;
/// # Ok::<(), gex_core::boot::BootError>(())
/// ```
#[derive(Debug)]
pub struct Pmi2Client {
    conn: Conn,
    rank: u32,
    size: u32,
    hosts: Vec<u32>,
    jobid: String,
    appnum: i64,
    /// Base64 characters per chunk.
    chunk: usize,
    seq: u64,
    finalized: bool,
}

/// What a PMI server said to `cmd=init pmi_version=2`.
#[derive(Debug)]
pub(crate) enum Hello {
    /// It speaks PMI-2: go on with `fullinit`.
    Accepted(Conn),
    /// It refused version 2 (and the connection is still open for PMI-1).
    Refused(Conn, String),
}

/// `PMI_RANK` and `PMI_JOBID` of this process, and its inherited `PMI_FD` socket.
fn env_socket() -> Result<(OwnedFd, u32, Option<String>), BootError> {
    let Some(_) = env_str(env::PMI_FD) else {
        return Err(BootError::Environment(format!(
            "{} is not set: PMI-2 needs the socket a PMI-2 launcher (srun --mpi=pmi2, \
             mpiexec) passes ({} alone is PMI-1's)",
            env::PMI_FD,
            env::PMI_PORT
        )));
    };
    let fd = env_u32(env::PMI_FD, "")?;
    let rank = env_u32(
        env::PMI_RANK,
        "PMI_FD is set, so the launcher must set it too",
    )?;
    let sock = crate::inherit::socket(env::PMI_FD, fd, "a PMI launcher (srun, mpiexec)")?;
    Ok((sock, rank, env_str(env::PMI_JOBID)))
}

/// Sends `cmd=init pmi_version=2 pmi_subversion=0` and reads the answer.
pub(crate) fn hello(mut conn: Conn) -> Result<Hello, BootError> {
    let m = conn.call(
        "cmd=init pmi_version=2 pmi_subversion=0\n",
        "response_to_init",
    )?;
    if m.rc()? == 0 && m.get("pmi_version").is_none_or(|v| v == "2") {
        Ok(Hello::Accepted(conn))
    } else {
        Ok(Hello::Refused(conn, format!("{m:?}")))
    }
}

/// The PMI bootstrap for a process started with `PMI_FD`: PMI-2 if the server
/// accepts version 2, else PMI-1 over the same connection.
pub(crate) fn negotiate() -> Result<Box<dyn Bootstrap>, BootError> {
    let (sock, rank, jobid) = env_socket()?;
    let size = env_u32(
        env::PMI_SIZE,
        "PMI_FD is set, so the launcher must set it too",
    )?;
    check_rank(rank, size)?;
    match hello(Conn::new(sock))? {
        Hello::Accepted(conn) => Ok(Box::new(Pmi2Client::after_init(conn, rank, jobid)?)),
        Hello::Refused(mut conn, why) => {
            tracing::debug!(reply = why.as_str(), "PMI-2 refused: falling back to PMI-1");
            PmiClient::init_v1(&mut conn)?;
            Ok(Box::new(PmiClient::after_init(conn, rank, size)?))
        }
    }
}

impl Pmi2Client {
    /// Connects to the PMI-2 server through the inherited socket `PMI_FD` (with
    /// `PMI_RANK`, and `PMI_JOBID` when the launcher sets it, as Slurm does), and
    /// works out the host ids, which may take one collective exchange (so every rank
    /// must call this).
    ///
    /// # Errors
    /// [`BootError::Environment`] if the variables are missing or malformed or the
    /// descriptor is not a socket; [`BootError::Protocol`] if the server refuses
    /// PMI-2 or answers something unexpected; [`BootError::Lost`] if it is gone.
    pub fn from_env() -> Result<Self, BootError> {
        let (sock, rank, jobid) = env_socket()?;
        match hello(Conn::new(sock))? {
            Hello::Accepted(conn) => Self::after_init(conn, rank, jobid),
            Hello::Refused(_, why) => Err(BootError::Protocol(format!(
                "the PMI server refused PMI version 2.0 ({why}); use GEX_BOOT=pmi1"
            ))),
        }
    }

    /// The rest of the start once the server accepted version 2: `fullinit`, the job
    /// id, the host ids.
    pub(crate) fn after_init(
        mut conn: Conn,
        pmirank: u32,
        pmijobid: Option<String>,
    ) -> Result<Self, BootError> {
        let r = pmirank.to_string();
        let mut attrs = vec![("pmirank", r.as_str())];
        if let Some(j) = &pmijobid {
            attrs.push(("pmijobid", j.as_str()));
        }
        attrs.push(("threaded", "FALSE"));
        let m = wire2::call(&mut conn, "fullinit", &attrs, "fullinit-response")?;
        let int_u32 = |key: &str| -> Result<u32, BootError> {
            let v = m.int(key)?;
            u32::try_from(v).map_err(|_| {
                BootError::Protocol(format!(
                    "PMI-2 fullinit-response: {key}={v} is out of range"
                ))
            })
        };
        let (rank, size) = (int_u32("rank")?, int_u32("size")?);
        check_rank(rank, size)?;
        if rank != pmirank {
            return Err(BootError::Protocol(format!(
                "PMI-2 server says this is rank {rank}, PMI_RANK says {pmirank}"
            )));
        }
        let appnum = m.get("appnum").map_or(Ok(0), |_| m.int("appnum"))?;
        let m = wire2::call(&mut conn, "job-getid", &[], "job-getid-response")?;
        let jobid = m.require("jobid")?.to_owned();
        let m = wire2::call(
            &mut conn,
            "info-getjobattr",
            &[("key", "PMI_process_mapping")],
            "info-getjobattr-response",
        )?;
        let mapping = if m.flag("found")? {
            Some(m.require("value")?.to_owned())
        } else {
            None
        };
        let mut me = Pmi2Client {
            conn,
            rank,
            size,
            hosts: Vec::new(),
            jobid,
            appnum,
            chunk: MAX_VALUE - 1 - COUNT_PREFIX,
            seq: 0,
            finalized: false,
        };
        me.hosts = hosts_of(&mut me, mapping.as_deref(), size)?;
        tracing::debug!(
            rank,
            size,
            jobid = me.jobid.as_str(),
            appnum,
            mapping = mapping.as_deref().unwrap_or("(none: host names exchanged)"),
            "PMI-2 bootstrap connected"
        );
        Ok(me)
    }

    /// The job id the PMI-2 server gave (`job-getid`; Slurm: `<job>.<step>`).
    pub fn job_id(&self) -> &str {
        &self.jobid
    }

    /// The application number of this process (0 for the first program of an
    /// MPMD job; Slurm 22.05 always answers -1).
    pub fn appnum(&self) -> i64 {
        self.appnum
    }

    collective_seq!(finalized);

    /// Sends `abort;isworld=TRUE;msg=…` (no reply comes), after letting the launcher
    /// read this rank's pending output. `;` in the message becomes `,` (Slurm does
    /// not undo the protocol's `;;` escape).
    fn send_abort(&mut self, _code: i32, msg: &str) -> Result<(), BootError> {
        drain_output();
        let msg: String = msg
            .chars()
            .map(|c| if c == ';' || c.is_control() { ',' } else { c })
            .take(MAX_VALUE - 1)
            .collect();
        wire2::send(
            &mut self.conn,
            "abort",
            &[("isworld", "TRUE"), ("msg", &msg)],
        )
    }

    /// Sends `finalize` and waits for its response.
    fn send_finalize(&mut self) -> Result<(), BootError> {
        wire2::call(&mut self.conn, "finalize", &[], "finalize-response")?;
        Ok(())
    }
}

impl Kvs for Pmi2Client {
    kvs_fields!();
    fn key(&self, seq: u64, rank: u32, chunk: usize) -> Result<String, BootError> {
        let k = format!("gex.{seq}.{rank}.{chunk}");
        debug_assert!(k.len() < MAX_KEY);
        Ok(k)
    }
    fn put(&mut self, key: &str, value: &str) -> Result<(), BootError> {
        debug_assert!(value.len() < MAX_VALUE && !value.contains(';'));
        wire2::call(
            &mut self.conn,
            "kvs-put",
            &[("key", key), ("value", value)],
            "kvs-put-response",
        )?;
        Ok(())
    }
    fn get(&mut self, key: &str) -> Result<Option<String>, BootError> {
        let m = wire2::call(
            &mut self.conn,
            "kvs-get",
            &[("srcid", "-1"), ("key", key)],
            "kvs-get-response",
        )?;
        if m.flag("found")? {
            Ok(Some(m.require("value")?.to_owned()))
        } else {
            Ok(None)
        }
    }
    fn fence(&mut self) -> Result<(), BootError> {
        wire2::call(&mut self.conn, "kvs-fence", &[], "kvs-fence-response")?;
        Ok(())
    }
}

impl Bootstrap for Pmi2Client {
    bootstrap_identity!("pmi2");
    kvs_collectives!();
    // Neither Slurm nor Hydra prints the abort message: `abort` says it here, once.
    abort_by_request!("PMI-2", finalize);
}

#[cfg(test)]
mod tests {
    use super::super::mock::{self, Served, Shared, blob};
    use super::*;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::os::unix::net::UnixStream;
    use std::sync::{Arc, Mutex};

    /// How the fake server behaves.
    #[derive(Clone)]
    struct Server {
        size: u32,
        mapping: Option<&'static str>,
        /// Refuse `pmi_version=2` (then serve PMI-1 `init` only, and hang up).
        pmi1_only: bool,
        /// Require `pmijobid` in `fullinit`, as Slurm does.
        want_jobid: bool,
    }

    impl Server {
        /// A PMI-2 server for `size` clients with the process mapping `mapping`, not
        /// requiring `pmijobid`.
        fn new(size: u32, mapping: Option<&'static str>) -> Self {
            Server {
                size,
                mapping,
                pmi1_only: false,
                want_jobid: false,
            }
        }
    }

    #[derive(Default)]
    struct Seen {
        requests: Vec<String>,
        aborts: Vec<String>,
    }

    fn read_cmd(s: &mut UnixStream) -> Option<wire2::Cmd> {
        let mut len = [0u8; 6];
        s.read_exact(&mut len).ok()?;
        let n: usize = std::str::from_utf8(&len).unwrap().trim().parse().unwrap();
        let mut body = vec![0u8; n];
        s.read_exact(&mut body).unwrap();
        let body = String::from_utf8(body).unwrap();
        Some(wire2::Cmd::parse(&body).unwrap())
    }

    fn reply(s: &mut UnixStream, body: &str) {
        s.write_all(format!("{:<6}{body}", body.len()).as_bytes())
            .unwrap();
    }

    /// A PMI-2 server for `size` clients in threads of this process, checking what
    /// real servers check (value length, `;` in values, `pmijobid`).
    fn serve(cfg: Server) -> Served<Seen> {
        mock::serve(
            cfg.size,
            move |rank, b, Shared::<Seen> { kvs, barrier, seen }| {
                let mut s = b;
                let mut line = String::new();
                BufReader::new(s.try_clone().unwrap())
                    .read_line(&mut line)
                    .unwrap();
                if line.is_empty() {
                    return; // the test dropped this client unused
                }
                assert_eq!(line, "cmd=init pmi_version=2 pmi_subversion=0\n");
                if cfg.pmi1_only {
                    s.write_all(b"cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=-1\n")
                        .unwrap();
                    // The client falls back to PMI-1 on the same connection.
                    let mut line = String::new();
                    BufReader::new(s.try_clone().unwrap())
                        .read_line(&mut line)
                        .unwrap();
                    seen.lock().unwrap().requests.push(line.trim().to_owned());
                    return;
                }
                s.write_all(b"cmd=response_to_init rc=0 pmi_version=2 pmi_subversion=0\n")
                    .unwrap();
                while let Some(c) = read_cmd(&mut s) {
                    seen.lock().unwrap().requests.push(format!("{c:?}"));
                    match c.cmd.as_str() {
                        "fullinit" => {
                            assert_eq!(c.get("threaded"), Some("FALSE"));
                            let rc = if cfg.want_jobid && c.get("pmijobid").is_none() {
                                3
                            } else {
                                0
                            };
                            reply(
                                &mut s,
                                &format!(
                                    "cmd=fullinit-response;rc={rc};pmi-version=2;pmi-subversion=0;\
                                     rank={rank};size={};appnum=-1;debugged=FALSE;pmiverbose=FALSE;",
                                    cfg.size
                                ),
                            );
                        }
                        "job-getid" => reply(&mut s, "cmd=job-getid-response;rc=0;jobid=7.0;"),
                        "info-getjobattr" => {
                            assert_eq!(c.get("key"), Some("PMI_process_mapping"));
                            match cfg.mapping {
                                Some(m) => reply(
                                    &mut s,
                                    &format!(
                                        "cmd=info-getjobattr-response;found=TRUE;value={m};rc=0;"
                                    ),
                                ),
                                None => {
                                    reply(&mut s, "cmd=info-getjobattr-response;found=FALSE;rc=0;")
                                }
                            }
                        }
                        "kvs-put" => {
                            let v = c.get("value").unwrap();
                            assert!(v.len() < MAX_VALUE, "value too long: {}", v.len());
                            assert!(!v.contains(';'));
                            kvs.lock()
                                .unwrap()
                                .insert(c.get("key").unwrap().into(), v.into());
                            reply(&mut s, "cmd=kvs-put-response;rc=0;");
                        }
                        "kvs-fence" => {
                            barrier.wait();
                            reply(&mut s, "cmd=kvs-fence-response;rc=0;");
                        }
                        "kvs-get" => {
                            let key = c.get("key").unwrap();
                            match kvs.lock().unwrap().get(key) {
                                Some(v) => reply(
                                    &mut s,
                                    &format!("cmd=kvs-get-response;found=TRUE;value={v};rc=0;"),
                                ),
                                None => reply(&mut s, "cmd=kvs-get-response;found=FALSE;rc=0;"),
                            }
                        }
                        "abort" => {
                            assert_eq!(c.get("isworld"), Some("TRUE"));
                            seen.lock()
                                .unwrap()
                                .aborts
                                .push(c.get("msg").unwrap().to_owned());
                            return;
                        }
                        "finalize" => {
                            reply(&mut s, "cmd=finalize-response;rc=0;");
                            return;
                        }
                        other => panic!("unexpected command {other}"),
                    }
                }
            },
        )
    }

    /// The connection `sock` after the PMI-2 `init` handshake, which the server must
    /// accept.
    #[track_caller]
    fn accepted(sock: OwnedFd) -> Conn {
        let Hello::Accepted(conn) = hello(Conn::new(sock)).unwrap() else {
            panic!("PMI-2 refused");
        };
        conn
    }

    fn job<T: Send + 'static>(
        cfg: Server,
        body: impl Fn(Pmi2Client) -> T + Send + Sync + 'static,
    ) -> (Vec<T>, Arc<Mutex<Seen>>) {
        let connect =
            |r, sock| Pmi2Client::after_init(accepted(sock), r, Some("7".into())).unwrap();
        mock::job(serve(cfg), connect, body)
    }

    #[test]
    fn collectives_chunk_blobs_into_kvs_values() {
        let cfg = Server {
            want_jobid: true,
            ..Server::new(3, Some("(vector,(0,1,3))"))
        };
        let (_, seen) = job(cfg, |mut c| {
            assert_eq!((c.name(), c.job_id(), c.appnum()), ("pmi2", "7.0", -1));
            assert_eq!(c.host_ids(), &[0, 0, 0]);
            let me = c.rank();
            for len in [0usize, 1, 758, 759, 760, 5000] {
                let all = c.exchange(&blob(me, len + me as usize)).unwrap();
                for (r, b) in all.iter().enumerate() {
                    assert_eq!(b, &blob(r as u32, len + r), "len {len} rank {r}");
                }
            }
            c.barrier().unwrap();
            assert_eq!(c.broadcast(2, &blob(me, 3000)).unwrap(), blob(2, 3000));
            assert!(matches!(c.broadcast(3, b""), Err(BootError::Protocol(_))));
            c.finalize(0).unwrap();
            assert!(matches!(c.barrier(), Err(BootError::Protocol(_))));
        });
        // 5000+ bytes = 6700 base64 characters: 7 chunks of at most 1012.
        let puts = seen
            .lock()
            .unwrap()
            .requests
            .iter()
            .filter(|r| r.contains("\"kvs-put\"") && r.contains("\"gex.5.0."))
            .count();
        assert_eq!(puts, 7);
    }

    #[test]
    fn without_a_mapping_host_names_are_exchanged() {
        let cfg = Server::new(2, None);
        let (hosts, _) = job(cfg, |c| {
            assert_eq!(c.seq, 1);
            mock::finalized_host_ids(c)
        });
        assert_eq!(hosts, vec![vec![0, 0]; 2]);
    }

    #[test]
    fn mapping_gives_host_ids() {
        let cfg = Server::new(4, Some("(vector,(0,2,2))"));
        let (hosts, _) = job(cfg, mock::finalized_host_ids);
        assert_eq!(hosts, vec![vec![0, 0, 1, 1]; 4]);
    }

    #[test]
    fn abort_message_travels_without_semicolons() {
        let cfg = Server::new(1, Some("(vector,(0,1,1))"));
        let (_, seen) = job(cfg, |mut c| c.send_abort(1, "a;b\nc").unwrap());
        assert_eq!(seen.lock().unwrap().aborts, ["a,b,c"]);
    }

    #[test]
    fn missing_jobid_is_refused_like_slurm_does() {
        let cfg = Server {
            want_jobid: true,
            ..Server::new(1, None)
        };
        let (mut clients, servers, _) = serve(cfg);
        let conn = accepted(clients.remove(0));
        let e = Pmi2Client::after_init(conn, 0, None).unwrap_err();
        assert!(
            matches!(&e, BootError::Protocol(m) if m.contains("rc=3")),
            "{e:?}"
        );
        drop(servers);
    }

    #[test]
    fn refusal_leaves_the_connection_for_pmi1() {
        let cfg = Server {
            pmi1_only: true,
            ..Server::new(1, None)
        };
        let (mut clients, servers, seen) = serve(cfg);
        let Hello::Refused(mut conn, why) = hello(Conn::new(clients.remove(0))).unwrap() else {
            panic!("accepted");
        };
        assert!(why.contains("rc"), "{why}");
        // The fallback's first line reaches the server on the same connection; the
        // server then hangs up, which the client sees as a lost launcher.
        let e = PmiClient::init_v1(&mut conn).unwrap_err();
        assert!(matches!(e, BootError::Lost(_)), "{e:?}");
        for s in servers {
            s.join().unwrap();
        }
        assert_eq!(
            seen.lock().unwrap().requests,
            ["cmd=init pmi_version=1 pmi_subversion=1"]
        );
    }

    #[test]
    fn rank_disagreement_is_a_protocol_error() {
        let cfg = Server::new(2, None);
        let (clients, _servers, _) = serve(cfg);
        let mut it = clients.into_iter();
        let conn = accepted(it.next().unwrap());
        // The server serves rank 0 on this connection; claim rank 1.
        let e = Pmi2Client::after_init(conn, 1, None);
        assert!(matches!(e, Err(BootError::Protocol(_))), "{e:?}");
    }
}
