//! The binaries over `amqps://`: `mesh emit`, `mesh tail` and the audit logger (`mesh audit
//! run`) against a private RabbitMQ node with a TLS listener (certificates of a throw-away
//! CA), and a CA the node's certificate does not chain to: exit 3, with the reason.
//!
//! One node for the whole file (a boot costs ~10 s), so the scenarios run in one test.

// Helpers outside `#[test]` functions unwrap too: this whole file is a test.
#![allow(clippy::unwrap_used)]

use mesh_testkit::{eventually, NodeOptions, PrivateNode, TestPki, TlsListener};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::audit::TempStore;
use crate::{assert_code, code, finish, json, mesh, run, stderr, stdout, tail, NODE, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emit_tail_and_the_audit_logger_work_over_amqps_and_a_wrong_ca_is_exit_3() {
    let pki = TestPki::generate("cli-tls").unwrap();
    let server = pki.server("rabbit", &["localhost", "127.0.0.1"]).unwrap();
    let node = PrivateNode::start(NodeOptions::default().tls(TlsListener {
        ca_file: pki.ca_file().to_owned(),
        server_cert: server.cert,
        server_key: server.key,
        require_client_cert: false,
    }))
    .await
    .expect("a private RabbitMQ node with a TLS listener");
    let port = node.tls_port().unwrap();
    let url = format!(
        "amqps://guest:guest@127.0.0.1:{port}/%2F?cacertfile={}",
        pki.ca_file().display()
    );

    // tail, then emit: the event comes through.
    let (tail, _errors) = tail(&url, "module.umami.#", &["--count", "1", "--json"]).await;
    let emitted = run(
        Some(&url),
        &[
            "emit",
            "module.umami.site.created",
            "--data",
            r#"{"site":"tls"}"#,
        ],
    )
    .await;
    assert_code(&emitted, 0);
    let id = stdout(&emitted).trim().to_owned();
    let output = finish(tail).await;
    assert_code(&output, 0);
    let event = json(&output);
    assert_eq!(event["id"], id.as_str());
    assert_eq!(event["body"], serde_json::json!({"site": "tls"}));

    // The audit logger records over TLS too.
    let store = TempStore::sqlite();
    let logger = mesh(Some(&url))
        .args(["audit", "run", "--store", store.url()])
        .spawn()
        .expect("mesh audit run starts");
    let queue = format!("{NODE}.audit-logger.events");
    eventually(WAIT, "the audit logger consuming over tls", || async {
        let queues = node.list_queues("/").await.ok()?;
        queues
            .iter()
            .any(|q| q.name == queue && q.consumers > 0)
            .then_some(())
    })
    .await;
    let emitted = run(
        Some(&url),
        &["emit", "module.umami.tick", "--count", "5", "--json"],
    )
    .await;
    assert_code(&emitted, 0);
    eventually(WAIT, "5 events in the audit store", || async {
        let output = run(
            Some(&url),
            &[
                "audit",
                "count",
                "--key",
                "module.umami.tick",
                "--json",
                "--store",
                store.url(),
            ],
        )
        .await;
        (code(&output) == 0 && json(&output)["events"] == 5).then_some(())
    })
    .await;
    let pid = logger.id().expect("the logger runs");
    kill(
        Pid::from_raw(i32::try_from(pid).expect("a pid")),
        Signal::SIGTERM,
    )
    .expect("SIGTERM");
    assert_code(&finish(logger).await, 0);

    // A CA the server's certificate does not chain to: unreachable, and why.
    let stranger = TestPki::generate("cli-stranger").unwrap();
    let wrong = format!(
        "amqps://guest:guest@127.0.0.1:{port}/%2F?cacertfile={}",
        stranger.ca_file().display()
    );
    let output = run(Some(&wrong), &["emit", "module.umami.tick"]).await;
    assert_code(&output, 3);
    let text = stderr(&output);
    assert!(
        text.contains("not signed by a trusted CA") && text.contains("tls"),
        "{text}"
    );
    let output = run(Some(&wrong), &["emit", "module.umami.tick", "--json"]).await;
    assert_code(&output, 3);
    let line: serde_json::Value = serde_json::from_str(stderr(&output).trim()).unwrap();
    assert_eq!(line["exit_code"], 3);
    assert_eq!(line["kind"], "unreachable");
    assert!(
        line["error"]
            .as_str()
            .is_some_and(|e| e.contains("not signed by a trusted CA")),
        "{line}"
    );
    // A missing CA file is a usage error naming the file, before any connection.
    let missing = format!("amqps://127.0.0.1:{port}/?cacertfile=/nonexistent/ca.pem");
    let output = run(Some(&missing), &["emit", "module.umami.tick"]).await;
    assert_code(&output, 2);
    assert!(
        stderr(&output).contains("/nonexistent/ca.pem"),
        "{}",
        stderr(&output)
    );
}

/// Every other TLS failure the connect can meet, through the binary: exit 3 with the reason,
/// well within the connect timeout; and mutual TLS with a client certificate works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tls_failure_is_exit_3_with_its_reason_and_mutual_tls_works() {
    let pki = TestPki::generate("cli-tls-failures").unwrap();
    let expired = pki
        .expired_server("old", &["localhost", "127.0.0.1"])
        .unwrap();
    let current = pki.server("rabbit", &["localhost", "127.0.0.1"]).unwrap();
    let client = pki.client("mesh-cli").unwrap();
    let (expired_node, mutual_node) = tokio::join!(
        PrivateNode::start(NodeOptions::default().tls(TlsListener {
            ca_file: pki.ca_file().to_owned(),
            server_cert: expired.cert,
            server_key: expired.key,
            require_client_cert: false,
        })),
        PrivateNode::start(NodeOptions::default().tls(TlsListener {
            ca_file: pki.ca_file().to_owned(),
            server_cert: current.cert,
            server_key: current.key,
            require_client_cert: true,
        })),
    );
    let expired_node = expired_node.expect("a private node with an expired certificate");
    let mutual_node = mutual_node.expect("a private node that requires client certificates");
    let ca = pki.ca_file().display().to_string();
    let mutual = |query: &str| {
        format!(
            "amqps://guest:guest@localhost:{}/%2F?cacertfile={ca}{query}",
            mutual_node.tls_port().unwrap()
        )
    };

    let cases = [
        (
            format!(
                "amqps://guest:guest@localhost:{}/%2F?cacertfile={ca}",
                expired_node.tls_port().unwrap()
            ),
            "has expired",
        ),
        (
            mutual("&server_name_indication=wrong.example"),
            "not valid for `wrong.example`",
        ),
        (mutual(""), "requires a client certificate"),
    ];
    for (url, reason) in &cases {
        let started = std::time::Instant::now();
        let output = run(
            Some(url),
            &["emit", "module.umami.tick", "--connect-timeout", "5s"],
        )
        .await;
        let took = started.elapsed();
        assert_code(&output, 3);
        let text = stderr(&output);
        assert!(text.contains(reason), "wanted `{reason}` in: {text}");
        // Far inside the 5 s connect timeout plus the binary's start (no hang, no retry loop).
        assert!(
            took < std::time::Duration::from_secs(15),
            "{reason}: {took:?}"
        );
    }

    // Mutual TLS with the client certificate the CA signed: the emit is confirmed.
    let with_cert = mutual(&format!(
        "&certfile={}&keyfile={}",
        client.cert.display(),
        client.key.display()
    ));
    let output = run(Some(&with_cert), &["emit", "module.umami.tick"]).await;
    assert_code(&output, 0);
    assert!(
        !stdout(&output).trim().is_empty(),
        "the event id is printed"
    );
}
