//! The values a request names, checked: each one that is not what it should be is a 400
//! page saying why, the value shown back cut short.

use std::str::FromStr;

use mesh_audit::{DeadLetterId, MAX_BODY_SEARCH};
use mesh_core::{DeadReason, EventId, Timestamp, TopicPattern};

use crate::respond::{bad, shown, Fail};

pub(crate) fn pattern(text: &str) -> Result<String, Fail> {
    TopicPattern::parse(text)
        .map(|_| text.to_owned())
        .map_err(|e| {
            bad(format!(
                "key: `{}` is not a topic pattern: {e}",
                shown(text)
            ))
        })
}

/// A time: RFC 3339, or a duration back from now as the CLI takes it (`2h`, `15m`, `7d`).
pub(crate) fn time(name: &str, text: &str) -> Result<Timestamp, Fail> {
    let text = text.trim();
    if let Ok(time) = Timestamp::parse(text) {
        return Ok(time);
    }
    humantime::parse_duration(text)
        .ok()
        .and_then(|ago| Timestamp::now().checked_sub(ago))
        .ok_or_else(|| {
            bad(format!(
                "{name}: `{}` is neither an RFC 3339 time (as 2026-01-31T12:00:00Z) nor a \
                 duration back from now (as 15m, 2h, 7d)",
                shown(text)
            ))
        })
}

/// Words to find in events' bodies: any text of at most [`MAX_BODY_SEARCH`] characters holding
/// a letter or a digit (the store searches it literally, whatever else it holds).
pub(crate) fn body(text: &str) -> Result<String, Fail> {
    if text.chars().count() > MAX_BODY_SEARCH {
        return Err(bad(format!(
            "body: `{}` is longer than {MAX_BODY_SEARCH} characters",
            shown(text)
        )));
    }
    if !text.chars().any(char::is_alphanumeric) {
        return Err(bad(format!(
            "body: `{}` holds no word to search for (a letter or a digit)",
            shown(text)
        )));
    }
    Ok(text.to_owned())
}

pub(crate) fn event_id(name: &str, text: &str) -> Result<EventId, Fail> {
    EventId::from_str(text).map_err(|_| {
        bad(format!(
            "{name}: `{}` is not an event id (a UUID)",
            shown(text)
        ))
    })
}

pub(crate) fn dead_id(text: &str) -> Result<DeadLetterId, Fail> {
    DeadLetterId::from_str(text).map_err(|_| {
        bad(format!(
            "`{}` is not a dead-letter id (a UUID)",
            shown(text)
        ))
    })
}

pub(crate) fn reason(text: &str) -> Result<DeadReason, Fail> {
    DeadReason::parse(text).ok_or_else(|| {
        let known: Vec<&str> = DeadReason::ALL.iter().map(|r| r.as_str()).collect();
        bad(format!(
            "reason: `{}` is not one of {}",
            shown(text),
            known.join(", ")
        ))
    })
}
