//! The demo's modules, started on the in-memory transport, announce the whole system's
//! contract: every key, version and JSON Schema (draft-07 style: no `$defs`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use mesh::{Bus, Event, MemoryBroker, ModuleContract};

#[path = "../examples/demo/modules.rs"]
mod modules;

use modules::{QuoteRequest, SiteCreated, QUOTE};

const WAIT: Duration = Duration::from_secs(10);

/// Starts the demo's three modules and collects the contracts they announce.
async fn announced() -> anyhow::Result<(BTreeMap<String, ModuleContract>, Vec<Bus>)> {
    let broker = MemoryBroker::new();
    let observer = Bus::builder()
        .node(modules::NODE)
        .module("observer")
        .start(Arc::new(broker.transport()))
        .await?;
    let mut announcements = observer.listen(["*.*.contract.announced"]).await?;
    let (done, _) = tokio::sync::mpsc::unbounded_channel();
    let mut buses = Vec::new();
    for builder in [
        modules::billing(done.clone()),
        modules::mailer(done)?,
        modules::umami(),
    ] {
        buses.push(builder.start(Arc::new(broker.transport())).await?);
    }
    let mut contracts = BTreeMap::new();
    for _ in 0..buses.len() {
        let seen = tokio::time::timeout(WAIT, announcements.next())
            .await?
            .ok_or_else(|| anyhow::anyhow!("the listener closed"))??;
        assert_eq!(seen.meta.schema().map(|v| v.0), Some(mesh::CONTRACT_FORMAT));
        let contract: ModuleContract = serde_json::from_slice(&seen.event)?;
        assert_eq!(
            seen.meta.key().as_str(),
            format!("{}.contract.announced", contract.owner)
        );
        contracts.insert(contract.owner.clone(), contract);
    }
    Ok((contracts, buses))
}

fn no_defs(value: &serde_json::Value) -> bool {
    !value.to_string().contains("$defs")
}

#[tokio::test]
async fn the_demo_modules_announce_the_whole_contract() -> anyhow::Result<()> {
    let (contracts, buses) = announced().await?;
    assert_eq!(
        contracts.keys().collect::<Vec<_>>(),
        ["module.billing", "module.mailer", "module.umami"]
    );
    // What each announced is what its bus says it is.
    for bus in &buses {
        let contract = bus.contract();
        assert_eq!(contracts.get(&contract.owner), Some(contract));
        assert_eq!(contract.node, modules::NODE);
    }

    let site_created = SiteCreated::json_schema().map(mesh::Schema::into_json);
    assert!(site_created.is_some());
    let billing = &contracts["module.billing"];
    assert_eq!(billing.handles.len(), 1);
    assert_eq!(billing.handles[0].pattern, SiteCreated::KEY);
    assert_eq!(billing.handles[0].version, Some(SiteCreated::SCHEMA));
    assert_eq!(billing.handles[0].schema, site_created);
    assert_eq!(billing.serves.len(), 1);
    assert_eq!(billing.serves[0].tool, QUOTE);
    let request = billing.serves[0].request.as_ref().expect("request schema");
    assert_eq!(request["required"], serde_json::json!(["plan"]));
    let reply = billing.serves[0].reply.as_ref().expect("reply schema");
    assert_eq!(reply["type"], "integer");
    assert!(billing.emits.is_empty() && billing.calls.is_empty());

    let mailer = &contracts["module.mailer"];
    assert_eq!(mailer.handles.len(), 1);
    assert_eq!(mailer.handles[0].pattern, SiteCreated::KEY);
    assert_eq!(mailer.handles[0].schema, site_created);

    let umami = &contracts["module.umami"];
    assert_eq!(umami.emits.len(), 1);
    assert_eq!(umami.emits[0].key, SiteCreated::KEY);
    assert_eq!(umami.emits[0].version, SiteCreated::SCHEMA);
    assert_eq!(umami.emits[0].schema, site_created);
    assert_eq!(umami.calls.len(), 1);
    assert_eq!(umami.calls[0].tool, QUOTE);
    assert_eq!(
        umami.calls[0].request,
        Some(mesh::Schema::of::<QuoteRequest>().into_json())
    );
    assert_eq!(umami.calls[0].reply, billing.serves[0].reply);
    assert!(umami.handles.is_empty() && umami.serves.is_empty());

    // Every schema is present and draft-07 style.
    for contract in contracts.values() {
        let schemas = contract
            .emits
            .iter()
            .map(|e| e.schema.as_ref())
            .chain(contract.handles.iter().map(|h| h.schema.as_ref()))
            .chain(
                contract
                    .serves
                    .iter()
                    .chain(&contract.calls)
                    .flat_map(|t| [t.request.as_ref(), t.reply.as_ref()]),
            );
        for schema in schemas {
            let schema = schema.expect("every schema declared");
            assert!(no_defs(schema), "{schema}");
            assert_eq!(schema["$schema"], "http://json-schema.org/draft-07/schema#");
        }
    }
    for bus in buses {
        bus.drain().await?;
    }
    Ok(())
}
