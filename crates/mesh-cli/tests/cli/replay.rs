//! `mesh audit replay`: stored events into one module's queue only, its dry run, and its
//! refusals.

use std::sync::{Arc, Mutex};

use mesh::{Bus, EventId, Incoming};
use mesh_testkit::{eventually, TempStore};

use crate::audit::{start_logger, stop_logger};
use crate::{assert_code, json, options, run, stderr, stdout, transport, vhost, NODE, WAIT};

/// Per delivery: its id and whether it was marked replayed.
type Seen = Arc<Mutex<Vec<(EventId, bool)>>>;

async fn module(vhost: &mesh_testkit::TestVhost, name: &str, seen: Seen) -> Bus {
    Bus::builder()
        .node(NODE)
        .module(name)
        .on_raw(["module.shop.#"], move |e: Incoming<bytes::Bytes>| {
            seen.lock()
                .expect("lock")
                .push((e.meta.id(), e.meta.replayed().is_some()));
            async { Ok(()) }
        })
        .start(transport(options(vhost)).await)
        .await
        .expect("the module starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_events_are_replayed_to_one_module_only() {
    let vhost = vhost("cli-replay").await;
    let url = vhost.url();
    let store = TempStore::sqlite();
    let logger = start_logger(&vhost, &store).await;
    let output = run(
        Some(&url),
        &[
            "emit",
            "module.shop.order.placed",
            "--count",
            "20",
            "--json",
        ],
    )
    .await;
    assert_code(&output, 0);
    eventually(WAIT, "20 events in the audit store", || async {
        let output = run(
            Some(&url),
            &["audit", "count", "--json", "--store", store.url()],
        )
        .await;
        (json(&output)["events"] == 20).then_some(())
    })
    .await;
    stop_logger(logger).await;

    // Both modules join after the events were emitted: only a replay can bring them.
    let billing_seen = Seen::default();
    let mailer_seen = Seen::default();
    let billing = module(&vhost, "billing", billing_seen.clone()).await;
    let mailer = module(&vhost, "mailer", mailer_seen.clone()).await;
    let to = format!("{NODE}.billing");
    let replay = |extra: &'static [&'static str]| {
        let mut args = vec![
            "audit",
            "replay",
            "--key",
            "module.shop.#",
            "--since",
            "1h",
            "--to",
            to.as_str(),
            "--store",
            store.url(),
        ];
        args.extend_from_slice(extra);
        args
    };

    let output = run(Some(&url), &replay(&["--dry-run", "--json"])).await;
    assert_code(&output, 0);
    assert_eq!(
        json(&output),
        serde_json::json!({
            "dry_run": true,
            "queue": format!("{NODE}.billing.events"),
            "events": 20,
            "by_key": [{"key": "module.shop.order.placed", "events": 20}],
        })
    );
    assert!(
        billing_seen.lock().expect("lock").is_empty(),
        "a dry run sends nothing"
    );

    let output = run(Some(&url), &replay(&["--json", "--rate", "50"])).await;
    assert_code(&output, 0);
    let report = json(&output);
    assert_eq!(report["replayed"], 20, "{report}");
    assert_eq!(report["failed"], serde_json::Value::Null);
    eventually(WAIT, "billing handling the 20 replayed events", || async {
        (billing_seen.lock().expect("lock").len() >= 20).then_some(())
    })
    .await;

    // A live event behind them on the mailer's queue: once handled, a replayed copy there
    // would have been handled before it.
    let output = run(Some(&url), &["emit", "module.shop.order.placed", "--json"]).await;
    assert_code(&output, 0);
    eventually(WAIT, "the mailer handling the live event", || async {
        (!mailer_seen.lock().expect("lock").is_empty()).then_some(())
    })
    .await;
    assert_eq!(
        mailer_seen
            .lock()
            .expect("lock")
            .iter()
            .filter(|(_, replayed)| *replayed)
            .count(),
        0,
        "no replayed event reached the mailer"
    );
    assert_eq!(mailer_seen.lock().expect("lock").len(), 1);
    {
        let billing = billing_seen.lock().expect("lock");
        let replayed: Vec<_> = billing.iter().filter(|(_, r)| *r).collect();
        assert_eq!(replayed.len(), 20, "every replayed delivery is marked");
    }

    // Refusals: not a consumer queue, a bad pattern, a zero rate (usage, 2); a queue that
    // does not exist (1, saying how to resume).
    for (args, expected) in [
        (
            vec![
                "audit",
                "replay",
                "--key",
                "#",
                "--since",
                "1h",
                "--to",
                "serve.shop",
            ],
            2,
        ),
        (
            vec![
                "audit", "replay", "--key", "a..b", "--since", "1h", "--to", "n.m",
            ],
            2,
        ),
        (
            vec![
                "audit", "replay", "--key", "#", "--since", "1h", "--to", "n.m", "--rate", "0",
            ],
            2,
        ),
        (
            vec![
                "audit", "replay", "--key", "#", "--since", "nope", "--to", "n.m",
            ],
            2,
        ),
    ] {
        let mut args = args;
        args.extend(["--store", store.url()]);
        let output = run(Some(&url), &args).await;
        assert_code(&output, expected);
        assert!(!stderr(&output).contains("panicked"), "{}", stderr(&output));
    }
    let nobody = format!("{NODE}.nobody");
    let output = run(
        Some(&url),
        &[
            "audit",
            "replay",
            "--key",
            "#",
            "--since",
            "1h",
            "--to",
            &nobody,
            "--store",
            store.url(),
        ],
    )
    .await;
    assert_code(&output, 1);
    let text = stderr(&output);
    assert!(text.contains("run it again with --since"), "{text}");
    assert!(stdout(&output).contains("replayed 0 event(s)"));

    billing.drain().await.expect("drain");
    mailer.drain().await.expect("drain");
    vhost.delete().await.expect("vhost deleted");
}
