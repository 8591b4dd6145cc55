//! gex shared-memory conduit: processes on one host
