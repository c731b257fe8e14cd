//! Text output cannot be spoofed: control and bidi characters a publisher puts in header
//! values and bodies reach `mesh tail`'s text output escaped, on one line.

use bytes::Bytes;
use mesh::raw::{codec, EventId, PublishOptions, Transport, WireMessage};

use crate::{assert_code, finish, options, stdout, tail, transport, vhost, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_escapes_control_and_bidi_characters_of_wire_fields() {
    let vhost = vhost("cli-spoof").await;
    let url = vhost.url();
    let (tail, _errors) = tail(&url, "mesh.#", &["--count", "1"]).await;

    // A `mesh.<context>` key: its source is not checked against the key, so the header
    // values are free text. Each tries to forge a line or rewrite the terminal.
    let mut message = WireMessage::new(
        "mesh.forge.ping",
        Bytes::from("{\r\n\"name\":\"\u{202E}gpj.exe\"}"),
    );
    message.properties.content_type = Some(codec::CONTENT_TYPE_JSON.into());
    let headers = &mut message.properties.headers;
    headers.insert(codec::EVENT_ID.into(), EventId::new().to_string().into());
    headers.insert(codec::SOURCE.into(), "cli\u{1b}[2J".into());
    headers.insert(
        codec::NODE.into(),
        "anchor\r\n2026-01-01T00:00:00Z module.billing.invoice.paid forged".into(),
    );
    headers.insert(codec::TIME.into(), "2026-09-03T12:00:00Z".into());
    headers.insert(codec::CAUSATION_ID.into(), "c\u{2066}\u{85}".into());
    let raw = transport(options(&vhost)).await;
    let confirm = raw
        .publish(message, PublishOptions::default())
        .await
        .expect("published");
    tokio::time::timeout(WAIT, confirm)
        .await
        .expect("confirmed in time")
        .expect("confirmed");

    let output = finish(tail).await;
    assert_code(&output, 0);
    let text = stdout(&output);
    assert_eq!(text.lines().count(), 1, "one event, one line: {text:?}");
    let line = text.trim_end_matches('\n');
    assert!(
        !line.chars().any(|c| c.is_control()),
        "no control character printed: {line:?}"
    );
    for escaped in [
        "cli\\u{1b}[2J@anchor\\r\\n2026-01-01T00:00:00Z module.billing.invoice.paid forged",
        "{\\r\\n\"name\":\"\\u{202e}gpj.exe\"}",
        "(caused by c\\u{2066}\\u{85})",
    ] {
        assert!(line.contains(escaped), "{escaped} in {line}");
    }
    Transport::close(raw.as_ref()).await;
    vhost.delete().await.expect("vhost deleted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_shows_the_real_key_whatever_a_publisher_writes_in_mesh_headers() {
    let vhost = vhost("cli-forged-key").await;
    let url = vhost.url();
    let (tail, _errors) = tail(&url, "module.shop.#", &["--count", "1"]).await;

    let mut message = WireMessage::new("module.shop.order.placed", Bytes::from("{}"));
    message.properties.content_type = Some(codec::CONTENT_TYPE_JSON.into());
    let headers = &mut message.properties.headers;
    headers.insert(codec::EVENT_ID.into(), EventId::new().to_string().into());
    headers.insert(codec::SOURCE.into(), "shop".into());
    headers.insert(codec::NODE.into(), "anchor".into());
    headers.insert(codec::TIME.into(), "2026-09-03T12:00:00Z".into());
    headers.insert(
        codec::ROUTING_KEY.into(),
        "module.billing.invoice.paid".into(),
    );
    let raw = transport(options(&vhost)).await;
    let confirm = raw
        .publish(message, PublishOptions::default())
        .await
        .expect("published");
    tokio::time::timeout(WAIT, confirm)
        .await
        .expect("confirmed in time")
        .expect("confirmed");

    let output = finish(tail).await;
    assert_code(&output, 0);
    let text = stdout(&output);
    assert!(text.contains("module.shop.order.placed"), "{text}");
    assert!(!text.contains("billing"), "{text}");
    Transport::close(raw.as_ref()).await;
    vhost.delete().await.expect("vhost deleted");
}
