//! Acceptance: the crash ledger, on PostgreSQL and on SQLite. A child process writes rows and
//! emits through the outbox in the same transactions (one in four rolled back), with a relay
//! of its own (waiting for it when more than [`MAX_BACKLOG`] rows are unsent), and is
//! SIGKILLed 20 times, the broker being stopped for 30 s once while a child writes on; a last
//! child only relays what is left. Every committed row's event must reach the consumer (lost
//! 0), no event of a rolled-back transaction may (unexpected 0); duplicates are reported.
//!
//! Each kill is classified from what can be observed once the child is dead, and the test
//! fails unless each of the four points was hit at least once:
//!
//! - **before commit**: the child's marker file ends with `begin n` (it writes `begin n` once
//!   transaction `n` is open and `end n` once it committed or rolled back) and no row of
//!   transaction `n` was ever committed;
//! - **after commit, before publish**: more than [`BATCH`] committed rows are unsent. A round
//!   reads the oldest `BATCH` unsent rows, rows only leave the unsent set by being marked,
//!   and the one writer commits in `seq` order, so a row with `BATCH` unsent rows before it
//!   was never read by a relay, let alone published;
//! - **mid-relay**: the killed relay still holds the source's lease (a dead owner's row stays
//!   until another relay takes it over) with unsent rows left: it was relaying, and its
//!   successor must wait for the lease to expire;
//! - **after publish, before mark**: a row the killed child wrote, still unsent after the
//!   kill, was handled by the consumer before the kill (only the killed child's relay can
//!   have published it).
//!
//! The kill times are random (300 ms to 2.5 s after the start, so some children die before
//! their relay took the lease over); from run [`STEER_FROM`] on, each kill is steered to the
//! point hit least so far: the parent watches for the state that point needs (an open
//! transaction, a backlog, the lease, a delivered but unmarked row) and kills when it sees
//! it, or after [`STEER_WAIT`]. That is fault timing; the classification after the kill
//! decides what was hit.
//!
//! The child is this test binary again, running this same test with `CHILD_ENV` set. The
//! broker is a private node: the shared one is never stopped.

mod common;

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use mesh::{Bus, EventId, Incoming, Outgoing};
use mesh_outbox::{EmitIn, Outbox, RelayOptions};
use mesh_testkit::{sdk, Ledger, NodeOptions, PrivateNode, TempDir};
use rand::Rng;

/// Set in a child: `<database URL> <broker URL> <write|drain> <run> <marker file>`.
const CHILD_ENV: &str = "MESH_OUTBOX_CRASH_CHILD";
const KILLS: usize = 20;
const OUTAGE_AT: usize = 10;
const OUTAGE: Duration = Duration::from_secs(30);
/// The relays' batch: rows read per round.
const BATCH: usize = 50;
/// From this run on, each kill is steered to the point hit least so far.
const STEER_FROM: usize = 12;
/// How long a steered kill waits for the state it wants before killing anyway.
const STEER_WAIT: Duration = Duration::from_secs(10);
/// How often a steered kill looks at the state: the windows it aims at last milliseconds.
const STEER_POLL: Duration = Duration::from_millis(1);
/// The unsent rows at which a writing child waits for its relay (until half as many are
/// left): the backlog a relay must work through before it reaches the rows of its own child
/// stays bounded, as it would be in a service whose relay keeps up.
const MAX_BACKLOG: i64 = 1000;
/// How often a writing child looks at its backlog, in transactions.
const BACKLOG_EVERY: u64 = 10;
/// The one source of the children.
const SOURCE: &str = "crashy";

/// Relays that take over quickly from a killed one, and give up a publish quickly while the
/// broker is down.
fn options() -> RelayOptions {
    RelayOptions::default()
        .batch(BATCH)
        .poll_interval(Duration::from_millis(50))
        .retry_delay(Duration::from_millis(100))
        .lease_ttl(Duration::from_secs(1))
        .publish_deadline(Some(Duration::from_millis(500)))
}

/// The relay's name in the lease table, in the child of run `run`.
fn relay_owner(run: &str) -> String {
    format!("child-{run}")
}

/// The four points a kill can land at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Point {
    BeforeCommit,
    BeforePublish,
    MidRelay,
    BeforeMark,
}

impl Point {
    const ALL: [Point; 4] = [
        Point::BeforeCommit,
        Point::BeforePublish,
        Point::MidRelay,
        Point::BeforeMark,
    ];

    fn name(self) -> &'static str {
        match self {
            Point::BeforeCommit => "before commit",
            Point::BeforePublish => "after commit, before publish",
            Point::MidRelay => "mid-relay",
            Point::BeforeMark => "after publish, before mark",
        }
    }
}

/// What the parent saw of one kill: the consumer's handled ids are taken just before the
/// signal, the rest once the child is dead.
#[derive(Debug)]
struct Kill {
    run: usize,
    /// The transaction the marker file shows open, if any.
    open_tx: Option<u64>,
    /// Committed rows unsent, in `seq` order.
    unsent: Vec<String>,
    /// Of those, rows this child wrote that the consumer handled before the kill: only this
    /// child's relay can have published them (its predecessors were dead before they were
    /// written).
    unsent_delivered: usize,
    /// Whether the killed relay held the source's lease.
    lease_held: bool,
    /// The point the kill was steered to, if it was.
    aim: Option<Point>,
}

impl Kill {
    /// The points this kill hit; `tx_committed` says whether the open transaction committed
    /// after all (its `COMMIT` sent just before the kill).
    fn points(&self, tx_committed: bool) -> Vec<Point> {
        let mut points = Vec::new();
        if self.open_tx.is_some() && !tx_committed {
            points.push(Point::BeforeCommit);
        }
        if self.unsent.len() > BATCH {
            points.push(Point::BeforePublish);
        }
        if self.lease_held && !self.unsent.is_empty() {
            points.push(Point::MidRelay);
        }
        if self.unsent_delivered > 0 {
            points.push(Point::BeforeMark);
        }
        points
    }
}

/// The last line of a marker file: `Some(n)` when it is `begin n` (transaction `n` open).
fn open_transaction(path: &Path) -> anyhow::Result<Option<u64>> {
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let len = file.metadata()?.len();
    file.seek(SeekFrom::Start(len.saturating_sub(64)))?;
    let mut tail = String::new();
    file.read_to_string(&mut tail)?;
    let last = tail.lines().last().unwrap_or_default();
    Ok(last
        .strip_prefix("begin ")
        .and_then(|n| n.trim().parse().ok()))
}

/// The ids the consumer handled, each with its rank among them, so that "handled before
/// the kill" is a number taken just before the signal ([`Handled::mark`]), not a copy.
#[derive(Debug, Clone, Default)]
struct Handled(Arc<Mutex<HashMap<String, usize>>>);

impl Handled {
    fn insert(&self, id: String) {
        let mut ids = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let rank = ids.len();
        ids.entry(id).or_insert(rank);
    }

    /// How many ids were handled so far: those handled before now rank below it.
    fn mark(&self) -> usize {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// How many of `ids` were handled before `mark`.
    fn before(&self, ids: &[String], mark: usize) -> usize {
        let handled = self.0.lock().unwrap_or_else(|e| e.into_inner());
        ids.iter()
            .filter(|id| handled.get(*id).is_some_and(|rank| *rank < mark))
            .count()
    }
}

/// The ledger on one backend, in a module named after it, with its outbox's unsent rows and
/// its lease table.
macro_rules! crash_ledger {
    (
        $backend:ident,
        $pool:ty,
        $connect:path,
        $pending:expr,
        $unsent:expr,
        $unsent_of_run:literal,
        $leases:expr
    ) => {
        mod $backend {
            use super::*;

            /// This test's name, for the child's filter.
            const NAME: &str = concat!(stringify!($backend), "::crash_ledger");

            async fn connect(url: &str) -> anyhow::Result<sqlx::Pool<$pool>> {
                $connect(url).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn crash_ledger() -> anyhow::Result<()> {
                match std::env::var(CHILD_ENV) {
                    Ok(config) => child(&config).await,
                    Err(_) => parent().await,
                }
            }

            async fn child(config: &str) -> anyhow::Result<()> {
                let mut words = config.split(' ');
                let (Some(db), Some(amqp), Some(mode), Some(run), Some(markers)) = (
                    words.next(),
                    words.next(),
                    words.next(),
                    words.next(),
                    words.next(),
                ) else {
                    anyhow::bail!(
                        "{CHILD_ENV} needs a database URL, a broker URL, a mode, a run and \
                         a marker file"
                    );
                };
                let pool = connect(db).await?;
                let outbox = Outbox::new(pool.clone()).await?;
                let bus = sdk::emitter(amqp, "n1", SOURCE).await?;
                let relay = outbox
                    .start_relay([bus.clone()], options().owner(relay_owner(run)))
                    .await?;
                if mode == "drain" {
                    let drained = || async {
                        (outbox.counts().await.ok()?.pending == 0).then_some(())
                    };
                    mesh_testkit::eventually(Duration::from_secs(120), "the drain", drained)
                        .await;
                    relay.stop().await;
                    bus.drain().await?;
                    return Ok(());
                }
                // Unbuffered: each line is in the file once `write_all` returns, which a
                // SIGKILL cannot undo.
                let mut markers = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(markers)?;
                for n in 0u64.. {
                    if n % BACKLOG_EVERY == 0 && pending(&pool).await? > MAX_BACKLOG {
                        // The relay is behind (the broker may be down): wait for it.
                        let caught_up = || async {
                            let left = pending(&pool).await.ok()?;
                            (left <= MAX_BACKLOG / 2).then_some(())
                        };
                        mesh_testkit::eventually(Duration::from_secs(600), "the relay", caught_up)
                            .await;
                    }
                    let count = 1 + (n % 3);
                    let roll_back = n % 4 == 3;
                    let ids: Vec<EventId> = (0..count).map(|_| EventId::new()).collect();
                    if roll_back {
                        // Recorded before (and outside) the transaction, so the parent can
                        // check they never arrive.
                        for id in &ids {
                            sqlx::query(&format!(
                                "INSERT INTO rolled_back (event_id) VALUES ('{id}')"
                            ))
                            .execute(&pool)
                            .await?;
                        }
                    }
                    let mut tx = pool.begin().await?;
                    markers.write_all(format!("begin {n}\n").as_bytes())?;
                    let events = ids
                        .iter()
                        .enumerate()
                        .map(|(i, id)| {
                            let body = serde_json::json!({ "n": n, "i": i });
                            Ok(Outgoing::json("written", &body)?.id(*id))
                        })
                        .collect::<Result<Vec<_>, mesh::Error>>()?;
                    bus.emit_all_in(&mut tx, events).await?;
                    for id in &ids {
                        sqlx::query(&format!(
                            "INSERT INTO ledger_rows (event_id, run, tx) \
                             VALUES ('{id}', {run}, {n})"
                        ))
                        .execute(&mut *tx)
                        .await?;
                    }
                    if roll_back {
                        tx.rollback().await?;
                    } else {
                        tx.commit().await?;
                    }
                    markers.write_all(format!("end {n}\n").as_bytes())?;
                }
                Ok(())
            }

            fn spawn_child(
                db: &str,
                amqp: &str,
                mode: &str,
                run: &str,
                markers: &Path,
            ) -> anyhow::Result<tokio::process::Child> {
                Ok(tokio::process::Command::new(std::env::current_exe()?)
                    .args([NAME, "--exact", "--nocapture", "--test-threads=1"])
                    .env(
                        CHILD_ENV,
                        format!("{db} {amqp} {mode} {run} {}", markers.display()),
                    )
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .kill_on_drop(true)
                    .spawn()?)
            }

            /// How many committed rows are not sent yet.
            async fn pending(pool: &sqlx::Pool<$pool>) -> anyhow::Result<i64> {
                Ok(sqlx::query_scalar($pending).fetch_one(pool).await?)
            }

            /// The committed rows not sent yet, in `seq` order.
            async fn unsent(pool: &sqlx::Pool<$pool>) -> anyhow::Result<Vec<String>> {
                Ok(sqlx::query_scalar($unsent).fetch_all(pool).await?)
            }

            /// The committed rows of run `run` not sent yet.
            async fn unsent_of(pool: &sqlx::Pool<$pool>, run: usize) -> anyhow::Result<Vec<String>> {
                Ok(sqlx::query_scalar(&format!($unsent_of_run, run = run))
                    .fetch_all(pool)
                    .await?)
            }

            /// Whether the relay of run `run` holds the source's lease.
            async fn lease_held(pool: &sqlx::Pool<$pool>, run: usize) -> anyhow::Result<bool> {
                let owner: Option<String> =
                    sqlx::query_scalar($leases).fetch_optional(pool).await?;
                Ok(owner.as_deref() == Some(relay_owner(&run.to_string()).as_str()))
            }

            /// Whether the transaction a kill left open committed after all.
            async fn committed(pool: &sqlx::Pool<$pool>, kill: &Kill) -> anyhow::Result<bool> {
                let Some(tx) = kill.open_tx else {
                    return Ok(false);
                };
                let rows: i64 = sqlx::query_scalar(&format!(
                    "SELECT count(*) FROM ledger_rows WHERE run = {} AND tx = {tx}",
                    kill.run
                ))
                .fetch_one(pool)
                .await?;
                Ok(rows > 0)
            }

            /// How many kills hit each point of [`Point::ALL`].
            async fn tally(pool: &sqlx::Pool<$pool>, kills: &[Kill]) -> anyhow::Result<[usize; 4]> {
                let mut tally = [0; 4];
                for kill in kills {
                    for point in kill.points(committed(pool, kill).await?) {
                        if let Some(i) = Point::ALL.iter().position(|p| *p == point) {
                            tally[i] += 1;
                        }
                    }
                }
                Ok(tally)
            }

            /// Whether the state a kill at `point` needs holds now.
            async fn looks_like(
                point: Point,
                pool: &sqlx::Pool<$pool>,
                run: usize,
                markers: &Path,
                handled: &Handled,
            ) -> anyhow::Result<bool> {
                Ok(match point {
                    Point::BeforeCommit => open_transaction(markers)?.is_some(),
                    Point::BeforePublish => unsent(pool).await?.len() > BATCH,
                    Point::MidRelay => {
                        lease_held(pool, run).await? && !unsent(pool).await?.is_empty()
                    }
                    Point::BeforeMark => {
                        handled.before(&unsent_of(pool, run).await?, usize::MAX) > 0
                    }
                })
            }

            /// Waits (fault timing) until the state of `point` shows, at most
            /// [`STEER_WAIT`]; whether it was hit is decided after the kill.
            async fn steer(
                point: Point,
                pool: &sqlx::Pool<$pool>,
                run: usize,
                markers: &Path,
                handled: &Handled,
            ) -> anyhow::Result<()> {
                let deadline = tokio::time::Instant::now() + STEER_WAIT;
                while tokio::time::Instant::now() < deadline {
                    if looks_like(point, pool, run, markers, handled).await? {
                        return Ok(());
                    }
                    // The poll interval of the observation, not a wait for an outcome.
                    tokio::time::sleep(STEER_POLL).await;
                }
                Ok(())
            }

            async fn parent() -> anyhow::Result<()> {
                let node = PrivateNode::start(NodeOptions::default().heartbeat(2)).await?;
                let (store, pool) = common::$backend().await?;
                let marker_dir = TempDir::new("crash-markers")?;
                Outbox::new(pool.clone()).await?;
                sqlx::query(
                    "CREATE TABLE ledger_rows (event_id text PRIMARY KEY, run integer NOT NULL, \
                     tx integer NOT NULL)",
                )
                .execute(&pool)
                .await?;
                sqlx::query("CREATE TABLE rolled_back (event_id text PRIMARY KEY)")
                    .execute(&pool)
                    .await?;
                let ledger = Ledger::new();
                let handled = Handled::default();
                let sink = {
                    let ledger = ledger.clone();
                    let handled = handled.clone();
                    Bus::builder()
                        .node("n1")
                        .module("sink")
                        .prefetch(256)
                        .on_raw(["module.crashy.#"], move |e: Incoming<Bytes>| {
                            let id = e.meta.id().to_string();
                            handled.insert(id.clone());
                            ledger.handled(id);
                            async { Ok(()) }
                        })
                        .start(sdk::transport(&node.url()).await?)
                        .await?
                };

                let mut rng = rand::thread_rng();
                let mut kills: Vec<Kill> = Vec::new();
                for run in 0..KILLS {
                    let markers: PathBuf = marker_dir.join(format!("run-{run}"));
                    let mut child = spawn_child(
                        store.url(),
                        &node.url(),
                        "write",
                        &run.to_string(),
                        &markers,
                    )?;
                    // Fault timing, not synchronisation: the kill lands wherever the child is.
                    tokio::time::sleep(Duration::from_millis(rng.gen_range(300..2500))).await;
                    if run == OUTAGE_AT {
                        node.stop().await?;
                        tokio::time::sleep(OUTAGE).await;
                        node.start_again().await?;
                        tokio::time::sleep(Duration::from_millis(rng.gen_range(300..2500))).await;
                    }
                    let mut aim = None;
                    if run >= STEER_FROM {
                        let so_far = tally(&pool, &kills).await?;
                        let least = (0..Point::ALL.len())
                            .min_by_key(|&i| so_far[i])
                            .unwrap_or(0);
                        aim = Some(Point::ALL[least]);
                        steer(Point::ALL[least], &pool, run, &markers, &handled).await?;
                    }
                    let delivered = handled.mark();
                    child.start_kill()?;
                    child.wait().await?;
                    // Nothing relays between the kill and these reads.
                    let own = unsent_of(&pool, run).await?;
                    kills.push(Kill {
                        run,
                        open_tx: open_transaction(&markers)?,
                        unsent: unsent(&pool).await?,
                        unsent_delivered: handled.before(&own, delivered),
                        lease_held: lease_held(&pool, run).await?,
                        aim,
                    });
                }
                let drain_markers = marker_dir.join("drain");
                let mut drain =
                    spawn_child(store.url(), &node.url(), "drain", "drain", &drain_markers)?;
                let status = tokio::time::timeout(Duration::from_secs(180), drain.wait()).await??;
                assert!(status.success(), "the draining child failed: {status}");

                let tally = tally(&pool, &kills).await?;
                let shown: Vec<String> = Point::ALL
                    .iter()
                    .zip(tally)
                    .map(|(point, n)| format!("{} {n}", point.name()))
                    .collect();
                let mut steered = 0;
                let mut on_aim = 0;
                for kill in &kills {
                    let points = kill.points(committed(&pool, kill).await?);
                    let names: Vec<&str> = points.iter().map(|p| p.name()).collect();
                    let steered_to = match kill.aim {
                        Some(aim) => {
                            steered += 1;
                            on_aim += usize::from(points.contains(&aim));
                            format!(" (steered to {})", aim.name())
                        }
                        None => String::new(),
                    };
                    eprintln!("kill {}{steered_to}: {}", kill.run, names.join(", "));
                }
                eprintln!(
                    "crash points over {KILLS} kills ({steered} steered, {on_aim} on aim): {}",
                    shown.join(", ")
                );

                let committed: Vec<String> = sqlx::query_scalar("SELECT event_id FROM ledger_rows")
                    .fetch_all(&pool)
                    .await?;
                let rolled_back: Vec<String> =
                    sqlx::query_scalar("SELECT event_id FROM rolled_back")
                        .fetch_all(&pool)
                        .await?;
                for id in &committed {
                    ledger.attempted(id.clone());
                    ledger.confirmed(id.clone());
                }
                let report = ledger.wait_all_handled(Duration::from_secs(120)).await;
                sink.drain().await?;
                eprintln!(
                    "crash ledger: {} committed, {} rolled back, {} delivered, {} duplicates",
                    committed.len(),
                    rolled_back.len(),
                    report.handled_unique,
                    report.duplicates
                );
                assert!(
                    committed.len() > 100,
                    "the children committed too little to test: {}",
                    committed.len()
                );
                assert!(!rolled_back.is_empty());
                // Lost: committed and never delivered. Unexpected: delivered and never committed,
                // which covers every rolled-back event.
                report.assert_clean();
                assert_eq!(report.handled_unique, committed.len());
                for (point, n) in Point::ALL.iter().zip(tally) {
                    assert!(n > 0, "no kill landed {}: {}", point.name(), shown.join(", "));
                }
                Ok(())
            }
        }
    };
}

crash_ledger!(
    postgres,
    sqlx::Postgres,
    common::postgres_pool,
    "SELECT count(*) FROM mesh_outbox.outbox WHERE sent_at IS NULL",
    "SELECT event_id::text FROM mesh_outbox.outbox WHERE sent_at IS NULL ORDER BY seq",
    "SELECT o.event_id::text FROM mesh_outbox.outbox o JOIN ledger_rows l \
     ON l.event_id = o.event_id::text WHERE o.sent_at IS NULL AND l.run = {run} ORDER BY o.seq",
    "SELECT owner FROM mesh_outbox.leases"
);
crash_ledger!(
    sqlite,
    sqlx::Sqlite,
    common::sqlite_pool,
    "SELECT count(*) FROM mesh_outbox WHERE sent_at IS NULL",
    "SELECT event_id FROM mesh_outbox WHERE sent_at IS NULL ORDER BY seq",
    "SELECT o.event_id FROM mesh_outbox o JOIN ledger_rows l ON l.event_id = o.event_id \
     WHERE o.sent_at IS NULL AND l.run = {run} ORDER BY o.seq",
    "SELECT owner FROM mesh_outbox_leases"
);
