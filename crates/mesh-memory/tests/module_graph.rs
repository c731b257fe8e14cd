//! The crate's module graph: which of its modules each module names, read from the sources.
//! It must have no cycle, and no module of the state (the functional core) may name the
//! broker, the ackers or the transport. The state's unit tests (`state/tests.rs`, compiled
//! only for tests) are left out: they exercise the state from outside.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The modules that perform effects or face the SDK; the state must not depend on them.
const SHELL: [&str; 3] = ["acker", "broker", "transport"];

/// Every `.rs` file under `dir`, recursively.
fn sources(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a readable source directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            sources(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// The module a file holds: `crate`, `broker`, `state`, `state::queue`, ...
fn module_of(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).expect("a file under src");
    let mut parts: Vec<String> = relative
        .iter()
        .map(|part| part.to_string_lossy().trim_end_matches(".rs").to_owned())
        .collect();
    if parts
        .last()
        .is_some_and(|last| last == "mod" || last == "lib")
    {
        parts.pop();
    }
    if parts.is_empty() {
        "crate".to_owned()
    } else {
        parts.join("::")
    }
}

/// What follows each `prefix` in `code` (`prefix` preceded by no identifier character nor
/// `:`, so `super::` does not match inside `xsuper::`): the identifier there, or `""` when
/// none is (a group, `super::{a, b}`).
fn after<'a>(code: &'a str, prefix: &str) -> Vec<&'a str> {
    let mut found = Vec::new();
    let mut rest = code;
    let mut offset = 0;
    while let Some(at) = rest.find(prefix) {
        let start = offset + at;
        let preceded = code[..start]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':');
        let tail = &code[start + prefix.len()..];
        let end = tail
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        if !preceded {
            found.push(&tail[..end]);
        }
        offset = start + prefix.len();
        rest = &code[offset..];
    }
    found
}

/// The source without comments (line comments and doc comments; the crate has no block
/// comments).
fn code(text: &str) -> String {
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Module -> the crate's modules it names.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let modules: BTreeSet<String> = files
        .iter()
        .map(|file| module_of(&src, file))
        .filter(|module| module != "state::tests")
        .collect();
    let mut graph = BTreeMap::new();
    for file in &files {
        let module = module_of(&src, file);
        if !modules.contains(&module) {
            continue;
        }
        let code = code(&std::fs::read_to_string(file).expect("a readable source file"));
        let parent = module
            .rsplit_once("::")
            .map(|(parent, _)| parent.to_owned());
        let mut named = BTreeSet::new();
        let child = |name: &str| {
            if module == "crate" {
                name.to_owned()
            } else {
                format!("{module}::{name}")
            }
        };
        // `crate::a::b` names `a::b` if that is a module, else `a`.
        // A group (`crate::{a, b}`) is not used by the crate; it would name nothing here.
        for first in after(&code, "crate::") {
            named.insert(first.to_owned());
            for second in after(&code, &format!("crate::{first}::")) {
                let nested = format!("{first}::{second}");
                if modules.contains(&nested) {
                    named.insert(nested);
                }
            }
        }
        // `super::x` names the sibling `x` if that is a module, else (an item, or a group)
        // the parent: more edges than there may be, never fewer.
        if let Some(parent) = &parent {
            for name in after(&code, "super::") {
                let sibling = format!("{parent}::{name}");
                named.insert(if modules.contains(&sibling) {
                    sibling
                } else {
                    parent.clone()
                });
            }
        }
        // A bare path into a child module (`use queue::Queue;`, `pub use broker::X;`).
        for candidate in &modules {
            if let Some(name) = candidate
                .strip_prefix(&format!("{module}::"))
                .or_else(|| (module == "crate").then_some(candidate.as_str()))
            {
                if !name.contains("::") && !after(&code, &format!("{name}::")).is_empty() {
                    named.insert(child(name));
                }
            }
        }
        named.retain(|name| modules.contains(name) && name != &module);
        graph.insert(module, named);
    }
    graph
}

/// A cycle through `module`, if any, as the path that closes it.
fn cycle(
    graph: &BTreeMap<String, BTreeSet<String>>,
    module: &str,
    path: &mut Vec<String>,
    done: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    if let Some(at) = path.iter().position(|m| m == module) {
        let mut cycle = path[at..].to_vec();
        cycle.push(module.to_owned());
        return Some(cycle);
    }
    if done.contains(module) {
        return None;
    }
    path.push(module.to_owned());
    for next in graph.get(module).into_iter().flatten() {
        if let Some(cycle) = cycle(graph, next, path, done) {
            return Some(cycle);
        }
    }
    path.pop();
    done.insert(module.to_owned());
    None
}

#[test]
fn the_module_graph_has_no_cycle() {
    let graph = graph();
    for (module, named) in &graph {
        println!(
            "{module} -> {}",
            named.iter().cloned().collect::<Vec<_>>().join(", ")
        );
    }
    let mut done = BTreeSet::new();
    for module in graph.keys() {
        let found = cycle(&graph, module, &mut Vec::new(), &mut done);
        assert_eq!(found, None, "a cycle in the module graph");
    }
    // The graph was read at all: the shell names the state.
    assert!(graph["broker"].contains("state"), "{graph:?}");
    assert!(graph["state"].contains("state::queue"), "{graph:?}");
}

#[test]
fn the_state_names_neither_broker_nor_acker_nor_transport() {
    let graph = graph();
    let state: Vec<_> = graph
        .iter()
        .filter(|(module, _)| *module == "state" || module.starts_with("state::"))
        .collect();
    assert!(
        state.len() > 1,
        "the state is split into modules: {graph:?}"
    );
    for (module, named) in state {
        for shell in SHELL {
            assert!(!named.contains(shell), "{module} names {shell}");
        }
    }
}
