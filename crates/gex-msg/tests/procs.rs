//! The messaging layer in real multi-process jobs started by gex-testkit's process
//! runner, on the conduit the facade selects (`GEX_CONDUIT`, default `smp`: processes
//! sharing memory through rings): the any-source storm of `sim.rs` (eager and
//! rendezvous messages from every peer racing with wildcard receives) on 3 and 4
//! processes, and a synchronous ping-pong.

mod common;

use gex::Job;
use gex::spi::Conduit;
use gex_core::{Client, ClientBuilder, Config};
use gex_msg::{Comm, Msg, MsgExt};
use gex_testkit::procs::Procs;

struct Storm {
    eager: usize,
}

impl Job for Storm {
    type Output = ();
    fn run<C: Conduit>(self, client: Client<C>) {
        let mut ep = client.endpoint(0).unwrap();
        common::all_to_all(&mut ep, 60, 3, 10, self.eager);
        // Synchronous ping-pong between 0 and 1, eager and rendezvous.
        let me = ep.addr().rank;
        for len in [8usize, 100_000] {
            let mut buf = vec![0u8; len];
            match me {
                0 => {
                    ep.ssend(Comm::WORLD, 1, 9, &vec![3; len]).unwrap();
                    ep.recv(Comm::WORLD, Some(1), Some(9), &mut buf).unwrap();
                    assert_eq!(buf, vec![4; len]);
                }
                1 => {
                    ep.recv(Comm::WORLD, None, Some(9), &mut buf).unwrap();
                    assert_eq!(buf, vec![3; len]);
                    ep.ssend(Comm::WORLD, 0, 9, &vec![4; len]).unwrap();
                }
                _ => {}
            }
        }
        gex_testkit::exchange_barrier(&mut ep).unwrap();
        drop(ep);
        client.finalize().unwrap();
    }
}

fn launch(ranks: u32, eager: usize) {
    Procs::new(ranks)
        .timeout(std::time::Duration::from_secs(300))
        .run(|boot| {
            let b = ClientBuilder::new()
                .layer::<Msg>()
                .config(Config::from_pairs([(
                    "GEX_MSG_EAGER_MAX",
                    eager.to_string(),
                )]));
            gex::init_with_boot(b, boot, None, Storm { eager }).unwrap();
        })
        .assert_success();
}

#[test]
fn procs_any_source_storm_3() {
    launch(3, 100);
}

#[test]
fn procs_any_source_storm_4_default_threshold() {
    launch(4, 8192);
}

/// The cooperative copy between two processes (module `gex_msg::coop`): blocking
/// standard sends of rendezvous messages lend the caller's slice, and the receiver and
/// the sender copy the chunks together (or, when the receiver comes late or asks for
/// chunks, the loan is withdrawn into a copy).
struct Coop;

fn pattern(len: usize, round: usize, from: u32) -> Vec<u8> {
    (0..len)
        .map(|i| (i.wrapping_mul(31) ^ round.wrapping_mul(7) ^ from as usize) as u8)
        .collect()
}

impl Job for Coop {
    type Output = ();
    fn run<C: Conduit>(self, client: Client<C>) {
        let mut ep = client.endpoint(0).unwrap();
        let me = ep.addr().rank;
        let peer = 1 - me;
        let w = Comm::WORLD;
        // 1. Ping-pong of blocking sends and receives (the receiver waits in `recv`:
        //    it claims each loan), sizes from one to many chunks, odd lengths.
        for (round, len) in [
            9000usize,
            40_000,
            100_000,
            1 << 20,
            (1 << 20) + 4097,
            3 << 20,
        ]
        .into_iter()
        .enumerate()
        {
            for rep in 0..3 {
                let r = round * 3 + rep;
                let mut buf = vec![0u8; len];
                if me == 0 {
                    ep.send(w, 1, 5, &pattern(len, r, 0)).unwrap();
                    let st = ep.recv(w, Some(1), Some(5), &mut buf).unwrap();
                    assert_eq!(st.len, len);
                    assert!(buf == pattern(len, r, 1), "round {r}: {len} bytes from 1");
                } else {
                    let st = ep.recv(w, Some(0), Some(5), &mut buf).unwrap();
                    assert_eq!(st.len, len);
                    assert!(buf == pattern(len, r, 0), "round {r}: {len} bytes from 0");
                    ep.send(w, 0, 5, &pattern(len, r, 1)).unwrap();
                }
            }
        }
        let st = gex_core::layer::with::<Msg, _, _>(&mut ep, |m, _| m.stats()).unwrap();
        if gex_sync::cma::cma_capable() && C::NAME == "smp" {
            // Every one read in place from the caller's slice (the receiver waits in
            // `recv` and the sender lends for up to 200 ms: `GEX_MSG_LEND_WAIT`),
            // none in chunks.
            assert_eq!(
                (st.rndv_in_place, st.rndv_single_copy, st.rndv_fallback),
                (18, 18, 0),
                "{st:?}"
            );
        }
        gex_testkit::exchange_barrier(&mut ep).unwrap();
        // 2. Crossing sends: both send before receiving. Neither receiver is there to
        //    claim, so each loan is withdrawn after the send's budget and the receiver
        //    reads the copy (no deadlock).
        let len = 1 << 20;
        ep.send(w, peer, 6, &pattern(len, 100, me)).unwrap();
        let mut buf = vec![0u8; len];
        ep.recv(w, Some(peer), Some(6), &mut buf).unwrap();
        assert!(buf == pattern(len, 100, peer), "crossing");
        gex_testkit::exchange_barrier(&mut ep).unwrap();
        // 3. A receive posted first (`irecv`): the matching runs in the handler.
        if me == 1 {
            let ev = ep.irecv(w, Some(0), Some(7), vec![0u8; len]).unwrap();
            gex_testkit::exchange_barrier(&mut ep).unwrap();
            let got = ep.wait(ev).unwrap();
            assert!(got.data == pattern(len, 101, 0), "posted receive");
        } else {
            gex_testkit::exchange_barrier(&mut ep).unwrap();
            ep.send(w, 1, 7, &pattern(len, 101, 0)).unwrap();
        }
        // 4. Truncation: the receiver refuses the loan; the send still completes.
        if me == 0 {
            ep.send(w, 1, 8, &pattern(len, 102, 0)).unwrap();
        } else {
            let mut small = vec![0u8; len / 2];
            let e = ep.recv(w, Some(0), Some(8), &mut small).unwrap_err();
            assert!(matches!(e, gex_msg::MsgError::Truncated { .. }), "{e:?}");
        }
        // 5. A late receiver (1 s, past both 200 ms loans): each loan is withdrawn into
        //    a copy, which the receiver reads once it asked where it is (`ADDR`). The
        //    barrier starts the sender's loans and the receiver's sleep together (the
        //    truncated step above may end much later at the sender; without it the
        //    second loan could still be open when the receiver came).
        gex_testkit::exchange_barrier(&mut ep).unwrap();
        if me == 0 {
            ep.send(w, 1, 9, &pattern(len, 103, 0)).unwrap();
            // The caller's buffer is free again: overwrite a sent one at once.
            let mut again = pattern(len, 104, 0);
            ep.send(w, 1, 9, &again).unwrap();
            again.fill(0);
        } else {
            std::thread::sleep(std::time::Duration::from_millis(1000));
            let mut buf = vec![0u8; len];
            ep.recv(w, Some(0), Some(9), &mut buf).unwrap();
            assert!(buf == pattern(len, 103, 0), "late receiver");
            ep.recv(w, Some(0), Some(9), &mut buf).unwrap();
            assert!(buf == pattern(len, 104, 0), "late receiver, second");
            let st = gex_core::layer::with::<Msg, _, _>(&mut ep, |m, _| m.stats()).unwrap();
            if gex_sync::cma::cma_capable() && C::NAME == "smp" {
                // Both late ones were read from the sender's copy by address (`ADDR`),
                // not in chunks. (The crossing message of step 2 may go either way, both
                // single copies: by address if its loan was withdrawn before this rank's
                // own send ended, in place if this rank's send started first and ended
                // while the peer's loan was still open; the test once counted it as by
                // address and failed about one run in three.)
                assert!(st.rndv_single_copy - st.rndv_in_place >= 2, "{st:?}");
                assert_eq!(st.rndv_fallback, 0, "{st:?}");
            }
        }
        gex_testkit::exchange_barrier(&mut ep).unwrap();
        drop(ep);
        client.finalize().unwrap();
    }
}

#[test]
fn procs_cooperative_copy_2() {
    Procs::new(2)
        .timeout(std::time::Duration::from_secs(300))
        .run(|boot| {
            let b = ClientBuilder::new()
                .layer::<Msg>()
                .config(Config::from_pairs([("GEX_MSG_LEND_WAIT", "200000")]));
            gex::init_with_boot(b, boot, None, Coop).unwrap();
        })
        .assert_success();
}

/// Nonblocking standard sends to another process of the host (`GEX_MSG_NB_EAGER_MAX`,
/// default 64 KiB): eager up to the limit when the ring takes the message at once,
/// by rendezvous above it or when the ring is full; order and bytes kept across the
/// two paths.
struct NbEager;

impl Job for NbEager {
    type Output = ();
    fn run<C: Conduit>(self, client: Client<C>) {
        let mut ep = client.endpoint(0).unwrap();
        let me = ep.addr().rank;
        let w = Comm::WORLD;
        // 1. Receives posted first, the ring empty: 9000 and 65536 bytes go eager
        //    (above GEX_MSG_EAGER_MAX, at most GEX_MSG_NB_EAGER_MAX), 65537 by
        //    rendezvous.
        let sizes = [9000usize, 65536, 65537];
        let posted: Vec<_> = if me == 1 {
            sizes
                .iter()
                .map(|&n| ep.irecv(w, Some(0), Some(1), vec![0; n]).unwrap())
                .collect()
        } else {
            Vec::new()
        };
        gex_testkit::exchange_barrier(&mut ep).unwrap();
        if me == 0 {
            let before = common::stats(&mut ep);
            let sends: Vec<_> = sizes
                .iter()
                .enumerate()
                .map(|(i, &n)| ep.isend(w, 1, 1, &pattern(n, i, 0)).unwrap())
                .collect();
            for s in sends {
                ep.wait(s).unwrap();
            }
            let after = common::stats(&mut ep);
            assert_eq!(after.eager_sent - before.eager_sent, 2, "{after:?}");
            assert_eq!(after.rndv_sent - before.rndv_sent, 1, "{after:?}");
        } else {
            for (i, ev) in posted.into_iter().enumerate() {
                let got = ep.wait(ev).unwrap();
                assert!(got.data == pattern(sizes[i], i, 0), "message {i}");
            }
        }
        gex_testkit::exchange_barrier(&mut ep).unwrap();
        // 2. A flood while the receiver does not poll (it sleeps): the ring fills,
        //    later sends go by rendezvous; the receiver takes them all afterwards,
        //    in order. (A receiver that polls drains the ring into its unexpected
        //    queue: eager messages cost it memory, as in MPI.)
        const FLOOD: usize = 40;
        let n = 65536;
        if me == 0 {
            let before = common::stats(&mut ep);
            let sends: Vec<_> = (0..FLOOD)
                .map(|i| ep.isend(w, 1, 2, &pattern(n, 100 + i, 0)).unwrap())
                .collect();
            let after = common::stats(&mut ep);
            assert!(after.eager_sent > before.eager_sent, "{after:?}");
            assert!(after.rndv_sent > before.rndv_sent, "{after:?}");
            gex_testkit::exchange_barrier(&mut ep).unwrap();
            for s in sends {
                ep.wait(s).unwrap();
            }
        } else {
            std::thread::sleep(std::time::Duration::from_millis(300));
            gex_testkit::exchange_barrier(&mut ep).unwrap();
            let mut buf = vec![0u8; n];
            for i in 0..FLOOD {
                let st = ep.recv(w, Some(0), Some(2), &mut buf).unwrap();
                assert_eq!(st.len, n);
                assert!(
                    buf == pattern(n, 100 + i, 0),
                    "flood message {i} out of order or wrong"
                );
            }
        }
        gex_testkit::exchange_barrier(&mut ep).unwrap();
        common::settle(&mut ep);
        drop(ep);
        client.finalize().unwrap();
    }
}

#[test]
fn procs_nonblocking_sends_eager_up_to_the_limit_2() {
    Procs::new(2)
        .timeout(std::time::Duration::from_secs(300))
        .run(|boot| {
            let b = ClientBuilder::new().layer::<Msg>();
            gex::init_with_boot(b, boot, None, NbEager).unwrap();
        })
        .assert_success();
}
