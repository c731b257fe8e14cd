//! What the contract wants on the broker for a node: exchanges, queues with their arguments,
//! and bindings, built from `--module/--pattern` options or a spec file. The module
//! `audit-logger` also wants its queue of dead letters, `<node>.audit-logger.dead`, bound to
//! `mesh.events.dead` on `#`; with `shared = true` (shared audit loggers, competing on
//! `shared.audit-logger.events`) it wants `shared.audit-logger.dead` instead. No queue is wanted for the retired `mesh.dead-letters` (see
//! `mesh_admin::topology`). A module with `forward_scheduled = true` wants its schedule queue
//! `scheduled.<module>.events` and its hops, so its bus forwards without `configure`.
//!
//! The arguments mirror mesh-amqp's declarations (`topology::base`,
//! `topology::consumer_queue` and `topology::dead_queue`, private to that crate); the test
//! `wanted_queues_match_what_mesh_amqp_declares` connects mesh-amqp to a scratch vhost and
//! checks that both agree.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context as _;
use mesh::amqp::access::{AccessSpec, LimitsSpec};
use mesh::amqp::{AmqpOptions, QueueType};
use mesh::raw::naming::{
    self, AUDIT_MODULE, DEAD_EXCHANGE, EVENTS_EXCHANGE, REPLY_EXCHANGE, RETRY_EXCHANGE,
    RPC_EXCHANGE,
};
use mesh::raw::{Name, TopicPattern};
use mesh_admin::topology::{Wanted, WantedExchange, WantedQueue};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::cli::{QueueTypeArg, TopologyArgs};
use crate::exit::{fail, Code, WithCode};

/// A spec file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SpecFile {
    node: Option<String>,
    queue_type: Option<QueueTypeArg>,
    delivery_limit: Option<u32>,
    #[serde(default)]
    modules: Vec<ModuleSpec>,
    /// The access plan's own settings (`mesh access`); topology ignores them.
    access: Option<AccessTable>,
}

/// The `[access]` table of a spec file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AccessTable {
    /// The prefix of every user name (default none).
    user_prefix: Option<String>,
    /// The node's runtime contexts, each with a user `mesh.<context>`.
    #[serde(default)]
    contexts: Vec<String>,
    /// Whether the node itself has a user `node.<node>` (default true).
    node_user: Option<bool>,
    /// Whether modules, contexts and the node may declare their own durable queues (default
    /// false: `mesh topology apply` declares them, with each module's `retry` and `serves`).
    runtime_declares_queues: Option<bool>,
    /// Each planned user's `max-connections` (the operator's excepted; default no limit).
    max_connections: Option<u64>,
    /// Each planned user's `max-channels` (the operator's excepted; default no limit).
    max_channels: Option<u64>,
    /// The vhost's `max-queues` (default no limit).
    max_queues: Option<u64>,
}

/// The longest user prefix.
const MAX_USER_PREFIX_LEN: usize = 100;

/// One module of a spec file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModuleSpec {
    name: String,
    #[serde(default)]
    patterns: Vec<String>,
    queue_type: Option<QueueTypeArg>,
    #[serde(default)]
    shared: bool,
    /// How the module's user logs in (`mesh access`): `password` (the default) or
    /// `certificate` (its client certificate alone, `EXTERNAL`: created without a password).
    #[serde(default)]
    auth: ModuleAuth,
    /// The tools the module may call (`mesh access`), as topic patterns over tool keys;
    /// absent, every tool.
    calls: Option<Vec<String>>,
    /// The retry steps of its consumer queue (`["5s", "1m"]`, as its bus's retry policy
    /// has them): their retry queues are wanted, so its user needs no `configure` on them.
    #[serde(default)]
    retry: Vec<String>,
    /// The tools it serves (`["billing.quote"]`): their `serve.<key>` queues are wanted.
    #[serde(default)]
    serves: Vec<String>,
    /// A bus of it forwards its scheduled events (`forward_scheduled(true)`): its schedule
    /// queue `scheduled.<module>.events` and the hop queues of its ladder are wanted.
    #[serde(default)]
    forward_scheduled: bool,
    /// The longest hop of its ladder, as its bus's `longest_schedule_hop` (default 10m):
    /// only the hops up to it are wanted. Implies `forward_scheduled`.
    longest_schedule_hop: Option<String>,
    /// Given with `--module` rather than in the spec file.
    #[serde(skip)]
    from_command_line: bool,
}

/// How a module's user logs in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum ModuleAuth {
    /// A password.
    #[default]
    Password,
    /// The client certificate alone (`EXTERNAL`).
    Certificate,
}

fn queue_type(arg: QueueTypeArg) -> QueueType {
    match arg {
        QueueTypeArg::Quorum => QueueType::Quorum,
        QueueTypeArg::Classic => QueueType::Classic,
    }
}

/// `x-queue-type` only: the arguments of a queue of dead letters (never dead-lettered, no
/// delivery limit).
fn queue_type_arguments(kind: QueueType) -> Map<String, Value> {
    let mut arguments = Map::new();
    arguments.insert("x-queue-type".into(), Value::from(kind.as_str()));
    arguments
}

/// The arguments of a module's queue: dead-lettered to `mesh.events.dead`, and on quorum
/// queues bounded by the delivery limit.
pub(crate) fn consumer_arguments(kind: QueueType, delivery_limit: u32) -> Map<String, Value> {
    let mut arguments = queue_type_arguments(kind);
    arguments.insert("x-dead-letter-exchange".into(), Value::from(DEAD_EXCHANGE));
    if kind == QueueType::Quorum {
        arguments.insert("x-delivery-limit".into(), Value::from(delivery_limit));
    }
    arguments
}

/// Builds what the contract wants from the command line (and its spec file). `node` is the
/// global `--node` (None when it was not given, so a spec file's node applies).
pub(crate) fn wanted(
    args: &TopologyArgs,
    global_type: Option<QueueTypeArg>,
    node: Option<Name>,
    default_node: impl FnOnce() -> anyhow::Result<Name>,
) -> anyhow::Result<Wanted> {
    let file = match &args.spec {
        Some(path) => read_spec(path)?,
        None => SpecFile::default(),
    };
    let node = node_of(node, &file, default_node)?;
    let default_type = queue_type(
        global_type
            .or(file.queue_type)
            .unwrap_or(QueueTypeArg::Quorum),
    );
    let delivery_limit = args
        .delivery_limit
        .or(file.delivery_limit)
        .unwrap_or_else(|| AmqpOptions::default().get_delivery_limit());

    let mut modules: Vec<ModuleSpec> = file.modules;
    modules.extend(command_line_modules(args)?);
    let retry_and_serve = retry_and_serve_queues(&modules, &node, default_type, delivery_limit)?;
    let (queues, audit_dead) = queues_of(modules, &node, default_type)?;

    let mut wanted_queues: Vec<WantedQueue> = audit_dead
        .into_iter()
        .map(|(name, (kind, _))| {
            WantedQueue::new(
                name,
                queue_type_arguments(kind),
                DEAD_EXCHANGE,
                vec!["#".to_owned()],
            )
        })
        .collect();
    for (name, (kind, mut patterns)) in queues {
        patterns.sort();
        patterns.dedup();
        wanted_queues.push(WantedQueue::new(
            name,
            consumer_arguments(kind, delivery_limit),
            EVENTS_EXCHANGE,
            patterns,
        ));
    }
    for queue in retry_and_serve {
        if !wanted_queues.iter().any(|q| q.name == queue.name) {
            wanted_queues.push(queue);
        }
    }
    Ok(Wanted::new(node, base_exchanges(), wanted_queues))
}

/// The longest retry step (as mesh's retry policy allows).
const MAX_RETRY_STEP: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// The retry queues of each module's consumer queue (its `retry` steps; only a module with
/// patterns has a queue), the `serve.<key>` queue of each tool it serves, and the schedule
/// queue and hops of a module that forwards scheduled events, as mesh-amqp declares them
/// (`topology::retry_queue`, `topology::serve_queue`, and `topology::consumer_queue` with its
/// retry queues for a schedule queue): each bound on its own name on `mesh.retry`, on its
/// key on `mesh.rpc`.
fn retry_and_serve_queues(
    modules: &[ModuleSpec],
    node: &Name,
    default_type: QueueType,
    delivery_limit: u32,
) -> anyhow::Result<Vec<WantedQueue>> {
    let mut out = Vec::new();
    for module in modules {
        let name = Name::parse(&module.name).coded(Code::Usage, || {
            format!("invalid module name `{}`", module.name)
        })?;
        let kind = module.queue_type.map(queue_type).unwrap_or(default_type);
        if !module.patterns.is_empty() {
            let queue = if module.shared {
                naming::shared_queue(&name)
            } else {
                naming::consumer_queue(node, &name)
            };
            for step in &module.retry {
                let delay = humantime::parse_duration(step.trim())
                    .ok()
                    .filter(|d| !d.is_zero() && *d <= MAX_RETRY_STEP)
                    .ok_or_else(|| {
                        fail(
                            Code::Usage,
                            format!(
                                "invalid retry step `{step}` of module `{name}`: a duration of \
                                 at most 15m (e.g. 5s, 1m)"
                            ),
                        )
                    })?;
                let retry = naming::retry_queue(&queue, delay);
                out.push(WantedQueue::new(
                    retry.clone(),
                    queue_type_arguments(kind),
                    RETRY_EXCHANGE,
                    vec![retry],
                ));
            }
        }
        for tool in &module.serves {
            let key = mesh::raw::ToolKey::parse(tool)
                .ok()
                .filter(|key| {
                    key.as_str()
                        .split_once('.')
                        .is_some_and(|(owner, _)| owner == name.as_str())
                })
                .ok_or_else(|| {
                    fail(
                        Code::Usage,
                        format!("invalid tool `{tool}` of module `{name}`: `{name}.<tool…>`"),
                    )
                })?;
            let mut arguments = queue_type_arguments(kind);
            if kind == QueueType::Quorum {
                arguments.insert("x-delivery-limit".into(), Value::from(delivery_limit));
            }
            out.push(WantedQueue::new(
                naming::serve_queue(&key),
                arguments,
                RPC_EXCHANGE,
                vec![key.as_str().to_owned()],
            ));
        }
        out.extend(schedule_queues(module, &name, kind, delivery_limit)?);
    }
    Ok(out)
}

/// The schedule queue `scheduled.<module>.events` of a module that forwards scheduled events
/// (dead-lettered and limited as a consumer queue, bound on `mesh.retry` on its own name,
/// where `emit_at` publishes) and its hop queues up to the longest hop (its retry queues).
fn schedule_queues(
    module: &ModuleSpec,
    name: &Name,
    kind: QueueType,
    delivery_limit: u32,
) -> anyhow::Result<Vec<WantedQueue>> {
    use mesh::schedule::plan::{hops_up_to, HOPS, MAX_LONGEST_HOP, MIN_LONGEST_HOP};
    let longest = match &module.longest_schedule_hop {
        None if !module.forward_scheduled => return Ok(Vec::new()),
        None => HOPS[HOPS.len() - 1],
        Some(text) => humantime::parse_duration(text.trim())
            .ok()
            .filter(|d| (MIN_LONGEST_HOP..=MAX_LONGEST_HOP).contains(d))
            .ok_or_else(|| {
                fail(
                    Code::Usage,
                    format!(
                        "invalid longest_schedule_hop `{text}` of module `{name}`: a duration                          from 1s to 15m"
                    ),
                )
            })?,
    };
    let queue = naming::schedule_queue(name);
    let mut out = vec![WantedQueue::new(
        queue.clone(),
        consumer_arguments(kind, delivery_limit),
        RETRY_EXCHANGE,
        vec![queue.clone()],
    )];
    for hop in hops_up_to(longest) {
        let hop = naming::retry_queue(&queue, hop);
        out.push(WantedQueue::new(
            hop.clone(),
            queue_type_arguments(kind),
            RETRY_EXCHANGE,
            vec![hop],
        ));
    }
    Ok(out)
}

/// The node: the global `--node` if given, else the spec file's, else `default_node`.
fn node_of(
    node: Option<Name>,
    file: &SpecFile,
    default_node: impl FnOnce() -> anyhow::Result<Name>,
) -> anyhow::Result<Name> {
    Ok(match (node, &file.node) {
        (Some(node), _) => node,
        (None, Some(text)) => Name::parse(text).coded(Code::Usage, || {
            format!("invalid node `{text}` in the spec file")
        })?,
        (None, None) => default_node()?,
    })
}

/// The modules `--module`, `--pattern` and `--bind` give.
fn command_line_modules(args: &TopologyArgs) -> anyhow::Result<Vec<ModuleSpec>> {
    let mut from_args: Vec<ModuleSpec> = args
        .modules
        .iter()
        .map(|name| ModuleSpec {
            name: name.clone(),
            patterns: Vec::new(),
            queue_type: None,
            shared: false,
            auth: ModuleAuth::Password,
            calls: None,
            retry: Vec::new(),
            serves: Vec::new(),
            forward_scheduled: false,
            longest_schedule_hop: None,
            from_command_line: true,
        })
        .collect();
    for (i, pattern) in args.patterns.iter().enumerate() {
        // With one --module, every --pattern is its own wherever it stands; with several,
        // the --module before it (the older positional form).
        let owner = if from_args.len() == 1 {
            Some(0)
        } else {
            args.pattern_owner.get(i).copied().flatten()
        };
        match owner {
            Some(owner) if owner < from_args.len() => {
                from_args[owner].patterns.push(pattern.clone());
            }
            _ => {
                return Err(fail(
                    Code::Usage,
                    format!(
                        "--pattern `{pattern}` belongs to no --module: write --bind M={pattern}"
                    ),
                ))
            }
        }
    }
    // `--bind M=P`: the module's own, in any order (a module not given with --module is
    // added).
    for binding in &args.bindings {
        let at = match from_args.iter().position(|m| m.name == binding.module) {
            Some(at) => at,
            None => {
                from_args.push(ModuleSpec {
                    name: binding.module.clone(),
                    patterns: Vec::new(),
                    queue_type: None,
                    shared: false,
                    auth: ModuleAuth::Password,
                    calls: None,
                    retry: Vec::new(),
                    serves: Vec::new(),
                    forward_scheduled: false,
                    longest_schedule_hop: None,
                    from_command_line: true,
                });
                from_args.len() - 1
            }
        };
        from_args[at].patterns.push(binding.pattern.clone());
    }
    Ok(from_args)
}

/// Each wanted queue with its type and its patterns (unsorted).
type Queues = BTreeMap<String, (QueueType, Vec<String>)>;

/// One queue per module name (and sharing): patterns of repeated modules are merged. Also
/// the audit logger's queues of dead letters, with their queue type, if it is one of them:
/// `<node>.audit-logger.dead`, or `shared.audit-logger.dead` for a shared audit logger.
fn queues_of(
    modules: Vec<ModuleSpec>,
    node: &Name,
    default_type: QueueType,
) -> anyhow::Result<(Queues, Queues)> {
    let mut queues = Queues::new();
    let mut audit_dead = Queues::new();
    for module in modules {
        let name = Name::parse(&module.name).coded(Code::Usage, || {
            format!("invalid module name `{}`", module.name)
        })?;
        if module.patterns.is_empty() {
            // In a spec file, a module that only emits and calls (it still has its user in
            // the access plan); on the command line, a forgotten `--pattern`.
            if !module.from_command_line {
                continue;
            }
            return Err(fail(
                Code::Usage,
                format!("module `{name}` has no pattern: its queue would receive nothing"),
            ));
        }
        let queue = if module.shared {
            naming::shared_queue(&name)
        } else {
            naming::consumer_queue(node, &name)
        };
        let kind = module.queue_type.map(queue_type).unwrap_or(default_type);
        if name.as_str() == AUDIT_MODULE {
            let dead = if module.shared {
                naming::shared_audit_dead_queue()
            } else {
                naming::audit_dead_queue(node)
            };
            audit_dead
                .entry(dead)
                .or_insert((kind, vec!["#".to_owned()]));
        }
        let entry = queues.entry(queue.clone()).or_insert((kind, Vec::new()));
        if entry.0 != kind {
            return Err(fail(
                Code::Usage,
                format!("module `{name}` is given with two queue types"),
            ));
        }
        for pattern in &module.patterns {
            let parsed = TopicPattern::parse(pattern).coded(Code::Usage, || {
                format!("invalid pattern `{pattern}` of module `{name}`")
            })?;
            entry.1.push(parsed.to_string());
        }
    }
    Ok((queues, audit_dead))
}

/// The exchanges every node wants.
fn base_exchanges() -> Vec<WantedExchange> {
    [
        (EVENTS_EXCHANGE, "topic"),
        (RPC_EXCHANGE, "topic"),
        (DEAD_EXCHANGE, "topic"),
        (RETRY_EXCHANGE, "topic"),
        (REPLY_EXCHANGE, "topic"),
        // Declared here so no module user needs `configure` on it to ship its logs.
        (naming::LOGS_EXCHANGE, "topic"),
    ]
    .into_iter()
    .map(|(name, kind)| WantedExchange::new(name, kind))
    .collect()
}

/// The access plan's spec from a spec file: its node (the global `--node` wins, else the
/// file's, else `default_node`), its modules with their patterns, and its `[access]` table.
pub(crate) fn access_spec(
    path: &Path,
    node: Option<Name>,
    default_node: impl FnOnce() -> anyhow::Result<Name>,
) -> anyhow::Result<AccessSpec> {
    let file = read_spec(path)?;
    let node = node_of(node, &file, default_node)?;
    let table = file.access.unwrap_or_default();
    let prefix = table.user_prefix.unwrap_or_default();
    // A reply key starts with its caller's user name: one starting with `amq.` would look
    // like the queue name of a caller of an earlier version.
    if prefix.len() > MAX_USER_PREFIX_LEN
        || prefix.chars().any(char::is_control)
        || prefix.starts_with("amq.")
    {
        return Err(fail(
            Code::Usage,
            format!(
                "invalid user_prefix in the spec file: at most {MAX_USER_PREFIX_LEN} bytes, no \
                 control character, not starting with `amq.`"
            ),
        ));
    }
    let mut spec = AccessSpec::new(node)
        .user_prefix(prefix)
        .node_user(table.node_user.unwrap_or(true))
        .runtime_declares_queues(table.runtime_declares_queues.unwrap_or(false));
    for context in &table.contexts {
        let name = Name::parse(context).coded(Code::Usage, || {
            format!("invalid context name `{context}` in the spec file")
        })?;
        spec = spec.context(name);
    }
    for module in file.modules {
        let name = Name::parse(&module.name).coded(Code::Usage, || {
            format!("invalid module name `{}`", module.name)
        })?;
        let mut patterns = Vec::new();
        for pattern in &module.patterns {
            patterns.push(TopicPattern::parse(pattern).coded(Code::Usage, || {
                format!("invalid pattern `{pattern}` of module `{name}`")
            })?);
        }
        if module.auth == ModuleAuth::Certificate {
            spec = spec.certificate_login(name.clone());
        }
        if let Some(calls) = &module.calls {
            let mut tools = Vec::new();
            for tool in calls {
                tools.push(TopicPattern::parse(tool).coded(Code::Usage, || {
                    format!("invalid tool pattern `{tool}` in the calls of module `{name}`")
                })?);
            }
            spec = spec.calls(name.clone(), tools);
        }
        if module.shared && name.as_str() == AUDIT_MODULE {
            spec = spec.shared_audit_logger(true);
        }
        spec = spec.module(name, patterns);
    }
    Ok(spec)
}

/// The limits the `[access]` table of the spec file at `path` sets.
pub(crate) fn access_limits(path: &Path) -> anyhow::Result<LimitsSpec> {
    let table = read_spec(path)?.access.unwrap_or_default();
    Ok(LimitsSpec::new()
        .max_connections(table.max_connections)
        .max_channels(table.max_channels)
        .max_queues(table.max_queues))
}

fn read_spec(path: &Path) -> anyhow::Result<SpecFile> {
    let text = crate::config::read_settings_file(path)
        .with_context(|| format!("reading the spec file {}", path.display()))?;
    let is_json = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"));
    let parsed = if is_json {
        serde_json::from_str(&text).map_err(anyhow::Error::new)
    } else {
        toml::from_str(&text).map_err(anyhow::Error::new)
    };
    parsed.coded(Code::Usage, || {
        format!("invalid spec file {}", path.display())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(modules: &[&str], patterns: &[(&str, Option<usize>)]) -> TopologyArgs {
        TopologyArgs {
            bindings: Vec::new(),
            modules: modules.iter().map(|m| (*m).to_owned()).collect(),
            patterns: patterns.iter().map(|(p, _)| (*p).to_owned()).collect(),
            pattern_owner: patterns.iter().map(|(_, o)| *o).collect(),
            spec: None,
            delivery_limit: None,
        }
    }

    fn node() -> Option<Name> {
        Some(Name::parse("anchor").unwrap())
    }

    fn no_default() -> anyhow::Result<Name> {
        panic!("the default node is not needed")
    }

    #[test]
    fn the_base_is_always_wanted() {
        let wanted = wanted(&args(&[], &[]), None, node(), no_default).unwrap();
        let names: Vec<_> = wanted.exchanges.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "mesh.events",
                "mesh.rpc",
                "mesh.events.dead",
                "mesh.retry",
                "mesh.replies",
                "mesh.logs"
            ]
        );
        assert_eq!(wanted.exchanges[4].kind, "topic");
        assert_eq!(wanted.exchanges[5].kind, "topic");
        // `mesh.dead-letters` is retired: no queue is wanted for dead letters by default.
        assert!(wanted.queues.is_empty());
    }

    #[test]
    fn the_audit_logger_wants_its_queue_of_dead_letters() {
        let a = args(&["audit-logger"], &[("#", Some(0))]);
        let wanted = wanted(&a, Some(QueueTypeArg::Classic), node(), no_default).unwrap();
        let names: Vec<_> = wanted.queues.iter().map(|q| q.name.as_str()).collect();
        assert_eq!(
            names,
            ["anchor.audit-logger.dead", "anchor.audit-logger.events"]
        );
        let dead = &wanted.queues[0];
        assert_eq!(dead.exchange, "mesh.events.dead");
        assert_eq!(dead.patterns, ["#"]);
        assert_eq!(
            Value::Object(dead.arguments.clone()),
            serde_json::json!({"x-queue-type": "classic"})
        );
    }

    #[test]
    fn a_shared_audit_logger_wants_the_shared_queues_and_its_user_consumes_them() {
        let dir = std::env::temp_dir().join(format!("mesh-cli-shared-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("mesh.toml");
        std::fs::write(
            &path,
            "node = \"n1\"\n[[modules]]\nname = \"audit-logger\"\npatterns = [\"#\"]\nshared = true\n",
        )
        .unwrap();
        let mut a = args(&[], &[]);
        a.spec = Some(path.clone());
        let wanted = wanted(&a, None, None, no_default).unwrap();
        let names: Vec<_> = wanted.queues.iter().map(|q| q.name.as_str()).collect();
        assert_eq!(
            names,
            ["shared.audit-logger.dead", "shared.audit-logger.events"]
        );
        let dead = &wanted.queues[0];
        assert_eq!(dead.exchange, "mesh.events.dead");
        assert_eq!(dead.patterns, ["#"]);
        assert_eq!(
            Value::Object(dead.arguments.clone()),
            serde_json::json!({"x-queue-type": "quorum"})
        );
        let events = &wanted.queues[1];
        assert_eq!(events.exchange, "mesh.events");
        assert_eq!(events.patterns, ["#"]);
        assert_eq!(
            events.arguments["x-dead-letter-exchange"],
            "mesh.events.dead"
        );

        // The access plan: the node's logger user, on the shared queues.
        let spec = access_spec(&path, None, no_default).unwrap();
        let grants = mesh::amqp::access::grants(&spec);
        let logger = grants
            .iter()
            .find(|g| g.user == "audit-logger.n1")
            .expect("the logger's user");
        assert_eq!(
            logger.permissions.configure,
            r"^(?:shared\.audit\-logger\.(?:events|dead)(?:\.retry\.[^.]+)?|mesh\.dead\-letters|amq\.gen-.+)$"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn patterns_belong_to_the_module_before_them() {
        let a = args(
            &["billing", "mailer"],
            &[
                ("module.umami.#", Some(0)),
                ("node.*.joined", Some(1)),
                ("a.b", Some(0)),
            ],
        );
        let wanted = wanted(&a, None, node(), no_default).unwrap();
        let billing = wanted
            .queues
            .iter()
            .find(|q| q.name == "anchor.billing.events")
            .unwrap();
        assert_eq!(billing.patterns, ["a.b", "module.umami.#"]);
        assert_eq!(billing.arguments["x-queue-type"], "quorum");
        assert_eq!(
            billing.arguments["x-dead-letter-exchange"],
            "mesh.events.dead"
        );
        assert_eq!(billing.arguments["x-delivery-limit"], 20);
        let mailer = wanted
            .queues
            .iter()
            .find(|q| q.name == "anchor.mailer.events")
            .unwrap();
        assert_eq!(mailer.patterns, ["node.*.joined"]);
    }

    fn patterns_of(wanted: &Wanted, queue: &str) -> Vec<String> {
        wanted
            .queues
            .iter()
            .find(|q| q.name == queue)
            .map(|q| q.patterns.clone())
            .unwrap_or_default()
    }

    #[test]
    fn with_one_module_a_pattern_is_its_own_wherever_it_stands() {
        // `--pattern a.# --module billing`: the pattern stands before the module.
        let a = args(&["billing"], &[("a.#", None), ("b.*", Some(0))]);
        let wanted = wanted(&a, None, node(), no_default).unwrap();
        assert_eq!(
            patterns_of(&wanted, "anchor.billing.events"),
            ["a.#", "b.*"]
        );
    }

    #[test]
    fn bind_pairs_a_module_and_a_pattern_in_any_order() {
        let mut a = args(&["mailer"], &[("node.*.joined", Some(0))]);
        a.bindings = ["billing=module.umami.#", "mailer=x.y", "billing=a.b"]
            .into_iter()
            .map(|text| crate::cli::parse_binding(text).unwrap())
            .collect();
        let found = wanted(&a, None, node(), no_default).unwrap();
        assert_eq!(
            patterns_of(&found, "anchor.billing.events"),
            ["a.b", "module.umami.#"]
        );
        assert_eq!(
            patterns_of(&found, "anchor.mailer.events"),
            ["node.*.joined", "x.y"]
        );
        // Split at the first `=`; both sides are needed.
        let binding = crate::cli::parse_binding("m=a.=b").unwrap();
        assert_eq!(
            (binding.module.as_str(), binding.pattern.as_str()),
            ("m", "a.=b")
        );
        for bad in ["billing", "=a.b", "billing=", ""] {
            assert!(crate::cli::parse_binding(bad).is_err(), "{bad}");
        }
        // The module name and the pattern are checked as any other.
        let mut bad = args(&[], &[]);
        bad.bindings = vec![crate::cli::parse_binding("bil.ling=a.b").unwrap()];
        let error = wanted(&bad, None, node(), no_default).unwrap_err();
        assert_eq!(crate::exit::classify(&error), Code::Usage);
        bad.bindings = vec![crate::cli::parse_binding("billing=a*").unwrap()];
        assert!(wanted(&bad, None, node(), no_default).is_err());
    }

    #[test]
    fn bad_input_is_a_usage_error() {
        // With several modules, a pattern before all of them belongs to none.
        let orphan = args(&["billing", "mailer"], &[("a.#", None)]);
        let error = wanted(&orphan, None, node(), no_default).unwrap_err();
        assert_eq!(crate::exit::classify(&error), Code::Usage);
        assert!(error.to_string().contains("--bind M=a.#"), "{error}");
        let bad = args(&["billing"], &[("a*", Some(0))]);
        assert!(wanted(&bad, None, node(), no_default).is_err());
        let empty = args(&["billing"], &[]);
        assert!(wanted(&empty, None, node(), no_default).is_err());
        let dotted = args(&["a.b"], &[("#", Some(0))]);
        assert!(wanted(&dotted, None, node(), no_default).is_err());
    }

    #[test]
    fn classic_queues_have_no_delivery_limit() {
        let arguments = consumer_arguments(QueueType::Classic, 20);
        assert_eq!(arguments["x-queue-type"], "classic");
        assert!(!arguments.contains_key("x-delivery-limit"));
    }

    #[test]
    fn spec_files_are_read_as_toml_or_json() {
        let dir = std::env::temp_dir().join(format!("mesh-cli-spec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let toml_path = dir.join("mesh.toml");
        std::fs::write(
            &toml_path,
            "node = \"n1\"\ndelivery_limit = 7\n[[modules]]\nname = \"billing\"\npatterns = [\"module.umami.#\"]\nqueue_type = \"classic\"\n[[modules]]\nname = \"work\"\npatterns = [\"#\"]\nshared = true\n",
        )
        .unwrap();
        let mut a = args(&[], &[]);
        a.spec = Some(toml_path);
        let wanted = wanted(&a, None, None, no_default).unwrap();
        assert_eq!(wanted.node.as_str(), "n1");
        let billing = wanted
            .queues
            .iter()
            .find(|q| q.name == "n1.billing.events")
            .unwrap();
        assert_eq!(billing.arguments["x-queue-type"], "classic");
        let work = wanted
            .queues
            .iter()
            .find(|q| q.name == "shared.work.events")
            .unwrap();
        assert_eq!(work.arguments["x-delivery-limit"], 7);

        let json_path = dir.join("mesh.json");
        std::fs::write(
            &json_path,
            r#"{"modules":[{"name":"m","patterns":["x.y"]}]}"#,
        )
        .unwrap();
        a.spec = Some(json_path);
        let wanted = super::wanted(&a, None, node(), no_default).unwrap();
        assert!(wanted.queues.iter().any(|q| q.name == "anchor.m.events"));

        // The `[access]` table is read by `mesh access` and allowed by `topology`.
        let access_path = dir.join("access.toml");
        std::fs::write(
            &access_path,
            "node = \"n1\"\n[access]\nuser_prefix = \"acme/\"\ncontexts = [\"ctx\"]\nnode_user = false\n[[modules]]\nname = \"billing\"\npatterns = [\"module.umami.#\"]\n",
        )
        .unwrap();
        a.spec = Some(access_path.clone());
        assert!(super::wanted(&a, None, None, no_default).is_ok());
        let spec = access_spec(&access_path, None, no_default).unwrap();
        let users: Vec<String> = mesh::amqp::access::grants(&spec)
            .into_iter()
            .map(|g| g.user)
            .collect();
        assert_eq!(
            users,
            ["acme/operator", "acme/mesh.ctx", "acme/module.billing"]
        );
        // Modules configure server-named queues only, unless the spec gives theirs back.
        let configure = |text: &str| {
            std::fs::write(&access_path, text).unwrap();
            let spec = access_spec(&access_path, None, no_default).unwrap();
            mesh::amqp::access::grants(&spec)
                .into_iter()
                .find(|g| g.user == "module.billing")
                .unwrap()
                .permissions
                .configure
        };
        let module = "[[modules]]\nname = \"billing\"\npatterns = [\"module.umami.#\"]\n";
        assert_eq!(
            configure(&format!("node = \"n1\"\n{module}")),
            r"^(?:amq\.gen-.+)$"
        );
        assert!(configure(&format!(
            "node = \"n1\"\n[access]\nruntime_declares_queues = true\n{module}"
        ))
        .contains(r"billing\.events"));
        // Per module: the certificate login and the tools it may call.
        std::fs::write(
            &access_path,
            "node = \"n1\"\n[[modules]]\nname = \"umami\"\nauth = \"certificate\"\n\
             calls = [\"billing.quote\"]\n[[modules]]\nname = \"billing\"\ncalls = []\n",
        )
        .unwrap();
        let grants =
            mesh::amqp::access::grants(&access_spec(&access_path, None, no_default).unwrap());
        let of = |user: &str| grants.iter().find(|g| g.user == user).unwrap();
        let rpc_write = |user: &str| {
            of(user)
                .topic
                .iter()
                .find(|t| t.exchange == "mesh.rpc")
                .unwrap()
                .write
                .clone()
        };
        assert!(of("module.umami").certificate);
        assert!(!of("module.billing").certificate);
        assert_eq!(rpc_write("module.umami"), r"^(?:billing\.quote)$");
        assert_eq!(rpc_write("module.billing"), "^$");
        assert_eq!(rpc_write("node.n1"), ".*");
        for bad in [
            "[[modules]]\nname = \"m\"\nauth = \"kerberos\"\n",
            "[[modules]]\nname = \"m\"\ncalls = [\"a..b\"]\n",
        ] {
            std::fs::write(&access_path, bad).unwrap();
            let error = access_spec(&access_path, node(), no_default).unwrap_err();
            assert_eq!(crate::exit::classify(&error), Code::Usage, "{bad}");
        }
        std::fs::write(&access_path, "[access]\nuser_prefix = \"a\\nb\"\n").unwrap();
        let error = access_spec(&access_path, node(), no_default).unwrap_err();
        assert_eq!(crate::exit::classify(&error), Code::Usage);

        let bad_path = dir.join("bad.toml");
        std::fs::write(&bad_path, "modules = 3").unwrap();
        a.spec = Some(bad_path);
        let error = super::wanted(&a, None, node(), no_default).unwrap_err();
        assert_eq!(crate::exit::classify(&error), Code::Usage);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn retry_steps_and_served_tools_want_their_queues() {
        let dir = std::env::temp_dir().join(format!("mesh-cli-spec-rs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("mesh.toml");
        std::fs::write(
            &path,
            "node = \"n1\"\ndelivery_limit = 7\n[[modules]]\nname = \"billing\"\npatterns = [\"module.umami.#\"]\nretry = [\"5s\", \"1m\"]\nserves = [\"billing.quote\"]\nforward_scheduled = true\n[[modules]]\nname = \"quiet\"\nserves = [\"quiet.ping\"]\nretry = [\"5s\"]\nqueue_type = \"classic\"\nlongest_schedule_hop = \"30s\"\n",
        )
        .unwrap();
        let mut a = args(&[], &[]);
        a.spec = Some(path.clone());
        let wanted = wanted(&a, None, None, no_default).unwrap();
        let find = |name: &str| wanted.queues.iter().find(|q| q.name == name);
        for retry in ["n1.billing.events.retry.5s", "n1.billing.events.retry.1m"] {
            let queue = find(retry).unwrap_or_else(|| panic!("{retry} is wanted"));
            assert_eq!(queue.exchange, "mesh.retry");
            assert_eq!(queue.patterns, [retry]);
            assert_eq!(queue.arguments.len(), 1, "{:?}", queue.arguments);
            assert_eq!(queue.arguments["x-queue-type"], "quorum");
        }
        let serve = find("serve.billing.quote").expect("billing's tool queue");
        assert_eq!(serve.exchange, "mesh.rpc");
        assert_eq!(serve.patterns, ["billing.quote"]);
        assert_eq!(serve.arguments["x-delivery-limit"], 7);
        // A module with no pattern has no queue, so no retry queue, but serves its tools.
        assert!(find("n1.quiet.events.retry.5s").is_none());
        let ping = find("serve.quiet.ping").expect("quiet's tool queue");
        assert_eq!(ping.arguments["x-queue-type"], "classic");
        assert!(!ping.arguments.contains_key("x-delivery-limit"));
        // A forwarder's schedule queue (a consumer queue's arguments) and its hops, on
        // `mesh.retry` under their own names; a module with no pattern forwards too.
        let scheduled = find("scheduled.billing.events").expect("billing's schedule queue");
        assert_eq!(scheduled.exchange, "mesh.retry");
        assert_eq!(scheduled.patterns, ["scheduled.billing.events"]);
        assert_eq!(
            scheduled.arguments,
            consumer_arguments(QueueType::Quorum, 7)
        );
        let hops = |module: &str| -> Vec<String> {
            let prefix = format!("scheduled.{module}.events.retry.");
            let of = wanted.queues.iter().filter(|q| q.name.starts_with(&prefix));
            of.map(|q| q.name[prefix.len()..].to_owned()).collect()
        };
        assert_eq!(hops("billing"), ["1s", "5s", "30s", "2m", "10m"]);
        assert_eq!(hops("quiet"), ["1s", "5s", "30s"]);
        assert_eq!(
            find("scheduled.quiet.events.retry.1s")
                .unwrap()
                .arguments
                .len(),
            1
        );

        for (bad, what) in [
            ("retry = [\"0s\"]", "retry"),
            ("retry = [\"16m\"]", "retry"),
            ("retry = [\"soon\"]", "retry"),
            ("serves = [\"other.quote\"]", "tool"),
            ("serves = [\"billing\"]", "tool"),
            ("longest_schedule_hop = \"0s\"", "longest_schedule_hop"),
            ("longest_schedule_hop = \"16m\"", "longest_schedule_hop"),
        ] {
            std::fs::write(
                &path,
                format!(
                    "[[modules]]\nname = \"billing\"\npatterns = [\"module.umami.#\"]\n{bad}\n"
                ),
            )
            .unwrap();
            let error = super::wanted(&a, None, node(), no_default).unwrap_err();
            assert_eq!(crate::exit::classify(&error), Code::Usage, "{bad}");
            assert!(format!("{error:#}").contains(what), "{bad}: {error:#}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
