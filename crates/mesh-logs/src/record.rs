//! A log record as it rides `mesh.logs`: one JSON document per message.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One log record.
///
/// Unknown fields are ignored when reading, so a newer shipper's records still read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LogRecord {
    /// When it was logged, RFC 3339.
    pub time: String,
    /// The node of the process that logged it.
    pub node: String,
    /// The process or module that logged it.
    pub source: String,
    /// `error`, `warn`, `info`, `debug` or `trace`.
    pub level: String,
    /// The tracing target (usually the module path).
    #[serde(default)]
    pub target: String,
    /// The message.
    #[serde(default)]
    pub message: String,
    /// The event's other fields.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub fields: BTreeMap<String, Value>,
    /// The spans it was logged in, outermost first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spans: Vec<SpanRecord>,
}

/// A span a record was logged in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SpanRecord {
    /// The span's name (`mesh.handle`).
    pub name: String,
    /// Its fields (`key`, `id`, `queue`, …).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub fields: BTreeMap<String, Value>,
}

impl SpanRecord {
    pub(crate) fn new(name: String, fields: BTreeMap<String, Value>) -> SpanRecord {
        SpanRecord { name, fields }
    }
}

impl LogRecord {
    pub(crate) fn new(
        node: String,
        source: String,
        level: &'static str,
        target: String,
    ) -> LogRecord {
        LogRecord {
            time: mesh_core::Timestamp::now().to_string(),
            node,
            source,
            level: level.to_owned(),
            target,
            message: String::new(),
            fields: BTreeMap::new(),
            spans: Vec::new(),
        }
    }

    /// Its routing key on `mesh.logs`: `<node>.<source>.<level>`.
    pub fn routing_key(&self) -> String {
        format!("{}.{}.{}", self.node, self.source, self.level)
    }

    /// Reads a message from `mesh.logs`. A body that is not a record (a foreign publisher's
    /// plain text) still reads: node, source and level come from the routing key and the
    /// body, as text, is the message.
    pub(crate) fn from_message(routing_key: &str, body: &[u8]) -> LogRecord {
        if let Ok(record) = serde_json::from_slice::<LogRecord>(body) {
            return record;
        }
        let mut words = routing_key.splitn(3, '.');
        let mut word = || words.next().unwrap_or_default().to_owned();
        let (node, source, level) = (word(), word(), word());
        LogRecord {
            time: mesh_core::Timestamp::now().to_string(),
            node,
            source,
            level,
            target: String::new(),
            message: String::from_utf8_lossy(body).trim_end().to_owned(),
            fields: BTreeMap::new(),
            spans: Vec::new(),
        }
    }
}

/// One line: `<time> <LEVEL> <node>.<source> <spans>: <target>: <message> <k=v…>`.
impl fmt::Display for LogRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {:>5} {}.{}",
            self.time,
            self.level.to_uppercase(),
            self.node,
            self.source
        )?;
        for span in &self.spans {
            write!(f, " {}", span.name)?;
            if !span.fields.is_empty() {
                f.write_str("{")?;
                write_fields(f, &span.fields)?;
                f.write_str("}")?;
            }
        }
        if !self.target.is_empty() {
            write!(f, " {}:", self.target)?;
        }
        write!(f, " {}", self.message)?;
        if !self.fields.is_empty() {
            f.write_str(" ")?;
            write_fields(f, &self.fields)?;
        }
        Ok(())
    }
}

fn write_fields(f: &mut fmt::Formatter<'_>, fields: &BTreeMap<String, Value>) -> fmt::Result {
    for (i, (name, value)) in fields.iter().enumerate() {
        if i > 0 {
            f.write_str(" ")?;
        }
        match value {
            Value::String(text) => write!(f, "{name}={text}")?,
            other => write!(f, "{name}={other}")?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_prints_on_one_line() {
        let mut record = LogRecord::new(
            "anchor".to_owned(),
            "billing".to_owned(),
            "warn",
            "billing::quotes".to_owned(),
        );
        record.message = "quote failed".to_owned();
        record.fields.insert("plan".to_owned(), Value::from("gold"));
        record.spans.push(SpanRecord::new(
            "mesh.handle".to_owned(),
            BTreeMap::from([("attempt".to_owned(), Value::from(2))]),
        ));
        assert_eq!(record.routing_key(), "anchor.billing.warn");
        let body = serde_json::to_vec(&record).unwrap();
        assert_eq!(LogRecord::from_message("ignored.when.json", &body), record);
        let line = record.to_string();
        assert!(
            line.ends_with(
                " WARN anchor.billing mesh.handle{attempt=2} billing::quotes: quote failed plan=gold"
            ),
            "{line}"
        );
    }

    #[test]
    fn a_foreign_text_message_reads_from_its_routing_key() {
        let record = LogRecord::from_message("edge.nginx.error", b"upstream timed out\n");
        assert_eq!(
            (
                record.node.as_str(),
                record.source.as_str(),
                record.level.as_str()
            ),
            ("edge", "nginx", "error")
        );
        assert_eq!(record.message, "upstream timed out");
    }
}
