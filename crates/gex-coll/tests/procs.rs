//! Collectives in real multi-process jobs started by gex-testkit's process runner, on
//! the conduit the facade selects (`GEX_CONDUIT`, default `smp`: processes sharing
//! memory through rings). The code is generic over the conduit, like the rest of
//! gex-coll. A smaller matrix than on the simulator: every operation with every
//! algorithm on 4 processes for two sizes (one above the Medium limit), the tuned
//! choice on split teams, the blocking calls over private and over segment buffers
//! (published by reference), and single address mode with signaling put and
//! rendezvous (3 processes).

mod common;

use common::{buffer_matrix, bytes, matrix, matrix_mode, reference, segment_matrix};
use gex::spi::Conduit;
use gex::{Client, ClientBuilder, Job};
use gex_coll::{CollEp, OpKind, Opts, Scratch, Single, SyncMode};
use gex_rma::RmaEp;
use gex_testkit::procs::Procs;

struct Matrix;

impl Job for Matrix {
    type Output = ();
    fn run<C: Conduit>(self, client: Client<C>) {
        let mut c = CollEp::new(RmaEp::new(client.endpoint(0).unwrap()).unwrap()).unwrap();
        let w = c.world().clone();
        let ran = matrix(&mut c, &w, &[1, 9000]);
        assert!(ran > 100, "{ran}");
        let r = w.rank();
        let t = c.split(&w, Some(r / 2), r, Scratch::None).unwrap().unwrap();
        assert_eq!(t.size(), 2);
        matrix(&mut c, &t, &[5]);
        // The blocking calls (direct shared-memory path on smp), blocks up to three
        // rounds of the world's slot.
        let direct = c.direct_calls();
        matrix_mode(&mut c, &w, &[1, 9000, 70_000], true);
        matrix_mode(&mut c, &t, &[5, 9000], true);
        assert!(c.shared_memory(&w) == (c.direct_calls() > direct));
        // Buffers in the segments: blocks of 16 KiB and more published by reference
        // (two slot rounds at 9000 u64 on 4 members' exchange).
        let by_ref = c.by_reference_calls();
        segment_matrix(&mut c, &w, &[3, 2100, 9000]);
        assert!(c.shared_memory(&w) == (c.by_reference_calls() > by_ref));
        // Private buffers: blocks of 16 KiB and more of the copying operations are
        // read across the processes with process_vm_readv where the machine allows.
        let cma = c.cma_calls();
        buffer_matrix(&mut c, &w, &[3, 2100, 9000], false);
        let want = c.shared_memory(&w) && gex_coll::cma_capable();
        assert!(
            want == (c.cma_calls() > cma),
            "CMA publications: {} (capable here: {})",
            c.cma_calls() - cma,
            gex_coll::cma_capable()
        );
        c.barrier(&w).unwrap();
        assert_eq!(c.dropped_messages(), 0);
        drop(c);
        client.finalize().unwrap();
    }
}

struct SingleMode;

impl Job for SingleMode {
    type Output = ();
    fn run<C: Conduit>(self, client: Client<C>) {
        let mut c = CollEp::new(RmaEp::new(client.endpoint(0).unwrap()).unwrap()).unwrap();
        let w = c.world().clone();
        let (p, me) = (w.size(), w.rank() as usize);
        let mut salt = 0;
        for op in [OpKind::Broadcast, OpKind::GatherAll] {
            for alg in c.algorithms(op).into_iter().filter(|a| a.contains('+')) {
                for (i, o) in [
                    (SyncMode::My, SyncMode::My),
                    (SyncMode::No, SyncMode::No),
                    (SyncMode::All, SyncMode::All),
                ] {
                    salt += 1;
                    let n = 40_000usize;
                    let root = salt % p;
                    let dst: Vec<usize> = (0..p as usize).map(|r| 300_000 + 128 * r).collect();
                    let inputs: Vec<Vec<u8>> = (0..p as usize)
                        .map(|r| bytes(r, u64::from(salt), n))
                        .collect();
                    c.endpoint().segment().write(0, &inputs[me]).unwrap();
                    c.barrier(&w).unwrap();
                    let addrs = Single {
                        src: Some(vec![0; p as usize]),
                        dst: dst.clone(),
                    };
                    let opts = Opts::sync(i, o).with_algorithm(&alg);
                    let h = match c.start_single::<u8>(&w, op, root, n, &addrs, None, &opts) {
                        Err(gex_coll::CollError::Unsupported { .. }) => continue,
                        x => x.unwrap(),
                    };
                    c.wait(h).unwrap();
                    let want = reference(op, root as usize, n, &inputs, None);
                    let mut got = vec![0u8; want[me].len()];
                    c.endpoint().segment().read(dst[me], &mut got).unwrap();
                    assert!(got == want[me], "{op} {alg} {i:?} {o:?}");
                    c.barrier(&w).unwrap();
                }
            }
        }
        drop(c);
        client.finalize().unwrap();
    }
}

/// Runs `job` on `ranks` processes of this test (the conduit the facade picks, 4 MiB
/// segments); the job must succeed. The matrix takes a minute or two on a loaded
/// 2-core machine, hence a watchdog of 10 minutes rather than the runner's default.
fn launch<J: Job<Output = ()>>(ranks: u32, job: J) {
    Procs::new(ranks)
        .timeout(std::time::Duration::from_secs(600))
        .run(|boot| {
            gex::init_with_boot(ClientBuilder::new().segment_size(4 << 20), boot, None, job)
                .unwrap();
        })
        .assert_success();
}

#[test]
fn procs_matrix_4() {
    launch(4, Matrix);
}

#[test]
fn procs_single_mode_3() {
    launch(3, SingleMode);
}
