//! The soak in short mode: three minutes of continuous work on the private three-node
//! cluster while a seeded random schedule injects at least [`MIN_FAULTS`] overlapping
//! faults, then books that must balance (see `mesh_faults::soak` and docs/RELIABILITY.md,
//! "Soak").
//!
//! The seed is fixed ([`CI_SEED`]): the suite is a landing gate, and a gate must not be a
//! lottery. `MESH_SOAK_SEED=random` draws a fresh one to try another plan; the seed is
//! printed first, with the plan, so a failure is replayed with `MESH_SOAK_SEED=<seed>` (or
//! `cargo run -p mesh-faults --bin mesh-soak -- --minutes 3 --seed <seed>`).
//! `MESH_SOAK_MINUTES` runs it longer.

use std::time::Duration;

use mesh_faults::soak::{self, SoakOptions, CI_SEED, MIN_FAULTS};

/// The load's length in short mode.
const MINUTES: f64 = 3.0;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("{name}={text:?} is not a valid value")),
        Err(_) => default,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_soak_under_overlapping_faults_balances_its_books() {
    mesh_faults::setup::init_tracing();
    let seed = match std::env::var("MESH_SOAK_SEED") {
        Ok(text) => soak::parse_seed(&text).unwrap_or_else(|| {
            panic!("MESH_SOAK_SEED={text:?} is neither a seed (a u64) nor `random`")
        }),
        Err(_) => CI_SEED,
    };
    let minutes: f64 = env_or("MESH_SOAK_MINUTES", MINUTES);
    assert!(
        minutes.is_finite() && minutes >= 1.0,
        "MESH_SOAK_MINUTES must be at least 1"
    );
    let duration = Duration::from_secs_f64(minutes * 60.0);
    eprintln!("[soak] seed {seed}, {minutes} min; replay: MESH_SOAK_SEED={seed}");
    let report = soak::run(SoakOptions {
        duration,
        seed,
        worker: env!("CARGO_BIN_EXE_faults-worker").into(),
        min_faults: MIN_FAULTS,
    })
    .await
    .unwrap_or_else(|e| panic!("the soak (seed {seed}) could not run: {e:#}"));
    println!("{report}");
    assert!(
        report.is_green(),
        "the soak's books do not balance (seed {seed}); its report is printed above"
    );
}
