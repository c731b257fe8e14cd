//! A crate target's module tree, followed from its root through `mod name;` declarations,
//! and which of its modules each module's file names.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};

use crate::lexer::{tokens, Token};
use crate::paths::{join, Reached, Scan, ROOT};

/// The source texts of a crate: each `.rs` file's path and text.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    files: BTreeMap<PathBuf, String>,
}

impl Sources {
    /// No sources.
    pub fn new() -> Sources {
        Sources::default()
    }

    /// Adds (or replaces) one file's text.
    pub fn insert(&mut self, path: impl Into<PathBuf>, text: impl Into<String>) {
        self.files.insert(path.into(), text.into());
    }

    /// Every `.rs` file under `dir`, recursively.
    pub fn read_crate(dir: &Path) -> io::Result<Sources> {
        let mut sources = Sources::new();
        let mut pending = vec![dir.to_path_buf()];
        while let Some(dir) = pending.pop() {
            for entry in std::fs::read_dir(&dir)? {
                let path = entry?.path();
                if path.is_dir() {
                    pending.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let text = std::fs::read_to_string(&path)?;
                    sources.insert(path, text);
                }
            }
        }
        Ok(sources)
    }

    /// The files and their texts, in path order.
    pub fn iter(&self) -> impl Iterator<Item = (&Path, &str)> {
        self.files.iter().map(|(p, t)| (p.as_path(), t.as_str()))
    }

    fn text(&self, path: &Path) -> Option<&str> {
        self.files.get(path).map(String::as_str)
    }
}

/// The crate roots among the sources of `src` (a crate's `src/` folder): `lib.rs`,
/// `main.rs`, and each `bin/<name>.rs` or `bin/<name>/main.rs`.
pub fn crate_roots(sources: &Sources, src: &Path) -> Vec<PathBuf> {
    sources
        .files
        .keys()
        .filter(|path| {
            let Ok(relative) = path.strip_prefix(src) else {
                return false;
            };
            let parts: Vec<_> = relative.iter().filter_map(|p| p.to_str()).collect();
            matches!(
                parts.as_slice(),
                ["lib.rs"] | ["main.rs"] | ["bin", _] | ["bin", _, "main.rs"]
            )
        })
        .cloned()
        .collect()
}

/// One crate target's modules, keyed `crate`, `a`, `a::b`, … and the modules each names.
#[derive(Debug, Clone, Default)]
pub struct Graph {
    /// Each module's file.
    pub files: BTreeMap<String, PathBuf>,
    /// Each module's named modules (never itself), with the names it takes from each (none
    /// when it names the module alone).
    pub edges: BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
}

impl Graph {
    /// The graph of the target whose root file is `root`.
    pub fn of(sources: &Sources, root: &Path) -> Graph {
        let mut graph = Graph::default();
        let mut pending = vec![(ROOT.to_owned(), root.to_path_buf(), true)];
        let mut scanned = Vec::new();
        while let Some((module, file, mod_rs)) = pending.pop() {
            let Some(text) = sources.text(&file) else {
                continue;
            };
            if graph.files.contains_key(&module) {
                continue;
            }
            let toks = tokens(text);
            for declared in outline_modules(&toks) {
                let dir = if mod_rs {
                    file.parent().map(Path::to_path_buf).unwrap_or_default()
                } else {
                    file.with_extension("")
                };
                let mut key = module.clone();
                let mut inner = dir.clone();
                for name in &declared.inline {
                    key = join(&key, name);
                    inner.push(name);
                }
                let key = join(&key, &declared.name);
                let (child, child_mod_rs) = match &declared.path {
                    Some(path) => {
                        let base = if declared.inline.is_empty() {
                            file.parent().map(Path::to_path_buf).unwrap_or_default()
                        } else {
                            inner.clone()
                        };
                        (base.join(path), true)
                    }
                    None => {
                        let flat = inner.join(format!("{}.rs", declared.name));
                        if sources.text(&flat).is_some() {
                            (flat, false)
                        } else {
                            (inner.join(&declared.name).join("mod.rs"), true)
                        }
                    }
                };
                pending.push((key, child, child_mod_rs));
            }
            graph.files.insert(module.clone(), file);
            scanned.push((module, toks));
        }
        let modules: BTreeSet<String> = graph.files.keys().cloned().collect();
        let scans: BTreeMap<String, Scan> = scanned
            .into_iter()
            .map(|(module, toks)| {
                let scan = Scan::of(&modules, &module, &toks);
                (module, scan)
            })
            .collect();
        for (module, scan) in &scans {
            let mut named: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
            for reached in &scan.refs {
                let Some(target) = resolve(&scans, reached) else {
                    continue;
                };
                if target != module {
                    let names = named.entry(target.clone()).or_default();
                    names.extend(reached.item.iter().filter(|item| *item != "*").cloned());
                }
            }
            graph.edges.insert(module.clone(), named);
        }
        graph
    }
}

/// The module that defines what `reached` names: an item imported into a module (a
/// re-export, `pub use error::Error;`, or a parent's `use` that a child reaches through
/// `super::`) is charged to where it comes from, so naming `crate::Error` depends on the
/// error module, not on the crate root. What is neither defined nor imported where the path
/// reached (a macro, a variant, a name this reading cannot see) is charged to that module;
/// what a module brought in from another crate is no dependency inside this one (`None`).
fn resolve<'a>(scans: &'a BTreeMap<String, Scan>, reached: &'a Reached) -> Option<&'a String> {
    let mut module = &reached.module;
    let Some(mut item) = reached.item.as_ref() else {
        return Some(module);
    };
    // Re-exports chain a few levels deep at most; a loop of them does not compile.
    for _ in 0..16 {
        let Some(scan) = scans.get(module) else {
            return Some(module);
        };
        if scan.defines.contains(item) {
            return Some(module);
        }
        if scan.external.contains(item) {
            return None;
        }
        if let Some(next) = scan.imports.get(item) {
            match &next.item {
                Some(name) => {
                    module = &next.module;
                    item = name;
                    continue;
                }
                None => return Some(&next.module),
            }
        }
        // Through a glob: the first glob source that defines or imports the name.
        let glob = scan
            .globs
            .iter()
            .filter(|glob| *glob != module)
            .find(|glob| {
                scans.get(*glob).is_some_and(|from| {
                    from.defines.contains(item) || from.imports.contains_key(item)
                })
            });
        match glob {
            Some(glob) => module = glob,
            None => return Some(module),
        }
    }
    Some(module)
}

/// An outline module declaration (`mod name;`), with the inline modules around it and its
/// `#[path]`.
#[derive(Debug)]
struct Declared {
    inline: Vec<String>,
    name: String,
    path: Option<String>,
}

/// The name of the module whose declaration (`mod name`) ends just before `i`.
fn declared_before(toks: &[Token], i: usize) -> Option<&String> {
    match (toks.get(i.checked_sub(2)?), toks.get(i.checked_sub(1)?)) {
        (Some(Token::Name(keyword)), Some(Token::Name(name))) if keyword == "mod" => Some(name),
        _ => None,
    }
}

fn outline_modules(toks: &[Token]) -> Vec<Declared> {
    let mut found = Vec::new();
    let mut inline: Vec<Option<String>> = Vec::new();
    let mut path: Option<String> = None;
    for (i, token) in toks.iter().enumerate() {
        match token {
            Token::Open => {
                inline.push(declared_before(toks, i).cloned());
                path = None;
            }
            Token::Close => {
                inline.pop();
                path = None;
            }
            Token::Semi => {
                if let Some(name) = declared_before(toks, i) {
                    found.push(Declared {
                        inline: inline.iter().flatten().cloned().collect(),
                        name: name.clone(),
                        path: path.take(),
                    });
                }
                path = None;
            }
            // `#[path = "…"]`
            Token::Str(value)
                if i >= 4
                    && toks[i - 1] == Token::Eq
                    && toks[i - 2] == Token::Name("path".into())
                    && toks[i - 3] == Token::Bracket
                    && toks[i - 4] == Token::Pound =>
            {
                path = Some(value.clone());
            }
            _ => {}
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(files: &[(&str, &str)]) -> Graph {
        let mut sources = Sources::new();
        for (path, text) in files {
            sources.insert(format!("/c/src/{path}"), *text);
        }
        Graph::of(&sources, Path::new("/c/src/lib.rs"))
    }

    fn edges(graph: &Graph, module: &str) -> Vec<String> {
        graph.edges[module].keys().cloned().collect()
    }

    #[test]
    fn modules_are_followed_through_their_declarations() {
        let g = graph(&[
            ("lib.rs", "mod a; pub mod b; mod c { mod d; }"),
            ("a.rs", "mod x;"),
            ("a/x.rs", ""),
            ("b/mod.rs", "#[path = \"elsewhere.rs\"] mod y;"),
            ("b/elsewhere.rs", ""),
            ("c/d.rs", ""),
            ("stray.rs", "crate::a"),
        ]);
        let modules: Vec<_> = g.files.keys().cloned().collect();
        assert_eq!(modules, ["a", "a::x", "b", "b::y", "c::d", "crate"]);
    }

    #[test]
    fn every_kind_of_path_is_an_edge() {
        let g = graph(&[
            ("lib.rs", "mod a; mod b; mod c; mod d; pub use a::A;"),
            ("a.rs", "use crate::{b, c::{C, D}};"),
            ("b.rs", "mod x; fn f() { super::d::g(); x::h(); }"),
            ("b/x.rs", "use super::super::a; use self::Y;"),
            ("c.rs", "use crate::*;"),
            ("d.rs", "use super::{c as other};"),
        ]);
        assert_eq!(edges(&g, "crate"), ["a"]);
        assert_eq!(edges(&g, "a"), ["b", "c"]);
        assert_eq!(edges(&g, "b"), ["b::x", "d"]);
        assert_eq!(edges(&g, "b::x"), ["a"]);
        assert_eq!(edges(&g, "c"), ["crate"]);
        assert_eq!(edges(&g, "d"), ["c"]);
    }

    #[test]
    fn an_inline_module_naming_its_own_file_is_no_edge() {
        let g = graph(&[
            ("lib.rs", "mod a; mod b;"),
            (
                "a.rs",
                "fn f() {} #[cfg(test)] mod tests { use super::*; fn t() { super::f(); } }",
            ),
            ("b.rs", "mod tests { use super::super::a; }"),
        ]);
        assert!(g.edges["a"].is_empty(), "{g:?}");
        // Leaving the inline module first, then the file's module: the crate's `a`.
        assert_eq!(edges(&g, "b"), ["a"]);
    }

    #[test]
    fn an_item_is_charged_to_the_module_that_defines_it() {
        let g = graph(&[
            (
                "lib.rs",
                "mod error; mod o; mod p; mod x; pub use error::Error; pub use other::{y as z, w};",
            ),
            ("error.rs", "pub struct Error;"),
            ("o.rs", "pub struct Opt;"),
            ("p/mod.rs", "mod w; use crate::o::Opt; pub use w::W;"),
            ("p/w.rs", "use super::Opt; pub struct W;"),
            (
                "x.rs",
                "use crate::{Error, z}; use crate::p::*; #[cfg(doc)] use crate::o::Opt; fn f(_: W) {}",
            ),
        ]);
        assert_eq!(edges(&g, "x"), ["error", "p"]);
        assert_eq!(edges(&g, "p::w"), ["o"]);
        assert_eq!(edges(&g, "p"), ["o", "p::w"]);
    }

    #[test]
    fn names_in_comments_strings_and_mid_path_are_no_edges() {
        let g = graph(&[
            ("lib.rs", "mod a; mod b;"),
            (
                "a.rs",
                "// crate::b\n const S: &str = \"crate::b\"; use other::b::X;",
            ),
            ("b.rs", ""),
        ]);
        assert!(g.edges["a"].is_empty(), "{g:?}");
    }
}
