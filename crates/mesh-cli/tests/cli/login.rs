//! A refused login (wrong password, unknown user) and a refused vhost each have their own
//! message and exit code, at once: the client announces `authentication_failure_close`, so
//! the broker answers with its 403 instead of closing the socket after a delay.

use std::time::{Duration, Instant};

use mesh::amqp::management::ManagementClient;

use crate::{assert_code, options, run, stderr, vhost};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_login_and_an_unknown_vhost_have_codes_of_their_own() {
    let mut vhost = vhost("cli-login").await;
    let management =
        mesh::amqp::management_options(&options(&vhost)).expect("the vhost's management API");
    let management = ManagementClient::new(&management).expect("a management client");
    let user = format!("{}-user", vhost.name());
    management
        .put_user(&user, "right", &[])
        .await
        .expect("the user created");
    vhost.own_user(user.clone());
    management
        .put_permissions(vhost.name(), &user, ".*", ".*", ".*")
        .await
        .expect("the user's permissions");
    let nobody = format!("{}-nobody", vhost.name());

    for (name, password) in [(&user, "Qz7-not-it"), (&nobody, "right")] {
        let started = Instant::now();
        let output = run(
            Some(&vhost.url_as(name, password)),
            &["emit", "module.umami.site.created"],
        )
        .await;
        let took = started.elapsed();
        println!("{name}: login refused in {took:?}");
        assert_code(&output, 12);
        let err = stderr(&output);
        assert!(
            err.contains(&format!("refused the login of user `{name}`"))
                && err.contains(vhost.name()),
            "names the user and vhost: {err}"
        );
        assert!(!err.contains(password), "{err}");
        assert!(!err.contains("Connection reset"), "{err}");
        // At once (tens of milliseconds measured), not the broker's ~3 s delay for clients
        // without the capability; generous for a loaded machine.
        assert!(took < Duration::from_secs(5), "{took:?}");
    }

    let missing = format!("{}-missing", vhost.name());
    let output = run(
        Some(&vhost.url().replace(vhost.name(), &missing)),
        &["emit", "module.umami.site.created", "--json"],
    )
    .await;
    assert_code(&output, 13);
    let err: serde_json::Value =
        serde_json::from_str(stderr(&output).trim()).expect("one JSON error");
    assert_eq!(err["kind"], "vhost-refused", "{err}");
    let text = err["error"].as_str().unwrap_or_default();
    assert!(
        text.contains(&format!("refused vhost `{missing}`")),
        "{text}"
    );

    vhost
        .delete()
        .await
        .expect("the vhost and its user deleted");
}
