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
    /// checked when a bus starts: one that uses `$defs` or (feature `schemas`) does not
    /// compile fails [`BusBuilder::start`](crate::BusBuilder::start).
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
        schema: &Value,
        version: Option<u32>,
        subject: String,
    ) -> Result<Check, String> {
        let validator = jsonschema::draft7::options()
            .with_pattern_options(jsonschema::PatternOptions::regex())
            .build(schema)
            .map_err(|e| mesh_core::codec::cut(&e.to_string(), MAX_VALIDATION_ERROR_BYTES))?;
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
            // What is wrong first, then where (the end of a deep path, the telling part).
            Err(error) => Err(self.describe(&format!(
                "{} (at `{}`)",
                mesh_core::codec::cut(&error.masked().to_string(), MAX_VALIDATION_ERROR_BYTES / 2),
                tail(
                    &error.instance_path().to_string(),
                    MAX_VALIDATION_ERROR_BYTES / 4
                ),
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
        mesh_core::codec::cut(
            &format!(
                "body does not match the schema of {}: {problem}",
                self.subject
            ),
            MAX_VALIDATION_ERROR_BYTES,
        )
    }
}

/// The end of `text` in at most `max` bytes (`…` marking a cut): the deepest part of a
/// path is the telling one.
#[cfg(feature = "schemas")]
fn tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut start = text.len() - max.saturating_sub('…'.len_utf8());
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &text[start..])
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

#[cfg(all(test, feature = "schemas"))]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde::{Deserialize, Serialize};

    /// A type with what schemas of real events hold: constraints, an enum, an option, a
    /// list, a map and a recursive part (a `$ref` to itself under `definitions`).
    #[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
    struct Order {
        #[schemars(length(min = 1, max = 40), regex(pattern = r"^[a-z][a-z0-9-]*$"))]
        id: String,
        #[schemars(range(min = 1, max = 1000))]
        quantity: u32,
        kind: Kind,
        note: Option<String>,
        tags: Vec<String>,
        extra: std::collections::BTreeMap<String, f64>,
        parts: Vec<Part>,
    }

    #[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
    #[serde(tag = "type", rename_all = "kebab-case")]
    enum Kind {
        Plain,
        Gift { to: String },
    }

    #[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
    struct Part {
        name: String,
        parts: Vec<Part>,
    }

    fn order_check() -> &'static Check {
        static CHECK: std::sync::LazyLock<Check> = std::sync::LazyLock::new(|| {
            Check::compile(Schema::of::<Order>().as_json(), Some(1), "`Order`".into())
                .expect("compiles")
        });
        &CHECK
    }

    fn json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_filter_map("finite", |f| {
                serde_json::Number::from_f64(f).map(Value::Number)
            }),
            "\\PC{0,50}".prop_map(Value::String),
            "[a-z][a-z0-9-]{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(8, 256, 8, |inner| {
            let names = prop_oneof![
                Just("id".to_owned()),
                Just("quantity".to_owned()),
                Just("kind".to_owned()),
                Just("type".to_owned()),
                Just("to".to_owned()),
                Just("tags".to_owned()),
                Just("extra".to_owned()),
                Just("parts".to_owned()),
                Just("name".to_owned()),
                "\\PC{0,12}",
            ];
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                proptest::collection::btree_map(names, inner, 0..8)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Any JSON: an answer, never a panic, and an error bounded whatever the body.
        #[test]
        fn any_json_gets_a_bounded_verdict(value in json()) {
            let check = order_check();
            if let Err(error) = check.check(&value) {
                prop_assert!(error.len() <= MAX_VALIDATION_ERROR_BYTES, "{}", error.len());
            }
            let bytes = serde_json::to_vec(&value).expect("serialises");
            prop_assert_eq!(check.check_bytes(&bytes).is_ok(), check.check(&value).is_ok());
        }

        /// Any bytes, JSON or not.
        #[test]
        fn any_bytes_get_a_bounded_verdict(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            if let Err(error) = order_check().check_bytes(&bytes) {
                prop_assert!(error.len() <= MAX_VALIDATION_ERROR_BYTES, "{}", error.len());
            }
        }

        /// What the type writes, its schema accepts (the schema is the reader's contract).
        #[test]
        fn what_the_type_writes_passes(
            id in "[a-z][a-z0-9-]{0,39}",
            quantity in 1u32..=1000,
            gift in proptest::option::of("\\PC{0,10}"),
            depth in 0usize..6,
        ) {
            let mut part = Part { name: "leaf".into(), parts: Vec::new() };
            for _ in 0..depth {
                part = Part { name: "node".into(), parts: vec![part] };
            }
            let order = Order {
                id,
                quantity,
                kind: gift.map_or(Kind::Plain, |to| Kind::Gift { to }),
                note: None,
                tags: vec!["a".into()],
                extra: [("x".to_owned(), 1.5)].into_iter().collect(),
                parts: vec![part],
            };
            let value = serde_json::to_value(&order).expect("serialises");
            prop_assert_eq!(order_check().check(&value), Ok(()));
        }
    }

    #[test]
    fn hostile_shapes_are_refused_without_panicking() {
        let check = order_check();
        // Nested far deeper than serde_json parses: refused as not JSON, not a stack overflow.
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let error = check.check_bytes(deep.as_bytes()).expect_err("too deep");
        assert!(error.contains("not JSON"), "{error}");
        // Deep through the recursive part, within serde's limit.
        let mut part = serde_json::json!({"name": "leaf", "parts": [{"name": 1, "parts": []}]});
        for _ in 0..60 {
            part = serde_json::json!({"name": "node", "parts": [part]});
        }
        let order = serde_json::json!({
            "id": "a", "quantity": 1, "kind": {"type": "plain"}, "tags": [], "extra": {},
            "parts": [part]
        });
        let error = check
            .check(&order)
            .expect_err("a part without a string name");
        assert!(error.contains("/name"), "{error}");
        // A huge value is never quoted; a huge key is cut with the rest.
        let huge = "y".repeat(1 << 20);
        let order = serde_json::json!({
            "id": huge, "quantity": 1, "kind": {"type": "plain"}, "tags": [], "extra": {},
            "parts": []
        });
        let error = check.check(&order).expect_err("too long");
        assert!(!error.contains("yyyy") && error.len() <= MAX_VALIDATION_ERROR_BYTES);
        let mut extra = serde_json::Map::new();
        extra.insert(huge.clone(), Value::String("not a number".into()));
        let order = serde_json::json!({
            "id": "a", "quantity": 1, "kind": {"type": "plain"}, "tags": [], "extra": extra,
            "parts": []
        });
        let error = check.check(&order).expect_err("not a number");
        assert!(error.len() <= MAX_VALIDATION_ERROR_BYTES, "{}", error.len());
        // A body the pattern's regular expression would take exponential time on with
        // backtracking: linear here.
        let order = serde_json::json!({
            "id": format!("a{}!", "-".repeat(50_000)),
            "quantity": 1, "kind": {"type": "plain"}, "tags": [], "extra": {}, "parts": []
        });
        assert!(check.check(&order).is_err());
    }

    #[test]
    fn schemas_of_types_are_draft_07_with_definitions() {
        let schema = Schema::of::<Order>();
        let json = schema.as_json();
        assert_eq!(json["$schema"], "http://json-schema.org/draft-07/schema#");
        assert!(json["definitions"]["Part"].is_object(), "{json}");
        assert!(!uses_defs(json), "{json}");
        assert!(uses_defs(
            &serde_json::json!({"items": {"$ref": "#/$defs/X"}})
        ));
        assert!(uses_defs(&serde_json::json!({"$defs": {}})));
        assert!(!uses_defs(
            &serde_json::json!({"description": "no $defs here"})
        ));
    }
}
