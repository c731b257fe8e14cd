//! What the exporter and the checker need to know of JSON Schema, bounded for input from the
//! wire: nesting depth checked without recursion, references followed a bounded number of
//! times, type sets and enums read leniently (anything unexpected reads as "no constraint").

use std::collections::BTreeSet;

use serde_json::{Map, Value};

/// The deepest nesting a declared schema may have (objects and arrays counted): far beyond
/// what a derived schema has, and far below the stack.
pub const MAX_SCHEMA_DEPTH: usize = 64;

/// How many `$ref`s in a row are followed before giving up (a chain or a cycle of
/// references that never reaches a schema).
const MAX_REF_HOPS: usize = 32;

/// The keys under which a document keeps its shared schemas: draft-07's `definitions`, and
/// 2019-09's `$defs`, read the same way.
pub(crate) const DEFINITION_KEYS: [&str; 2] = ["definitions", "$defs"];

/// The nesting depth of a JSON value, computed with an explicit stack; stops counting past
/// `limit + 1`.
pub(crate) fn depth_exceeds(value: &Value, limit: usize) -> bool {
    let mut stack: Vec<(&Value, usize)> = vec![(value, 1)];
    while let Some((value, depth)) = stack.pop() {
        if depth > limit {
            return true;
        }
        match value {
            Value::Object(map) => stack.extend(map.values().map(|v| (v, depth + 1))),
            Value::Array(items) => stack.extend(items.iter().map(|v| (v, depth + 1))),
            _ => {}
        }
    }
    false
}

/// `schema` with every `$ref` it starts with followed inside `root` (`#` and `#/…` JSON
/// pointers; anything else is left as is). Returns the schema reached and the last local
/// reference followed (`None` when `schema` was no reference), or `None` for a reference
/// that dangles or loops.
pub(crate) fn resolve<'a>(
    root: &'a Value,
    schema: &'a Value,
) -> Option<(&'a Value, Option<&'a str>)> {
    let mut current = schema;
    let mut via = None;
    for _ in 0..MAX_REF_HOPS {
        let Some(reference) = current.get("$ref").and_then(Value::as_str) else {
            return Some((current, via));
        };
        let Some(pointer) = reference.strip_prefix('#') else {
            // An external reference: opaque.
            return Some((current, via));
        };
        current = if pointer.is_empty() {
            root
        } else {
            root.pointer(pointer)?
        };
        via = Some(reference);
    }
    None
}

/// JSON Schema's simple types, `integer` read as a kind of `number`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Types(pub(crate) BTreeSet<String>);

impl Types {
    /// The `type` of a schema: `None` when it has none (any type) or an unreadable one.
    pub(crate) fn of(schema: &Value) -> Option<Types> {
        let mut set = BTreeSet::new();
        match schema.get("type")? {
            Value::String(t) => {
                set.insert(t.clone());
            }
            Value::Array(items) => {
                for item in items {
                    set.insert(item.as_str()?.to_owned());
                }
            }
            _ => return None,
        }
        Some(Types(set))
    }

    /// The `type` of a schema, or, when it says none but lists its values, their types.
    pub(crate) fn of_values(schema: &Value) -> Option<Types> {
        Types::of(schema).or_else(|| {
            let values = enum_values(schema)?;
            Some(Types(
                values.iter().map(|v| json_type(v).to_owned()).collect(),
            ))
        })
    }

    /// Whether every value of these types is of one of `other`'s.
    pub(crate) fn within(&self, other: &Types) -> bool {
        self.0
            .iter()
            .all(|t| other.0.contains(t) || (t == "integer" && other.0.contains("number")))
    }

    /// As written: `string`, or `[integer, null]`.
    pub(crate) fn show(&self) -> String {
        let all: Vec<&str> = self.0.iter().map(String::as_str).collect();
        match all.as_slice() {
            [one] => (*one).to_owned(),
            many => format!("[{}]", many.join(", ")),
        }
    }
}

/// The values a schema allows when it lists them: `enum`, `const` as one value, or a
/// `oneOf`/`anyOf` whose every branch lists values (how an enum with documented variants is
/// derived).
pub(crate) fn enum_values(schema: &Value) -> Option<Vec<&Value>> {
    if let Some(values) = listed(schema) {
        return Some(values);
    }
    for keyword in ["oneOf", "anyOf"] {
        if let Some(Value::Array(branches)) = schema.get(keyword) {
            let mut all = Vec::new();
            for branch in branches {
                all.extend(listed(branch)?);
            }
            if !all.is_empty() {
                return Some(all);
            }
        }
    }
    None
}

/// The JSON Schema type of a value.
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn listed(schema: &Value) -> Option<Vec<&Value>> {
    if let Some(Value::Array(values)) = schema.get("enum") {
        return Some(values.iter().collect());
    }
    schema.get("const").map(|value| vec![value])
}

/// The `properties` of an object schema.
pub(crate) fn properties(schema: &Value) -> Option<&Map<String, Value>> {
    schema.get("properties").and_then(Value::as_object)
}

/// The `required` names of an object schema.
pub(crate) fn required(schema: &Value) -> BTreeSet<&str> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// A nullable wrapper as derived for an optional structure, `anyOf: [S, {type: null}]` (in
/// either order), read as S; anything else as itself. The second value says whether a
/// wrapper was taken off (the value may then also be null).
pub(crate) fn unwrap_nullable(schema: &Value) -> (&Value, bool) {
    let Some(Value::Array(options)) = schema.get("anyOf") else {
        return (schema, false);
    };
    let is_null = |s: &Value| s.get("type").and_then(Value::as_str) == Some("null");
    match options.as_slice() {
        [a, b] if is_null(b) && !is_null(a) => (a, true),
        [a, b] if is_null(a) && !is_null(b) => (b, true),
        _ => (schema, false),
    }
}

/// The keywords that say nothing about what is valid: left out when shapes are compared.
const ANNOTATIONS: [&str; 7] = [
    "description",
    "title",
    "examples",
    "default",
    "$comment",
    "$schema",
    "$id",
];

/// The schema's shape: annotations dropped and object keys sorted, so two schemas that
/// accept the same documents in the same way compare equal. Deeper than
/// [`MAX_SCHEMA_DEPTH`], the rest is kept as is.
pub(crate) fn shape(schema: &Value) -> Value {
    shape_at(schema, 0)
}

fn shape_at(value: &Value, depth: usize) -> Value {
    if depth > MAX_SCHEMA_DEPTH {
        return value.clone();
    }
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let mut out = Map::new();
            for key in keys {
                // Annotations are keywords of a schema, not names of properties: the
                // property map's and the definitions' own keys are kept.
                if ANNOTATIONS.contains(&key.as_str()) {
                    continue;
                }
                let mut shaped = shape_names(key, &map[key], depth + 1);
                // `required` is a set: its order accepts nothing more or less.
                if let (true, Value::Array(names)) = (key == "required", &mut shaped) {
                    names.sort_by_key(Value::to_string);
                    names.dedup();
                }
                out.insert(key.clone(), shaped);
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(|v| shape_at(v, depth + 1)).collect()),
        other => other.clone(),
    }
}

/// Keeps every key of a map of names (`properties`, `definitions`…) while shaping its values.
fn shape_names(keyword: &str, value: &Value, depth: usize) -> Value {
    let names = matches!(
        keyword,
        "properties" | "patternProperties" | "definitions" | "$defs" | "dependencies"
    );
    match value {
        Value::Object(map) if names && depth <= MAX_SCHEMA_DEPTH => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), shape_at(&map[k], depth + 1)))
                    .collect(),
            )
        }
        other => shape_at(other, depth),
    }
}

/// `value` with every object's keys in order, whatever order it was built or read in (a
/// bound on the depth keeps the rest as is: a checked contract never reaches it).
pub(crate) fn sorted_keys(value: &Value) -> Value {
    sorted_at(value, 0)
}

fn sorted_at(value: &Value, depth: usize) -> Value {
    if depth > MAX_SCHEMA_DEPTH * 2 {
        return value.clone();
    }
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), sorted_at(&map[k], depth + 1)))
                    .collect(),
            )
        }
        Value::Array(items) => {
            Value::Array(items.iter().map(|v| sorted_at(v, depth + 1)).collect())
        }
        other => other.clone(),
    }
}

/// A component name as AsyncAPI wants them (`^[\w\d.\-_]+$`): every other character `_`.
pub(crate) fn component_name(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if cleaned.is_empty() {
        "_".to_owned()
    } else {
        cleaned
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn references_are_followed_within_bounds() {
        let root = json!({
            "definitions": {"A": {"$ref": "#/definitions/B"}, "B": {"type": "string"},
                            "L": {"$ref": "#/definitions/M"}, "M": {"$ref": "#/definitions/L"}},
        });
        let start = json!({"$ref": "#/definitions/A"});
        let (reached, via) = resolve(&root, &start).unwrap();
        assert_eq!(reached, &json!({"type": "string"}));
        assert_eq!(via, Some("#/definitions/B"));
        assert!(resolve(&root, &json!({"$ref": "#/definitions/L"})).is_none());
        assert!(resolve(&root, &json!({"$ref": "#/nowhere"})).is_none());
        let external = json!({"$ref": "http://example.com/s.json"});
        assert_eq!(resolve(&root, &external).unwrap().0, &external);
    }

    #[test]
    fn depth_is_measured_without_recursion() {
        let mut deep = json!(1);
        for _ in 0..10_000 {
            deep = Value::Array(vec![deep]);
        }
        assert!(depth_exceeds(&deep, MAX_SCHEMA_DEPTH));
        assert!(!depth_exceeds(&json!({"a": [1]}), 3));
        assert!(depth_exceeds(&json!({"a": [[1]]}), 3));
        // Dropping a value this deep would recurse as deep: taken apart iteratively.
        while let Value::Array(mut items) = deep {
            deep = items.pop().unwrap_or(Value::Null);
        }
    }

    #[test]
    fn shapes_ignore_annotations_but_not_property_names() {
        let a = json!({"type": "object", "description": "x",
                       "properties": {"title": {"type": "string", "title": "T"}}});
        let b = json!({"properties": {"title": {"type": "string"}}, "type": "object"});
        assert_eq!(shape(&a), shape(&b));
        let c = json!({"properties": {"name": {"type": "string"}}, "type": "object"});
        assert_ne!(shape(&a), shape(&c));
        assert_eq!(component_name("Wrapper<String>"), "Wrapper_String_");
    }

    #[test]
    fn the_order_of_required_names_is_no_change_of_shape() {
        let a = json!({"type": "object", "required": ["site", "owner"]});
        let b = json!({"type": "object", "required": ["owner", "site", "owner"]});
        assert_eq!(shape(&a), shape(&b));
        let c = json!({"type": "object", "required": ["site"]});
        assert_ne!(shape(&a), shape(&c));
    }
}
