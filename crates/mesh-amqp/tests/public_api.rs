//! Guards "no amqprs type in the public API" (what `cargo check-external-types` would check,
//! which needs a nightly toolchain): every module is private, and the files of the modules
//! whose items are re-exported do not name the client library at all, so nothing they make
//! public can expose it. Mapping happens in the private `convert` module; a folder module
//! (`plain/`) keeps its client calls in a private child module, and its `mod.rs` is checked.

// Helpers outside `#[test]` functions unwrap too: this whole file is a test.
#![allow(clippy::unwrap_used)]

use std::path::Path;

const REEXPORTING: &[&str] = &[
    "event_bindings.rs",
    "lifecycle.rs",
    "options/auth.rs",
    "options/builder.rs",
    "options/mod.rs",
    "options/url.rs",
    "plain/mod.rs",
    "tls.rs",
    "topology.rs",
    "transport.rs",
    "connection/mod.rs",
];

#[test]
fn no_client_library_type_is_public() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    // `bench_internals` is no API: compiled only with a feature, hidden, and checked below.
    let lines: Vec<&str> = lib.lines().map(str::trim_start).collect();
    for (at, line) in lines.iter().enumerate() {
        if !line.starts_with("pub mod") {
            continue;
        }
        assert!(
            *line == "pub mod bench_internals;"
                && at >= 2
                && lines[at - 2] == "#[cfg(feature = \"bench-internals\")]"
                && lines[at - 1] == "#[doc(hidden)]",
            "lib.rs must keep every module private (but `bench_internals`, behind its \
             feature and hidden): {line}"
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

/// The transport speaks AMQP only: no file names the HTTP client (the management API is
/// `meshbus-admin`'s, joined to the transport by the SDK).
#[test]
fn no_file_speaks_http() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut dirs = vec![src];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(
                !text.contains("reqwest"),
                "{} names the HTTP client",
                path.display()
            );
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
