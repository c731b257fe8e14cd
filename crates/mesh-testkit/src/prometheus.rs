//! Reading a Prometheus text exposition (format 0.0.4), as the tests scrape it from a
//! `/metrics` endpoint.
//!
//! [`sample`] finds one value; [`samples`] parses every sample line. The text comes from the
//! process under test, so it is treated as untrusted: a line that is not a well-formed sample
//! (no value, an unterminated label value, a bad escape, trailing garbage) is skipped, never
//! a panic. Label values are unescaped (`\\`, `\"`, `\n`), so `("path", "a\"b")` matches
//! `path="a\"b"`.

/// One sample line: `name{labels} value [timestamp]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The metric name, with any `_total`, `_count`, `_bucket`, … suffix.
    pub name: String,
    /// The labels in the order written, values unescaped.
    pub labels: Vec<(String, String)>,
    /// The value (`NaN`, `+Inf` and `-Inf` included).
    pub value: f64,
}

impl Sample {
    /// The value of label `name`, if the sample has it.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The value of the first sample named `name` that has every label of `labels` with that
/// value (it may have more); `None` when there is none.
///
/// ```
/// use mesh_testkit::prometheus::sample;
/// let text = "# TYPE mesh_handled_total counter\n\
///             mesh_handled_total{queue=\"n.a.events\",outcome=\"ok\"} 4\n\
///             mesh_handled_total{queue=\"n.a.events\",outcome=\"retry\"} 1\n";
/// assert_eq!(sample(text, "mesh_handled_total", &[("outcome", "retry")]), Some(1.0));
/// assert_eq!(sample(text, "mesh_handled_total", &[]), Some(4.0));
/// assert_eq!(sample(text, "mesh_handled", &[]), None);
/// ```
pub fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter_map(parse_line)
        .find(|s| s.name == name && labels.iter().all(|(k, v)| s.label(k) == Some(*v)))
        .map(|s| s.value)
}

/// Every well-formed sample line of `text`, in order; comments, blank and malformed lines
/// are skipped.
pub fn samples(text: &str) -> Vec<Sample> {
    text.lines().filter_map(parse_line).collect()
}

/// One line as a sample; `None` for a comment, a blank or a malformed line.
fn parse_line(line: &str) -> Option<Sample> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line
        .char_indices()
        .find(|&(i, c)| !is_name_char(c, i == 0, true))
        .map_or(line.len(), |(i, _)| i);
    if name_end == 0 {
        return None;
    }
    let (name, mut rest) = line.split_at(name_end);
    let mut labels = Vec::new();
    if let Some(after) = rest.trim_start().strip_prefix('{') {
        let (parsed, after) = parse_labels(after)?;
        labels = parsed;
        rest = after;
    }
    // The value and an optional integer timestamp, separated by white space.
    if !rest.starts_with([' ', '\t']) {
        return None;
    }
    let mut fields = rest.split_whitespace();
    let value = parse_value(fields.next()?)?;
    if let Some(timestamp) = fields.next() {
        timestamp.parse::<i64>().ok()?;
    }
    if fields.next().is_some() {
        return None;
    }
    Some(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// The labels after `{` up to and including `}`, and what follows the `}`.
fn parse_labels(mut rest: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut labels = Vec::new();
    loop {
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix('}') {
            return Some((labels, after));
        }
        let name_end = rest
            .char_indices()
            .find(|&(i, c)| !is_name_char(c, i == 0, false))
            .map_or(rest.len(), |(i, _)| i);
        if name_end == 0 {
            return None;
        }
        let (name, after) = rest.split_at(name_end);
        let after = after.trim_start().strip_prefix('=')?;
        let after = after.trim_start().strip_prefix('"')?;
        let (value, after) = parse_quoted(after)?;
        labels.push((name.to_owned(), value));
        rest = after.trim_start();
        if let Some(after) = rest.strip_prefix(',') {
            rest = after;
        } else if !rest.starts_with('}') {
            return None;
        }
    }
}

/// A label value after its opening quote, unescaped, and what follows its closing quote.
fn parse_quoted(text: &str) -> Option<(String, &str)> {
    let mut value = String::new();
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((value, &text[i + 1..])),
            '\\' => match chars.next()?.1 {
                '\\' => value.push('\\'),
                '"' => value.push('"'),
                'n' => value.push('\n'),
                _ => return None,
            },
            c => value.push(c),
        }
    }
    None
}

/// A sample value: a float, `NaN`, `+Inf` or `-Inf`.
fn parse_value(text: &str) -> Option<f64> {
    match text {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        // Rust's float syntax also takes `inf`, `infinity` and `nan` in any case, which
        // Prometheus' does not: those are rejected here.
        _ if text
            .bytes()
            .any(|b| b.is_ascii_alphabetic() && !matches!(b, b'e' | b'E')) =>
        {
            None
        }
        _ => text.parse().ok(),
    }
}

/// Whether `c` may stand in a metric name (`colon`) or label name at that place.
fn is_name_char(c: char, first: bool, colon: bool) -> bool {
    c.is_ascii_alphabetic() || c == '_' || (colon && c == ':') || (!first && c.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
# HELP mesh_handled_total Deliveries handled, by outcome.
# TYPE mesh_handled_total counter
mesh_handled_total{queue=\"n.a.events\",outcome=\"ok\"} 4
mesh_handled_total{queue=\"n.b.events\",outcome=\"ok\"} 2 1712345678000
mesh_ready{node=\"n1\"} 1
mesh_audit_events_stored_total 17
mesh_latency_seconds_bucket{le=\"+Inf\"} 3
mesh_gauge{path=\"a \\\"quoted\\\" b\\\\c\\nd\",x=\"y\",} -1.5e3
";

    #[test]
    fn finds_by_name_and_a_subset_of_labels() {
        assert_eq!(
            sample(TEXT, "mesh_handled_total", &[("queue", "n.b.events")]),
            Some(2.0)
        );
        assert_eq!(
            sample(
                TEXT,
                "mesh_handled_total",
                &[("queue", "n.a.events"), ("outcome", "ok")]
            ),
            Some(4.0)
        );
        assert_eq!(sample(TEXT, "mesh_handled_total", &[]), Some(4.0));
        assert_eq!(
            sample(TEXT, "mesh_audit_events_stored_total", &[]),
            Some(17.0)
        );
        assert_eq!(sample(TEXT, "mesh_ready", &[("node", "n1")]), Some(1.0));
        assert_eq!(sample(TEXT, "mesh_ready", &[("node", "n2")]), None);
        assert_eq!(
            sample(TEXT, "mesh_handled", &[]),
            None,
            "a prefix is not a name"
        );
        assert_eq!(
            sample(TEXT, "mesh_handled_total", &[("queue", "n.a")]),
            None,
            "a prefix is not a label value"
        );
        assert_eq!(
            sample(TEXT, "mesh_handled_total", &[("ueue", "n.a.events")]),
            None,
            "a suffix is not a label name"
        );
    }

    #[test]
    fn label_values_are_unescaped_and_a_trailing_comma_is_allowed() {
        assert_eq!(
            sample(
                TEXT,
                "mesh_gauge",
                &[("path", "a \"quoted\" b\\c\nd"), ("x", "y")]
            ),
            Some(-1500.0)
        );
        let all = samples(TEXT);
        assert_eq!(all.len(), 6);
        assert_eq!(all[4].label("le"), Some("+Inf"));
    }

    #[test]
    fn special_values_and_timestamps() {
        let text = "a +Inf\nb -Inf\nc NaN\nd 1 -5\ne inf\nf nan\ng 0x10\nh 1.5 1.5\n";
        let all = samples(text);
        let names: Vec<&str> = all.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c", "d"]);
        assert_eq!(all[0].value, f64::INFINITY);
        assert_eq!(all[1].value, f64::NEG_INFINITY);
        assert!(all[2].value.is_nan());
        assert_eq!(all[3].value, 1.0);
    }

    #[test]
    fn hostile_lines_are_skipped_never_a_panic() {
        let hostile = [
            "",
            "   ",
            "#",
            "no_value",
            "no_value ",
            "no_value{a=\"b\"}",
            "no_value{a=\"b\"} ",
            "{a=\"b\"} 1",
            " 1",
            "1abc 1",
            "m{a=\"unterminated} 1",
            "m{a=\"bad escape \\x\"} 1",
            "m{a=\"trailing backslash\\",
            "m{a=\"b\" 1",
            "m{a=b} 1",
            "m{=\"b\"} 1",
            "m{a} 1",
            "m{a=\"b\"c=\"d\"} 1",
            "m{a=\"b\"}1",
            "m{a=\"b\"} one",
            "m{a=\"b\"} 1 2 3",
            "m{a=\"b\"} 1 not-a-time",
            "m{{}} 1",
            "m}{ 1",
            "m{a=\"é\\",
            "m{a=\"é\"} ∞",
            "ünïcode 1",
            "m{a=\"\\\"} 1",
        ];
        for line in hostile {
            assert_eq!(samples(line), [], "{line:?}");
            assert_eq!(sample(line, "m", &[]), None, "{line:?}");
        }
        // Good lines among bad ones are still found.
        let mixed = format!("{}\nm{{a=\"b\"}} 7\n", hostile.join("\n"));
        assert_eq!(sample(&mixed, "m", &[("a", "b")]), Some(7.0));
    }

    #[test]
    fn an_escaped_quote_does_not_end_the_value() {
        let text = "m{a=\"x\\\" b=\\\"y\"} 1\n";
        assert_eq!(sample(text, "m", &[("a", "x\" b=\"y")]), Some(1.0));
        assert_eq!(sample(text, "m", &[("b", "y")]), None);
    }
}
