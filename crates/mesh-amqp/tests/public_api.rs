//! Guards "no amqprs type in the public API" (what `cargo check-external-types` would check,
//! which needs a nightly toolchain): every module is private, and the files of the modules
//! whose items are re-exported do not name the client library at all, so nothing they make
//! public can expose it. Mapping happens in the private `convert` module.

// Helpers outside `#[test]` functions unwrap too: this whole file is a test.
#![allow(clippy::unwrap_used)]

use std::path::Path;

const REEXPORTING: &[&str] = &[
    "lifecycle.rs",
    "options.rs",
    "tls.rs",
    "topology.rs",
    "transport.rs",
];

#[test]
fn no_client_library_type_is_public() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    assert!(
        !lib.lines().any(|l| l.trim_start().starts_with("pub mod")),
        "lib.rs must keep every module private"
    );
    let reexported: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("pub use "))
        .filter_map(|l| l.split("::").next())
        .collect();
    for module in &reexported {
        let file = format!("{module}.rs");
        assert!(
            REEXPORTING.contains(&file.as_str()),
            "`{module}` is re-exported; add it to REEXPORTING after checking it"
        );
    }
    for file in REEXPORTING {
        let text = std::fs::read_to_string(src.join(file)).unwrap();
        assert!(
            !text.contains("amqprs"),
            "{file} names amqprs, and its items are public"
        );
    }
}
