//! Bad input that needs a conduit with a Long limit below the segment (the simulator
//! configured so; loopback and smp take Longs as large as the segment): every Long
//! form over the destination's `max_long` is `AmError::PayloadTooLarge`, sending
//! nothing (docs/testing.md, "Bad input").

use gex_core::{Am, AmError, Blocking, Body, ClientBuilder, HandlerId, Nb, Nbi, Token};
use gex_testkit::sim::{SimConfig, run_sim};
use std::sync::{Arc, Mutex};

const MAX_LONG: usize = 1024;

#[test]
fn longs_over_the_conduits_limit_are_payload_too_large() {
    let cfg = SimConfig {
        max_long: MAX_LONG,
        ..SimConfig::default()
    };
    run_sim(
        1,
        cfg,
        || ClientBuilder::new().segment_size(4096),
        |client| {
            let mut ep = client.endpoint(0).unwrap();
            let me = ep.addr();
            assert_eq!(ep.max_long(me), MAX_LONG);
            let big = vec![7u8; MAX_LONG + 1];
            let too_large = AmError::PayloadTooLarge {
                len: MAX_LONG + 1,
                max: MAX_LONG,
            };
            // A request handler that tries a Long reply over the limit, then a good one.
            let replied: Arc<Mutex<Vec<Result<(), AmError>>>> = Arc::default();
            let r = replied.clone();
            let rp = HandlerId::at(131);
            let rq = ep
                .register_at(130, move |t: &mut Token<'_>, _am: Am<'_>| {
                    let mut v = r.lock().unwrap();
                    v.push(t.reply(rp, Body::long(&[], &[1u8; MAX_LONG + 1], 0)));
                    v.push(t.reply(rp, Body::short(&[])));
                })
                .unwrap();
            ep.register_at(rp.index(), |_t: &mut Token<'_>, _am: Am<'_>| {})
                .unwrap();
            assert_eq!(
                ep.request(me, rq, Body::long(&[], &big, 0)),
                Err(too_large.clone())
            );
            assert_eq!(
                ep.try_request(me, rq, Body::long(&[], &big, 0)),
                Err(too_large.clone())
            );
            assert_eq!(
                ep.request_owned(me, rq, Body::long(&[], big.clone(), 0), Blocking)
                    .map(drop),
                Err(too_large.clone())
            );
            assert_eq!(
                ep.request_owned(me, rq, Body::long(&[], big.clone(), 0), Nb)
                    .map(drop),
                Err(too_large.clone())
            );
            assert_eq!(
                ep.request_owned(me, rq, Body::long(&[], big.clone(), 0), Nbi),
                Err(too_large.clone())
            );
            assert_eq!(
                ep.request_with(me, rq, Body::long(&[], MAX_LONG + 1, 0), |_| 0),
                Err(too_large.clone())
            );
            assert_eq!(
                ep.try_request_with(me, rq, Body::long(&[], MAX_LONG + 1, 0), |_| 0),
                Err(too_large.clone())
            );
            assert_eq!(ep.stats().sent.iter().sum::<u64>(), 0, "a failed call sent");
            // The reply over the limit fails in the handler; the good one goes.
            ep.request(me, rq, Body::short(&[])).unwrap();
            ep.wait_until(|| replied.lock().unwrap().len() == 2);
            assert_eq!(*replied.lock().unwrap(), vec![Err(too_large), Ok(())]);
            gex_testkit::exchange_barrier(&mut ep).unwrap();
        },
    );
}
