//! The values the command line parses beyond clap's own: durations (one syntax everywhere),
//! times, rates and limits, each bounded so that a deadline, an interval or a query can be
//! made of it.

use std::time::Duration;

use mesh::raw::Timestamp;

/// The shortest `--timeout` and `--connect-timeout`.
pub(crate) const MIN_TIMEOUT: Duration = Duration::from_millis(1);
/// The longest `--timeout` and `--connect-timeout`: a day (deadlines are instants, which
/// cannot be arbitrarily far away).
pub(crate) const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
/// The slowest `--rate`: one event a day.
pub(crate) const MIN_RATE: f64 = 1.0 / (24.0 * 3600.0);
/// The fastest `--rate`: a million events per second (a pacing interval of 1 µs).
pub(crate) const MAX_RATE: f64 = 1_000_000.0;
/// The largest `--limit`.
pub(crate) const MAX_LIMIT: usize = 1_000_000;

/// The one duration syntax of the command line: a number and a unit, several summed
/// (`500ms`, `5s`, `1m30s`, `2h`, `1day`), with no bounds of its own.
fn parse_span(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim()).map_err(|e| format!("{e} (e.g. 500ms, 5s, 1m, 2h)"))
}

/// A timeout: a duration from [`MIN_TIMEOUT`] to [`MAX_TIMEOUT`].
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    parse_duration_within(text, MIN_TIMEOUT, MAX_TIMEOUT, "1ms to 24h")
}

/// The one duration syntax of the command line ([`parse_span`]): a duration from `min` to
/// `max` (`bounds` says which, for the message).
pub(crate) fn parse_duration_within(
    text: &str,
    min: Duration,
    max: Duration,
    bounds: &str,
) -> Result<Duration, String> {
    let duration = parse_span(text)?;
    if (min..=max).contains(&duration) {
        Ok(duration)
    } else {
        Err(format!(
            "expected a duration from {bounds} (e.g. 500ms, 5s, 1m)"
        ))
    }
}

/// `mesh emit --after`: a delay from 1 ms to 10 years.
pub(crate) fn parse_delay(text: &str) -> Result<Duration, String> {
    parse_duration_within(
        text,
        Duration::from_millis(1),
        Duration::from_secs(10 * 366 * 24 * 3600),
        "1ms to 10 years",
    )
}

/// `mesh emit --at`: an RFC 3339 time.
pub(crate) fn parse_due(text: &str) -> Result<Timestamp, String> {
    Timestamp::parse(text).map_err(|e| format!("not an RFC 3339 time within range: {e}"))
}

/// `--since`/`--until`: an RFC 3339 time, or a duration ago in the syntax of
/// [`parse_duration`] (`90s`, `2h`, `1day`), no earlier than the year 1.
pub(crate) fn parse_time(text: &str) -> Result<Timestamp, String> {
    if let Ok(time) = Timestamp::parse(text) {
        return Ok(time);
    }
    let ago = parse_span(text)
        .map_err(|e| format!("neither an RFC 3339 time nor a duration ago: {e}"))?;
    // Checked: a duration beyond the year 1 (`300000y`) is refused, not a panic.
    Timestamp::now()
        .checked_sub(ago)
        .ok_or_else(|| "that long ago is before the year 1".to_owned())
}

/// Events per second, from [`MIN_RATE`] to [`MAX_RATE`]: its pacing interval, `1 / rate`,
/// is then a duration from 1 µs to a day.
pub(crate) fn parse_rate(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(rate) if (MIN_RATE..=MAX_RATE).contains(&rate) => Ok(rate),
        _ => Err(
            "a rate is a number of events per second from 0.0000116 (one a day) to 1000000"
                .to_owned(),
        ),
    }
}

/// The pacing interval of a rate from [`parse_rate`].
pub(crate) fn rate_interval(rate: f64) -> Duration {
    let rate = rate.clamp(MIN_RATE, MAX_RATE);
    Duration::from_secs_f64(1.0 / rate)
}

/// `--limit`: 1 to [`MAX_LIMIT`].
pub(crate) fn parse_limit(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(limit) if (1..=MAX_LIMIT).contains(&limit) => Ok(limit),
        _ => Err(format!("expected a whole number from 1 to {MAX_LIMIT}")),
    }
}

/// `text` as a whole number within `min..=max`, or a message saying which are accepted.
pub(crate) fn parse_within<T>(text: &str, min: T, max: T) -> Result<T, String>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy,
{
    match text.trim().parse::<T>() {
        Ok(value) if min <= value && value <= max => Ok(value),
        _ => Err(format!("expected a whole number from {min} to {max}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_refused_with_what_is_accepted() {
        for text in ["300000y", "18446744073709551615s", "0s", "0", "25h", "1ns"] {
            let message = parse_duration(text).unwrap_err();
            assert!(
                message.contains("1ms to 24h") || message.contains("e.g."),
                "{text}: {message}"
            );
        }
        assert_eq!(parse_duration("24h"), Ok(MAX_TIMEOUT));
        assert_eq!(parse_duration("1ms"), Ok(MIN_TIMEOUT));
        for text in [
            "1e-300", "inf", "nan", "-1", "0", "1e300", "1000001", "", "NaN",
        ] {
            assert!(parse_rate(text).is_err(), "{text}");
        }
        assert_eq!(
            rate_interval(parse_rate("1000000").unwrap()),
            Duration::from_micros(1)
        );
        assert!(rate_interval(parse_rate("0.0000116").unwrap()) <= MAX_TIMEOUT);
        for text in [
            "0",
            "1000001",
            "18446744073709551615",
            "18446744073709551616",
        ] {
            assert!(parse_limit(text).is_err(), "{text}");
        }
        for text in [
            "300000y",
            "18446744073709551615s",
            "99999999999999999999999s",
        ] {
            assert!(parse_time(text).is_err(), "{text}");
        }
    }

    #[test]
    fn durations_have_one_syntax() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        let now = Timestamp::now();
        let ago = parse_time("2h").unwrap();
        assert!(ago < now);
        assert!(parse_time("1day").unwrap() < ago);
        assert!(parse_time("500ms").is_ok());
        assert_eq!(
            parse_time("2026-01-01T00:00:00Z").unwrap().to_string(),
            "2026-01-01T00:00:00Z"
        );
        // The same examples in every refusal.
        let timeout = parse_duration("2 parsecs").unwrap_err();
        let since = parse_time("2 parsecs").unwrap_err();
        assert!(timeout.contains("e.g. 500ms, 5s, 1m, 2h"), "{timeout}");
        assert!(since.contains("e.g. 500ms, 5s, 1m, 2h"), "{since}");
        assert!(since.contains("neither an RFC 3339 time"), "{since}");
    }
}
