//! The workspace's shape, checked against two rules of the house:
//!
//! - **No file-level import cycle inside a crate.** A file names another when its code holds
//!   a path into that file's module (`crate::a::b`, `super::x`, `self::x`, a bare `child::x`,
//!   and every branch of a `use` group). Files that name each other in a loop are one room
//!   pretending to be several: shared types belong in a leaf module both name.
//! - **No source file over 1,000 lines that does not say why it is one piece**: its leading
//!   `//!` block holds a line starting `//! One piece:` with the reason (at least
//!   [`MIN_REASON_CHARS`] characters of it).
//!
//! The reading is lexical, without the compiler: comments, strings and character literals
//! are skipped, each crate root's module tree is followed through its `mod name;`
//! declarations (and `#[path]`), and `super::` inside an inline module (`mod tests { … }`)
//! counts the inline levels, so a test module naming its own file is no edge. It may see an
//! edge the compiler would not (a bare path whose first name is also a child module's),
//! never miss one written as a path: it errs on the side of the rule.
//!
//! Architecture invariant: pure functions over source texts ([`Sources`]); reading the disk
//! happens only in [`Sources::read_crate`] and [`long_files`]'s caller.

mod cycles;
mod length;
mod lexer;
mod paths;
mod tree;

pub use cycles::{cycles, Cycle};
pub use length::{long_files, LongFile, MAX_LINES, MIN_REASON_CHARS};
pub use tree::{crate_roots, Graph, Sources};
