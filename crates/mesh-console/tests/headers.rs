//! Every response of every route (pages, errors, assets, the live stream, refusals) carries
//! the security headers, and no page holds an inline script or style that the policy would
//! refuse.

mod common;

use std::sync::Arc;

use common::{client, seeded, serve, TOKEN};
use mesh_audit::DeadLetterQuery;
use mesh_console::{Console, Tokens};
use reqwest::header::HeaderMap;
use reqwest::Method;

/// The routes as the router declares them: each `.route("…"` of `src/routes.rs` (each
/// path written out, so none escapes this list).
fn declared_routes() -> Vec<String> {
    let source = include_str!("../src/routes.rs");
    source
        .split(".route(")
        .skip(1)
        .map(|rest| {
            let path = rest
                .trim_start()
                .strip_prefix('"')
                .and_then(|rest| Some(&rest[..rest.find('"')?]));
            path.map(str::to_owned)
                .unwrap_or_else(|| panic!("a route whose path is not written out: {rest}"))
        })
        .collect()
}

/// What is wrong with the security headers of a response, if anything.
fn header_faults(headers: &HeaderMap) -> Vec<String> {
    let value = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let policy = value("content-security-policy");
    let directives: Vec<&str> = policy.split(';').map(str::trim).collect();
    let mut faults = Vec::new();
    for wanted in [
        "frame-ancestors 'none'",
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
    ] {
        if !directives.contains(&wanted) {
            faults.push(format!("no `{wanted}` in the policy {policy:?}"));
        }
    }
    for (name, wanted) in [
        ("x-frame-options", "DENY"),
        ("x-content-type-options", "nosniff"),
        ("referrer-policy", "same-origin"),
    ] {
        if value(name) != wanted {
            faults.push(format!("{name}: {:?}, not {wanted}", value(name)));
        }
    }
    faults
}

/// What in a page the policy would refuse: an inline `<style>`, a `style` attribute, a
/// `<script>` without `src`, an event handler attribute.
fn inline_faults(html: &str) -> Vec<String> {
    let mut faults = Vec::new();
    if html.contains("<style") {
        faults.push("a <style> element".to_owned());
    }
    if html.contains(" style=") {
        faults.push("a style attribute".to_owned());
    }
    for script in html.split("<script").skip(1) {
        let tag = &script[..script.find('>').unwrap_or(script.len())];
        if !tag.contains(" src=") {
            faults.push("an inline <script>".to_owned());
        }
    }
    if html.contains(" onclick=") || html.contains(" onload=") || html.contains("javascript:") {
        faults.push("an inline event handler".to_owned());
    }
    faults
}

#[tokio::test]
async fn every_response_of_every_route_carries_the_security_headers() -> anyhow::Result<()> {
    let seed = seeded().await?;
    let broker = mesh::MemoryBroker::new();
    let served = serve(
        Console::new(seed.store.clone())
            .tokens(Tokens::single("alice", TOKEN)?)
            .transport(Arc::new(broker.transport())),
    )
    .await?;
    let base = &served.base;
    let dead = seed
        .store
        .dead_letters(&DeadLetterQuery::new().limit(1))
        .await?
        .pop()
        .expect("a seeded dead letter");
    let routes = declared_routes();
    assert!(
        routes.len() >= 14,
        "the routes of src/routes.rs: {routes:?}"
    );
    let http = client();
    let mut checked = 0;
    for route in &routes {
        // Each route with a real parameter, a hostile one, and with bad input.
        let filled = [
            route
                .replace("{id}", &dead.id.to_string())
                .replace("{queue}", "n1.billing.events"),
            route
                .replace("{id}", "..%2F%3Cx%3E")
                .replace("{queue}", "n1.a%2F%2e%2e%3Fx.events"),
            format!("{route}?limit=0&key=%23%23&queue="),
        ];
        for path in filled {
            for method in [Method::GET, Method::POST, Method::DELETE] {
                if path.starts_with("/live/stream") && method == Method::GET {
                    // An open stream (or its 400): only its head is read, then it is
                    // dropped.
                    let response = http.get(format!("{base}{path}")).send().await?;
                    let faults = header_faults(response.headers());
                    assert!(faults.is_empty(), "GET {path}: {faults:?}");
                    checked += 1;
                    continue;
                }
                let response = http
                    .request(method.clone(), format!("{base}{path}"))
                    .header("origin", base.as_str())
                    .header("content-type", "application/x-www-form-urlencoded")
                    .body("token=not-the-token")
                    .send()
                    .await?;
                let status = response.status();
                let faults = header_faults(response.headers());
                assert!(faults.is_empty(), "{method} {path} ({status}): {faults:?}");
                let html = response.text().await?;
                let faults = inline_faults(&html);
                assert!(faults.is_empty(), "{method} {path} ({status}): {faults:?}");
                checked += 1;
            }
        }
    }
    // The refusal of an unknown `Host`, before any route.
    let response = http
        .get(format!("{base}/"))
        .header("host", "elsewhere.example")
        .send()
        .await?;
    assert_eq!(response.status(), 421);
    let faults = header_faults(response.headers());
    assert!(faults.is_empty(), "421: {faults:?}");
    assert!(checked > 3 * routes.len(), "{checked} responses checked");
    Ok(())
}

#[tokio::test]
async fn pages_link_their_style_and_script_which_are_served_with_cache_headers(
) -> anyhow::Result<()> {
    let seed = seeded().await?;
    let broker = mesh::MemoryBroker::new();
    let served =
        serve(Console::new(seed.store.clone()).transport(Arc::new(broker.transport()))).await?;
    let base = &served.base;
    let http = client();
    let (status, page) = common::get(&format!("{base}/live")).await?;
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains(r#"<link rel="stylesheet" href="/assets/console.css">"#),
        "{page}"
    );
    assert!(
        page.contains(r#"<script src="/assets/live.js"></script>"#),
        "{page}"
    );
    for (path, media_type, content) in [
        (
            "/assets/console.css",
            "text/css",
            "header{background:#1d232b",
        ),
        ("/assets/live.js", "text/javascript", "new EventSource("),
    ] {
        let response = http.get(format!("{base}{path}")).send().await?;
        assert_eq!(response.status(), 200, "{path}");
        let headers = response.headers().clone();
        let value = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        assert!(value("content-type").starts_with(media_type), "{path}");
        assert_eq!(value("cache-control"), "no-cache", "{path}");
        let etag = value("etag");
        assert!(etag.starts_with('"') && etag.len() > 10, "{path}: {etag}");
        assert!(response.text().await?.contains(content), "{path}");
        // Asked again with the version it holds: not modified, no body.
        let again = http
            .get(format!("{base}{path}"))
            .header("if-none-match", &etag)
            .send()
            .await?;
        assert_eq!(again.status(), 304, "{path}");
        assert!(header_faults(again.headers()).is_empty(), "{path}");
        assert!(again.text().await?.is_empty());
        // Another version: the file.
        let other = http
            .get(format!("{base}{path}"))
            .header("if-none-match", "\"0\"")
            .send()
            .await?;
        assert_eq!(other.status(), 200, "{path}");
    }
    Ok(())
}
