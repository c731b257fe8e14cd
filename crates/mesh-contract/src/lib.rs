//! The contract of a whole mesh system, from what its modules announce.
//!
//! Every bus announces its [`ModuleContract`](mesh_core::contract::ModuleContract) when it
//! starts (`module.<m>.contract.announced`); the audit logger keeps them. This crate takes
//! them from there (or from files) and:
//!
//! - gathers the current contract of every module into a [`System`] (the newest
//!   announcement of each owner wins), checking each on the way in: keys, patterns, tools and
//!   schemas from the wire are refused with an [`Error`], never a panic;
//! - exports a system, or one module of it, as an AsyncAPI 3.0 document ([`asyncapi`]);
//! - writes the Rust types of the events and tools a module consumes or calls
//!   ([`codegen`]);
//! - compares two systems and lists the breaking changes, each with the rule, the key or
//!   tool, the field and whom it breaks ([`check()`]).
//!
//! Architecture invariant: it knows no transport and no store, and performs no I/O; the
//! `mesh contract` command reads the store and files and hands it JSON.

#![warn(missing_docs)]

pub mod asyncapi;
mod check;
pub mod codegen;
mod error;
mod schema;
mod seal;
mod system;

pub use check::{check, Finding, Rule, Side, Subject};
pub use error::{Error, ErrorKind};
pub use schema::MAX_SCHEMA_DEPTH;
pub use seal::DIGEST_EXTENSION;
pub use system::{
    check_contract, is_announcement_key, read_announcement, read_contract, KeyRow, System, ToolRow,
    ASYNCAPI_EXTENSION, SYSTEM_FORMAT, SYSTEM_FORMAT_KEY,
};
