//! The event both sides send: a 256-byte JSON body carrying a sequence number and the send
//! time, and (for the raw client) the contract's headers and properties, built per message
//! exactly as mesh builds them.

use amqprs::{BasicProperties, FieldTable, FieldValue};
use serde::{Deserialize, Serialize};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// The size of every event body, in bytes.
pub(crate) const BODY_SIZE: usize = 256;

/// `{"seq":…,"sent_ns":…,"pad":"…"}` without the numbers and the padding.
const FRAME: usize = r#"{"seq":,"sent_ns":,"pad":""}"#.len();
const PAD: &str = match std::str::from_utf8(&[b'x'; BODY_SIZE]) {
    Ok(pad) => pad,
    Err(_) => "",
};

/// The source and node the raw client writes (mesh writes its bus's own).
pub(crate) const RAW_SOURCE: &str = "bench";
pub(crate) const RAW_NODE: &str = "raw";

/// The body of every event: serialized it is exactly [`BODY_SIZE`] bytes.
#[derive(Debug, Serialize)]
pub(crate) struct Body {
    seq: u64,
    sent_ns: u64,
    pad: &'static str,
}

impl Body {
    pub(crate) fn new(seq: u64, sent_ns: u64) -> Body {
        let digits = |n: u64| n.checked_ilog10().map_or(1, |d| d as usize + 1);
        let used = FRAME + digits(seq) + digits(sent_ns);
        Body {
            seq,
            sent_ns,
            pad: &PAD[..BODY_SIZE.saturating_sub(used)],
        }
    }
}

/// What a consumer reads back from a body.
#[derive(Debug, Deserialize)]
pub(crate) struct Probe {
    pub(crate) seq: u64,
    pub(crate) sent_ns: u64,
}

impl Probe {
    pub(crate) fn read(body: &[u8]) -> anyhow::Result<Probe> {
        Ok(serde_json::from_slice(body)?)
    }
}

/// A string header value.
fn text(value: &str) -> anyhow::Result<FieldValue> {
    Ok(FieldValue::S(value.try_into().map_err(|_| {
        anyhow::anyhow!("header value is too long")
    })?))
}

/// Inserts a string header.
pub(crate) fn insert(table: &mut FieldTable, name: &str, value: &str) -> anyhow::Result<()> {
    let name = name
        .try_into()
        .map_err(|_| anyhow::anyhow!("header name is too long"))?;
    table.insert(name, text(value)?);
    Ok(())
}

/// The properties of an event as the contract wants them (and as mesh writes them):
/// `content_type`, persistent, `message_id` = `x-event-id` (a UUID v7), `timestamp`, and the
/// headers `x-event-id`, `x-source`, `x-node`, `x-time` (RFC 3339).
pub(crate) fn event_properties() -> anyhow::Result<BasicProperties> {
    let id = uuid::Uuid::now_v7().to_string();
    let now = OffsetDateTime::now_utc();
    let mut headers = FieldTable::new();
    insert(&mut headers, "x-event-id", &id)?;
    insert(&mut headers, "x-source", RAW_SOURCE)?;
    insert(&mut headers, "x-node", RAW_NODE)?;
    insert(&mut headers, "x-time", &now.format(&Rfc3339)?)?;
    let mut props = BasicProperties::default();
    props
        .with_content_type("application/json")
        .with_delivery_mode(amqprs::DELIVERY_MODE_PERSISTENT)
        .with_message_id(&id)
        .with_timestamp(u64::try_from(now.unix_timestamp()).unwrap_or(0))
        .with_headers(headers);
    Ok(props)
}

/// The properties of a request to `tool` as mesh writes them: the event-style headers plus
/// `x-mesh-tool`, not persistent, with `reply_to`, `correlation_id` and `expiration` (ms).
pub(crate) fn request_properties(
    tool: &str,
    reply_to: &str,
    correlation_id: &str,
    expiration_ms: u64,
) -> anyhow::Result<BasicProperties> {
    let id = uuid::Uuid::now_v7().to_string();
    let now = OffsetDateTime::now_utc();
    let mut headers = FieldTable::new();
    insert(&mut headers, "x-event-id", &id)?;
    insert(&mut headers, "x-source", RAW_SOURCE)?;
    insert(&mut headers, "x-node", RAW_NODE)?;
    insert(&mut headers, "x-time", &now.format(&Rfc3339)?)?;
    insert(&mut headers, "x-mesh-tool", tool)?;
    let mut props = BasicProperties::default();
    props
        .with_content_type("application/json")
        .with_message_id(&id)
        .with_timestamp(u64::try_from(now.unix_timestamp()).unwrap_or(0))
        .with_correlation_id(correlation_id)
        .with_reply_to(reply_to)
        .with_expiration(&expiration_ms.to_string())
        .with_headers(headers);
    Ok(props)
}

/// The properties of a successful reply as mesh writes them.
pub(crate) fn reply_properties(correlation_id: &str) -> anyhow::Result<BasicProperties> {
    let mut headers = FieldTable::new();
    insert(&mut headers, "x-mesh-status", "ok")?;
    let mut props = BasicProperties::default();
    props
        .with_content_type("application/json")
        .with_correlation_id(correlation_id)
        .with_headers(headers);
    Ok(props)
}

/// A whole raw event: properties and serialized body.
pub(crate) fn raw_event(seq: u64, sent_ns: u64) -> anyhow::Result<(BasicProperties, Vec<u8>)> {
    let body = serde_json::to_vec(&Body::new(seq, sent_ns))?;
    Ok((event_properties()?, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_256_bytes_whatever_the_numbers() {
        for (seq, sent) in [(0, 0), (9, 10), (123_456, u64::MAX), (u64::MAX, u64::MAX)] {
            let body = serde_json::to_vec(&Body::new(seq, sent)).unwrap();
            assert_eq!(body.len(), BODY_SIZE, "seq {seq} sent {sent}");
            let probe = Probe::read(&body).unwrap();
            assert_eq!((probe.seq, probe.sent_ns), (seq, sent));
        }
    }

    #[test]
    fn raw_events_carry_the_contract_headers() {
        let (props, body) = raw_event(1, 2).unwrap();
        assert_eq!(body.len(), BODY_SIZE);
        assert_eq!(
            props.content_type().map(String::as_str),
            Some("application/json")
        );
        assert_eq!(props.delivery_mode(), Some(2));
        let headers = props.headers().unwrap();
        for name in ["x-event-id", "x-source", "x-node", "x-time"] {
            assert!(
                headers.as_ref().keys().any(|k| k.to_string() == name),
                "{name} missing"
            );
        }
    }
}
