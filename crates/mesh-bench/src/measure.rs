//! What one run costs the client process: wall time, CPU seconds (getrusage, user + system,
//! every thread) and peak resident memory.
//!
//! Peak RSS is the kernel's high-water mark `VmHWM` from `/proc/self/status`. Writing `5`
//! to `/proc/self/clear_refs` resets it to the current RSS, so each run reports its own peak
//! rather than the largest of the whole process; where that write is refused the figure is
//! the process's peak so far, which the report says.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nix::sys::resource::{getrusage, UsageWho};

/// The process's CPU time so far (user + system, all threads).
pub(crate) fn cpu_time() -> Duration {
    match getrusage(UsageWho::RUSAGE_SELF) {
        Ok(usage) => {
            let micros = |tv: nix::sys::time::TimeVal| {
                let seconds = u64::try_from(tv.tv_sec()).unwrap_or(0);
                let micros = u64::try_from(tv.tv_usec()).unwrap_or(0);
                Duration::from_secs(seconds) + Duration::from_micros(micros)
            };
            micros(usage.user_time()) + micros(usage.system_time())
        }
        Err(_) => Duration::ZERO,
    }
}

/// Whether the peak RSS can be reset per run.
pub(crate) fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// The peak resident set size in bytes (`VmHWM`), 0 when unknown.
pub(crate) fn peak_rss() -> u64 {
    status_kib("VmHWM:").map_or(0, |kib| kib * 1024)
}

/// The resident set size now in bytes (`VmRSS`), 0 when unknown.
pub(crate) fn rss() -> u64 {
    status_kib("VmRSS:").map_or(0, |kib| kib * 1024)
}

fn status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
}

/// The 1-minute load average, when the kernel tells.
pub(crate) fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// A monotonic clock shared by publishers and consumers in this process: nanoseconds since
/// its first use. Latency runs carry it in the body.
pub(crate) fn now_ns() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let epoch = *EPOCH.get_or_init(Instant::now);
    u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Measures one run: started before the work, finished after it.
#[derive(Debug)]
pub(crate) struct Meter {
    wall: Instant,
    cpu: Duration,
    rss_reset: bool,
}

/// What one run cost.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cost {
    pub(crate) wall: Duration,
    pub(crate) cpu: Duration,
    pub(crate) peak_rss: u64,
    /// Whether `peak_rss` is this run's own peak (else the process's so far).
    pub(crate) rss_per_run: bool,
}

impl Meter {
    pub(crate) fn start() -> Meter {
        let rss_reset = reset_peak_rss();
        Meter {
            cpu: cpu_time(),
            wall: Instant::now(),
            rss_reset,
        }
    }

    pub(crate) fn finish(&self) -> Cost {
        Cost {
            wall: self.wall.elapsed(),
            cpu: cpu_time().saturating_sub(self.cpu),
            peak_rss: peak_rss(),
            rss_per_run: self.rss_reset,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_advances_with_work() {
        let before = cpu_time();
        let mut x = 0_u64;
        for i in 0..20_000_000_u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(cpu_time() > before);
    }

    #[test]
    fn peak_rss_is_read() {
        assert!(peak_rss() > 0);
    }

    #[test]
    fn rss_is_read() {
        assert!(rss() > 0);
    }
}
