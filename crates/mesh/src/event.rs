//! Typed events: a Rust type that knows its routing key and schema version.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// An event type.
///
/// ```
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// struct SiteCreated {
///     site: String,
/// }
///
/// impl mesh::Event for SiteCreated {
///     const KEY: &'static str = "module.umami.site.created";
///     const SCHEMA: u32 = 2;
///     fn reads(version: u32) -> bool {
///         version == 1 || version == 2
///     }
/// }
/// ```
pub trait Event: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// The routing key of this event: `<origin>.<owner>.<event…>`. Only the owner may emit
    /// it; anyone may handle it.
    const KEY: &'static str;

    /// The version of the body's shape this type writes (`x-schema`).
    const SCHEMA: u32 = 1;

    /// Whether this type can read a body of `version`. An event of a version it does not
    /// read is dead-lettered (reason `unread-schema`), never misread. By default only
    /// [`Event::SCHEMA`] is read.
    fn reads(version: u32) -> bool {
        version == Self::SCHEMA
    }
}
