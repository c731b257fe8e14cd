//! The crate's module graph, read from the sources by the workspace's shape check
//! (`mesh-house`): no module of the state (the functional core) may name the broker, the
//! ackers or the transport. (That no crate has a cycle is held for the whole workspace by
//! `mesh-house`'s own test.)

use std::path::Path;

use mesh_house::{cycles, Graph, Sources};

/// The modules that perform effects or face the SDK; the state must not depend on them.
const SHELL: [&str; 3] = ["acker", "broker", "transport"];

fn graph() -> Graph {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let sources = Sources::read_crate(&src).expect("a readable src folder");
    Graph::of(&sources, &src.join("lib.rs"))
}

#[test]
fn the_module_graph_has_no_cycle() {
    let graph = graph();
    assert_eq!(cycles(&graph), Vec::new());
    // The graph was read at all: the shell names the state.
    assert!(graph.edges["broker"].contains_key("state"), "{graph:?}");
}

#[test]
fn the_state_names_neither_broker_nor_acker_nor_transport() {
    let graph = graph();
    let state: Vec<_> = graph
        .edges
        .iter()
        .filter(|(module, _)| *module == "state" || module.starts_with("state::"))
        .collect();
    assert!(
        state.len() > 1,
        "the state is split into modules: {graph:?}"
    );
    for (module, named) in state {
        for shell in SHELL {
            assert!(!named.contains_key(shell), "{module} names {shell}");
        }
    }
}
