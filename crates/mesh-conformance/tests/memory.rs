//! The conformance suite on the in-memory transport.

mesh_conformance::suite!(async { mesh_conformance::MemoryHarness::new() });
