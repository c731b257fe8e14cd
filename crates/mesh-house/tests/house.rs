//! The workspace as it stands: every member crate's targets (library, binaries) without a
//! file-level import cycle, and every source file under a crate's `src/` either at most
//! 1,000 lines or saying at its top why it is one piece.

use std::path::{Path, PathBuf};

use mesh_house::{crate_roots, cycles, long_files, Graph, Sources, MAX_LINES};

/// A workspace member: its directory and package name.
struct Member {
    dir: PathBuf,
    name: String,
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("the crate sits two levels under the workspace root")
        .to_path_buf()
}

/// The members the root manifest lists (`dir/*` globs or plain paths).
fn members() -> Vec<Member> {
    let root = workspace_root();
    let manifest: toml::Table = std::fs::read_to_string(root.join("Cargo.toml"))
        .expect("the root manifest")
        .parse()
        .expect("the root manifest is TOML");
    let patterns = manifest["workspace"]["members"]
        .as_array()
        .expect("workspace.members");
    let mut dirs = Vec::new();
    for pattern in patterns {
        let pattern = pattern.as_str().expect("a member pattern is a string");
        match pattern.strip_suffix("/*") {
            Some(parent) => {
                for entry in std::fs::read_dir(root.join(parent)).expect("a members folder") {
                    dirs.push(entry.expect("a directory entry").path());
                }
            }
            None => dirs.push(root.join(pattern)),
        }
    }
    let mut members: Vec<Member> = dirs
        .into_iter()
        .filter_map(|dir| {
            let text = std::fs::read_to_string(dir.join("Cargo.toml")).ok()?;
            let manifest: toml::Table = text.parse().expect("a member's manifest is TOML");
            let name = manifest["package"]["name"].as_str()?.to_owned();
            Some(Member { dir, name })
        })
        .collect();
    members.sort_by(|a, b| a.name.cmp(&b.name));
    members
}

/// Upstream code kept as a crate of ours, close to its source so that the diff is only our
/// fixes (docs/decisions/0012-a-fork-of-amqprs.md): its module graph is upstream's, cycles
/// included, and is not reshaped here.
const VENDORED: &[&str] = &["meshbus-amqprs"];

fn sources(member: &Member) -> Sources {
    Sources::read_crate(&member.dir.join("src")).expect("a readable src folder")
}

#[test]
fn no_crate_has_a_file_level_import_cycle() {
    let members = members();
    assert!(members.len() > 10, "the workspace's members were found");
    let mut found = Vec::new();
    let mut modules = 0;
    let mut edges = 0;
    for member in members
        .iter()
        .filter(|member| !VENDORED.contains(&member.name.as_str()))
    {
        let sources = sources(member);
        for root in crate_roots(&sources, &member.dir.join("src")) {
            let graph = Graph::of(&sources, &root);
            modules += graph.files.len();
            edges += graph.edges.values().map(|named| named.len()).sum::<usize>();
            for cycle in cycles(&graph) {
                found.push(format!("{} ({}): {cycle}", member.name, root.display()));
            }
        }
    }
    println!("{modules} modules, {edges} edges between files of one crate");
    // The graph was read at all: a workspace of this size names its modules by the hundred.
    assert!(
        modules > 100 && edges > 100,
        "{modules} modules, {edges} edges"
    );
    assert!(
        found.is_empty(),
        "{} file-level import cycles; move what both sides share into a leaf module:\n{}",
        found.len(),
        found.join("\n")
    );
}

#[test]
fn every_long_source_file_says_why_it_is_one_piece() {
    let mut unexplained = Vec::new();
    for member in members() {
        let sources = sources(&member);
        for long in long_files(sources.iter()) {
            match &long.reason {
                Some(reason) => {
                    println!("{} ({} lines): {reason}", long.path.display(), long.lines)
                }
                None => unexplained.push(format!("{} ({} lines)", long.path.display(), long.lines)),
            }
        }
    }
    assert!(
        unexplained.is_empty(),
        "source files over {MAX_LINES} lines without a reason: split them by concern, or say \
         why each is one piece in a `//! One piece: …` line of its leading doc block:\n{}",
        unexplained.join("\n")
    );
}
