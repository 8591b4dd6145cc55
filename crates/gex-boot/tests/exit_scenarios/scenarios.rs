//! The scenarios and what each must end with under each launcher (the table of
//! `docs/launching.md`, "Exit scenarios").

use rustix::process::Signal;
use std::time::Duration;

/// Ranks of every job.
pub(crate) const RANKS: u32 = 3;
/// The rank that sets most scenarios off (the last one, as in GASNet's testexit).
pub(crate) const TRIGGER: u32 = RANKS - 1;

/// What the ranks other than the triggering one do meanwhile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Others {
    /// Compute in a loop without calling gex.
    Compute,
    /// Wait in `ep.barrier(&world)`, which the triggering rank never enters.
    Barrier,
    /// Sit in an allreduce the triggering rank never enters.
    Collective,
    /// Wait for the reply to a request sent to the triggering rank, which never polls.
    Reply,
    /// Poll: `wait_until` a condition that never holds (handlers run).
    Poll,
    /// Wait inside `ClientBuilder::init` (its bootstrap exchange).
    Init,
}

/// What sets the scenario off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Trigger {
    /// The triggering rank calls `Client::exit(code)` (gasnet_exit).
    Exit(i32),
    /// A second thread of the triggering rank calls `Client::exit(code)` while its main
    /// thread polls.
    ThreadExit(i32),
    /// A second thread of the triggering rank panics; the main thread, waiting inside
    /// gex for it to finish, joins it and resumes the panic.
    ThreadPanic,
    /// Rank 0 sends the triggering rank a request whose handler calls
    /// `Client::exit(code)`.
    HandlerExit(i32),
    /// Rank 0 sends the triggering rank a request whose handler panics.
    HandlerPanic,
    /// Every rank asks the next one to exit from a handler, rank r with code 10 + r.
    HandlerExitAll,
    /// The triggering rank panics on its main thread.
    Panic,
    /// `Client::abort(code, msg)`.
    Abort(i32),
    /// `std::process::abort()` (SIGABRT).
    ProcessAbort,
    /// The triggering rank receives this signal (it sends it to itself).
    Signal(Signal),
    /// The triggering rank exits with `code` without finalizing
    /// (`std::process::exit`, the client never dropped).
    NoFinalize(i32),
    /// The triggering rank exits with `code` before creating its client, while the
    /// others are inside `init`.
    ExitBeforeInit(i32),
    /// Every rank calls `Client::exit(10 + rank)` at once.
    AllExit,
    /// Every rank finalizes, then exits with 10 + rank.
    AllReturn,
    /// The driver sends this signal to the launcher while every rank polls.
    LauncherSignal(Signal),
}

/// One scenario.
#[derive(Debug)]
pub(crate) struct Scenario {
    pub(crate) name: &'static str,
    pub(crate) others: Others,
    pub(crate) trigger: Trigger,
}

const fn s(name: &'static str, others: Others, trigger: Trigger) -> Scenario {
    Scenario {
        name,
        others,
        trigger,
    }
}

use Others::*;
use Trigger::*;

/// Every scenario (GASNet-EX testexit's numbers where one corresponds).
pub(crate) const SCENARIOS: &[Scenario] = &[
    s("exit-while-computing", Compute, Exit(7)), // 5
    s("exit-in-barrier", Barrier, Exit(7)),      // 3
    s("exit-zero-in-barrier", Barrier, Exit(0)),
    s("exit-in-collective", Collective, Exit(7)),
    s("exit-awaiting-reply", Reply, Exit(7)),
    s("exit-in-handler", Barrier, HandlerExit(7)), // 11
    s("exit-in-handlers-everywhere", Poll, HandlerExitAll), // 10
    s("exit-from-thread", Barrier, ThreadExit(7)), // 52
    s("panic-in-thread", Barrier, ThreadPanic),
    s("panic-in-handler", Barrier, HandlerPanic),
    s("panic", Collective, Panic),
    s("abort", Barrier, Abort(3)),
    s("process-abort", Collective, ProcessAbort), // 103
    s("sigterm-rank", Barrier, Signal(Signal::TERM)),
    s("sigint-rank", Barrier, Signal(Signal::INT)), // 4
    s("sigkill-rank", Barrier, Signal(Signal::KILL)),
    s("no-finalize", Barrier, NoFinalize(0)),
    s("no-finalize-code", Reply, NoFinalize(8)),      // 8
    s("exit-during-init", Init, ExitBeforeInit(7)),   // 7
    s("all-exit-different-codes", Poll, AllExit),     // 1
    s("all-return-different-codes", Poll, AllReturn), // 2
    s("sigterm-launcher", Poll, LauncherSignal(Signal::TERM)),
    s("sigint-launcher", Poll, LauncherSignal(Signal::INT)),
    s("sigkill-launcher", Poll, LauncherSignal(Signal::KILL)),
];

/// The scenario named `name`.
pub(crate) fn find(name: &str) -> Option<&'static Scenario> {
    SCENARIOS.iter().find(|s| s.name == name)
}

/// Who starts the ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Launcher {
    /// The `gex-run` binary.
    GexRun,
    /// MPICH's Hydra (`mpiexec.hydra`), PMI-1.
    Mpiexec,
    /// The scenario program started alone: `spawn_self` launches it (fork launcher).
    SelfLaunch,
    /// The fork launcher with `kill_on_bad_exit(false)`: a dead rank does not end the
    /// job, the survivors' liveness checks must.
    NoKill,
}

impl Launcher {
    pub(crate) const ALL: [Launcher; 4] = [
        Launcher::GexRun,
        Launcher::Mpiexec,
        Launcher::SelfLaunch,
        Launcher::NoKill,
    ];
    pub(crate) fn name(self) -> &'static str {
        match self {
            Launcher::GexRun => "gex-run",
            Launcher::Mpiexec => "mpiexec",
            Launcher::SelfLaunch => "self",
            Launcher::NoKill => "no-kill",
        }
    }
}

/// The conduit of a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Conduit {
    Smp,
    /// `GEX_CONDUIT=ofi` (`Hybrid<Smp, Ofi>`, `tcp;ofi_rxm` on `lo`): under gex-run a
    /// hybrid job (ranks 0 and 1 on host `a`, the triggering rank alone on `b`), under
    /// mpiexec and self-launch every peer over tcp (`GEX_HYBRID=0`), under the no-kill
    /// launcher one host in hybrid mode (`GEX_HYBRID=1`: the hybrid conduit's
    /// near part, whose liveness checks are the smp conduit's).
    Ofi,
    /// `GEX_CONDUIT=ofi` with every peer over tcp (`GEX_HYBRID=0`), under the no-kill
    /// launcher only: what the ofi conduit notices by itself of a dead peer on another
    /// host (its liveness probe).
    OfiNet,
}

impl Conduit {
    pub(crate) const ALL: [Conduit; 3] = [Conduit::Smp, Conduit::Ofi, Conduit::OfiNet];
    pub(crate) fn name(self) -> &'static str {
        match self {
            Conduit::Smp => "smp",
            Conduit::Ofi => "ofi",
            Conduit::OfiNet => "ofi-net",
        }
    }
}

/// The exit code (or status) a job must end with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Code {
    /// Exactly this code.
    Is(i32),
    /// One of these (several ranks race to end the job).
    OneOf(Vec<i32>),
    /// Any code but 0.
    NonZero,
    /// The launcher itself was killed by this signal.
    KilledBy(i32),
    /// Any exit code (the launcher's code is not reliable here; why is said where the
    /// expectation is made).
    Any,
}

/// What the surviving ranks must say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Survivors {
    /// Nothing in particular (the launcher ends them).
    Quiet,
    /// Each names the dead rank through the smp conduit's liveness check (`gex smp:
    /// rank R: neighbour rank T (pid P) has ended`).
    NameItSmp,
    /// Each names the dead rank's endpoint through the ofi conduit's liveness probe
    /// (`gex ofi(tcp;ofi_rxm) rank R EP 0: rank T EP 0 is unreachable`).
    NameItOfi,
}

/// What a job must show.
#[derive(Clone, Debug)]
pub(crate) struct Expect {
    pub(crate) code: Code,
    /// Texts the job's standard error must contain (`{pid}` is the triggering rank's
    /// pid).
    pub(crate) says: Vec<String>,
    pub(crate) survivors: Survivors,
    /// A bound of its own on the time to the end of the job (default: the driver's).
    pub(crate) bound: Option<Duration>,
}

impl Expect {
    fn code(code: Code) -> Expect {
        Expect {
            code,
            says: Vec::new(),
            survivors: Survivors::Quiet,
            bound: None,
        }
    }
}

fn code_is(code: i32, says: &[&str]) -> Expect {
    Expect {
        says: says.iter().map(|s| s.to_string()).collect(),
        ..Expect::code(Code::Is(code))
    }
}

/// The bound of the ofi conduit's liveness probe: it starts after about 0.1-0.6 s
/// without completions and declares a peer unreachable 5 s later
/// (`conduits/ofi/src/config.rs`, `PROBE_AFTER`, `PROBE_DEADLINE`).
pub(crate) const OFI_PROBE_BOUND: Duration = Duration::from_secs(12);

/// Whether the triggering rank dies without asking the launcher to end the job (a
/// signal, a panic, an exit without finalizing): then only the launcher, or the
/// survivors' liveness checks, can end it.
pub(crate) fn silent_death(t: Trigger) -> bool {
    matches!(
        t,
        ThreadPanic | HandlerPanic | Panic | ProcessAbort | Signal(_) | NoFinalize(_)
    )
}

/// What `s` must end with under `launcher`, or why the combination is not run.
pub(crate) fn expect(s: &Scenario, launcher: Launcher, conduit: Conduit) -> Result<Expect, String> {
    let t = TRIGGER;
    if conduit == Conduit::OfiNet && launcher != Launcher::NoKill {
        return Err(
            "ofi-net is the no-kill column's (in-band detection over the network); \
                    the ofi rows of the other launchers cover tcp;ofi_rxm"
                .into(),
        );
    }
    let codes_of_all = || (0..RANKS as i32).map(|r| 10 + r).collect::<Vec<_>>();
    let died = format!("gex-run: rank {t} (pid {{pid}}) ");
    if launcher == Launcher::Mpiexec {
        return Ok(match s.trigger {
            Exit(c) | ThreadExit(c) | HandlerExit(c) => code_is(c, &[]),
            Abort(c) => code_is(c, &[&format!("gex: rank {t} aborted the job (code {c}): ")]),
            HandlerExitAll | AllExit => Expect::code(Code::OneOf(codes_of_all())),
            // Hydra: the bitwise OR of the ranks' codes.
            AllReturn => code_is(codes_of_all().iter().fold(0, |a, c| a | c), &[]),
            // Hydra notices the closed PMI connection and kills the job; it exits with
            // the status of whichever rank it saw end first: 0 (the rank that left) or
            // 9 (one it killed).
            NoFinalize(0) => Expect::code(Code::Any),
            // Hydra forwards SIGINT and SIGTERM to the ranks and exits with 2 or 15,
            // but now and then with 0 (Hydra 4.0.2: when every rank ended by the
            // forwarded signal before its proxies reported; seen in about 1 of 20 runs).
            // The end of the job and its cleanup are still checked.
            LauncherSignal(sig) if sig == Signal::INT || sig == Signal::TERM => {
                Expect::code(Code::Any)
            }
            LauncherSignal(sig) if sig == Signal::KILL => {
                Expect::code(Code::KilledBy(sig.as_raw()))
            }
            // Hydra kills the other ranks and exits non-zero, with the code of whichever
            // rank it saw end first (often 9, for a rank it killed itself); it prints
            // its BAD TERMINATION banner only for some of these.
            _ => Expect::code(Code::NonZero),
        });
    }
    // The fork launcher: gex-run, self-launch, no-kill.
    if let LauncherSignal(sig) = s.trigger {
        return match launcher {
            Launcher::NoKill => Err(
                "the no-kill launcher is the fork launcher of the gex-run and self columns, \
                 where signals to the launcher are covered"
                    .into(),
            ),
            // gex-run forwards SIGINT/SIGTERM to the ranks and exits with 128 + signal.
            Launcher::GexRun if sig != Signal::KILL => Ok(code_is(
                128 + sig.as_raw(),
                &[&format!("gex-run: received signal {}", sig.as_raw())],
            )),
            // spawn_self does not forward signals: the launcher dies of it, the kernel
            // kills the ranks (PR_SET_PDEATHSIG).
            _ => Ok(Expect::code(Code::KilledBy(sig.as_raw()))),
        };
    }
    let mut e = match s.trigger {
        Exit(c) | ThreadExit(c) | HandlerExit(c) => code_is(c, &[]),
        Abort(c) => code_is(c, &[&format!("gex-run: rank {t} aborted the job: ")]),
        HandlerExitAll | AllExit | AllReturn => Expect::code(Code::OneOf(codes_of_all())),
        ThreadPanic | HandlerPanic | Panic => code_is(
            101,
            &[&format!(
                "{died}exited with code 101 before finalizing (a Rust panic exits with 101)"
            )],
        ),
        ProcessAbort => code_is(
            134,
            &[&format!(
                "{died}was killed by signal 6 (SIGABRT) before finalizing"
            )],
        ),
        Signal(sig) => {
            let n = sig.as_raw();
            let name = match n {
                15 => "SIGTERM",
                2 => "SIGINT",
                _ => "SIGKILL",
            };
            code_is(
                128 + n,
                &[&format!(
                    "{died}was killed by signal {n} ({name}) before finalizing"
                )],
            )
        }
        NoFinalize(c) => code_is(
            if c == 0 { 1 } else { c },
            &[&format!("{died}exited with code {c} before finalizing")],
        ),
        ExitBeforeInit(c) => code_is(c, &[&format!("{died}exited with code {c}")]),
        LauncherSignal(_) => unreachable!(),
    };
    if launcher == Launcher::NoKill {
        if silent_death(s.trigger) {
            // The launcher reports the death but leaves the others running: they must
            // notice it themselves.
            e.says
                .push("; the other ranks go on (kill on bad exit is off)".into());
            e.survivors = Survivors::NameItSmp;
            if conduit == Conduit::OfiNet {
                // Each survivor has a request outstanding to the dead rank here (the
                // barrier's, the allreduce's, the request awaiting a reply), which its
                // liveness probe follows up.
                e.survivors = Survivors::NameItOfi;
                e.bound = Some(OFI_PROBE_BOUND);
            }
        } else if conduit == Conduit::OfiNet {
            return Err(
                "ofi-net rows are about a silent death (the launcher ends the others)".into(),
            );
        }
        if let ExitBeforeInit(_) = s.trigger {
            // The others wait in a bootstrap collective that cannot complete: the
            // launcher ends the job (code 1).
            e = code_is(
                1,
                &[&format!(
                    "{died}exited while rank(s) 0, 1 wait for it in exchange"
                )],
            );
        }
    }
    Ok(e)
}
