//! `mesh contract docs`: the page of the contracts read from files, written to a file or to
//! stdout, is the console's page of that system (`mesh_console::contract_docs`), with every
//! key and tool in it and every value a module chose escaped. (The page in a browser:
//! `crates/mesh-console/tests/contract_docs.rs`.)

use mesh_contract::System;
use mesh_testkit::TempDir;
use serde_json::{json, Value};

use crate::{assert_code, run, stderr, stdout};

fn shop() -> Value {
    json!({"owner": "module.shop", "node": "anchor",
           "emits": [{"key": "module.shop.order.placed", "version": 2,
                      "schema": {"type": "object", "description": "<script>alert('x')</script>",
                                 "properties": {"id": {"type": "string"}}}}],
           "serves": [{"tool": "shop.quote",
                       "request": {"type": "object", "properties": {"plan": {"type": "string"}}},
                       "reply": {"type": "integer"}}]})
}

fn billing() -> Value {
    json!({"owner": "module.billing", "node": "anchor",
           "handles": [{"pattern": "module.shop.#"}],
           "calls": [{"tool": "shop.quote"}]})
}

#[tokio::test]
async fn docs_writes_the_page_of_the_contracts_to_a_file_or_stdout() {
    let dir = TempDir::new("contract-docs").expect("a temporary directory");
    let contracts = dir.join("contracts.json");
    std::fs::write(&contracts, json!([shop(), billing()]).to_string()).expect("written");
    let from = contracts.display().to_string();
    let page = dir.join("contracts.html");
    let out = page.display().to_string();

    let output = run(None, &["contract", "docs", "--from", &from, "--out", &out]).await;
    assert_code(&output, 0);
    assert!(stderr(&output).contains("wrote"), "{}", stderr(&output));
    let written = std::fs::read_to_string(&page).expect("the page was written");
    let system = System::from_json(&json!([shop(), billing()]).to_string()).expect("a system");
    assert_eq!(
        written,
        mesh_console::contract_docs(&system, mesh_console::DEFAULT_DOCS_TITLE)
    );
    for shown in [
        "module.shop.order.placed",
        "shop.quote",
        "module.billing (module.shop.#)",
        "&lt;script&gt;alert('x')&lt;/script&gt;",
    ] {
        assert!(written.contains(shown), "{shown} missing");
    }
    assert!(!written.contains("<script"), "an unescaped script");

    // To stdout, titled: the title is escaped too.
    let output = run(
        None,
        &[
            "contract",
            "docs",
            "--from",
            &from,
            "--title",
            "<shop & co>",
        ],
    )
    .await;
    assert_code(&output, 0);
    let text = stdout(&output);
    assert!(text.starts_with("<!DOCTYPE html>"), "{text}");
    assert!(
        text.contains("<title>&lt;shop &amp; co&gt;</title>"),
        "{text}"
    );
}

#[tokio::test]
async fn docs_of_a_file_that_is_no_contract_is_a_usage_error() {
    let dir = TempDir::new("contract-docs").expect("a temporary directory");
    let bad = dir.join("bad.json");
    std::fs::write(&bad, "{\"owner\": 7}").expect("written");
    let output = run(
        None,
        &["contract", "docs", "--from", &bad.display().to_string()],
    )
    .await;
    assert_code(&output, 2);
    assert!(stdout(&output).is_empty(), "{}", stdout(&output));
    assert!(
        stderr(&output).contains("cannot read the contracts of"),
        "{}",
        stderr(&output)
    );
}
