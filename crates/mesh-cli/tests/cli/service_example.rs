//! The `service` example's `billing.quote` answers the README's `mesh call` lines: its billing
//! module (the example's own code) serves on a vhost of the test's own, and the `mesh` binary
//! calls it as the README writes the call.

use std::sync::{Arc, OnceLock};

use crate::service_billing::billing;
use crate::{assert_code, options, run, stdout, transport, vhost};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_example_answers_the_readme_s_mesh_call() {
    let vhost = vhost("cli-service-example").await;
    let url = vhost.url();
    let started = Arc::new(OnceLock::new());
    let bus = billing(Arc::clone(&started))
        .start(transport(options(&vhost)).await)
        .await
        .unwrap();
    let _ = started.set(bus.clone());

    // README: `mesh call billing.quote --data '{"plan":"basic"}'   # 900`, and `pro` 2900.
    for (plan, cents) in [("basic", "900"), ("pro", "2900")] {
        let data = format!(r#"{{"plan":"{plan}"}}"#);
        let output = run(Some(&url), &["call", "billing.quote", "--data", &data]).await;
        assert_code(&output, 0);
        assert_eq!(stdout(&output).trim(), cents, "plan {plan}");
    }
    bus.close().await;
}
