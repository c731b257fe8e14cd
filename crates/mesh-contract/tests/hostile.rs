//! Schemas from the wire: any JSON, references that dangle, loop or point at the root, deep
//! nesting. Reading, exporting, checking and generating code never panic, terminate, and a
//! system is always compatible with itself.

use mesh_contract::asyncapi::{export, ExportOptions};
use mesh_contract::codegen::{rust, CodegenOptions};
use mesh_contract::{check, System};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

/// Any JSON value, biased towards schema keywords and local references.
fn any_schema() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        prop_oneof![
            Just("#"),
            Just("#/definitions/A"),
            Just("#/definitions/B"),
            Just("#/$defs/A"),
            Just("#/definitions"),
            Just("#/nowhere"),
            Just("#/definitions/A/properties/x"),
            Just("http://example.com/x.json"),
            Just("string"),
            Just("object"),
            Just("integer"),
            Just("null"),
            Just("a~1b"),
        ]
        .prop_map(|s| json!(s)),
    ];
    leaf.prop_recursive(8, 128, 6, |inner| {
        let key = prop_oneof![
            Just("type"),
            Just("properties"),
            Just("required"),
            Just("enum"),
            Just("const"),
            Just("items"),
            Just("anyOf"),
            Just("$ref"),
            Just("definitions"),
            Just("$defs"),
            Just("A"),
            Just("B"),
            Just("x"),
            Just("description"),
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((key, inner), 0..6).prop_map(|pairs| Value::Object(
                pairs
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), v))
                    .collect::<Map<_, _>>()
            )),
        ]
    })
}

fn system(emitted: &Value, handled: &Value, version: u32) -> Option<System> {
    let contracts = json!([
        {"owner": "module.a", "node": "n",
         "emits": [{"key": "module.a.x.y", "version": version, "schema": emitted}],
         "serves": [{"tool": "a.t", "request": handled, "reply": emitted}]},
        {"owner": "module.b", "node": "n",
         "handles": [{"pattern": "module.a.#", "version": version, "schema": handled}],
         "calls": [{"tool": "a.t", "request": emitted, "reply": handled}]},
    ]);
    // A schema that is not an object or a boolean is refused, with an error.
    System::from_document(&contracts).ok()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn any_schemas_are_checked_and_exported_without_panic(
        a in any_schema(), b in any_schema(), c in any_schema(), d in any_schema(),
        v in 1u32..3, w in 1u32..3,
    ) {
        let (Some(old), Some(new)) = (system(&a, &b, v), system(&c, &d, w)) else {
            return Ok(());
        };
        let _ = check(&old, &new);
        prop_assert!(check(&old, &old).is_empty());
        prop_assert!(check(&new, &new).is_empty());
        let document = export(&new, &ExportOptions::default());
        prop_assert!(document.is_ok());
        let document = document.unwrap_or_default();
        prop_assert_eq!(export(&new, &ExportOptions::default()).ok(), Some(document.clone()));
        prop_assert_eq!(System::from_document(&document).ok(), Some(new.clone()));
        let code = rust(&new, &CodegenOptions::default());
        prop_assert!(code.is_ok());
        prop_assert_eq!(rust(&new, &CodegenOptions::default()).ok(), code.ok());
        let consumer = CodegenOptions { module: Some("module.b".into()) };
        prop_assert!(rust(&new, &consumer).is_ok());
    }
}

#[test]
fn self_and_mutual_references_terminate() {
    let looping = json!({
        "type": "object",
        "properties": {"a": {"$ref": "#/definitions/A"}, "r": {"$ref": "#"}},
        "definitions": {"A": {"$ref": "#/definitions/B"}, "B": {"$ref": "#/definitions/A"},
                        "C": {"type": "object", "properties": {"c": {"$ref": "#/definitions/C"}}}},
    });
    let other = json!({"type": "object", "properties": {"a": {"type": "string"}, "r": {"type": "integer"}}});
    let (old, new) = (
        system(&looping, &looping, 1).expect("reads"),
        system(&other, &other, 2).expect("reads"),
    );
    let _ = check(&old, &new);
    let _ = check(&new, &old);
    assert!(export(&old, &ExportOptions::default()).is_ok());
    assert!(rust(&old, &CodegenOptions::default()).is_ok());
}

#[test]
fn a_schema_nested_too_deep_is_refused_not_followed() {
    let mut deep = json!({"type": "string"});
    for _ in 0..(mesh_contract::MAX_SCHEMA_DEPTH + 5) {
        deep = json!({"type": "object", "properties": {"x": deep}});
    }
    let error = System::from_document(&json!({"owner": "module.a", "node": "n",
        "emits": [{"key": "module.a.x.y", "version": 1, "schema": deep}]}))
    .expect_err("refused");
    assert!(error.is_invalid_contract(), "{error}");
    assert!(error.to_string().contains("deeper"), "{error}");
}
