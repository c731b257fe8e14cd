//! Contracts on RabbitMQ: the announcement crosses the broker like any event of its bus, and
//! with validation on a body missing a required field is dead-lettered `schema-invalid`
//! while a valid one is handled.

#[path = "support/broker.rs"]
mod broker;

use mesh::{Bus, DeadReason, Event, Incoming, ModuleContract, Outgoing, Schema};
use mesh_testkit::TestVhost;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use broker::{transport, WAIT};

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct SiteCreated {
    site: String,
    owner: String,
}

impl Event for SiteCreated {
    const KEY: &'static str = "module.umami.site.created";
    fn json_schema() -> Option<Schema> {
        Some(Schema::of::<Self>())
    }
}

#[tokio::test]
async fn validation_and_announcement_over_rabbitmq() -> anyhow::Result<()> {
    let vhost = TestVhost::create("contract").await?;
    let umami = Bus::builder()
        .node("n1")
        .module("umami")
        .start(transport(&vhost, "contract.umami").await)
        .await?;
    let mut announcements = umami.listen(["*.*.contract.announced"]).await?;
    let mut dead = umami.all_dead_letters().await?;

    let (tx, mut handled) = tokio::sync::mpsc::unbounded_channel();
    let stats = Bus::builder()
        .node("n1")
        .module("stats")
        .validate_schemas(true)
        .on(move |e: Incoming<SiteCreated>| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(e.event.site);
                Ok(())
            }
        })
        .start(transport(&vhost, "contract.stats").await)
        .await?;

    let seen = tokio::time::timeout(WAIT, announcements.next())
        .await?
        .ok_or_else(|| anyhow::anyhow!("the listener closed"))??;
    assert_eq!(seen.meta.key().as_str(), "module.stats.contract.announced");
    let announced: ModuleContract = serde_json::from_slice(&seen.event)?;
    assert_eq!(&announced, stats.contract());
    assert_eq!(announced.handles[0].pattern, SiteCreated::KEY);

    let missing = serde_json::json!({"site": "blog"}).to_string();
    umami
        .emit_outgoing(Outgoing::raw(SiteCreated::KEY, missing)?)
        .await?;
    let letter = tokio::time::timeout(WAIT, dead.next())
        .await?
        .ok_or_else(|| anyhow::anyhow!("the tap closed"))?;
    let note = letter.note.clone().expect("a dead letter's note");
    assert_eq!(note.reason, DeadReason::SchemaInvalid);
    let error = note.last_error.unwrap_or_default();
    assert!(
        error.contains("\"owner\" is a required property"),
        "{error}"
    );

    umami
        .emit(&SiteCreated {
            site: "journal".into(),
            owner: "ada".into(),
        })
        .await?;
    let site = tokio::time::timeout(WAIT, handled.recv()).await?;
    assert_eq!(site.as_deref(), Some("journal"));
    stats.drain().await?;
    assert_eq!(
        handled.recv().await,
        None,
        "the invalid body reached the handler"
    );
    umami.drain().await?;
    Ok(())
}
