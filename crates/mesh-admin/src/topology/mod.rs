//! The topology plan: what the contract wants on the broker for a node ([`Wanted`]: its
//! exchanges, its queues with their arguments, their bindings), compared with what the
//! broker has ([`Actual`], as the management API lists it) into a list of [`Difference`]s
//! ([`differences`]), each with its sign, its line of text and its JSON. Every binding on
//! a mesh exchange that the contract does not explain ([`foreign_bindings`]: an
//! exchange-to-exchange binding, a queue mesh never names, a mesh queue bound where mesh
//! never binds it) is a difference too, which apply removes.
//!
//! Pure data and a pure comparison: no I/O. Reading the broker's state and applying the
//! differences go through the [`ManagementClient`](crate::management::ManagementClient);
//! `mesh topology show|plan|apply` is the command on top, and builds the [`Wanted`] from its
//! spec file and arguments.

mod diff;
mod foreign;
mod wanted;

pub use diff::{compare_queue, describe_arguments, differences, Actual, Difference, Setting};
pub use foreign::{foreign_bindings, is_explained, ForeignBinding, MESH_EXCHANGES};
pub use wanted::{Wanted, WantedExchange, WantedQueue};
