//! Runs the crate's property tests: a visible number of cases, no failure persistence, and
//! the seed printed on failure so that a failing run can be replayed exactly.

use std::fmt::Debug;

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};

/// The environment variable that fixes the seed (proptest's own name for it).
const SEED_ENV: &str = "PROPTEST_RNG_SEED";

/// Runs `test` on `config.cases` values of `strategy`, seeded from `PROPTEST_RNG_SEED` or at
/// random; panics with the seed and the shrunk failing value if a case fails.
pub(crate) fn run<S>(
    name: &str,
    config: Config,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) where
    S: Strategy,
    S::Value: Debug,
{
    let seed = std::env::var(SEED_ENV)
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(rand::random::<u64>);
    let cases = config.cases;
    let mut runner = TestRunner::new(Config {
        rng_seed: RngSeed::Fixed(seed),
        ..config
    });
    let started = std::time::Instant::now();
    if let Err(failure) = runner.run(&strategy, test) {
        panic!("{name}: {failure}\nreplay it with {SEED_ENV}={seed}");
    }
    println!(
        "{name}: {cases} cases passed in {:?} ({SEED_ENV}={seed})",
        started.elapsed()
    );
}
