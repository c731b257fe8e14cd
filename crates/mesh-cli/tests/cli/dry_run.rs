//! `--dry-run` on the commands that change things in bulk: it prints what would be done and
//! changes nothing, neither on the broker nor in the audit store. Each test ends with the real
//! command, which does change what the dry run left alone (so the checks can fail).

use mesh::{Bus, HandlerError};
use mesh_testkit::{eventually, TestVhost};

use crate::audit::{queue_counts, start_logger, stop_logger, TempStore};
use crate::{assert_code, json, options, run, stdout, transport, vhost, NODE, WAIT};

/// Every recorded dead letter, as `mesh dead list --json` prints them (the store's state).
async fn dead_letters(url: &str, store: &TempStore) -> Vec<serde_json::Value> {
    let output = run(
        Some(url),
        &["dead", "list", "--json", "--store", store.url()],
    )
    .await;
    assert_code(&output, 0);
    stdout(&output)
        .lines()
        .map(|line| serde_json::from_str(line).expect("one JSON object per line"))
        .collect()
}

/// Messages in `queue` (see [`queue_counts`]); `None` while the queue still has a consumer:
/// with none, ready is all it holds.
async fn depth(vhost: &TestVhost, queue: &str) -> Option<u64> {
    let (ready, consumers) = queue_counts(vhost, queue)
        .await
        .unwrap_or_else(|| panic!("queue {queue} exists"));
    (consumers == 0).then_some(ready)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letter_dry_runs_publish_nothing_and_keep_the_store() {
    let vhost = vhost("cli-dry-run").await;
    let url = vhost.url();
    let store = TempStore::sqlite();
    let logger = start_logger(&vhost, &store).await;

    // Two events a handler gives up on at once: two dead letters of the mailer's queue.
    let mailer = Bus::builder()
        .node(NODE)
        .module("mailer")
        .on_raw(["module.umami.#"], |_| async {
            Err::<(), _>(HandlerError::permanent("mail server unreachable"))
        })
        .start(transport(options(&vhost)).await)
        .await
        .unwrap();
    for key in ["module.umami.user.joined", "module.umami.site.created"] {
        assert_code(&run(Some(&url), &["emit", key]).await, 0);
    }
    eventually(WAIT, "both dead letters recorded", || async {
        (dead_letters(&url, &store).await.len() == 2).then_some(())
    })
    .await;
    // No consumer from here on: whatever reaches the queue stays there, to be counted.
    mailer.close().await;
    let queue = format!("{NODE}.mailer.events");
    eventually(WAIT, "the mailer's queue empty", || async {
        (depth(&vhost, &queue).await == Some(0)).then_some(())
    })
    .await;
    let before = dead_letters(&url, &store).await;
    let mut ids: Vec<String> = before
        .iter()
        .map(|d| d["id"].as_str().expect("an id").to_owned())
        .collect();
    ids.sort();
    for dead in &before {
        assert_eq!(dead["queue"], queue.as_str());
        assert_eq!(dead["redrive_count"], 0);
    }

    // Re-drive, dry: both would go to the mailer's queue; nothing is published or marked.
    let output = run(
        Some(&url),
        &[
            "dead",
            "redrive",
            "-q",
            &queue,
            "--dry-run",
            "--store",
            store.url(),
        ],
    )
    .await;
    assert_code(&output, 0);
    let text = stdout(&output);
    for id in &ids {
        assert!(
            text.contains(&format!("would re-drive {id} -> {queue}")),
            "{text}"
        );
    }
    assert!(text.contains("2 would be re-driven, 0 refused"), "{text}");
    let output = run(
        Some(&url),
        &[
            "dead",
            "redrive",
            "--all",
            "--dry-run",
            "--json",
            "--store",
            store.url(),
        ],
    )
    .await;
    assert_code(&output, 0);
    let plan = json(&output);
    assert_eq!(plan["dry_run"], true);
    let mut planned: Vec<String> = plan["would_redrive"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|w| {
            assert_eq!(w["queue"], queue.as_str());
            w["id"].as_str().expect("an id").to_owned()
        })
        .collect();
    planned.sort();
    assert_eq!(planned, ids);
    assert_eq!(
        dead_letters(&url, &store).await,
        before,
        "a dry run marks nothing"
    );

    // Purge, dry: both would go; both stay.
    let output = run(
        Some(&url),
        &[
            "dead",
            "purge",
            "--all",
            "--dry-run",
            "--store",
            store.url(),
        ],
    )
    .await;
    assert_code(&output, 0);
    let text = stdout(&output);
    for id in &ids {
        assert!(
            text.lines()
                .any(|line| line.starts_with("would purge") && line.contains(id.as_str())),
            "{text}"
        );
    }
    assert!(
        text.contains("dry run: 2 dead letter(s) would be purged; nothing was deleted"),
        "{text}"
    );
    let output = run(
        Some(&url),
        &[
            "dead",
            "purge",
            "-r",
            "permanent",
            "--dry-run",
            "--json",
            "--store",
            store.url(),
        ],
    )
    .await;
    assert_code(&output, 0);
    let plan = json(&output);
    assert_eq!(plan["dry_run"], true);
    assert_eq!(plan["would_purge"], 2);
    assert_eq!(plan["dead_letters"].as_array().map(Vec::len), Some(2));
    // A filter matching nothing would purge nothing.
    let output = run(
        Some(&url),
        &[
            "dead",
            "purge",
            "-r",
            "expired",
            "--dry-run",
            "--json",
            "--store",
            store.url(),
        ],
    )
    .await;
    assert_code(&output, 0);
    assert_eq!(json(&output)["would_purge"], 0);
    assert_eq!(
        dead_letters(&url, &store).await,
        before,
        "a dry run deletes nothing"
    );

    // Nothing was published: a marker emitted after the dry runs is, once counted, the
    // queue's only message (a count that holds it also holds whatever came before it).
    assert_code(&run(Some(&url), &["emit", "module.umami.marker"]).await, 0);
    let counted = eventually(WAIT, "the marker counted", || async {
        let n = depth(&vhost, &queue).await?;
        (n >= 1).then_some(n)
    })
    .await;
    assert_eq!(counted, 1, "a dry run publishes nothing");

    // The real commands do what the dry runs said.
    let output = run(
        Some(&url),
        &[
            "dead",
            "redrive",
            "-q",
            &queue,
            "--json",
            "--store",
            store.url(),
        ],
    )
    .await;
    assert_code(&output, 0);
    let mut redriven: Vec<String> = json(&output)["redriven"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|id| id.as_str().expect("an id").to_owned())
        .collect();
    redriven.sort();
    assert_eq!(redriven, ids);
    let counted = eventually(WAIT, "the re-driven letters counted", || async {
        let n = depth(&vhost, &queue).await?;
        (n >= 3).then_some(n)
    })
    .await;
    assert_eq!(counted, 3, "the marker and the two re-driven letters");
    let output = run(
        Some(&url),
        &[
            "dead",
            "purge",
            "--redriven",
            "--json",
            "--store",
            store.url(),
        ],
    )
    .await;
    assert_code(&output, 0);
    assert_eq!(json(&output)["purged"], 2);
    assert!(dead_letters(&url, &store).await.is_empty());

    stop_logger(logger).await;
    vhost.delete().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topology_apply_dry_run_changes_nothing() {
    let vhost = vhost("cli-dry-apply").await;
    let url = vhost.url();
    let queue = format!("{NODE}.billing.events");
    let exists = || async {
        vhost
            .list_queues()
            .await
            .expect("the broker lists the vhost's queues")
            .iter()
            .any(|q| q.name == queue)
    };

    let args = ["topology", "apply", "-b", "billing=module.umami.#"];
    let output = run(Some(&url), &[&args[..], &["--dry-run"]].concat()).await;
    assert_code(&output, 0);
    let text = stdout(&output);
    assert!(text.contains(queue.as_str()), "{text}");
    assert!(text.contains("would create"), "{text}");
    assert!(text.contains("would bind"), "{text}");
    assert!(text.contains("nothing was changed"), "{text}");
    assert!(!exists().await, "a dry run creates no queue");
    let output = run(Some(&url), &[&args[..], &["--dry-run", "--json"]].concat()).await;
    assert_code(&output, 0);
    let plan = json(&output);
    assert_eq!(plan["dry_run"], true);
    assert!(
        plan["applied"]
            .as_array()
            .expect("a list")
            .iter()
            .all(|step| step["action"].as_str().unwrap_or("").starts_with("would ")),
        "{plan}"
    );
    assert!(!exists().await, "a dry run creates no queue");

    let output = run(Some(&url), &args).await;
    assert_code(&output, 0);
    assert!(exists().await, "apply creates the queue");
    vhost.delete().await.unwrap();
}
