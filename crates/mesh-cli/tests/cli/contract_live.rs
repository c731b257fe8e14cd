//! The contract of a running system, end to end: three modules started against RabbitMQ
//! announce their contracts, the audit logger records them, `mesh contract show` lists their
//! emits, handlers and tools from the store; after one module changes a field's type and
//! restarts, `mesh contract check` against the contract exported earlier fails (exit 11) and
//! names the field and whom the change breaks.

use mesh::{Bus, Event, HandlerError, Incoming, Schema};
use mesh_testkit::{eventually, TempDir};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::audit_run::{start as start_logger, stop as stop_logger};
use crate::{assert_code, options, run, stdout, transport, vhost, NODE, WAIT};

/// The shop's event as it first ships: `total` in cents.
mod before {
    use super::*;

    #[derive(Debug, Serialize, Deserialize, JsonSchema)]
    pub(super) struct OrderPlaced {
        pub(super) order: String,
        pub(super) total: u64,
    }

    impl Event for OrderPlaced {
        const KEY: &'static str = "module.shop.order.placed";
        fn json_schema() -> Option<Schema> {
            Some(Schema::of::<Self>())
        }
    }
}

/// The shop's event after its change: `total` became a string, under the same version.
mod after {
    use super::*;

    #[derive(Debug, Serialize, Deserialize, JsonSchema)]
    pub(super) struct OrderPlaced {
        pub(super) order: String,
        pub(super) total: String,
    }

    impl Event for OrderPlaced {
        const KEY: &'static str = "module.shop.order.placed";
        fn json_schema() -> Option<Schema> {
            Some(Schema::of::<Self>())
        }
    }
}

/// billing's event, handled by the mailer.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct InvoicePaid {
    invoice: String,
}

impl Event for InvoicePaid {
    const KEY: &'static str = "module.billing.invoice.paid";
    fn json_schema() -> Option<Schema> {
        Some(Schema::of::<Self>())
    }
}

/// The request of the shop's tool.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Quote {
    plan: String,
}

const QUOTE: &str = "shop.quote";

async fn shop<E: Event>(vhost: &mesh_testkit::TestVhost) -> Bus {
    Bus::builder()
        .node(NODE)
        .module("shop")
        .emits::<E>()
        .serve_with_schemas(QUOTE, |_: Quote, _| async { Ok(900_u64) })
        .start(transport(options(vhost)).await)
        .await
        .expect("the shop starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_shows_the_running_system_and_check_names_a_retyped_field() {
    let vhost = vhost("cli-contract-live").await;
    let url = vhost.url();
    let dir = TempDir::new("contract-live").expect("a temporary directory");
    let store = format!("sqlite://{}", dir.join("audit.db").display());
    let logger = start_logger(&vhost, "mesh", &["--store", &store], &[]).await;

    let shop_v1 = shop::<before::OrderPlaced>(&vhost).await;
    let billing = Bus::builder()
        .node(NODE)
        .module("billing")
        .emits::<InvoicePaid>()
        .calls::<Quote, u64>(QUOTE)
        .on(|_: Incoming<before::OrderPlaced>| async { Ok::<(), HandlerError>(()) })
        .start(transport(options(&vhost)).await)
        .await
        .expect("billing starts");
    let mailer = Bus::builder()
        .node(NODE)
        .module("mailer")
        .on(|_: Incoming<InvoicePaid>| async { Ok::<(), HandlerError>(()) })
        .start(transport(options(&vhost)).await)
        .await
        .expect("the mailer starts");

    // The three announcements reach the store through the audit logger.
    let shown = eventually(WAIT, "the three contracts in the store", || async {
        let output = run(Some(&url), &["contract", "show", "--store", &store]).await;
        let text = stdout(&output);
        (output.status.success()
            && ["module.shop", "module.billing", "module.mailer"]
                .iter()
                .all(|owner| text.contains(owner)))
        .then_some(text)
    })
    .await;
    for expected in [
        "module.shop.order.placed",
        "module.billing.invoice.paid",
        QUOTE,
    ] {
        assert!(
            shown.contains(expected),
            "{expected} missing from:\n{shown}"
        );
    }
    // Who emits each key, who handles it; who serves the tool, who calls it: a block is a
    // heading line and the indented lines under it.
    let block = |heading: &str| -> String {
        let mut lines = shown.lines().skip_while(|line| line.trim_end() != heading);
        let first = lines
            .next()
            .unwrap_or_else(|| panic!("no block `{heading}` in:\n{shown}"));
        std::iter::once(first)
            .chain(lines.take_while(|line| line.starts_with(' ')))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let order = block("module.shop.order.placed");
    assert!(
        order.contains("module.shop") && order.contains("module.billing"),
        "{order}"
    );
    assert!(!order.contains("module.mailer"), "{order}");
    let paid = block("module.billing.invoice.paid");
    assert!(paid.contains("module.mailer"), "{paid}");
    let quote = block(&format!("tool {QUOTE}"));
    assert!(
        quote.contains("module.shop") && quote.contains("module.billing"),
        "{quote}"
    );

    let before_file = dir.join("before.json");
    let before_path = before_file.display().to_string();
    let output = run(
        Some(&url),
        &[
            "contract",
            "export",
            "--store",
            &store,
            "--out",
            &before_path,
        ],
    )
    .await;
    assert_code(&output, 0);
    // Nothing changed yet: compatible.
    let output = run(
        Some(&url),
        &[
            "contract",
            "check",
            "--against",
            &before_path,
            "--store",
            &store,
        ],
    )
    .await;
    assert_code(&output, 0);

    // The shop changes `total`'s type and restarts.
    shop_v1.drain().await.expect("the shop drains");
    let shop_v2 = shop::<after::OrderPlaced>(&vhost).await;
    let report = eventually(WAIT, "check to see the restarted shop", || async {
        let output = run(
            Some(&url),
            &[
                "contract",
                "check",
                "--against",
                &before_path,
                "--store",
                &store,
            ],
        )
        .await;
        (output.status.code() == Some(11)).then(|| stdout(&output))
    })
    .await;
    assert!(
        report.contains("total"),
        "the field is not named:\n{report}"
    );
    assert!(
        report.contains("module.shop.order.placed"),
        "the key is not named:\n{report}"
    );
    assert!(
        report.contains("module.billing"),
        "whom it breaks (billing reads it) is not named:\n{report}"
    );

    for bus in [shop_v2, billing, mailer] {
        bus.drain().await.expect("a module drains");
    }
    stop_logger(logger).await;
    vhost.delete().await.expect("the vhost is deleted");
}
