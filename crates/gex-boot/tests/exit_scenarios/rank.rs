//! The scenario program: one rank of a job (or, started alone, the launcher of its
//! own job). Everything it tells the driver goes through files in the job directory:
//! `<pid>.rank` (its rank and parent pid), `ready.<rank>` (it is about to wait),
//! `mark.<rank>` (the wall-clock time just before it set the scenario off).

use crate::scenarios::{Others, RANKS, Scenario, TRIGGER, Trigger};
use crate::{DIR_VAR, RANKS_VAR};
use gex::boot::Role;
use gex::prelude::*;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

/// A rank still alive this long after it started ends itself (code 99), so a broken
/// launcher fails the row instead of leaving processes behind.
const WATCHDOG: Duration = Duration::from_secs(20);
/// How long the triggering rank waits after the others said they are ready, so that
/// they are inside the wait when it acts.
const SETTLE: Duration = Duration::from_millis(150);

fn dir() -> PathBuf {
    PathBuf::from(std::env::var_os(DIR_VAR).unwrap_or_else(|| "/tmp".into()))
}

fn wall_ns() -> u128 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// Writes `value` to `name` in the job directory, whole (a temporary file renamed).
fn put(name: &str, value: &str) {
    let d = dir();
    let tmp = d.join(format!(".{name}.{}.tmp", std::process::id()));
    if std::fs::write(&tmp, value).is_ok() {
        let _ = std::fs::rename(&tmp, d.join(name));
    }
}

/// Notes the time just before this rank sets the scenario off.
fn mark(rank: u32) {
    put(&format!("mark.{rank}"), &wall_ns().to_string());
}

fn ready(rank: u32) {
    put(&format!("ready.{rank}"), "");
}

/// The triggering rank no longer polls (so a request sent to it now stays unanswered).
fn idle(rank: u32) {
    put(&format!("idle.{rank}"), "");
}

fn await_idle(rank: u32) {
    let f = dir().join(format!("idle.{rank}"));
    let t = Instant::now();
    while !f.exists() {
        if t.elapsed() > Duration::from_secs(15) {
            eprintln!("exit_scenarios: rank {rank} never stopped polling");
            std::process::exit(95);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Waits until every rank in `ranks` has said it is ready, then lets them settle.
fn await_ready(ranks: impl Iterator<Item = u32> + Clone) {
    let d = dir();
    let t = Instant::now();
    while !ranks.clone().all(|r| d.join(format!("ready.{r}")).exists()) {
        if t.elapsed() > Duration::from_secs(15) {
            eprintln!("exit_scenarios: the other ranks never got ready");
            std::process::exit(95);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(SETTLE);
}

/// Ends the process if a wait that should never return did.
fn unexpected(rank: u32, what: &str) -> ! {
    eprintln!("exit_scenarios: rank {rank}: {what} returned, which it never should here");
    std::process::exit(98);
}

fn compute_forever() -> ! {
    let mut x = 1u64;
    loop {
        for i in 0..1_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
    }
}

/// Runs scenario `s` as one rank (or launches the job). Never returns.
pub(crate) fn run(s: &Scenario) -> ! {
    let ranks = std::env::var(RANKS_VAR)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(RANKS);
    let boot = match gex::boot::spawn_self(ranks) {
        Ok(Role::Launcher(code)) => std::process::exit(code),
        Ok(Role::Rank(b)) => b,
        Err(e) => {
            eprintln!("exit_scenarios: cannot start: {e}");
            std::process::exit(97);
        }
    };
    let rank = boot.rank();
    let ppid = rustix::process::getppid().map_or(0, |p| p.as_raw_pid());
    put(
        &format!("{}.rank", std::process::id()),
        &format!("{rank} {ppid}"),
    );
    std::thread::spawn(|| {
        std::thread::sleep(WATCHDOG);
        eprintln!("exit_scenarios: rank watchdog: the job was not ended; exiting 99");
        std::process::exit(99);
    });
    let t = TRIGGER;
    let n = boot.size();
    let others = move || (0..n).filter(move |&r| r != t);
    if let Trigger::ExitBeforeInit(code) = s.trigger {
        if rank == t {
            await_ready(others());
            mark(rank);
            std::process::exit(code);
        }
        ready(rank);
    }
    let client = match gex::builder()
        .segment_size(1 << 16)
        .init::<gex::AnyConduit>(boot)
    {
        Ok(c) => Arc::new(c),
        Err(e) => {
            eprintln!("exit_scenarios: rank {rank}: init: {e}");
            std::process::exit(94);
        }
    };
    if s.others == Others::Init {
        unexpected(rank, "init");
    }
    if let Err(e) = scenario(s, client, rank, n) {
        eprintln!("exit_scenarios: rank {rank}: {e}");
        std::process::exit(93);
    }
    unexpected(rank, "the scenario")
}

type Res = Result<(), Box<dyn std::error::Error>>;

fn scenario(s: &Scenario, client: Arc<gex::Client>, rank: u32, n: u32) -> Res {
    let t = TRIGGER;
    let mut ep = client.endpoint(0)?;
    let world = ep.world();
    let c = client.clone();
    let h_exit = ep.register(move |_t: &mut Token<'_>, am: Am<'_>| {
        mark(c.rank());
        c.exit(am.args()[0] as i32)
    })?;
    let h_panic = ep.register(move |_t: &mut Token<'_>, _am: Am<'_>| {
        mark(rank);
        panic!("rank {rank} panics in an AM handler on purpose")
    })?;
    let replied = Arc::new(AtomicBool::new(false));
    let r = replied.clone();
    let h_pong =
        ep.register(move |_t: &mut Token<'_>, _am: Am<'_>| r.store(true, Ordering::Release))?;
    let h_ping = ep.register(move |t: &mut Token<'_>, _am: Am<'_>| {
        t.reply(h_pong, Body::short(&[]))
            .expect("a request handler may reply")
    })?;
    // Everyone is up and has registered its handlers.
    ep.barrier(&world)?;

    let everyone = move || 0..n;
    let others = move || (0..n).filter(move |&r| r != t);
    match s.trigger {
        Trigger::HandlerExitAll => {
            ready(rank);
            await_ready(everyone());
            let next = (rank + 1) % n;
            ep.request(EpAddr::rank(next), h_exit, Body::short(&[10 + next]))?;
            ep.wait_until(|| false);
            unexpected(rank, "wait_until");
        }
        Trigger::AllExit => {
            ready(rank);
            await_ready(everyone());
            mark(rank);
            client.exit(10 + rank as i32);
        }
        Trigger::AllReturn => {
            ready(rank);
            await_ready(everyone());
            // The handler table holds a clone of the client (h_exit): dropping the
            // endpoint releases it.
            drop(ep);
            let client = Arc::into_inner(client).ok_or("the client is still shared")?;
            mark(rank);
            client.finalize()?;
            std::process::exit(10 + rank as i32);
        }
        Trigger::LauncherSignal(_) => {
            ready(rank);
            ep.wait_until(|| false);
            unexpected(rank, "wait_until");
        }
        _ => {}
    }

    if rank != t {
        // Rank 0 asks the triggering rank to exit (or panic) from a handler first.
        if rank == 0 {
            match s.trigger {
                Trigger::HandlerExit(code) => {
                    await_ready(std::iter::once(t).chain((1..n).filter(move |&r| r != t)));
                    ep.request(EpAddr::rank(t), h_exit, Body::short(&[code as u32]))?;
                }
                Trigger::HandlerPanic => {
                    await_ready(std::iter::once(t).chain((1..n).filter(move |&r| r != t)));
                    ep.request(EpAddr::rank(t), h_panic, Body::short(&[]))?;
                }
                _ => {}
            }
        }
        return wait_as_other(s.others, &mut ep, &world, rank, h_ping, &replied);
    }

    // The triggering rank.
    match s.trigger {
        Trigger::HandlerExit(_) | Trigger::HandlerPanic => {
            // Serve rank 0's request: the handler sets the scenario off.
            ready(rank);
            ep.wait_until(|| false);
            unexpected(rank, "wait_until");
        }
        Trigger::ThreadExit(code) => {
            let c = client.clone();
            std::thread::spawn(move || {
                await_ready(others());
                mark(rank);
                c.exit(code)
            });
            ep.wait_until(|| false);
            unexpected(rank, "wait_until");
        }
        Trigger::ThreadPanic => {
            let worker = std::thread::spawn(move || {
                await_ready(others());
                mark(rank);
                panic!("a worker thread of rank {rank} panics on purpose");
            });
            // Serve the network while the worker runs, then propagate its panic.
            ep.wait_until(|| worker.is_finished());
            let Err(p) = worker.join();
            std::panic::resume_unwind(p);
        }
        _ => {}
    }
    idle(rank);
    await_ready(others());
    mark(rank);
    match s.trigger {
        Trigger::Exit(code) => client.exit(code),
        Trigger::Abort(code) => client.abort(code, "the exit scenario aborts on purpose"),
        Trigger::ProcessAbort => std::process::abort(),
        Trigger::Panic => panic!("rank {rank} panics on purpose"),
        Trigger::Signal(sig) => {
            let _ = rustix::process::kill_process(rustix::process::getpid(), sig);
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        Trigger::NoFinalize(code) => {
            // Leave without dropping (finalizing) the client.
            std::mem::forget(ep);
            std::process::exit(code)
        }
        _ => unexpected(rank, "the trigger"),
    }
}

/// What the ranks other than the triggering one do.
fn wait_as_other(
    others: Others,
    ep: &mut gex::Endpoint,
    world: &Team,
    rank: u32,
    h_ping: HandlerId,
    replied: &AtomicBool,
) -> Res {
    match others {
        Others::Compute => {
            ready(rank);
            compute_forever()
        }
        Others::Barrier => {
            ready(rank);
            ep.barrier(world)?;
            unexpected(rank, "the barrier")
        }
        Others::Collective => {
            ready(rank);
            let sum = ep.collective(
                world,
                Allreduce::new(vec![u64::from(rank)], BuiltinOp::Sum),
                Blocking,
            )?;
            unexpected(rank, &format!("the allreduce ({sum:?})"))
        }
        Others::Reply => {
            // Once the triggering rank has left the start-up barrier for good.
            await_idle(TRIGGER);
            ep.request(EpAddr::rank(TRIGGER), h_ping, Body::short(&[]))?;
            ready(rank);
            ep.wait_until(|| replied.load(Ordering::Acquire));
            unexpected(rank, "the wait for the reply")
        }
        Others::Poll => {
            ready(rank);
            ep.wait_until(|| false);
            unexpected(rank, "wait_until")
        }
        Others::Init => unexpected(rank, "init"),
    }
}
