//! The management options every command honours: `topology` and `status` over HTTPS with a
//! CA of the test's own (a private node), plain HTTP to a remote-looking host refused, and
//! `mesh audit run --management-url` asking the given API for its queue's bindings.

use mesh_testkit::{eventually, free_port, NodeOptions, PrivateNode, RecordingServer, TestPki};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::audit::TempStore;
use crate::{assert_code, finish, json, mesh, run, stderr, stdout, vhost, NODE, WAIT};

#[tokio::test]
async fn topology_and_status_speak_https_with_the_given_ca() {
    let pki = TestPki::generate("cli-mgmt-https").unwrap();
    let server = pki.server("management", &["localhost"]).unwrap();
    let ssl_port = free_port();
    let node =
        PrivateNode::start(NodeOptions::default().management_tls(ssl_port, pki.ca_file(), &server))
            .await
            .expect("a private RabbitMQ node with management over TLS");
    let url = node.url();
    let management_url = format!("https://localhost:{ssl_port}");
    let ca = pki.ca_file().display().to_string();
    let with_ca = |command: &[&str]| {
        let mut args: Vec<String> = command.iter().map(|a| (*a).to_owned()).collect();
        args.extend([
            "--management-url".to_owned(),
            management_url.clone(),
            "--management-ca-file".to_owned(),
            ca.clone(),
        ]);
        args
    };

    // The TLS listener may come up a moment after the node reports booted.
    let show = with_ca(&[
        "topology",
        "show",
        "--module",
        "billing",
        "--pattern",
        "module.umami.#",
        "--json",
    ]);
    let output = eventually(WAIT, "topology show over https", || {
        let show = show.clone();
        let url = url.clone();
        async move {
            let args: Vec<&str> = show.iter().map(String::as_str).collect();
            let output = run(Some(&url), &args).await;
            (output.status.code() == Some(0)).then_some(output)
        }
    })
    .await;
    let shown = stdout(&output);
    assert!(shown.contains("mesh.events"), "{shown}");

    let status = with_ca(&["status", "--json"]);
    let args: Vec<&str> = status.iter().map(String::as_str).collect();
    let output = run(Some(&url), &args).await;
    assert_code(&output, 0);
    let status = json(&output);
    assert_eq!(status["connected"], true, "{status}");
    assert!(status["modules"].is_array(), "{status}");

    // Without the CA, the system's roots do not trust the test CA: unreachable (8).
    let output = run(
        Some(&url),
        &[
            "topology",
            "show",
            "--module",
            "billing",
            "--pattern",
            "module.umami.#",
            "--management-url",
            &management_url,
        ],
    )
    .await;
    assert_code(&output, 8);
    assert!(
        stderr(&output).contains("management API"),
        "{}",
        stderr(&output)
    );
}

#[tokio::test]
async fn plain_http_to_a_remote_host_is_refused_before_sending() {
    let output = run(
        Some("amqp://mesh:s3cret-pw@127.0.0.1:5672/%2F"),
        &[
            "topology",
            "show",
            "--module",
            "billing",
            "--pattern",
            "module.umami.#",
            "--management-url",
            "http://admin:other-pw@rabbit-management.example:15672",
        ],
    )
    .await;
    assert_code(&output, 2);
    let err = stderr(&output);
    assert!(
        err.contains("refusing to send credentials in clear"),
        "{err}"
    );
    assert!(
        err.contains("http://rabbit-management.example:15672"),
        "{err}"
    );
    assert!(
        !err.contains("s3cret") && !err.contains("other-pw"),
        "a credential was printed: {err}"
    );
}

#[tokio::test]
async fn audit_run_asks_the_given_management_api() {
    let vhost = vhost("cli-audit-mgmt").await;
    // A fake management API: answers `[]` and records each request's head before answering.
    let fake = RecordingServer::start("[]").await.expect("a fake API");
    let store = TempStore::sqlite();
    let management_url = format!("http://127.0.0.1:{}", fake.addr().port());
    let child = mesh(Some(&vhost.url()))
        .args([
            "audit",
            "run",
            "--store",
            store.url(),
            "--management-url",
            &management_url,
        ])
        .spawn()
        .expect("mesh audit run starts");
    let wanted = format!(
        "GET /api/queues/{}/{NODE}.audit-logger.events/bindings ",
        vhost.name()
    );
    eventually(WAIT, "the logger asking the fake API", || async {
        fake.heads()
            .iter()
            .any(|head| head.starts_with(&wanted))
            .then_some(())
    })
    .await;
    let pid = child.id().expect("the logger runs");
    kill(
        Pid::from_raw(i32::try_from(pid).expect("a pid")),
        Signal::SIGTERM,
    )
    .expect("SIGTERM");
    let output = finish(child).await;
    assert_code(&output, 0);
    vhost.delete().await.unwrap();
}
