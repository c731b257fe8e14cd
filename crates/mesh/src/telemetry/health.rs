//! The health gauges of a bus, set from its transport's health at each scrape.

use super::names;
use crate::bus::Bus;

/// Sets the health gauges of `bus` from its transport's health now.
pub fn record_health(bus: &Bus) {
    let health = bus.health();
    let ready = bus.is_ready();
    let node = bus.node().to_string();
    let name = bus.identity().owner(bus.node()).to_string();
    let gauge = |metric: &'static str, value: f64| {
        metrics::gauge!(metric, "node" => node.clone(), "bus" => name.clone()).set(value);
    };
    gauge(names::CONSUMERS_EXPECTED, health.consumers_expected as f64);
    gauge(names::CONSUMERS_ATTACHED, health.consumers_attached as f64);
    gauge(names::CONNECTED, f64::from(u8::from(health.connected)));
    gauge(names::BLOCKED, f64::from(u8::from(health.blocked)));
    gauge(names::READY, f64::from(u8::from(ready)));
    let stats = bus.transport_stats();
    gauge(names::UNCONFIRMED, stats.unconfirmed as f64);
    gauge(names::UNCONFIRMED_BYTES, stats.unconfirmed_bytes as f64);
    let counter = |metric: &'static str, value: u64| {
        metrics::counter!(metric, "node" => node.clone(), "bus" => name.clone()).absolute(value);
    };
    counter(names::RECONNECTS, stats.reconnects);
    counter(names::RESENT, stats.resent);
    counter(names::REATTACHED, stats.reattached);
    counter(names::LATE_REPLIES, stats.late_replies);
    metrics::gauge!(names::BLOCKED_SECONDS, "node" => node.clone(), "bus" => name.clone())
        .set(stats.blocked_time.as_secs_f64());
}
