//! The PMIx bootstrap ([`PmixClient`], cargo feature `pmix`): ranks started by a PMIx
//! server, such as Open MPI's `mpirun` (4.x, through its ORTE daemons), `prterun`
//! (PRRTE) and Slurm's `srun --mpi=pmix`.
//!
//! Unlike PMI-1 and PMI-2, PMIx has no wire protocol meant for other clients: the
//! client is the system's libpmix (OpenPMIx ≥ 4; Debian: `libpmix-dev`), called
//! through a hand-written binding (`ffi`, not public). The feature is off by
//! default, so the default build has no native dependency; a process that
//! [`detect`](crate::detect) finds under a PMIx server in a build without it gets a
//! clear error from [`from_env`](crate::from_env).
//!
//! # Mapping
//!
//! | bootstrap | PMIx |
//! |---|---|
//! | rank | the `pmix_proc_t` that `PMIx_Init` fills |
//! | size | `PMIX_JOB_SIZE` of the namespace |
//! | host ids | `PMIX_NODEID` of every rank; else `PMIX_HOSTNAME`; else an exchange of `uname` node names |
//! | exchange | `PMIx_Put(PMIX_GLOBAL, "gex.<seq>", bytes)`, `PMIx_Commit`, `PMIx_Fence` over the namespace with `PMIX_COLLECT_DATA`, `PMIx_Get` of every other rank's key |
//! | broadcast | the root puts and commits, the fence collects, the others get the root's key |
//! | barrier | `PMIx_Fence` without data |
//! | abort | `PMIx_Abort(code, msg)` over the whole namespace, then `exit(code)` (under Open MPI's `mpirun`: only `exit(code)`, see below) |
//! | request exit | `PMIx_Abort(code, …)`: the only way to ask the server to end the other ranks (under `mpirun`: nothing, the caller's exit does it) |
//! | finalize | `PMIx_Finalize` |
//!
//! Values are byte objects, so blobs need neither encoding nor chunking. Gets after
//! a collecting fence look at the collected data first (`PMIX_OPTIONAL`); a key not
//! there yet is asked from the server, which waits for it at most 30 s
//! (`PMIX_TIMEOUT`; Slurm's plugin sometimes stores the collected data after the
//! fence returns). A key some rank never published (the ranks made different
//! bootstrap calls) is then a [`BootError::Protocol`].
//!
//! # Ending the job
//!
//! The server decides. Slurm ends the step on a `PMIx_Abort`, and on a rank that
//! dies only with `--kill-on-bad-exit` (see `docs/launching.md`). Open MPI's
//! `mpirun` (4.1 with OpenPMIx 4.2, as in Debian 12) ends the job when a rank dies
//! or exits with a non-zero code, and reports it; after a `PMIx_Abort`, though, it
//! hangs or crashes in its own teardown in about one job in five (seen in CI's
//! tests: a SIGSEGV in `PMIx_server_finalize`, or a deadlock with every rank
//! already gone). So when `OMPI_COMM_WORLD_SIZE` says the launcher is `mpirun`, an
//! abort or exit request does not call `PMIx_Abort`: the rank exits with its code,
//! which makes `mpirun` end the job with that code (a request to exit with 0 ends
//! this rank only, as a rank that exits without finalizing).
//!
//! # Safety
//!
//! The `unsafe` code is in `ffi` (declarations; its module documentation states the
//! rules) and in the calls below. Every call passes pointers to locals or fields
//! that outlive it, NUL-terminated keys, and releases what libpmix returns exactly
//! once (the `Drop` of the private `Value` wrapper). libpmix is thread-safe (it runs its own progress
//! thread); a [`PmixClient`] holds no pointer into the library, only its own copy of
//! the process name.
#![allow(unsafe_code)]

mod ffi;

use std::ffi::{CStr, CString, c_char};

use gex_core::boot::{BootError, Bootstrap};

use crate::pmi::kvs_host_ids;
use ffi::{Status, pmix_proc_t, pmix_value_t};

/// The bootstrap of a rank started by a PMIx server (Open MPI's `mpirun`,
/// `prterun`, `srun --mpi=pmix`). See the [module documentation](self).
///
/// ```no_run
/// use gex_core::boot::Bootstrap;
/// // Inside a process started by `mpirun -n 4 ...`:
/// let mut boot = gex_boot::pmix::PmixClient::from_env()?;
/// assert_eq!(boot.name(), "pmix");
/// let all = boot.exchange(&boot.rank().to_le_bytes())?;
/// assert_eq!(all.len(), boot.size() as usize);
/// boot.finalize(0)?;
/// # Ok::<(), gex_core::boot::BootError>(())
/// ```
pub struct PmixClient {
    me: pmix_proc_t,
    /// Under Open MPI's `mpirun`, end the job by exiting (see `from_env`).
    abort_by_exit: bool,
    namespace: String,
    rank: u32,
    size: u32,
    hosts: Vec<u32>,
    seq: u64,
    finalized: bool,
}

impl std::fmt::Debug for PmixClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PmixClient")
            .field("namespace", &self.namespace)
            .field("abort_by_exit", &self.abort_by_exit)
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("hosts", &self.hosts)
            .field("seq", &self.seq)
            .field("finalized", &self.finalized)
            .finish()
    }
}

/// First byte of every blob value (see `PmixClient::put`).
const TAG: u8 = b'g';

/// Longest a blob get waits for data the collecting fence did not bring (seconds).
const GET_WAIT_S: i32 = 30;

/// Set by Open MPI's `mpirun` for its ranks: the client then ends the job by
/// exiting instead of `PMIx_Abort` (see the module documentation).
const OMPI_MARKER: &str = "OMPI_COMM_WORLD_SIZE";

/// A value returned by `PMIx_Get`, released on drop.
struct Value(*mut pmix_value_t);

impl Value {
    fn type_(&self) -> u16 {
        // SAFETY: `self.0` is a live value from a successful PMIx_Get (constructor).
        unsafe { (*self.0).type_ }
    }
    fn u32(&self) -> Option<u32> {
        // SAFETY: live value (above); the union is read as the member its tag names.
        (self.type_() == ffi::PMIX_UINT32).then(|| unsafe { (*self.0).data.uint32 })
    }
    fn string(&self) -> Option<Vec<u8>> {
        if self.type_() != ffi::PMIX_STRING {
            return None;
        }
        // SAFETY: live value whose tag says string: a NUL-terminated C string owned
        // by the value (or NULL).
        let p = unsafe { (*self.0).data.string };
        // SAFETY: non-null C string, valid while the value lives.
        (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_bytes().to_vec())
    }
    fn bytes(&self) -> Option<Vec<u8>> {
        if self.type_() != ffi::PMIX_BYTE_OBJECT {
            return None;
        }
        // SAFETY: live value whose tag says byte object.
        let bo = unsafe { (*self.0).data.bo };
        if bo.size == 0 || bo.bytes.is_null() {
            return Some(Vec::new());
        }
        // SAFETY: a byte object owns `size` bytes at `bytes` while the value lives.
        Some(unsafe { std::slice::from_raw_parts(bo.bytes.cast::<u8>(), bo.size) }.to_vec())
    }
}

impl Drop for Value {
    fn drop(&mut self) {
        // SAFETY: `self.0` came from a successful PMIx_Get and is released once, here.
        unsafe { ffi::release_value(self.0) }
    }
}

/// A failed libpmix call as a bootstrap error: a lost server is
/// [`BootError::Lost`], anything else [`BootError::Protocol`].
fn error(call: &str, st: Status) -> BootError {
    match st.0 {
        ffi::PMIX_ERR_UNREACH | ffi::PMIX_ERR_LOST_CONNECTION => {
            BootError::Lost(format!("{call}: {st}: the PMIx server went away"))
        }
        _ => BootError::Protocol(format!("{call} failed: {st}")),
    }
}

fn c_key(key: &str) -> Result<CString, BootError> {
    CString::new(key)
        .ok()
        .filter(|k| k.as_bytes().len() <= ffi::PMIX_MAX_KEYLEN)
        .ok_or_else(|| BootError::Protocol(format!("unusable PMIx key {key:?}")))
}

/// The library's version string, e.g. `OpenPMIx 4.2.2 (PMIx Standard: 4.2, …)`.
///
/// ```
/// assert!(gex_boot::pmix::library_version().contains("PMIx"));
/// ```
pub fn library_version() -> String {
    ffi::version()
}

impl PmixClient {
    /// Connects to the PMIx server that started this process (`PMIx_Init`; the
    /// server's address comes from the `PMIX_*` variables it set) and learns the
    /// rank, the job size and the host ids, which may take one collective exchange
    /// (so every rank must call this).
    ///
    /// # Errors
    /// [`BootError::Protocol`] if libpmix fails (for instance no server: `PMIx_Init`
    /// then starts a singleton whose job size is unknown); [`BootError::Lost`] if the
    /// server cannot be reached.
    pub fn from_env() -> Result<Self, BootError> {
        // SAFETY: pmix_proc_t is plain data; zero bytes are PMIX_PROC_CONSTRUCT's
        // state.
        let mut me: pmix_proc_t = unsafe { std::mem::zeroed() };
        // SAFETY: `me` is a valid pmix_proc_t for PMIx_Init to fill; no info array.
        ffi::check(unsafe { ffi::PMIx_Init(&mut me, std::ptr::null_mut(), 0) })
            .map_err(|st| error("PMIx_Init", st))?;
        // SAFETY: PMIx_Init wrote a NUL-terminated namespace into the array, whose
        // last byte it never overwrites (PMIX_MAX_NSLEN + 1 bytes).
        let namespace = unsafe { CStr::from_ptr(me.nspace.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        let mut c = PmixClient {
            me,
            abort_by_exit: std::env::var_os(OMPI_MARKER).is_some(),
            namespace,
            rank: me.rank,
            size: 0,
            hosts: Vec::new(),
            seq: 0,
            finalized: false,
        };
        let job = c.proc_(ffi::PMIX_RANK_WILDCARD);
        c.size = c
            .get(&job, ffi::KEY_JOB_SIZE, false, None)?
            .and_then(|v| v.u32())
            .ok_or_else(|| {
                BootError::Protocol(format!(
                    "the PMIx server gives no job size (PMIX_JOB_SIZE) for namespace {:?}",
                    c.namespace
                ))
            })?;
        if c.size == 0 || c.rank >= c.size {
            return Err(BootError::Protocol(format!(
                "PMIx rank {} is not below the job size {}",
                c.rank, c.size
            )));
        }
        c.hosts = c.host_ids_from_server()?;
        if c.hosts.is_empty() {
            c.hosts = crate::pmi::exchange_host_ids(&mut c)?;
        }
        tracing::debug!(
            namespace = c.namespace.as_str(),
            rank = c.rank,
            size = c.size,
            library = library_version().as_str(),
            "PMIx bootstrap connected"
        );
        Ok(c)
    }

    /// The job's PMIx namespace (Open MPI: a number; Slurm: `slurm.pmix.<job>.<step>`).
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Rank `rank` of this namespace.
    fn proc_(&self, rank: u32) -> pmix_proc_t {
        pmix_proc_t {
            nspace: self.me.nspace,
            rank,
        }
    }

    /// `PMIx_Get(proc, key)`, `None` if not found. `local_only` passes
    /// `PMIX_OPTIONAL` (look only at data already in this process); `wait_s`
    /// passes `PMIX_TIMEOUT` (how long the server may wait for the data).
    fn get(
        &self,
        proc_: &pmix_proc_t,
        key: &CStr,
        local_only: bool,
        wait_s: Option<i32>,
    ) -> Result<Option<Value>, BootError> {
        let load = |st| error("PMIx_Info_load", st);
        let mut info = Vec::new();
        if local_only {
            info.push(ffi::bool_info(ffi::KEY_OPTIONAL, true).map_err(load)?);
        }
        if let Some(s) = wait_s {
            info.push(ffi::int_info(ffi::KEY_TIMEOUT, s).map_err(load)?);
        }
        let mut out: *mut pmix_value_t = std::ptr::null_mut();
        // SAFETY: `proc_`, `key` and `info` outlive the call; `out` receives a value
        // allocated by libpmix on success, which `Value` releases.
        let rc = unsafe { ffi::PMIx_Get(proc_, key.as_ptr(), info.as_ptr(), info.len(), &mut out) };
        match ffi::check(rc) {
            Ok(()) if !out.is_null() => Ok(Some(Value(out))),
            Ok(()) => Ok(None),
            Err(Status(ffi::PMIX_ERR_NOT_FOUND | ffi::PMIX_ERR_TIMEOUT)) => Ok(None),
            Err(st) => Err(error("PMIx_Get", st)),
        }
    }

    /// Host ids from the server's per-process data: `PMIX_NODEID`, else
    /// `PMIX_HOSTNAME`. Empty if the server has neither for some rank.
    fn host_ids_from_server(&self) -> Result<Vec<u32>, BootError> {
        if let Some(ids) = self.every_rank(ffi::KEY_NODEID, Value::u32)? {
            // Node ids need not start at 0 or be dense: renumber by first appearance.
            let names: Vec<Vec<u8>> = ids.iter().map(|i| i.to_le_bytes().to_vec()).collect();
            return Ok(kvs_host_ids(&names));
        }
        let names = self.every_rank(ffi::KEY_HOSTNAME, Value::string)?;
        Ok(names.map_or_else(Vec::new, |n| kvs_host_ids(&n)))
    }

    /// The server's per-process `key` of every rank, read by `value`; `None` as soon
    /// as some rank has none (or one of another type).
    fn every_rank<T>(
        &self,
        key: &CStr,
        value: impl Fn(&Value) -> Option<T>,
    ) -> Result<Option<Vec<T>>, BootError> {
        let mut all = Vec::with_capacity(self.size as usize);
        for r in 0..self.size {
            let got = self.get(&self.proc_(r), key, true, None)?;
            let Some(x) = got.and_then(|v| value(&v)) else {
                return Ok(None);
            };
            all.push(x);
        }
        Ok(Some(all))
    }

    collective_seq!(finalized);

    fn key(seq: u64) -> Result<CString, BootError> {
        c_key(&format!("gex.{seq}"))
    }

    /// Puts `data` under `key` for every process of the job, and commits. The value
    /// is [`TAG`] followed by `data`, so it is never empty (an empty byte object
    /// made Slurm's PMIx plugin fail later fences with `PMIX_ERR_PARTIAL_SUCCESS`
    /// here).
    fn put(&mut self, key: &CStr, data: &[u8]) -> Result<(), BootError> {
        let mut tagged = Vec::with_capacity(data.len() + 1);
        tagged.push(TAG);
        tagged.extend_from_slice(data);
        let data = tagged.as_slice();
        let mut v = pmix_value_t {
            type_: ffi::PMIX_BYTE_OBJECT,
            data: ffi::pmix_value_data {
                bo: ffi::pmix_byte_object_t {
                    // libpmix copies `size` bytes from here and never writes them.
                    bytes: data.as_ptr().cast_mut().cast::<c_char>(),
                    size: data.len(),
                },
            },
        };
        // SAFETY: `key` is NUL-terminated; `v` describes `data`, which outlives the
        // call; PMIx_Put copies the value (it keeps no pointer to `v` or `data`).
        ffi::check(unsafe { ffi::PMIx_Put(ffi::PMIX_GLOBAL, key.as_ptr(), &mut v) })
            .map_err(|st| error("PMIx_Put", st))?;
        // SAFETY: no arguments.
        ffi::check(unsafe { ffi::PMIx_Commit() }).map_err(|st| error("PMIx_Commit", st))
    }

    /// `PMIx_Fence` over the whole namespace, collecting the puts if `collect`.
    fn fence(&mut self, collect: bool) -> Result<(), BootError> {
        let info = if collect {
            vec![
                ffi::bool_info(ffi::KEY_COLLECT_DATA, true)
                    .map_err(|st| error("PMIx_Info_load", st))?,
            ]
        } else {
            Vec::new()
        };
        // SAFETY: a NULL process array means "every process of my namespace"; `info`
        // outlives the call.
        ffi::check(unsafe { ffi::PMIx_Fence(std::ptr::null(), 0, info.as_ptr(), info.len()) })
            .map_err(|st| error("PMIx_Fence", st))
    }

    /// Rank `rank`'s blob under `key`, which it must have put before the last fence:
    /// first from the data the fence collected; if it is not here yet (Slurm's
    /// plugin may still be storing it), from the server, which waits for it at most
    /// [`GET_WAIT_S`] seconds.
    fn get_blob(&self, key: &CStr, seq: u64, rank: u32) -> Result<Vec<u8>, BootError> {
        let p = self.proc_(rank);
        let v = match self.get(&p, key, true, None)? {
            Some(v) => Some(v),
            None => self.get(&p, key, false, Some(GET_WAIT_S))?,
        };
        v.and_then(|v| v.bytes())
            .and_then(|b| (b.first() == Some(&TAG)).then(|| b[1..].to_vec()))
            .ok_or_else(|| {
                BootError::Protocol(format!(
                    "rank {rank} published nothing for bootstrap collective #{seq} \
                     (did every rank make the same bootstrap calls?)"
                ))
            })
    }

    /// `PMIx_Abort` over the namespace with `code` and `msg`, after letting the
    /// launcher read this rank's pending output; under Open MPI's `mpirun` only the
    /// latter (see [`abort_by_exit`](Self::abort_by_exit)).
    fn send_abort(&mut self, code: i32, msg: &str) -> Result<(), BootError> {
        crate::pmi::drain_output();
        if self.abort_by_exit {
            return Ok(());
        }
        let msg = CString::new(msg.replace('\0', " ")).unwrap_or_default();
        // SAFETY: `msg` is NUL-terminated and outlives the call; a NULL process
        // array means the whole namespace.
        ffi::check(unsafe { ffi::PMIx_Abort(code, msg.as_ptr(), std::ptr::null_mut(), 0) })
            .map_err(|st| error("PMIx_Abort", st))
    }
}

impl Bootstrap for PmixClient {
    bootstrap_identity!("pmix");
    fn exchange(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>, BootError> {
        self.check_open("exchange")?;
        let seq = self.next_seq();
        let key = Self::key(seq)?;
        self.put(&key, mine)?;
        self.fence(true)?;
        (0..self.size)
            .map(|r| {
                if r == self.rank {
                    Ok(mine.to_vec())
                } else {
                    self.get_blob(&key, seq, r)
                }
            })
            .collect()
    }
    fn barrier(&mut self) -> Result<(), BootError> {
        self.check_open("barrier")?;
        self.next_seq();
        self.fence(false)
    }
    fn broadcast(&mut self, root: u32, data: &[u8]) -> Result<Vec<u8>, BootError> {
        self.check_open("broadcast")?;
        if root >= self.size {
            return Err(BootError::Protocol(format!(
                "broadcast root {root} is not a rank of this job of {}",
                self.size
            )));
        }
        let seq = self.next_seq();
        let key = Self::key(seq)?;
        if root == self.rank {
            self.put(&key, data)?;
        }
        self.fence(true)?;
        if root == self.rank {
            Ok(data.to_vec())
        } else {
            self.get_blob(&key, seq, root)
        }
    }
    abort_by_request!("PMIx");
    fn finalize(&mut self, _code: i32) -> Result<(), BootError> {
        if self.finalized {
            return Ok(());
        }
        self.finalized = true;
        // SAFETY: no info array; called once per successful PMIx_Init (this client's).
        ffi::check(unsafe { ffi::PMIx_Finalize(std::ptr::null(), 0) })
            .map_err(|st| error("PMIx_Finalize", st))
    }
}
