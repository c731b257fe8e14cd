//! Guards "no amqprs type in the public API" (what `cargo check-external-types` would check,
//! which needs a nightly toolchain): every module is private, and the files of the modules
//! whose items are re-exported do not name the client library at all, so nothing they make
//! public can expose it. Mapping happens in the private `convert` module; a folder module
//! (`plain/`) keeps its client calls in a private child module, and its `mod.rs` is checked.

// Helpers outside `#[test]` functions unwrap too: this whole file is a test.
#![allow(clippy::unwrap_used)]

use std::path::Path;

const REEXPORTING: &[&str] = &[
    "lifecycle.rs",
    "options.rs",
    "plain/mod.rs",
    "tls.rs",
    "topology.rs",
    "transport.rs",
];

#[test]
fn no_client_library_type_is_public() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    // `management` and `access` are the public modules: their items are checked below.
    assert!(
        !lib.lines().any(|l| {
            let l = l.trim_start();
            l.starts_with("pub mod") && l != "pub mod management;" && l != "pub mod access;"
        }),
        "lib.rs must keep every module private but `management` and `access`"
    );
    let reexported: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("pub use "))
        .filter_map(|l| l.split("::").next())
        .collect();
    for module in &reexported {
        let file = if src.join(module).is_dir() {
            format!("{module}/mod.rs")
        } else {
            format!("{module}.rs")
        };
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

/// The public items of the management client and the access plan name neither the HTTP, TLS or URL library nor
/// amqprs: only its private fields and functions do.
#[test]
fn no_http_library_type_is_public_in_management() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let dir = src.join("management");
    let files = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .chain([src.join("access.rs")]);
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("amqprs"), "{} names amqprs", path.display());
        for line in text.lines() {
            let line = line.trim_start();
            if !line.starts_with("pub ") && !line.starts_with("pub use") {
                continue;
            }
            for library in ["reqwest", "rustls", "Url", "url::", "percent_encoding"] {
                assert!(
                    !line.contains(library),
                    "{}: a public item names {library}: {line}",
                    path.display()
                );
            }
        }
    }
}
