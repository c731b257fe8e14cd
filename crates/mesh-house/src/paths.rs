//! The paths one file's code holds into its crate's modules, read from its tokens: where
//! each path reaches, what the file's `use` declarations bring in under which name, and the
//! names the file defines.

use std::collections::{BTreeMap, BTreeSet};

use crate::lexer::Token;

/// The crate root's key.
pub(crate) const ROOT: &str = "crate";

/// The key of the module `name` inside `base`.
pub(crate) fn join(base: &str, name: &str) -> String {
    if base == ROOT {
        name.to_owned()
    } else {
        format!("{base}::{name}")
    }
}

fn parent(module: &str) -> Option<&str> {
    match module.rsplit_once("::") {
        Some((parent, _)) => Some(parent),
        None if module == ROOT => None,
        None => Some(ROOT),
    }
}

/// Where a path (or one branch of a `use` group) reaches: the deepest module it names, the
/// item it names there (`*` for a glob), and the name a `use` gives it with `as`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reached {
    pub(crate) module: String,
    pub(crate) item: Option<String>,
    alias: Option<String>,
}

/// What one module's file holds.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    /// Every path into the crate's modules.
    pub(crate) refs: Vec<Reached>,
    /// The file's own `use` bindings (outside inline modules), by the name they bind.
    pub(crate) imports: BTreeMap<String, Reached>,
    /// The modules its `use … ::*` declarations glob (outside inline modules).
    pub(crate) globs: Vec<String>,
    /// The names it defines (`struct X`, `fn x`, `mod x`, …).
    pub(crate) defines: BTreeSet<String>,
    /// The names its `use` declarations bring in from other crates (outside inline modules).
    pub(crate) external: BTreeSet<String>,
}

const DEFINING: [&str; 10] = [
    "struct",
    "enum",
    "union",
    "trait",
    "type",
    "fn",
    "const",
    "static",
    "mod",
    "macro_rules",
];

impl Scan {
    /// The scan of the file of `module`, whose crate has `modules`.
    pub(crate) fn of(modules: &BTreeSet<String>, module: &str, toks: &[Token]) -> Scan {
        let reader = Reader { modules };
        let mut scan = Scan::default();
        // Per open brace: whether it opened an inline module.
        let mut braces: Vec<bool> = Vec::new();
        let mut i = 0;
        while i < toks.len() {
            let inline_depth = braces.iter().filter(|inline| **inline).count();
            let previous = i.checked_sub(1).and_then(|k| toks.get(k));
            match &toks[i] {
                Token::Open => {
                    let opens_module = i >= 2
                        && matches!(&toks[i - 1], Token::Name(_))
                        && toks[i - 2] == Token::Name("mod".into());
                    braces.push(opens_module);
                    i += 1;
                    continue;
                }
                Token::Close => {
                    braces.pop();
                    i += 1;
                    continue;
                }
                Token::Name(name) => {
                    if let Some(Token::Name(keyword)) = previous {
                        if DEFINING.contains(&keyword.as_str()) {
                            scan.defines.insert(name.clone());
                        }
                    }
                }
                _ => {}
            }
            let after_sep = previous == Some(&Token::PathSep);
            let followed = toks.get(i + 1) == Some(&Token::PathSep);
            let base = match &toks[i] {
                Token::Name(name) if followed && !after_sep => {
                    reader.base(module, name, toks, i, inline_depth)
                }
                _ => None,
            };
            let Some((base, next)) = base else {
                if previous == Some(&Token::Name("use".into())) && inline_depth == 0 {
                    scan.external.extend(bound_names(&toks[i..]));
                }
                i += 1;
                continue;
            };
            let (end, reached) = reader.follow(toks, next, base);
            let is_use = previous == Some(&Token::Name("use".into()));
            // `#[cfg(doc)] use …;` serves doc links alone: no dependency of the code.
            if is_use && doc_only(toks, i - 1) {
                i = end.max(i + 1);
                continue;
            }
            for r in reached {
                if is_use && inline_depth == 0 {
                    scan.bind(r.clone());
                }
                scan.refs.push(r);
            }
            i = end.max(i + 1);
        }
        scan
    }

    /// Records what a `use` brings in.
    fn bind(&mut self, reached: Reached) {
        if reached.item.as_deref() == Some("*") {
            self.globs.push(reached.module);
            return;
        }
        let name = reached
            .alias
            .clone()
            .or_else(|| reached.item.clone())
            .or_else(|| reached.module.rsplit("::").next().map(str::to_owned));
        if let Some(name) = name {
            self.imports.insert(name, reached);
        }
    }
}

struct Reader<'a> {
    modules: &'a BTreeSet<String>,
}

impl Reader<'_> {
    fn is_module(&self, key: &str) -> bool {
        self.modules.contains(key)
    }

    /// Where a path starting with `name` at `i` begins, and the index of the `::` after its
    /// base (`super::super::` is one base).
    fn base(
        &self,
        module: &str,
        name: &str,
        toks: &[Token],
        i: usize,
        inline_depth: usize,
    ) -> Option<(String, usize)> {
        match name {
            "crate" => Some((ROOT.to_owned(), i + 1)),
            "self" => Some((module.to_owned(), i + 1)),
            "super" => {
                let mut supers: usize = 1;
                let mut next = i + 1;
                while toks.get(next + 1) == Some(&Token::Name("super".into()))
                    && toks.get(next + 2) == Some(&Token::PathSep)
                {
                    supers += 1;
                    next += 2;
                }
                // `super` inside an inline module first leaves the inline modules, which
                // live in this same file.
                let mut base = module.to_owned();
                for _ in 0..supers.saturating_sub(inline_depth) {
                    base = parent(&base)?.to_owned();
                }
                Some((base, next))
            }
            // A bare path into a child module (`use queue::Queue;`), outside inline modules.
            _ if inline_depth == 0 && self.is_module(&join(module, name)) => {
                Some((join(module, name), i + 1))
            }
            _ => None,
        }
    }

    /// Follows a path from `cur` at the `::` at `j`: where it reaches (one per branch of a
    /// group), and the index after it.
    fn follow(&self, toks: &[Token], mut j: usize, mut cur: String) -> (usize, Vec<Reached>) {
        while toks.get(j) == Some(&Token::PathSep) {
            match toks.get(j + 1) {
                Some(Token::Name(name)) if self.is_module(&join(&cur, name)) => {
                    cur = join(&cur, name);
                    j += 2;
                }
                Some(Token::Open) => return self.group(toks, j + 2, &cur),
                Some(Token::Star) => return (j + 2, vec![reached(cur, Some("*"), None)]),
                Some(Token::Name(item)) => {
                    let alias = alias(toks, j + 2);
                    return (j + 2, vec![reached(cur, Some(item), alias)]);
                }
                _ => return (j + 1, vec![reached(cur, None, None)]),
            }
        }
        let alias = alias(toks, j);
        (j, vec![reached(cur, None, alias)])
    }

    /// The branches of a `use` group opening before `j`, relative to `cur`.
    fn group(&self, toks: &[Token], mut j: usize, cur: &str) -> (usize, Vec<Reached>) {
        let mut found = Vec::new();
        while let Some(token) = toks.get(j) {
            match token {
                Token::Close => return (j + 1, found),
                Token::Open => {
                    let (end, inner) = self.group(toks, j + 1, cur);
                    found.extend(inner);
                    j = end;
                }
                Token::Name(name) if name == "self" => {
                    found.push(reached(cur.to_owned(), None, alias(toks, j + 1)));
                    j += 1;
                }
                Token::Name(name) if self.is_module(&join(cur, name)) => {
                    let (end, inner) = self.follow(toks, j + 1, join(cur, name));
                    found.extend(inner);
                    j = end;
                }
                Token::Name(name) if name == "as" => j += 2,
                Token::Name(item) => {
                    found.push(reached(cur.to_owned(), Some(item), alias(toks, j + 1)));
                    j += 1;
                }
                Token::Star => {
                    found.push(reached(cur.to_owned(), Some("*"), None));
                    j += 1;
                }
                _ => j += 1,
            }
        }
        (j, found)
    }
}

/// The names a `use` tree starting at `toks[0]` binds, up to its `;`: each leaf's last name
/// or its `as` name.
fn bound_names(toks: &[Token]) -> Vec<String> {
    let mut names = Vec::new();
    for (k, token) in toks.iter().enumerate() {
        match token {
            Token::Semi => break,
            Token::Name(name) if name != "self" && name != "as" => {
                if matches!(
                    toks.get(k + 1),
                    Some(Token::Comma | Token::Close | Token::Semi)
                ) {
                    names.push(name.clone());
                }
            }
            _ => {}
        }
    }
    names
}

/// Whether the `use` at `at` is under `#[cfg(doc)]`.
fn doc_only(toks: &[Token], at: usize) -> bool {
    let Some(start) = at.checked_sub(7) else {
        return false;
    };
    matches!(
        &toks[start..at],
        [
            Token::Pound,
            Token::Bracket,
            Token::Name(cfg),
            Token::Other,
            Token::Name(doc),
            Token::Other,
            Token::Other,
        ] if cfg == "cfg" && doc == "doc"
    )
}

fn reached(module: String, item: Option<&str>, alias: Option<String>) -> Reached {
    Reached {
        module,
        item: item.map(str::to_owned),
        alias,
    }
}

/// The name after an `as` at `j`, if one is there.
fn alias(toks: &[Token], j: usize) -> Option<String> {
    match (toks.get(j), toks.get(j + 1)) {
        (Some(Token::Name(keyword)), Some(Token::Name(name))) if keyword == "as" => {
            Some(name.clone())
        }
        _ => None,
    }
}
