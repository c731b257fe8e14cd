//! The console's static assets, embedded in the binary: its one stylesheet, the script every
//! page loads, the live page's and the re-drive confirmation's. They are files of their own, never inlined in a page, so the
//! Content-Security-Policy ([`crate::headers`]) can allow styles and scripts from the console
//! itself only.
//!
//! Each is served with a strong `ETag` (a digest of its content) and `Cache-Control:
//! no-cache`: a browser keeps it and asks again with `If-None-Match`, and gets a `304` until
//! a new console serves a changed file.

use std::sync::LazyLock;

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

/// Where pages link the stylesheet (its route in `routes.rs`).
pub(crate) const STYLESHEET: &str = "/assets/console.css";
/// Where every page links the console's script (its route in `routes.rs`).
pub(crate) const SCRIPT: &str = "/assets/console.js";
/// Where the live page links its script (its route in `routes.rs`).
pub(crate) const LIVE_SCRIPT: &str = "/assets/live.js";
/// Where a re-drive's confirmation links its script, which posts the batches and shows the
/// progress (its route in `routes.rs`).
pub(crate) const REDRIVE_SCRIPT: &str = "/assets/redrive.js";

/// An embedded file: its content, its media type and its entity tag.
pub(crate) struct Asset {
    content: &'static str,
    media_type: &'static str,
    etag: HeaderValue,
}

impl Asset {
    fn new(content: &'static str, media_type: &'static str) -> Asset {
        let digest = Sha256::digest(content.as_bytes());
        let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
        Asset {
            content,
            media_type,
            // Only hex digits between quotes: always a valid header value.
            etag: HeaderValue::from_str(&format!("\"{hex}\""))
                .unwrap_or_else(|_| HeaderValue::from_static("\"0\"")),
        }
    }

    /// The asset, or `304 Not Modified` when the request already holds this version.
    fn respond(&self, request: &HeaderMap) -> Response {
        let cache = [
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            (header::ETAG, self.etag.clone()),
        ];
        let held = request
            .get_all(header::IF_NONE_MATCH)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .any(|tag| tag.trim() == self.etag || tag.trim() == "*");
        if held {
            return (StatusCode::NOT_MODIFIED, cache).into_response();
        }
        (
            cache,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static(self.media_type),
            )],
            self.content,
        )
            .into_response()
    }
}

static STYLE: LazyLock<Asset> = LazyLock::new(|| {
    Asset::new(
        include_str!("../assets/console.css"),
        "text/css; charset=utf-8",
    )
});

static LIVE: LazyLock<Asset> = LazyLock::new(|| {
    Asset::new(
        include_str!("../assets/live.js"),
        "text/javascript; charset=utf-8",
    )
});

static REDRIVE: LazyLock<Asset> = LazyLock::new(|| {
    Asset::new(
        include_str!("../assets/redrive.js"),
        "text/javascript; charset=utf-8",
    )
});

static SCRIPT_ASSET: LazyLock<Asset> = LazyLock::new(|| {
    Asset::new(
        include_str!("../assets/console.js"),
        "text/javascript; charset=utf-8",
    )
});

/// `/assets/console.css`: the stylesheet every page links.
pub(crate) async fn style(request: HeaderMap) -> Response {
    STYLE.respond(&request)
}

/// `/assets/live.js`: the live page's script.
pub(crate) async fn live_script(request: HeaderMap) -> Response {
    LIVE.respond(&request)
}

/// `/assets/redrive.js`: a re-drive confirmation's script (batches, progress).
pub(crate) async fn redrive_script(request: HeaderMap) -> Response {
    REDRIVE.respond(&request)
}

/// `/assets/console.js`: the script every page links (local times, auto-refresh).
pub(crate) async fn script(request: HeaderMap) -> Response {
    SCRIPT_ASSET.respond(&request)
}
