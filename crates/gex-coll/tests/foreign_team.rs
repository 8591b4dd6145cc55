//! Soundness probes: a `Team` is plain data that safe code may keep, clone and hand to
//! any thread (`Send + Sync`), but its layer extension holds the addresses of the
//! shared-memory areas of the job that made it. A collective on a team made by another
//! client (another job in the same process, or a client since dropped) must be refused,
//! never run through memory that belongs to another job (or was unmapped with it).

use gex_coll::{Allreduce, BuiltinOp, CollError, CollExt, Scratch, Team};
use gex_core::Blocking;
use gex_testkit::sim::{SimConfig, run_sim};
use std::sync::{Barrier, Mutex};

fn layers() -> gex_core::ClientBuilder<(((), gex_rma::Rma), gex_coll::Coll)> {
    gex_core::ClientBuilder::new()
        .layer::<gex_rma::Rma>()
        .layer::<gex_coll::Coll>()
        .segment_size(1 << 16)
}

fn shm() -> SimConfig {
    SimConfig {
        shared_memory: true,
        ..SimConfig::default()
    }
}

/// Job A splits its world into a team with a shared-memory channel and hands each
/// member's team to the same rank of job B, which runs at the same time in the same
/// process. Rank `r` of job B has the same address (`EpAddr::new(r, 0)`) as the
/// member that made it, but job A's areas are not its memory: before the fix the
/// allreduce ran through job A's slots (publishing into them without waiting for job
/// A's readers, which count acknowledgements B never saw) and returned `Ok`.
#[test]
fn a_team_of_another_job_is_refused() {
    let teams: Mutex<Vec<Option<Team>>> = Mutex::new(vec![None, None]);
    let handed = Barrier::new(4);
    let done = Barrier::new(4);
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| {
            run_sim(2, shm(), layers, |client| {
                let mut ep = client.endpoint(0).unwrap();
                let world = ep.world();
                let t = ep
                    .split(&world, Some(0), client.rank(), Scratch::None)
                    .unwrap()
                    .expect("a member");
                assert!(ep.shared_memory(&t), "the split team has a channel");
                let sum = ep
                    .collective(&t, Allreduce::new(vec![1u64], BuiltinOp::Sum), Blocking)
                    .unwrap();
                teams.lock().unwrap()[client.rank() as usize] = Some(t.clone());
                handed.wait();
                done.wait();
                // Job A's own team still works for job A.
                let again = ep
                    .collective(&t, Allreduce::new(vec![2u64], BuiltinOp::Sum), Blocking)
                    .unwrap();
                ep.barrier(&world).unwrap();
                (sum, again)
            })
        });
        let b = s.spawn(|| {
            run_sim(2, shm(), layers, |client| {
                let mut ep = client.endpoint(0).unwrap();
                handed.wait();
                let t = teams.lock().unwrap()[client.rank() as usize]
                    .take()
                    .expect("job A's team");
                assert_eq!(t.me(), ep.addr(), "the same address in both jobs");
                let r = ep.collective(&t, Allreduce::new(vec![5u64], BuiltinOp::Sum), Blocking);
                let shared = ep.shared_memory(&t);
                done.wait();
                let world = ep.world();
                ep.barrier(&world).unwrap();
                (r, shared)
            })
        });
        (a.join().unwrap(), b.join().unwrap())
    });
    assert_eq!(a, vec![(vec![2], vec![4]); 2]);
    for (r, shared) in b {
        assert!(
            matches!(r, Err(CollError::NotMember { .. })),
            "a collective of job B on job A's team: {r:?} (it ran through job A's areas)"
        );
        assert!(!shared, "job A's channel is not job B's");
    }
}
