//! The soak in short mode: 3 minutes of work on the private three-node cluster under at least
//! 15 random, overlapping faults (`mesh_faults::soak`), and books that must balance.
//!
//! The seed is random and printed; `MESH_SOAK_SEED=<seed>` replays a run's fault plan (as
//! does `mesh-soak --minutes 3 --seed <seed>`).

use std::time::Duration;

use mesh_faults::soak::{self, SoakOptions, MIN_FAULTS};

/// The short soak's load.
const SHORT: Duration = Duration::from_secs(180);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_minutes_of_overlapping_faults_and_the_books_balance() {
    mesh_faults::setup::init_tracing();
    let seed = match std::env::var("MESH_SOAK_SEED") {
        Ok(seed) => seed.parse().expect("MESH_SOAK_SEED is a number"),
        Err(_) => rand::random(),
    };
    let report = soak::run(SoakOptions {
        duration: SHORT,
        seed,
        worker: env!("CARGO_BIN_EXE_faults-worker").into(),
        min_faults: MIN_FAULTS,
    })
    .await
    .unwrap_or_else(|e| panic!("the soak (seed {seed}) could not run: {e:#}"));
    eprintln!("{report}");
    assert!(
        report.is_green(),
        "the soak with seed {seed} failed (replay: MESH_SOAK_SEED={seed}):\n  {}",
        report.problems.join("\n  ")
    );
    // What a green verdict rests on, spelled out.
    assert_eq!((report.lost, report.unexpected), (0, 0));
    assert!(report.faults.len() >= MIN_FAULTS);
    assert!(report.confirmed > 0 && report.poison_dead == report.poison_confirmed);
    assert_eq!(report.audit_rows, report.audit_distinct);
}
