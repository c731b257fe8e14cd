//! What the harness and its child processes agree on, in a leaf of its own so that both
//! sides ([`crate::setup`] for the harness, [`crate::worker`] for the child) name it without
//! naming each other.

/// Private nodes run without the management plugin (it adds seconds to every boot, and the
/// restart scenarios boot a node a dozen times). The transport asks the management API for
/// bindings to remove, and by default looks for it on port 15672 of the broker's host, which
/// on this machine is the *shared* broker's: point it at a port where nothing listens, so it
/// falls back to the bindings it declared itself instead of asking the wrong broker.
pub const NO_MANAGEMENT: &str = "http://127.0.0.1:1";

/// The environment variable in which a child process gets the password of the user its URL
/// names (see [`Login`](crate::setup::Login)), so that the password is on no command line.
pub const PASSWORD_ENV: &str = "MESH_PASSWORD";
