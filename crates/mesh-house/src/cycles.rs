//! The cycles of a module graph: its strongly connected components of more than one module
//! (Tarjan's algorithm, iterative so that no graph can exhaust the stack).

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use crate::tree::Graph;

/// Modules that name each other in a loop, with the edges between them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cycle {
    /// The modules and their files, in key order.
    pub modules: Vec<(String, PathBuf)>,
    /// Each edge between two modules of the cycle, with the names that tie it.
    pub edges: Vec<(String, String, Vec<String>)>,
}

impl fmt::Display for Cycle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let files: Vec<_> = self
            .modules
            .iter()
            .map(|(_, file)| file.display().to_string())
            .collect();
        write!(f, "{}", files.join(", "))?;
        for (from, to, names) in &self.edges {
            write!(f, "\n    {from} -> {to}: {}", names.join(", "))?;
        }
        Ok(())
    }
}

/// Every cycle of `graph`.
pub fn cycles(graph: &Graph) -> Vec<Cycle> {
    let keys: Vec<&String> = graph.files.keys().collect();
    let index: BTreeMap<&str, usize> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| (k.as_str(), i))
        .collect();
    let successors: Vec<Vec<usize>> = keys
        .iter()
        .map(|k| {
            graph
                .edges
                .get(*k)
                .into_iter()
                .flat_map(|named| named.keys())
                .filter_map(|to| index.get(to.as_str()).copied())
                .collect()
        })
        .collect();

    let mut found = Vec::new();
    for component in components(&successors) {
        if component.len() < 2 {
            continue;
        }
        let mut members: Vec<usize> = component;
        members.sort_unstable();
        let mut edges = Vec::new();
        for &from in &members {
            for &to in successors[from].iter().filter(|to| members.contains(to)) {
                let names = graph.edges[keys[from]][keys[to]].iter().cloned().collect();
                edges.push((keys[from].clone(), keys[to].clone(), names));
            }
        }
        found.push(Cycle {
            modules: members
                .iter()
                .map(|&m| (keys[m].clone(), graph.files[keys[m]].clone()))
                .collect(),
            edges,
        });
    }
    found
}

/// The strongly connected components of the graph `successors` describes.
fn components(successors: &[Vec<usize>]) -> Vec<Vec<usize>> {
    const UNSEEN: usize = usize::MAX;
    let n = successors.len();
    let mut order = vec![UNSEEN; n];
    let mut low = vec![0; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut next = 0;
    let mut out = Vec::new();
    for start in 0..n {
        if order[start] != UNSEEN {
            continue;
        }
        // (node, index of its next successor to visit)
        let mut work = vec![(start, 0usize)];
        while let Some(&mut (node, ref mut child)) = work.last_mut() {
            if *child == 0 && order[node] == UNSEEN {
                order[node] = next;
                low[node] = next;
                next += 1;
                stack.push(node);
                on_stack[node] = true;
            }
            if let Some(&to) = successors[node].get(*child) {
                *child += 1;
                if order[to] == UNSEEN {
                    work.push((to, 0));
                } else if on_stack[to] {
                    low[node] = low[node].min(order[to]);
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[node]);
            }
            if low[node] == order[node] {
                let mut component = Vec::new();
                while let Some(member) = stack.pop() {
                    on_stack[member] = false;
                    component.push(member);
                    if member == node {
                        break;
                    }
                }
                out.push(component);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::tree::Sources;

    fn graph(files: &[(&str, &str)]) -> Graph {
        let mut sources = Sources::new();
        for (path, text) in files {
            sources.insert(format!("/c/src/{path}"), *text);
        }
        Graph::of(&sources, Path::new("/c/src/lib.rs"))
    }

    #[test]
    fn two_files_naming_each_other_are_a_cycle() {
        let g = graph(&[
            ("lib.rs", "mod a; mod b; mod c;"),
            ("a.rs", "use crate::b::B;"),
            ("b.rs", "use crate::c::C;"),
            ("c.rs", "use crate::a::A;"),
        ]);
        let found = cycles(&g);
        assert_eq!(found.len(), 1, "{found:?}");
        let modules: Vec<_> = found[0].modules.iter().map(|(m, _)| m.as_str()).collect();
        assert_eq!(modules, ["a", "b", "c"]);
        assert_eq!(found[0].edges.len(), 3);
    }

    #[test]
    fn a_child_naming_its_parent_that_names_it_is_a_cycle() {
        let g = graph(&[
            ("lib.rs", "mod p;"),
            ("p/mod.rs", "mod w; pub use w::W; pub struct S;"),
            ("p/w.rs", "use super::S; pub struct W;"),
        ]);
        assert_eq!(cycles(&g).len(), 1);
    }

    #[test]
    fn a_tree_has_no_cycle() {
        let g = graph(&[
            ("lib.rs", "mod a; mod b; pub use a::A; pub use b::B;"),
            ("a.rs", "use crate::b::B; pub struct A;"),
            ("b.rs", "pub struct B;"),
        ]);
        assert!(cycles(&g).is_empty());
    }

    #[test]
    fn a_long_chain_is_read_without_recursion() {
        let n = 20_000;
        let mut successors: Vec<Vec<usize>> = (0..n).map(|i| vec![i + 1]).collect();
        successors[n - 1] = vec![0];
        let found = components(&successors);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].len(), n);
    }
}
