//! Typed events: a Rust type that knows its routing key, schema version and, when declared,
//! the JSON Schema of its body.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::schema::Schema;

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
///
/// # Declaring its JSON Schema
///
/// Derive `schemars::JsonSchema` and return [`Schema::of`] from [`Event::json_schema`]: the
/// bus then announces the schema with the key and version in its contract, and (with
/// [`validate_schemas`](crate::BusBuilder::validate_schemas)) checks incoming bodies against
/// it.
///
/// ```
/// # #[cfg(feature = "schemas")] {
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize, schemars::JsonSchema)]
/// struct SiteCreated {
///     site: String,
/// }
///
/// impl mesh::Event for SiteCreated {
///     const KEY: &'static str = "module.umami.site.created";
///     fn json_schema() -> Option<mesh::Schema> { Some(mesh::Schema::of::<Self>()) }
/// }
///
/// let schema = <SiteCreated as mesh::Event>::json_schema().expect("declared");
/// assert_eq!(schema.as_json()["required"], serde_json::json!(["site"]));
/// # }
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

    /// The JSON Schema of the body of version [`Event::SCHEMA`], when declared (by default
    /// none): `Some(Schema::of::<Self>())` with `#[derive(schemars::JsonSchema)]`.
    fn json_schema() -> Option<Schema> {
        None
    }
}
