//! Certificate logins from the command line, on a private node (users are global to a
//! broker) with a TLS listener requiring a client certificate and `EXTERNAL` offered
//! (`rabbitmq_auth_mechanism_ssl`, users named by the certificate's common name): `mesh
//! access apply` creates the spec's certificate user without a password, `mesh emit`
//! connects with the certificate alone, and the certificate speaks only as its user.

// Helpers outside `#[test]` functions unwrap too: this whole file is a test.
#![allow(clippy::unwrap_used)]

use mesh::amqp::management::{ManagementClient, ManagementOptions};
use mesh_testkit::{eventually, NodeOptions, PrivateNode, TestPki, TlsListener};

use crate::access_drift::variable;
use crate::{assert_code, finish, json, mesh, run, stderr, stdout, tail, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mesh_access_makes_a_certificate_user_and_mesh_emit_logs_in_with_the_certificate() {
    let pki = TestPki::generate("cli-x509").unwrap();
    let server = pki.server("rabbit", &["localhost", "127.0.0.1"]).unwrap();
    let umami_cert = pki.client("module.umami").unwrap();
    let node = PrivateNode::start(
        NodeOptions::default()
            .management(true)
            .certificate_login(true)
            .tls(TlsListener {
                ca_file: pki.ca_file().to_owned(),
                server_cert: server.cert,
                server_key: server.key,
                require_client_cert: true,
            }),
    )
    .await
    .expect("a private RabbitMQ node with TLS, EXTERNAL and management");
    let management_url = format!("http://127.0.0.1:{}", node.management_port().unwrap());
    let dir = std::env::temp_dir().join(format!("mesh-cli-x509-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let spec = dir.join("mesh.toml");
    std::fs::write(
        &spec,
        "node = \"n1\"\n[access]\nnode_user = false\n\
         [[modules]]\nname = \"umami\"\nauth = \"certificate\"\n",
    )
    .unwrap();
    let admin = |command: &'static str, args: &'static [&'static str]| {
        let mut child = mesh(Some(&node.url()));
        child
            .arg(command)
            .args(args)
            .arg("--spec")
            .arg(&spec)
            .arg("--management-url")
            .arg(&management_url)
            // Only the operator has a password; umami needs none.
            .env(variable("operator"), "0perator-pw");
        async move { finish(child.spawn().expect("mesh starts")).await }
    };

    // The management listener may come up a moment after the node reports booted.
    eventually(WAIT, "access apply succeeds", || async {
        let output = admin("access", &["apply"]).await;
        if output.status.code() != Some(0) {
            eprintln!("{}{}", stdout(&output), stderr(&output));
        }
        (output.status.code() == Some(0)).then_some(())
    })
    .await;
    assert_code(&admin("topology", &["apply"]).await, 0);
    assert_code(&admin("access", &["plan", "--check"]).await, 0);
    let api = ManagementClient::new(
        &ManagementOptions::new(management_url.clone()).credentials("guest", "guest"),
    )
    .unwrap();
    let umami = api.user("module.umami").await.unwrap();
    assert!(
        umami.password_hash.is_empty(),
        "module.umami has no password"
    );

    // A password given to it by hand is drift.
    api.put_user("module.umami", "by-hand", &[]).await.unwrap();
    let output = admin("access", &["plan", "--check"]).await;
    assert_code(&output, 9);
    assert!(
        stdout(&output).contains("user module.umami has a password, wants none"),
        "{}",
        stdout(&output)
    );
    assert_code(&admin("access", &["apply"]).await, 0);
    assert!(api
        .user("module.umami")
        .await
        .unwrap()
        .password_hash
        .is_empty());

    // `mesh emit` with umami's certificate alone (no password anywhere).
    let url = format!(
        "amqps://module.umami@127.0.0.1:{}/%2F?auth_mechanism=external&cacertfile={}&certfile={}&keyfile={}",
        node.tls_port().unwrap(),
        pki.ca_file().display(),
        umami_cert.cert.display(),
        umami_cert.key.display()
    );
    let (tail, _errors) = tail(&node.url(), "module.umami.#", &["--count", "1", "--json"]).await;
    let emitted = run(
        Some(&url),
        &[
            "emit",
            "module.umami.site.created",
            "--data",
            r#"{"site":"x509"}"#,
        ],
    )
    .await;
    assert_code(&emitted, 0);
    let id = stdout(&emitted).trim().to_owned();
    let output = finish(tail).await;
    assert_code(&output, 0);
    let event = json(&output);
    assert_eq!(event["id"], id.as_str());

    // umami's certificate may not emit billing's key: forbidden (exit 10).
    let refused = run(
        Some(&url),
        &["emit", "module.billing.invoice.paid", "--data", "{}"],
    )
    .await;
    assert_code(&refused, 10);
    std::fs::remove_dir_all(&dir).unwrap();
}
