//! Collectives in real multi-process jobs started by gex-testkit's process runner, on
//! the conduit the facade selects (`GEX_CONDUIT`, default `smp`: processes sharing
//! memory through rings). The code is generic over the conduit, like the rest of
//! gex-coll. A smaller matrix than on the simulator: every operation with every
//! algorithm on 4 processes for two sizes (one above the Medium limit), the tuned
//! choice on split teams, the blocking calls over private and over segment buffers
//! (published by reference), and single address mode with signaling put and
//! rendezvous (3 processes); small broadcasts through the ring on 2 and 8 processes
//! (more than the cores) and its sleepers' wake-ups (3 processes under `Block`).
//!
//! The same jobs also run on **thread ranks** of this test process over smp
//! (`threads_*`: gex-boot's thread bootstrap, every rank a thread mapping every
//! rank's region): the matrix on 4 thread ranks, the ring on 2 and on 8 (more thread
//! ranks than cores) and the sleepers' wake-ups under `Block`; and on a mixed job of
//! 2 processes × 2 thread ranks (`mixed_matrix_2x2`).

#[macro_use]
mod common;

use common::{
    assert_slot_sleeps, assert_slot_woken, assert_woken, buffer_matrix, layers, matrix,
    matrix_mode, ring_workload, ring_workload_upto, segment_matrix, single_mode_call,
};
use gex::Job;
use gex_coll::{Barrier, Broadcast, CollError, CollExt, OpKind, Scratch, SyncMode};
use gex_core::{Blocking, Nb};
use gex_testkit::procs::Procs;

endpoint_jobs! {
    struct Matrix |c| {
        let w = c.world().clone();
        let ran = matrix(&mut c, &w, &[1, 9000]);
        assert!(ran > 100, "{ran}");
        let r = w.rank();
        let t = c.split(&w, Some(r / 2), r, Scratch::None).unwrap().unwrap();
        assert_eq!(t.size(), 2);
        matrix(&mut c, &t, &[5]);
        // The blocking calls (direct shared-memory path on smp), blocks up to three
        // rounds of the world's slot.
        let direct = c.coll_stats().direct_calls;
        matrix_mode(&mut c, &w, &[1, 9000, 70_000], true);
        matrix_mode(&mut c, &t, &[5, 9000], true);
        assert!(c.shared_memory(&w) == (c.coll_stats().direct_calls > direct));
        // Buffers in the segments: blocks of 16 KiB and more published by reference
        // (two slot rounds at 9000 u64 on 4 members' exchange).
        let by_ref = c.coll_stats().by_reference_calls;
        segment_matrix(&mut c, &w, &[3, 2100, 9000]);
        assert!(c.shared_memory(&w) == (c.coll_stats().by_reference_calls > by_ref));
        // Private buffers: blocks of 16 KiB and more of the copying operations are
        // read across the processes with process_vm_readv where the machine allows.
        let cma = c.coll_stats().cma_calls;
        buffer_matrix(&mut c, &w, &[3, 2100, 9000], false);
        let want = c.shared_memory(&w) && gex_coll::cma_capable();
        assert!(
            want == (c.coll_stats().cma_calls > cma),
            "CMA publications: {} (capable here: {})",
            c.coll_stats().cma_calls - cma,
            gex_coll::cma_capable()
        );
        c.barrier(&w).unwrap();
        assert_eq!(c.coll_stats().dropped_messages, 0);
    }
}

endpoint_jobs! {
    struct SingleMode |c| {
        let w = c.world().clone();
        let p = w.size();
        let mut salt = 0;
        for op in [OpKind::Broadcast, OpKind::GatherAll] {
            for alg in c.algorithms(op).into_iter().filter(|a| a.contains('+')) {
                for (i, o) in [
                    (SyncMode::My, SyncMode::My),
                    (SyncMode::No, SyncMode::No),
                    (SyncMode::All, SyncMode::All),
                ] {
                    salt += 1;
                    let root = salt % p;
                    let dst: Vec<usize> = (0..p as usize).map(|r| 300_000 + 128 * r).collect();
                    let call = (op, alg.as_str(), (i, o));
                    single_mode_call::<_, u8>(&mut c, &w, call, (root, 40_000), &dst, salt.into());
                }
            }
        }
    }
}

endpoint_jobs! {
    /// Root and barrier-name mismatches in real processes (shared memory on `smp`): errors
    /// on the members that see them, never a hang (a watchdog in every rank turns a hang
    /// into a failed job: the code before the layer hung in the first case).
    struct Mismatch |c| {
        std::thread::spawn(|| {
            std::thread::sleep(std::time::Duration::from_secs(120));
            eprintln!("procs mismatch: still running after 120 s (a hang)");
            std::process::exit(3);
        });
        let w = c.world();
        let me = w.rank();
        fn mismatch<T>(r: &Result<T, CollError>) -> bool {
            matches!(r, Err(CollError::Mismatch { .. }))
        }
        // Two members, each naming the other for the root of a broadcast.
        let pair = c
            .split(&w, Some(u32::from(me < 2)), me, Scratch::None)
            .unwrap()
            .unwrap();
        if me < 2 {
            let mut b = [me; 4];
            let r = c.collective(&pair, Broadcast::in_place(1 - me, &mut b), Blocking);
            assert!(mismatch(&r), "rank {me}: {r:?}");
        }
        // Three members, three roots.
        let trio = c.create_team(&w, &[0, 1, 2], Scratch::None).unwrap();
        let mut b = [me; 4];
        let r = c.collective(&trio, Broadcast::in_place((me + 1) % 3, &mut b), Blocking);
        assert!(mismatch(&r), "rank {me}: {r:?}");
        c.destroy_team(pair).unwrap();
        c.destroy_team(trio).unwrap();
        // Barrier names, nonblocking: every member sees the mismatch.
        let ev = c
            .collective(&w, Barrier::named(u64::from(me % 2)), Nb)
            .unwrap();
        assert_eq!(c.wait(ev), Err(CollError::BarrierMismatch), "rank {me}");
        c.barrier(&w).unwrap();
    }
}

endpoint_jobs! {
    /// Small broadcasts through the ring across processes: the ring workload
    /// (`common::ring_workload`: rotating and fixed roots, 1..=56 bytes, every form,
    /// wrap-around, every byte checked; then 1..=8 bytes in packed slots and in the
    /// ring's slots) on the world
    /// team and on two split halves at
    /// once, every broadcast through the ring where the team shares memory.
    struct Ring |c| {
        let w = c.world().clone();
        let (p, me) = (w.size(), w.rank());
        let r0 = c.coll_stats().ring_calls;
        let calls = ring_workload(&mut c, &w, 200, u64::from(p));
        let ring = c.coll_stats().ring_calls - r0;
        assert_eq!(
            ring,
            if c.shared_memory(&w) { calls } else { 0 },
            "rank {me}"
        );
        // Blocks of at most 8 bytes: in packed slots (as on a host of 1 CPU), then in
        // the ring's slots (1024 CPUs: `ring::packs`).
        let cpus = c.tuner(|t| t.host_cpus()).unwrap();
        for (host, seed) in [(1, 100), (1024, 300)] {
            c.tuner(|t| t.set_host_cpus(host)).unwrap();
            let r0 = c.coll_stats().ring_calls;
            let calls = ring_workload_upto(&mut c, &w, 200, seed + u64::from(p), 8);
            let ring = c.coll_stats().ring_calls - r0;
            assert_eq!(
                ring,
                if c.shared_memory(&w) { calls } else { 0 },
                "rank {me}"
            );
        }
        c.tuner(|t| t.set_host_cpus(cpus)).unwrap();
        if p >= 4 {
            let half = c
                .split(&w, Some(me % 2), me, Scratch::None)
                .unwrap()
                .unwrap();
            let r0 = c.coll_stats().ring_calls;
            let calls = ring_workload(&mut c, &half, 130, 50 + u64::from(me % 2));
            let ring = c.coll_stats().ring_calls - r0;
            assert_eq!(ring, if c.shared_memory(&half) { calls } else { 0 });
        }
        c.barrier(&w).unwrap();
        assert_eq!(c.coll_stats().dropped_messages, 0);
    }
}

endpoint_jobs! {
    /// The ring's sleepers are woken across processes (`common::assert_woken` under
    /// `Block`: readers sleeping on a root that pauses, a root sleeping on readers that
    /// pause; the endpoint naps 10 ms, so a lost wake-up shows as a call of 10 ms).
    struct RingWake |c| {
        assert_eq!(c.wait_policy(), gex_core::WaitPolicy::Block);
        let w = c.world().clone();
        assert_woken(&mut c, &w, 40);
    }
}

endpoint_jobs! {
    /// The slot protocol's sleepers are woken by replayed calls across processes
    /// (`common::assert_slot_woken` under `Block`: members sleeping on a publisher that
    /// pauses; a lost wake-up shows as a call of 10 ms).
    struct SlotWake |c| {
        assert_eq!(c.wait_policy(), gex_core::WaitPolicy::Block);
        let w = c.world().clone();
        assert_slot_woken(&mut c, &w, 40);
    }
}

endpoint_jobs! {
    /// Under spin-then-block, members waiting long for a slot publication sleep
    /// (`common::slot_sleeps`): they announce `MAYSLEEP` at their first sleep, their
    /// writers start fencing when they notice, and from then on the layer lets the
    /// endpoint sleep in such waits (a member whose writers never fenced would yield
    /// through every pause without sleeping: `common::assert_slot_sleeps`).
    struct SlotSleeps |c| {
        assert!(matches!(
            c.wait_policy(),
            gex_core::WaitPolicy::SpinThenBlock { .. }
        ));
        let w = c.world().clone();
        assert_slot_sleeps(&mut c, &w);
    }
}

/// Runs `job` on `ranks` processes of this test (the conduit the facade picks, 4 MiB
/// segments, gex-rma's and gex-coll's layers); the job must succeed. The matrix takes
/// a minute or two on a loaded 2-core machine, hence a watchdog of 10 minutes rather
/// than the runner's default.
fn launch<J: Job<Output = ()>>(ranks: u32, job: J) {
    launch_with(ranks, None, job);
}

/// As [`launch`], with wait policy `wait` (`None`: automatic).
fn launch_with<J: Job<Output = ()>>(ranks: u32, wait: Option<gex_core::WaitPolicy>, job: J) {
    launch_env(ranks, wait, &[], job);
}

/// As [`launch_with`], with environment variables `env` set in every rank.
fn launch_env<J: Job<Output = ()>>(
    ranks: u32,
    wait: Option<gex_core::WaitPolicy>,
    env: &[(&str, &str)],
    job: J,
) {
    env.iter()
        .fold(Procs::new(ranks), |p, &(k, v)| p.env(k, v))
        .timeout(std::time::Duration::from_secs(600))
        .run(|boot| {
            let b = layers().segment_size(4 << 20);
            let b = match wait {
                Some(w) => b.wait_policy(w),
                None => b,
            };
            gex::init_with_boot(b, boot, None, job).unwrap();
        })
        .assert_success();
}

#[test]
fn procs_matrix_4() {
    launch(4, Matrix);
}

#[test]
fn procs_mismatch_3() {
    launch(3, Mismatch);
}

#[test]
fn procs_single_mode_3() {
    launch(3, SingleMode);
}

#[test]
fn procs_ring_2() {
    launch(2, Ring);
}

#[test]
fn procs_ring_8() {
    launch(8, Ring);
}

#[test]
fn procs_ring_wakeups_3() {
    launch_with(3, Some(gex_core::WaitPolicy::Block), RingWake);
}

/// With 16 yields before a sleep (`GEX_COLL_SLEEP_YIELDS`): a loaded machine, where
/// every yield may cost a time slice, still gets through them within the pauses.
#[test]
fn procs_slot_sleeps_spin_then_block_3() {
    launch_env(
        3,
        Some(gex_core::WaitPolicy::SpinThenBlock { spins: 0 }),
        &[("GEX_COLL_SLEEP_YIELDS", "16")],
        SlotSleeps,
    );
}

#[test]
fn procs_slot_wakeups_3() {
    launch_with(3, Some(gex_core::WaitPolicy::Block), SlotWake);
}

/// Runs `job()` on `ranks` thread ranks of this process (gex-boot's thread bootstrap)
/// over the smp conduit, 4 MiB segments, gex-rma's and gex-coll's layers, wait policy
/// `wait` (`None`: automatic); every rank must succeed.
fn threads<J: Job<Output = ()>>(
    ranks: u32,
    wait: Option<gex_core::WaitPolicy>,
    job: impl Fn() -> J + Sync,
) {
    gex::boot::threads::run(ranks, |boot| {
        let b = layers().segment_size(4 << 20);
        let b = match wait {
            Some(w) => b.wait_policy(w),
            None => b,
        };
        gex::init_with_boot(b, Box::new(boot), Some("smp"), job()).unwrap();
    })
    .unwrap();
}

#[test]
fn threads_matrix_4() {
    threads(4, None, || Matrix);
}

#[test]
fn threads_ring_2() {
    threads(2, None, || Ring);
}

#[test]
fn threads_ring_8() {
    threads(8, None, || Ring);
}

#[test]
fn threads_ring_wakeups_3() {
    threads(3, Some(gex_core::WaitPolicy::Block), || RingWake);
}

#[test]
fn threads_slot_wakeups_3() {
    threads(3, Some(gex_core::WaitPolicy::Block), || SlotWake);
}

/// Two processes of two thread ranks each (`gex_boot::threads::ThreadJob::within` over
/// each process's fork bootstrap, as `gex-run -n 2 --threads 2` with
/// `threads::run_from_env` does): the matrix on 4 ranks, smp between the processes and
/// between the threads of each.
#[test]
fn mixed_matrix_2x2() {
    Procs::new(2)
        .timeout(std::time::Duration::from_secs(600))
        .run(|boot| {
            let job = gex::boot::threads::ThreadJob::within(boot, 2).unwrap();
            job.run(|tb| {
                let b = layers().segment_size(4 << 20);
                gex::init_with_boot(b, Box::new(tb), Some("smp"), Matrix).unwrap();
            })
            .unwrap();
        })
        .assert_success();
}
