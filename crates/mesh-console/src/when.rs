//! One way to show a time on every page: fixed width, UTC, to the microsecond
//! (`2026-12-07 09:25:03.041200Z`), in a `<time>` element whose `datetime` is the exact RFC
//! 3339 text; the console's script ([`crate::assets`]) adds the browser's local time as the
//! element's title, shown on hover.

use maud::{html, Markup};
use mesh_core::Timestamp;
use time::UtcOffset;

/// `ts` as the console writes every time: `YYYY-MM-DD HH:MM:SS.ffffffZ`, always 27
/// characters for the years a [`Timestamp`] can hold (0000–9999).
pub(crate) fn fixed(ts: &Timestamp) -> String {
    let utc = ts
        .as_offset_date_time()
        .checked_to_offset(UtcOffset::UTC)
        .unwrap_or_else(|| ts.as_offset_date_time());
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:06}Z",
        utc.year(),
        u8::from(utc.month()),
        utc.day(),
        utc.hour(),
        utc.minute(),
        utc.second(),
        utc.microsecond()
    )
}

/// `ts` as a `<time>` element: [`fixed`] text, the exact time in `datetime`.
pub(crate) fn time(ts: &Timestamp) -> Markup {
    html! { time datetime=(ts.text()) { (fixed(ts)) } }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_time_is_written_in_utc_to_the_microsecond() {
        let ts = Timestamp::parse("2026-12-07T10:25:03.0412+01:00").unwrap();
        assert_eq!(fixed(&ts), "2026-12-07 09:25:03.041200Z");
        let whole = Timestamp::parse("2026-01-02T03:04:05Z").unwrap();
        assert_eq!(fixed(&whole), "2026-01-02 03:04:05.000000Z");
    }

    proptest! {
        /// Whatever the instant and the offset it was written with: the same width, in UTC.
        #[test]
        fn every_time_has_the_same_width(seconds in 0i64..253_402_300_000, micros in 0u32..1_000_000, offset in -86_399i32..86_400) {
            let utc = time::OffsetDateTime::from_unix_timestamp(seconds).unwrap()
                + time::Duration::microseconds(i64::from(micros));
            let Ok(zone) = UtcOffset::from_whole_seconds(offset) else { return Ok(()) };
            let Some(ts) = utc.checked_to_offset(zone).and_then(Timestamp::checked) else { return Ok(()) };
            let text = fixed(&ts);
            prop_assert_eq!(text.len(), 27, "{}", text);
            prop_assert!(text.ends_with('Z'));
            prop_assert_eq!(Timestamp::parse(&text.replacen(' ', "T", 1)).unwrap().unix_nanos() / 1000, utc.unix_timestamp_nanos() / 1000);
        }
    }
}
