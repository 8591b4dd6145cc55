//! gex facade: builder, conduit choice, re-exports
