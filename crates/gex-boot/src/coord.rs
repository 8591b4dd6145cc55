//! The launcher's job logic, free of I/O: collectives, finalisation and the
//! decision to end a job.
//!
//! The launcher loop ([`crate::launch`]) feeds this state machine with frames
//! received from ranks and with rank exits, and carries out what it returns:
//! frames to send, and at most one [`Ending`] (print a line, terminate the other
//! ranks, remember the job's exit code).

use crate::proto::{Kind, ProtoError, ToLauncher, ToRank, VERSION};

/// How a rank process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    /// Exited with this code.
    Code(i32),
    /// Killed by this signal.
    Signal(i32),
}

impl Status {
    /// The shell convention: the code, or 128 + signal number.
    pub(crate) fn shell_code(self) -> i32 {
        match self {
            Status::Code(c) => c,
            Status::Signal(s) => 128 + s,
        }
    }
}

/// The decision to end the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ending {
    /// The job's exit code.
    pub(crate) code: i32,
    /// The line to print on the launcher's stderr, if any.
    pub(crate) message: Option<String>,
    /// A rank that is ending by itself (it asked for the exit or abort) and should
    /// not be sent SIGTERM; it is still killed after the grace period.
    pub(crate) spare: Option<usize>,
}

#[derive(Debug, Default)]
struct RankState {
    pid: u32,
    hello: bool,
    finalized: bool,
    exited: bool,
}

#[derive(Debug)]
struct Collective {
    kind: Kind,
    seq: u64,
    root: u32,
    blobs: Vec<Option<Vec<u8>>>,
    arrived: usize,
}

/// The state of one job, as seen by its launcher.
#[derive(Debug)]
pub(crate) struct Coordinator {
    size: usize,
    /// Host id of each rank, sent in WELCOME.
    hosts: Vec<u32>,
    require_hello: bool,
    /// End the job when a rank fails (default); off: report it and let the others run.
    kill_on_bad_exit: bool,
    ranks: Vec<RankState>,
    pending: Option<Collective>,
    next_seq: u64,
    first_nonzero: Option<i32>,
    ended: Option<i32>,
    /// Lines to print that do not end the job.
    notices: Vec<String>,
}

/// Frames the launcher must send: (rank, encoded frame).
pub(crate) type Outbox = Vec<(usize, Vec<u8>)>;

/// Name of a signal number (Linux numbering).
pub(crate) fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGCHLD => "SIGCHLD",
        libc::SIGCONT => "SIGCONT",
        libc::SIGSTOP => "SIGSTOP",
        libc::SIGTSTP => "SIGTSTP",
        libc::SIGTTIN => "SIGTTIN",
        libc::SIGTTOU => "SIGTTOU",
        libc::SIGURG => "SIGURG",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGVTALRM => "SIGVTALRM",
        libc::SIGPROF => "SIGPROF",
        libc::SIGWINCH => "SIGWINCH",
        libc::SIGIO => "SIGIO",
        libc::SIGPWR => "SIGPWR",
        libc::SIGSYS => "SIGSYS",
        _ => "a real-time or unknown signal",
    }
}

impl Coordinator {
    /// A job of `size` ranks. With `require_hello`, a rank that exits without
    /// ever saying HELLO fails the job even with exit code 0.
    pub(crate) fn new(size: usize, require_hello: bool) -> Self {
        Coordinator {
            size,
            hosts: vec![0; size],
            require_hello,
            kill_on_bad_exit: true,
            ranks: (0..size).map(|_| RankState::default()).collect(),
            pending: None,
            next_seq: 0,
            first_nonzero: None,
            ended: None,
            notices: Vec::new(),
        }
    }

    /// Sets the host id of every rank (default: all 0, one host).
    pub(crate) fn set_hosts(&mut self, hosts: Vec<u32>) {
        debug_assert_eq!(hosts.len(), self.size);
        self.hosts = hosts;
    }

    /// Whether a rank that fails (ends without finalizing, or a process that never said
    /// HELLO exits non-zero) ends the job (the default). Off, the failure is reported
    /// and recorded as the job's exit code, and the other ranks are left running until
    /// they end by themselves, like `srun` without `--kill-on-bad-exit`; a collective
    /// that can no longer complete, EXIT and ABORT still end the job.
    pub(crate) fn set_kill_on_bad_exit(&mut self, yes: bool) {
        self.kill_on_bad_exit = yes;
    }

    /// Records the process id of `rank` (for messages).
    pub(crate) fn set_pid(&mut self, rank: usize, pid: u32) {
        self.ranks[rank].pid = pid;
    }

    /// Lines for the launcher's stderr that do not end the job (a failed rank while
    /// [kill on bad exit](Self::set_kill_on_bad_exit) is off), oldest first.
    pub(crate) fn take_notices(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notices)
    }

    /// Whether the job has been ended.
    pub(crate) fn is_ending(&self) -> bool {
        self.ended.is_some()
    }

    /// The job's exit code: the ending's code, else the first non-zero exit code
    /// recorded, else 0.
    pub(crate) fn job_code(&self) -> i32 {
        self.ended.or(self.first_nonzero).unwrap_or(0)
    }

    /// Ends the job from outside (the launcher received `signal`).
    pub(crate) fn interrupted(&mut self, signal: i32) -> Option<Ending> {
        self.end(Ending {
            code: 128 + signal,
            message: Some(format!(
                "gex-run: received signal {signal} ({}); ending the job",
                signal_name(signal)
            )),
            spare: None,
        })
    }

    /// Ends the job because rank `rank` sent bytes that are not a frame.
    pub(crate) fn bad_frame(&mut self, rank: usize, e: &ProtoError) -> Option<Ending> {
        self.fail(format!(
            "gex-run: rank {rank} sent a malformed bootstrap frame ({e}); ending the job"
        ))
    }

    fn end(&mut self, ending: Ending) -> Option<Ending> {
        if self.ended.is_some() {
            return None;
        }
        self.ended = Some(ending.code);
        self.pending = None;
        Some(ending)
    }

    fn fail(&mut self, message: String) -> Option<Ending> {
        self.end(Ending {
            code: 1,
            message: Some(message),
            spare: None,
        })
    }

    /// Handles one frame body received from `rank`; replies are appended to `out`.
    pub(crate) fn message(&mut self, rank: usize, body: &[u8], out: &mut Outbox) -> Option<Ending> {
        if self.ended.is_some() {
            return None;
        }
        let msg = match ToLauncher::decode(body) {
            Ok(m) => m,
            Err(e) => {
                return self.fail(format!(
                    "gex-run: rank {rank} sent a malformed bootstrap message ({e}); ending the job"
                ));
            }
        };
        if !self.ranks[rank].hello && !matches!(msg, ToLauncher::Hello { .. }) {
            return self.fail(format!(
                "gex-run: rank {rank} sent a bootstrap message before HELLO; ending the job"
            ));
        }
        match msg {
            ToLauncher::Hello {
                version,
                rank: r,
                size,
            } => {
                if self.ranks[rank].hello {
                    return self.fail(format!(
                        "gex-run: rank {rank} said HELLO twice; ending the job"
                    ));
                }
                if version != VERSION {
                    return self.fail(format!(
                        "gex-run: rank {rank} speaks bootstrap protocol version {version}, \
                         this launcher speaks {VERSION}; ending the job"
                    ));
                }
                if r as usize != rank || size as usize != self.size {
                    return self.fail(format!(
                        "gex-run: the process started as rank {rank} of {} says it is rank {r} of \
                         {size} (check GEX_RANK/GEX_SIZE); ending the job",
                        self.size
                    ));
                }
                self.ranks[rank].hello = true;
                self.send(
                    out,
                    rank,
                    &ToRank::Welcome {
                        hosts: self.hosts.clone(),
                    },
                )
            }
            ToLauncher::Exchange { seq, blob } => {
                self.enter(rank, Kind::Exchange, seq, 0, Some(blob), out)
            }
            ToLauncher::Barrier { seq } => self.enter(rank, Kind::Barrier, seq, 0, None, out),
            ToLauncher::Broadcast { seq, root, blob } => {
                if root as usize >= self.size {
                    return self.fail(format!(
                        "gex-run: rank {rank} entered broadcast #{seq} with root {root}, \
                         but the job has {} ranks; ending the job",
                        self.size
                    ));
                }
                let blob = (root as usize == rank).then_some(blob);
                self.enter(rank, Kind::Broadcast, seq, root, blob, out)
            }
            ToLauncher::Finalize { code } => {
                tracing::debug!(rank, code, "rank finalized");
                self.ranks[rank].finalized = true;
                self.check_doomed()
            }
            ToLauncher::Exit { code } => {
                tracing::debug!(rank, code, "rank requested the end of the job");
                self.end(Ending {
                    code: self.first_nonzero.unwrap_or(code),
                    message: None,
                    spare: Some(rank),
                })
            }
            ToLauncher::Abort { code, msg } => self.end(Ending {
                code: if code == 0 { 1 } else { code },
                message: Some(format!("gex-run: rank {rank} aborted the job: {msg}")),
                spare: Some(rank),
            }),
        }
    }

    fn send(&mut self, out: &mut Outbox, rank: usize, msg: &ToRank) -> Option<Ending> {
        match msg.encode() {
            Ok(frame) => {
                out.push((rank, frame));
                None
            }
            Err(e) => self.fail(format!(
                "gex-run: cannot send a reply to rank {rank}: {e}; ending the job"
            )),
        }
    }

    fn enter(
        &mut self,
        rank: usize,
        kind: Kind,
        seq: u64,
        root: u32,
        blob: Option<Vec<u8>>,
        out: &mut Outbox,
    ) -> Option<Ending> {
        let describe = |kind: Kind, seq: u64, root: u32| match kind {
            Kind::Broadcast => format!("{kind} #{seq} (root {root})"),
            _ => format!("{kind} #{seq}"),
        };
        let size = self.size;
        let pending = self.pending.get_or_insert_with(|| Collective {
            kind,
            seq,
            root,
            blobs: vec![None; size],
            arrived: 0,
        });
        if pending.kind != kind
            || pending.seq != seq
            || pending.root != root
            || seq != self.next_seq
        {
            let (expected, entered) = if pending.arrived == 0 {
                (format!("#{}", self.next_seq), describe(kind, seq, root))
            } else {
                (
                    describe(pending.kind, pending.seq, pending.root),
                    describe(kind, seq, root),
                )
            };
            return self.fail(format!(
                "gex-run: collective mismatch: rank {rank} entered {entered} but the job is at \
                 collective {expected}; collectives must be called by every rank in the same order; \
                 ending the job"
            ));
        }
        if pending.blobs[rank].is_some() {
            return self.fail(format!(
                "gex-run: rank {rank} entered {} twice; ending the job",
                describe(kind, seq, root)
            ));
        }
        pending.blobs[rank] = Some(blob.unwrap_or_default());
        pending.arrived += 1;
        if pending.arrived < size {
            return self.check_doomed();
        }
        let done = self.pending.take().expect("pending collective");
        self.next_seq += 1;
        let mut blobs: Vec<Vec<u8>> = done
            .blobs
            .into_iter()
            .map(Option::unwrap_or_default)
            .collect();
        let reply = match kind {
            Kind::Exchange => ToRank::Exchanged { seq, blobs },
            Kind::Barrier => ToRank::BarrierDone { seq },
            Kind::Broadcast => ToRank::BroadcastDone {
                seq,
                blob: std::mem::take(&mut blobs[root as usize]),
            },
        };
        let frame = match reply.encode() {
            Ok(f) => f,
            Err(e) => {
                return self.fail(format!(
                    "gex-run: result of {} cannot be sent: {e}; ending the job",
                    describe(kind, seq, root)
                ));
            }
        };
        for r in 0..size {
            out.push((r, frame.clone()));
        }
        None
    }

    /// Ends the job if the pending collective can never complete because a rank
    /// that has not entered it has finalized or exited.
    fn check_doomed(&mut self) -> Option<Ending> {
        let pending = self.pending.as_ref()?;
        if pending.arrived == 0 {
            return None;
        }
        let gone = (0..self.size).find(|&r| {
            pending.blobs[r].is_none() && (self.ranks[r].finalized || self.ranks[r].exited)
        })?;
        let waiting: Vec<String> = (0..self.size)
            .filter(|&r| pending.blobs[r].is_some())
            .map(|r| r.to_string())
            .collect();
        let what = if self.ranks[gone].exited {
            "exited"
        } else {
            "finalized"
        };
        let msg = format!(
            "gex-run: rank {gone} (pid {}) {what} while rank(s) {} wait for it in {} #{}; ending the job",
            self.ranks[gone].pid,
            waiting.join(", "),
            pending.kind,
            pending.seq
        );
        self.fail(msg)
    }

    /// Handles the end of `rank`'s process. Call it only after every frame the rank
    /// sent has been passed to [`message`](Self::message).
    pub(crate) fn exited(&mut self, rank: usize, status: Status) -> Option<Ending> {
        let st = &mut self.ranks[rank];
        st.exited = true;
        if self.ended.is_some() {
            return None;
        }
        let (pid, hello, finalized) = (st.pid, st.hello, st.finalized);
        let how = match status {
            Status::Code(c) => format!("exited with code {c}"),
            Status::Signal(s) => format!("was killed by signal {s} ({})", signal_name(s)),
        };
        if finalized || (!hello && status == Status::Code(0) && !self.require_hello) {
            let code = status.shell_code();
            if code != 0 && self.first_nonzero.is_none() {
                self.first_nonzero = Some(code);
            }
            return self.check_doomed();
        }
        let code = match status.shell_code() {
            0 => 1,
            c => c,
        };
        let message = if hello {
            let hint = if status == Status::Code(101) {
                " (a Rust panic exits with 101)"
            } else {
                ""
            };
            format!(
                "gex-run: rank {rank} (pid {pid}) {how} before finalizing{hint}; ending the job"
            )
        } else if status == Status::Code(0) {
            format!(
                "gex-run: rank {rank} (pid {pid}) exited with code 0 without contacting the launcher \
                 (it never created its bootstrap); ending the job"
            )
        } else {
            format!("gex-run: rank {rank} (pid {pid}) {how}; ending the job")
        };
        if !self.kill_on_bad_exit {
            let what = message.trim_end_matches("; ending the job");
            self.notices.push(format!(
                "{what}; the other ranks go on (kill on bad exit is off)"
            ));
            self.first_nonzero.get_or_insert(code);
            return self.check_doomed();
        }
        self.end(Ending {
            code,
            message: Some(message),
            spare: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send(c: &mut Coordinator, rank: usize, m: ToLauncher, out: &mut Outbox) -> Option<Ending> {
        let f = m.encode().unwrap();
        c.message(rank, &f[4..], out)
    }

    /// Sends `m` from `rank`; the job must go on.
    #[track_caller]
    fn send_ok(c: &mut Coordinator, rank: usize, m: ToLauncher, out: &mut Outbox) {
        assert_eq!(send(c, rank, m, out), None);
    }

    #[track_caller]
    fn hello(c: &mut Coordinator, rank: usize, out: &mut Outbox) {
        let m = ToLauncher::Hello {
            version: VERSION,
            rank: rank as u32,
            size: c.size as u32,
        };
        send_ok(c, rank, m, out);
    }

    fn decode(f: &[u8]) -> ToRank {
        ToRank::decode(&f[4..]).unwrap()
    }

    fn job(n: usize) -> (Coordinator, Outbox) {
        let mut c = Coordinator::new(n, false);
        let mut out = Vec::new();
        for r in 0..n {
            c.set_pid(r, 1000 + r as u32);
            hello(&mut c, r, &mut out);
        }
        assert_eq!(out.len(), n);
        for (r, (dest, f)) in out.iter().enumerate() {
            assert_eq!(*dest, r);
            assert_eq!(decode(f), ToRank::Welcome { hosts: vec![0; n] });
        }
        out.clear();
        (c, out)
    }

    #[test]
    fn exchange_completes_when_all_enter() {
        let (mut c, mut out) = job(3);
        for r in [2, 0, 1] {
            assert!(out.is_empty());
            let blob = vec![r as u8; r];
            send_ok(&mut c, r, ToLauncher::Exchange { seq: 0, blob }, &mut out);
        }
        assert_eq!(out.len(), 3);
        for (_, f) in &out {
            assert_eq!(
                decode(f),
                ToRank::Exchanged {
                    seq: 0,
                    blobs: vec![vec![], vec![1], vec![2, 2]]
                }
            );
        }
        out.clear();
        for r in 0..3 {
            let blob = if r == 1 { b"root".to_vec() } else { vec![] };
            let m = ToLauncher::Broadcast {
                seq: 1,
                root: 1,
                blob,
            };
            send_ok(&mut c, r, m, &mut out);
        }
        assert!(out.iter().all(|(_, f)| decode(f)
            == ToRank::BroadcastDone {
                seq: 1,
                blob: b"root".to_vec()
            }));
        for r in 0..3 {
            send_ok(&mut c, r, ToLauncher::Finalize { code: 0 }, &mut out);
        }
        assert_eq!(c.exited(0, Status::Code(0)), None);
        assert_eq!(c.exited(1, Status::Code(4)), None);
        assert_eq!(c.exited(2, Status::Code(5)), None);
        assert_eq!(c.job_code(), 4);
    }

    #[test]
    fn sequence_mismatch_ends_the_job() {
        let (mut c, mut out) = job(2);
        send_ok(&mut c, 0, ToLauncher::Barrier { seq: 0 }, &mut out);
        let e = send(
            &mut c,
            1,
            ToLauncher::Exchange {
                seq: 0,
                blob: vec![],
            },
            &mut out,
        )
        .unwrap();
        assert_eq!(e.code, 1);
        let m = e.message.unwrap();
        assert!(
            m.contains("collective mismatch") && m.contains("barrier #0"),
            "{m}"
        );
        // Later events change nothing.
        assert_eq!(c.exited(0, Status::Signal(9)), None);
        assert_eq!(c.job_code(), 1);
    }

    #[test]
    fn wrong_first_sequence_number_is_a_mismatch() {
        let (mut c, mut out) = job(2);
        let e = send(&mut c, 0, ToLauncher::Barrier { seq: 3 }, &mut out).unwrap();
        assert!(e.message.unwrap().contains("barrier #3"));
    }

    #[test]
    fn rank_death_before_finalize() {
        let (mut c, _) = job(3);
        let e = c.exited(2, Status::Signal(9)).unwrap();
        assert_eq!(e.code, 137);
        let m = e.message.unwrap();
        assert!(
            m.contains("rank 2 (pid 1002) was killed by signal 9 (SIGKILL) before finalizing"),
            "{m}"
        );
        let (mut c, _) = job(3);
        let e = c.exited(1, Status::Code(101)).unwrap();
        assert_eq!(e.code, 101);
        assert!(e.message.unwrap().contains("a Rust panic exits with 101"));
        let (mut c, _) = job(2);
        assert_eq!(c.exited(1, Status::Code(0)).unwrap().code, 1);
    }

    #[test]
    fn without_kill_on_bad_exit_failures_are_reported_and_the_job_goes_on() {
        let (mut c, mut out) = job(3);
        c.set_kill_on_bad_exit(false);
        assert_eq!(c.exited(2, Status::Signal(9)), None);
        let notes = c.take_notices();
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].contains("rank 2 (pid 1002) was killed by signal 9 (SIGKILL) before finalizing; the other ranks go on"),
            "{notes:?}"
        );
        assert!(c.take_notices().is_empty());
        assert!(!c.is_ending());
        // The survivors end by themselves (the smp conduit's liveness check: a panic).
        assert_eq!(c.exited(0, Status::Code(101)), None);
        assert_eq!(c.exited(1, Status::Code(101)), None);
        assert_eq!(c.job_code(), 137, "the first failure is the job's code");
        // EXIT still ends the job; a collective that cannot complete too.
        let (mut c, mut out2) = job(3);
        c.set_kill_on_bad_exit(false);
        let e = send(&mut c, 0, ToLauncher::Exit { code: 4 }, &mut out2).unwrap();
        assert_eq!(e.code, 4);
        let (mut c, _) = job(2);
        c.set_kill_on_bad_exit(false);
        send_ok(&mut c, 0, ToLauncher::Barrier { seq: 0 }, &mut out);
        let e = c.exited(1, Status::Code(3)).unwrap();
        assert_eq!(e.code, 1);
        assert!(
            e.message
                .unwrap()
                .contains("rank 1 (pid 1001) exited while rank(s) 0 wait")
        );
        assert_eq!(c.take_notices().len(), 1);
    }

    #[test]
    fn welcome_carries_the_host_ids() {
        let mut c = Coordinator::new(4, false);
        c.set_hosts(vec![0, 0, 1, 1]);
        let mut out = Vec::new();
        hello(&mut c, 2, &mut out);
        assert_eq!(
            decode(&out[0].1),
            ToRank::Welcome {
                hosts: vec![0, 0, 1, 1]
            }
        );
    }

    #[test]
    fn non_gex_processes_are_judged_by_exit_code() {
        let mut c = Coordinator::new(3, false);
        assert_eq!(c.exited(0, Status::Code(0)), None);
        let e = c.exited(1, Status::Code(3)).unwrap();
        assert_eq!(e.code, 3);
        assert!(e.message.unwrap().contains("exited with code 3;"));
        let mut c = Coordinator::new(1, true);
        let e = c.exited(0, Status::Code(0)).unwrap();
        assert!(e.message.unwrap().contains("without contacting"));
    }

    #[test]
    fn exit_and_abort() {
        let (mut c, mut out) = job(3);
        let e = send(&mut c, 1, ToLauncher::Exit { code: 5 }, &mut out).unwrap();
        assert_eq!(
            e,
            Ending {
                code: 5,
                message: None,
                spare: Some(1)
            }
        );
        assert_eq!(c.exited(1, Status::Code(5)), None);
        assert_eq!(c.job_code(), 5);
        let (mut c, mut out) = job(3);
        let e = send(
            &mut c,
            2,
            ToLauncher::Abort {
                code: 0,
                msg: "bad".into(),
            },
            &mut out,
        )
        .unwrap();
        assert_eq!(e.code, 1);
        assert_eq!(e.message.unwrap(), "gex-run: rank 2 aborted the job: bad");
    }

    #[test]
    fn collective_that_cannot_complete_ends_the_job() {
        let (mut c, mut out) = job(2);
        send_ok(&mut c, 0, ToLauncher::Finalize { code: 0 }, &mut out);
        let e = send(&mut c, 1, ToLauncher::Barrier { seq: 0 }, &mut out).unwrap();
        let m = e.message.unwrap();
        assert!(
            m.contains("rank 0 (pid 1000) finalized while rank(s) 1 wait"),
            "{m}"
        );
    }

    #[test]
    fn protocol_violations_end_the_job() {
        let mut c = Coordinator::new(2, false);
        let mut out = Vec::new();
        let e = send(&mut c, 0, ToLauncher::Barrier { seq: 0 }, &mut out).unwrap();
        assert!(e.message.unwrap().contains("before HELLO"));
        let mut c = Coordinator::new(2, false);
        let e = send(
            &mut c,
            0,
            ToLauncher::Hello {
                version: VERSION,
                rank: 1,
                size: 2,
            },
            &mut out,
        )
        .unwrap();
        assert!(e.message.unwrap().contains("says it is rank 1 of 2"));
        let (mut c, mut out) = job(2);
        let e = c.message(0, &[0x42], &mut out).unwrap();
        assert!(e.message.unwrap().contains("malformed"));
    }
}
