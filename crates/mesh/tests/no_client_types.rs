//! Architecture guard: mesh-amqp is the only crate that speaks the AMQP client library, and
//! not even it lets one of the library's types into its public API.
//!
//! `cargo check-external-types` would check the second half from rustdoc's JSON, but it needs
//! a nightly toolchain; this test keeps the same rule with the stable one:
//!
//! - every crate of the workspace but mesh-amqp (found by listing `crates/`, so a new crate
//!   is covered the day it is added) neither depends on a client crate in any dependency
//!   table of its manifest, nor names one in any of its sources (`src`, `tests`, `benches`,
//!   `examples`), except the dev-only crates in [`EXCEPTIONS`], each for a stated reason and
//!   only in the places named there;
//! - the shipped crates ([`SHIPPED`]) have none in what they ship: at most their tests may
//!   play a program that does not use mesh (a client crate as a dev-dependency, named under
//!   `tests` only), which never reaches a build that depends on them;
//! - mesh-amqp never names a client crate in a public signature.

use std::fs;
use std::path::{Path, PathBuf};

const CLIENT_CRATES: [&str; 2] = ["amqprs", "lapin"];

/// The binding: the one crate that names the client library (never in its public API).
const BINDING: &str = "mesh-amqp";

/// The client library itself: our fork of amqprs (docs/decisions/0012-a-fork-of-amqprs.md).
const CLIENT: &str = "mesh-amqprs";

/// The crates a user builds on or runs: no exception may ever name one of them.
const SHIPPED: [&str; 10] = [
    "mesh",
    "mesh-admin",
    "mesh-core",
    "mesh-memory",
    "mesh-logs",
    "mesh-audit",
    "mesh-contract",
    "mesh-outbox",
    "mesh-console",
    "mesh-cli",
];

/// Where a dev-only crate (`publish = false`) may name a client crate, and why.
struct Exception {
    krate: &'static str,
    /// Manifest tables in which a client crate may be a dependency.
    tables: &'static [&'static str],
    /// Source folders, under the crate, that may name a client crate.
    dirs: &'static [&'static str],
}

const EXCEPTIONS: [Exception; 4] = [
    // The benchmark's baseline is the raw client, measured beside mesh: that is its point.
    Exception {
        krate: "mesh-bench",
        tables: &["dependencies"],
        dirs: &["src"],
    },
    // Tests of the test kit's private nodes and clusters check them with a bare client, so
    // that a failure there is the node's and not mesh's. The library itself names none.
    Exception {
        krate: "mesh-testkit",
        tables: &["dev-dependencies"],
        dirs: &["tests"],
    },
    // The conformance suite's foreign-publisher test plays a program that does not use mesh.
    Exception {
        krate: "mesh-conformance",
        tables: &["dev-dependencies"],
        dirs: &["tests"],
    },
    // Shipped, so its tests only: they play a module's user forging a dead letter by hand, and
    // a caller and a server of an earlier version across the reply exchange's migration,
    // programs that do not use mesh. The CLI itself (`src`) names none.
    Exception {
        krate: "mesh-cli",
        tables: &["dev-dependencies"],
        dirs: &["tests"],
    },
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .and_then(Path::parent)
        .expect("crates/mesh sits two levels below the workspace root")
        .to_path_buf()
}

/// Every crate under `crates/`, by folder name.
fn crates() -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(workspace().join("crates"))
        .expect("readable crates dir")
        .map(|entry| entry.expect("dir entry").path())
        .filter(|path| path.join("Cargo.toml").is_file())
        .filter_map(|path| path.file_name()?.to_str().map(str::to_owned))
        .collect();
    names.sort();
    names
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    if !dir.is_dir() {
        return files;
    }
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

/// The dependency tables of `manifest` (`dependencies`, `dev-dependencies`,
/// `build-dependencies`, and their `target.….` forms) that depend on a client crate, as
/// `(table, client)`: by key (`amqprs.workspace = true`, `amqprs = "2"`), by table header
/// (`[dependencies.amqprs]`) or by rename (`package = "amqprs"`).
fn client_dependencies(manifest: &str) -> Vec<(String, &'static str)> {
    let mut found = Vec::new();
    let mut table: Option<String> = None;
    for line in manifest.lines() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if let Some(header) = line.strip_prefix('[') {
            let header = header.trim_end_matches(']').trim();
            table = None;
            for kind in ["build-dependencies", "dev-dependencies", "dependencies"] {
                let Some(at) = header.find(kind) else {
                    continue;
                };
                let preceded = at == 0 || header[..at].ends_with('.');
                let rest = &header[at + kind.len()..];
                if !preceded || header.starts_with("workspace.") {
                    continue;
                }
                if let Some(name) = rest.strip_prefix('.') {
                    if let Some(client) = CLIENT_CRATES.iter().find(|c| name.trim() == **c) {
                        found.push((kind.to_owned(), *client));
                    }
                } else if rest.is_empty() {
                    table = Some(kind.to_owned());
                }
                break;
            }
            continue;
        }
        let Some(table) = &table else { continue };
        let key = line
            .split(['=', '.'])
            .next()
            .unwrap_or_default()
            .trim()
            .trim_matches('"');
        let compact: String = line.chars().filter(|c| !c.is_whitespace()).collect();
        for client in CLIENT_CRATES {
            if key == client || compact.contains(&format!("package=\"{client}\"")) {
                found.push((table.clone(), client));
            }
        }
    }
    found
}

/// Whether `source` names a client crate (a path through it, or `extern crate`); prose in
/// comments that mentions one by name is fine.
fn names_client(source: &str) -> Option<&'static str> {
    CLIENT_CRATES.into_iter().find(|client| {
        source.contains(&format!("{client}::"))
            || source.contains(&format!("extern crate {client}"))
    })
}

#[test]
fn no_crate_but_the_binding_names_a_client_crate() {
    let crates = crates();
    for shipped in SHIPPED.iter().chain([&BINDING]) {
        assert!(
            crates.iter().any(|c| c == shipped),
            "{shipped} is missing from crates/: update this guard"
        );
    }
    let mut offenders = Vec::new();
    for krate in crates.iter().filter(|c| *c != BINDING && *c != CLIENT) {
        let root = workspace().join("crates").join(krate);
        let manifest = fs::read_to_string(root.join("Cargo.toml")).expect("manifest");
        let exception = EXCEPTIONS.iter().find(|e| e.krate == krate);
        for (table, client) in client_dependencies(&manifest) {
            if !exception.is_some_and(|e| e.tables.contains(&table.as_str())) {
                offenders.push(format!("{krate}/Cargo.toml: {client} in [{table}]"));
            }
        }
        for dir in ["src", "tests", "benches", "examples"] {
            if exception.is_some_and(|e| e.dirs.contains(&dir)) {
                continue;
            }
            for file in rust_files(&root.join(dir)) {
                let text = fs::read_to_string(&file).expect("source");
                if let Some(client) = names_client(&text) {
                    offenders.push(format!("{}: names {client}", file.display()));
                }
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "only {BINDING} may speak the client library:\n{}",
        offenders.join("\n")
    );
}

#[test]
fn the_exceptions_are_dev_only_crates_or_tests_of_shipped_ones() {
    for exception in &EXCEPTIONS {
        assert!(exception.krate != BINDING, "the binding gets no exception");
        if SHIPPED.contains(&exception.krate) {
            // What a shipped crate ships never names a client crate: only its tests may.
            assert!(
                exception.tables == ["dev-dependencies"] && exception.dirs == ["tests"],
                "{} is shipped: only its tests may name a client crate",
                exception.krate
            );
            continue;
        }
        let manifest = fs::read_to_string(
            workspace()
                .join("crates")
                .join(exception.krate)
                .join("Cargo.toml"),
        )
        .expect("an excepted crate exists");
        assert!(
            manifest
                .lines()
                .any(|l| l.split_whitespace().collect::<String>() == "publish=false"),
            "{} is excepted but publishable",
            exception.krate
        );
    }
}

#[test]
fn the_manifest_check_sees_every_way_to_depend() {
    let cases = [
        ("[dependencies]\namqprs.workspace = true\n", "dependencies"),
        ("[dependencies]\namqprs = { version = \"2.1\" }\n", "dependencies"),
        ("[dev-dependencies]\nlapin = \"4\"\n", "dev-dependencies"),
        ("[dependencies.amqprs]\nversion = \"2\"\n", "dependencies"),
        (
            "[target.'cfg(unix)'.build-dependencies]\nclient = { package = \"amqprs\", version = \"2\" }\n",
            "build-dependencies",
        ),
    ];
    for (manifest, table) in cases {
        let found = client_dependencies(manifest);
        assert_eq!(found.len(), 1, "{manifest}: {found:?}");
        assert_eq!(found[0].0, table, "{manifest}");
    }
    let clean = "[package]\nname = \"amqprs-free\"\n# amqprs = \"2\"\n[dependencies]\nmesh-amqp.workspace = true\n[workspace.dependencies]\namqprs = \"2\"\n";
    assert_eq!(client_dependencies(clean), Vec::new());
    // Built, so that this file does not name the client itself.
    let path = format!("use {}::channel::Channel;", CLIENT_CRATES[0]);
    assert_eq!(names_client(&path), Some(CLIENT_CRATES[0]));
    assert_eq!(names_client("// amqprs 2.1 panics here"), None);
}

#[test]
fn the_binding_keeps_client_types_out_of_public_signatures() {
    let mut offenders = Vec::new();
    let src = workspace().join("crates").join(BINDING).join("src");
    for file in rust_files(&src) {
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
