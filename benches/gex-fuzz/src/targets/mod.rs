//! The fuzz targets, one per decoder (see the table in `docs/testing.md`).

use crate::Target;

mod boot;
mod coll;
mod core;
mod ofi;
mod shm;

/// A small count as a word (outcome classes ignore words with digits).
pub(crate) fn few(n: usize) -> &'static str {
    ["none", "one", "two", "three"]
        .get(n)
        .copied()
        .unwrap_or("many")
}

/// A byte (a message tag, say) as a word of letters.
pub(crate) fn tag(b: u8) -> String {
    format!(
        "tag{}{}",
        char::from(b'a' + b / 16),
        char::from(b'a' + b % 16)
    )
}

/// Seeds of a target whose inputs are text: each string's bytes.
pub(crate) fn text_seeds(texts: &[&str]) -> Vec<Vec<u8>> {
    texts.iter().map(|s| s.as_bytes().to_vec()).collect()
}

/// Every target.
pub(crate) fn all() -> Vec<Target> {
    vec![
        Target {
            name: "ring",
            decoder: "gex-sync ring::Consumer::try_peek, Producer::reserve",
            checks: "FIFO against a model while clean; after scribbles on the data area or the head: an error or a body inside the data area, no overflow",
            seeds: shm::ring_seeds,
            run: shm::ring,
        },
        Target {
            name: "smp-record",
            decoder: "gex-conduit-smp record::decode (every AM received from a neighbour)",
            checks: "accepts exactly what a sender writes (user word, argument area, body length), Long inside the segment",
            seeds: shm::smp_record_seeds,
            run: shm::smp_record,
        },
        Target {
            name: "smp-header",
            decoder: "gex-conduit-smp region::Header::check (a peer's shared region, against the job layout)",
            checks: "accepts exactly the header its owner writes for the layout's rank, endpoints and segment length; no overflow for any size",
            seeds: shm::smp_header_seeds,
            run: shm::smp_header,
        },
        Target {
            name: "ofi-wire",
            decoder: "gex-conduit-ofi wire::decode, wire::args (every message from the network)",
            checks: "accepted = re-encodes to the same bytes; claimed source reported for rejected messages",
            seeds: ofi::wire_seeds,
            run: ofi::wire,
        },
        Target {
            name: "ofi-blob",
            decoder: "gex-conduit-ofi wire::PeerBlob::decode (addresses and segments exchanged at open)",
            checks: "accepted = re-encodes to the same bytes; no allocation sized by a claimed count",
            seeds: ofi::blob_seeds,
            run: ofi::blob,
        },
        Target {
            name: "launcher-frame",
            decoder: "gex-boot proto::ToLauncher::decode (rank -> gex-run)",
            checks: "accepted = re-encodes to the same frame (lossy ABORT text aside)",
            seeds: boot::launcher_frame_seeds,
            run: boot::launcher_frame,
        },
        Target {
            name: "rank-frame",
            decoder: "gex-boot proto::ToRank::decode (gex-run -> rank)",
            checks: "accepted = re-encodes to the same frame",
            seeds: boot::rank_frame_seeds,
            run: boot::rank_frame,
        },
        Target {
            name: "frame-stream",
            decoder: "gex-boot proto::FrameBuf (cutting a rank's byte stream into frames)",
            checks: "same frames and errors however the bytes are split; limits respected",
            seeds: boot::frame_stream_seeds,
            run: boot::frame_stream,
        },
        Target {
            name: "launcher-coord",
            decoder: "gex-boot coord::Coordinator (gex-run's job logic over frames and exits)",
            checks: "replies only to ranks of the job, well-formed; every ending names a rank; a malformed frame ends the job naming its sender; nothing after the end",
            seeds: boot::coord_seeds,
            run: boot::coord,
        },
        Target {
            name: "fork-client",
            decoder: "gex-boot fork::ForkClient against a scripted launcher",
            checks: "returns (no hang) whatever the launcher sends; host ids and exchange results sized by the job",
            seeds: boot::fork_client_seeds,
            run: boot::fork_client,
        },
        Target {
            name: "pmi-line",
            decoder: "gex-boot pmi::wire::Msg::parse (PMI-1 reply lines)",
            checks: "what parses prints back to a line that parses to the same command and attributes",
            seeds: boot::pmi_line_seeds,
            run: boot::pmi_line,
        },
        Target {
            name: "pmi-b64",
            decoder: "gex-boot pmi::b64::decode (blobs in PMI values)",
            checks: "round trip; only canonical encodings accepted",
            seeds: boot::b64_seeds,
            run: boot::b64,
        },
        Target {
            name: "pmi-mapping",
            decoder: "gex-boot pmi::parse_process_mapping (PMI_process_mapping)",
            checks: "one host id per rank; same result as the reference dealing; time linear in blocks + ranks",
            seeds: boot::mapping_seeds,
            run: boot::mapping,
        },
        Target {
            name: "pmi-client",
            decoder: "gex-boot pmi::PmiClient against a scripted PMI server (handshake, maxes, KVS values, chunk counts)",
            checks: "returns (no hang, bounded allocation) whatever the server sends; host ids and exchange results sized by the job",
            seeds: boot::pmi_client_seeds,
            run: boot::pmi_client,
        },
        Target {
            name: "coll-profile",
            decoder: "gex-coll Profile::parse + Tuner::set_profile (GEX_COLL_PROFILE files)",
            checks: "to_toml of what parses parses back to the same text; loading and choosing never panic",
            seeds: coll::profile_seeds,
            run: coll::profile,
        },
        Target {
            name: "env-config",
            decoder: "gex-core Config getters, parse_size; gex-coll LogGP::parse, Tuner::configure (GEX_* values)",
            checks: "a value or an error naming the variable; sizes print back to themselves",
            seeds: core::config_seeds,
            run: core::config,
        },
        Target {
            name: "core-layout",
            decoder: "gex-core ClientBuilder::init's job layout from the bootstrap exchange",
            checks: "a corrupt exchange (blob sizes, ranks, job sizes, endpoint counts, host ids) is an error, not a panic or a huge allocation",
            seeds: core::layout_seeds,
            run: core::layout,
        },
    ]
}
