//! `mesh-console-bench`: how fast the operator's console answers over a large audit store.
//!
//! Seeds a new PostgreSQL database (or a SQLite file) with `--events` events (default
//! 1,000,000) spread over the last `--hours` (default 24) and `--dead` dead letters (default
//! 10,000), through the store's own write path (so its rollups are kept as the audit logger
//! keeps them), serves the console over it on loopback, and times each page: `--requests`
//! GETs each (after one warm-up), reporting the median, p95 and the slowest, as a Markdown
//! table. Timings are reported, never asserted. The database is dropped at the end.
//!
//! ```text
//! cargo run --release -p mesh-bench --bin mesh-console-bench
//! cargo run --release -p mesh-bench --bin mesh-console-bench -- --sqlite --events 100000
//! ```

use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use clap::Parser;
use mesh::raw::{codec, DeadLetterNote, DeadReason, Envelope, EventId, Headers, RoutingKey};
use mesh::raw::{Timestamp, WireMessage};
use mesh_audit::{Store, StoreOptions};
use mesh_console::Console;
use mesh_testkit::TempStore;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Parser)]
#[command(about = "Times the console's pages over a large audit store")]
struct Args {
    /// Events to seed.
    #[arg(long, default_value = "1000000")]
    events: u64,
    /// Dead letters to seed.
    #[arg(long, default_value = "10000")]
    dead: u64,
    /// The hours before now the events are spread over.
    #[arg(long, default_value = "24")]
    hours: u64,
    /// Timed GETs per page.
    #[arg(long, default_value = "20")]
    requests: usize,
    /// A SQLite file instead of PostgreSQL.
    #[arg(long)]
    sqlite: bool,
}

/// Modules, each emitting [`KEYS_PER_MODULE`] keys.
const MODULES: u64 = 8;
const KEYS_PER_MODULE: u64 = 5;
const BATCH: usize = 2_000;

fn key(n: u64) -> (String, String) {
    let module = n % MODULES;
    let thing = (n / MODULES) % KEYS_PER_MODULE;
    (
        format!("module.m{module}.thing{thing}.done"),
        format!("m{module}"),
    )
}

/// The order number in event `n`'s body: a value in that body only.
fn order(n: u64) -> String {
    format!("ord-{n:08x}")
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?
        .block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let temp = if args.sqlite {
        TempStore::sqlite()
    } else {
        TempStore::postgres().await?
    };
    let store = Store::open(temp.url().parse::<StoreOptions>()?).await?;
    let started = Instant::now();
    let probes = seed(&store, &args).await?;
    eprintln!(
        "seeded {} events and {} dead letters in {:.1?}",
        args.events,
        args.dead,
        started.elapsed()
    );

    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(mesh_console::serve(
        listener,
        Console::new(store.clone()),
        shutdown.clone(),
    ));
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;

    let now = Timestamp::now();
    let ago = |hours: u64| {
        now.checked_sub(Duration::from_secs(hours * 3600))
            .unwrap_or(now)
            .to_string()
    };
    let (range_since, range_until) = (ago(12), {
        let t = now
            .checked_sub(Duration::from_secs(12 * 3600 - 600))
            .unwrap_or(now);
        t.to_string()
    });
    let encode = |pairs: &[(&str, &str)]| {
        form_urlencoded::Serializer::new(String::new())
            .extend_pairs(pairs)
            .finish()
    };
    // The 10th page of a prefix search (or its last, on a store too small for ten): follow
    // the "next" links of the pages before it.
    let mut deep = format!("/events?{}", encode(&[("key", "module.m3.#")]));
    let mut page_number = 1;
    while page_number < 10 {
        let html = client
            .get(format!("{base}{deep}"))
            .send()
            .await?
            .text()
            .await?;
        let Some(next) = html
            .split("rel=\"next\" href=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
        else {
            break;
        };
        deep = next.replace("&amp;", "&");
        page_number += 1;
    }
    let deep_name = format!("events, key prefix, page {page_number} (keyset)");
    let pages: Vec<(&str, String)> = vec![
        ("overview `/`", "/".to_owned()),
        ("events, newest first", "/events".to_owned()),
        (
            "events, key prefix `module.m3.#`",
            format!("/events?{}", encode(&[("key", "module.m3.#")])),
        ),
        (deep_name.as_str(), deep),
        (
            "events, exact key",
            format!("/events?{}", encode(&[("key", "module.m3.thing2.done")])),
        ),
        (
            "events, source",
            format!("/events?{}", encode(&[("source", "m5")])),
        ),
        (
            "events, 10 minutes 12 hours ago",
            format!(
                "/events?{}",
                encode(&[("since", &range_since), ("until", &range_until)])
            ),
        ),
        (
            "events, by id",
            format!("/events?{}", encode(&[("id", &probes.id.to_string())])),
        ),
        (
            "events, wildcard `*.*.thing2.#` (1 in 5 keys)",
            format!("/events?{}", encode(&[("key", "*.*.thing2.#")])),
        ),
        (
            "events, wildcard `*.*.nothing.#` matching none",
            format!("/events?{}", encode(&[("key", "*.*.nothing.#")])),
        ),
        (
            "events, body search: a value in one event's body",
            format!("/events?{}", encode(&[("body", &order(args.events / 3))])),
        ),
        (
            "events, body search and a key prefix",
            format!(
                "/events?{}",
                encode(&[("body", &order(args.events / 3)), ("key", "module.#")])
            ),
        ),
        (
            "events, newest first, a page nine tenths down (keyset)",
            format!("/events?{}", encode(&[("after", &probes.deep.to_string())])),
        ),
        (
            "an event, with its causation tree",
            format!("/events/{}", probes.caused),
        ),
        ("dead letters, grouped", "/dead".to_owned()),
        (
            "dead letters, a group's list",
            format!(
                "/dead?{}",
                encode(&[("queue", "n1.m2.events"), ("reason", "permanent")])
            ),
        ),
        ("system map, last day", "/map".to_owned()),
        (
            "contracts (the announcement keys, by the key index)",
            "/contracts".to_owned(),
        ),
    ];
    println!("| page | median | p95 | slowest |\n|---|---:|---:|---:|");
    for (name, path) in pages {
        let url = format!("{base}{path}");
        let mut times = Vec::with_capacity(args.requests);
        for round in 0..=args.requests {
            let start = Instant::now();
            let response = client.get(&url).send().await?;
            let status = response.status();
            let body = response.text().await?;
            let took = start.elapsed();
            anyhow::ensure!(status == 200, "{name}: {status}: {body}");
            if round > 0 {
                times.push(took);
            }
        }
        times.sort();
        let at = |q: f64| {
            let i = ((times.len() as f64 - 1.0) * q).round() as usize;
            times[i.min(times.len() - 1)]
        };
        println!(
            "| {name} | {:.1} ms | {:.1} ms | {:.1} ms |",
            ms(at(0.5)),
            ms(at(0.95)),
            ms(times[times.len() - 1])
        );
    }
    // A search no index serves, as the operator sees it: the page, then each walk the page's
    // script follows by itself (`a.next.auto`), until the page is full or the store searched.
    println!(
        "\n| search, until its first full page or the whole store searched | median | p95 | slowest | requests |\n|---|---:|---:|---:|---:|"
    );
    for (name, pattern) in [
        ("wildcard `*.*.thing2.#` (1 in 5 keys)", "*.*.thing2.#"),
        ("wildcard `*.*.nothing.#` (matching none)", "*.*.nothing.#"),
        (
            "wildcard `module.*.thing4.#` (1 in 5 keys)",
            "module.*.thing4.#",
        ),
    ] {
        let first = format!(
            "{base}/events?{}",
            encode(&[("key", pattern), ("limit", "50")])
        );
        let mut times = Vec::with_capacity(args.requests);
        let mut requests = 0;
        for round in 0..=args.requests {
            let start = Instant::now();
            let (mut url, mut rows, mut n) = (first.clone(), 0, 0);
            loop {
                let response = client.get(&url).send().await?;
                let status = response.status();
                let html = response.text().await?;
                anyhow::ensure!(status == 200, "{name}: {status}: {html}");
                n += 1;
                rows += html.matches("<tr class=\"event\">").count();
                // The link the script follows: `<a class="next auto" rel="next" href=…>`.
                let marker = "rel=\"next\" href=\"";
                let auto = html.find(marker).and_then(|at| {
                    let tag = &html[html[..at].rfind('<')?..at];
                    let rest = &html[at + marker.len()..];
                    tag.contains("auto")
                        .then(|| rest.split('"').next())
                        .flatten()
                });
                match auto {
                    Some(next) if rows < 50 => {
                        url = format!("{base}{}", next.replace("&amp;", "&"))
                    }
                    _ => break,
                }
            }
            if round > 0 {
                times.push(start.elapsed());
                requests = n;
            }
        }
        times.sort();
        let at = |q: f64| {
            let i = ((times.len() as f64 - 1.0) * q).round() as usize;
            times[i.min(times.len() - 1)]
        };
        println!(
            "| {name} | {:.1} ms | {:.1} ms | {:.1} ms | {requests} |",
            ms(at(0.5)),
            ms(at(0.95)),
            ms(times[times.len() - 1])
        );
    }
    shutdown.cancel();
    server.await??;
    store.close().await;
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Ids the pages ask for.
struct Probes {
    /// An event in the middle.
    id: EventId,
    /// An event with a cause and an effect.
    caused: EventId,
    /// An event a tenth of the way from the oldest.
    deep: EventId,
}

async fn seed(store: &Store, args: &Args) -> anyhow::Result<Probes> {
    let now = Timestamp::now().unix_nanos();
    let span = i128::from(args.hours.max(1)) * 3_600_000_000_000;
    let mut batch: Vec<WireMessage> = Vec::with_capacity(BATCH);
    let mut previous: Option<EventId> = None;
    let mut id_probe = None;
    let mut caused_probe = None;
    let mut deep_probe = None;
    let mut dead_messages = Vec::new();
    for n in 0..args.events {
        let (key, source) = key(n);
        // Oldest first, evenly over the span.
        let nanos = now - span + span * i128::from(n) / i128::from(args.events.max(1));
        let time = time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
            .ok()
            .and_then(Timestamp::checked)
            .unwrap_or_else(Timestamp::now);
        let id = EventId::new();
        // Chains of three: every third event caused by the one before it.
        let cause = previous.filter(|_| n % 3 != 0);
        if n == args.events / 2 {
            id_probe = Some(id);
        }
        if n == args.events / 10 {
            deep_probe = Some(id);
        }
        if n % 3 == 1 && n >= args.events / 2 && caused_probe.is_none() {
            caused_probe = Some(id);
        }
        let message = codec::encode(&Envelope {
            id,
            key: RoutingKey::parse(&key)?,
            source,
            node: "n1".to_owned(),
            time,
            causation_id: cause.map(|c| c.to_string()),
            schema: None,
            extra_headers: Headers::new(),
            body: Bytes::from(format!(
                r#"{{"n":{n},"order":"{}","note":"seeded"}}"#,
                order(n)
            )),
        });
        if (dead_messages.len() as u64) < args.dead
            && n % (args.events / args.dead.max(1)).max(1) == 0
        {
            dead_messages.push(message.clone());
        }
        previous = Some(id);
        batch.push(message);
        if batch.len() == BATCH {
            store.record_events(&batch).await?;
            batch.clear();
        }
    }
    if !batch.is_empty() {
        store.record_events(&batch).await?;
    }
    let reasons = [
        DeadReason::Permanent,
        DeadReason::MaxAttempts,
        DeadReason::Undecodable,
    ];
    for chunk in dead_messages.chunks(BATCH) {
        let dead: Vec<WireMessage> = chunk
            .iter()
            .enumerate()
            .map(|(i, message)| {
                let mut copy = message.clone();
                codec::mark_dead(
                    &mut copy,
                    &DeadLetterNote {
                        reason: reasons[i % reasons.len()],
                        attempts: 3,
                        last_error: Some("seeded".into()),
                        queue: format!("n1.m{}.events", i % 4),
                        time: Timestamp::now(),
                    },
                );
                copy
            })
            .collect();
        store.record_dead_letters(&dead).await?;
    }
    Ok(Probes {
        id: id_probe.context("--events must be at least 3")?,
        caused: caused_probe.context("--events must be at least 3")?,
        deep: deep_probe.context("--events must be at least 3")?,
    })
}
