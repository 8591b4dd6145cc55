//! An MPI-style program on gex-msg (facade feature `msg`): a manager and workers.
//! Run alone it starts itself on 4 ranks; under a launcher it is one rank.
//!
//! Rank 0 hands out work items with tagged sends and collects the answers with
//! any-source receives (whichever worker is done first), then tells every worker to
//! stop; each worker receives from rank 0 (any tag: work or stop), squares the
//! numbers of its item and sends them back. Large items go by rendezvous, small ones
//! eagerly: the program does not see the difference.
//!
//! `cargo run -p gex --features msg --example mpi_style`
use gex::prelude::*;

const WORK: u32 = 1;
const DONE: u32 = 2;
const STOP: u32 = 3;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = gex::launch_or_start(4, gex::builder().segment_size(1 << 16))?;
    let mut ep = client.endpoint(0)?;
    let world = ep.world();
    let (me, n) = (world.rank(), world.size());
    let w = Comm::WORLD;
    if n < 2 {
        println!("needs at least 2 ranks");
        return Ok(());
    }
    if me == 0 {
        // Items of 10 .. 40 000 numbers (u32, little-endian).
        let items: Vec<Vec<u32>> = (0..12u32)
            .map(|i| (0..10 + i * i * 300).map(|k| k + i).collect())
            .collect();
        let mut next = 0;
        let mut busy = 0;
        for worker in 1..n {
            if next < items.len() {
                ep.send(w, worker, WORK, &bytes(&items[next]))?;
                next += 1;
                busy += 1;
            }
        }
        let mut total = 0u64;
        let mut buf = vec![0u8; 4 * 40_000 + 64];
        while busy > 0 {
            let st = ep.recv(w, None, Some(DONE), &mut buf)?; // any worker
            total += words(&buf[..st.len])
                .iter()
                .map(|&x| u64::from(x))
                .sum::<u64>();
            if next < items.len() {
                ep.send(w, st.source, WORK, &bytes(&items[next]))?;
                next += 1;
            } else {
                busy -= 1;
            }
        }
        for worker in 1..n {
            ep.send(w, worker, STOP, &[])?;
        }
        let want: u64 = items.iter().flatten().map(|&x| u64::from(x * x)).sum();
        assert_eq!(total, want);
        println!("{n} ranks: {} items, sum of squares {total}", items.len());
    } else {
        let mut buf = vec![0u8; 4 * 40_000 + 64];
        loop {
            let st = ep.recv(w, Some(0), None, &mut buf)?; // work or stop, in order
            if st.tag == STOP {
                break;
            }
            let out: Vec<u32> = words(&buf[..st.len]).iter().map(|x| x * x).collect();
            ep.send(w, 0, DONE, &bytes(&out))?;
        }
    }
    ep.barrier(&world)?;
    Ok(())
}

fn bytes(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn words(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}
