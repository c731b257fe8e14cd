//! The AsyncAPI document of the demo's modules (their contracts as their buses announce
//! them, on the in-memory transport) is valid AsyncAPI 3.0.0 and lists each key, message
//! schema and operation.

mod support;

use std::sync::Arc;

use mesh::{Bus, MemoryBroker};
use mesh_contract::asyncapi::{export, ExportOptions};
use mesh_contract::System;
use support::assert_valid_asyncapi;

#[path = "../../mesh/examples/demo/modules.rs"]
#[allow(dead_code, unreachable_pub)]
mod modules;

#[tokio::test]
async fn the_demo_system_exports_to_valid_asyncapi() -> anyhow::Result<()> {
    let broker = MemoryBroker::new();
    let (done, _) = tokio::sync::mpsc::unbounded_channel();
    let mut system = System::new();
    let mut buses = Vec::new();
    for builder in [
        modules::billing(done.clone()),
        modules::mailer(done)?,
        modules::umami(),
    ] {
        let bus: Bus = builder.start(Arc::new(broker.transport())).await?;
        system.insert(bus.contract().clone());
        buses.push(bus);
    }
    let document = export(&system, &ExportOptions::default())?;
    assert_valid_asyncapi(&document);

    let key = "module.umami.site.created";
    assert_eq!(document["channels"][key]["address"], key);
    assert_eq!(
        document["channels"]["tool.billing.quote"]["address"],
        "billing.quote"
    );
    let messages = &document["components"]["messages"];
    let created = &messages[format!("{key}.v1").as_str()]["payload"];
    assert_eq!(created["type"], "object", "{created:#}");
    assert_eq!(created["required"], serde_json::json!(["site", "owner"]));
    assert_eq!(
        messages["billing.quote.request"]["payload"]["required"],
        serde_json::json!(["plan"])
    );
    assert_eq!(
        messages["billing.quote.reply"]["payload"]["type"],
        "integer"
    );

    let operations = document["operations"]
        .as_object()
        .expect("operations")
        .iter()
        .map(|(id, op)| (id.as_str(), op["action"].as_str().unwrap_or_default()))
        .collect::<std::collections::BTreeMap<_, _>>();
    let expected = [
        (
            "module.billing.receive.module.umami.site.created",
            "receive",
        ),
        (
            "module.billing.send.module.billing.contract.announced",
            "send",
        ),
        ("module.billing.serve.billing.quote", "receive"),
        ("module.mailer.receive.module.umami.site.created", "receive"),
        (
            "module.mailer.send.module.mailer.contract.announced",
            "send",
        ),
        ("module.umami.call.billing.quote", "send"),
        ("module.umami.send.module.umami.contract.announced", "send"),
        ("module.umami.send.module.umami.site.created", "send"),
    ];
    assert_eq!(
        operations,
        expected.into_iter().collect(),
        "{:#}",
        document["operations"]
    );

    // The announcements are channels too, and their message describes what a bus announces.
    let announced = "module.billing.contract.announced";
    assert_eq!(document["channels"][announced]["address"], announced);
    assert_eq!(
        document["channels"][announced]["bindings"]["amqp"]["exchange"]["name"],
        "mesh.events"
    );
    let mut payload = messages["contract.announced.v1"]["payload"].clone();
    payload["components"] = document["components"].clone();
    let validator = jsonschema::draft7::new(&payload).expect("the announcement's schema");
    for contract in system.modules() {
        let body = serde_json::to_value(contract)?;
        let errors: Vec<String> = validator
            .iter_errors(&body)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{}: {errors:?}", contract.owner);
    }
    assert!(
        !validator.is_valid(&serde_json::json!({"owner": "module.billing"})),
        "a contract without its node is refused"
    );

    // Read back from the document, the same system.
    assert_eq!(System::from_document(&document)?, system);
    for bus in buses {
        bus.drain().await?;
    }
    Ok(())
}
