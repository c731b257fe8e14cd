//! Replay: stored events go again into one consumer's queue, and only there.
//!
//! A module that joins late, or lost its own database, catches up from the audit store: the
//! events matching a query (a key pattern, a time range, a source) are published, oldest
//! first, through the default exchange straight into that module's queue
//! ([`Target::Queue`]), never to `mesh.events`, which would hand them to every consumer bound
//! to their keys (and to the audit loggers, which would store them again).
//!
//! # What a replayed event is
//!
//! The event as it was stored: its id, routing key, body and headers (`x-time`,
//! `x-causation-id` and the rest as emitted), persistent, with two of the runtime's headers
//! added: `x-mesh-replayed` (when it was replayed, so a handler can tell history from live
//! traffic, [`mesh_core::codec::replayed_at`]; the SDK's `Meta::replayed`, and
//! `Meta::redelivered` is true) and `x-mesh-user` (its original publisher, as on a re-driven
//! dead letter, for a consumer enforcing identity). Both are believed on a delivery through
//! the default exchange only; under the access plan no module may publish there, so a
//! module cannot fake a replay, nor a replay's publisher. The rest of mesh's bookkeeping
//! headers a stored event may carry are dropped, so the consumer starts afresh with its full
//! retry policy.
//!
//! A consumer deduplicating by event id drops a replayed event it already handled (the
//! point of dedup); one that lost its state handles it again, which is what replay is for.
//!
//! # Only to a consumer queue, at a bounded rate
//!
//! The target must be a mesh consumer queue, `<node>.<module>.events` or
//! `shared.<module>.events` ([`naming::is_consumer_queue`]); anything else fails with
//! [`ErrorKind::ForeignQueue`] before a thing is published. Publishes are mandatory, so a
//! queue that does not exist fails the replay (unroutable) instead of dropping events. A
//! rate ([`Replay::rate`]) paces the publishes so a large replay does not starve the
//! module's live traffic. The replay stops at the first event not confirmed: the report
//! says how many were and which one failed, so running it again `--since` that event's time
//! resumes it (at-least-once, as everywhere in mesh).

use mesh_core::text::EscapedDisplay;
use std::num::NonZeroU32;
use std::time::Duration;

use bytes::Bytes;
use mesh_core::{
    codec, naming, EventId, HeaderValue, Properties, PublishOptions, Target, Timestamp, Transport,
    WireMessage,
};
use tokio::time::Instant;
use tracing::{info, warn};

use crate::convert::headers_from_json;
use crate::error::{Error, ErrorKind};
use crate::record::{EventQuery, EventRecord};
use crate::store::Store;

/// How long one publish may wait for room and for its confirm.
const PUBLISH_DEADLINE: Duration = Duration::from_secs(30);
/// Events read, published and confirmed at a time.
const PAGE: usize = 500;

/// A replay: which stored events, into which consumer queue, how fast.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replay {
    query: EventQuery,
    queue: String,
    rate: Option<NonZeroU32>,
}

impl Replay {
    /// The events matching `query` (its pattern, source, node and time range; oldest first,
    /// at most its limit) into consumer queue `queue`, as fast as the broker confirms.
    pub fn new(query: EventQuery, queue: impl Into<String>) -> Replay {
        Replay {
            query,
            queue: queue.into(),
            rate: None,
        }
    }

    /// At most `per_second` events a second.
    pub fn rate(mut self, per_second: NonZeroU32) -> Self {
        self.rate = Some(per_second);
        self
    }

    /// The target queue.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// The target queue, checked: a mesh consumer queue, or [`ErrorKind::ForeignQueue`].
    fn target(&self) -> Result<&str, Error> {
        if naming::is_consumer_queue(&self.queue) {
            Ok(&self.queue)
        } else {
            Err(Error::new(
                ErrorKind::ForeignQueue,
                format!(
                    "cannot replay to `{}`: only to <node>.<module>.events or \
                     shared.<module>.events",
                    codec::quote(&self.queue)
                ),
            ))
        }
    }
}

/// What a replay did.
#[derive(Debug, Default)]
pub struct ReplayReport {
    /// Events published and confirmed, in order.
    pub replayed: u64,
    /// The last event confirmed, with its emit time.
    pub last: Option<(EventId, Timestamp)>,
    /// The first event not confirmed, with its emit time and why; the replay stopped there.
    pub failed: Option<(EventId, Timestamp, Error)>,
}

/// What a replay would do ([`Store::replay_plan`]): nothing published.
#[derive(Debug, Default)]
pub struct ReplayPlan {
    /// The target queue (checked to be a consumer queue; whether it exists is known only
    /// when publishing).
    pub queue: String,
    /// How many events would be replayed, by routing key, by key.
    pub by_key: Vec<(String, u64)>,
    /// How many in all (the query's limit applied).
    pub events: u64,
}

impl Store {
    /// Replays stored events into one consumer queue through `transport` (see the
    /// [module docs](crate::replay)).
    ///
    /// Fails before publishing anything for a target that is not a consumer queue
    /// ([`ErrorKind::ForeignQueue`]) or a database error; a publish that fails stops the
    /// replay and is reported in [`ReplayReport::failed`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops the replay; events published by then may or may not have
    /// been confirmed, and a later replay sends them again (at-least-once).
    pub async fn replay(
        &self,
        transport: &dyn Transport,
        replay: &Replay,
    ) -> Result<ReplayReport, Error> {
        let queue = replay.target()?.to_owned();
        let at = Timestamp::now().to_string();
        let mut report = ReplayReport::default();
        let mut pace = Pace::new(replay.rate);
        let mut remaining = replay.query.limit;
        let mut cursor = None;
        let mut more = remaining > 0;
        while more {
            let (found, next) = self
                .event_page(&replay.query, cursor.as_ref(), PAGE)
                .await?;
            more = next.is_some();
            cursor = next;
            let found: Vec<EventRecord> = found.into_iter().take(remaining).collect();
            remaining -= found.len();
            more &= remaining > 0;
            if !publish_page(transport, &queue, &at, found, &mut pace, &mut report).await {
                break;
            }
        }
        info!(
            queue = %EscapedDisplay(&queue),
            replayed = report.replayed,
            failed = report.failed.is_some(),
            "replay done"
        );
        Ok(report)
    }

    /// What [`replay`](Store::replay) would do: the checked target and how many events, by
    /// key. Publishes nothing, needs no transport.
    pub async fn replay_plan(&self, replay: &Replay) -> Result<ReplayPlan, Error> {
        let queue = replay.target()?.to_owned();
        let by_key = self.event_counts_by_key(&replay.query).await?;
        let total: u64 = by_key.iter().map(|(_, n)| n).sum();
        let events = total.min(u64::try_from(replay.query.limit).unwrap_or(u64::MAX));
        Ok(ReplayPlan {
            queue,
            by_key,
            events,
        })
    }
}

/// Publishes a page in order, waiting for each publish's turn under the rate, then awaits
/// the confirms in order. Returns whether the replay goes on (every event confirmed).
async fn publish_page(
    transport: &dyn Transport,
    queue: &str,
    at: &str,
    page: Vec<EventRecord>,
    pace: &mut Pace,
    report: &mut ReplayReport,
) -> bool {
    let mut pending = Vec::with_capacity(page.len());
    let mut failed = None;
    for record in page {
        pace.wait().await;
        let options = PublishOptions {
            target: Target::Queue(queue.to_owned()),
            // A queue that does not exist fails the replay; it never drops the event.
            mandatory: true,
            deadline: Some(PUBLISH_DEADLINE),
        };
        match transport
            .publish(replayed_message(&record, at), options)
            .await
        {
            Ok(confirm) => pending.push((record.id, record.time, confirm)),
            Err(e) => {
                failed = Some((
                    record.id,
                    record.time,
                    Error::transport(format!("replaying `{}` to `{queue}`", record.id), e),
                ));
                break;
            }
        }
    }
    for (id, time, confirm) in pending {
        if report.failed.is_some() {
            // Past the first failure: let the rest settle without counting them, so the
            // report's resume point is the first unconfirmed event.
            let _ = confirm.await;
            continue;
        }
        match confirm.await {
            Ok(()) => {
                report.replayed += 1;
                report.last = Some((id, time));
            }
            Err(e) => {
                warn!(%id, queue = %EscapedDisplay(&queue), error = %EscapedDisplay(&e), "replayed event not confirmed");
                report.failed = Some((
                    id,
                    time,
                    Error::transport(format!("replaying `{id}` to `{queue}`"), e),
                ));
            }
        }
    }
    if report.failed.is_none() {
        report.failed = failed;
    }
    report.failed.is_none()
}

/// The message a stored event is replayed as (see the [module docs](crate::replay)).
fn replayed_message(record: &EventRecord, at: &str) -> WireMessage {
    let mut headers = headers_from_json(&record.headers);
    headers.retain(|name, _| {
        !codec::is_mesh_header(name)
            && !name.eq_ignore_ascii_case(codec::BROKER_DEATH)
            && !name.eq_ignore_ascii_case(codec::DELIVERY_COUNT)
    });
    if let Some(user) = &record.publisher {
        headers.insert(codec::USER.to_owned(), HeaderValue::Str(user.clone()));
    }
    headers.insert(codec::REPLAYED.to_owned(), HeaderValue::Str(at.to_owned()));
    WireMessage {
        routing_key: record.routing_key.clone(),
        properties: Properties {
            content_type: Some(codec::CONTENT_TYPE_JSON.to_owned()),
            persistent: true,
            headers,
            ..Properties::default()
        },
        body: Bytes::from(record.body.clone()),
    }
}

/// Paces publishes at a rate: the n-th may go `n / rate` seconds after the first.
struct Pace {
    rate: Option<NonZeroU32>,
    start: Option<Instant>,
    sent: u64,
}

impl Pace {
    fn new(rate: Option<NonZeroU32>) -> Pace {
        Pace {
            rate,
            start: None,
            sent: 0,
        }
    }

    async fn wait(&mut self) {
        let Some(rate) = self.rate else {
            return;
        };
        let start = *self.start.get_or_insert_with(Instant::now);
        let due = start + Duration::from_secs_f64(self.sent as f64 / f64::from(rate.get()));
        self.sent += 1;
        tokio::time::sleep_until(due).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(headers: serde_json::Value, publisher: Option<&str>) -> EventRecord {
        EventRecord {
            id: "0190a1f2-0000-7000-8000-000000000001".parse().unwrap(),
            routing_key: "module.shop.order.placed".into(),
            source: "shop".into(),
            node: "n1".into(),
            time: Timestamp::now(),
            causation_id: None,
            schema: None,
            received_at: Timestamp::now(),
            headers,
            body: r#"{"order":7}"#.into(),
            publisher: publisher.map(str::to_owned),
        }
    }

    #[test]
    fn a_replayed_event_keeps_its_headers_and_carries_the_runtimes_marker() {
        let stored = record(
            json!({
                "x-event-id": "0190a1f2-0000-7000-8000-000000000001",
                "x-source": "shop",
                "x-custom": "kept",
                "x-mesh-attempts": 3,
                "X-Mesh-Replayed": "1970-01-01T00:00:00Z",
                "x-death": [],
                "x-delivery-count": 2
            }),
            Some("module.shop"),
        );
        let at = "2026-12-02T10:00:00Z";
        let out = replayed_message(&stored, at);
        let mut names: Vec<&str> = out.properties.headers.keys().map(String::as_str).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            vec![
                "x-custom",
                "x-event-id",
                "x-mesh-replayed",
                "x-mesh-user",
                "x-source"
            ]
        );
        assert_eq!(
            codec::replayed_at(&out.properties.headers).map(|t| t.to_string()),
            Some(Timestamp::parse(at).unwrap().to_string())
        );
        assert_eq!(codec::validated_user(&out), Some("module.shop"));
        assert_eq!(out.routing_key, "module.shop.order.placed");
        assert_eq!(&out.body[..], br#"{"order":7}"#);
        assert!(out.properties.persistent);
        // The replaying connection stamps its own user-id.
        assert_eq!(out.properties.user_id, None);
    }

    #[test]
    fn an_event_with_no_recorded_publisher_claims_none() {
        let out = replayed_message(&record(json!({}), None), "2026-12-02T10:00:00Z");
        assert_eq!(out.properties.headers.get(codec::USER), None);
    }

    #[test]
    fn only_a_consumer_queue_is_a_target() {
        for queue in ["n1.billing.events", "shared.billing.events"] {
            assert!(Replay::new(EventQuery::new(), queue).target().is_ok());
        }
        for queue in [
            "serve.billing.charge",
            "mesh.events.dead",
            "n1.billing.events.retry.1",
            "amq.gen-x",
            "",
            "n1.billing",
        ] {
            let error = Replay::new(EventQuery::new(), queue)
                .target()
                .expect_err(queue);
            assert_eq!(error.kind(), &ErrorKind::ForeignQueue, "{queue}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_pace_spreads_publishes_over_time() {
        let mut pace = Pace::new(NonZeroU32::new(100));
        let start = Instant::now();
        for _ in 0..201 {
            pace.wait().await;
        }
        // 201 publishes at 100/s: the last may go 2 s after the first, not before.
        assert_eq!(start.elapsed(), Duration::from_secs(2));
        let mut free = Pace::new(None);
        let start = Instant::now();
        for _ in 0..1000 {
            free.wait().await;
        }
        assert_eq!(start.elapsed(), Duration::ZERO);
    }
}
