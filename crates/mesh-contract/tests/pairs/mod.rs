//! The table of before/after contract pairs: each compatibility rule in its breaking form
//! and its compatible counterpart, with the findings expected. Shared by this crate's
//! `compat` test (the verdicts) and the CLI's (`mesh contract check`'s exit code for each).

#![allow(dead_code)]

use mesh_contract::{Rule, Side, System};
use mesh_core::contract::{HandlerContract, MessageContract, ModuleContract, ToolContract};
use serde_json::{json, Value};

const KEY: &str = "module.shop.order.placed";
const TOOL: &str = "shop.quote";

/// The order schema both sides start from.
fn order() -> Value {
    json!({
        "type": "object",
        "required": ["id", "total", "status"],
        "properties": {
            "id": {"type": "string"},
            "total": {"type": "integer"},
            "status": {"type": "string", "enum": ["new", "paid"]},
            "note": {"type": ["string", "null"]},
        },
    })
}

fn quote_request() -> Value {
    json!({"type": "object", "required": ["plan"], "properties": {"plan": {"type": "string"}}})
}

fn quote_reply() -> Value {
    json!({"type": "object", "required": ["price"],
           "properties": {"price": {"type": "integer"}, "currency": {"type": "string"}}})
}

/// What one side of a pair is made of.
#[derive(Clone)]
pub(crate) struct Parts {
    pub(crate) emit: Option<(u32, Value)>,
    pub(crate) handle: Option<(u32, Value)>,
    pub(crate) serve: Option<(Value, Value)>,
    pub(crate) call: bool,
    pub(crate) mailer: bool,
}

pub(crate) fn base() -> Parts {
    Parts {
        emit: Some((1, order())),
        handle: Some((1, order())),
        serve: Some((quote_request(), quote_reply())),
        call: true,
        mailer: false,
    }
}

/// module.shop emits KEY and serves TOOL; module.billing handles KEY (typed) and calls
/// TOOL; module.mailer (when asked for) handles `module.shop.#` untyped.
pub(crate) fn system(parts: &Parts) -> System {
    let mut shop = ModuleContract {
        owner: "module.shop".into(),
        node: "n1".into(),
        emits: Vec::new(),
        handles: Vec::new(),
        serves: Vec::new(),
        calls: Vec::new(),
    };
    let mut billing = ModuleContract {
        owner: "module.billing".into(),
        ..shop.clone()
    };
    if let Some((version, schema)) = &parts.emit {
        shop.emits.push(MessageContract {
            key: KEY.into(),
            version: *version,
            schema: Some(schema.clone()),
        });
    }
    if let Some((version, schema)) = &parts.handle {
        billing.handles.push(HandlerContract {
            pattern: KEY.into(),
            version: Some(*version),
            schema: Some(schema.clone()),
        });
    }
    if let Some((request, reply)) = &parts.serve {
        shop.serves.push(ToolContract {
            tool: TOOL.into(),
            request: Some(request.clone()),
            reply: Some(reply.clone()),
        });
    }
    if parts.call {
        billing.calls.push(ToolContract {
            tool: TOOL.into(),
            request: Some(quote_request()),
            reply: Some(quote_reply()),
        });
    }
    let mut system = System::new();
    system.insert(shop);
    system.insert(billing);
    if parts.mailer {
        system.insert(ModuleContract {
            owner: "module.mailer".into(),
            node: "n2".into(),
            emits: Vec::new(),
            handles: vec![HandlerContract {
                pattern: "module.shop.#".into(),
                version: None,
                schema: None,
            }],
            serves: Vec::new(),
            calls: Vec::new(),
        });
    }
    system
}

/// `order()` changed by `change`.
fn order_with(change: impl FnOnce(&mut Value)) -> Value {
    let mut schema = order();
    change(&mut schema);
    schema
}

/// An expected finding: rule, subject name, path, side, broken modules.
pub(crate) type Expected = (
    Rule,
    &'static str,
    &'static str,
    Side,
    &'static [&'static str],
);

pub(crate) struct Case {
    pub(crate) name: &'static str,
    pub(crate) before: Parts,
    pub(crate) after: Parts,
    pub(crate) expected: Vec<Expected>,
}

pub(crate) fn cases() -> Vec<Case> {
    let b = base;
    let mut cases = Vec::new();
    let mut case = |name, before: Parts, after: Parts, expected: Vec<Expected>| {
        cases.push(Case {
            name,
            before,
            after,
            expected,
        });
    };
    // key-no-longer-emitted
    case(
        "a key still handled is no longer emitted",
        b(),
        Parts { emit: None, ..b() },
        vec![(
            Rule::KeyNoLongerEmitted,
            KEY,
            "",
            Side::Readers,
            &["module.billing"],
        )],
    );
    case(
        "a key no longer emitted that nobody handles any more",
        b(),
        Parts {
            emit: None,
            handle: None,
            ..b()
        },
        vec![],
    );
    case(
        "a key no longer emitted is still matched by a pattern",
        Parts {
            mailer: true,
            handle: None,
            ..b()
        },
        Parts {
            mailer: true,
            handle: None,
            emit: None,
            ..b()
        },
        vec![(
            Rule::KeyNoLongerEmitted,
            KEY,
            "",
            Side::Readers,
            &["module.mailer"],
        )],
    );
    // tool-no-longer-served
    case(
        "a tool still called is no longer served",
        b(),
        Parts { serve: None, ..b() },
        vec![(
            Rule::ToolNoLongerServed,
            TOOL,
            "",
            Side::Writers,
            &["module.billing"],
        )],
    );
    case(
        "a tool no longer served that nobody calls any more",
        b(),
        Parts {
            serve: None,
            call: false,
            ..b()
        },
        vec![],
    );
    // field-removed
    case(
        "a field removed from an emitted schema",
        b(),
        Parts {
            emit: Some((
                2,
                order_with(|s| {
                    s["properties"]
                        .as_object_mut()
                        .expect("properties")
                        .remove("note");
                }),
            )),
            mailer: true,
            ..b()
        },
        vec![(
            Rule::FieldRemoved,
            KEY,
            "/note",
            Side::Readers,
            &["module.billing", "module.mailer"],
        )],
    );
    case(
        "a field removed from a handler's schema",
        b(),
        Parts {
            handle: Some((
                2,
                order_with(|s| {
                    s["properties"]
                        .as_object_mut()
                        .expect("properties")
                        .remove("note");
                }),
            )),
            ..b()
        },
        vec![],
    );
    // required-dropped
    case(
        "an emitted schema no longer requires a field",
        b(),
        Parts {
            emit: Some((2, order_with(|s| s["required"] = json!(["id", "status"])))),
            ..b()
        },
        vec![(
            Rule::RequiredDropped,
            KEY,
            "/total",
            Side::Readers,
            &["module.billing"],
        )],
    );
    case(
        "a handler no longer requires a field",
        b(),
        Parts {
            handle: Some((2, order_with(|s| s["required"] = json!(["id", "status"])))),
            ..b()
        },
        vec![],
    );
    // required-added
    case(
        "a handler requires a field it did not",
        b(),
        Parts {
            handle: Some((
                2,
                order_with(|s| s["required"] = json!(["id", "total", "status", "note"])),
            )),
            ..b()
        },
        vec![(
            Rule::RequiredAdded,
            KEY,
            "/note",
            Side::Writers,
            &["module.shop"],
        )],
    );
    case(
        "an emitted schema requires a field it did not",
        b(),
        Parts {
            emit: Some((
                2,
                order_with(|s| s["required"] = json!(["id", "total", "status", "note"])),
            )),
            ..b()
        },
        vec![],
    );
    case(
        "an optional field added on both sides",
        b(),
        Parts {
            emit: Some((
                2,
                order_with(|s| s["properties"]["coupon"] = json!({"type": "string"})),
            )),
            handle: Some((
                2,
                order_with(|s| s["properties"]["coupon"] = json!({"type": "string"})),
            )),
            ..b()
        },
        vec![],
    );
    // field-retyped
    case(
        "an emitted field retyped",
        b(),
        Parts {
            emit: Some((
                2,
                order_with(|s| s["properties"]["total"] = json!({"type": "string"})),
            )),
            ..b()
        },
        vec![(
            Rule::FieldRetyped,
            KEY,
            "/total",
            Side::Readers,
            &["module.billing"],
        )],
    );
    case(
        "a handler's field retyped",
        b(),
        Parts {
            handle: Some((
                2,
                order_with(|s| s["properties"]["total"] = json!({"type": "string"})),
            )),
            ..b()
        },
        vec![(
            Rule::FieldRetyped,
            KEY,
            "/total",
            Side::Writers,
            &["module.shop"],
        )],
    );
    case(
        "an emitted field narrowed to fewer types, a handler's widened to more",
        b(),
        Parts {
            emit: Some((
                2,
                order_with(|s| s["properties"]["note"] = json!({"type": "string"})),
            )),
            handle: Some((
                2,
                order_with(|s| s["properties"]["total"] = json!({"type": "number"})),
            )),
            ..b()
        },
        vec![],
    );
    // enum-widened / enum-narrowed
    case(
        "an emitted enum widened",
        b(),
        Parts {
            emit: Some((
                2,
                order_with(|s| {
                    s["properties"]["status"]["enum"] = json!(["new", "paid", "refunded"])
                }),
            )),
            ..b()
        },
        vec![(
            Rule::EnumWidened,
            KEY,
            "/status",
            Side::Readers,
            &["module.billing"],
        )],
    );
    case(
        "an emitted enum narrowed",
        b(),
        Parts {
            emit: Some((
                2,
                order_with(|s| s["properties"]["status"]["enum"] = json!(["paid"])),
            )),
            ..b()
        },
        vec![],
    );
    case(
        "a handler's enum narrowed",
        b(),
        Parts {
            handle: Some((
                2,
                order_with(|s| s["properties"]["status"]["enum"] = json!(["paid"])),
            )),
            ..b()
        },
        vec![(
            Rule::EnumNarrowed,
            KEY,
            "/status",
            Side::Writers,
            &["module.shop"],
        )],
    );
    case(
        "a handler's enum widened",
        b(),
        Parts {
            handle: Some((
                2,
                order_with(|s| {
                    s["properties"]["status"]["enum"] = json!(["new", "paid", "refunded"])
                }),
            )),
            ..b()
        },
        vec![],
    );
    case(
        "an emitted enum of documented variants (oneOf of consts) widened",
        b(),
        Parts {
            emit: Some((
                2,
                order_with(|s| {
                    s["properties"]["status"] = json!({"oneOf": [
                        {"const": "new", "description": "Just placed."},
                        {"const": "paid", "description": "Paid in full."},
                        {"const": "refunded", "description": "Money returned."},
                    ]});
                }),
            )),
            ..b()
        },
        vec![(
            Rule::EnumWidened,
            KEY,
            "/status",
            Side::Readers,
            &["module.billing"],
        )],
    );
    // shape-changed-same-version
    case(
        "an emitted schema changed shape under the same version",
        b(),
        Parts {
            emit: Some((
                1,
                order_with(|s| s["properties"]["coupon"] = json!({"type": "string"})),
            )),
            ..b()
        },
        vec![(
            Rule::ShapeChangedSameVersion,
            KEY,
            "",
            Side::Readers,
            &["module.billing"],
        )],
    );
    case(
        "a handler's schema changed shape under the same version",
        b(),
        Parts {
            handle: Some((
                1,
                order_with(|s| {
                    s["properties"]
                        .as_object_mut()
                        .expect("properties")
                        .remove("note");
                }),
            )),
            ..b()
        },
        vec![(
            Rule::ShapeChangedSameVersion,
            KEY,
            "",
            Side::Writers,
            &["module.shop"],
        )],
    );
    case(
        "only descriptions changed under the same version",
        b(),
        Parts {
            emit: Some((
                1,
                order_with(|s| {
                    s["description"] = json!("An order was placed.");
                    s["properties"]["total"]["description"] = json!("In cents.");
                }),
            )),
            ..b()
        },
        vec![],
    );
    // Tools: the server reads the request and writes the reply.
    case(
        "a tool's server requires a request field its callers do not send",
        b(),
        Parts {
            serve: Some((
                json!({"type": "object", "required": ["plan", "seats"],
                       "properties": {"plan": {"type": "string"}, "seats": {"type": "integer"}}}),
                quote_reply(),
            )),
            ..b()
        },
        vec![(
            Rule::RequiredAdded,
            TOOL,
            "/seats",
            Side::Writers,
            &["module.billing"],
        )],
    );
    case(
        "a tool's server removes a reply field",
        b(),
        Parts {
            serve: Some((
                quote_request(),
                json!({"type": "object", "required": ["price"],
                                                 "properties": {"price": {"type": "integer"}}}),
            )),
            ..b()
        },
        vec![(
            Rule::FieldRemoved,
            TOOL,
            "/currency",
            Side::Readers,
            &["module.billing"],
        )],
    );
    case(
        "a tool's server reads an optional request field and writes a new reply field",
        b(),
        Parts {
            serve: Some((
                json!({"type": "object", "required": ["plan"],
                       "properties": {"plan": {"type": "string"}, "seats": {"type": "integer"}}}),
                json!({"type": "object", "required": ["price"],
                       "properties": {"price": {"type": "integer"}, "currency": {"type": "string"},
                                      "valid_until": {"type": "string"}}}),
            )),
            ..b()
        },
        vec![],
    );
    case("nothing changed", b(), b(), vec![]);
    cases
}
