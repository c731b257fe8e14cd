//! One acceptance target and how the run fared: what every scenario's verdicts are made of
//! (a leaf, so a scenario can make its own without naming the report).

use serde::Serialize;

/// One acceptance target and how the run fared.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Target {
    pub(crate) name: String,
    pub(crate) wanted: String,
    pub(crate) actual: String,
    pub(crate) met: bool,
    /// Whether the run was the size the target is set for: a smaller one (`--short`)
    /// reports its figure and `met` against the same bound, but gives no verdict.
    pub(crate) judged: bool,
    /// Whether the target sets a bound at all: a figure it asks only to be reported (the
    /// added p99 latency, with its spread) has none, and gets no verdict.
    pub(crate) bound: bool,
}
