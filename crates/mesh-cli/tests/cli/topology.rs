//! `topology plan | apply | show` against queues declared by the SDK itself.

use mesh::{Bus, HandlerError};

use crate::{assert_code, json, options, run, stderr, stdout, transport, vhost};

async fn start_module(
    vhost: &mesh_testkit::TestVhost,
    module: &str,
    patterns: &[&str],
    delivery_limit: u32,
) -> Bus {
    Bus::builder()
        .node(crate::NODE)
        .module(module)
        .on_raw(patterns.to_vec(), |_| async { Ok::<(), HandlerError>(()) })
        .start(transport(options(vhost).delivery_limit(delivery_limit)).await)
        .await
        .expect("the module starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_sdk_declares_is_what_plan_wants() {
    let vhost = vhost("cli-agree").await;
    let url = vhost.url();
    let bus = start_module(&vhost, "billing", &["module.umami.#", "node.*.joined"], 20).await;
    let output = run(
        Some(&url),
        &[
            "topology",
            "plan",
            "--json",
            "--check",
            "--module",
            "billing",
            "--pattern",
            "module.umami.#",
            "--pattern",
            "node.*.joined",
        ],
    )
    .await;
    assert_code(&output, 0);
    assert_eq!(json(&output)["differences"], serde_json::json!([]));
    bus.close().await;
    vhost.delete().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_lists_exactly_a_missing_binding_and_a_queue_with_other_arguments() {
    let vhost = vhost("cli-plan").await;
    let url = vhost.url();
    // billing's queue was declared with another delivery limit (the contract here wants the
    // default, 20); mailer lacks a binding.
    let billing = start_module(&vhost, "billing", &["module.umami.#"], 5).await;
    let mailer = start_module(&vhost, "mailer", &["module.umami.#"], 20).await;
    billing.close().await;
    mailer.close().await;
    // Something in billing's queue, which replacing it would lose.
    let emitted = run(
        Some(&url),
        &["emit", "module.umami.site.created", "--count", "3"],
    )
    .await;
    assert_code(&emitted, 0);

    let spec: &[&str] = &[
        "--module",
        "billing",
        "--pattern",
        "module.umami.#",
        "--module",
        "mailer",
        "--pattern",
        "module.umami.#",
        "--pattern",
        "node.*.joined",
    ];
    let plan = |extra: &'static [&'static str]| {
        let url = url.clone();
        async move {
            let mut args = vec!["topology", "plan"];
            args.extend_from_slice(extra);
            args.extend_from_slice(spec);
            run(Some(&url), &args).await
        }
    };

    let output = plan(&["--json"]).await;
    assert_code(&output, 0);
    let differences = json(&output)["differences"].as_array().cloned().unwrap();
    assert_eq!(differences.len(), 2, "{differences:#?}");
    let queue = differences
        .iter()
        .find(|d| d["kind"] == "queue-differs")
        .unwrap();
    assert_eq!(queue["queue"], "clitest.billing.events");
    let settings: Vec<&str> = queue["settings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(settings, ["x-delivery-limit"]);
    assert_eq!(queue["settings"][0]["want"], 20);
    assert_eq!(queue["settings"][0]["have"], 5);
    let binding = differences
        .iter()
        .find(|d| d["kind"] == "missing-binding")
        .unwrap();
    assert_eq!(binding["queue"], "clitest.mailer.events");
    assert_eq!(binding["exchange"], "mesh.events");
    assert_eq!(binding["routing_key"], "node.*.joined");

    // The text form: one line per difference.
    let output = plan(&[]).await;
    assert_code(&output, 0);
    let text = stdout(&output);
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(
        text.contains("~ queue clitest.billing.events differs: x-delivery-limit wants 20, has 5"),
        "{text}"
    );
    assert!(
        text.contains(
            "+ binding mesh.events -> clitest.mailer.events on `node.*.joined` is missing"
        ),
        "{text}"
    );

    let output = plan(&["--check"]).await;
    assert_code(&output, 9);

    // apply refuses to replace the queue without --force, and changes nothing.
    let mut args = vec!["topology", "apply"];
    args.extend_from_slice(spec);
    let output = run(Some(&url), &args).await;
    assert_code(&output, 1);
    let err = stderr(&output);
    assert!(err.contains("refusing to replace 1 queue(s)"), "{err}");
    assert!(err.contains("--force"), "{err}");
    assert!(err.contains("messages"), "says what it costs: {err}");
    let output = plan(&["--json"]).await;
    assert_eq!(json(&output)["differences"].as_array().unwrap().len(), 2);

    args.push("--force");
    let output = run(Some(&url), &args).await;
    assert_code(&output, 0);
    let text = stdout(&output);
    assert!(text.contains("replaced"), "{text}");
    assert!(text.contains("bound"), "{text}");
    let output = plan(&["--check"]).await;
    assert_code(&output, 0);
    let queues = vhost.list_queues().await.unwrap();
    let billing = queues
        .iter()
        .find(|q| q.name == "clitest.billing.events")
        .unwrap();
    assert_eq!(billing.arguments["x-delivery-limit"], 20);
    assert_eq!(billing.messages, 0, "replaced with what it held");
    let bindings = vhost.list_bindings().await.unwrap();
    assert!(bindings.iter().any(|b| b.source == "mesh.events"
        && b.destination == "clitest.billing.events"
        && b.routing_key == "module.umami.#"));

    let output = run(
        Some(&url),
        &[
            "topology",
            "show",
            "--module",
            "billing",
            "--pattern",
            "module.umami.#",
        ],
    )
    .await;
    assert_code(&output, 0);
    let text = stdout(&output);
    assert!(text.contains("= clitest.billing.events"), "{text}");
    assert!(
        text.contains("? clitest.mailer.events"),
        "outside this spec: {text}"
    );
    vhost.delete().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_creates_everything_on_an_empty_vhost_and_removes_unwanted_bindings() {
    let vhost = vhost("cli-apply").await;
    let url = vhost.url();
    let dir = std::env::temp_dir().join(format!("mesh-cli-apply-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let spec = dir.join("mesh.toml");
    std::fs::write(
        &spec,
        "[[modules]]\nname = \"billing\"\npatterns = [\"module.umami.#\", \"old.#\"]\n",
    )
    .unwrap();
    let spec = spec.to_str().unwrap().to_owned();
    let output = run(Some(&url), &["topology", "plan", "--json", "--spec", &spec]).await;
    assert_code(&output, 0);
    // 6 exchanges, 1 queue, 2 bindings (no `mesh.dead-letters`: it is retired).
    assert_eq!(json(&output)["differences"].as_array().unwrap().len(), 9);
    let output = run(Some(&url), &["topology", "apply", "--spec", &spec]).await;
    assert_code(&output, 0);
    let output = run(
        Some(&url),
        &["topology", "plan", "--check", "--spec", &spec],
    )
    .await;
    assert_code(&output, 0);

    // The module drops a pattern: apply removes the binding.
    std::fs::write(
        dir.join("mesh.toml"),
        "[[modules]]\nname = \"billing\"\npatterns = [\"module.umami.#\"]\n",
    )
    .unwrap();
    let output = run(
        Some(&url),
        &["topology", "apply", "--json", "--spec", &spec],
    )
    .await;
    assert_code(&output, 0);
    let applied = json(&output)["applied"].clone();
    assert_eq!(applied.as_array().unwrap().len(), 1, "{applied}");
    assert_eq!(applied[0]["kind"], "extra-binding");
    assert_eq!(applied[0]["routing_key"], "old.#");
    let bindings = vhost.list_bindings().await.unwrap();
    assert!(!bindings.iter().any(|b| b.routing_key == "old.#"));
    std::fs::remove_dir_all(&dir).unwrap();
    vhost.delete().await.unwrap();
}

/// The migration from delay queues: `apply` deletes a retired `<queue>.delay.<step>` once it
/// is empty and unused, leaves one still holding a copy (it expires back into its queue), and
/// a spec module without patterns (it only emits) wants no queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_deletes_retired_delay_queues_once_empty_and_wants_no_queue_for_an_emitter() {
    use mesh::raw::{PublishOptions, QueueSpec, SubscriptionSpec, Target};

    let vhost = vhost("cli-retired").await;
    let url = vhost.url();
    let (empty, holding) = (
        format!("{}.billing.events.delay.1s", crate::NODE),
        format!("{}.billing.events.delay.5s", crate::NODE),
    );
    // An older deployment's delay queues, one still holding a copy.
    let transport = transport(options(&vhost)).await;
    for queue in [&empty, &holding] {
        drop(
            transport
                .subscribe(SubscriptionSpec {
                    queue: QueueSpec::Durable {
                        name: queue.clone(),
                    },
                    patterns: Vec::new(),
                    prefetch: 1,
                    retry_delays: Vec::new(),
                })
                .await
                .unwrap(),
        );
    }
    transport
        .publish(
            mesh::raw::WireMessage::new("module.umami.x", "{}"),
            PublishOptions {
                target: Target::Queue(holding.clone()),
                mandatory: true,
                ..PublishOptions::default()
            },
        )
        .await
        .unwrap()
        .await
        .unwrap();

    let dir = std::env::temp_dir().join(format!("mesh-cli-retired-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let spec = dir.join("mesh.toml");
    std::fs::write(
        &spec,
        format!(
            "node = \"{}\"\n[[modules]]\nname = \"billing\"\npatterns = [\"module.umami.#\"]\n\
             [[modules]]\nname = \"emitter\"\n",
            crate::NODE
        ),
    )
    .unwrap();
    let spec = spec.to_str().unwrap().to_owned();
    // The management API samples queue counts every few seconds: apply until it saw them.
    mesh_testkit::eventually(
        std::time::Duration::from_secs(60),
        "apply deletes the empty delay queue",
        || {
            let (url, spec, vhost, empty) = (url.clone(), spec.clone(), &vhost, empty.clone());
            async move {
                let output = run(Some(&url), &["topology", "apply", "--spec", &spec]).await;
                let queues = vhost.list_queues().await.ok()?;
                (output.status.code() == Some(0) && !queues.iter().any(|q| q.name == empty))
                    .then_some(())
            }
        },
    )
    .await;
    let queues = vhost.list_queues().await.unwrap();
    let held = queues.iter().find(|q| q.name == holding);
    assert_eq!(held.map(|q| q.messages), Some(1), "{queues:?}");
    assert!(
        !queues.iter().any(|q| q.name.contains(".emitter.")),
        "{queues:?}"
    );
    // Still draining: a difference, and apply says so without deleting it.
    let output = run(Some(&url), &["topology", "apply", "--spec", &spec]).await;
    assert_code(&output, 0);
    assert!(
        stdout(&output).contains("still draining"),
        "{}",
        stdout(&output)
    );
    let output = run(
        Some(&url),
        &["topology", "plan", "--check", "--spec", &spec],
    )
    .await;
    assert_code(&output, 9);
    assert!(stdout(&output).contains(&holding), "{}", stdout(&output));
    std::fs::remove_dir_all(&dir).unwrap();
    transport.close().await;
    vhost.delete().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retry_and_serve_queues_of_a_spec_are_what_the_sdk_declares() {
    let vhost = vhost("cli-retry-serve").await;
    let url = vhost.url();
    let bus = Bus::builder()
        .node(crate::NODE)
        .module("billing")
        .retry(
            mesh::RetryPolicy::new(
                3,
                vec![
                    std::time::Duration::from_secs(5),
                    std::time::Duration::from_secs(60),
                ],
            )
            .unwrap(),
        )
        .on_raw(["module.umami.#"], |_| async { Ok::<(), HandlerError>(()) })
        .serve(
            "billing.quote",
            |request: serde_json::Value, _: mesh::RequestMeta| async move {
                Ok::<_, mesh::RemoteError>(request)
            },
        )
        .start(transport(options(&vhost)).await)
        .await
        .expect("the module starts");
    let dir = std::env::temp_dir().join(format!("mesh-cli-retry-serve-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let spec = dir.join("mesh.toml");
    std::fs::write(
        &spec,
        "[[modules]]\nname = \"billing\"\npatterns = [\"module.umami.#\"]\n\
         retry = [\"5s\", \"1m\"]\nserves = [\"billing.quote\"]\n",
    )
    .unwrap();
    let spec_arg = spec.to_str().unwrap();
    let output = run(
        Some(&url),
        &["topology", "plan", "--json", "--check", "--spec", spec_arg],
    )
    .await;
    assert_code(&output, 0);
    assert_eq!(json(&output)["differences"], serde_json::json!([]));
    bus.close().await;
    // On a vhost without them, apply declares them.
    let fresh = crate::vhost("cli-retry-serve-fresh").await;
    let output = run(
        Some(&fresh.url()),
        &["topology", "apply", "--spec", spec_arg],
    )
    .await;
    assert_code(&output, 0);
    let text = stdout(&output);
    for queue in [
        format!("{}.billing.events.retry.5s", crate::NODE),
        format!("{}.billing.events.retry.1m", crate::NODE),
        "serve.billing.quote".to_owned(),
    ] {
        assert!(text.contains(&queue), "{queue}: {text}");
    }
    let output = run(
        Some(&fresh.url()),
        &["topology", "plan", "--check", "--spec", spec_arg],
    )
    .await;
    assert_code(&output, 0);
    std::fs::remove_dir_all(&dir).unwrap();
    fresh.delete().await.unwrap();
    vhost.delete().await.unwrap();
}

/// A spec whose audit logger is shared: plan lists the two shared queues (and not the
/// node's), apply declares them, and a shared logger then finds exactly them (same
/// arguments, same bindings: plan --check stays clean while it consumes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_audit_logger_spec_plans_and_applies_the_shared_queues() {
    let vhost = vhost("cli-shared-audit").await;
    let url = vhost.url();
    let dir = mesh_testkit::TempDir::new("shared-audit-spec").unwrap();
    let spec = dir.join("mesh.toml");
    std::fs::write(
        &spec,
        "node = \"n1\"\n[[modules]]\nname = \"audit-logger\"\npatterns = [\"#\"]\nshared = true\n",
    )
    .unwrap();
    let spec = spec.to_str().unwrap().to_owned();
    let output = run(Some(&url), &["topology", "plan", "--json", "--spec", &spec]).await;
    assert_code(&output, 0);
    let plan = json(&output);
    let text = plan.to_string();
    assert!(text.contains("\"shared.audit-logger.events\""), "{text}");
    assert!(text.contains("\"shared.audit-logger.dead\""), "{text}");
    assert!(!text.contains("n1.audit-logger"), "{text}");
    // 6 exchanges, 2 queues, 2 bindings.
    assert_eq!(plan["differences"].as_array().unwrap().len(), 10, "{text}");
    let output = run(Some(&url), &["topology", "apply", "--spec", &spec]).await;
    assert_code(&output, 0);
    let queues = vhost.list_queues().await.unwrap();
    for name in ["shared.audit-logger.events", "shared.audit-logger.dead"] {
        assert!(queues.iter().any(|q| q.name == name), "{name}: {queues:?}");
    }

    // A shared logger declares the same queues and consumes them.
    let temp = mesh_testkit::TempStore::sqlite();
    let store = mesh_audit::Store::open(temp.url().parse().unwrap())
        .await
        .unwrap();
    let logger = mesh_audit::AuditLogger::new(
        store,
        mesh_audit::AuditOptions::new().node("n1").shared(true),
    );
    let transport = transport(options(&vhost)).await;
    let shutdown = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn({
        let (logger, transport, shutdown) = (logger.clone(), transport.clone(), shutdown.clone());
        async move { logger.run(&*transport, &shutdown).await }
    });
    mesh_testkit::eventually(
        std::time::Duration::from_secs(60),
        "the shared logger consuming",
        || {
            let logger = logger.clone();
            async move { logger.is_consuming().then_some(()) }
        },
    )
    .await;
    let output = run(
        Some(&url),
        &["topology", "plan", "--check", "--spec", &spec],
    )
    .await;
    assert_code(&output, 0);
    shutdown.cancel();
    running.await.unwrap().unwrap();
    transport.close().await;
    vhost.delete().await.unwrap();
}

/// A module that forwards scheduled events (`forward_scheduled = true`): plan wants its
/// schedule queue and hops exactly as its bus declares them (clean after the bus declared
/// them itself), lists each as missing on a fresh vhost, and apply declares them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schedule_queue_and_hops_of_a_spec_are_what_a_forwarding_bus_declares() {
    let vhost = vhost("cli-schedule-plan").await;
    let bus = Bus::builder()
        .node(crate::NODE)
        .module("umami")
        .announce(false)
        .forward_scheduled(true)
        .start(transport(options(&vhost)).await)
        .await
        .expect("umami forwards scheduled events");
    let dir = mesh_testkit::TempDir::new("schedule-spec").unwrap();
    let spec = dir.join("mesh.toml");
    std::fs::write(
        &spec,
        "[[modules]]\nname = \"umami\"\nforward_scheduled = true\n",
    )
    .unwrap();
    let spec = spec.to_str().unwrap().to_owned();
    let plan = ["topology", "plan", "--json", "--check", "--spec", &spec];
    let output = run(Some(&vhost.url()), &plan).await;
    assert_code(&output, 0);
    assert_eq!(json(&output)["differences"], serde_json::json!([]));
    bus.close().await;

    let fresh = crate::vhost("cli-schedule-plan-fresh").await;
    let output = run(Some(&fresh.url()), &plan).await;
    assert_code(&output, 9);
    let differences = json(&output)["differences"].clone();
    let queues = [
        "scheduled.umami.events",
        "scheduled.umami.events.retry.1s",
        "scheduled.umami.events.retry.5s",
        "scheduled.umami.events.retry.30s",
        "scheduled.umami.events.retry.2m",
        "scheduled.umami.events.retry.10m",
    ];
    for queue in queues {
        let missing = |kind: &str| {
            differences
                .as_array()
                .unwrap()
                .iter()
                .any(|d| d["kind"] == kind && d["queue"] == queue)
        };
        assert!(missing("missing-queue"), "{queue}: {differences}");
        assert!(missing("missing-binding"), "{queue}: {differences}");
    }
    let output = run(Some(&fresh.url()), &["topology", "apply", "--spec", &spec]).await;
    assert_code(&output, 0);
    let output = run(Some(&fresh.url()), &plan).await;
    assert_code(&output, 0);
    fresh.delete().await.unwrap();
    vhost.delete().await.unwrap();
}
