//! A module queue whose name holds `/`, `?`, `&`, `%2e%2e` and a space (a module may call
//! itself anything without a dot or a wildcard), on a real broker (a vhost of the test's
//! own): every link the console draws to it, on the overview and the system map, resolves (as
//! a browser resolves it) to that queue's own page, which names it; and the page's link to
//! its dead letters lists that queue's.

mod common;

use std::time::Duration;

use common::{at, dead, event, get, serve};
use mesh::amqp::management::ManagementClient;
use mesh::amqp::AmqpOptions;
use mesh::Bus;
use mesh_audit::{Store, StoreOptions};
use mesh_console::Console;
use mesh_core::DeadReason;
use mesh_testkit::sdk::transport;
use mesh_testkit::{eventually, TempStore, TestVhost};

const WAIT: Duration = Duration::from_secs(60);

/// The module's name: a path up and out of `/modules/`, a query, a parameter, a space.
const MODULE: &str = "a/%2e%2e/%2e%2e/dead?x&y=1 %zz";

/// `text` as the templates escape it.
fn escaped(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// An attribute value as a browser reads it.
fn unescaped(text: &str) -> String {
    text.replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

/// The `href` of every link of `html` that `before` (up to `href="`) or `after` (from the
/// value's closing quote) marks.
fn hrefs(html: &str, before: &str, after: &str) -> Vec<String> {
    html.match_indices(&format!("{before}href=\""))
        .filter_map(|(at, marker)| {
            let rest = &html[at + marker.len()..];
            let end = rest.find('"')?;
            rest[end..]
                .starts_with(after)
                .then(|| unescaped(&rest[..end]))
        })
        .collect()
}

/// `href` resolved against the page at `page`, as a browser resolves it (dot segments,
/// `%2e%2e` among them, removed).
fn resolve(page: &str, href: &str) -> anyhow::Result<String> {
    Ok(reqwest::Url::parse(page)?.join(href)?.to_string())
}

#[tokio::test]
async fn a_queue_with_a_hostile_name_links_to_its_own_page() -> anyhow::Result<()> {
    let vhost = TestVhost::create("console-links").await?;
    let url = vhost.url();
    let queue = format!("n1.{MODULE}.events");
    let module = Bus::builder()
        .node("n1")
        .module(MODULE)
        .on_raw(["module.shop.order.placed"], |_| async { Ok(()) })
        .start(transport(&url).await?)
        .await?;

    let temp = TempStore::sqlite();
    let store = Store::open(temp.url().parse::<StoreOptions>()?).await?;
    let (_, message) = event("module.shop.order.placed", "shop", at(60), None, b"{}");
    store.record_events(std::slice::from_ref(&message)).await?;
    store
        .record_dead_letters(&[dead(&message, DeadReason::Permanent, &queue)])
        .await?;
    let management = mesh::amqp::management_options(&url.parse::<AmqpOptions>()?)
        .expect("an address to derive the API from");
    let served =
        serve(Console::new(store).management(ManagementClient::new(&management)?, vhost.name()))
            .await?;
    let base = &served.base;

    // The overview's table of module queues (once the management API lists the queue).
    let overview = format!("{base}/");
    let from_overview = eventually(WAIT, "the overview lists the queue", || {
        let overview = overview.clone();
        async move {
            let (_, html) = get(&overview).await.ok()?;
            let found = hrefs(&html, "class=\"queue\" ", "\"");
            (!found.is_empty()).then_some(found)
        }
    })
    .await;
    // The system map: the queue's node, and the flows table's receiver.
    let map_page = format!("{base}/map");
    let (status, map) = get(&map_page).await?;
    assert_eq!(status, 200, "{map}");
    let from_map = hrefs(&map, "<a ", "\"><rect class=\"node queue\"");
    let from_flows = hrefs(&map, "class=\"receiver\" ", "\"");
    assert_eq!(from_map.len(), 1, "the map's queue node: {map}");
    assert_eq!(from_flows.len(), 1, "the flows' receiver: {map}");

    let heading = format!("<h1>Module queue {}</h1>", escaped(&queue));
    for (page, href) in [
        (&overview, &from_overview[0]),
        (&map_page, &from_map[0]),
        (&map_page, &from_flows[0]),
    ] {
        let target = resolve(page, href)?;
        let (status, html) = get(&target).await?;
        assert_eq!(status, 200, "{href} → {target}: {html}");
        assert!(
            html.contains(&heading),
            "{href} → {target} is not the queue's page: {html}"
        );
        // Its dead letters: the group of exactly this queue.
        let pending = hrefs(&html, "<a ", "\">1</a>");
        assert_eq!(pending.len(), 1, "the link to its dead letters: {html}");
        let (status, list) = get(&resolve(&target, &pending[0])?).await?;
        assert_eq!(status, 200, "{list}");
        assert!(
            list.contains(&format!(
                "<h1>Dead letters of {} (every reason)</h1>",
                escaped(&queue)
            )),
            "{}: {list}",
            pending[0]
        );
    }
    module.close().await;
    Ok(())
}
