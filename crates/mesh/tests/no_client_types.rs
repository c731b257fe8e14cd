//! Architecture guard: no AMQP client crate's type appears in the SDK's public API.
//!
//! `cargo check-external-types` would check this from rustdoc's JSON, but it needs a
//! nightly toolchain; this test keeps the same rule with the stable one: the SDK and the
//! core never name a client crate at all, and the binding never names one in a public
//! signature.

use std::fs;
use std::path::{Path, PathBuf};

const CLIENT_CRATES: [&str; 2] = ["amqprs", "lapin"];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .and_then(Path::parent)
        .expect("crates/mesh sits two levels below the workspace root")
        .to_path_buf()
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).expect("readable source dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

#[test]
fn the_sdk_and_the_core_never_name_a_client_crate() {
    for krate in ["mesh", "mesh-core"] {
        let root = workspace().join("crates").join(krate);
        let manifest = fs::read_to_string(root.join("Cargo.toml")).expect("manifest");
        for client in CLIENT_CRATES {
            assert!(
                !manifest.lines().any(|l| l.trim_start().starts_with(client)),
                "{krate} depends on {client} directly"
            );
        }
        for file in rust_files(&root.join("src")) {
            let text = fs::read_to_string(&file).expect("source");
            for client in CLIENT_CRATES {
                assert!(
                    !text.contains(&format!("{client}::")),
                    "{} names {client}",
                    file.display()
                );
            }
        }
    }
}

#[test]
fn the_bindings_keep_client_types_out_of_public_signatures() {
    let mut offenders = Vec::new();
    let files = ["crates/mesh-amqp/src", "crates/mesh-logs/src"]
        .iter()
        .flat_map(|src| rust_files(&workspace().join(src)));
    for file in files {
        let text = fs::read_to_string(&file).expect("source");
        // A public item's signature may span lines: read from `pub ` up to its body.
        let mut signature: Option<String> = None;
        for line in text.lines() {
            let trimmed = line.trim_start();
            if signature.is_none() && trimmed.starts_with("pub ") && !trimmed.starts_with("pub(") {
                signature = Some(String::new());
            }
            if let Some(sig) = signature.as_mut() {
                sig.push_str(trimmed);
                sig.push(' ');
                if trimmed.contains('{') || trimmed.ends_with(';') || trimmed.ends_with(',') {
                    let head = sig.split('{').next().unwrap_or_default().to_owned();
                    if CLIENT_CRATES
                        .iter()
                        .any(|c| head.contains(&format!("{c}::")))
                    {
                        offenders.push(format!("{}: {head}", file.display()));
                    }
                    signature = None;
                }
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "public signatures naming a client crate:\n{}",
        offenders.join("\n")
    );
}
