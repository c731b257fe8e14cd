//! What a module's user needs to schedule and forward its own events (its schedule queue and
//! hops, declared by the operator) is granted, and nothing of another module's.

use super::*;

/// What the forwarder of `module` touches: its schedule queue and every hop.
fn schedule_queues(module: &str) -> Vec<String> {
    let queue = format!("scheduled.{module}.events");
    let mut out = vec![queue.clone()];
    for hop in ["1s", "5s", "30s", "2m", "10m"] {
        out.push(format!("{queue}.retry.{hop}"));
    }
    out
}

#[test]
fn a_module_schedules_and_forwards_only_its_own_events() {
    // `quiet` consumes nothing: it schedules and forwards all the same.
    let spec = spec().module(name("quiet"), []);
    let grants = grants(&spec);
    for module in ["umami", "quiet"] {
        let user = grant(&grants, &format!("module.{module}"));
        let own = schedule_queues(module);
        let own: Vec<&str> = own.iter().map(String::as_str).collect();
        let other = schedule_queues("billing");
        let other: Vec<&str> = other.iter().map(String::as_str).collect();
        // Consumed and bound (read, write on the queue), never declared: the operator does.
        for permission in [&user.permissions.read, &user.permissions.write] {
            matches(permission, &own, &other);
        }
        matches(&user.permissions.configure, &[], &own);
        // Scheduled (`emit_at`), sent down a hop and brought back through `mesh.retry`
        // under its own queues' names only.
        let retry = topic_of(user, "mesh.retry");
        matches(&retry.write, &own, &other);
        matches(&retry.read, &own, &other);
        // Emitted when due as its own event, and a forged copy dead-lettered under its own
        // queue's name.
        let own_key = format!("module.{module}.reminder.due");
        matches(
            &topic_of(user, "mesh.events").write,
            &[own_key.as_str()],
            &["module.billing.invoice.due"],
        );
        matches(&topic_of(user, "mesh.events.dead").write, &own[..1], &other);
    }
}
