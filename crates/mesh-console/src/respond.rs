//! How a handler answers: a page in the console's layout (linking the stylesheet), or a
//! [`Fail`], a page that says with its status why nothing else rendered.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use maud::{html, Markup, DOCTYPE};
use tracing::warn;

use crate::assets::{SCRIPT, STYLESHEET};
use crate::Console;

pub(crate) type Shared = State<Arc<Console>>;
pub(crate) type Page = Result<Response, Fail>;

fn layout(title: &str, body: &Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · mesh console" }
                link rel="stylesheet" href=(STYLESHEET);
                script src=(SCRIPT) defer {}
            }
            body {
                header {
                    a href="/" { "Overview" }
                    a href="/events" { "Events" }
                    a href="/dead" { "Dead letters" }
                    a href="/live" { "Live" }
                    a href="/map" { "System map" }
                    a href="/contracts" { "Contracts" }
                }
                main { (*body) }
            }
        }
    }
}

/// How often a page with [`auto_refresh`] ticked fetches itself, in seconds.
pub(crate) const REFRESH_SECONDS: u32 = 5;

/// The opt-in auto-refresh box: while ticked, the console's script swaps the page's
/// `#refreshed` part for a fresh one every [`REFRESH_SECONDS`] (no reload).
pub(crate) fn auto_refresh() -> Markup {
    html! {
        label.refresh {
            input #auto-refresh type="checkbox" data-every=(REFRESH_SECONDS);
            " refresh every " (REFRESH_SECONDS) " s"
        }
    }
}

#[allow(clippy::needless_pass_by_value)] // Every page hands its markup over.
pub(crate) fn page(title: &str, body: Markup) -> Page {
    Ok(Html(layout(title, &body).into_string()).into_response())
}

/// A page in the layout with `status`: a form shown again with what was wrong in it.
#[allow(clippy::needless_pass_by_value)] // Every page hands its markup over.
pub(crate) fn page_with_status(status: StatusCode, title: &str, body: Markup) -> Page {
    Ok((status, Html(layout(title, &body).into_string())).into_response())
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

    pub(crate) fn status(&self) -> StatusCode {
        self.status
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
