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
    let back = ep.get_owned(vec![0u64; 1], slot, Nb)?; // an Event<Vec<u64>>
    // A remote atomic: count the ranks in a word of rank 0's segment.
    let counter = GlobalPtr::<u64>::new(world.member(0).expect("rank 0"), 4096);
    let domain = ep.atomic_domain::<u64>(&world, AtomicOp::Add.into())?;
    let added = ep.atomic(&domain, AtomicOp::Add, counter, 1, Nb)?;
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
        let mut count = [0u64];
        ep.get(&mut count, counter)?;
        assert_eq!(count[0], u64::from(n));
        println!(
            "{n} ranks: sum of ranks {}, atomic count {}",
            sum[0], count[0]
        );
    }
    Ok(())
}
