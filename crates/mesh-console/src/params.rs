//! Query strings and form bodies: decoded leniently (bad percent-encoding becomes U+FFFD),
//! repeated keys kept, so every input reaches the page's own checks. And the links the
//! console builds from data: every path segment and query value percent-encoded
//! ([`under`], [`link`]), so a name with `/`, `?`, `#` or `%2e%2e` in it links to its own
//! page, which decodes it back (axum's `Path`, [`Params`]).

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// What a path segment keeps as it is: letters, digits and RFC 3986's other unreserved
/// characters (`-`, `.`, `_`, `~`); everything else is percent-encoded.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The decoded pairs of a query string or form body.
#[derive(Debug, Default, Clone)]
pub(crate) struct Params(Vec<(String, String)>);

impl Params {
    pub(crate) fn parse(raw: Option<&str>) -> Params {
        Params::from_bytes(raw.unwrap_or_default().as_bytes())
    }

    pub(crate) fn from_bytes(raw: &[u8]) -> Params {
        Params(
            form_urlencoded::parse(raw)
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    /// The first non-empty value of `name`, trimmed.
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.trim())
            .find(|v| !v.is_empty())
    }

    /// Every non-empty value of `name`.
    pub(crate) fn all(&self, name: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.trim())
            .filter(|v| !v.is_empty())
            .collect()
    }
}

/// `path?k=v&…`, the pairs percent-encoded.
pub(crate) fn link<'a>(path: &str, pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        query.append_pair(k, v);
    }
    let query = query.finish();
    if query.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{query}")
    }
}

/// `path/segment`, the segment percent-encoded: `/modules/n1.a%2Fb%3Fc.events`.
///
/// A segment of only dots (`.`, `..`) names nothing the console shows (no id, no queue is
/// one), and a browser resolves it as a step, encoded (`%2e%2e`) or not: its link is
/// `path/`, which answers 404, never another page.
pub(crate) fn under(path: &str, segment: impl std::fmt::Display) -> String {
    let segment = segment.to_string();
    if segment.bytes().all(|b| b == b'.') {
        return format!("{path}/");
    }
    format!("{path}/{}", utf8_percent_encode(&segment, SEGMENT))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::under;

    /// The segment of a link as a browser (WHATWG URL) resolves it, percent-decoded.
    fn resolved(href: &str) -> Option<String> {
        let base = reqwest::Url::parse("http://127.0.0.1:8642/events?key=x").ok()?;
        let url = base.join(href).ok()?;
        let path = url.path().strip_prefix("/modules/")?;
        if path.contains('/') || url.query().is_some() || url.fragment().is_some() {
            return None;
        }
        percent_encoding::percent_decode_str(path)
            .decode_utf8()
            .ok()
            .map(|s| s.into_owned())
    }

    #[test]
    fn hostile_names_stay_in_their_segment() {
        for name in [
            "n1.a/%2e%2e/%2e%2e/dead?x#y.events",
            "n1.a b&c=d;e.events",
            "n1...events",
            "n1.ünï.events",
        ] {
            let href = under("/modules", name);
            assert_eq!(resolved(&href).as_deref(), Some(name), "{href}");
        }
        assert_eq!(
            under("/modules", "n1.billing.events"),
            "/modules/n1.billing.events"
        );
        // Only dots: the list's own path, no step up.
        for name in [".", "..", "..."] {
            assert_eq!(under("/modules", name), "/modules/");
            assert_eq!(resolved(&under("/modules", name)).as_deref(), Some(""));
        }
    }

    proptest! {
        #[test]
        fn any_name_links_to_its_own_segment(
            name in prop_oneof!["\\PC{1,40}", "[./?#%2eE& \\\\]{1,20}"],
        ) {
            let href = under("/modules", &name);
            let expected = if name.bytes().all(|b| b == b'.') { String::new() } else { name };
            prop_assert_eq!(resolved(&href), Some(expected), "{}", href);
        }
    }
}
