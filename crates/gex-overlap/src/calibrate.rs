//! Measuring the strip model's parameters of a path ([`calibrate`]), for
//! `gex-tune overlap` (which stores them in the overlap profile).

use std::time::Instant;

use gex_core::spi::Conduit;
use gex_core::{Blocking, Endpoint};
use gex_rma::{GlobalPtr, RmaExt};

use crate::buf::OverlapBuf;
use crate::error::OverlapError;
use crate::layer::{OverlapExt, with};
use crate::model::{CostParams, Decomp};
use crate::sys;

/// Strips of the overhead measurement.
const STRIPS: usize = 16;
/// Repetitions (medians are taken).
const REPS: usize = 7;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Measures the strip model's parameters of the path from `ep` to the peer holding
/// `src` (`len` bytes there are read, never written; at least 16 pages; 1 MiB or more
/// gives a steadier `G`): the round trip (8-byte blocking gets), `G` (blocking gets
/// of `len` bytes), `o` (a demand-driven get of `len` bytes in 16 strips against one
/// strip: the difference per strip, less one `mprotect`; when the path does the
/// transfer during the call, 16 gets against one), and `f` and `m` as
/// [`params`](crate::params) measures them. Medians of 7 runs; it takes a few
/// milliseconds per MiB. The layer's strip setting is restored afterwards.
///
/// # Errors
/// [`OverlapError::OutOfBuffer`] if `len` is less than 16 pages; as
/// [`OverlapExt::get_demand`] and [`OverlapExt::retire_all`].
pub fn calibrate<C: Conduit>(
    ep: &mut Endpoint<C>,
    src: GlobalPtr<u8>,
    len: usize,
) -> Result<CostParams, OverlapError> {
    let page = sys::page_size();
    if len < STRIPS * page {
        return Err(OverlapError::OutOfBuffer {
            offset: 0,
            len,
            buf_len: STRIPS * page,
        });
    }
    let local = crate::layer::measure();
    let mut small = [0u8; 8];
    let mut rtt = Vec::with_capacity(8 * REPS);
    for _ in 0..8 * REPS {
        let t0 = Instant::now();
        ep.get(&mut small[..], src, Blocking)?;
        rtt.push(t0.elapsed().as_nanos() as f64);
    }
    let mut big = vec![0u8; len];
    let mut gap = Vec::with_capacity(REPS);
    ep.get(&mut big[..], src, Blocking)?;
    for _ in 0..REPS {
        let t0 = Instant::now();
        ep.get(&mut big[..], src, Blocking)?;
        gap.push(t0.elapsed().as_nanos() as f64 / len as f64);
    }
    let saved = with(ep, |l, _| l.decomp.clone())?;
    let over = (|| -> Result<f64, OverlapError> {
        let mut buf = OverlapBuf::new(len)?;
        let mut diff = Vec::with_capacity(REPS);
        let mut demand = true;
        for _ in 0..=REPS {
            let mut t = [0.0f64; 2];
            for (k, d) in [Decomp::Unsplit, Decomp::Count(STRIPS)]
                .into_iter()
                .enumerate()
            {
                with(ep, |l, _| l.decomp = d)?;
                let t0 = Instant::now();
                let issued = ep.get_demand(&mut buf, 0, src, len)?;
                ep.retire_all()?;
                t[k] = t0.elapsed().as_nanos() as f64;
                demand &= issued.demand;
            }
            if !demand {
                // The path moves the data during the call: the cost of one more
                // operation instead.
                let piece = len / STRIPS;
                let t0 = Instant::now();
                ep.get(&mut big[..], src, Blocking)?;
                t[0] = t0.elapsed().as_nanos() as f64;
                let t0 = Instant::now();
                for i in 0..STRIPS {
                    ep.get(
                        &mut big[i * piece..(i + 1) * piece],
                        src.add(i * piece),
                        Blocking,
                    )?;
                }
                t[1] = t0.elapsed().as_nanos() as f64;
            }
            diff.push((t[1] - t[0]) / (STRIPS - 1) as f64);
        }
        diff.remove(0); // warm-up
        let d = median(diff);
        Ok(if demand { d - local.mprotect_ns } else { d }.max(0.0))
    })();
    with(ep, |l, _| l.decomp = saved)?;
    Ok(CostParams {
        overhead_ns: over?,
        gap_ns_per_byte: median(gap).max(1e-4),
        round_trip_ns: median(rtt),
        fault_ns: local.fault_ns,
        mprotect_ns: local.mprotect_ns,
    })
}
