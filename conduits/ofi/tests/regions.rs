//! Client regions (`Ofi::register`) and a leaked region (docs/soundness.md, class 2):
//! no registration an endpoint keeps outlives the memory it was made for.
//!
//! The probe, with `GEX_OFI_MR_LOCAL=1` (descriptors and registrations as on a
//! provider that pins pages): rank 0 puts from a region once (the endpoint registers
//! the region and caches the registration), leaks the region, and puts from a new
//! buffer of the same size; then it ends a region with `into_vec`, reallocates the
//! buffer (glibc moves a large block with `mremap`), maps a new buffer where it was
//! and puts from that. Each new buffer must get its own registration: a cache hit
//! would hand the provider the old registration, whose pages a pinning NIC (verbs,
//! efa) reads and writes.
//!
//! Before, the region borrowed its buffer (`register(&mut buf)`), and the same program
//! with `std::mem::forget(region); drop(buf);` (then `buf.reserve(8 << 20)` for the
//! second case) found, on this machine: "stale hit: the put from a new buffer at the
//! freed buffer's addresses used a registration of a leaked region (hits 0 -> 1,
//! region registrations 1 -> 1, operation registrations 0 -> 0)" and, after the
//! `mremap` (old buffer at 0x7f00c867c010, moved to 0x7f00c05f4010, the new one at
//! 0x7f00c867c010), another stale hit: a get into the new buffer would have written
//! into the moved block's pages. The region now owns its buffer: leaking it leaks the
//! buffer, so no new memory can appear at its addresses, and the old program no longer
//! compiles (`tests/ui/region_does_not_borrow.rs`,
//! `tests/ui/leaked_region_keeps_its_buffer.rs`).

use gex_conduit_ofi::Ofi;
use gex_core::{Blocking, Config, EpAddr};
use gex_rma::{GlobalPtr, RmaExt};
use gex_testkit::exchange_barrier;
use gex_testkit::procs::Procs;

const SEGMENT: usize = 2 << 20;
const LEN: usize = 64 << 10;

/// Rank 0's probe; `Err` lists what it found.
fn probe(ofi: &Ofi, ep: &mut gex_core::Endpoint<Ofi>) -> Result<(), String> {
    let e = |x: gex_rma::RmaError| x.to_string();
    let p = GlobalPtr::<u8>::new(EpAddr::rank(1), 0);
    let mut found = Vec::new();
    let regs = |s: &gex_conduit_ofi::OfiStats| s.mr_op_registrations + s.mr_region_registrations;

    // A leaked region.
    let region = ofi.register(vec![1u8; LEN]);
    let old = region.as_ptr() as usize;
    ep.put(p, &region[..], Blocking).map_err(e)?;
    let s0 = ofi.stats();
    std::mem::forget(region);
    let fresh = vec![2u8; LEN];
    let new = fresh.as_ptr() as usize;
    eprintln!("leaked region at {old:#x}, new buffer at {new:#x}");
    if new < old + LEN && old < new + LEN {
        found.push(format!(
            "a new buffer at {new:#x} overlaps the leaked region at {old:#x}"
        ));
    }
    ep.put(p, &fresh, Blocking).map_err(e)?;
    let s1 = ofi.stats();
    eprintln!("after the region's put: {s0:?}\nafter the new buffer's put: {s1:?}");
    if s1.mr_cache_hits != s0.mr_cache_hits || regs(&s1) != regs(&s0) + 1 {
        found.push(format!(
            "after a leaked region, a new buffer's put took a cached registration (hits {} -> {}, registrations {} -> {})",
            s0.mr_cache_hits,
            s1.mr_cache_hits,
            regs(&s0),
            regs(&s1)
        ));
    }

    // A region ended with `into_vec`, its buffer moved by `realloc` (`mremap`), and a
    // new buffer mapped at its old addresses.
    let region = ofi.register(vec![3u8; 1 << 20]);
    let old = region.as_ptr() as usize;
    ep.put(p, &region[..LEN], Blocking).map_err(e)?;
    let s0 = ofi.stats();
    let mut big = region.into_vec();
    big.reserve(8 << 20);
    let fresh = vec![4u8; 1 << 20];
    let new = fresh.as_ptr() as usize;
    eprintln!(
        "ended region at {old:#x}, its buffer moved to {:#x}, new buffer at {new:#x}",
        big.as_ptr() as usize
    );
    ep.put(p, &fresh[..LEN], Blocking).map_err(e)?;
    let s1 = ofi.stats();
    eprintln!("{s0:?}\n{s1:?}");
    if s1.mr_cache_hits != s0.mr_cache_hits || regs(&s1) != regs(&s0) + 1 {
        found.push(format!(
            "after into_vec and a realloc, a new buffer's put {} took a cached registration (hits {} -> {})",
            if new == old {
                "at the old addresses"
            } else {
                "elsewhere"
            },
            s0.mr_cache_hits,
            s1.mr_cache_hits
        ));
    }
    if found.is_empty() {
        Ok(())
    } else {
        Err(found.join("; "))
    }
}

fn leak_rank(boot: Box<dyn gex_core::boot::Bootstrap>) -> Result<(), String> {
    let client = gex_testkit::rma::client_builder()
        .segment_size(SEGMENT)
        .config(Config::from_pairs([
            ("GEX_OFI_PROVIDER", "tcp"),
            ("GEX_OFI_MR_LOCAL", "1"),
        ]))
        .init::<Ofi>(boot)
        .map_err(|e| e.to_string())?;
    let ofi = client.conduit().clone();
    let mut ep = client.endpoint(0).map_err(|e| e.to_string())?;
    exchange_barrier(&mut ep).map_err(|e| e.to_string())?;
    // Rank 0 probes; both ranks then meet and finalise whatever it found.
    let found = if ep.rank() == 0 {
        probe(&ofi, &mut ep)
    } else {
        Ok(())
    };
    exchange_barrier(&mut ep).map_err(|e| e.to_string())?;
    gex_testkit::finalize(ep, client)?;
    found
}

#[test]
fn a_leaked_region_lends_no_registration_to_new_memory() {
    Procs::new(2)
        .test("a_leaked_region_lends_no_registration_to_new_memory")
        .run(leak_rank)
        .assert_success();
}
