//! Who may do what: one [`Grant`] per user of an [`AccessSpec`], and the regular
//! expressions they are made of.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use mesh_core::naming::{
    audit_user, operator_user, owner_user, AUDIT_MODULE, DEAD_EXCHANGE, EVENTS_EXCHANGE,
    REPLY_EXCHANGE, RETIRED_DEAD_QUEUE, RETIRED_REPLY_EXCHANGE, RETRY_EXCHANGE, RPC_EXCHANGE,
    SHARED_NODE,
};
use mesh_core::{Name, Origin, TopicPattern};

/// The logs exchange of `mesh-logs` (not a dependency of this crate).
pub const LOGS_EXCHANGE: &str = "mesh.logs";

/// The tag of the operator's user.
pub const OPERATOR_TAG: &str = "management";

/// What the access plan is made from: the node, its modules with their binding patterns,
/// its runtime contexts, and the prefix of every user name.
#[derive(Debug, Clone)]
pub struct AccessSpec {
    prefix: String,
    node: Name,
    modules: BTreeMap<Name, BTreeSet<String>>,
    contexts: BTreeSet<Name>,
    node_user: bool,
    audit_logger: bool,
    shared_audit_logger: bool,
    certificates: BTreeSet<Name>,
    calls: BTreeMap<Name, BTreeSet<String>>,
    runtime_declares_queues: bool,
}

impl AccessSpec {
    /// The spec of `node`: no prefix, no module, no context, a user for the node itself, no
    /// audit logger.
    pub fn new(node: Name) -> AccessSpec {
        AccessSpec {
            prefix: String::new(),
            node,
            modules: BTreeMap::new(),
            contexts: BTreeSet::new(),
            node_user: true,
            audit_logger: false,
            shared_audit_logger: false,
            certificates: BTreeSet::new(),
            calls: BTreeMap::new(),
            runtime_declares_queues: false,
        }
    }

    /// The prefix of every user name (users are global to a broker: deployments sharing one
    /// tell theirs apart by it).
    pub fn user_prefix(mut self, prefix: impl Into<String>) -> AccessSpec {
        self.prefix = prefix.into();
        self
    }

    /// A module binding its queue on `patterns` (merged with those of an earlier call for the
    /// same module). The module `audit-logger` is the node's audit logger
    /// ([`audit_logger`](Self::audit_logger)), whose user is `audit-logger.<node>`.
    pub fn module(mut self, name: Name, patterns: impl IntoIterator<Item = TopicPattern>) -> Self {
        if name.as_str() == AUDIT_MODULE {
            self.audit_logger = true;
            return self;
        }
        self.modules
            .entry(name)
            .or_default()
            .extend(patterns.into_iter().map(|p| p.to_string()));
        self
    }

    /// The module `name` logs in with its client certificate alone (`EXTERNAL`, RabbitMQ's
    /// plugin `rabbitmq_auth_mechanism_ssl`): its user is created without a password, so no
    /// password logs in as it, and the certificate's subject common name must be the user's
    /// name ([`owner_user`], `<prefix>module.<name>`; `audit-logger` names the audit
    /// logger's user).
    pub fn certificate_login(mut self, name: Name) -> AccessSpec {
        self.certificates.insert(name);
        self
    }

    /// The tools module `name` may call, as topic patterns over tool keys
    /// (`<owner>.<tool…>`: `billing.quote`, `billing.#`), merged with an earlier call's; the
    /// broker refuses its requests to any other (topic write on `mesh.rpc`). A module never
    /// given here may call every tool; one given no pattern calls none.
    pub fn calls(mut self, name: Name, tools: impl IntoIterator<Item = TopicPattern>) -> Self {
        self.calls
            .entry(name)
            .or_default()
            .extend(tools.into_iter().map(|p| p.to_string()));
        self
    }

    /// A runtime context (its user owns `mesh.<context>.…`).
    pub fn context(mut self, name: Name) -> AccessSpec {
        self.contexts.insert(name);
        self
    }

    /// Whether the node itself gets a user (owning `node.<node>.…`; default true).
    pub fn node_user(mut self, yes: bool) -> AccessSpec {
        self.node_user = yes;
        self
    }

    /// Whether modules, contexts and the node may declare their own durable queues
    /// (`configure` on their consumer, retry and serve queues' names), as plans before this
    /// option gave them; default false: `configure` on server-named `amq.gen-…` queues only,
    /// so no identity but the operator can declare an exchange (a permission names a
    /// resource, not its kind: `configure` on a queue name lets a user declare an exchange so
    /// named). Then `mesh topology apply` declares every durable queue (each module's `retry`
    /// steps and `serves` listed in the spec), and the runtime finds them with a passive
    /// declare. True only while a deployment's spec does not list them yet.
    pub fn runtime_declares_queues(mut self, yes: bool) -> AccessSpec {
        self.runtime_declares_queues = yes;
        self
    }

    /// Whether the node runs an audit logger.
    pub fn audit_logger(mut self, yes: bool) -> AccessSpec {
        self.audit_logger = yes;
        self
    }

    /// Whether the node's audit logger is a shared one (`mesh-audit run --shared`; default
    /// false), implying [`audit_logger`](Self::audit_logger): its user, still
    /// `audit-logger.<node>`, consumes `shared.audit-logger.events` and
    /// `shared.audit-logger.dead`, which every node's shared logger competes on, rather than
    /// its node's `<node>.audit-logger.…`.
    pub fn shared_audit_logger(mut self, yes: bool) -> AccessSpec {
        self.shared_audit_logger = yes;
        self.audit_logger |= yes;
        self
    }

    /// The prefix of user names.
    pub fn get_user_prefix(&self) -> &str {
        &self.prefix
    }

    /// The node.
    pub fn get_node(&self) -> &Name {
        &self.node
    }
}

/// Whose a user is.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Role {
    /// A module (owns `module.<name>.…`).
    Module(Name),
    /// A runtime context (owns `mesh.<name>.…`).
    Context(Name),
    /// The node itself (owns `node.<name>.…`).
    Node(Name),
    /// The audit logger of a node.
    AuditLogger(Name),
    /// The operator: topology, re-drives, status.
    Operator,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Role::Module(name) => write!(f, "module {name}"),
            Role::Context(name) => write!(f, "context {name}"),
            Role::Node(name) => write!(f, "node {name}"),
            Role::AuditLogger(node) => write!(f, "audit logger of {node}"),
            Role::Operator => f.write_str("operator"),
        }
    }
}

/// A user's permissions on the vhost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permissions {
    /// Declaring and deleting.
    pub configure: String,
    /// Publishing to an exchange, binding a queue.
    pub write: String,
    /// Consuming from a queue, binding from an exchange.
    pub read: String,
}

impl fmt::Display for Permissions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "configure `{}` write `{}` read `{}`",
            self.configure, self.write, self.read
        )
    }
}

/// A user's topic permission on one topic exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicGrant {
    /// The exchange.
    pub exchange: String,
    /// Routing keys it may publish under.
    pub write: String,
    /// Binding keys it may bind (and unbind) a queue on.
    pub read: String,
}

impl fmt::Display for TopicGrant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "write `{}` read `{}`", self.write, self.read)
    }
}

/// What one user may do on the vhost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The user name.
    pub user: String,
    /// Whose it is.
    pub role: Role,
    /// Its tags, sorted.
    pub tags: Vec<String>,
    /// Its permissions.
    pub permissions: Permissions,
    /// Its topic permissions, one per exchange, sorted by exchange.
    pub topic: Vec<TopicGrant>,
    /// It logs in with its client certificate (`EXTERNAL`) and has no password.
    pub certificate: bool,
}

/// `name` as a regular expression matching exactly it: every character a regular expression
/// treats specially is escaped with `\` (Erlang's PCRE and the `regex` crate both read an
/// escaped punctuation character as itself).
pub fn escape(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for c in name.chars() {
        if matches!(
            c,
            '\\' | '.'
                | '+'
                | '*'
                | '?'
                | '('
                | ')'
                | '|'
                | '['
                | ']'
                | '{'
                | '}'
                | '^'
                | '$'
                | '#'
                | '-'
        ) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `^(?:…)$` alternatives of escaped exchange names.
fn alternatives(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| escape(n))
        .collect::<Vec<_>>()
        .join("|")
}

/// The exchanges every identity may read (bind from). The retired `mesh.reply` stays while
/// deployments migrate (callers and servers of both versions answer each other through it);
/// `mesh topology apply` deletes it once no caller of an earlier version uses it, and then
/// the permission names nothing (no module may configure an exchange).
fn read_exchanges() -> String {
    alternatives(&[
        EVENTS_EXCHANGE,
        RPC_EXCHANGE,
        DEAD_EXCHANGE,
        RETRY_EXCHANGE,
        REPLY_EXCHANGE,
        RETIRED_REPLY_EXCHANGE,
    ])
}

/// The exchanges a module, context or node may write to (publish to).
fn write_exchanges() -> String {
    alternatives(&[
        EVENTS_EXCHANGE,
        RPC_EXCHANGE,
        DEAD_EXCHANGE,
        RETRY_EXCHANGE,
        REPLY_EXCHANGE,
        RETIRED_REPLY_EXCHANGE,
        LOGS_EXCHANGE,
    ])
}

/// A topic pattern (`*` one word, `#` any number of words) as an expression matching the
/// routing keys it matches, unanchored: literal words escaped, `*` `[^.]+`, `#` zero or more
/// words with their dots.
pub(super) fn topic_expression(pattern: &str) -> String {
    let words: Vec<&str> = pattern.split('.').collect();
    if words == ["#"] {
        return ANYTHING.to_owned();
    }
    let mut out = String::new();
    // Whether a word has been written: the next one is preceded by a dot.
    let mut started = false;
    for word in words {
        match word {
            "#" if started => out.push_str(r"(?:\.[^.]+)*"),
            "#" => out.push_str(r"(?:[^.]+\.)*"),
            word => {
                if started {
                    out.push_str(r"\.");
                }
                if word == "*" {
                    out.push_str("[^.]+");
                } else {
                    out.push_str(&escape(word));
                }
                started = true;
            }
        }
    }
    out
}

/// The `mesh.rpc` topic write of an identity: the tools it may call (every one without a
/// list, none with an empty one).
fn rpc_write(calls: Option<&BTreeSet<String>>) -> String {
    match calls {
        None => ANYTHING.to_owned(),
        Some(tools) if tools.is_empty() => NOTHING.to_owned(),
        Some(tools) => format!(
            "^(?:{})$",
            tools
                .iter()
                .map(|t| topic_expression(t))
                .collect::<Vec<_>>()
                .join("|")
        ),
    }
}

const NOTHING: &str = "^$";
/// Server-named queues (RPC replies, ephemeral subscriptions, taps): RabbitMQ refuses a
/// client's declaration of any `amq.…` name, queue or exchange.
const SERVER_NAMED: &str = r"amq\.gen-.+";
const ANYTHING: &str = ".*";

pub(super) fn topic(
    exchange: &str,
    write: impl Into<String>,
    read: impl Into<String>,
) -> TopicGrant {
    TopicGrant {
        exchange: exchange.to_owned(),
        write: write.into(),
        read: read.into(),
    }
}

fn sorted(mut topic: Vec<TopicGrant>) -> Vec<TopicGrant> {
    topic.sort_by(|a, b| a.exchange.cmp(&b.exchange));
    topic
}

/// Whose grant [`identity`] makes, and what the spec says of it.
#[derive(Clone, Copy)]
struct Identity<'a> {
    origin: Origin,
    owner: &'a Name,
    /// `Some` for a module (which consumes).
    patterns: Option<&'a BTreeSet<String>>,
    /// The tools it may call, if the spec limits them.
    calls: Option<&'a BTreeSet<String>>,
    /// It may declare its durable queues ([`AccessSpec::runtime_declares_queues`]).
    declares_queues: bool,
}

/// The grant of an identity.
fn identity(prefix: &str, of: Identity<'_>) -> Grant {
    let Identity {
        origin,
        owner,
        patterns,
        calls,
        declares_queues,
    } = of;
    let n = escape(owner.as_str());
    let consumer = patterns.is_some();
    let own_queues = format!(r"[^.]+\.{n}\.events(?:\.retry\.[^.]+)?");
    let mut queues = Vec::new();
    if consumer {
        queues.push(own_queues.clone());
    }
    queues.push(format!(r"serve\.{n}\..+"));
    queues.push(SERVER_NAMED.to_owned());
    let queues = queues.join("|");
    // Without configure on its durable queues, it declares only server-named ones (an
    // exchange cannot be named `amq.…`): `mesh topology apply` declared the others.
    let configure = if declares_queues {
        format!("^(?:{queues})$")
    } else {
        format!("^(?:{SERVER_NAMED})$")
    };
    let (read, write) = (read_exchanges(), write_exchanges());
    let events_read = match patterns {
        Some(patterns) if !patterns.is_empty() => format!(
            "^(?:{})$",
            patterns
                .iter()
                .map(|p| escape(p))
                .collect::<Vec<_>>()
                .join("|")
        ),
        _ => NOTHING.to_owned(),
    };
    // Its retry copies go to its retry queues, and its retry forwarders bring them back to
    // its queue, both through `mesh.retry` under the queue's name: its own queues only.
    let (retry_write, retry_read) = if consumer {
        (format!("^{own_queues}$"), format!("^{own_queues}$"))
    } else {
        (NOTHING.to_owned(), NOTHING.to_owned())
    };
    // Its dead letters are published under the names of its queues that dead-letter (its
    // consumer and retry queues, its serve queues): it writes and reads those only.
    let dead = if consumer {
        format!(r"^(?:{own_queues}|serve\.{n}\..+)$")
    } else {
        format!(r"^serve\.{n}\..+$")
    };
    let role = match origin {
        Origin::Module => Role::Module(owner.clone()),
        Origin::Mesh => Role::Context(owner.clone()),
        Origin::Node => Role::Node(owner.clone()),
    };
    let user = owner_user(prefix, origin, owner);
    Grant {
        user: user.clone(),
        role,
        tags: Vec::new(),
        certificate: false,
        permissions: Permissions {
            configure,
            write: format!("^(?:{queues}|{write})$"),
            read: format!("^(?:{queues}|{read})$"),
        },
        topic: sorted(vec![
            topic(
                EVENTS_EXCHANGE,
                format!(r"^{}\.{n}\.", escape(origin.as_str())),
                events_read,
            ),
            topic(RPC_EXCHANGE, rpc_write(calls), format!(r"^{n}\.")),
            topic(RETRY_EXCHANGE, retry_write, retry_read),
            topic(DEAD_EXCHANGE, dead.clone(), dead),
            topic(LOGS_EXCHANGE, format!(r"^[^.]+\.{n}\."), NOTHING),
            // It answers any caller, and binds only its own replies.
            topic(REPLY_EXCHANGE, ANYTHING, own_replies(&user)),
        ]),
    }
}

/// The binding keys of `user`'s replies on `mesh.replies`: its reply keys,
/// `<user>.<queue>`.
fn own_replies(user: &str) -> String {
    format!(r"^{}\.", escape(user))
}

/// The audit logger's grant: its queues are its node's, or with `shared` the shared ones
/// (`shared.audit-logger.…`), never both.
fn audit(prefix: &str, node: &Name, shared: bool) -> Grant {
    let user = audit_user(prefix, node);
    let x = escape(node.as_str());
    let logger = escape(AUDIT_MODULE);
    let queues_node = if shared {
        escape(SHARED_NODE)
    } else {
        x.clone()
    };
    let own = format!(r"{queues_node}\.{logger}\.(?:events|dead)");
    let queues = format!(
        r"{own}(?:\.retry\.[^.]+)?|{}|amq\.gen-.+",
        escape(RETIRED_DEAD_QUEUE)
    );
    Grant {
        user: user.clone(),
        role: Role::AuditLogger(node.clone()),
        // Its transport lists its queue's bindings through the management API to remove
        // stale ones (removed over AMQP, with the permissions below): reading needs a tag.
        tags: vec![OPERATOR_TAG.to_owned()],
        certificate: false,
        permissions: Permissions {
            configure: format!("^(?:{queues})$"),
            write: format!(
                "^(?:{queues}|{})$",
                alternatives(&[DEAD_EXCHANGE, RETRY_EXCHANGE, LOGS_EXCHANGE])
            ),
            read: format!("^(?:{queues}|{})$", read_exchanges()),
        },
        topic: sorted(vec![
            topic(EVENTS_EXCHANGE, NOTHING, ANYTHING),
            topic(RPC_EXCHANGE, NOTHING, NOTHING),
            topic(
                RETRY_EXCHANGE,
                format!(r"^{own}(?:\.retry\.[^.]+)?$"),
                format!(r"^{own}(?:\.retry\.[^.]+)?$"),
            ),
            // It dead-letters under its own queue's name only, and reads every dead letter.
            topic(
                DEAD_EXCHANGE,
                format!(r"^{own}(?:\.retry\.[^.]+)?$"),
                ANYTHING,
            ),
            topic(LOGS_EXCHANGE, format!(r"^{x}\.{logger}\."), NOTHING),
            topic(REPLY_EXCHANGE, NOTHING, own_replies(&user)),
        ]),
    }
}

fn operator(prefix: &str) -> Grant {
    Grant {
        user: operator_user(prefix),
        role: Role::Operator,
        tags: vec![OPERATOR_TAG.to_owned()],
        certificate: false,
        permissions: Permissions {
            configure: ANYTHING.to_owned(),
            write: ANYTHING.to_owned(),
            read: ANYTHING.to_owned(),
        },
        topic: Vec::new(),
    }
}

/// One grant per user of the spec: the operator, the audit logger (if any), the node (if it
/// has a user), each context and each module, in that order.
pub fn grants(spec: &AccessSpec) -> Vec<Grant> {
    let prefix = spec.prefix.as_str();
    let mut out = vec![operator(prefix)];
    if spec.audit_logger {
        let mut logger = audit(prefix, &spec.node, spec.shared_audit_logger);
        logger.certificate = spec.certificates.iter().any(|m| m.as_str() == AUDIT_MODULE);
        out.push(logger);
    }
    let declares_queues = spec.runtime_declares_queues;
    let of = |origin, owner| Identity {
        origin,
        owner,
        patterns: None,
        calls: None,
        declares_queues,
    };
    if spec.node_user {
        out.push(identity(prefix, of(Origin::Node, &spec.node)));
    }
    for context in &spec.contexts {
        out.push(identity(prefix, of(Origin::Mesh, context)));
    }
    for (module, patterns) in &spec.modules {
        let mut grant = identity(
            prefix,
            Identity {
                patterns: Some(patterns),
                calls: spec.calls.get(module),
                ..of(Origin::Module, module)
            },
        );
        grant.certificate = spec.certificates.contains(module);
        out.push(grant);
    }
    // Two identities of one user name (a context named like the node…) would fight: keep
    // the first.
    let mut seen = BTreeSet::new();
    out.retain(|g| seen.insert(g.user.clone()));
    out
}
