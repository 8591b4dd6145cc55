//! The messaging layer on the one-rank loopback conduit (messages to self): eager and
//! rendezvous, every operation, wildcards, order, truncation and the misuse errors.

use gex_core::boot::Singleton;
use gex_core::loopback::Loopback;
use gex_core::{ClientBuilder, Config, Endpoint};
use gex_msg::{Comm, Msg, MsgError, MsgExt, TAG_MAX};

fn client(eager_max: &str) -> gex_core::Client<Loopback> {
    ClientBuilder::new()
        .layer::<Msg>()
        .config(Config::from_pairs([("GEX_MSG_EAGER_MAX", eager_max)]))
        .init::<Loopback>(Box::new(Singleton::new()))
        .unwrap()
}

/// Quiet once the control messages in flight (a single-copy rendezvous's `DONE`)
/// have been handled: a few polls at most.
fn quiet(ep: &mut Endpoint<Loopback>) -> bool {
    for _ in 0..4 {
        if gex_core::layer::with::<Msg, _, _>(ep, |m, _| m.is_quiet()).unwrap() {
            return true;
        }
        ep.poll();
    }
    false
}

fn bytes(n: usize, salt: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31) ^ salt).collect()
}

#[test]
fn an_event_of_another_endpoint_is_an_error() {
    let c = ClientBuilder::new()
        .layer::<Msg>()
        .endpoints(2)
        .init::<Loopback>(Box::new(Singleton::new()))
        .unwrap();
    let mut a = c.endpoint(0).unwrap();
    let mut b = c.endpoint(1).unwrap();
    let ev = a.irecv(Comm::WORLD, None, None, vec![0; 4]).unwrap();
    assert!(matches!(
        b.wait(ev),
        Err(MsgError::Event(gex_core::EventError::WrongEndpoint { .. }))
    ));
}

/// The cases (each marked `#[test]`), under their names: `ep` is endpoint 0 of a fresh
/// [`client`] with that eager maximum, `w` the world communicator; after the body, the
/// endpoint must be [`quiet`].
macro_rules! loopback_tests {
    ($($(#[$m:meta])* fn $name:ident($ep:ident, $w:ident, eager_max = $eager:literal) $body:block)*) => {$(
        $(#[$m])*
        fn $name() {
            let c = client($eager);
            let mut $ep = c.endpoint(0).unwrap();
            let $w = Comm::WORLD;
            $body
            assert!(quiet(&mut $ep));
        }
    )*};
}

loopback_tests! {
#[test]
fn eager_and_rendezvous_every_call(ep, w, eager_max = "256") {
    // 0 bytes, eager, the threshold, rendezvous of one and of several chunks.
    for (i, n) in [0usize, 1, 255, 256, 257, 5000, 200_000]
        .into_iter()
        .enumerate()
    {
        let data = bytes(n, i as u8);
        // Send first (unexpected), then receive.
        ep.send(w, 0, 5, &data)
            .unwrap_or_else(|e| panic!("{n}: {e}"));
        let mut buf = vec![0u8; n + 3];
        let st = ep.recv(w, Some(0), Some(5), &mut buf).unwrap();
        assert_eq!((st.source, st.tag, st.len), (0, 5, n));
        assert_eq!(&buf[..n], &data[..]);
        // Receive posted first.
        let ev = ep.irecv(w, None, None, vec![0; n]).unwrap();
        let sent = ep.isend(w, 0, 6, &data).unwrap();
        let got = ep.wait(ev).unwrap();
        ep.wait(sent).unwrap();
        assert_eq!(got.data, data);
        assert_eq!(got.status.tag, 6);
        // Synchronous, receive posted first.
        let ev = ep.irecv(w, Some(0), Some(7), vec![0; n]).unwrap();
        ep.ssend(w, 0, 7, &data).unwrap();
        assert_eq!(ep.wait(ev).unwrap().data, data);
        // Synchronous nonblocking, receive after: not complete before the match.
        let s = ep.issend(w, 0, 8, &data).unwrap();
        for _ in 0..10 {
            ep.poll();
        }
        assert!(
            !s.is_done(),
            "{n}: an ssend completed before it was matched"
        );
        let mut buf = vec![0u8; n];
        ep.recv(w, None, Some(8), &mut buf).unwrap();
        ep.wait(s).unwrap();
        assert_eq!(buf, data);
        // Ready mode: the receive is posted first.
        let ev = ep.irecv(w, Some(0), Some(10), vec![0; n]).unwrap();
        ep.rsend(w, 0, 10, &data).unwrap();
        assert_eq!(ep.wait(ev).unwrap().data, data);
        // sendrecv to self.
        let mut buf = vec![0u8; n];
        let st = ep
            .sendrecv(w, 0, 9, &data, Some(0), Some(9), &mut buf)
            .unwrap();
        assert_eq!((st.len, &buf), (n, &data));
    }
    assert!(quiet(&mut ep));
    let st = gex_core::layer::with::<Msg, _, _>(&mut ep, |m, _| m.stats()).unwrap();
    assert!(st.eager_sent > 0 && st.rndv_sent > 0, "{st:?}");
}

#[test]
fn an_irecv_leaves_a_rendezvous_read_to_the_next_progress(ep, w, eager_max = "256") {
    // The request to send is here before the receive is posted: the receive
    // matches it at once but moves no byte inside `irecv` (so that what the
    // program does next, typically its own send, is not held back); the next
    // progress of the endpoint delivers it. Every size and content arrives
    // whole, also when one send's copy is reused by the next (module `stage`).
    for round in 0..4u8 {
        for n in [257usize, 5000, 200_000] {
            let data = bytes(n, round);
            let sent = ep.isend(w, 0, 3, &data).unwrap();
            for _ in 0..4 {
                ep.poll();
            }
            let ev = ep.irecv(w, Some(0), Some(3), vec![0; n]).unwrap();
            assert!(!ev.is_done(), "{n}: delivered inside irecv");
            let got = ep.wait(ev).unwrap();
            ep.wait(sent).unwrap();
            assert_eq!((got.data.len(), got.status.tag), (n, 3));
            assert!(got.data == data, "{n}, round {round}: wrong bytes");
        }
    }
}

#[test]
fn non_overtaking_and_wildcards(ep, w, eager_max = "64") {
    // Mixed eager and rendezvous messages of one (source, tag) arrive in order.
    let sizes = [10usize, 1000, 3, 70_000, 64, 65, 0];
    for (i, &n) in sizes.iter().enumerate() {
        ep.send(w, 0, 1, &bytes(n, i as u8)).unwrap();
        ep.send(w, 0, 2, &[i as u8]).unwrap();
    }
    // A specific tag skips the others; any tag takes the earliest.
    for (i, &n) in sizes.iter().enumerate() {
        let ev = ep.irecv(w, Some(0), Some(1), vec![0; 1 << 17]).unwrap();
        let got = ep.wait(ev).unwrap();
        assert_eq!(got.data, bytes(n, i as u8), "message {i} of tag 1");
    }
    for i in 0..sizes.len() {
        let ev = ep.irecv(w, None, None, vec![0; 4]).unwrap();
        let got = ep.wait(ev).unwrap();
        assert_eq!((got.data, got.status.tag), (vec![i as u8], 2));
    }
    // Contexts do not match each other.
    ep.send(Comm::new(1), 0, 3, b"ctx1").unwrap();
    ep.send(w, 0, 3, b"ctx0").unwrap();
    let mut buf = [0u8; 8];
    let st = ep.recv(w, None, Some(3), &mut buf).unwrap();
    assert_eq!(&buf[..st.len], b"ctx0");
    let st = ep.recv(Comm::new(1), None, None, &mut buf).unwrap();
    assert_eq!(&buf[..st.len], b"ctx1");
    // Posted receives match in posting order: a wildcard posted first wins.
    let a = ep.irecv(w, None, None, vec![0; 8]).unwrap();
    let b = ep.irecv(w, Some(0), Some(4), vec![0; 8]).unwrap();
    ep.send(w, 0, 4, b"first").unwrap();
    ep.send(w, 0, 4, b"second").unwrap();
    assert_eq!(ep.wait(a).unwrap().data, b"first");
    assert_eq!(ep.wait(b).unwrap().data, b"second");
}

#[test]
fn probe_and_iprobe(ep, w, eager_max = "128") {
    assert_eq!(ep.iprobe(w, None, None).unwrap(), None);
    ep.send(w, 0, 11, &bytes(1000, 1)).unwrap(); // rendezvous: RTS only
    ep.send(w, 0, 12, &bytes(10, 2)).unwrap();
    let st = ep.probe(w, None, Some(12)).unwrap();
    assert_eq!((st.source, st.tag, st.len), (0, 12, 10));
    let st = ep.iprobe(w, Some(0), None).unwrap().unwrap();
    assert_eq!((st.tag, st.len), (11, 1000));
    // Probing does not take: the receives still get both.
    let mut buf = vec![0u8; st.len];
    ep.recv(w, Some(0), Some(11), &mut buf).unwrap();
    assert_eq!(buf, bytes(1000, 1));
    ep.recv(w, None, None, &mut buf).unwrap();
    assert_eq!(ep.iprobe(w, None, None).unwrap(), None);
}

#[test]
fn truncation_consumes_the_message(ep, w, eager_max = "100") {
    for n in [50usize, 5000] {
        // Unexpected, blocking receive.
        ep.send(w, 0, 1, &bytes(n, 0)).unwrap();
        let mut small = [0u8; 10];
        let e = ep.recv(w, None, None, &mut small).unwrap_err();
        assert_eq!(
            e,
            MsgError::Truncated {
                len: n,
                capacity: 10,
                source_rank: 0,
                tag: 1
            }
        );
        // Posted first, nonblocking.
        let ev = ep.irecv(w, None, Some(2), vec![0; 10]).unwrap();
        ep.send(w, 0, 2, &bytes(n, 0)).unwrap();
        assert!(matches!(ep.wait(ev), Err(MsgError::Truncated { len, .. }) if len == n));
        // Consumed: nothing left; a synchronous send into a too-small receive completes.
        assert_eq!(ep.iprobe(w, None, None).unwrap(), None);
        let s = ep.issend(w, 0, 3, &bytes(n, 0)).unwrap();
        assert!(ep.recv(w, None, None, &mut small).is_err());
        ep.wait(s).unwrap();
    }
}

#[test]
fn misuse_errors(ep, w, eager_max = "8192") {
    let too_big = TAG_MAX + 1;
    assert_eq!(
        ep.send(w, 0, too_big, b"x"),
        Err(MsgError::TagOutOfRange {
            tag: too_big,
            max: TAG_MAX
        })
    );
    assert!(matches!(
        ep.irecv(w, None, Some(u32::MAX), vec![]),
        Err(MsgError::TagOutOfRange { .. })
    ));
    assert!(matches!(
        ep.iprobe(w, None, Some(too_big)),
        Err(MsgError::TagOutOfRange { .. })
    ));
    assert_eq!(
        ep.send(w, 1, 0, b"x"),
        Err(MsgError::BadRank { rank: 1, size: 1 })
    );
    let mut buf = [0u8; 1];
    assert_eq!(
        ep.recv(w, Some(3), None, &mut buf),
        Err(MsgError::BadRank { rank: 3, size: 1 })
    );
    // TAG_MAX itself is valid.
    ep.send(w, 0, TAG_MAX, b"y").unwrap();
    ep.recv(w, Some(0), Some(TAG_MAX), &mut buf).unwrap();
    assert_eq!(&buf, b"y");
    // A bad value of the setting fails the endpoint.
    let bad = client("lots");
    assert!(matches!(bad.endpoint(0), Err(gex_core::EpError::Layer(_))));
    let bad = ClientBuilder::new()
        .layer::<Msg>()
        .config(Config::from_pairs([("GEX_MSG_NB_EAGER_MAX", "lots")]))
        .init::<Loopback>(Box::new(Singleton::new()))
        .unwrap();
    assert!(matches!(bad.endpoint(0), Err(gex_core::EpError::Layer(_))));
    // No layer.
    let plain = ClientBuilder::new()
        .init::<Loopback>(Box::new(Singleton::new()))
        .unwrap();
    let mut p = plain.endpoint(0).unwrap();
    assert_eq!(p.send(w, 0, 0, b"x"), Err(MsgError::NoLayer));
}

#[test]
fn dropped_receive_events_keep_their_buffers(ep, w, eager_max = "64") {
    // A dropped and a leaked receive event: the layer owns the buffers; the messages
    // still match them (and nothing else).
    drop(ep.irecv(w, None, Some(1), vec![0; 1000]).unwrap());
    std::mem::forget(ep.irecv(w, None, Some(1), vec![0; 10]).unwrap());
    ep.send(w, 0, 1, &bytes(1000, 3)).unwrap();
    ep.send(w, 0, 1, &bytes(10, 3)).unwrap();
    ep.send(w, 0, 1, b"third").unwrap();
    let mut buf = [0u8; 8];
    let st = ep.recv(w, None, Some(1), &mut buf).unwrap();
    assert_eq!(&buf[..st.len], b"third");
    // The rendezvous into the dropped event's buffer finishes in the background.
    assert!(gex_core::layer::wait_until::<Msg, _>(
        &mut ep,
        Msg::is_quiet
    ));
}


#[test]
fn persistent_requests(ep, w, eager_max = "64") {
    let tx = ep.send_init(w, 0, 3, false).unwrap();
    let stx = ep.send_init(w, 0, 3, true).unwrap();
    let rx = ep.recv_init(w, None, Some(3)).unwrap();
    for (i, n) in [0usize, 10, 64, 65, 3000].into_iter().enumerate() {
        let data = bytes(n, i as u8);
        let r = ep.start_recv(&rx, vec![0; n]).unwrap();
        let s = ep.start_send(&tx, &data).unwrap();
        assert_eq!(ep.wait(r).unwrap().data, data);
        ep.wait(s).unwrap();
        // Synchronous: not complete until the receive is started.
        let s = ep.start_send(&stx, &data).unwrap();
        for _ in 0..10 {
            ep.poll();
        }
        assert!(!s.is_done());
        let r = ep.start_recv(&rx, vec![0; n]).unwrap();
        assert_eq!(ep.wait(r).unwrap().data, data);
        ep.wait(s).unwrap();
    }
    assert_eq!(
        ep.send_init(w, 4, 0, false),
        Err(MsgError::BadRank { rank: 4, size: 1 })
    );
    assert!(matches!(
        ep.recv_init(w, None, Some(TAG_MAX + 1)),
        Err(MsgError::TagOutOfRange { .. })
    ));
    assert!(gex_core::layer::wait_until::<Msg, _>(
        &mut ep,
        Msg::is_quiet
    ));
}
}
