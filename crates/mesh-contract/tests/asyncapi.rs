//! The export of a realistic system (three modules: events with nested and shared
//! definitions, typed and pattern handlers, a tool with request and reply) is a valid
//! AsyncAPI 3.0.0 document, checked against the official JSON Schema, and lists every key,
//! message schema and operation.

#[path = "support/realistic.rs"]
mod realistic;
mod support;

use mesh_contract::asyncapi::{export, ExportOptions};
use mesh_contract::System;
use realistic::realistic_system;
use serde_json::{json, Value};
use support::assert_valid_asyncapi;

#[test]
fn the_export_of_a_system_is_valid_asyncapi_and_lists_everything() {
    let system = realistic_system();
    let document = export(&system, &ExportOptions::default()).expect("exported");
    assert_valid_asyncapi(&document);

    for key in [
        "module.shop.order.placed",
        "module.shop.order.cancelled",
        "module.billing.invoice.paid",
    ] {
        assert_eq!(document["channels"][key]["address"], key, "channel {key}");
    }
    assert_eq!(
        document["channels"]["node.*.joined"]["x-mesh-pattern"],
        true
    );
    assert_eq!(
        document["channels"]["tool.shop.quote"]["address"],
        "shop.quote"
    );
    assert_eq!(
        document["channels"]["tool.shop.quote.reply"]["address"],
        Value::Null
    );

    let messages = &document["components"]["messages"];
    let placed = &messages["module.shop.order.placed.v2"];
    assert_eq!(placed["name"], "module.shop.order.placed.v2");
    assert_eq!(placed["headers"]["properties"]["x-schema"]["const"], 2);
    assert_eq!(
        placed["payload"]["properties"]["customer"]["$ref"],
        "#/components/schemas/Customer"
    );
    assert!(placed["payload"].get("definitions").is_none());
    assert_eq!(
        messages["module.shop.order.cancelled.v1"]["payload"]["properties"]["reason"]["enum"],
        json!(["customer", "stock"])
    );
    // Two `Money`s: billing's (written first, modules go by owner) keeps the name.
    assert_eq!(
        messages["module.billing.invoice.paid.v1"]["payload"]["properties"]["amount"]["$ref"],
        "#/components/schemas/Money"
    );
    assert_eq!(
        placed["payload"]["properties"]["total"]["$ref"],
        "#/components/schemas/Money_2"
    );
    assert_eq!(
        messages["shop.quote.request"]["payload"]["properties"]["plan"]["$ref"],
        "#/components/schemas/Plan"
    );
    // The reply's `Money` is the order's: shared.
    assert_eq!(
        messages["shop.quote.reply"]["payload"]["properties"]["price"]["$ref"],
        "#/components/schemas/Money_2"
    );

    let schemas = &document["components"]["schemas"];
    assert_eq!(schemas["Money"]["properties"]["amount"]["type"], "string");
    assert_eq!(
        schemas["Money_2"]["properties"]["amount"]["type"],
        "integer"
    );
    assert!(
        schemas.get("Money_3").is_none(),
        "one name per shape: {schemas:#}"
    );
    assert_eq!(
        schemas["Customer"]["properties"]["address"]["anyOf"][0]["$ref"],
        "#/components/schemas/Address"
    );

    let operations = &document["operations"];
    let expect = [
        (
            "module.shop.send.module.shop.order.placed",
            "send",
            "module.shop.order.placed",
        ),
        (
            "module.shop.send.module.shop.order.cancelled",
            "send",
            "module.shop.order.cancelled",
        ),
        (
            "module.shop.receive.module.billing.invoice.paid",
            "receive",
            "module.billing.invoice.paid",
        ),
        ("module.shop.serve.shop.quote", "receive", "tool.shop.quote"),
        (
            "module.billing.send.module.billing.invoice.paid",
            "send",
            "module.billing.invoice.paid",
        ),
        (
            "module.billing.receive.module.shop.order.placed",
            "receive",
            "module.shop.order.placed",
        ),
        ("module.billing.call.shop.quote", "send", "tool.shop.quote"),
        (
            "module.mailer.receive.module.shop.order.placed",
            "receive",
            "module.shop.order.placed",
        ),
        (
            "module.mailer.receive.module.shop.order.cancelled",
            "receive",
            "module.shop.order.cancelled",
        ),
        (
            "module.mailer.receive.module.billing.invoice.paid",
            "receive",
            "module.billing.invoice.paid",
        ),
        (
            "module.mailer.receive.node.*.joined",
            "receive",
            "node.*.joined",
        ),
        // Every module announces its contract.
        (
            "module.shop.send.module.shop.contract.announced",
            "send",
            "module.shop.contract.announced",
        ),
        (
            "module.billing.send.module.billing.contract.announced",
            "send",
            "module.billing.contract.announced",
        ),
        (
            "module.mailer.send.module.mailer.contract.announced",
            "send",
            "module.mailer.contract.announced",
        ),
    ];
    assert_eq!(
        operations.as_object().expect("operations").len(),
        expect.len(),
        "{operations:#}"
    );
    for (id, action, channel) in expect {
        let operation = &operations[id];
        assert_eq!(operation["action"], action, "{id}");
        assert_eq!(
            operation["channel"]["$ref"],
            format!("#/channels/{channel}"),
            "{id}"
        );
    }
    assert_eq!(
        operations["module.mailer.receive.module.shop.order.placed"]["x-mesh-pattern"],
        "module.shop.#"
    );
    for id in [
        "module.shop.serve.shop.quote",
        "module.billing.call.shop.quote",
    ] {
        assert_eq!(
            operations[id]["reply"]["messages"][0]["$ref"],
            "#/channels/tool.shop.quote.reply/messages/shop.quote.reply"
        );
    }

    // Deterministic to the byte, and read back as the same system.
    let again = export(&system, &ExportOptions::default()).expect("exported");
    assert_eq!(
        serde_json::to_string(&again).ok(),
        serde_json::to_string(&document).ok()
    );
    assert_eq!(
        System::from_document(&document).expect("reads back"),
        system
    );
}

#[test]
fn the_export_of_each_module_is_valid_asyncapi_too() {
    let system = realistic_system();
    for owner in ["module.shop", "module.billing", "module.mailer"] {
        let options = ExportOptions {
            module: Some(owner.into()),
            ..ExportOptions::default()
        };
        let document = export(&system, &options).expect("exported");
        assert_valid_asyncapi(&document);
        assert_eq!(document["info"]["title"], owner);
        let operations = document["operations"].as_object().expect("operations");
        assert!(
            !operations.is_empty()
                && operations
                    .keys()
                    .all(|id| id.starts_with(&format!("{owner}."))),
            "{owner}"
        );
        assert_eq!(
            System::from_document(&document).expect("reads back").len(),
            1
        );
    }
    let unknown = ExportOptions {
        module: Some("module.nobody".into()),
        ..ExportOptions::default()
    };
    assert!(export(&system, &unknown).is_err());
}

/// The document says the system twice; an edit to its AsyncAPI half alone (which `check`
/// does not read) is refused as a disagreement, never passed over. The same document with
/// its keys reordered or its layout changed still reads.
#[test]
fn a_document_edited_after_the_export_is_refused_not_silently_read() {
    use mesh_contract::{ErrorKind, DIGEST_EXTENSION};

    let system = realistic_system();
    let document = export(&system, &ExportOptions::default()).expect("exported");
    assert!(document[DIGEST_EXTENSION]
        .as_str()
        .is_some_and(|seal| seal.starts_with("sha256:")));

    // Pretty-printed and read back (a tool rewriting it): still the same system.
    let rewritten: Value =
        serde_json::from_str(&serde_json::to_string_pretty(&document).expect("text"))
            .expect("JSON");
    assert_eq!(
        System::from_document(&rewritten).expect("reads back"),
        system
    );

    // A payload edited: the order's total becomes text.
    let mut edited = document.clone();
    let messages = edited["components"]["messages"]
        .as_object_mut()
        .expect("messages");
    let (id, message) = messages
        .iter_mut()
        .find(|(id, _)| id.starts_with("module.shop.order.placed.v"))
        .expect("the order's message");
    let total = &mut message["payload"]["properties"]["total"];
    assert!(total.is_object(), "{id}: {message}");
    *total = json!({"type": "string"});
    let refused = System::from_document(&edited).expect_err("an edited document");
    assert!(
        matches!(refused.kind(), ErrorKind::EditedDocument { .. }),
        "{refused}"
    );
    assert!(
        refused
            .to_string()
            .contains("edited after `mesh contract export`"),
        "{refused}"
    );

    // An operation removed, and the seal removed: refused too.
    let mut edited = document.clone();
    edited["operations"]
        .as_object_mut()
        .expect("operations")
        .remove("module.billing.call.shop.quote");
    assert!(System::from_document(&edited).is_err());
    let mut unsealed = document.clone();
    unsealed
        .as_object_mut()
        .expect("an object")
        .remove(DIGEST_EXTENSION);
    let refused = System::from_document(&unsealed).expect_err("no seal");
    assert!(
        matches!(refused.kind(), ErrorKind::EditedDocument { .. }),
        "{refused}"
    );
}

/// What a client built from the document alone needs of the wire: the exchange and key of
/// every channel, the queue each handler and server receives from, persistence and acks, and
/// the headers every message must carry (without them mesh dead-letters it as undecodable).
#[test]
fn the_document_says_the_wire_a_client_needs() {
    let system = realistic_system();
    let options = ExportOptions {
        server: Some(mesh_contract::asyncapi::Server {
            host: "broker.example:5672".into(),
            protocol: "amqp".into(),
            pathname: "/prod".into(),
        }),
        ..ExportOptions::default()
    };
    let document = export(&system, &options).expect("exported");
    assert_valid_asyncapi(&document);
    assert_eq!(document["servers"]["broker"]["host"], "broker.example:5672");

    let amqp = &document["channels"]["module.shop.order.placed"]["bindings"]["amqp"];
    assert_eq!(amqp["is"], "routingKey");
    assert_eq!(amqp["exchange"]["name"], "mesh.events");
    assert_eq!(amqp["exchange"]["type"], "topic");
    assert_eq!(amqp["exchange"]["durable"], true);
    assert_eq!(
        document["channels"]["tool.shop.quote"]["bindings"]["amqp"]["exchange"]["name"],
        "mesh.rpc"
    );
    // The reply goes to the caller's own queue: no exchange of its own to bind.
    assert!(document["channels"]["tool.shop.quote.reply"]
        .get("bindings")
        .is_none());

    let operations = &document["operations"];
    let send = &operations["module.shop.send.module.shop.order.placed"];
    assert_eq!(send["bindings"]["amqp"]["deliveryMode"], 2);
    assert_eq!(send["title"], "module.shop emits module.shop.order.placed");
    let receive = &operations["module.billing.receive.module.shop.order.placed"];
    assert_eq!(receive["bindings"]["amqp"]["ack"], true);
    assert_eq!(receive["x-mesh-queue"], "anchor.billing.events");
    assert_eq!(
        operations["module.mailer.receive.module.shop.order.placed"]["x-mesh-queue"],
        "relay.mailer.events"
    );
    assert_eq!(
        operations["module.shop.serve.shop.quote"]["x-mesh-queue"],
        "serve.shop.quote"
    );
    assert_eq!(
        operations["module.billing.call.shop.quote"]["title"],
        "module.billing calls shop.quote"
    );

    let messages = &document["components"]["messages"];
    let headers = &messages["module.shop.order.placed.v2"]["headers"];
    assert_eq!(
        headers["required"],
        json!(["x-event-id", "x-source", "x-node", "x-time"])
    );
    assert_eq!(headers["properties"]["x-schema"]["const"], 2);
    assert_eq!(
        messages["module.shop.order.placed.v2"]["title"],
        "module.shop.order.placed v2"
    );
    assert!(messages["shop.quote.request"]["headers"]["required"]
        .as_array()
        .is_some_and(|r| r.contains(&json!("x-mesh-tool"))));
    assert_eq!(
        messages["shop.quote.reply"]["headers"]["properties"]["x-mesh-status"]["enum"],
        json!(["ok", "error"])
    );
}
