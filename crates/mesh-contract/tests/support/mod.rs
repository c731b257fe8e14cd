//! What the tests share: the AsyncAPI 3.0.0 validation of an exported document.

use serde_json::Value;

/// The official AsyncAPI 3.0.0 JSON Schema (see tests/data/README.md).
fn asyncapi_schema() -> Value {
    let text = include_str!("../data/asyncapi-3.0.0.json");
    serde_json::from_str(text).expect("the vendored schema is JSON")
}

/// Asserts `document` is valid AsyncAPI 3.0.0 and every local reference in it resolves.
pub(crate) fn assert_valid_asyncapi(document: &Value) {
    let validator = jsonschema::validator_for(&asyncapi_schema()).expect("the schema compiles");
    let errors: Vec<String> = validator
        .iter_errors(document)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "not valid AsyncAPI 3.0.0:\n{}",
        errors.join("\n")
    );
    let mut stack = vec![document];
    while let Some(value) = stack.pop() {
        match value {
            Value::Object(map) => {
                if let Some(Value::String(reference)) = map.get("$ref") {
                    let pointer = reference.strip_prefix('#').expect("only local references");
                    assert!(document.pointer(pointer).is_some(), "{reference} dangles");
                }
                stack.extend(map.values());
            }
            Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
}
