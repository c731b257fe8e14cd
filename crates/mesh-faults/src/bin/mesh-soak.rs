//! `mesh-soak`: the soak of `mesh_faults::soak` by hand, for as long as you like.
//!
//! ```text
//! mesh-soak [--minutes N] [--seed S|random]
//! ```
//!
//! Forms a private three-node RabbitMQ cluster (removed when it exits), runs the soak's load
//! for `N` minutes (default 3, fractions allowed) under the fault plan drawn from seed `S`
//! (default or `random`: a fresh one, printed, so that a failed run can be replayed), and prints the
//! fault timeline and the figures. The child processes are `faults-worker`, looked for next
//! to this program: build it first (`cargo build -p mesh-faults --bins`).
//!
//! Exit codes: 0 when the books balance, 1 when the soak found a problem or could not run,
//! 2 on bad arguments.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use mesh_faults::soak::{self, SoakOptions, MIN_FAULTS};

const USAGE: &str = "usage: mesh-soak [--minutes N] [--seed S|random]";

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("mesh-soak: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn run() -> anyhow::Result<ExitCode> {
    let mut minutes = 3.0_f64;
    let mut seed: u64 = rand::random();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next();
        match (arg.as_str(), value) {
            ("--minutes", Some(v)) => minutes = v.parse().context("--minutes")?,
            ("--seed", Some(v)) => {
                seed = mesh_faults::soak::parse_seed(&v)
                    .context("--seed: a number (u64) or `random`")?
            }
            _ => {
                eprintln!("{USAGE}");
                return Ok(ExitCode::from(2));
            }
        }
    }
    if !(minutes.is_finite() && minutes >= 1.0) {
        eprintln!("mesh-soak: --minutes must be at least 1\n{USAGE}");
        return Ok(ExitCode::from(2));
    }
    let worker = std::env::current_exe()
        .context("locating this program")?
        .with_file_name("faults-worker");
    if !worker.exists() {
        anyhow::bail!(
            "{} not found: build it first (cargo build -p mesh-faults --bins)",
            worker.display()
        );
    }
    mesh_faults::setup::init_tracing();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let report = runtime.block_on(soak::run(SoakOptions {
        duration: Duration::from_secs_f64(minutes * 60.0),
        seed,
        worker,
        min_faults: MIN_FAULTS,
    }))?;
    println!("{report}");
    Ok(if report.is_green() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
