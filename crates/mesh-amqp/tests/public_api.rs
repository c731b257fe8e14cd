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
    "options/builder.rs",
    "options/mod.rs",
    "options/url.rs",
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
    // `bench_internals` is no API: compiled only with a feature, hidden, and checked below.
    let public = ["pub mod management;", "pub mod access;"];
    let lines: Vec<&str> = lib.lines().map(str::trim_start).collect();
    for (at, line) in lines.iter().enumerate() {
        if !line.starts_with("pub mod") || public.contains(line) {
            continue;
        }
        assert!(
            *line == "pub mod bench_internals;"
                && at >= 2
                && lines[at - 2] == "#[cfg(feature = \"bench-internals\")]"
                && lines[at - 1] == "#[doc(hidden)]",
            "lib.rs must keep every module private but `management` and `access` \
             (and `bench_internals`, behind its feature and hidden): {line}"
        );
    }
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

/// The benchmarks' hidden module keeps the client library's types out of its public items:
/// only its private fields and imports name them.
#[test]
fn the_bench_internals_name_no_client_library_type_publicly() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/bench_internals.rs");
    let text = std::fs::read_to_string(&path).unwrap();
    let imported: Vec<&str> = text
        .lines()
        .filter_map(|line| line.strip_prefix("use amqprs::"))
        .map(|names| names.trim_end_matches(';'))
        .collect();
    assert!(!imported.is_empty(), "the opaque properties wrap amqprs's");
    for line in text.lines().map(str::trim_start) {
        if line.contains("amqprs") {
            assert!(line.starts_with("use amqprs::"), "names amqprs: {line}");
        }
        if line.starts_with("pub ") {
            for name in &imported {
                assert!(
                    !line.contains(name),
                    "a public item names amqprs's {name}: {line}"
                );
            }
        }
    }
}
