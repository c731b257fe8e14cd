//! A user's crate: it names meshbus's types, so that the whole of meshbus is checked.

/// The bus a user builds.
pub type UserBus = mesh::Bus;
