//! Who a bus speaks as: the runtime decides an event's origin and owner, never the caller.

use mesh_core::{Name, Origin, RoutingKey};

/// The identity a bus emits and consumes as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// A module: emits `module.<module>.…`, consumes on `<node>.<module>.events`.
    Module(Name),
    /// A runtime context: emits `mesh.<context>.…`.
    Context(Name),
    /// The node itself: emits `node.<node>.…`.
    Node,
}

impl Identity {
    /// The origin of the keys it emits.
    pub fn origin(&self) -> Origin {
        match self {
            Identity::Module(_) => Origin::Module,
            Identity::Context(_) => Origin::Mesh,
            Identity::Node => Origin::Node,
        }
    }

    /// The owner word of its keys (and its `x-source`).
    pub fn owner<'a>(&'a self, node: &'a Name) -> &'a Name {
        match self {
            Identity::Module(name) | Identity::Context(name) => name,
            Identity::Node => node,
        }
    }

    /// `<origin>.<owner>.`: the prefix of every key it may emit.
    pub(crate) fn prefix(&self, node: &Name) -> String {
        format!("{}.{}.", self.origin(), self.owner(node))
    }

    /// Whether it may emit `key`.
    pub(crate) fn owns(&self, node: &Name, key: &RoutingKey) -> bool {
        key.origin() == self.origin() && key.name() == self.owner(node).as_str()
    }
}
