//! `gex-tune overlap`: measures gex-overlap's strip-model parameters (`o`, `G`, the
//! round trip, the fault cost `f` and the `mprotect` cost `m`: seed 000's Table 1)
//! for the conduit of the run, from rank 0 to rank 1 (to itself alone), with
//! [`gex::overlap::calibrate`], and stores them as that conduit's table of the
//! overlap profile (`GEX_OVERLAP_PROFILE=FILE` loads it; other conduits' tables in
//! the file are kept). A file of its own: gex-coll's profile reader refuses tables it
//! does not know.

use gex::Job;
use gex::core::Client;
use gex::overlap::{Overlap, OverlapProfile};
use gex::rma::GlobalPtr;
use gex::spi::Conduit;

/// The least `--len`: 16 pages of 4 KiB (`calibrate` times 16 strips).
pub(crate) const MIN_LEN: usize = 16 * 4096;

/// Options of `overlap`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct OverlapArgs {
    /// The overlap profile to write (its other conduits' tables are kept).
    #[arg(
        short = 'o',
        long = "out",
        value_name = "FILE",
        default_value = "gex-overlap-profile.toml"
    )]
    pub(crate) out: String,
    /// Bytes of the transfers timed (K/M suffixes; at least 16 pages).
    #[arg(long, value_name = "BYTES", default_value = "1M", value_parser = crate::parse_size)]
    pub(crate) len: usize,
}

/// An `overlap` run.
pub(crate) struct OverlapJob {
    pub(crate) args: OverlapArgs,
}

impl OverlapJob {
    /// The segment: room for the transfers (the peer's bytes are read).
    pub(crate) fn segment(&self) -> usize {
        self.args.len.next_multiple_of(1 << 20).max(1 << 20)
    }
}

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn run<C: Conduit>(args: &OverlapArgs, client: &Client<C>) -> Res<()> {
    let mut ep = client.endpoint(0)?;
    let me = client.rank();
    let peer = if client.size() > 1 { 1 } else { 0 };
    if me == 0 {
        let src = GlobalPtr::<u8>::new(gex::core::EpAddr::new(peer, 0), 0);
        let p = gex::overlap::calibrate(&mut ep, src, args.len)?;
        // A file that is there but does not parse is not overwritten.
        let mut prof = match std::fs::metadata(&args.out) {
            Ok(_) => OverlapProfile::load(&args.out)?,
            Err(_) => OverlapProfile::default(),
        };
        let name = client.conduit_name();
        prof.set(name, p);
        let tmp = format!("{}.tmp", args.out);
        std::fs::write(&tmp, prof.to_text())?;
        std::fs::rename(&tmp, &args.out)?;
        println!(
            "gex-tune overlap: [{name}] rank 0 -> rank {peer}: o {:.0} ns, G {:.4} ns/B, RTT {:.0} ns, f {:.0} ns, m {:.0} ns -> {}",
            p.overhead_ns, p.gap_ns_per_byte, p.round_trip_ns, p.fault_ns, p.mprotect_ns, args.out
        );
    }
    // Rank 1 serves the gets (over conduits that need its progress) until rank 0 is
    // done.
    let world = ep.world().clone();
    gex::coll::CollExt::barrier(&mut *ep, &world)?;
    Ok(())
}

impl Job for OverlapJob {
    type Output = i32;
    fn run<C: Conduit>(self, client: Client<C>) -> i32 {
        match run(&self.args, &client) {
            Ok(()) => match client.finalize() {
                Ok(()) => 0,
                Err(e) => {
                    crate::complain(&format!("finalisation failed: {e}"));
                    1
                }
            },
            Err(e) => client.abort(1, &format!("gex-tune overlap: rank {}: {e}", client.rank())),
        }
    }
}

/// The layers of an `overlap` run.
pub(crate) fn builder(seg: usize) -> gex::core::ClientBuilder<(gex::DefaultLayers, Overlap)> {
    gex::builder().layer::<Overlap>().segment_size(seg)
}
