//! `mesh contract`: the exit codes of `check` on a breaking and a compatible pair of files,
//! `codegen rust` on files,
//! and `show`, `export` and `check` reading announcements from a seeded audit store (the
//! newest of each owner; an unreadable one skipped with a warning naming its event id). No
//! broker: the announcements are written into the store as the audit logger would.

use std::time::Duration;

use bytes::Bytes;
use mesh_audit::{Store, StoreOptions};
use mesh_core::{codec, Envelope, EventId, Headers, RoutingKey, SchemaVersion, Timestamp};
use mesh_testkit::{TempDir, TempStore};
use serde_json::{json, Value};

use crate::{assert_code, run, stderr, stdout};

fn order(total: &str) -> Value {
    json!({
        "type": "object",
        "required": ["id", "total"],
        "properties": {"id": {"type": "string"}, "total": {"type": total},
                       "customer": {"$ref": "#/definitions/Customer"}},
        "definitions": {"Customer": {"type": "object", "properties": {"name": {"type": "string"}}}},
    })
}

fn shop(version: u32, total: &str) -> Value {
    json!({"owner": "module.shop", "node": "anchor",
           "emits": [{"key": "module.shop.order.placed", "version": version, "schema": order(total)}],
           "serves": [{"tool": "shop.quote",
                       "request": {"type": "object", "properties": {"plan": {"type": "string"}}},
                       "reply": {"type": "object", "properties": {"price": {"type": "integer"}}}}]})
}

fn billing() -> Value {
    json!({"owner": "module.billing", "node": "anchor",
           "emits": [{"key": "module.billing.invoice.paid", "version": 1}],
           "handles": [{"pattern": "module.shop.order.placed", "version": 1, "schema": order("integer")}],
           "calls": [{"tool": "shop.quote"}]})
}

fn mailer() -> Value {
    json!({"owner": "module.mailer", "node": "relay",
           "handles": [{"pattern": "module.*.invoice.paid"}, {"pattern": "module.shop.#"}]})
}

fn write(dir: &TempDir, name: &str, value: &Value) -> String {
    let path = dir.join(name);
    std::fs::write(&path, value.to_string()).expect("written");
    path.display().to_string()
}

fn temp_dir() -> TempDir {
    TempDir::new("contract").expect("a temporary directory")
}

#[tokio::test]
async fn check_exits_11_on_a_breaking_change_and_0_when_compatible() {
    let dir = temp_dir();
    let before = write(
        &dir,
        "before.json",
        &json!([shop(1, "integer"), billing(), mailer()]),
    );
    // The shop retypes `total` under a new version: billing's handler and the mailer read it.
    let retyped = write(
        &dir,
        "retyped.json",
        &json!([shop(2, "string"), billing(), mailer()]),
    );
    // The shop adds an optional field under a new version: compatible.
    let mut added = shop(2, "integer");
    added["emits"][0]["schema"]["properties"]["coupon"] = json!({"type": "string"});
    let compatible = write(
        &dir,
        "compatible.json",
        &json!([added, billing(), mailer()]),
    );

    let output = run(None, &["contract", "check", "--against", &before, &retyped]).await;
    assert_code(&output, 11);
    let text = stdout(&output);
    assert!(
        text.contains("field-retyped module.shop.order.placed /total")
            && text.contains("breaks its readers: module.billing, module.mailer")
            && text.contains("1 breaking change"),
        "{text}"
    );
    let output = run(
        None,
        &[
            "contract",
            "check",
            "--against",
            &before,
            &retyped,
            "--json",
        ],
    )
    .await;
    assert_code(&output, 11);
    let lines: Vec<Value> = stdout(&output)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON lines"))
        .collect();
    assert_eq!(lines[0]["rule"], "field-retyped");
    assert_eq!(lines[0]["path"], "/total");
    assert_eq!(lines[0]["breaks"], "readers");
    assert_eq!(
        lines[0]["broken"],
        json!(["module.billing", "module.mailer"])
    );
    assert_eq!(lines[1], json!({"breaking": 1, "compatible": false}));

    let output = run(
        None,
        &["contract", "check", "--against", &before, &compatible],
    )
    .await;
    assert_code(&output, 0);
    assert!(
        stdout(&output).contains("compatible"),
        "{}",
        stdout(&output)
    );

    // An exported AsyncAPI document is a contract `check` reads back.
    let exported = dir.join("exported.json").display().to_string();
    let output = run(
        None,
        &["contract", "export", "--from", &before, "--out", &exported],
    )
    .await;
    assert_code(&output, 0);
    let output = run(
        None,
        &["contract", "check", "--against", &exported, &retyped],
    )
    .await;
    assert_code(&output, 11);
    let output = run(
        None,
        &["contract", "check", "--against", &exported, &before],
    )
    .await;
    assert_code(&output, 0);
    // An empty newer contract is an error, not "compatible".
    let empty = write(&dir, "empty.json", &json!([]));
    let output = run(None, &["contract", "check", "--against", &before, &empty]).await;
    assert_code(&output, 1);
    assert!(
        stderr(&output).contains("the newer contract has no module"),
        "{}",
        stderr(&output)
    );
}

#[tokio::test]
async fn hostile_files_are_a_usage_error_naming_the_file() {
    let dir = temp_dir();
    let not_json = dir.join("not.json");
    std::fs::write(&not_json, "{\"owner\": ").expect("written");
    let bad_key = write(
        &dir,
        "bad.json",
        &json!({"owner": "module.a", "node": "n",
        "emits": [{"key": "module.a.#", "version": 1}]}),
    );
    let forged = write(
        &dir,
        "forged.json",
        &json!({"key": "module.b.contract.announced",
        "body": {"owner": "module.a", "node": "n"}}),
    );
    for (file, words) in [
        (not_json.display().to_string(), "not a contract in JSON"),
        (bad_key, "invalid contract of `module.a`"),
        (forged, "another owner's"),
    ] {
        let output = run(None, &["contract", "show", "--from", &file]).await;
        assert_code(&output, 2);
        let error = stderr(&output);
        assert!(error.contains(&file) && error.contains(words), "{error}");
    }
}

/// `codegen rust`: the types of what a module consumes or calls, on stdout or in a file; an
/// unknown module is a usage error.
#[tokio::test]
async fn codegen_writes_the_types_a_module_consumes_or_calls() {
    let dir = temp_dir();
    let files = [
        write(&dir, "shop.json", &shop(1, "integer")),
        write(&dir, "billing.json", &billing()),
        write(&dir, "mailer.json", &mailer()),
    ];
    let mut args = vec![
        "contract",
        "codegen",
        "rust",
        "--module",
        "module.billing",
        "--from",
    ];
    args.extend(files.iter().map(String::as_str));
    let output = run(None, &args).await;
    assert_code(&output, 0);
    let code = stdout(&output);
    assert!(code.contains("pub struct ShopOrderPlaced {"), "{code}");
    assert!(
        code.contains("const KEY: &'static str = \"module.shop.order.placed\";"),
        "{code}"
    );
    assert!(
        code.contains("pub const SHOP_QUOTE: &str = \"shop.quote\";"),
        "{code}"
    );
    assert!(code.contains("pub struct ShopQuoteRequest {"), "{code}");
    // billing emits invoice.paid; it does not handle it.
    assert!(!code.contains("InvoicePaid"), "{code}");

    let out = dir.join("contract.rs");
    let out_arg = out.display().to_string();
    let mut to_file = args.clone();
    to_file.extend(["--out", out_arg.as_str()]);
    assert_code(&run(None, &to_file).await, 0);
    assert_eq!(std::fs::read_to_string(&out).expect("written"), code);

    let mut unknown = vec![
        "contract",
        "codegen",
        "rust",
        "-m",
        "module.nobody",
        "--from",
    ];
    unknown.extend(files.iter().map(String::as_str));
    let output = run(None, &unknown).await;
    assert_code(&output, 2);
    assert!(
        stderr(&output).contains("module.nobody"),
        "{}",
        stderr(&output)
    );
}

/// An exported document whose payload was edited afterwards, as either side of `check`: the
/// edit is never passed over (check reads the system the document carries, which the edit did
/// not change), so check refuses the document, naming it, with the usage exit code.
#[tokio::test]
async fn check_refuses_a_document_edited_after_the_export_either_side() {
    let dir = temp_dir();
    let files = write(&dir, "system.json", &json!([shop(1, "integer"), billing()]));
    let exported = dir.join("exported.json").display().to_string();
    let output = run(
        None,
        &["contract", "export", "--from", &files, "--out", &exported],
    )
    .await;
    assert_code(&output, 0);
    let mut document: Value =
        serde_json::from_str(&std::fs::read_to_string(&exported).expect("written")).expect("JSON");
    let message = &mut document["components"]["messages"]["module.shop.order.placed.v1"];
    assert!(
        message["payload"]["properties"]["total"].is_object(),
        "{message}"
    );
    message["payload"]["properties"]["total"] = json!({"type": "string"});
    let edited = write(&dir, "edited.json", &document);

    // Unedited against itself: compatible.
    let output = run(
        None,
        &["contract", "check", "--against", &exported, &exported],
    )
    .await;
    assert_code(&output, 0);
    for (old, new) in [(&exported, &edited), (&edited, &exported)] {
        let output = run(None, &["contract", "check", "--against", old, new]).await;
        assert_code(&output, 2);
        let error = stderr(&output);
        assert!(
            error.contains(edited.as_str())
                && error.contains("edited after `mesh contract export`"),
            "{error}"
        );
    }
}

/// The exported document names the broker as its server, from `--server` or the connection's
/// URL, without its user or password; its title and version come from the options.
#[tokio::test]
async fn export_names_the_broker_without_credentials_and_takes_a_title_and_version() {
    let dir = temp_dir();
    let files = write(&dir, "system.json", &json!([shop(1, "integer"), billing()]));
    let output = run(
        Some("amqps://alice:s3cr%40t@broker.example:5673,second.example/prod"),
        &[
            "contract",
            "export",
            "--from",
            &files,
            "--title",
            "Shop system",
            "--document-version",
            "2.4.0",
        ],
    )
    .await;
    assert_code(&output, 0);
    let text = stdout(&output);
    assert!(!text.contains("alice") && !text.contains("s3cr"), "{text}");
    let document: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(
        document["servers"]["broker"],
        json!({"host": "broker.example:5673", "protocol": "amqps", "pathname": "/prod",
               "description": document["servers"]["broker"]["description"]})
    );
    assert_eq!(document["info"]["title"], "Shop system");
    assert_eq!(document["info"]["version"], "2.4.0");

    let output = run(
        None,
        &[
            "contract",
            "export",
            "--from",
            &files,
            "--server",
            "amqp://bob:pw@localhost/",
        ],
    )
    .await;
    assert_code(&output, 0);
    let document: Value = serde_json::from_str(&stdout(&output)).expect("JSON");
    assert_eq!(document["servers"]["broker"]["host"], "localhost:5672");
    assert_eq!(document["servers"]["broker"]["pathname"], "/%2F");
    assert!(!stdout(&output).contains("bob"));
}

/// An announcement as a bus publishes it and the logger records it.
fn announcement(contract: &Value, ago: Duration) -> mesh_core::WireMessage {
    let owner = contract["owner"].as_str().expect("an owner");
    let (_, name) = owner.split_once('.').expect("origin.name");
    body_event(EventId::new(), owner, name, contract.to_string(), ago)
}

fn body_event(
    id: EventId,
    owner: &str,
    name: &str,
    body: String,
    ago: Duration,
) -> mesh_core::WireMessage {
    codec::encode(&Envelope {
        id,
        key: RoutingKey::parse(&format!("{owner}.contract.announced")).expect("a key"),
        source: name.to_owned(),
        node: "anchor".to_owned(),
        time: Timestamp::now().checked_sub(ago).expect("a time"),
        causation_id: None,
        schema: Some(SchemaVersion(1)),
        extra_headers: Headers::new(),
        body: Bytes::from(body),
    })
}

async fn open(store: &TempStore) -> Store {
    let options: StoreOptions = store.url().parse().expect("a store URL");
    Store::open(options.create_if_missing(true))
        .await
        .expect("the store opens")
}

#[tokio::test]
async fn show_export_and_check_read_the_newest_announcements_from_the_store() {
    let temp = TempStore::sqlite();
    let store = open(&temp).await;
    let minute = Duration::from_secs(60);
    // The shop announced twice (an older contract without its tool first); the mailer's
    // newest announcement is not a contract: skipped, its older one is used.
    let mut older_shop = shop(1, "integer");
    older_shop["serves"] = json!([]);
    let bad_id = EventId::new();
    let bad = body_event(
        bad_id,
        "module.mailer",
        "mailer",
        r#"{"owner": 7}"#.to_owned(),
        minute,
    );
    // A billing announcement of a format this version does not read: skipped too.
    let future_id = EventId::new();
    let mut future = body_event(
        future_id,
        "module.billing",
        "billing",
        billing().to_string(),
        minute,
    );
    future
        .properties
        .headers
        .insert(codec::SCHEMA.to_owned(), mesh_core::HeaderValue::UInt(2));
    store
        .record_events(&[
            announcement(&older_shop, minute * 10),
            announcement(&shop(1, "integer"), minute * 5),
            announcement(&billing(), minute * 5),
            announcement(&mailer(), minute * 5),
            bad,
            future,
        ])
        .await
        .expect("recorded");

    let output = run(None, &["contract", "show", "--store", temp.url()]).await;
    assert_code(&output, 0);
    let text = stdout(&output);
    for line in [
        "module.shop.order.placed",
        "  emitted by  module.shop (v1)",
        "  handled by  module.billing v1, module.mailer (module.shop.#)",
        "module.billing.invoice.paid",
        "  handled by  module.mailer (module.*.invoice.paid)",
        "tool shop.quote",
        "  served by   module.shop",
        "  called by   module.billing",
    ] {
        assert!(text.lines().any(|l| l == line), "{line:?} in\n{text}");
    }
    let warning = stderr(&output);
    assert!(
        warning.contains(&format!(
            "skipping the announcement {bad_id} (module.mailer.contract.announced)"
        )),
        "{warning}"
    );
    assert!(
        warning.contains(&format!(
            "skipping the announcement {future_id} (module.billing.contract.announced): \
             an announcement of format 2"
        )),
        "{warning}"
    );

    let output = run(None, &["contract", "show", "--store", temp.url(), "--json"]).await;
    assert_code(&output, 0);
    let rows: Vec<Value> = stdout(&output)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    assert_eq!(rows.len(), 3, "two keys and a tool: {rows:?}");
    assert_eq!(
        rows[2],
        json!({"tool": "shop.quote", "servers": ["module.shop"], "callers": ["module.billing"]})
    );

    // The exported document lists every key, message schema and operation.
    let dir = temp_dir();
    let earlier = dir.join("earlier.json").display().to_string();
    let output = run(
        None,
        &[
            "contract",
            "export",
            "--store",
            temp.url(),
            "--out",
            &earlier,
        ],
    )
    .await;
    assert_code(&output, 0);
    let document: Value =
        serde_json::from_str(&std::fs::read_to_string(&earlier).expect("written")).expect("JSON");
    assert_eq!(document["asyncapi"], "3.0.0");
    assert_eq!(
        document["channels"]["module.shop.order.placed"]["address"],
        "module.shop.order.placed"
    );
    assert_eq!(
        document["components"]["messages"]["module.shop.order.placed.v1"]["payload"]["properties"]
            ["customer"]["$ref"],
        "#/components/schemas/Customer"
    );
    for operation in [
        "module.shop.send.module.shop.order.placed",
        "module.shop.serve.shop.quote",
        "module.billing.receive.module.shop.order.placed",
        "module.billing.call.shop.quote",
        "module.mailer.receive.module.billing.invoice.paid",
    ] {
        assert!(
            document["operations"].get(operation).is_some(),
            "{operation}"
        );
    }
    let output = run(
        None,
        &[
            "contract",
            "export",
            "--store",
            temp.url(),
            "--module",
            "module.billing",
            "--format",
            "system",
        ],
    )
    .await;
    assert_code(&output, 0);
    let system: Value = serde_json::from_str(&stdout(&output)).expect("JSON");
    assert_eq!(system["modules"].as_array().map(Vec::len), Some(1));

    // Against itself: compatible. Then the shop changes a field's type and announces again.
    let output = run(
        None,
        &[
            "contract",
            "check",
            "--against",
            &earlier,
            "--store",
            temp.url(),
        ],
    )
    .await;
    assert_code(&output, 0);
    store
        .record_events(&[announcement(&shop(1, "string"), Duration::ZERO)])
        .await
        .expect("recorded");
    let output = run(
        None,
        &[
            "contract",
            "check",
            "--against",
            &earlier,
            "--store",
            temp.url(),
        ],
    )
    .await;
    assert_code(&output, 11);
    let text = stdout(&output);
    assert!(
        text.contains("field-retyped module.shop.order.placed /total"),
        "{text}"
    );
    assert!(
        text.contains("shape-changed-same-version module.shop.order.placed"),
        "{text}"
    );
    store.close().await;
}

/// An owner whose newest announcements are all unreadable, more of them than one page of the
/// search: `show`, `export` and `check` still use its last readable contract, however far
/// back, and name every announcement they skipped.
#[tokio::test]
async fn an_owner_behind_many_unreadable_announcements_keeps_its_last_good_contract() {
    let temp = TempStore::sqlite();
    let store = open(&temp).await;
    let minute = Duration::from_secs(60);
    let mut events = vec![
        announcement(&shop(1, "integer"), minute * 60),
        announcement(&billing(), minute * 60),
    ];
    // 45 unreadable announcements of the shop, all newer than its good one (more than two
    // pages of the search).
    let bad: Vec<EventId> = (0..45).map(|_| EventId::new()).collect();
    for (i, id) in bad.iter().enumerate() {
        let ago = minute * 50 - Duration::from_secs(i as u64);
        events.push(body_event(
            *id,
            "module.shop",
            "shop",
            r#"{"owner": 7}"#.to_owned(),
            ago,
        ));
    }
    store.record_events(&events).await.expect("recorded");

    let output = run(None, &["contract", "show", "--store", temp.url()]).await;
    assert_code(&output, 0);
    let text = stdout(&output);
    assert!(
        text.lines().any(|l| l == "  served by   module.shop"),
        "the shop's contract is still read:\n{text}"
    );
    let warning = stderr(&output);
    for id in &bad {
        assert!(
            warning.contains(&format!(
                "skipping the announcement {id} (module.shop.contract.announced)"
            )),
            "{id} named in\n{warning}"
        );
    }

    // Exported, the shop is still there; checked against the system as it was announced,
    // nothing changed (without the shop, its tool would read as no longer served).
    let output = run(
        None,
        &[
            "contract",
            "export",
            "--store",
            temp.url(),
            "--format",
            "system",
        ],
    )
    .await;
    assert_code(&output, 0);
    let system: Value = serde_json::from_str(&stdout(&output)).expect("JSON");
    let owners: Vec<&str> = system["modules"]
        .as_array()
        .expect("modules")
        .iter()
        .filter_map(|m| m["owner"].as_str())
        .collect();
    assert!(owners.contains(&"module.shop"), "{owners:?}");
    let dir = temp_dir();
    let announced = write(
        &dir,
        "announced.json",
        &json!([shop(1, "integer"), billing()]),
    );
    let output = run(
        None,
        &[
            "contract",
            "check",
            "--against",
            &announced,
            "--store",
            temp.url(),
        ],
    )
    .await;
    assert_code(&output, 0);
    store.close().await;
}
