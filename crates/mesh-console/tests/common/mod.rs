//! The console served on an ephemeral port over a seeded store, an HTTP client, and a
//! headless browser ([`browser`]).
#![allow(dead_code)]

pub(crate) mod browser;

use std::collections::HashSet;
use std::net::SocketAddr;

use bytes::Bytes;
use mesh_audit::{DeadLetterQuery, Store, StoreOptions};
use mesh_console::Console;
use mesh_core::{
    codec, DeadLetterNote, DeadReason, Envelope, EventId, Headers, RoutingKey, Timestamp,
    WireMessage,
};
use mesh_testkit::TempStore;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub(crate) const TOKEN: &str = "s3cret-operator-token-0123";

/// A console serving in a task until dropped.
pub(crate) struct Served {
    pub(crate) base: String,
    pub(crate) addr: SocketAddr,
    shutdown: CancellationToken,
    task: JoinHandle<std::io::Result<()>>,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.shutdown.cancel();
        self.task.abort();
    }
}

pub(crate) async fn serve(console: Console) -> anyhow::Result<Served> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(mesh_console::serve(listener, console, shutdown.clone()));
    Ok(Served {
        base: format!("http://{addr}"),
        addr,
        shutdown,
        task,
    })
}

pub(crate) fn client() -> reqwest::Client {
    // Already installed by an earlier client of this test binary, or now.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("a client")
}

pub(crate) async fn get(url: &str) -> anyhow::Result<(u16, String)> {
    let response = client().get(url).send().await?;
    let status = response.status().as_u16();
    Ok((status, response.text().await?))
}

/// A form POST with `headers`.
pub(crate) async fn post(
    url: &str,
    form: &[(&str, &str)],
    headers: &[(&str, &str)],
) -> anyhow::Result<(u16, String)> {
    let mut body = form_urlencoded::Serializer::new(String::new());
    for (k, v) in form {
        body.append_pair(k, v);
    }
    let mut request = client()
        .post(url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body.finish());
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let response = request.send().await?;
    let status = response.status().as_u16();
    Ok((status, response.text().await?))
}

pub(crate) fn at(seconds_ago: u64) -> Timestamp {
    Timestamp::now()
        .checked_sub(std::time::Duration::from_secs(seconds_ago))
        .expect("a valid time")
}

pub(crate) fn event(
    key: &str,
    source: &str,
    time: Timestamp,
    cause: Option<EventId>,
    body: &'static [u8],
) -> (EventId, WireMessage) {
    event_of(key, source, time, cause, Bytes::from_static(body))
}

/// As [`event`], with a body made at run time.
pub(crate) fn event_of(
    key: &str,
    source: &str,
    time: Timestamp,
    cause: Option<EventId>,
    body: Bytes,
) -> (EventId, WireMessage) {
    let id = EventId::new();
    let message = codec::encode(&Envelope {
        id,
        key: RoutingKey::parse(key).expect("a valid key"),
        source: source.to_owned(),
        node: "n1".to_owned(),
        time,
        causation_id: cause.map(|c| c.to_string()),
        schema: None,
        extra_headers: Headers::new(),
        body,
    });
    (id, message)
}

pub(crate) fn dead(message: &WireMessage, reason: DeadReason, queue: &str) -> WireMessage {
    let mut copy = message.clone();
    codec::mark_dead(
        &mut copy,
        &DeadLetterNote {
            reason,
            attempts: 3,
            last_error: Some("handler failed: <b>upstream</b> down".into()),
            queue: queue.into(),
            time: Timestamp::now(),
        },
    );
    copy
}

/// What the seeded store holds.
pub(crate) struct Seeded {
    pub(crate) temp: TempStore,
    pub(crate) store: Store,
    /// Every event: (id, key, source).
    pub(crate) events: Vec<(EventId, String, String)>,
    /// A chain: shop's order → billing's invoice → mailer's mail.
    pub(crate) chain: [EventId; 3],
    /// An event whose body is markup.
    pub(crate) hostile: EventId,
}

pub(crate) const KEYS: [(&str, &str); 4] = [
    ("module.billing.invoice.paid", "billing"),
    ("module.shop.order.placed", "shop"),
    ("module.shop.order.cancelled", "shop"),
    ("module.mailer.mail.sent", "mailer"),
];

/// 60 events over the last half hour (some sharing a time, to page through ties), a
/// causation chain, one event with markup in its body, and dead letters: 3 of billing's
/// (permanent), 2 of mailer's (max-attempts).
pub(crate) async fn seeded() -> anyhow::Result<Seeded> {
    let temp = TempStore::sqlite();
    let store = Store::open(temp.url().parse::<StoreOptions>()?).await?;
    let mut messages = Vec::new();
    let mut events = Vec::new();
    for n in 0..60u64 {
        let (key, source) = KEYS[(n % 4) as usize];
        // Three events a second: ties the keyset cursor must break by id.
        let (id, message) = event(key, source, at(1800 - n / 3), None, br#"{"n": 1}"#);
        events.push((id, key.to_owned(), source.to_owned()));
        messages.push(message);
    }
    let (order, m1) = event("module.shop.order.placed", "shop", at(600), None, b"{}");
    let (invoice, m2) = event(
        "module.billing.invoice.paid",
        "billing",
        at(599),
        Some(order),
        b"{}",
    );
    let (mail, m3) = event(
        "module.mailer.mail.sent",
        "mailer",
        at(598),
        Some(invoice),
        b"{}",
    );
    let (hostile, m4) = event(
        "module.shop.order.placed",
        "shop",
        at(500),
        None,
        br#"{"note": "<script>alert(1)</script>"}"#,
    );
    for (id, key, source, m) in [
        (order, "module.shop.order.placed", "shop", m1),
        (invoice, "module.billing.invoice.paid", "billing", m2),
        (mail, "module.mailer.mail.sent", "mailer", m3),
        (hostile, "module.shop.order.placed", "shop", m4),
    ] {
        events.push((id, key.to_owned(), source.to_owned()));
        messages.push(m);
    }
    store.record_events(&messages).await?;
    let mut dead_letters = Vec::new();
    for m in &messages[..3] {
        dead_letters.push(dead(m, DeadReason::Permanent, "n1.billing.events"));
    }
    for m in &messages[3..5] {
        dead_letters.push(dead(m, DeadReason::MaxAttempts, "n1.mailer.events"));
    }
    store.record_dead_letters(&dead_letters).await?;
    assert_eq!(
        store.count_dead_letters(&DeadLetterQuery::new()).await?,
        5,
        "the seeded dead letters"
    );
    Ok(Seeded {
        temp,
        store,
        events,
        chain: [order, invoice, mail],
        hostile,
    })
}

/// The ids a page links to with `class="<class>"` (rows of a list).
pub(crate) fn linked(html: &str, class: &str, prefix: &str) -> Vec<String> {
    let marker = format!("class=\"{class}\" href=\"{prefix}");
    html.match_indices(&marker)
        .map(|(at, _)| {
            let rest = &html[at + marker.len()..];
            rest[..rest.find('"').unwrap_or(rest.len())].to_owned()
        })
        .collect()
}

pub(crate) fn unique(ids: &[String]) -> bool {
    ids.iter().collect::<HashSet<_>>().len() == ids.len()
}
