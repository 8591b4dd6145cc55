//! What the multi-process benchmarks share: their builder and their launch.

use gex::Job;
use gex_core::ClientBuilder;

/// A client builder with the RMA and collectives layers and a `segment`-byte segment.
pub(crate) fn layers(segment: usize) -> ClientBuilder<(((), gex_rma::Rma), gex_coll::Coll)> {
    ClientBuilder::new()
        .layer::<gex_rma::Rma>()
        .layer::<gex_coll::Coll>()
        .segment_size(segment)
}

/// Runs `job` on `ranks` processes of this benchmark (this process launches them and
/// exits with their status), each a client of [`layers`] with `segment`-byte segments.
pub(crate) fn launch<J: Job>(ranks: u32, segment: usize, job: J) {
    match gex_boot::spawn_self(ranks).expect("launch") {
        gex_boot::Role::Launcher(code) => std::process::exit(code),
        gex_boot::Role::Rank(boot) => {
            gex::init_with_boot(layers(segment), boot, None, job).expect("init");
        }
    }
}
