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
