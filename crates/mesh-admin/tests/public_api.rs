//! Guards "no HTTP, TLS or URL library type in the public API" (what `cargo
//! check-external-types` would check, which needs a nightly toolchain), and that this crate
//! speaks no AMQP.

// Helpers outside `#[test]` functions unwrap too: this whole file is a test.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
fn sources(dir: PathBuf) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files
}

/// The public items of the management client, the access plan and the topology plan name
/// neither the HTTP, TLS or URL library nor amqprs: only their private fields and functions
/// do.
#[test]
fn no_http_library_type_is_public_in_management() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = sources(src.join("management"))
        .into_iter()
        .chain(sources(src.join("access")))
        .chain(sources(src.join("topology")));
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
