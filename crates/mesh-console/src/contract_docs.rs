//! The contracts of a system as one self-contained HTML page (`mesh contract docs`): per
//! key, its schemas, versions, emitters and handlers; per tool, its request and reply
//! schemas, the errors it may answer with, its servers and its callers.
//!
//! Built on the model `mesh contract show` and `export` use ([`System::key_table`],
//! [`System::tool_table`]). The page loads nothing: its one stylesheet is inline, it has no
//! script, and it links only within itself, so it can be opened from a file, mailed or
//! served anywhere. Every value a module chose (owners, keys, patterns, schemas with their
//! descriptions) is escaped by the template.

use std::collections::BTreeSet;

use maud::{html, Markup, DOCTYPE};
use mesh_contract::{KeyRow, System, ToolRow};
use mesh_core::contract::ModuleContract;
use mesh_core::RemoteError;
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use serde_json::Value;

/// The page's title when none is given.
pub const DEFAULT_DOCS_TITLE: &str = "mesh system";

/// The page's one stylesheet, inline: the page loads nothing.
const STYLE: &str = "\
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d232b;background:#f6f7f9}\
header{background:#1d232b;color:#fff;padding:.6em 1.2em}\
header h1{font-size:1.4em;margin:.2em 0}\
main{padding:1em 1.4em;max-width:1200px}\
h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #c9ced6}\
h3{font-size:1.05em;margin:.2em 0;font-family:ui-monospace,monospace}\
article{background:#fff;border:1px solid #e3e6ea;padding:.6em 1em;margin:.8em 0}\
table{border-collapse:collapse;background:#fff}\
td,th{padding:.25em .7em;border-bottom:1px solid #e3e6ea;text-align:left;vertical-align:top}\
th{background:#eef0f3;font-weight:600}\
pre{background:#f6f7f9;border:1px solid #e3e6ea;padding:.6em;overflow:auto;max-height:30em;margin:.3em 0}\
code{font-family:ui-monospace,monospace}\
.note{color:#5b6470}\
nav ul{columns:2;margin:.3em 0}\
a{color:#1f5fbf}";

/// The errors every tool may answer with, besides its own codes: the runtime's.
const RUNTIME_ERRORS: [(&str, &str); 6] = [
    (
        RemoteError::INVALID_REQUEST,
        "the request does not fit the tool's request type",
    ),
    (
        RemoteError::SCHEMA_INVALID,
        "the request does not match the request schema (servers validating schemas)",
    ),
    (
        RemoteError::INTERNAL,
        "the tool panicked, its reply could not be serialized, or a layer failed",
    ),
    (
        RemoteError::FORGED_SOURCE,
        "the caller is not who it claims to be (servers enforcing identity)",
    ),
    (
        RemoteError::TIMEOUT,
        "a timeout layer around the tool gave up",
    ),
    (
        RemoteError::OVERLOADED,
        "a layer refused the request before the tool ran",
    ),
];

/// The page of `system`, titled `title`: a complete HTML document.
pub fn contract_docs(system: &System, title: &str) -> String {
    let keys = system.key_table();
    let tools = system.tool_table();
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) }
                style { (maud::PreEscaped(STYLE)) }
            }
            body {
                header {
                    h1 { (title) }
                    p.summary {
                        (count(system.len(), "module")) ", " (count(keys.len(), "key")) ", "
                        (count(tools.len(), "tool"))
                    }
                }
                main {
                    (contents(&keys, &tools))
                    (modules(system))
                    section #keys {
                        h2 { "Events" }
                        @if keys.is_empty() { p.note { "No key is emitted or handled." } }
                        @for row in &keys { (key_article(system, row)) }
                    }
                    section #tools {
                        h2 { "Tools" }
                        @if tools.is_empty() { p.note { "No tool is served or called." } }
                        @for row in &tools { (tool_article(system, row)) }
                    }
                }
            }
        }
    };
    page.into_string()
}

/// `n` and `noun`, plural unless one.
fn count(n: usize, noun: &str) -> String {
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}

/// The anchor of an article: its kind and name, percent-encoded (a pattern's `#`).
fn anchor(kind: &str, name: &str) -> String {
    format!("{kind}-{}", utf8_percent_encode(name, NON_ALPHANUMERIC))
}

fn contents(keys: &[KeyRow], tools: &[ToolRow]) -> Markup {
    html! {
        nav {
            h2 { "Contents" }
            @if !keys.is_empty() {
                p { "Events" }
                ul { @for row in keys {
                    li { a href={ "#" (anchor("key", &row.key)) } { code { (row.key) } } }
                } }
            }
            @if !tools.is_empty() {
                p { "Tools" }
                ul { @for row in tools {
                    li { a href={ "#" (anchor("tool", &row.tool)) } { code { (row.tool) } } }
                } }
            }
        }
    }
}

fn modules(system: &System) -> Markup {
    html! {
        section #modules {
            h2 { "Modules" }
            @if system.is_empty() { p.note { "No contract announced." } }
            @else {
                table {
                    tr { th { "owner" } th { "node" } th { "emits" } th { "handles" }
                         th { "serves" } th { "calls" } }
                    @for module in system.modules() {
                        tr.module {
                            td { code { (module.owner) } }
                            td { (module.node) }
                            td { (module.emits.len()) }
                            td { (module.handles.len()) }
                            td { (module.serves.len()) }
                            td { (module.calls.len()) }
                        }
                    }
                }
            }
        }
    }
}

/// Owners (or any names), comma-separated, or a dim `none`.
fn names<'a>(items: impl IntoIterator<Item = &'a str>) -> Markup {
    let items: Vec<&str> = items.into_iter().collect();
    html! {
        @if items.is_empty() { span.note { "none" } }
        @for (i, item) in items.iter().enumerate() {
            @if i > 0 { ", " }
            code { (item) }
        }
    }
}

/// A JSON Schema, pretty-printed (escaped by the template), or a note that none was declared.
fn schema(label: &str, schema: Option<&Value>) -> Markup {
    html! {
        details.schema open {
            summary { (label) }
            @match schema {
                Some(schema) => pre {
                    (serde_json::to_string_pretty(schema).unwrap_or_else(|_| schema.to_string()))
                },
                None => p.note { "no schema declared" },
            }
        }
    }
}

/// A key's article: versions, emitters, handlers and each one's schema (also the console's
/// `/contracts`).
pub(crate) fn key_article(system: &System, row: &KeyRow) -> Markup {
    let versions: BTreeSet<u32> = row
        .emitters
        .iter()
        .map(|(_, v)| *v)
        .chain(row.handlers.iter().filter_map(|(_, _, v)| *v))
        .collect();
    let versions: Vec<String> = versions.iter().map(|v| format!("v{v}")).collect();
    let handlers: Vec<String> = row
        .handlers
        .iter()
        .map(|(owner, pattern, version)| {
            let version = version.map(|v| format!(" v{v}")).unwrap_or_default();
            if *pattern == row.key {
                format!("{owner}{version}")
            } else {
                format!("{owner} ({pattern}{version})")
            }
        })
        .collect();
    html! {
        article.key id=(anchor("key", &row.key)) {
            h3.name { (row.key) }
            @if row.unmatched_pattern {
                p.note { "A handler's pattern no emitted key matches." }
            }
            table {
                tr { th { "versions" } td.versions { (names(versions.iter().map(String::as_str))) } }
                tr { th { "emitted by" } td.emitters {
                    (names(row.emitters.iter().map(|(o, _)| o.as_str())))
                } }
                tr { th { "handled by" } td.handlers {
                    (names(handlers.iter().map(String::as_str)))
                } }
            }
            @for (owner, version) in &row.emitters {
                (schema(
                    &format!("v{version}, as {owner} emits it"),
                    emit_schema(system.module(owner), &row.key, *version),
                ))
            }
            @for (owner, pattern, version) in &row.handlers {
                @if let Some(read) = handler_schema(system.module(owner), pattern, *version) {
                    (schema(
                        &format!(
                            "{}as {owner} reads it ({pattern})",
                            version.map(|v| format!("v{v}, ")).unwrap_or_default()
                        ),
                        Some(read),
                    ))
                }
            }
        }
    }
}

fn emit_schema<'a>(
    module: Option<&'a ModuleContract>,
    key: &str,
    version: u32,
) -> Option<&'a Value> {
    module?
        .emits
        .iter()
        .find(|e| e.key == key && e.version == version)?
        .schema
        .as_ref()
}

fn handler_schema<'a>(
    module: Option<&'a ModuleContract>,
    pattern: &str,
    version: Option<u32>,
) -> Option<&'a Value> {
    module?
        .handles
        .iter()
        .find(|h| h.pattern == pattern && h.version == version)?
        .schema
        .as_ref()
}

/// A tool's article: servers, callers, its schemas and errors (also the console's
/// `/contracts`).
pub(crate) fn tool_article(system: &System, row: &ToolRow) -> Markup {
    // The schemas its servers declare, else those its callers expect.
    let declared = row
        .servers
        .iter()
        .filter_map(|o| system.module(o))
        .flat_map(|m| &m.serves)
        .chain(
            row.callers
                .iter()
                .filter_map(|o| system.module(o))
                .flat_map(|m| &m.calls),
        )
        .filter(|t| t.tool == row.tool);
    let (mut request, mut reply) = (None, None);
    for tool in declared {
        request = request.or(tool.request.as_ref());
        reply = reply.or(tool.reply.as_ref());
    }
    html! {
        article.tool id=(anchor("tool", &row.tool)) {
            h3.name { (row.tool) }
            table {
                tr { th { "served by" } td.servers {
                    (names(row.servers.iter().map(String::as_str)))
                } }
                tr { th { "called by" } td.callers {
                    (names(row.callers.iter().map(String::as_str)))
                } }
            }
            (schema("request", request))
            (schema("reply", reply))
            details.errors open {
                summary { "errors" }
                p.note {
                    "An error reply carries a code and a message (headers "
                    code { "x-mesh-error-code" } ", " code { "x-mesh-error-message" }
                    "): the tool's own codes, or the runtime's:"
                }
                table {
                    @for (code, meaning) in RUNTIME_ERRORS {
                        tr { td { code { (code) } } td { (meaning) } }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mesh_core::contract::{HandlerContract, MessageContract, ToolContract};
    use serde_json::json;

    fn system() -> System {
        let mut system = System::new();
        system.insert(ModuleContract {
            owner: "module.umami".into(),
            node: "n1".into(),
            emits: vec![MessageContract {
                key: "module.umami.site.created".into(),
                version: 2,
                schema: Some(json!({
                    "type": "object",
                    "description": "</pre><script>alert(1)</script>",
                })),
            }],
            handles: vec![],
            serves: vec![],
            calls: vec![ToolContract {
                tool: "billing.quote".into(),
                request: Some(json!({"type": "string"})),
                reply: None,
            }],
        });
        system.insert(ModuleContract {
            owner: "module.stats".into(),
            node: "n<1>".into(),
            emits: vec![],
            handles: vec![HandlerContract {
                pattern: "module.*.site.#".into(),
                version: None,
                schema: None,
            }],
            serves: vec![],
            calls: vec![],
        });
        system
    }

    #[test]
    fn every_key_and_tool_has_its_article_and_values_are_escaped() {
        let page = contract_docs(&system(), "the <b>system</b>");
        assert!(page.starts_with("<!DOCTYPE html>"), "{page}");
        assert!(page.contains("<title>the &lt;b&gt;system&lt;/b&gt;</title>"));
        assert!(page.contains(r#"id="key-module%2Eumami%2Esite%2Ecreated""#));
        assert!(page.contains(r#"id="tool-billing%2Equote""#));
        assert!(page.contains("module.stats (module.*.site.#)"), "{page}");
        assert!(page.contains("&lt;/pre&gt;&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(!page.contains("<script"), "{page}");
        assert!(page.contains("<td>n&lt;1&gt;</td>"));
        assert!(page.contains(RemoteError::SCHEMA_INVALID));
        assert!(page.contains("2 modules, 1 key, 1 tool"), "{page}");
    }

    #[test]
    fn the_page_loads_nothing() {
        let page = contract_docs(&system(), DEFAULT_DOCS_TITLE);
        for external in ["<link", "<script", "src=", "href=\"http", "url(", "@import"] {
            assert!(!page.contains(external), "{external} in {page}");
        }
        // Every link stays on the page.
        for (i, _) in page.match_indices("href=\"") {
            assert_eq!(
                &page[i + 6..i + 7],
                "#",
                "{}",
                &page[i..(i + 40).min(page.len())]
            );
        }
    }

    #[test]
    fn an_empty_system_says_so() {
        let page = contract_docs(&System::new(), DEFAULT_DOCS_TITLE);
        assert!(page.contains("No contract announced."));
        assert!(page.contains("No key is emitted or handled."));
        assert!(page.contains("No tool is served or called."));
    }
}
