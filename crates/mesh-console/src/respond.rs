//! How a handler answers: a page in the console's layout (the stylesheet inlined), or a
//! [`Fail`], a page that says with its status why nothing else rendered.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use maud::{html, Markup, DOCTYPE};
use tracing::warn;

use crate::Console;

pub(crate) type Shared = State<Arc<Console>>;
pub(crate) type Page = Result<Response, Fail>;

pub(crate) const STYLE: &str = "\
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d232b;background:#f6f7f9}\
header{background:#1d232b;padding:.6em 1.2em}header a{color:#fff;margin-right:1.4em;text-decoration:none;font-weight:600}\
main{padding:1em 1.4em;max-width:1200px}h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.6em}\
table{border-collapse:collapse;background:#fff}td,th{padding:.3em .7em;border-bottom:1px solid #e3e6ea;text-align:left;vertical-align:top}\
th{background:#eef0f3}pre{background:#fff;border:1px solid #e3e6ea;padding:.7em;overflow:auto;max-height:40em}\
.error{color:#a4161a;font-weight:600}.ok{color:#2b7a0b;font-weight:600}.note{color:#5b6470}.num{text-align:right}\
form.search input{margin-right:.5em}a{color:#1f5fbf}\
.chart rect{fill:#3b7dd8}.chart text{font-size:12px;fill:#1d232b}\
.tree rect.node{fill:#fff;stroke:#3b7dd8}.tree rect.focus{fill:#fff3bf;stroke:#c27c0e;stroke-width:2}\
.tree text{font-size:12px;fill:#1d232b}.tree .edge{fill:none;stroke:#8a94a3}\
button.danger{background:#a4161a;color:#fff;border:0;padding:.4em 1em}\
.map rect.node{fill:#fff;stroke:#3b7dd8}.map rect.key{stroke:#8a94a3}.map rect.queue{stroke:#2b7a0b}\
.map text{font-size:12px;fill:#1d232b}.map text.column{font-weight:600}\
.map .edge{fill:none;stroke:#8a94a3;stroke-width:1.5}.map a:hover .edge{stroke:#c27c0e;stroke-width:3}\
#live td.body{font-family:monospace;font-size:12px;color:#5b6470}";

fn layout(title: &str, body: &Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · mesh console" }
                style { (maud::PreEscaped(STYLE)) }
            }
            body {
                header {
                    a href="/" { "Overview" }
                    a href="/events" { "Events" }
                    a href="/dead" { "Dead letters" }
                    a href="/live" { "Live" }
                    a href="/map" { "System map" }
                }
                main { (*body) }
            }
        }
    }
}

#[allow(clippy::needless_pass_by_value)] // Every page hands its markup over.
pub(crate) fn page(title: &str, body: Markup) -> Page {
    Ok(Html(layout(title, &body).into_string()).into_response())
}

/// A page that did not render: its status and a message that says why.
#[derive(Debug)]
pub(crate) struct Fail {
    status: StatusCode,
    message: String,
}

impl Fail {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Fail {
        Fail {
            status,
            message: message.into(),
        }
    }

    pub(crate) fn message(&self) -> &str {
        &self.message
    }
}

impl IntoResponse for Fail {
    fn into_response(self) -> Response {
        let title = self.status.canonical_reason().unwrap_or("Error");
        let body = html! {
            h1 { (self.status.as_u16()) " " (title) }
            p.error { (self.message) }
        };
        (self.status, Html(layout(title, &body).into_string())).into_response()
    }
}

pub(crate) fn bad(message: impl Into<String>) -> Fail {
    Fail {
        status: StatusCode::BAD_REQUEST,
        message: message.into(),
    }
}

pub(crate) fn missing(message: impl Into<String>) -> Fail {
    Fail {
        status: StatusCode::NOT_FOUND,
        message: message.into(),
    }
}

pub(crate) fn forbidden(message: impl Into<String>) -> Fail {
    Fail {
        status: StatusCode::FORBIDDEN,
        message: message.into(),
    }
}

/// A store that failed: logged, and shown without its details.
pub(crate) fn unavailable(what: &str, error: &mesh_audit::Error) -> Fail {
    warn!(error = %mesh_core::text::EscapedDisplay(&error), "{what} failed");
    Fail {
        status: StatusCode::SERVICE_UNAVAILABLE,
        message: format!("{what} failed: the audit store did not answer (see the console's log)"),
    }
}

/// User input shown back: at most 100 characters (the template escapes it).
pub(crate) fn shown(text: &str) -> String {
    let mut out: String = text.chars().take(100).collect();
    if out.len() < text.len() {
        out.push('…');
    }
    out
}
