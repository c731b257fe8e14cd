//! JSON Schemas of bodies: derived from Rust types, declared by hand, and (opt-in) checked
//! against what arrives.
//!
//! A [`Schema`] is a self-contained JSON Schema document in the draft-07 style AsyncAPI 3.0
//! embeds: its shared parts sit under `definitions` and are referenced as
//! `#/definitions/<Name>` (never the 2020-12 `$defs`), so it stays valid when an exporter
//! moves them to `components/schemas`.

use serde_json::Value;

/// A JSON Schema document (draft-07 style) describing a body.
///
/// Derived from a type with [`Schema::of`] (feature `schemas`, on by default), or declared
/// by hand with [`Schema::from_json`].
///
/// ```
/// # #[cfg(feature = "schemas")] {
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct QuoteRequest {
///     plan: String,
/// }
///
/// let schema = mesh::Schema::of::<QuoteRequest>();
/// assert_eq!(schema.as_json()["required"], serde_json::json!(["plan"]));
/// # }
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Schema(Value);

impl Schema {
    /// The JSON Schema of `T`, as `schemars` derives it with its draft-07 settings: the
    /// shape `T` deserializes from, shared parts under `definitions`.
    #[cfg(feature = "schemas")]
    pub fn of<T: schemars::JsonSchema + ?Sized>() -> Schema {
        let schema = schemars::generate::SchemaSettings::draft07()
            .into_generator()
            .into_root_schema_for::<T>();
        Schema(schema.to_value())
    }

    /// A schema written by hand (for a raw handler or a JSON emit), in the draft-07 style:
    /// shared parts under `definitions`, referenced as `#/definitions/<Name>`. It is
    /// compiled when a bus starts (an invalid one fails
    /// [`BusBuilder::start`](crate::BusBuilder::start) when validation is on).
    pub fn from_json(schema: Value) -> Schema {
        Schema(schema)
    }

    /// The document.
    pub fn as_json(&self) -> &Value {
        &self.0
    }

    /// The document, taken.
    pub fn into_json(self) -> Value {
        self.0
    }
}

impl From<Value> for Schema {
    fn from(schema: Value) -> Schema {
        Schema(schema)
    }
}

/// The most bytes of a validation error a dead letter carries: the error quotes the body's
/// paths, which the sender chose.
#[cfg_attr(not(feature = "schemas"), allow(dead_code))]
pub(crate) const MAX_VALIDATION_ERROR_BYTES: usize = 1024;

/// A schema compiled for validation, with what it describes (for the error message).
#[cfg(feature = "schemas")]
pub(crate) struct Check {
    validator: jsonschema::Validator,
    /// Only bodies of this `x-schema` are checked (a typed handler's schema describes the
    /// version it writes; the older ones it reads have other shapes). `None`: every body.
    version: Option<u32>,
    /// What the schema is of: a type or a handler's patterns.
    subject: String,
}

#[cfg(feature = "schemas")]
impl std::fmt::Debug for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Check")
            .field("version", &self.version)
            .field("subject", &self.subject)
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "schemas")]
impl Check {
    /// Compiles `schema` (draft 7, no remote references, linear-time regular expressions:
    /// a `pattern` never backtracks on a hostile body).
    pub(crate) fn compile(
        schema: &Schema,
        version: Option<u32>,
        subject: String,
    ) -> Result<Check, String> {
        let validator = jsonschema::draft7::options()
            .with_pattern_options(jsonschema::PatternOptions::regex())
            .build(schema.as_json())
            .map_err(|e| crate::raw::codec::cut(&e.to_string(), MAX_VALIDATION_ERROR_BYTES))?;
        Ok(Check {
            validator,
            version,
            subject,
        })
    }

    /// Whether a body of `version` is checked.
    pub(crate) fn applies(&self, version: u32) -> bool {
        self.version.is_none_or(|v| v == version)
    }

    /// Checks a parsed body: the first violation, bounded, with the body's values masked
    /// (only their paths are quoted).
    pub(crate) fn check(&self, body: &Value) -> Result<(), String> {
        match self.validator.validate(body) {
            Ok(()) => Ok(()),
            Err(error) => Err(self.describe(&format!(
                "at `{}`: {}",
                error.instance_path(),
                error.masked()
            ))),
        }
    }

    /// Checks the bytes of a body, as the dispatcher does: parsed, then checked.
    #[cfg(test)]
    pub(crate) fn check_bytes(&self, body: &[u8]) -> Result<(), String> {
        match parse(body) {
            Ok(value) => self.check(&value),
            Err(e) => Err(self.describe(&e)),
        }
    }

    pub(crate) fn describe(&self, problem: &str) -> String {
        crate::raw::codec::cut(
            &format!(
                "body does not match the schema of {}: {problem}",
                self.subject
            ),
            MAX_VALIDATION_ERROR_BYTES,
        )
    }
}

/// Parses a body for its check (serde_json's nesting limit bounds the depth).
#[cfg(feature = "schemas")]
pub(crate) fn parse(body: &[u8]) -> Result<Value, String> {
    serde_json::from_slice::<Value>(body).map_err(|e| format!("the body is not JSON: {e}"))
}

/// Whether `value` uses `$defs` (as a key, or in a `$ref`): a draft-07 style schema never
/// does, and an exporter moving `definitions` would leave such references dangling.
pub(crate) fn uses_defs(value: &Value) -> bool {
    match value {
        Value::Array(items) => items.iter().any(uses_defs),
        Value::Object(map) => map.iter().any(|(k, v)| {
            k == "$defs"
                || (k == "$ref" && v.as_str().is_some_and(|r| r.contains("$defs")))
                || uses_defs(v)
        }),
        _ => false,
    }
}
