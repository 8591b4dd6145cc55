//! One-sided put and get, a remote atomic and an allreduce, on one endpoint with one
//! event type. Run alone it starts itself on 4 ranks; under a launcher it is one rank.
//!
//! Every rank puts its rank number into the next rank's segment, gets it back from
//! there (nonblocking, into an owned buffer), adds 1 to a counter on rank 0 with a
//! remote atomic, and the ranks add up their numbers with an allreduce.
use gex::prelude::*;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = gex::launch_or_start(4, gex::builder().segment_size(1 << 20))?;
    let mut ep = client.endpoint(0)?;
    let world = ep.world();
    let (me, n) = (world.rank(), world.size());
    let next = world.member((me + 1) % n).expect("a member");

    // Put my rank into the next rank's segment (at my own slot), then read it back.
    let slot = GlobalPtr::<u64>::new(next, 8 * me as usize);
    ep.put(slot, &[u64::from(me)], Blocking)?;
    let back = ep.get(vec![0u64; 1], slot, Nb)?; // an Event<Vec<u64>>: owns the buffer
    // A remote atomic: count the ranks in a word of rank 0's segment.
    let counter = GlobalPtr::<u64>::new(world.member(0).expect("rank 0"), 4096);
    // (collective: every rank asks for the same operations)
    let domain = ep.atomic_domain::<u64>(&world, AtomicOps::ADD | AtomicOps::GET)?;
    let added = ep.atomic(&domain, counter, AtomicOp::Add(1), AtomicFlags::empty(), Nb)?;
    // One progress engine: waiting on either event drives both.
    assert_eq!(ep.wait(back)?, vec![u64::from(me)]);
    ep.wait(added)?;

    let sum = ep.collective(
        &world,
        Allreduce::new(vec![u64::from(me)], BuiltinOp::Sum),
        Blocking,
    )?;
    assert_eq!(sum[0], u64::from(n * (n - 1) / 2));
    ep.barrier(&world)?;
    if me == 0 {
        let f = AtomicFlags::empty();
        let count = ep.fetch_atomic(&domain, counter, AtomicOp::Get, f, Blocking)?;
        assert_eq!(count, u64::from(n));
        println!("{n} ranks: sum of ranks {}, atomic count {count}", sum[0]);
    }
    Ok(())
}
