//! The AsyncAPI 3.0 document of a system.
//!
//! - **Channels** are routing keys: one per key some module emits or a handler names as a
//!   plain key, its `address` the key and its id the key itself. A handler whose pattern has
//!   wildcards gets a `receive` operation on every channel whose key it matches (the
//!   operation says the pattern in `x-mesh-pattern`); a pattern that matches no emitted key
//!   gets a channel of its own whose address is the pattern (`x-mesh-pattern: true`), so no
//!   handler is left out. A tool `<t>` is the channel `tool.<t>` (address the tool key) and
//!   its reply the channel `tool.<t>.reply` (address `null`: the caller's reply queue).
//! - **Messages** are `<key>.v<N>` (the name too; the `x-schema` header is `N`) with the
//!   emitter's payload schema; a handler reading a shape of its own is a message
//!   `<key>.v<N>.<module>`; a tool's are `<t>.request` and `<t>.reply`.
//! - **Schemas**: each payload's `definitions` (or `$defs`) move to `components/schemas`, and
//!   its references are rewritten to `#/components/schemas/<Name>`. Definitions of one name
//!   and one shape are shared; a different definition under a name already taken is renamed
//!   `<Name>_2`, `<Name>_3`… in the order the messages are written (by key, then module), so
//!   the same system always gives the same document.
//! - **Operations**, per module: `<owner>.send.<key>` for an emit, `<owner>.receive.<key>` for
//!   a handler, `<owner>.serve.<t>` (`receive`, with a `reply`) and `<owner>.call.<t>`
//!   (`send`, with a `reply`) for tools.
//! - **Announcements**: every exported module's `<origin>.<owner>.contract.announced` is a
//!   channel with the shared message `contract.announced.v1` (the contract's own shape) and
//!   a `send` operation `<owner>.send.<key>`.
//!
//! The document also carries the system itself, as the JSON text of its system document,
//! under [`ASYNCAPI_EXTENSION`], so [`System::from_document`] reads it back exactly (as text,
//! because the contracts' own `#/definitions/…` references would dangle in the document), and
//! the seal of its AsyncAPI half under [`DIGEST_EXTENSION`](crate::DIGEST_EXTENSION), so an
//! edit to that half alone is refused rather than silently ignored (see `seal`).

use std::collections::{BTreeMap, BTreeSet};

use mesh_core::contract::{ModuleContract, ToolContract, CONTRACT_FORMAT};
use mesh_core::topic_matches;
use serde_json::{json, Map, Value};

use crate::schema::{component_name, DEFINITION_KEYS, MAX_SCHEMA_DEPTH};
use crate::system::{System, ASYNCAPI_EXTENSION};
use crate::Error;

mod announced;
mod wire;

/// The AsyncAPI version written.
pub const ASYNCAPI_VERSION: &str = "3.0.0";

/// What to export.
#[derive(Debug, Clone, Default)]
pub struct ExportOptions {
    /// Only this module's operations (and the channels and messages they use).
    pub module: Option<String>,
    /// The document's `info.title` [default: `mesh system`, or the module's owner].
    pub title: Option<String>,
    /// The document's `info.version` [default: `1.0.0`].
    pub version: Option<String>,
    /// The broker, as the document's one server `broker` (never with credentials).
    pub server: Option<Server>,
}

/// The broker a document names as its server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    /// `host:port`.
    pub host: String,
    /// `amqp`, or `amqps` with TLS.
    pub protocol: String,
    /// The virtual host as a path, percent-encoded: `/%2F` for `/`, `/prod`.
    pub pathname: String,
}

/// The AsyncAPI 3.0 document of `system` (or of one module of it), with sorted keys.
pub fn export(system: &System, options: &ExportOptions) -> Result<Value, Error> {
    let carried = match &options.module {
        Some(owner) => system.only(owner)?,
        None => system.clone(),
    };
    let mut doc = Doc::default();
    // Channels of every emitted key, with the emitters' messages, whoever is exported: a
    // handler of the exported module needs the messages it receives.
    for module in system.modules() {
        for emit in &module.emits {
            let id = format!("{}.v{}", emit.key, emit.version);
            doc.message(
                &emit.key,
                &id,
                &id,
                Some(emit.version),
                emit.schema.as_ref(),
            );
        }
    }
    let keys: Vec<String> = doc.channels.keys().cloned().collect();
    for module in carried.modules() {
        let owner = &module.owner;
        for emit in &module.emits {
            let id = format!("{}.v{}", emit.key, emit.version);
            doc.operation(
                format!("{owner}.send.{}", emit.key),
                "send",
                &emit.key,
                &[id],
                None,
                None,
                None,
            );
        }
        for handler in &module.handles {
            let plain = !handler.pattern.contains(['*', '#']);
            let matched: Vec<&String> = keys
                .iter()
                .filter(|k| topic_matches(&handler.pattern, k))
                .collect();
            if plain || matched.is_empty() {
                let channel = handler.pattern.clone();
                let messages = doc.handler_messages(module, handler, &channel);
                doc.channel(&channel, !plain);
                doc.operation(
                    format!("{owner}.receive.{channel}"),
                    "receive",
                    &channel,
                    &messages,
                    None,
                    (!plain).then(|| handler.pattern.clone()),
                    wire::events_queue(&module.node, owner),
                );
                continue;
            }
            for key in matched {
                let messages = doc.handler_messages(module, handler, key);
                doc.operation(
                    format!("{owner}.receive.{key}"),
                    "receive",
                    key,
                    &messages,
                    None,
                    Some(handler.pattern.clone()),
                    wire::events_queue(&module.node, owner),
                );
            }
        }
        for (tools, serving) in [(&module.serves, true), (&module.calls, false)] {
            for tool in tools {
                doc.tool(owner, tool, serving);
            }
        }
    }
    // After the handlers: a wildcard handler is not shown receiving the announcements (the
    // audit logger and the console read them through patterns of their own).
    for module in carried.modules() {
        let channel = announced::key(&module.owner);
        let id = announced::message_id();
        let fresh = !doc.messages.contains_key(&id);
        let schema = announced::schema();
        doc.message(&channel, &id, &id, Some(CONTRACT_FORMAT), Some(&schema));
        if let (true, Some(Value::Object(message))) = (fresh, doc.messages.get_mut(&id)) {
            message.insert("title".into(), json!(announced::title()));
            message.insert("summary".into(), json!(announced::SUMMARY));
        }
        doc.operation(
            format!("{}.send.{channel}", module.owner),
            "send",
            &channel,
            &[id],
            None,
            None,
            None,
        );
    }
    let title = options
        .title
        .clone()
        .unwrap_or_else(|| match &options.module {
            Some(owner) => owner.clone(),
            None => "mesh system".to_owned(),
        });
    let mut document = Map::new();
    document.insert("asyncapi".into(), json!(ASYNCAPI_VERSION));
    document.insert(
        "info".into(),
        json!({
            "title": title,
            "version": options.version.clone().unwrap_or_else(|| "1.0.0".to_owned()),
            "description": "The contract of the modules of a mesh system, as they announced it \
                            (module.<m>.contract.announced). Channels are routing keys on the \
                            mesh.events topic exchange; tools are served over mesh.rpc.",
        }),
    );
    if let Some(server) = &options.server {
        document.insert(
            "servers".into(),
            json!({"broker": {
                "host": server.host, "protocol": server.protocol, "pathname": server.pathname,
                "description": "The RabbitMQ broker and virtual host of the system. Credentials are the module's own (see the access plan)."
            }}),
        );
    }
    document.insert("defaultContentType".into(), json!("application/json"));
    document.insert("channels".into(), sorted(doc.channels_value()));
    document.insert("operations".into(), sorted(doc.operations));
    let mut components = Map::new();
    components.insert("schemas".into(), sorted(doc.schemas));
    components.insert("messages".into(), sorted(doc.messages));
    document.insert("components".into(), Value::Object(components));
    // As JSON text: the contracts' schemas hold `#/definitions/…` references, which would
    // dangle for a tool resolving every reference of the document.
    document.insert(
        ASYNCAPI_EXTENSION.into(),
        Value::String(carried.to_document().to_string()),
    );
    Ok(crate::seal::sealed(document))
}

/// An operation's title in words: `module.shop sends module.shop.order.placed`, from its id
/// `<owner>.<verb>.<what>` (its owner is the id's first two words).
fn describe_operation<'a>(
    id: &'a str,
    action: &str,
    channel: &'a str,
) -> (&'a str, &'static str, &'a str) {
    let owner = id.match_indices('.').nth(1).map_or(id, |(at, _)| &id[..at]);
    let verb = match (action, channel.starts_with("tool.")) {
        ("send", false) => "emits",
        ("receive", false) => "handles",
        ("send", true) => "calls",
        _ => "serves",
    };
    let what = channel.strip_prefix("tool.").unwrap_or(channel);
    (owner, verb, what)
}

fn sorted(map: BTreeMap<String, Value>) -> Value {
    Value::Object(map.into_iter().collect())
}

#[derive(Default)]
struct Doc {
    /// Channel id → (address, whether it is an unmatched pattern, message ids).
    channels: BTreeMap<String, (Value, bool, BTreeSet<String>)>,
    messages: BTreeMap<String, Value>,
    schemas: BTreeMap<String, Value>,
    operations: BTreeMap<String, Value>,
}

impl Doc {
    fn channel(&mut self, id: &str, pattern: bool) {
        self.channels
            .entry(id.to_owned())
            .or_insert_with(|| (json!(id), pattern, BTreeSet::new()));
    }

    /// Adds message `id` on channel `channel` (once).
    fn message(
        &mut self,
        channel: &str,
        id: &str,
        name: &str,
        version: Option<u32>,
        schema: Option<&Value>,
    ) {
        self.channel(channel, false);
        if let Some((_, _, messages)) = self.channels.get_mut(channel) {
            messages.insert(id.to_owned());
        }
        if self.messages.contains_key(id) {
            return;
        }
        let mut message = Map::new();
        message.insert("name".into(), json!(name));
        message.insert("contentType".into(), json!("application/json"));
        if let Some(version) = version {
            message.insert("headers".into(), wire::event_headers(Some(version)));
            message.insert("x-mesh-schema-version".into(), json!(version));
            message.insert("title".into(), json!(format!("{channel} v{version}")));
        } else {
            message.insert("title".into(), json!(name));
        }
        if let Some(schema) = schema {
            let payload = self.payload(id, schema);
            message.insert("payload".into(), payload);
        }
        self.messages.insert(id.to_owned(), Value::Object(message));
    }

    /// The messages a handler receives on `channel`: the emitted ones of the version it reads
    /// (all when it says none), or one of its own when it declares a shape no emitter writes.
    fn handler_messages(
        &mut self,
        module: &ModuleContract,
        handler: &mesh_core::contract::HandlerContract,
        channel: &str,
    ) -> Vec<String> {
        let emitted: Vec<String> = self
            .channels
            .get(channel)
            .map(|(_, _, m)| m.iter().cloned().collect())
            .unwrap_or_default();
        let Some(version) = handler.version else {
            return emitted;
        };
        let id = format!("{channel}.v{version}");
        let same = self.messages.get(&id).is_some_and(|message| {
            handler.schema.is_none() || self.same_payload(message, handler.schema.as_ref())
        });
        if same {
            return vec![id];
        }
        if handler.schema.is_none() && emitted.is_empty() {
            self.message(channel, &id, &id, Some(version), None);
            return vec![id];
        }
        let word = module.owner.rsplit('.').next().unwrap_or_default();
        let own = format!("{id}.{}", component_name(word));
        self.message(channel, &own, &id, Some(version), handler.schema.as_ref());
        vec![own]
    }

    /// Whether `message`'s payload is what `schema` would export to.
    fn same_payload(&self, message: &Value, schema: Option<&Value>) -> bool {
        let Some(schema) = schema else { return true };
        let mut probe = Doc {
            schemas: self.schemas.clone(),
            ..Doc::default()
        };
        let payload = probe.payload("probe", schema);
        message.get("payload") == Some(&payload) && probe.schemas == self.schemas
    }

    fn tool(&mut self, owner: &str, tool: &ToolContract, serving: bool) {
        let channel = format!("tool.{}", tool.tool);
        let reply_channel = format!("{channel}.reply");
        let request = format!("{}.request", tool.tool);
        let reply = format!("{}.reply", tool.tool);
        // The server's schemas are the tool's; a caller's are added only where none is known.
        if serving || !self.messages.contains_key(&request) {
            self.messages.remove(&request);
            self.message(&channel, &request, &request, None, tool.request.as_ref());
        }
        if serving || !self.messages.contains_key(&reply) {
            self.messages.remove(&reply);
            self.message(&reply_channel, &reply, &reply, None, tool.reply.as_ref());
        }
        if let Some(entry) = self.channels.get_mut(&channel) {
            entry.0 = json!(tool.tool);
        }
        if let Some(entry) = self.channels.get_mut(&reply_channel) {
            entry.0 = Value::Null;
        }
        let (id, action) = if serving {
            (format!("{owner}.serve.{}", tool.tool), "receive")
        } else {
            (format!("{owner}.call.{}", tool.tool), "send")
        };
        self.operation(
            id,
            action,
            &channel,
            std::slice::from_ref(&request),
            Some((reply_channel, reply.clone())),
            None,
            serving.then(|| wire::serve_queue(&tool.tool)).flatten(),
        );
        for (id, headers) in [
            (&request, wire::request_headers()),
            (&reply, wire::reply_headers()),
        ] {
            if let Some(Value::Object(message)) = self.messages.get_mut(id) {
                message.insert("headers".into(), headers);
            }
        }
    }

    /// Adds operation `id`; `queue` is the queue it receives from.
    #[allow(clippy::too_many_arguments)]
    fn operation(
        &mut self,
        id: String,
        action: &str,
        channel: &str,
        messages: &[String],
        reply: Option<(String, String)>,
        pattern: Option<String>,
        queue: Option<String>,
    ) {
        let channel_ref = |c: &str| json!({"$ref": format!("#/channels/{}", pointer_token(c))});
        let message_ref = |c: &str, m: &str| json!({"$ref": format!("#/channels/{}/messages/{}", pointer_token(c), pointer_token(m))});
        let mut operation = Map::new();
        operation.insert("action".into(), json!(action));
        operation.insert("channel".into(), channel_ref(channel));
        operation.insert(
            "messages".into(),
            Value::Array(messages.iter().map(|m| message_ref(channel, m)).collect()),
        );
        if let Some((reply_channel, reply_message)) = reply {
            operation.insert(
                "reply".into(),
                json!({"channel": channel_ref(&reply_channel),
                       "messages": [message_ref(&reply_channel, &reply_message)]}),
            );
        }
        if let Some(pattern) = pattern {
            operation.insert("x-mesh-pattern".into(), json!(pattern));
        }
        let (owner, verb, what) = describe_operation(&id, action, channel);
        operation.insert("title".into(), json!(format!("{owner} {verb} {what}")));
        operation.insert(
            "bindings".into(),
            if action == "send" {
                wire::send_operation()
            } else {
                wire::receive_operation()
            },
        );
        if let Some(queue) = queue {
            operation.insert("x-mesh-queue".into(), json!(queue));
        }
        self.operations.insert(id, Value::Object(operation));
    }

    fn channels_value(&self) -> BTreeMap<String, Value> {
        self.channels
            .iter()
            .map(|(id, (address, pattern, messages))| {
                let mut channel = Map::new();
                channel.insert("address".into(), address.clone());
                channel.insert(
                    "messages".into(),
                    Value::Object(
                        messages
                            .iter()
                            .map(|m| {
                                (m.clone(), json!({"$ref": format!("#/components/messages/{}", pointer_token(m))}))
                            })
                            .collect(),
                    ),
                );
                if !address.is_null() {
                    let bindings = if id.starts_with("tool.") {
                        wire::tool_channel()
                    } else {
                        wire::event_channel()
                    };
                    channel.insert("bindings".into(), bindings);
                }
                if *pattern {
                    channel.insert("x-mesh-pattern".into(), json!(true));
                    channel.insert(
                        "description".into(),
                        json!("A topic pattern a handler binds that matches no key emitted in this system."),
                    );
                }
                (id.clone(), Value::Object(channel))
            })
            .collect()
    }

    /// The payload of message `id`: its definitions moved to `components/schemas` (renamed
    /// where a different one holds the name), its references rewritten.
    fn payload(&mut self, id: &str, schema: &Value) -> Value {
        let definitions: BTreeMap<String, &Value> = DEFINITION_KEYS
            .iter()
            .filter_map(|k| schema.get(*k).and_then(Value::as_object))
            .flat_map(|defs| defs.iter().map(|(n, v)| (n.clone(), v)))
            .collect();
        // First try: each definition under its own (cleaned) name. Kept when every name is
        // free or holds the same shape.
        let plain: BTreeMap<String, String> = definitions
            .keys()
            .map(|n| (n.clone(), component_name(n)))
            .collect();
        let root_name = component_name(id);
        let clashes = |doc: &Doc, names: &BTreeMap<String, String>| {
            definitions.iter().any(|(name, def)| {
                let target = &names[name];
                doc.schemas
                    .get(target)
                    .is_some_and(|held| *held != rewrite(def, names, &root_name, 0))
            })
        };
        let names = if clashes(self, &plain) {
            // Every definition whose name is taken gets a fresh one, so nothing shared can
            // point at a sibling of another shape.
            let mut names = BTreeMap::new();
            let mut taken: BTreeSet<String> = self.schemas.keys().cloned().collect();
            for (name, target) in &plain {
                // A definition that refers to nothing local has one rewritten form: it may
                // share a name already holding that same form.
                let def = definitions[name];
                let alone = if refers_locally(def, 0) {
                    None
                } else {
                    Some(rewrite(def, &names, &root_name, 0))
                };
                let reusable = |doc: &Doc, candidate: &str| {
                    alone.is_some() && doc.schemas.get(candidate) == alone.as_ref()
                };
                let mut chosen = target.clone();
                let mut n = 2;
                while taken.contains(&chosen) && !reusable(self, &chosen) {
                    chosen = format!("{target}_{n}");
                    n += 1;
                }
                taken.insert(chosen.clone());
                names.insert(name.clone(), chosen);
            }
            names
        } else {
            plain
        };
        for (name, def) in &definitions {
            let rewritten = rewrite(def, &names, &root_name, 0);
            self.schemas.entry(names[name].clone()).or_insert(rewritten);
        }
        let mut root = rewrite(schema, &names, &root_name, 0);
        if let Value::Object(map) = &mut root {
            for key in DEFINITION_KEYS {
                map.remove(key);
            }
            // A payload is a schema inside the document: its own dialect and base URI would
            // change how AsyncAPI tools resolve it.
            map.remove("$schema");
            map.remove("$id");
        }
        if refers_to_root(schema, 0) {
            // The payload refers to itself (`#`): it becomes a component of its own.
            self.schemas.insert(root_name.clone(), root);
            return json!({"$ref": format!("#/components/schemas/{}", pointer_token(&root_name))});
        }
        root
    }
}

/// A JSON pointer token (`~` and `/` escaped).
fn pointer_token(text: &str) -> String {
    text.replace('~', "~0").replace('/', "~1")
}

/// Undoes [`pointer_token`].
fn unescape_token(text: &str) -> String {
    text.replace("~1", "/").replace("~0", "~")
}

/// `value` with its local references rewritten to `components/schemas` and object keys
/// sorted; below [`MAX_SCHEMA_DEPTH`] levels (which a checked contract never reaches) the
/// rest is dropped.
fn rewrite(value: &Value, names: &BTreeMap<String, String>, root: &str, depth: usize) -> Value {
    if depth > MAX_SCHEMA_DEPTH {
        return Value::Bool(true);
    }
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let mut out = Map::new();
            for key in keys {
                let item = &map[key];
                let new = match (key.as_str(), item) {
                    ("$ref", Value::String(reference)) => {
                        Value::String(rewrite_ref(reference, names, root))
                    }
                    _ => rewrite(item, names, root, depth + 1),
                };
                out.insert(key.clone(), new);
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|v| rewrite(v, names, root, depth + 1))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn rewrite_ref(reference: &str, names: &BTreeMap<String, String>, root: &str) -> String {
    if reference == "#" {
        return format!("#/components/schemas/{}", pointer_token(root));
    }
    for key in DEFINITION_KEYS {
        let Some(rest) = reference.strip_prefix(&format!("#/{key}/")) else {
            continue;
        };
        let (token, tail) = rest.split_once('/').map_or((rest, ""), |(t, r)| (t, r));
        if let Some(target) = names.get(&unescape_token(token)) {
            let tail = if tail.is_empty() {
                String::new()
            } else {
                format!("/{tail}")
            };
            return format!("#/components/schemas/{}{tail}", pointer_token(target));
        }
    }
    reference.to_owned()
}

/// Whether `value` holds a local reference (`#…`).
fn refers_locally(value: &Value, depth: usize) -> bool {
    if depth > MAX_SCHEMA_DEPTH {
        return false;
    }
    match value {
        Value::Object(map) => map.iter().any(|(k, v)| {
            (k == "$ref" && v.as_str().is_some_and(|r| r.starts_with('#')))
                || refers_locally(v, depth + 1)
        }),
        Value::Array(items) => items.iter().any(|v| refers_locally(v, depth + 1)),
        _ => false,
    }
}

fn refers_to_root(value: &Value, depth: usize) -> bool {
    if depth > MAX_SCHEMA_DEPTH {
        return false;
    }
    match value {
        Value::Object(map) => map
            .iter()
            .any(|(k, v)| (k == "$ref" && v.as_str() == Some("#")) || refers_to_root(v, depth + 1)),
        Value::Array(items) => items.iter().any(|v| refers_to_root(v, depth + 1)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mesh_core::contract::MessageContract;

    fn emitter(owner: &str, key: &str, schema: Value) -> ModuleContract {
        ModuleContract {
            owner: owner.into(),
            node: "n".into(),
            emits: vec![MessageContract {
                key: key.into(),
                version: 1,
                schema: Some(schema),
            }],
            handles: Vec::new(),
            serves: Vec::new(),
            calls: Vec::new(),
        }
    }

    #[test]
    fn definitions_of_one_name_and_two_shapes_are_kept_apart_deterministically() {
        let a = json!({"type": "object", "properties": {"m": {"$ref": "#/definitions/Money"}},
                       "definitions": {"Money": {"type": "integer"}}});
        let b = json!({"type": "object", "properties": {"m": {"$ref": "#/definitions/Money"}},
                       "definitions": {"Money": {"type": "string"}}});
        let c = a.clone();
        let mut system = System::new();
        system.insert(emitter("module.a", "module.a.paid.x", a));
        system.insert(emitter("module.b", "module.b.paid.x", b));
        system.insert(emitter("module.c", "module.c.paid.x", c));
        let doc = export(&system, &ExportOptions::default()).unwrap();
        let schemas = &doc["components"]["schemas"];
        assert_eq!(schemas["Money"], json!({"type": "integer"}));
        assert_eq!(schemas["Money_2"], json!({"type": "string"}));
        let money = schemas
            .as_object()
            .unwrap()
            .keys()
            .filter(|name| name.starts_with("Money"))
            .count();
        assert_eq!(money, 2, "the same shape is shared: {schemas}");
        let messages = &doc["components"]["messages"];
        assert_eq!(
            messages["module.b.paid.x.v1"]["payload"]["properties"]["m"]["$ref"],
            "#/components/schemas/Money_2"
        );
        assert_eq!(
            messages["module.c.paid.x.v1"]["payload"]["properties"]["m"]["$ref"],
            "#/components/schemas/Money"
        );
        assert_eq!(export(&system, &ExportOptions::default()).unwrap(), doc);
        assert_eq!(System::from_document(&doc).unwrap(), system);
    }

    #[test]
    fn a_payload_referring_to_itself_becomes_a_component() {
        let tree = json!({"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#"}}}});
        let mut system = System::new();
        system.insert(emitter("module.a", "module.a.tree.grown", tree));
        let doc = export(&system, &ExportOptions::default()).unwrap();
        let payload = &doc["components"]["messages"]["module.a.tree.grown.v1"]["payload"];
        assert_eq!(
            payload["$ref"],
            "#/components/schemas/module.a.tree.grown.v1"
        );
        let component = &doc["components"]["schemas"]["module.a.tree.grown.v1"];
        assert_eq!(
            component["properties"]["children"]["items"]["$ref"],
            "#/components/schemas/module.a.tree.grown.v1"
        );
    }
}
