//! Re-drive: a dead letter goes back to the queue of the consumer that gave up on it, and
//! only there.
//!
//! It is published through the default exchange straight into that queue
//! ([`Target::Queue`]), not to `mesh.events`, which would hand the event again to every
//! consumer bound to its key. It keeps its event id, routing key, body and headers, less the
//! dead-letter annotations and the attempt counter, so the consumer starts afresh with its
//! full retry policy. Once the broker confirmed the publish, the row is marked re-driven
//! (time, and one more in its count); a dead letter whose publish failed stays as it was.
//!
//! # Only to a consumer queue
//!
//! The queue comes from the dead letter's `x-mesh-dead-queue` header, which anyone able to
//! publish to `mesh.events.dead` can write. So a dead letter is re-driven only to a mesh
//! consumer queue, `<node>.<module>.events` or `shared.<module>.events`
//! ([`naming::is_consumer_queue`]), never to a serve queue, a retry queue, one of mesh's own
//! queues or any other name: such a dead letter fails with [`ErrorKind::ForeignQueue`] and
//! nothing is published. The publish is mandatory, so a consumer queue that does not exist
//! fails too (unroutable) instead of dropping the message.
//!
//! # Who owns the re-drive state
//!
//! The store does. A dead letter's id is a UUID v5 of its content, so every logger writing
//! one database records it as one row, and a re-drive marks that row for all of them. Loggers
//! with separate databases each hold their own row and their own mark: re-drive from one of
//! them; a second re-drive of the same dead letter from another store sends it again (the
//! consumer sees it as a redelivery: at-least-once, as everywhere in mesh).
//!
//! # Only what can be believed
//!
//! A dead letter whose claims failed the provenance check of a logger enforcing identity
//! ([`DeadLetterRecord::untrusted`]: its publisher is not the owner of the queue it names)
//! is refused with [`ErrorKind::Untrusted`], nothing published, unless the re-drive asks for
//! it with [`RedriveOptions::strip_untrusted_claims`]: then it goes with every `x-mesh-*`
//! header removed, so its consumer believes nothing it claimed (with identity enforced, an
//! event arriving with the operator's `user-id` and no `x-mesh-user` is refused as forged
//! unless its key is the operator's).
//!
//! A dead letter re-driven before is not sent again by the bulk forms (which take only those
//! not re-driven yet), nor when named by id ([`Redrive::One`] fails with
//! [`ErrorKind::AlreadyRedriven`]), unless a second re-drive is asked for as such
//! ([`Redrive::Again`], or [`RedriveOptions::again`] for any form); each re-drive adds one to
//! the row's count.
//!
//! A large set goes in batches: [`Redrive::Matching`] with a limit, each batch's query
//! [`after`](DeadLetterQuery::after) the last dead letter of the one before
//! ([`RedriveReport::last`]), so a dead letter refused or failed is not tried again and none
//! is skipped.

use mesh_core::text::EscapedDisplay;
use std::time::Duration;

use mesh_core::{
    codec, naming, HeaderValue, Properties, PublishOptions, Target, Timestamp, Transport,
    WireMessage,
};
use tracing::{info, warn};

use crate::convert::headers_from_json;
use crate::error::{Error, ErrorKind};
use crate::record::{DeadLetterId, DeadLetterQuery, DeadLetterRecord, Order};
use crate::store::Store;

/// How long one publish may wait for room and for its confirm.
const PUBLISH_DEADLINE: Duration = Duration::from_secs(30);
/// Dead letters published before their confirms are awaited and their rows marked.
const PAGE: usize = 200;

/// The headers a re-driven message drops: the dead-letter annotations (mesh's and the
/// broker's) and the retry ladder's attempt counter.
const DROPPED_HEADERS: [&str; 8] = [
    codec::ATTEMPTS,
    codec::DEAD_REASON,
    codec::DEAD_ATTEMPTS,
    codec::DEAD_ERROR,
    codec::DEAD_QUEUE,
    codec::DEAD_TIME,
    codec::DEAD_KEY,
    codec::BROKER_DEATH,
];

/// How to re-drive.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedriveOptions {
    /// Re-drive untrusted dead letters too ([`DeadLetterRecord::untrusted`]), each with
    /// every `x-mesh-*` header removed (default false: they are refused with
    /// [`ErrorKind::Untrusted`]).
    pub strip_untrusted_claims: bool,
    /// Re-drive those re-driven before too (default false: [`Redrive::One`] fails with
    /// [`ErrorKind::AlreadyRedriven`] and the bulk forms take only those not re-driven yet,
    /// unless their query says otherwise). Each is handed to its consumer once more.
    pub again: bool,
}

impl RedriveOptions {
    /// The default: untrusted dead letters refused.
    pub fn new() -> RedriveOptions {
        RedriveOptions::default()
    }

    /// Whether untrusted dead letters are re-driven with their claims stripped.
    pub fn strip_untrusted_claims(mut self, yes: bool) -> RedriveOptions {
        self.strip_untrusted_claims = yes;
        self
    }

    /// Whether dead letters re-driven before go again ([`RedriveOptions::again`]).
    pub fn again(mut self, yes: bool) -> RedriveOptions {
        self.again = yes;
        self
    }
}

/// Which dead letters to re-drive.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Redrive {
    /// This one, unless it was re-driven before: then it fails with
    /// [`ErrorKind::AlreadyRedriven`] and nothing is published.
    One(DeadLetterId),
    /// This one, whether or not it was re-driven before (a second re-drive is asked for).
    Again(DeadLetterId),
    /// Those matching the query, at most its limit, oldest first. Unless the query says
    /// otherwise ([`DeadLetterQuery::redriven`]), only those not re-driven yet.
    Matching(DeadLetterQuery),
    /// Every dead letter not re-driven yet.
    All,
}

/// What a re-drive did.
#[derive(Debug, Default)]
pub struct RedriveReport {
    /// Re-driven and marked, in order.
    pub redriven: Vec<DeadLetterId>,
    /// Not re-driven, each with why: no failing queue recorded
    /// ([`ErrorKind::NotRedrivable`]), not a consumer queue ([`ErrorKind::ForeignQueue`]),
    /// re-driven before ([`ErrorKind::AlreadyRedriven`]), unroutable or not confirmed
    /// ([`ErrorKind::Transport`]).
    pub failed: Vec<(DeadLetterId, Error)>,
    /// The last dead letter the re-drive went through (re-driven or not), as the time it was
    /// set aside and its id: where a re-drive of the same query in batches goes on
    /// ([`DeadLetterQuery::after`]).
    pub last: Option<(Timestamp, DeadLetterId)>,
}

/// What a re-drive would do ([`Store::redrive_plan`]): nothing published, nothing marked.
#[derive(Debug, Default)]
pub struct RedrivePlan {
    /// Would be published, each to this queue, in order. (Whether the queue exists is
    /// known only when publishing.)
    pub redrive: Vec<(DeadLetterId, String)>,
    /// Would be refused, each with why ([`ErrorKind::NotRedrivable`],
    /// [`ErrorKind::ForeignQueue`], or [`ErrorKind::AlreadyRedriven`] for a
    /// [`Redrive::One`] re-driven before).
    pub refused: Vec<(DeadLetterId, Error)>,
}

/// Where a page of dead letters goes: published, or only planned.
enum Sink<'a> {
    Publish {
        transport: &'a dyn Transport,
        report: &'a mut RedriveReport,
        options: RedriveOptions,
    },
    Plan(&'a mut RedrivePlan, RedriveOptions),
}

impl Sink<'_> {
    fn options(&self) -> RedriveOptions {
        match self {
            Sink::Publish { options, .. } | Sink::Plan(_, options) => *options,
        }
    }

    /// Records a dead letter that is not (or would not be) re-driven, with why.
    fn refuse(&mut self, id: DeadLetterId, error: Error) {
        match self {
            Sink::Publish { report, .. } => report.failed.push((id, error)),
            Sink::Plan(plan, _) => plan.refused.push((id, error)),
        }
    }
}

type Page = Vec<(DeadLetterRecord, Option<String>, Option<i64>)>;

impl Store {
    /// Re-drives dead letters through `transport` (see the [module docs](crate::redrive)).
    ///
    /// [`Redrive::One`] fails with [`ErrorKind::NotFound`] for an unknown id and with the
    /// dead letter's own error when it could not be re-driven; sets report failures per
    /// dead letter.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave dead letters published but not marked: a later
    /// re-drive sends them again, which the consumer sees as a redelivery (at-least-once).
    pub async fn redrive(
        &self,
        transport: &dyn Transport,
        which: Redrive,
    ) -> Result<RedriveReport, Error> {
        self.redrive_with(transport, which, RedriveOptions::new())
            .await
    }

    /// [`redrive`](Store::redrive) with `options` (untrusted dead letters with their claims
    /// stripped, when asked for).
    pub async fn redrive_with(
        &self,
        transport: &dyn Transport,
        which: Redrive,
        options: RedriveOptions,
    ) -> Result<RedriveReport, Error> {
        let mut report = RedriveReport::default();
        let one = matches!(which, Redrive::One(_) | Redrive::Again(_));
        self.redrive_into(
            which,
            &mut Sink::Publish {
                transport,
                report: &mut report,
                options,
            },
        )
        .await?;
        if one {
            if let Some((_, error)) = report.failed.pop() {
                return Err(error);
            }
        }
        info!(
            redriven = report.redriven.len(),
            failed = report.failed.len(),
            "re-drive done"
        );
        Ok(report)
    }

    /// What [`redrive`](Store::redrive) would do with `which`, without a transport: each dead
    /// letter with the queue it would be published to, or why it would be refused. Publishes
    /// nothing, marks nothing.
    ///
    /// [`Redrive::One`] fails with [`ErrorKind::NotFound`] for an unknown id.
    pub async fn redrive_plan(&self, which: Redrive) -> Result<RedrivePlan, Error> {
        self.redrive_plan_with(which, RedriveOptions::new()).await
    }

    /// [`redrive_plan`](Store::redrive_plan) with `options`.
    pub async fn redrive_plan_with(
        &self,
        which: Redrive,
        options: RedriveOptions,
    ) -> Result<RedrivePlan, Error> {
        let mut plan = RedrivePlan::default();
        self.redrive_into(which, &mut Sink::Plan(&mut plan, options))
            .await?;
        Ok(plan)
    }

    async fn redrive_into(&self, which: Redrive, sink: &mut Sink<'_>) -> Result<(), Error> {
        let again = sink.options().again;
        let which = match which {
            Redrive::One(id) if again => Redrive::Again(id),
            which => which,
        };
        // Unless asked for again, the bulk forms take only those not re-driven yet.
        let pending = (!again).then_some(false);
        match which.clone() {
            Redrive::One(id) | Redrive::Again(id) => {
                let found = self.dead_letter_full(id).await?.ok_or_else(|| {
                    Error::new(ErrorKind::NotFound, format!("no dead letter `{id}`"))
                })?;
                if let (Redrive::One(_), Some(at)) = (&which, found.0.redriven_at) {
                    // A second re-drive hands the event to its consumer once more: only when
                    // asked for by name. The record of the first stays as it is.
                    let error = Error::new(
                        ErrorKind::AlreadyRedriven,
                        format!(
                            "dead letter `{id}` was re-driven {} time(s), last at {at}",
                            found.0.redrive_count
                        ),
                    );
                    sink.refuse(id, error);
                    return Ok(());
                }
                self.redrive_page(sink, vec![found]).await
            }
            Redrive::Matching(query) => {
                let query = DeadLetterQuery {
                    redriven: query.redriven.or(pending),
                    order: Order::Asc,
                    ..query
                };
                self.redrive_walk(sink, &query).await
            }
            Redrive::All => {
                let query = DeadLetterQuery {
                    redriven: pending,
                    ..DeadLetterQuery::new().order(Order::Asc).limit(usize::MAX)
                };
                self.redrive_walk(sink, &query).await
            }
        }
    }

    /// Walks the query's rows oldest first, page by page (a keyset walk, so rows marked on
    /// the way are not skipped or seen twice), until its limit.
    async fn redrive_walk(
        &self,
        sink: &mut Sink<'_>,
        query: &DeadLetterQuery,
    ) -> Result<(), Error> {
        let mut remaining = query.limit;
        let mut cursor: Option<DeadLetterRecord> = None;
        while remaining > 0 {
            let page = self
                .dead_letter_page(query, cursor.as_ref(), remaining.min(PAGE))
                .await?;
            let Some((last, _, _)) = page.last() else {
                break;
            };
            cursor = Some(last.clone());
            remaining -= page.len();
            self.redrive_page(sink, page).await?;
        }
        Ok(())
    }

    async fn redrive_page(&self, sink: &mut Sink<'_>, page: Page) -> Result<(), Error> {
        let options = sink.options();
        match sink {
            Sink::Publish {
                transport, report, ..
            } => self.publish_page(*transport, page, report, options).await,
            Sink::Plan(plan, _) => {
                for (record, _, _) in page {
                    match target_queue(&record, options) {
                        Ok(queue) => plan.redrive.push((record.id, queue)),
                        Err(error) => plan.refused.push((record.id, error)),
                    }
                }
                Ok(())
            }
        }
    }

    /// Publishes a page, awaits its confirms, and marks the confirmed rows.
    async fn publish_page(
        &self,
        transport: &dyn Transport,
        page: Page,
        report: &mut RedriveReport,
        options: RedriveOptions,
    ) -> Result<(), Error> {
        if let Some((last, _, _)) = page.last() {
            report.last = Some((last.dead_at, last.id));
        }
        let mut pending = Vec::with_capacity(page.len());
        for (record, message_id, timestamp) in page {
            let queue = match target_queue(&record, options) {
                Ok(queue) => queue,
                Err(error) => {
                    warn!(id = %record.id, error = %EscapedDisplay(&error), "dead letter not re-driven");
                    report.failed.push((record.id, error));
                    continue;
                }
            };
            let message = redriven_message(&record, message_id, timestamp);
            let options = PublishOptions {
                target: Target::Queue(queue.clone()),
                // The failing consumer's queue may be gone: then say so, do not drop it.
                mandatory: true,
                deadline: Some(PUBLISH_DEADLINE),
            };
            match transport.publish(message, options).await {
                Ok(confirm) => pending.push((record.id, queue, confirm)),
                Err(e) => report.failed.push((
                    record.id,
                    Error::transport(format!("re-driving `{}` to `{queue}`", record.id), e),
                )),
            }
        }
        let mut confirmed = Vec::with_capacity(pending.len());
        for (id, queue, confirm) in pending {
            match confirm.await {
                Ok(()) => confirmed.push(id),
                Err(e) => {
                    warn!(%id, queue = %EscapedDisplay(&queue), error = %EscapedDisplay(&e), "re-drive not confirmed");
                    report.failed.push((
                        id,
                        Error::transport(format!("re-driving `{id}` to `{queue}`"), e),
                    ));
                }
            }
        }
        self.mark_redriven(&confirmed).await?;
        report.redriven.extend(confirmed);
        Ok(())
    }
}

/// The queue a dead letter may be re-driven to: the consumer queue it names, or why not.
fn target_queue(record: &DeadLetterRecord, options: RedriveOptions) -> Result<String, Error> {
    let Some(queue) = &record.queue else {
        return Err(Error::new(
            ErrorKind::NotRedrivable,
            format!("dead letter `{}` names no failing queue", record.id),
        ));
    };
    if !naming::is_consumer_queue(queue) {
        return Err(Error::new(
            ErrorKind::ForeignQueue,
            format!(
                "dead letter `{}` names `{}`, which is not a mesh consumer queue \
                 (<node>.<module>.events or shared.<module>.events)",
                record.id,
                codec::quote(queue)
            ),
        ));
    }
    if record.untrusted && !options.strip_untrusted_claims {
        return Err(Error::new(
            ErrorKind::Untrusted,
            format!(
                "dead letter `{}` names `{}`, but was published by {}, not its owner: \
                 re-driven only with its x-mesh-* claims stripped, if asked for",
                record.id,
                codec::quote(queue),
                record.user_id.as_deref().map_or_else(
                    || "no validated user".to_owned(),
                    |u| format!("`{}`", codec::quote(u))
                )
            ),
        ));
    }
    Ok(queue.clone())
}

/// The message a dead letter is re-driven as: its key, body and headers as they were before
/// it died, persistent, with its properties, and the original publisher's user in
/// `x-mesh-user`.
fn redriven_message(
    record: &DeadLetterRecord,
    message_id: Option<String>,
    timestamp: Option<i64>,
) -> WireMessage {
    let mut headers = headers_from_json(&record.headers);
    for name in DROPPED_HEADERS {
        headers.remove(name);
    }
    if record.untrusted {
        // Re-driven only as asked for: nothing it claimed goes along.
        headers.retain(|name, _| !codec::is_mesh_header(name));
    }
    // The re-driving connection stamps its own `user-id`: who published the original goes
    // along as `x-mesh-user`, believed on a delivery through the default exchange. A dead
    // letter mesh made carries it already; one the broker made (a delivery limit, an expiry)
    // still has the original's `user-id`, recorded as the dead letter's.
    if !headers.contains_key(codec::USER) && !record.untrusted {
        if let Some(user) = &record.user_id {
            headers.insert(codec::USER.to_owned(), HeaderValue::Str(user.clone()));
        }
    }
    WireMessage {
        routing_key: record.routing_key.clone(),
        properties: Properties {
            content_type: record.content_type.clone(),
            persistent: true,
            message_id,
            timestamp: timestamp.and_then(|t| u64::try_from(t).ok()),
            headers,
            ..Properties::default()
        },
        body: record.body.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mesh_core::{DeadLetterNote, DeadReason, Timestamp};

    #[test]
    fn a_redriven_message_has_no_dead_letter_annotations() {
        let mut message = WireMessage::new("module.a.b", &b"{}"[..]);
        message.properties.headers.insert(
            codec::EVENT_ID.into(),
            "0190a1f2-0000-7000-8000-000000000001".into(),
        );
        codec::set_attempts(&mut message, 3);
        codec::mark_dead(
            &mut message,
            &DeadLetterNote {
                reason: DeadReason::MaxAttempts,
                attempts: 4,
                last_error: Some("boom".into()),
                queue: "n.m.events".into(),
                time: Timestamp::now(),
            },
        );
        message
            .properties
            .headers
            .insert("x-custom".into(), HeaderValue::UInt(7));
        let row = crate::store::DeadRow::new(&message, &crate::store::now_text(), None);
        let record = DeadLetterRecord {
            id: DeadLetterId(uuid::Uuid::nil()),
            event_id: None,
            routing_key: row.routing_key.clone(),
            reason: None,
            attempts: 0,
            last_error: None,
            queue: row.queue.clone(),
            dead_at: Timestamp::now(),
            received_at: Timestamp::now(),
            content_type: Some("application/json".into()),
            headers: serde_json::from_str(&row.headers).unwrap(),
            body: message.body.clone(),
            redriven_at: None,
            redrive_count: 0,
            user_id: Some("module.a".into()),
            untrusted: false,
        };
        let out = redriven_message(&record, Some("m".into()), Some(5));
        let names: Vec<&str> = out.properties.headers.keys().map(String::as_str).collect();
        assert_eq!(names, vec!["x-custom", "x-event-id", "x-mesh-user"]);
        // A dead letter with no `x-mesh-user` (the broker's own) names its original
        // publisher in its `user-id`.
        assert_eq!(
            out.header(codec::USER),
            Some(&HeaderValue::Str("module.a".into()))
        );
        assert_eq!(out.routing_key, "module.a.b");
        assert!(out.properties.persistent);
        assert_eq!(out.properties.timestamp, Some(5));
        // The dead letter's recorded publisher is not claimed: the re-driving connection
        // stamps its own `user-id`.
        assert_eq!(out.properties.user_id, None);

        // A dead letter mesh made carries the original's user already: it wins over the
        // dead letter's own `user-id` (the consumer that gave up).
        let mut record = record;
        record.headers["x-mesh-user"] = serde_json::json!("module.origin");
        let out = redriven_message(&record, None, None);
        assert_eq!(
            codec::validated_user(&out),
            Some("module.origin"),
            "{:?}",
            out.properties.headers
        );

        // An untrusted one is refused unless asked for, and then goes without any claim.
        record.untrusted = true;
        record.queue = Some("n.m.events".into());
        let refused = target_queue(&record, RedriveOptions::new()).unwrap_err();
        assert_eq!(refused.kind(), &ErrorKind::Untrusted);
        assert_eq!(
            target_queue(&record, RedriveOptions::new().strip_untrusted_claims(true)).unwrap(),
            "n.m.events"
        );
        let out = redriven_message(&record, None, None);
        assert!(
            !out.properties
                .headers
                .keys()
                .any(|name| codec::is_mesh_header(name)),
            "{:?}",
            out.properties.headers
        );
        assert_eq!(codec::validated_user(&out), None);
    }
}
