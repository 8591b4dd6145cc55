//! Strip plans in transfers (loopback: the mover moves the strips): variable and
//! explicit strips deliver every byte; the overlap profile (`GEX_OVERLAP_PROFILE`)
//! steers the model, and a bad one fails the endpoint.

use gex_core::config::Config;
use gex_core::loopback::Loopback;
use gex_core::{Blocking, Client};
use gex_overlap::model::{self, CostParams};
use gex_overlap::{Decomp, OverlapBuf, OverlapExt, OverlapProfile};
use gex_rma::{GlobalPtr, RmaExt};

const SEG: usize = 16 << 20;

mod common;

fn client(cfg: Config) -> Client<Loopback> {
    common::loopback_client(cfg, SEG)
}

fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(131) ^ (i >> 11)) as u8
}

fn page() -> usize {
    gex_overlap::page_size()
}

#[test]
fn variable_and_explicit_strips_deliver_every_byte() {
    let client = client(Config::default());
    let mut ep = client.endpoint(0).unwrap();
    let pg = page();
    let len = (4 << 20) + 123;
    let data: Vec<u8> = (0..len).map(pattern).collect();
    let src = GlobalPtr::<u8>::new(ep.addr(), 0);
    ep.put(src, &data, Blocking).unwrap();
    let cases = [
        Decomp::Variable,
        Decomp::Sizes(vec![pg, 3 * pg, 16 * pg, 100_000]),
    ];
    for d in cases {
        ep.set_decomp(d.clone(), 0).unwrap();
        let plan = ep.plan_for(len).unwrap();
        assert!(!plan.is_equal(), "{d:?}: {plan:?}");
        let mut buf = OverlapBuf::new(len).unwrap();
        let issued = ep.get_demand(&mut buf, 0, src, len).unwrap();
        assert!(issued.demand && issued.variable, "{d:?}: {issued:?}");
        assert_eq!(issued.strips, plan.count());
        assert_eq!(issued.strip_len, plan.strip(0).1);
        // One thread streams from the start, one from the end, while strips land.
        std::thread::scope(|s| {
            let b = &buf;
            s.spawn(move || {
                for i in (0..len).step_by(509) {
                    assert_eq!(b[i], pattern(i), "byte {i}");
                }
            });
            s.spawn(move || {
                for i in (0..len).rev().step_by(4093) {
                    assert_eq!(b[i], pattern(i), "byte {i}");
                }
            });
        });
        assert_eq!(&buf[..], &data[..], "{d:?}");
        // The same plan for a put: every byte at the target (once the get retired:
        // a page is readable just before its state says so).
        ep.wait_range(&buf, 0, len).unwrap();
        let dst = GlobalPtr::<u8>::new(ep.addr(), len.next_multiple_of(pg));
        let issued = ep.put_demand(dst, &buf, 0, len).unwrap();
        assert!(issued.variable);
        ep.retire_all().unwrap();
        let mut back = vec![0u8; len];
        ep.get(&mut back[..], dst, Blocking).unwrap();
        assert_eq!(back, data, "{d:?}");
    }
}

const A: CostParams = CostParams {
    overhead_ns: 4000.0,
    gap_ns_per_byte: 0.25,
    round_trip_ns: 900.0,
    fault_ns: 1500.0,
    mprotect_ns: 700.0,
};

/// A profile file of this test (removed when dropped).
struct TempFile(std::path::PathBuf);

impl TempFile {
    fn new(name: &str, text: &str) -> TempFile {
        let p =
            std::env::temp_dir().join(format!("gex-overlap-{}-{name}.toml", std::process::id()));
        std::fs::write(&p, text).unwrap();
        TempFile(p)
    }

    fn cfg(&self) -> Config {
        let mut c = Config::default();
        c.set("GEX_OVERLAP_PROFILE", self.0.to_str().unwrap());
        c
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn profile(conduit: &str, p: CostParams) -> String {
    let mut prof = OverlapProfile::default();
    prof.set(conduit, p);
    prof.to_text()
}

#[test]
fn profile_parameters_steer_the_strip_model() {
    let len = 4 << 20;
    let pg = page();
    let slow = CostParams {
        fault_ns: 400_000.0,
        ..A
    };
    let fa = TempFile::new("a", &profile("loopback", A));
    let fb = TempFile::new("b", &profile("loopback", slow));
    let strip_of = |cfg: Config| {
        let c = client(cfg);
        let mut ep = c.endpoint(0).unwrap();
        ep.strip_for(len).unwrap()
    };
    let sa = strip_of(fa.cfg());
    let sb = strip_of(fb.cfg());
    assert_eq!(
        sa,
        model::strip_len(&A, &Decomp::Auto, len, pg, 65536),
        "the profile's parameters are the model's"
    );
    assert!(
        sb > sa,
        "a costlier fault means longer strips: {sb} vs {sa}"
    );
    // A profile without this conduit's table: the process's own measurement.
    let other = TempFile::new("other", &profile("smp", slow));
    assert_eq!(
        strip_of(other.cfg()),
        model::strip_len(gex_overlap::params(), &Decomp::Auto, len, pg, 65536)
    );
    // A consumer ten times slower than the data: the profile's model gains from
    // variable strips.
    let c = client(fa.cfg());
    let mut ep = c.endpoint(0).unwrap();
    assert!(ep.plan_for(len).unwrap().is_equal());
    ep.set_consume_cost(Some(10.0 * A.gap_ns_per_byte)).unwrap();
    let plan = ep.plan_for(len).unwrap();
    assert!(!plan.is_equal(), "{plan:?}");
    assert!(plan.strip(0).1 < sa);
    ep.set_consume_cost(None).unwrap();
    assert!(ep.plan_for(len).unwrap().is_equal());
}

#[test]
fn bad_strip_and_profile_settings_fail_the_endpoint() {
    common::assert_bad_settings(&[
        ("GEX_OVERLAP_STRIP", "variables"),
        (
            "GEX_OVERLAP_PROFILE",
            "/nonexistent/gex-overlap-profile.toml",
        ),
    ]);
}

#[test]
fn a_bad_profile_fails_the_endpoint_naming_the_file_and_line() {
    let bad = TempFile::new("bad", "[loopback]\nfault_ns = many\n");
    let missing = TempFile::new("missing", "");
    let missing_cfg = missing.cfg();
    drop(missing);
    for (cfg, want) in [
        (bad.cfg(), "line 2: fault_ns = many".to_string()),
        (missing_cfg, "No such file".to_string()),
    ] {
        let c = client(cfg);
        match c.endpoint(0) {
            Err(gex_core::EpError::Layer(e)) => {
                let m = e.to_string();
                assert!(
                    m.contains("GEX_OVERLAP_PROFILE=") && m.contains(&want),
                    "{m}"
                );
            }
            other => panic!("{:?}", other.map(|_| ())),
        }
    }
}

/// The start of the lazy tests: an endpoint of a default client (kept alive after
/// it) with `len` bytes of the pattern at the start of its segment, in 16 strips.
fn sixteen_strips(
    len: usize,
) -> (
    Client<Loopback>,
    Box<gex_core::Endpoint<Loopback>>,
    GlobalPtr<u8>,
    Vec<u8>,
) {
    let client = client(Config::default());
    let mut ep = client.endpoint(0).unwrap();
    let (src, data) = source(&mut ep, len);
    ep.set_decomp(Decomp::Count(16), 0).unwrap();
    (client, ep, src, data)
}

/// Puts the pattern into the first `len` bytes of the segment.
fn source(ep: &mut gex_core::Endpoint<Loopback>, len: usize) -> (GlobalPtr<u8>, Vec<u8>) {
    let data: Vec<u8> = (0..len).map(pattern).collect();
    let src = GlobalPtr::<u8>::new(ep.addr(), 0);
    ep.put(src, &data, Blocking).unwrap();
    (src, data)
}

#[test]
#[allow(unsafe_code)]
fn lazy_sequential_reads_see_every_byte_with_fewer_mprotects() {
    let len = 4 << 20;
    let (_client, mut ep, src, data) = sixteen_strips(len);
    // Eager: one call at issue, one per strip.
    let mut eager = OverlapBuf::new(len).unwrap();
    ep.get_demand(&mut eager, 0, src, len).unwrap();
    assert_eq!(&eager[..], &data[..]);
    ep.retire_all().unwrap();
    assert_eq!(eager.stats().mprotect_calls, 17);
    // Lazy, read once everything landed: the guard and the tripwire protected, then
    // unprotected (by the reader's one fault or the mover's end): four calls.
    let mut late = OverlapBuf::new(len).unwrap();
    // SAFETY: the range is read in ascending order from its first page.
    let issued = unsafe { ep.get_lazy(&mut late, 0, src, len) }.unwrap();
    assert!(issued.demand);
    while late.is_pending(0, len).unwrap() {
        std::thread::yield_now();
    }
    assert_eq!(&late[..], &data[..]);
    ep.retire_all().unwrap();
    let st = late.stats();
    assert_eq!((st.lazy_transfers, st.lazy_fallbacks), (1, 0));
    assert_eq!(st.mprotect_calls, 4, "{st:?}");
    assert_eq!(st.mprotects_saved, 17 - 4, "{st:?}");
    // Lazy, two threads streaming up the range while strips land (equal strips, then
    // variable ones): every byte right, no fallback, at most two calls per guard
    // moved.
    for d in [Decomp::Count(16), Decomp::Count(16), Decomp::Variable] {
        ep.set_decomp(d, 0).unwrap();
        let mut buf = OverlapBuf::new(len).unwrap();
        // SAFETY: both threads read the range in ascending order from its first page.
        unsafe { ep.get_lazy(&mut buf, 0, src, len) }.unwrap();
        std::thread::scope(|s| {
            for t in 0..2usize {
                let (b, d) = (&buf, &data);
                s.spawn(move || {
                    for i in (t..len).step_by(61) {
                        assert_eq!(b[i], d[i], "byte {i}");
                    }
                });
            }
        });
        assert_eq!(&buf[..], &data[..]);
        ep.retire_all().unwrap();
        let st = buf.stats();
        assert_eq!(st.lazy_fallbacks, 0, "{st:?}");
        assert!(st.mprotect_calls <= 2 + 2 * 16, "{st:?}");
        assert!(!buf.is_pending(0, len).unwrap());
    }
}

#[test]
#[allow(unsafe_code)]
fn lazy_jump_ahead_falls_back_and_reads_every_byte() {
    let len = 4 << 20;
    let (_client, mut ep, src, data) = sixteen_strips(len);
    let strip = len / 16;
    // The mover copies a long get first (jobs run in order), so that the lazy one
    // is still pending when this thread jumps; retried in case this thread was
    // descheduled that long.
    let mut ahead = OverlapBuf::new(2 * len).unwrap();
    let long = GlobalPtr::<u8>::new(ep.addr(), 0);
    let mut fell_back = false;
    for _ in 0..5 {
        ep.set_decomp(Decomp::Unsplit, 0).unwrap();
        ep.get_demand(&mut ahead, 0, long, 2 * len).unwrap();
        ep.set_decomp(Decomp::Count(16), 0).unwrap();
        let mut buf = OverlapBuf::new(len).unwrap();
        // SAFETY: the first access breaks the promise on purpose, onto the one page
        // of a later strip still guarded: the tripwire (the second strip's first
        // page) stays protected until that strip lands, the guard moves (no access
        // reached the guard) or the transfer ends. So no byte is read before it has
        // landed; after the fallback every pending page is protected (as with
        // `get_demand`), and without one (the transfer had landed) the rest is read
        // after `wait_range`.
        unsafe { ep.get_lazy(&mut buf, 0, src, len) }.unwrap();
        assert_eq!(buf[strip], data[strip]);
        if buf.stats().lazy_fallbacks == 0 {
            ep.wait_range(&buf, 0, len).unwrap();
        }
        // Every byte read (backwards) is the final one.
        for i in (0..len).rev().step_by(97) {
            assert_eq!(buf[i], data[i], "byte {i}");
        }
        assert_eq!(&buf[..], &data[..]);
        ep.retire_all().unwrap();
        let st = buf.stats();
        assert_eq!(st.lazy_transfers, 1);
        if st.lazy_fallbacks == 1 {
            fell_back = true;
            break;
        }
    }
    assert!(fell_back, "the jump never met the tripwire");
}

#[test]
fn the_model_learns_a_slow_consumer_from_its_faults() {
    let len = 4 << 20;
    let fa = TempFile::new("learn", &profile("loopback", A));
    let c = client(fa.cfg());
    let mut ep = c.endpoint(0).unwrap();
    let (src, data) = source(&mut ep, len);
    ep.set_decomp(Decomp::Auto, 0).unwrap();
    let mut buf = OverlapBuf::new(len).unwrap();
    let issued = ep.get_demand(&mut buf, 0, src, len).unwrap();
    assert!(issued.strips >= 4 && !issued.variable, "{issued:?}");
    // A consumer that reads once everything has landed waited for no strip: slower
    // than the data. The next get's model takes variable strips.
    ep.wait_range(&buf, 0, len).unwrap();
    assert_eq!(&buf[..], &data[..]);
    let issued = ep.get_demand(&mut buf, 0, src, len).unwrap();
    assert!(issued.variable, "{issued:?}");
    assert!(!ep.plan_for(len).unwrap().is_equal());
    ep.wait_range(&buf, 0, len).unwrap();
    // The program's own figure wins over what was learned.
    ep.set_consume_cost(Some(A.gap_ns_per_byte)).unwrap();
    let issued = ep.get_demand(&mut buf, 0, src, len).unwrap();
    assert!(!issued.variable, "{issued:?}");
    ep.retire_all().unwrap();
}
