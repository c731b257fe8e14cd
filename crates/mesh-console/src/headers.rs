//! The headers every response carries, pages, errors, assets and the live stream alike: one
//! layer around the whole router ([`secure`]), so no route can forget them.
//!
//! - `Content-Security-Policy` ([`POLICY`]): nothing loads but from the console itself
//!   (scripts, styles, the stream, images), no inline script or style runs, forms post only
//!   to the console, and no page of another origin may frame it (`frame-ancestors 'none'`):
//!   a foreign page cannot show a confirmation inside a frame of its own and have the
//!   operator click it.
//! - `X-Frame-Options: DENY`: the same refusal, for browsers that predate `frame-ancestors`.
//! - `X-Content-Type-Options: nosniff`: a response is only what its `Content-Type` says.
//! - `Referrer-Policy: same-origin`: a link followed out of the console does not tell the
//!   other site which page (and query) it came from. Not `no-referrer`: under it a browser
//!   sends `Origin: null` with the console's own form posts, which the origin check of every
//!   action (see the crate's docs) must then refuse.

use axum::http::header::{
    CONTENT_SECURITY_POLICY, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use axum::http::HeaderValue;
use axum::response::Response;

/// The console's Content-Security-Policy.
pub(crate) const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; \
     frame-ancestors 'none'";

/// Sets the security headers on `response` (over any a handler set).
pub(crate) async fn secure(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static(POLICY));
    headers.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    response
}
