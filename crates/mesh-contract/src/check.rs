//! The compatibility check: what changed between two systems that breaks a module of the
//! newer one, and whom.
//!
//! Every body has writers and readers: an event's emitters write it and its handlers read
//! it; a tool's callers write its request and its server reads it; the server writes its
//! reply and its callers read it. A writer's schema may narrow (it writes less: compatible)
//! but not widen, for then its readers get what they never got before; a reader's schema
//! may widen (it accepts more) but not narrow, for then its writers' bodies are refused. So
//! each rule breaks one side: a change to a writer's schema breaks its readers, a change to
//! a reader's schema breaks its writers. The rules, with an example each, are in
//! docs/CONTRACT.md, "Compatibility rules".
//!
//! A finding is reported only when it breaks some module of the newer system.

use std::collections::{BTreeSet, HashSet};
use std::fmt;

use mesh_core::contract::ModuleContract;
use mesh_core::topic_matches;
use serde_json::{json, Value};

use crate::schema::{
    enum_values, properties, required, resolve, shape, unwrap_nullable, Types, MAX_SCHEMA_DEPTH,
};
use crate::system::System;

/// Which rule a change breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Rule {
    /// A key a handler of the newer system still matches is emitted by no module any more.
    KeyNoLongerEmitted,
    /// A tool a module of the newer system still calls is served by no module any more.
    ToolNoLongerServed,
    /// A field was removed from a written schema.
    FieldRemoved,
    /// A written schema no longer requires a field: its readers may now miss it.
    RequiredDropped,
    /// A reader's schema requires a field it did not require before.
    RequiredAdded,
    /// A field's type changed in the breaking direction (a writer's to a type its readers do
    /// not read, a reader's to one its writers do not write).
    FieldRetyped,
    /// A written schema's enum allows values it did not allow before.
    EnumWidened,
    /// A reader's schema's enum no longer allows values it allowed before.
    EnumNarrowed,
    /// The schema of a version changed shape without a new version number.
    ShapeChangedSameVersion,
}

impl Rule {
    /// Its name, as printed and in `--json`: `field-removed`, `required-added`, …
    pub const fn as_str(self) -> &'static str {
        match self {
            Rule::KeyNoLongerEmitted => "key-no-longer-emitted",
            Rule::ToolNoLongerServed => "tool-no-longer-served",
            Rule::FieldRemoved => "field-removed",
            Rule::RequiredDropped => "required-dropped",
            Rule::RequiredAdded => "required-added",
            Rule::FieldRetyped => "field-retyped",
            Rule::EnumWidened => "enum-widened",
            Rule::EnumNarrowed => "enum-narrowed",
            Rule::ShapeChangedSameVersion => "shape-changed-same-version",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which body a finding is about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Subject {
    /// An event's body, by key (or, for a handler's schema, the handler's pattern).
    Event(String),
    /// A tool's request.
    Request(String),
    /// A tool's reply.
    Reply(String),
}

impl Subject {
    /// The key, pattern or tool.
    pub fn name(&self) -> &str {
        match self {
            Subject::Event(name) | Subject::Request(name) | Subject::Reply(name) => name,
        }
    }
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Subject::Event(key) => f.write_str(key),
            Subject::Request(tool) => write!(f, "{tool} (request)"),
            Subject::Reply(tool) => write!(f, "{tool} (reply)"),
        }
    }
}

/// The side a change breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Side {
    /// Those who read the body: an event's handlers, a request's server, a reply's callers.
    Readers,
    /// Those who write the body: an event's emitters, a request's callers, a reply's server.
    Writers,
}

impl Side {
    /// `readers` or `writers`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Side::Readers => "readers",
            Side::Writers => "writers",
        }
    }
}

/// One breaking change.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Finding {
    /// The body it is about.
    pub subject: Subject,
    /// The field, as a path from the body (`/customer/address/city`, `[]` for an array's
    /// items); empty for the body itself or a whole key or tool.
    pub path: String,
    /// The rule it breaks.
    pub rule: Rule,
    /// The module whose contract changed.
    pub changed_by: String,
    /// The side it breaks.
    pub breaks: Side,
    /// The modules of the newer system on that side, by owner.
    pub broken: Vec<String>,
    /// What changed, in words.
    pub detail: String,
}

impl Finding {
    /// The finding as one JSON object (`rule`, `kind`, `subject`, `path`, `changed_by`,
    /// `breaks`, `broken`, `detail`).
    pub fn to_json(&self) -> Value {
        let kind = match self.subject {
            Subject::Event(_) => "event",
            Subject::Request(_) => "request",
            Subject::Reply(_) => "reply",
        };
        json!({
            "rule": self.rule.as_str(),
            "kind": kind,
            "subject": self.subject.name(),
            "path": self.path,
            "changed_by": self.changed_by,
            "breaks": self.breaks.as_str(),
            "broken": self.broken,
            "detail": self.detail,
        })
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = if self.path.is_empty() { "" } else { &self.path };
        write!(
            f,
            "{}: {}{}{path}: {} (changed by {}); breaks its {}: {}",
            self.rule,
            self.subject,
            if path.is_empty() { "" } else { " " },
            self.detail,
            self.changed_by,
            self.breaks.as_str(),
            self.broken.join(", ")
        )
    }
}

/// The breaking changes from `old` to `new`, sorted; empty when `new` is compatible.
pub fn check(old: &System, new: &System) -> Vec<Finding> {
    let mut findings = BTreeSet::new();
    gone(old, new, &mut findings);
    for new_module in new.modules() {
        let Some(old_module) = old.module(&new_module.owner) else {
            continue;
        };
        emits(old_module, new_module, new, &mut findings);
        handlers(old_module, new_module, new, &mut findings);
        tools(old_module, new_module, new, &mut findings);
    }
    findings.into_iter().collect()
}

/// Keys still consumed but no longer emitted, tools still called but no longer served.
fn gone(old: &System, new: &System, findings: &mut BTreeSet<Finding>) {
    let emitted = new.emitted_keys();
    for key in old.emitted_keys().difference(&emitted) {
        let readers = owners(new.handlers_of(key).into_iter().map(|(o, _, _)| o));
        if readers.is_empty() {
            continue;
        }
        let emitters = owners(
            old.modules()
                .filter(|m| m.emits.iter().any(|e| e.key == *key))
                .map(|m| m.owner.clone()),
        );
        findings.insert(Finding {
            subject: Subject::Event((*key).to_owned()),
            path: String::new(),
            rule: Rule::KeyNoLongerEmitted,
            changed_by: emitters.join(", "),
            breaks: Side::Readers,
            broken: readers,
            detail: "no module emits it any more".into(),
        });
    }
    let served = |system: &System| -> BTreeSet<String> {
        system
            .modules()
            .flat_map(|m| m.serves.iter().map(|t| t.tool.clone()))
            .collect()
    };
    let (was, is) = (served(old), served(new));
    for tool in was.difference(&is) {
        let callers = owners(
            new.modules()
                .filter(|m| m.calls.iter().any(|t| t.tool == *tool))
                .map(|m| m.owner.clone()),
        );
        if callers.is_empty() {
            continue;
        }
        let servers = owners(
            old.modules()
                .filter(|m| m.serves.iter().any(|t| t.tool == *tool))
                .map(|m| m.owner.clone()),
        );
        findings.insert(Finding {
            subject: Subject::Request(tool.clone()),
            path: String::new(),
            rule: Rule::ToolNoLongerServed,
            changed_by: servers.join(", "),
            // Its callers, who write its requests.
            breaks: Side::Writers,
            broken: callers,
            detail: "no module serves it any more".into(),
        });
    }
}

fn owners(iter: impl Iterator<Item = String>) -> Vec<String> {
    iter.collect::<BTreeSet<_>>().into_iter().collect()
}

fn emits(
    old: &ModuleContract,
    new: &ModuleContract,
    system: &System,
    findings: &mut BTreeSet<Finding>,
) {
    for after in &new.emits {
        let Some(before) = old.emits.iter().find(|e| e.key == after.key) else {
            continue;
        };
        let readers = owners(
            system
                .handlers_of(&after.key)
                .into_iter()
                .map(|(o, _, _)| o),
        );
        let context = Context {
            subject: Subject::Event(after.key.clone()),
            changed_by: new.owner.clone(),
            role: Role::Writer,
            broken: readers,
        };
        context.compare_versions(
            (before.version, before.schema.as_ref()),
            (after.version, after.schema.as_ref()),
            findings,
        );
    }
}

fn handlers(
    old: &ModuleContract,
    new: &ModuleContract,
    system: &System,
    findings: &mut BTreeSet<Finding>,
) {
    for after in &new.handles {
        let Some(before) = old.handles.iter().find(|h| h.pattern == after.pattern) else {
            continue;
        };
        let writers = owners(
            system
                .modules()
                .filter(|m| {
                    m.emits
                        .iter()
                        .any(|e| topic_matches(&after.pattern, &e.key))
                })
                .map(|m| m.owner.clone()),
        );
        let context = Context {
            subject: Subject::Event(after.pattern.clone()),
            changed_by: new.owner.clone(),
            role: Role::Reader,
            broken: writers,
        };
        match (before.version, after.version) {
            (Some(v), Some(w)) => context.compare_versions(
                (v, before.schema.as_ref()),
                (w, after.schema.as_ref()),
                findings,
            ),
            _ => context.compare(before.schema.as_ref(), after.schema.as_ref(), findings),
        }
    }
}

fn tools(
    old: &ModuleContract,
    new: &ModuleContract,
    system: &System,
    findings: &mut BTreeSet<Finding>,
) {
    let callers_of = |tool: &str| {
        owners(
            system
                .modules()
                .filter(|m| m.calls.iter().any(|t| t.tool == tool))
                .map(|m| m.owner.clone()),
        )
    };
    let servers_of = |tool: &str| {
        owners(
            system
                .modules()
                .filter(|m| m.serves.iter().any(|t| t.tool == tool))
                .map(|m| m.owner.clone()),
        )
    };
    // (old list, new list, serving): a server reads the request and writes the reply; a
    // caller the other way round.
    for (before_list, after_list, serving) in [
        (&old.serves, &new.serves, true),
        (&old.calls, &new.calls, false),
    ] {
        for after in after_list {
            let Some(before) = before_list.iter().find(|t| t.tool == after.tool) else {
                continue;
            };
            let others = if serving {
                callers_of(&after.tool)
            } else {
                servers_of(&after.tool)
            };
            let (request_role, reply_role) = if serving {
                (Role::Reader, Role::Writer)
            } else {
                (Role::Writer, Role::Reader)
            };
            for (subject, role, b, a) in [
                (
                    Subject::Request(after.tool.clone()),
                    request_role,
                    &before.request,
                    &after.request,
                ),
                (
                    Subject::Reply(after.tool.clone()),
                    reply_role,
                    &before.reply,
                    &after.reply,
                ),
            ] {
                let context = Context {
                    subject,
                    changed_by: new.owner.clone(),
                    role,
                    broken: others.clone(),
                };
                context.compare(b.as_ref(), a.as_ref(), findings);
            }
        }
    }
}

/// Whether the schema compared is written or read by the module that changed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Role {
    Writer,
    Reader,
}

/// Bounds on one comparison: schemas from the wire may refer to themselves or nest deeply.
const MAX_STEPS: usize = 10_000;

struct Context {
    subject: Subject,
    changed_by: String,
    role: Role,
    broken: Vec<String>,
}

struct Walk<'a> {
    old_root: &'a Value,
    new_root: &'a Value,
    /// Reference pairs already compared (a cycle, or a definition used twice).
    seen: HashSet<(Option<&'a str>, Option<&'a str>)>,
    steps: usize,
}

impl Context {
    fn breaks(&self) -> Side {
        match self.role {
            Role::Writer => Side::Readers,
            Role::Reader => Side::Writers,
        }
    }

    fn report(&self, findings: &mut BTreeSet<Finding>, rule: Rule, path: &str, detail: String) {
        if self.broken.is_empty() {
            return;
        }
        findings.insert(Finding {
            subject: self.subject.clone(),
            path: path.to_owned(),
            rule,
            changed_by: self.changed_by.clone(),
            breaks: self.breaks(),
            broken: self.broken.clone(),
            detail,
        });
    }

    /// A versioned body: the same version must keep its shape exactly; any version must
    /// keep the rules.
    fn compare_versions(
        &self,
        (v, before): (u32, Option<&Value>),
        (w, after): (u32, Option<&Value>),
        findings: &mut BTreeSet<Finding>,
    ) {
        if let (Some(b), Some(a)) = (before, after) {
            if v == w && shape(b) != shape(a) {
                self.report(
                    findings,
                    Rule::ShapeChangedSameVersion,
                    "",
                    format!(
                        "the schema of version {v} changed shape; a new shape needs a new version"
                    ),
                );
            }
        }
        self.compare(before, after, findings);
    }

    fn compare(
        &self,
        before: Option<&Value>,
        after: Option<&Value>,
        findings: &mut BTreeSet<Finding>,
    ) {
        let (Some(before), Some(after)) = (before, after) else {
            // A schema declared on one side only: nothing to compare.
            return;
        };
        let mut walk = Walk {
            old_root: before,
            new_root: after,
            seen: HashSet::new(),
            steps: 0,
        };
        self.node(&mut walk, before, after, "", 0, findings);
    }

    fn node<'a>(
        &self,
        walk: &mut Walk<'a>,
        before: &'a Value,
        after: &'a Value,
        path: &str,
        depth: usize,
        findings: &mut BTreeSet<Finding>,
    ) {
        walk.steps += 1;
        if depth > MAX_SCHEMA_DEPTH || walk.steps > MAX_STEPS {
            return;
        }
        let (Some((before, via_old)), Some((after, via_new))) = (
            resolve(walk.old_root, before),
            resolve(walk.new_root, after),
        ) else {
            return;
        };
        if (via_old.is_some() || via_new.is_some()) && !walk.seen.insert((via_old, via_new)) {
            return;
        }
        let (before, null_before) = unwrap_nullable(before);
        let (after, null_after) = unwrap_nullable(after);
        // A nullable wrapper may itself wrap a reference.
        let (Some((before, _)), Some((after, _))) = (
            resolve(walk.old_root, before),
            resolve(walk.new_root, after),
        ) else {
            return;
        };
        let with_null = |types: Option<Types>, null: bool| {
            types.map(|mut t| {
                if null {
                    t.0.insert("null".into());
                }
                t
            })
        };
        let types_before = with_null(Types::of_values(before), null_before);
        let types_after = with_null(Types::of_values(after), null_after);
        let retyped = match (&types_before, &types_after, self.role) {
            (Some(b), Some(a), Role::Writer) => !a.within(b),
            (Some(b), Some(a), Role::Reader) => !b.within(a),
            // A writer that said nothing of the type now says one: narrower.
            (None, Some(_), Role::Writer) | (Some(_), None, Role::Reader) => false,
            (Some(_), None, Role::Writer) | (None, Some(_), Role::Reader) => true,
            (None, None, _) => false,
        };
        if retyped {
            let show = |t: &Option<Types>| t.as_ref().map_or_else(|| "any".to_owned(), Types::show);
            self.report(
                findings,
                Rule::FieldRetyped,
                path,
                format!("type {} became {}", show(&types_before), show(&types_after)),
            );
            return;
        }
        self.enums(before, after, path, findings);
        self.objects(walk, before, after, path, depth, findings);
        if let (Some(b), Some(a)) = (before.get("items"), after.get("items")) {
            if b.is_object() && a.is_object() {
                self.node(walk, b, a, &format!("{path}/[]"), depth + 1, findings);
            }
        }
    }

    fn enums(&self, before: &Value, after: &Value, path: &str, findings: &mut BTreeSet<Finding>) {
        let (b, a) = (enum_values(before), enum_values(after));
        let show = |values: &[&Value]| {
            values
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self.role {
            Role::Writer => match (b, a) {
                (Some(b), Some(a)) => {
                    let added: Vec<&Value> = a.iter().copied().filter(|v| !b.contains(v)).collect();
                    if !added.is_empty() {
                        self.report(
                            findings,
                            Rule::EnumWidened,
                            path,
                            format!("now also writes {}", show(&added)),
                        );
                    }
                }
                (Some(_), None) => {
                    self.report(
                        findings,
                        Rule::EnumWidened,
                        path,
                        "no longer limited to its enum".into(),
                    );
                }
                _ => {}
            },
            Role::Reader => match (b, a) {
                (Some(b), Some(a)) => {
                    let removed: Vec<&Value> =
                        b.iter().copied().filter(|v| !a.contains(v)).collect();
                    if !removed.is_empty() {
                        self.report(
                            findings,
                            Rule::EnumNarrowed,
                            path,
                            format!("no longer reads {}", show(&removed)),
                        );
                    }
                }
                (None, Some(a)) => {
                    self.report(
                        findings,
                        Rule::EnumNarrowed,
                        path,
                        format!("now reads only {}", show(&a)),
                    );
                }
                _ => {}
            },
        }
    }

    fn objects<'a>(
        &self,
        walk: &mut Walk<'a>,
        before: &'a Value,
        after: &'a Value,
        path: &str,
        depth: usize,
        findings: &mut BTreeSet<Finding>,
    ) {
        static EMPTY: std::sync::OnceLock<serde_json::Map<String, Value>> =
            std::sync::OnceLock::new();
        let empty = EMPTY.get_or_init(serde_json::Map::new);
        let props_before = properties(before).unwrap_or(empty);
        let props_after = properties(after).unwrap_or(empty);
        let (req_before, req_after) = (required(before), required(after));
        let field = |name: &str| format!("{path}/{name}");
        match self.role {
            Role::Writer => {
                for name in props_before.keys() {
                    if !props_after.contains_key(name) {
                        self.report(
                            findings,
                            Rule::FieldRemoved,
                            &field(name),
                            "removed from the schema".into(),
                        );
                    } else if req_before.contains(name.as_str())
                        && !req_after.contains(name.as_str())
                    {
                        self.report(
                            findings,
                            Rule::RequiredDropped,
                            &field(name),
                            "no longer required: it may be missing".into(),
                        );
                    }
                }
            }
            Role::Reader => {
                for name in req_after.difference(&req_before) {
                    self.report(
                        findings,
                        Rule::RequiredAdded,
                        &field(name),
                        "now required".into(),
                    );
                }
            }
        }
        // Walked in name order, so that what is seen first (and reported once) is the same
        // in every run.
        let mut names: Vec<&String> = props_before
            .keys()
            .filter(|n| props_after.contains_key(*n))
            .collect();
        names.sort();
        for name in names {
            if let (Some(b), Some(a)) = (props_before.get(name), props_after.get(name)) {
                self.node(walk, b, a, &field(name), depth + 1, findings);
            }
        }
    }
}
