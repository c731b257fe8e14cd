//! A system: the current contract of every module, read from announcements or documents,
//! checked on the way in, and the table of who emits, handles, serves and calls what.

use std::collections::{BTreeMap, BTreeSet};

use mesh_core::contract::{ModuleContract, ANNOUNCED_EVENT};
use mesh_core::{topic_matches, Name, RoutingKey, ToolKey, TopicPattern};
use serde_json::{json, Value};

use crate::error::{Error, ErrorKind};
use crate::schema::{depth_exceeds, sorted_keys, MAX_SCHEMA_DEPTH};

/// The key of a system document that says what it is: its value is the format version.
pub const SYSTEM_FORMAT_KEY: &str = "mesh_contract_system";

/// The version of the system document's shape that this crate writes and reads.
pub const SYSTEM_FORMAT: u64 = 1;

/// The extension of an exported AsyncAPI document that holds the system it was made from (the
/// JSON text of its system document), so that the document reads back as exactly that system.
pub const ASYNCAPI_EXTENSION: &str = "x-mesh-system";

/// The current contracts of a set of modules, one per owner (the newest announced wins).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct System {
    modules: BTreeMap<String, ModuleContract>,
}

impl System {
    /// An empty system.
    pub fn new() -> System {
        System::default()
    }

    /// Adds a module's contract, replacing the one of the same owner: give announcements
    /// oldest first, or use [`System::from_timed`].
    pub fn insert(&mut self, contract: ModuleContract) -> Option<ModuleContract> {
        self.modules.insert(contract.owner.clone(), contract)
    }

    /// The newest contract of each owner, whatever the order they come in (ties: the later
    /// one given).
    pub fn from_timed<T: Ord>(
        announcements: impl IntoIterator<Item = (T, ModuleContract)>,
    ) -> System {
        let mut newest: BTreeMap<String, (T, ModuleContract)> = BTreeMap::new();
        for (time, contract) in announcements {
            match newest.get(&contract.owner) {
                Some((known, _)) if *known > time => {}
                _ => {
                    newest.insert(contract.owner.clone(), (time, contract));
                }
            }
        }
        System {
            modules: newest
                .into_iter()
                .map(|(owner, (_, c))| (owner, c))
                .collect(),
        }
    }

    /// The contracts, by owner.
    pub fn modules(&self) -> impl Iterator<Item = &ModuleContract> {
        self.modules.values()
    }

    /// The contract of `owner`.
    pub fn module(&self, owner: &str) -> Option<&ModuleContract> {
        self.modules.get(owner)
    }

    /// How many modules it has.
    pub fn len(&self) -> usize {
        self.modules.len()
    }

    /// Whether it has none.
    pub fn is_empty(&self) -> bool {
        self.modules.is_empty()
    }

    /// The system of `owner` alone.
    pub fn only(&self, owner: &str) -> Result<System, Error> {
        let contract = self.modules.get(owner).ok_or_else(|| {
            Error::new(ErrorKind::UnknownModule {
                owner: owner.to_owned(),
            })
        })?;
        let mut system = System::new();
        system.insert(contract.clone());
        Ok(system)
    }

    /// Every key some module emits.
    pub fn emitted_keys(&self) -> BTreeSet<&str> {
        self.modules()
            .flat_map(|m| m.emits.iter().map(|e| e.key.as_str()))
            .collect()
    }

    /// The system document: `{"mesh_contract_system": 1, "modules": [...]}`, modules by owner,
    /// every object's keys sorted.
    pub fn to_document(&self) -> Value {
        let modules: Vec<Value> = self
            .modules()
            .map(|m| serde_json::to_value(m).unwrap_or(Value::Null))
            .collect();
        sorted_keys(&json!({ SYSTEM_FORMAT_KEY: SYSTEM_FORMAT, "modules": modules }))
    }

    /// Reads a system from JSON text (see [`System::from_document`]).
    pub fn from_json(text: &str) -> Result<System, Error> {
        let value: Value = serde_json::from_str(text).map_err(Error::json)?;
        System::from_document(&value)
    }

    /// Reads a system from a document of any of the forms mesh writes: a system document
    /// ([`System::to_document`]), an AsyncAPI document made by [`crate::asyncapi::export`]
    /// (its [`ASYNCAPI_EXTENSION`], refused when its AsyncAPI half no longer matches its
    /// seal, [`crate::DIGEST_EXTENSION`]), one module's contract (an announcement's body), an
    /// announcement event as `mesh audit query --json` or `mesh tail --json` prints it, or an
    /// array of these (a later contract of an owner replaces an earlier one). Every contract is
    /// checked ([`check_contract`]).
    pub fn from_document(value: &Value) -> Result<System, Error> {
        let mut system = System::new();
        system.read(value, 0)?;
        Ok(system)
    }

    fn read(&mut self, value: &Value, nesting: usize) -> Result<(), Error> {
        let unknown = |found: &str| {
            Error::new(ErrorKind::UnknownDocument {
                found: found.to_owned(),
            })
        };
        match value {
            Value::Array(items) if nesting == 0 => {
                for item in items {
                    self.read(item, 1)?;
                }
                Ok(())
            }
            Value::Object(map) => {
                if let Some(version) = map.get(SYSTEM_FORMAT_KEY) {
                    if version.as_u64() != Some(SYSTEM_FORMAT) {
                        return Err(Error::new(ErrorKind::UnsupportedFormat {
                            version: version.to_string().chars().take(20).collect(),
                        }));
                    }
                    let Some(Value::Array(modules)) = map.get("modules") else {
                        return Err(unknown("a system document without a `modules` array"));
                    };
                    for module in modules {
                        self.insert(read_contract(module)?);
                    }
                    Ok(())
                } else if map.contains_key("asyncapi") {
                    match map.get(ASYNCAPI_EXTENSION) {
                        Some(Value::String(text)) if nesting == 0 => {
                            crate::seal::verify(map)?;
                            let system: Value = serde_json::from_str(text).map_err(Error::json)?;
                            if system.get(SYSTEM_FORMAT_KEY).is_none() {
                                return Err(unknown(
                                    "an AsyncAPI document whose extension is no system",
                                ));
                            }
                            self.read(&system, 1)
                        }
                        _ => Err(unknown(&format!(
                            "an AsyncAPI document without the `{ASYNCAPI_EXTENSION}` extension"
                        ))),
                    }
                } else if map.contains_key("owner") {
                    self.insert(read_contract(value)?);
                    Ok(())
                } else if let (Some(Value::String(key)), Some(body)) =
                    (map.get("key"), map.get("body"))
                {
                    if !is_announcement_key(key) {
                        return Err(unknown("an event that is not a contract announcement"));
                    }
                    let contract = read_contract(body)?;
                    check_announcer(key, &contract)?;
                    self.insert(contract);
                    Ok(())
                } else {
                    Err(unknown("an object of another shape"))
                }
            }
            Value::Array(_) => Err(unknown("nested arrays")),
            _ => Err(unknown("not an object")),
        }
    }
}

/// Whether `key` is an announcement's key, `<origin>.<owner>.contract.announced`.
pub fn is_announcement_key(key: &str) -> bool {
    let mut words = key.split('.');
    let (Some(_), Some(_)) = (words.next(), words.next()) else {
        return false;
    };
    words.collect::<Vec<_>>().join(".") == ANNOUNCED_EVENT
}

/// Reads one module's contract (an announcement's body) and checks it.
pub fn read_contract(value: &Value) -> Result<ModuleContract, Error> {
    let contract =
        <ModuleContract as serde::Deserialize>::deserialize(value).map_err(Error::json)?;
    check_contract(&contract)?;
    Ok(contract)
}

/// Reads an announcement: its key and body, checked, and the body's owner must be the one
/// the key names (an announcement speaks for its emitter only).
pub fn read_announcement(key: &str, body: &Value) -> Result<ModuleContract, Error> {
    let contract = read_contract(body)?;
    check_announcer(key, &contract)?;
    Ok(contract)
}

fn check_announcer(key: &str, contract: &ModuleContract) -> Result<(), Error> {
    let mut words = key.split('.');
    let (origin, name) = (
        words.next().unwrap_or_default(),
        words.next().unwrap_or_default(),
    );
    let owner_origin = match origin {
        "mesh" => "context",
        other => other,
    };
    if contract.owner != format!("{owner_origin}.{name}")
        && contract.owner != format!("{origin}.{name}")
    {
        return Err(Error::invalid(
            &contract.owner,
            format!("announced under `{key}`, which is another owner's"),
        ));
    }
    Ok(())
}

/// Checks what a contract says: its owner (`module.<m>`, `node.<n>` or `context.<c>`), every
/// key, pattern and tool, and every schema (an object or a boolean, at most
/// [`MAX_SCHEMA_DEPTH`] deep).
pub fn check_contract(contract: &ModuleContract) -> Result<(), Error> {
    let owner = contract.owner.as_str();
    let bad = |reason: String| Err(Error::invalid(owner, reason));
    match owner.split_once('.') {
        Some(("module" | "node" | "context" | "mesh", name)) if Name::parse(name).is_ok() => {}
        _ => return bad("the owner is not module.<m>, node.<n> or context.<c>".into()),
    }
    let schema_ok = |schema: &Option<Value>, what: &str| -> Result<(), Error> {
        match schema {
            None => Ok(()),
            Some(schema @ (Value::Object(_) | Value::Bool(_))) => {
                if depth_exceeds(schema, MAX_SCHEMA_DEPTH) {
                    Err(Error::invalid(
                        owner,
                        format!("the schema of {what} is nested deeper than {MAX_SCHEMA_DEPTH}"),
                    ))
                } else {
                    Ok(())
                }
            }
            Some(_) => Err(Error::invalid(
                owner,
                format!("the schema of {what} is neither an object nor a boolean"),
            )),
        }
    };
    for emit in &contract.emits {
        if let Err(e) = RoutingKey::parse(&emit.key) {
            return bad(format!("emits an invalid key: {e}"));
        }
        schema_ok(&emit.schema, &emit.key)?;
    }
    for handler in &contract.handles {
        if let Err(e) = TopicPattern::parse(&handler.pattern) {
            return bad(format!("handles an invalid pattern: {e}"));
        }
        schema_ok(&handler.schema, &handler.pattern)?;
    }
    for tool in contract.serves.iter().chain(&contract.calls) {
        if let Err(e) = ToolKey::parse(&tool.tool) {
            return bad(format!("names an invalid tool: {e}"));
        }
        schema_ok(&tool.request, &tool.tool)?;
        schema_ok(&tool.reply, &tool.tool)?;
    }
    Ok(())
}

/// One key of the system: who emits it (with the schema version each writes) and who handles
/// it (by a pattern matching it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRow {
    /// The routing key, or a handler's pattern that no emitted key matches.
    pub key: String,
    /// Whether `key` is a pattern no emitted key matches.
    pub unmatched_pattern: bool,
    /// The emitters: owner and version, by owner.
    pub emitters: Vec<(String, u32)>,
    /// The handlers: owner, pattern and the version it reads, by owner then pattern.
    pub handlers: Vec<(String, String, Option<u32>)>,
}

/// One tool of the system: who serves it and who calls it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolRow {
    /// The tool's key.
    pub tool: String,
    /// The owners serving it.
    pub servers: Vec<String>,
    /// The owners calling it.
    pub callers: Vec<String>,
}

impl System {
    /// Who emits what and who receives it: a row per emitted key (and per handler pattern that
    /// matches none), by key.
    pub fn key_table(&self) -> Vec<KeyRow> {
        let mut rows: BTreeMap<(bool, String), KeyRow> = BTreeMap::new();
        for key in self.emitted_keys() {
            let emitters = self
                .modules()
                .flat_map(|m| {
                    m.emits
                        .iter()
                        .filter(|e| e.key == key)
                        .map(|e| (m.owner.clone(), e.version))
                })
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            rows.insert(
                (false, key.to_owned()),
                KeyRow {
                    key: key.to_owned(),
                    unmatched_pattern: false,
                    emitters,
                    handlers: self.handlers_of(key),
                },
            );
        }
        let keys = self.emitted_keys();
        for module in self.modules() {
            for handler in &module.handles {
                if keys.iter().any(|k| topic_matches(&handler.pattern, k)) {
                    continue;
                }
                let row = rows
                    .entry((true, handler.pattern.clone()))
                    .or_insert_with(|| KeyRow {
                        key: handler.pattern.clone(),
                        unmatched_pattern: true,
                        emitters: Vec::new(),
                        handlers: Vec::new(),
                    });
                row.handlers.push((
                    module.owner.clone(),
                    handler.pattern.clone(),
                    handler.version,
                ));
            }
        }
        rows.into_values()
            .map(|mut row| {
                row.handlers.sort();
                row.handlers.dedup();
                row
            })
            .collect()
    }

    /// The handlers whose pattern matches `key`: owner, pattern, version read.
    pub fn handlers_of(&self, key: &str) -> Vec<(String, String, Option<u32>)> {
        let mut found: Vec<_> = self
            .modules()
            .flat_map(|m| {
                m.handles
                    .iter()
                    .filter(|h| topic_matches(&h.pattern, key))
                    .map(|h| (m.owner.clone(), h.pattern.clone(), h.version))
            })
            .collect();
        found.sort();
        found.dedup();
        found
    }

    /// Every tool served or called, with its servers and callers, by tool.
    pub fn tool_table(&self) -> Vec<ToolRow> {
        let mut rows: BTreeMap<String, ToolRow> = BTreeMap::new();
        for module in self.modules() {
            for (tools, serving) in [(&module.serves, true), (&module.calls, false)] {
                for tool in tools {
                    let row = rows.entry(tool.tool.clone()).or_insert_with(|| ToolRow {
                        tool: tool.tool.clone(),
                        servers: Vec::new(),
                        callers: Vec::new(),
                    });
                    if serving {
                        row.servers.push(module.owner.clone());
                    } else {
                        row.callers.push(module.owner.clone());
                    }
                }
            }
        }
        rows.into_values()
            .map(|mut row| {
                row.servers.dedup();
                row.callers.dedup();
                row
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mesh_core::contract::{HandlerContract, MessageContract};

    fn module(owner: &str, emits: &[&str], handles: &[&str]) -> ModuleContract {
        ModuleContract {
            owner: owner.into(),
            node: "n".into(),
            emits: emits
                .iter()
                .map(|k| MessageContract {
                    key: (*k).into(),
                    version: 1,
                    schema: None,
                })
                .collect(),
            handles: handles
                .iter()
                .map(|p| HandlerContract {
                    pattern: (*p).into(),
                    version: None,
                    schema: None,
                })
                .collect(),
            serves: Vec::new(),
            calls: Vec::new(),
        }
    }

    #[test]
    fn the_newest_announcement_of_an_owner_wins_in_any_order() {
        let old = module("module.a", &["module.a.x.y"], &[]);
        let new = module("module.a", &["module.a.x.z"], &[]);
        let system = System::from_timed([
            (2, new.clone()),
            (1, old.clone()),
            (0, module("module.b", &[], &[])),
        ]);
        assert_eq!(system.module("module.a"), Some(&new));
        assert_eq!(system.len(), 2);
        let back = System::from_document(&system.to_document()).unwrap();
        assert_eq!(back, system);
    }

    #[test]
    fn hostile_contracts_are_refused_with_a_reason() {
        for (value, words) in [
            (
                json!({"owner": "module.a", "node": "n", "emits": [{"key": "module.a.*", "version": 1}]}),
                "invalid key",
            ),
            (json!({"owner": "bogus", "node": "n"}), "owner"),
            (
                json!({"owner": "module.a", "node": "n", "handles": [{"pattern": ""}]}),
                "invalid pattern",
            ),
            (
                json!({"owner": "module.a", "node": "n", "emits": [{"key": "module.a.b", "version": 1, "schema": 3}]}),
                "neither",
            ),
            (json!({"owner": 5}), "JSON"),
            (
                json!({"owner": "module.a", "node": "n", "emits": [{"key": "module.a.b", "version": -1}]}),
                "JSON",
            ),
        ] {
            let error = System::from_document(&value).unwrap_err();
            let text = format!(
                "{error}: {:?}",
                std::error::Error::source(&error).map(ToString::to_string)
            );
            assert!(text.contains(words), "{value}: {text}");
        }
        let forged = json!({"key": "module.b.contract.announced", "body": {"owner": "module.a", "node": "n"}});
        assert!(System::from_document(&forged)
            .unwrap_err()
            .is_invalid_contract());
        let asyncapi = json!({"asyncapi": "3.0.0", "info": {}});
        assert!(matches!(
            System::from_document(&asyncapi).unwrap_err().kind(),
            ErrorKind::UnknownDocument { .. }
        ));
    }

    #[test]
    fn the_table_matches_handlers_by_pattern() {
        let system = System::from_timed([
            (0, module("module.a", &["module.a.x.y"], &[])),
            (0, module("module.b", &[], &["module.a.#", "module.c.*"])),
        ]);
        let rows = system.key_table();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].key, "module.a.x.y");
        assert_eq!(rows[0].emitters, [("module.a".to_owned(), 1)]);
        assert_eq!(
            rows[0].handlers,
            [("module.b".to_owned(), "module.a.#".to_owned(), None)]
        );
        assert!(rows[1].unmatched_pattern && rows[1].key == "module.c.*");
    }
}
