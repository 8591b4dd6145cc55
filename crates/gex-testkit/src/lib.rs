//! gex test kit: simulated fabric conduit and conformance suite
