//! A realistic system (three modules: events with nested and shared definitions, typed and
//! pattern handlers, a tool with request and reply), shared by the export's and the code
//! generator's tests.

use mesh_contract::System;
use serde_json::{json, Value};

fn money(kind: &str) -> Value {
    json!({"type": "object", "required": ["amount", "currency"],
           "properties": {"amount": {"type": kind}, "currency": {"type": "string"}}})
}

/// A shop, billing and a mailer, as their buses would announce them.
pub(crate) fn realistic_system() -> System {
    let order = json!({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "OrderPlaced",
        "type": "object",
        "required": ["id", "customer", "lines", "total"],
        "properties": {
            "id": {"type": "string", "format": "uuid"},
            "customer": {"$ref": "#/definitions/Customer"},
            "lines": {"type": "array", "items": {"$ref": "#/definitions/Line"}},
            "total": {"$ref": "#/definitions/Money"},
        },
        "definitions": {
            "Customer": {"type": "object", "required": ["name"], "properties": {
                "name": {"type": "string"},
                "address": {"anyOf": [{"$ref": "#/definitions/Address"}, {"type": "null"}]},
            }},
            "Address": {"type": "object", "properties": {
                "city": {"type": "string"}, "country": {"type": "string", "enum": ["FR", "DE", "NL"]},
            }},
            "Line": {"type": "object", "properties": {
                "sku": {"type": "string"}, "price": {"$ref": "#/definitions/Money"},
            }},
            "Money": money("integer"),
        },
    });
    let paid = json!({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "required": ["invoice", "amount"],
        "properties": {"invoice": {"type": "string"}, "amount": {"$ref": "#/definitions/Money"}},
        // Another `Money`: a decimal string, not cents.
        "definitions": {"Money": money("string")},
    });
    let cancelled = json!({"type": "object", "properties": {
        "id": {"type": "string"}, "reason": {"type": "string", "enum": ["customer", "stock"]}}});
    let request = json!({"type": "object", "required": ["plan"], "properties": {
        "plan": {"$ref": "#/definitions/Plan"}, "seats": {"type": "integer", "minimum": 1}},
        "definitions": {"Plan": {"type": "string", "enum": ["basic", "pro"]}}});
    let reply = json!({"type": "object", "required": ["price"],
        "properties": {"price": {"$ref": "#/definitions/Money"}},
        "definitions": {"Money": money("integer")}});
    let contracts = json!([
        {"owner": "module.shop", "node": "anchor",
         "emits": [
            {"key": "module.shop.order.placed", "version": 2, "schema": order},
            {"key": "module.shop.order.cancelled", "version": 1, "schema": cancelled}],
         "handles": [{"pattern": "module.billing.invoice.paid", "version": 1, "schema": paid}],
         "serves": [{"tool": "shop.quote", "request": request, "reply": reply}]},
        {"owner": "module.billing", "node": "anchor",
         "emits": [{"key": "module.billing.invoice.paid", "version": 1, "schema": paid}],
         "handles": [{"pattern": "module.shop.order.placed", "version": 2, "schema": order}],
         "calls": [{"tool": "shop.quote", "request": request, "reply": reply}]},
        {"owner": "module.mailer", "node": "relay",
         "handles": [{"pattern": "module.shop.#"}, {"pattern": "module.*.invoice.paid"},
                     {"pattern": "node.*.joined"}]},
    ]);
    System::from_document(&contracts).expect("the contracts read")
}
