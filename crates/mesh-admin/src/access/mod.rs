//! The access plan: which broker user may do what on a vhost, so that each module's user can
//! only do what it owns (issue #18, "identity enforced by the broker").
//!
//! Pure parts first: an [`AccessSpec`] (the node, its modules with their binding patterns,
//! its runtime contexts, whether it has an audit logger) gives one [`Grant`] per user
//! ([`grants`]); [`plan`] compares the grants with what the broker has ([`BrokerAccess`]) and
//! lists the [`Change`]s; then [`read`] and [`apply`] do the I/O through the
//! [`ManagementClient`]. `mesh access plan|apply` is the command on top.
//!
//! # The rules
//!
//! RabbitMQ matches each permission, an unanchored regular expression, against a resource
//! name (queue or exchange; the default exchange is named `amq.default`), and each topic
//! permission against a routing key (`write`, checked on publish) or a binding key (`read`,
//! checked on `queue.bind` and `queue.unbind`) on one topic exchange. Every expression here is
//! anchored and keeps to the subset Erlang's PCRE and the `regex` crate read alike (`^ $ (?:
//! | ) [^.] + * \.`); names are escaped ([`escape`]: `a.b-c` is `a\.b\-c`), topic patterns too (`*` and
//! `#` included). A user with no topic permission on an exchange may use any key there, so every
//! topic exchange a user reaches gets one.
//!
//! An identity of origin `o` (`module`, `mesh` for a runtime context, `node` for the node
//! itself) and owner `N` (the module, the context or the node name, escaped) is the user
//! [`owner_user`]`(prefix, o, N)` = `<prefix><o>.<N>`. Its queues `Q` are, for a module,
//! `[^.]+\.N\.events(?:\.retry\.[^.]+)?` (its consumer queue on any node, `shared.N.events`
//! included, and their retry queues), and for every identity `serve\.N\..+` (it serves only
//! its own tools, `<N>.<tool…>`) and `amq\.gen-.+` (server-named queues: RPC replies,
//! ephemeral subscriptions). A context or the node never consumes a durable queue (only a
//! module does, see `mesh::Bus`), so its `Q` has no consumer or retry queue and its topic
//! permissions on `mesh.retry` are `^$`.
//!
//! | user | configure | write | read |
//! |---|---|---|---|
//! | `<o>.<N>` | `^(?:Q)$` | `^(?:Q\|mesh\.events\|mesh\.rpc\|mesh\.events\.dead\|mesh\.retry\|mesh\.reply\|mesh\.logs)$` | `^(?:Q\|mesh\.events\|mesh\.rpc\|mesh\.events\.dead\|mesh\.retry\|mesh\.reply)$` |
//! | `audit-logger.<X>` | `^(?:A)$` | `^(?:A\|mesh\.events\.dead\|mesh\.retry\|mesh\.logs)$` | `^(?:A\|mesh\.events\|mesh\.rpc\|mesh\.events\.dead\|mesh\.retry\|mesh\.reply)$` |
//! | `operator` | `.*` | `.*` | `.*` |
//!
//! where `A` = `X\.audit\-logger\.(?:events|dead)(?:\.retry\.[^.]+)?|mesh\.dead\-letters|amq\.gen-.+`
//! for the audit logger of node `X` (it unbinds, drains and deletes the retired
//! `mesh.dead-letters`). No user but the operator has `configure` on an exchange (the runtime
//! declares mesh's exchanges passively; `configure` would let a module delete
//! `mesh.events`), nor `write` on `amq.default` (the default exchange writes into any queue).
//!
//! Topic permissions (write / read):
//!
//! | exchange | `<o>.<N>` | `audit-logger.<X>` |
//! |---|---|---|
//! | `mesh.events` | `^o\.N\.` / `^(?:P1\|P2…)$`, its spec patterns exactly (`^$` without) | `^$` / `.*` |
//! | `mesh.rpc` | `.*` / `^N\.` (it calls any tool, serves only its own) | `^$` / `^$` |
//! | `mesh.retry` | `^[^.]+\.N\.events(?:\.retry\.[^.]+)?$` / the same (`^$` / `^$` for a context or the node): its retry copies to its retry queues, and its retry forwarders' copies back to its queue | `^X\.audit-logger\.(?:events\|dead)(?:\.retry\.[^.]+)?$` / the same |
//! | `mesh.events.dead` | `.*` / `.*` (a consumer dead-letters copies under other owners' keys) | `.*` / `.*` |
//! | `mesh.logs` | `^[^.]+\.N\.` / `^$` | `^X\.audit-logger\.` / `^$` |
//!
//! The operator ([`operator_user`]) has no topic permission (so no limit) and the tag
//! `management`: it runs `mesh topology apply`, `mesh dead redrive` (through the default
//! exchange) and `mesh status`. Module, context, node and audit-logger users have no tag:
//! AMQP only. `mesh.reply` is a direct exchange, where topic permissions do not apply.
//!
//! # Plan and apply
//!
//! The plan lists, for each planned user: missing, a password that differs from the stored
//! hash (checked for `rabbit_password_hashing_sha256` and `…_sha512`: base64 of a 4-byte salt
//! and the hash of salt and password), tags that differ, permissions missing or different,
//! topic permissions missing, different or not wanted. Users the plan does not name are never
//! changed; those carrying the prefix with permissions on the vhost are listed as notes.
//! [`apply`] makes exactly the changes: `PUT` the user only when it is missing or its
//! password or tags differ, `PUT` its permissions, `PUT` each missing or different topic
//! permission, and only when one is not wanted, `DELETE` all of the user's topic permissions
//! and `PUT` the wanted ones again (the management API deletes them together; the user has
//! no limit on topic keys in between).
//!
//! Passwords never appear in a `Debug`, an error or a log line ([`Password`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use base64::Engine as _;
use mesh_core::naming::{
    AUDIT_MODULE, DEAD_EXCHANGE, EVENTS_EXCHANGE, REPLY_EXCHANGE, RETIRED_DEAD_QUEUE,
    RETRY_EXCHANGE, RPC_EXCHANGE,
};
use mesh_core::{Name, Origin, TopicPattern};
use sha2::Digest as _;

use crate::management::{
    ManagementClient, ManagementError, ManagementErrorKind, PermissionRow, TopicPermissionRow,
    UserRow,
};

pub use mesh_core::naming::{audit_user, operator_user, owner_user};

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

    /// Whether the node runs an audit logger.
    pub fn audit_logger(mut self, yes: bool) -> AccessSpec {
        self.audit_logger = yes;
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

/// The exchanges every identity may read (bind from).
fn read_exchanges() -> String {
    alternatives(&[
        EVENTS_EXCHANGE,
        RPC_EXCHANGE,
        DEAD_EXCHANGE,
        RETRY_EXCHANGE,
        REPLY_EXCHANGE,
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
        LOGS_EXCHANGE,
    ])
}

const NOTHING: &str = "^$";
const ANYTHING: &str = ".*";

fn topic(exchange: &str, write: impl Into<String>, read: impl Into<String>) -> TopicGrant {
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

/// The grant of an identity; `patterns` is `Some` for a module (which consumes).
fn identity(
    prefix: &str,
    origin: Origin,
    owner: &Name,
    patterns: Option<&BTreeSet<String>>,
) -> Grant {
    let n = escape(owner.as_str());
    let consumer = patterns.is_some();
    let own_queues = format!(r"[^.]+\.{n}\.events(?:\.retry\.[^.]+)?");
    let mut queues = Vec::new();
    if consumer {
        queues.push(own_queues.clone());
    }
    queues.push(format!(r"serve\.{n}\..+"));
    queues.push(r"amq\.gen-.+".to_owned());
    let queues = queues.join("|");
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
    let role = match origin {
        Origin::Module => Role::Module(owner.clone()),
        Origin::Mesh => Role::Context(owner.clone()),
        Origin::Node => Role::Node(owner.clone()),
    };
    Grant {
        user: owner_user(prefix, origin, owner),
        role,
        tags: Vec::new(),
        permissions: Permissions {
            configure: format!("^(?:{queues})$"),
            write: format!("^(?:{queues}|{write})$"),
            read: format!("^(?:{queues}|{read})$"),
        },
        topic: sorted(vec![
            topic(
                EVENTS_EXCHANGE,
                format!(r"^{}\.{n}\.", escape(origin.as_str())),
                events_read,
            ),
            topic(RPC_EXCHANGE, ANYTHING, format!(r"^{n}\.")),
            topic(RETRY_EXCHANGE, retry_write, retry_read),
            topic(DEAD_EXCHANGE, ANYTHING, ANYTHING),
            topic(LOGS_EXCHANGE, format!(r"^[^.]+\.{n}\."), NOTHING),
        ]),
    }
}

fn audit(prefix: &str, node: &Name) -> Grant {
    let x = escape(node.as_str());
    let logger = escape(AUDIT_MODULE);
    let own = format!(r"{x}\.{logger}\.(?:events|dead)");
    let queues = format!(
        r"{own}(?:\.retry\.[^.]+)?|{}|amq\.gen-.+",
        escape(RETIRED_DEAD_QUEUE)
    );
    Grant {
        user: audit_user(prefix, node),
        role: Role::AuditLogger(node.clone()),
        tags: Vec::new(),
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
            topic(DEAD_EXCHANGE, ANYTHING, ANYTHING),
            topic(LOGS_EXCHANGE, format!(r"^{x}\.{logger}\."), NOTHING),
        ]),
    }
}

fn operator(prefix: &str) -> Grant {
    Grant {
        user: operator_user(prefix),
        role: Role::Operator,
        tags: vec![OPERATOR_TAG.to_owned()],
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
        out.push(audit(prefix, &spec.node));
    }
    if spec.node_user {
        out.push(identity(prefix, Origin::Node, &spec.node, None));
    }
    for context in &spec.contexts {
        out.push(identity(prefix, Origin::Mesh, context, None));
    }
    for (module, patterns) in &spec.modules {
        out.push(identity(prefix, Origin::Module, module, Some(patterns)));
    }
    // Two identities of one user name (a context named like the node…) would fight: keep
    // the first.
    let mut seen = BTreeSet::new();
    out.retain(|g| seen.insert(g.user.clone()));
    out
}

/// A password: shown by no `Debug`, no `Display`, no error.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

impl Password {
    /// Wraps a password.
    pub fn new(password: impl Into<String>) -> Password {
        Password(password.into())
    }

    /// The password itself, for the request that sets it.
    fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Password(<redacted>)")
    }
}

/// The passwords of users, by user name (`Debug` shows the names only).
#[derive(Clone, Default)]
pub struct Passwords {
    by_user: BTreeMap<String, Password>,
}

impl Passwords {
    /// No password.
    pub fn new() -> Passwords {
        Passwords::default()
    }

    /// Sets the password of `user` (replacing one given before).
    pub fn insert(&mut self, user: impl Into<String>, password: Password) {
        self.by_user.insert(user.into(), password);
    }

    /// The password of `user`.
    pub fn get(&self, user: &str) -> Option<&Password> {
        self.by_user.get(user)
    }

    /// Whether `user` has a password.
    pub fn contains(&self, user: &str) -> bool {
        self.by_user.contains_key(user)
    }
}

impl fmt::Debug for Passwords {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.by_user.keys()).finish()
    }
}

/// Whether `password` is the one `hash` was made from, with RabbitMQ's `algorithm`: `None`
/// when that cannot be told (another algorithm, a hash that is not base64 of a salt and a
/// digest). An empty hash is a user without a password: never a match.
pub fn password_matches(hash: &str, algorithm: Option<&str>, password: &Password) -> Option<bool> {
    if hash.is_empty() {
        return Some(false);
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(hash.trim())
        .ok()?;
    if bytes.len() < 4 {
        return None;
    }
    let (salt, digest) = bytes.split_at(4);
    let computed: Vec<u8> = match algorithm? {
        "rabbit_password_hashing_sha256" => {
            let mut h = sha2::Sha256::new();
            h.update(salt);
            h.update(password.expose().as_bytes());
            h.finalize().to_vec()
        }
        "rabbit_password_hashing_sha512" => {
            let mut h = sha2::Sha512::new();
            h.update(salt);
            h.update(password.expose().as_bytes());
            h.finalize().to_vec()
        }
        _ => return None,
    };
    if computed.len() != digest.len() {
        return None;
    }
    // Compared without an early exit.
    let differing = computed
        .iter()
        .zip(digest)
        .fold(0u8, |acc, (a, b)| acc | (a ^ b));
    Some(differing == 0)
}

/// `password` hashed as RabbitMQ stores it with `rabbit_password_hashing_sha256`: base64 of
/// the 4-byte `salt` followed by SHA-256 of the salt and the password.
pub fn sha256_password_hash(password: &Password, salt: [u8; 4]) -> String {
    let mut h = sha2::Sha256::new();
    h.update(salt);
    h.update(password.expose().as_bytes());
    let mut bytes = salt.to_vec();
    bytes.extend_from_slice(&h.finalize());
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The grants as RabbitMQ definitions (the format of `rabbitmqctl import_definitions` and
/// the management API's `POST /api/definitions`): the users with their password hashes
/// (salted with `salt`), their permissions and topic permissions on `vhost`. Users without
/// a password in `passwords` are left out. For a broker reached without the management API
/// (the plan itself goes through it).
pub fn definitions(
    vhost: &str,
    grants: &[Grant],
    passwords: &Passwords,
    salt: [u8; 4],
) -> serde_json::Value {
    let with_password: Vec<(&Grant, &Password)> = grants
        .iter()
        .filter_map(|g| passwords.get(&g.user).map(|p| (g, p)))
        .collect();
    let users: Vec<serde_json::Value> = with_password
        .iter()
        .map(|(g, password)| {
            serde_json::json!({
                "name": g.user,
                "password_hash": sha256_password_hash(password, salt),
                "hashing_algorithm": "rabbit_password_hashing_sha256",
                "tags": g.tags.join(","),
            })
        })
        .collect();
    let permissions: Vec<serde_json::Value> = with_password
        .iter()
        .map(|(g, _)| {
            serde_json::json!({
                "user": g.user,
                "vhost": vhost,
                "configure": g.permissions.configure,
                "write": g.permissions.write,
                "read": g.permissions.read,
            })
        })
        .collect();
    let topic_permissions: Vec<serde_json::Value> = with_password
        .iter()
        .flat_map(|(g, _)| {
            g.topic.iter().map(|t| {
                serde_json::json!({
                    "user": g.user,
                    "vhost": vhost,
                    "exchange": t.exchange,
                    "write": t.write,
                    "read": t.read,
                })
            })
        })
        .collect();
    serde_json::json!({
        "users": users,
        "permissions": permissions,
        "topic_permissions": topic_permissions,
    })
}

/// What the broker has, as the management API lists it: every user, and the permissions
/// and topic permissions on one vhost.
#[derive(Debug, Clone, Default)]
pub struct BrokerAccess {
    /// Every user of the broker.
    pub users: Vec<UserRow>,
    /// Permissions on the vhost.
    pub permissions: Vec<PermissionRow>,
    /// Topic permissions on the vhost.
    pub topic_permissions: Vec<TopicPermissionRow>,
}

/// Reads users, permissions and topic permissions of `vhost` (the API lists users to
/// administrators only).
pub async fn read(client: &ManagementClient, vhost: &str) -> Result<BrokerAccess, ManagementError> {
    Ok(BrokerAccess {
        users: client.users().await?,
        permissions: client.permissions(vhost).await?,
        topic_permissions: client.topic_permissions(vhost).await?,
    })
}

/// One difference between a grant and the broker, fixed by [`apply`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Change {
    /// The user does not exist.
    MissingUser {
        /// The user.
        user: String,
    },
    /// The user's stored password is not the given one.
    PasswordDiffers {
        /// The user.
        user: String,
    },
    /// The user's tags differ.
    TagsDiffer {
        /// The user.
        user: String,
        /// Wanted, sorted.
        want: Vec<String>,
        /// Had, sorted.
        have: Vec<String>,
    },
    /// The user has no permissions on the vhost.
    MissingPermissions {
        /// The user.
        user: String,
        /// Wanted.
        want: Permissions,
    },
    /// The user's permissions on the vhost differ.
    PermissionsDiffer {
        /// The user.
        user: String,
        /// Wanted.
        want: Permissions,
        /// Had.
        have: Permissions,
    },
    /// The user has no topic permission on an exchange.
    MissingTopicPermission {
        /// The user.
        user: String,
        /// Wanted.
        want: TopicGrant,
    },
    /// The user's topic permission on an exchange differs.
    TopicPermissionDiffers {
        /// The user.
        user: String,
        /// Wanted.
        want: TopicGrant,
        /// Had.
        have: TopicGrant,
    },
    /// The user has a topic permission on an exchange the plan gives none on.
    ExtraTopicPermission {
        /// The user.
        user: String,
        /// Had.
        have: TopicGrant,
    },
}

impl Change {
    /// The user changed.
    pub fn user(&self) -> &str {
        match self {
            Change::MissingUser { user }
            | Change::PasswordDiffers { user }
            | Change::TagsDiffer { user, .. }
            | Change::MissingPermissions { user, .. }
            | Change::PermissionsDiffer { user, .. }
            | Change::MissingTopicPermission { user, .. }
            | Change::TopicPermissionDiffers { user, .. }
            | Change::ExtraTopicPermission { user, .. } => user,
        }
    }

    /// `+` missing, `~` differs, `-` not wanted.
    pub fn sign(&self) -> char {
        match self {
            Change::MissingUser { .. }
            | Change::MissingPermissions { .. }
            | Change::MissingTopicPermission { .. } => '+',
            Change::ExtraTopicPermission { .. } => '-',
            _ => '~',
        }
    }

    /// A short machine name.
    pub fn kind(&self) -> &'static str {
        match self {
            Change::MissingUser { .. } => "missing-user",
            Change::PasswordDiffers { .. } => "password-differs",
            Change::TagsDiffer { .. } => "tags-differ",
            Change::MissingPermissions { .. } => "missing-permissions",
            Change::PermissionsDiffer { .. } => "permissions-differ",
            Change::MissingTopicPermission { .. } => "missing-topic-permission",
            Change::TopicPermissionDiffers { .. } => "topic-permission-differs",
            Change::ExtraTopicPermission { .. } => "extra-topic-permission",
        }
    }

    /// The exchange of a topic permission change.
    pub fn exchange(&self) -> Option<&str> {
        match self {
            Change::MissingTopicPermission { want, .. }
            | Change::TopicPermissionDiffers { want, .. } => Some(&want.exchange),
            Change::ExtraTopicPermission { have, .. } => Some(&have.exchange),
            _ => None,
        }
    }

    fn is_topic(&self) -> bool {
        self.exchange().is_some()
    }

    fn is_user(&self) -> bool {
        matches!(
            self,
            Change::MissingUser { .. } | Change::PasswordDiffers { .. } | Change::TagsDiffer { .. }
        )
    }
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Change::MissingUser { user } => write!(f, "user {user} is missing"),
            Change::PasswordDiffers { user } => {
                write!(f, "user {user} has another password")
            }
            Change::TagsDiffer { user, want, have } => write!(
                f,
                "user {user} has tags [{}], wants [{}]",
                have.join(", "),
                want.join(", ")
            ),
            Change::MissingPermissions { user, want } => {
                write!(
                    f,
                    "user {user} has no permissions on the vhost, wants {want}"
                )
            }
            Change::PermissionsDiffer { user, want, have } => {
                write!(f, "user {user} has permissions {have}, wants {want}")
            }
            Change::MissingTopicPermission { user, want } => write!(
                f,
                "user {user} has no topic permission on {}, wants {want}",
                want.exchange
            ),
            Change::TopicPermissionDiffers { user, want, have } => write!(
                f,
                "user {user} has topic permission on {} {have}, wants {want}",
                want.exchange
            ),
            Change::ExtraTopicPermission { user, have } => write!(
                f,
                "user {user} has a topic permission on {} the plan does not give ({have})",
                have.exchange
            ),
        }
    }
}

/// Something the plan tells without changing it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Note {
    /// No password was given for a planned user: its password is not compared, and
    /// [`apply`] refuses to run.
    NoPassword {
        /// The user.
        user: String,
    },
    /// The stored password hash cannot be checked (another hashing algorithm).
    PasswordNotVerified {
        /// The user.
        user: String,
        /// The broker's algorithm, if it said.
        algorithm: Option<String>,
    },
    /// A user carrying the prefix, with permissions on the vhost, that the plan does not
    /// name: never changed.
    Unplanned {
        /// The user.
        user: String,
    },
}

impl Note {
    /// The user.
    pub fn user(&self) -> &str {
        match self {
            Note::NoPassword { user }
            | Note::PasswordNotVerified { user, .. }
            | Note::Unplanned { user } => user,
        }
    }

    /// A short machine name.
    pub fn kind(&self) -> &'static str {
        match self {
            Note::NoPassword { .. } => "no-password",
            Note::PasswordNotVerified { .. } => "password-not-verified",
            Note::Unplanned { .. } => "unplanned-user",
        }
    }
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Note::NoPassword { user } => write!(
                f,
                "no password given for user {user}: its password is not compared, and apply \
                 needs one"
            ),
            Note::PasswordNotVerified { user, algorithm } => write!(
                f,
                "the password of user {user} cannot be compared (hashing {})",
                algorithm.as_deref().unwrap_or("unknown")
            ),
            Note::Unplanned { user } => write!(
                f,
                "user {user} has permissions on the vhost and is not in the plan: left as it is"
            ),
        }
    }
}

/// The differences between the grants and the broker.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// What [`apply`] changes, user by user in the grants' order.
    pub changes: Vec<Change>,
    /// What is only told.
    pub notes: Vec<Note>,
}

impl Plan {
    /// Whether the broker agrees with the grants.
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// The planned users without a password.
    pub fn missing_passwords(&self) -> Vec<&str> {
        self.notes
            .iter()
            .filter(|n| matches!(n, Note::NoPassword { .. }))
            .map(Note::user)
            .collect()
    }
}

fn sorted_tags(tags: &[String]) -> Vec<String> {
    let mut tags: Vec<String> = tags.to_vec();
    tags.sort();
    tags.dedup();
    tags
}

/// Compares `grants` with `broker`; `prefix` picks the unplanned users worth a note.
pub fn plan(grants: &[Grant], broker: &BrokerAccess, passwords: &Passwords, prefix: &str) -> Plan {
    let mut out = Plan::default();
    for grant in grants {
        let user = grant.user.clone();
        if !passwords.contains(&user) {
            out.notes.push(Note::NoPassword { user: user.clone() });
        }
        match broker.users.iter().find(|u| u.name == user) {
            None => out.changes.push(Change::MissingUser { user: user.clone() }),
            Some(have) => {
                if let Some(password) = passwords.get(&user) {
                    match password_matches(
                        &have.password_hash,
                        have.hashing_algorithm.as_deref(),
                        password,
                    ) {
                        Some(true) => {}
                        Some(false) => out
                            .changes
                            .push(Change::PasswordDiffers { user: user.clone() }),
                        None => out.notes.push(Note::PasswordNotVerified {
                            user: user.clone(),
                            algorithm: have.hashing_algorithm.clone(),
                        }),
                    }
                }
                let want = sorted_tags(&grant.tags);
                let have = sorted_tags(&have.tags);
                if want != have {
                    out.changes.push(Change::TagsDiffer {
                        user: user.clone(),
                        want,
                        have,
                    });
                }
            }
        }
        match broker.permissions.iter().find(|p| p.user == user) {
            None => out.changes.push(Change::MissingPermissions {
                user: user.clone(),
                want: grant.permissions.clone(),
            }),
            Some(row) => {
                let have = Permissions {
                    configure: row.configure.clone(),
                    write: row.write.clone(),
                    read: row.read.clone(),
                };
                if have != grant.permissions {
                    out.changes.push(Change::PermissionsDiffer {
                        user: user.clone(),
                        want: grant.permissions.clone(),
                        have,
                    });
                }
            }
        }
        let had: Vec<&TopicPermissionRow> = broker
            .topic_permissions
            .iter()
            .filter(|t| t.user == user)
            .collect();
        for want in &grant.topic {
            match had.iter().find(|t| t.exchange == want.exchange) {
                None => out.changes.push(Change::MissingTopicPermission {
                    user: user.clone(),
                    want: want.clone(),
                }),
                Some(row) => {
                    let have = topic(&row.exchange, row.write.clone(), row.read.clone());
                    if &have != want {
                        out.changes.push(Change::TopicPermissionDiffers {
                            user: user.clone(),
                            want: want.clone(),
                            have,
                        });
                    }
                }
            }
        }
        for row in had {
            if !grant.topic.iter().any(|t| t.exchange == row.exchange) {
                out.changes.push(Change::ExtraTopicPermission {
                    user: user.clone(),
                    have: topic(&row.exchange, row.write.clone(), row.read.clone()),
                });
            }
        }
    }
    let planned: BTreeSet<&str> = grants.iter().map(|g| g.user.as_str()).collect();
    let unplanned: BTreeSet<&str> = broker
        .permissions
        .iter()
        .map(|p| p.user.as_str())
        .chain(broker.topic_permissions.iter().map(|t| t.user.as_str()))
        .filter(|u| u.starts_with(prefix) && !planned.contains(u))
        .collect();
    for user in unplanned {
        out.notes.push(Note::Unplanned {
            user: user.to_owned(),
        });
    }
    out
}

/// Why [`apply`] failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum AccessError {
    /// Planned users have no password: nothing was changed.
    MissingPasswords {
        /// The users.
        users: Vec<String>,
    },
    /// A request failed (what was done before it stays done).
    Management(ManagementError),
}

impl fmt::Display for AccessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AccessError::MissingPasswords { users } => write!(
                f,
                "no password for user(s) {}: nothing was changed",
                users.join(", ")
            ),
            AccessError::Management(_) => f.write_str("a management API request failed"),
        }
    }
}

impl std::error::Error for AccessError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AccessError::Management(e) => Some(e),
            AccessError::MissingPasswords { .. } => None,
        }
    }
}

impl From<ManagementError> for AccessError {
    fn from(e: ManagementError) -> AccessError {
        AccessError::Management(e)
    }
}

/// Makes the changes of `plan` (made from `grants`) on `vhost`, user by user; returns them
/// as made. Refuses, changing nothing, when a planned user has no password.
pub async fn apply(
    client: &ManagementClient,
    vhost: &str,
    grants: &[Grant],
    plan: &Plan,
    passwords: &Passwords,
) -> Result<Vec<Change>, AccessError> {
    let missing: Vec<String> = grants
        .iter()
        .filter(|g| !passwords.contains(&g.user))
        .map(|g| g.user.clone())
        .collect();
    if !missing.is_empty() {
        return Err(AccessError::MissingPasswords { users: missing });
    }
    let mut done = Vec::new();
    for grant in grants {
        let changes: Vec<&Change> = plan
            .changes
            .iter()
            .filter(|c| c.user() == grant.user)
            .collect();
        if changes.is_empty() {
            continue;
        }
        if changes.iter().any(|c| c.is_user()) {
            let password =
                passwords
                    .get(&grant.user)
                    .ok_or_else(|| AccessError::MissingPasswords {
                        users: vec![grant.user.clone()],
                    })?;
            let tags: Vec<&str> = grant.tags.iter().map(String::as_str).collect();
            client
                .put_user(&grant.user, password.expose(), &tags)
                .await?;
        }
        if changes.iter().any(|c| {
            matches!(
                c,
                Change::MissingPermissions { .. } | Change::PermissionsDiffer { .. }
            )
        }) {
            let p = &grant.permissions;
            client
                .put_permissions(vhost, &grant.user, &p.configure, &p.write, &p.read)
                .await?;
        }
        let topic_changes: Vec<&&Change> = changes.iter().filter(|c| c.is_topic()).collect();
        if topic_changes
            .iter()
            .any(|c| matches!(c, Change::ExtraTopicPermission { .. }))
        {
            // The API deletes a user's topic permissions on a vhost together: put every
            // wanted one back.
            match client.delete_topic_permissions(vhost, &grant.user).await {
                Ok(()) => {}
                Err(e) if e.kind() == ManagementErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
            }
            for t in &grant.topic {
                client
                    .put_topic_permissions(vhost, &grant.user, &t.exchange, &t.write, &t.read)
                    .await?;
            }
        } else {
            for change in &topic_changes {
                if let Change::MissingTopicPermission { want: t, .. }
                | Change::TopicPermissionDiffers { want: t, .. } = change
                {
                    client
                        .put_topic_permissions(vhost, &grant.user, &t.exchange, &t.write, &t.read)
                        .await?;
                }
            }
        }
        done.extend(changes.into_iter().cloned());
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use regex::Regex;

    fn name(s: &str) -> Name {
        Name::parse(s).unwrap()
    }

    fn pattern(s: &str) -> TopicPattern {
        TopicPattern::parse(s).unwrap()
    }

    fn spec() -> AccessSpec {
        AccessSpec::new(name("n1"))
            .module(name("umami"), [pattern("module.billing.#")])
            .module(
                name("billing"),
                [pattern("module.umami.*.created"), pattern("node.*.joined")],
            )
            .module(name("audit-logger"), [pattern("#")])
            .context(name("ctx"))
    }

    fn grant<'a>(grants: &'a [Grant], user: &str) -> &'a Grant {
        grants.iter().find(|g| g.user == user).unwrap()
    }

    fn re(text: &str) -> Regex {
        Regex::new(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn topic_of<'a>(grant: &'a Grant, exchange: &str) -> &'a TopicGrant {
        grant.topic.iter().find(|t| t.exchange == exchange).unwrap()
    }

    #[track_caller]
    fn matches(regex: &str, yes: &[&str], no: &[&str]) {
        let r = re(regex);
        for s in yes {
            assert!(r.is_match(s), "`{regex}` should match `{s}`");
        }
        for s in no {
            assert!(!r.is_match(s), "`{regex}` should not match `{s}`");
        }
    }

    #[test]
    fn the_spec_gives_one_user_per_identity() {
        let grants = grants(&spec().user_prefix("acme/"));
        let users: Vec<&str> = grants.iter().map(|g| g.user.as_str()).collect();
        assert_eq!(
            users,
            [
                "acme/operator",
                "acme/audit-logger.n1",
                "acme/node.n1",
                "acme/mesh.ctx",
                "acme/module.billing",
                "acme/module.umami"
            ]
        );
        assert_eq!(grants[0].tags, ["management"]);
        assert!(grants[0].topic.is_empty());
        assert!(grants[1..].iter().all(|g| g.tags.is_empty()));
        let without_node = super::grants(&spec().node_user(false));
        assert!(!without_node.iter().any(|g| g.user == "node.n1"));
    }

    #[test]
    fn a_module_configures_only_its_own_queues() {
        let grants = grants(&spec());
        let umami = grant(&grants, "module.umami");
        matches(
            &umami.permissions.configure,
            &[
                "n1.umami.events",
                "n2.umami.events",
                "shared.umami.events",
                "n1.umami.events.retry.5s",
                "shared.umami.events.retry.1500ms",
                "serve.umami.sites.create",
                "amq.gen-abc",
            ],
            &[
                "n1.billing.events",
                "n1.umamix.events",
                "n1.xumami.events",
                "serve.billing.x",
                "serve.umamix.x",
                "serve.umami",
                "mesh.events",
                "mesh.rpc",
                "mesh.events.dead",
                "mesh.retry",
                "mesh.reply",
                "mesh.dead-letters",
                "amq.default",
                "n1.umami.events.delay.5s",
                "n1.umami.events.retry.5s.x",
                "x.n1.umami.events",
                "n1.umami.events\nx",
            ],
        );
    }

    #[test]
    fn a_module_writes_to_mesh_exchanges_and_never_to_the_default_one() {
        let grants = grants(&spec());
        let umami = grant(&grants, "module.umami");
        matches(
            &umami.permissions.write,
            &[
                "mesh.events",
                "mesh.rpc",
                "mesh.events.dead",
                "mesh.retry",
                "mesh.reply",
                "mesh.logs",
                "n1.umami.events",
                "n1.umami.events.retry.5s",
                "amq.gen-x",
            ],
            &[
                "amq.default",
                "",
                "n1.billing.events",
                "mesh.dead-letters",
                "mesh.eventsx",
                "amq.topic",
            ],
        );
        matches(
            &umami.permissions.read,
            &[
                "mesh.events",
                "mesh.rpc",
                "mesh.events.dead",
                "mesh.retry",
                "mesh.reply",
                "n1.umami.events",
            ],
            &[
                "mesh.logs",
                "amq.default",
                "n1.billing.events",
                "mesh.dead-letters",
            ],
        );
    }

    #[test]
    fn a_module_publishes_only_its_own_keys() {
        let grants = grants(&spec());
        let umami = grant(&grants, "module.umami");
        let events = topic_of(umami, "mesh.events");
        matches(
            &events.write,
            &["module.umami.x", "module.umami.site.created"],
            &[
                "module.billing.x",
                "module.umamix.y",
                "mesh.umami.x",
                "node.umami.x",
                "xmodule.umami.x",
            ],
        );
        matches(
            &events.read,
            &["module.billing.#"],
            &[
                "module.billing.*",
                "#",
                "module.billing.x",
                "module.umami.#",
                "module.billing.#x",
            ],
        );
        let billing = grant(&grants, "module.billing");
        matches(
            &topic_of(billing, "mesh.events").read,
            &["module.umami.*.created", "node.*.joined"],
            &["module.umami.#", "module.umami.x.created", "node.#"],
        );
        let rpc = topic_of(umami, "mesh.rpc");
        matches(&rpc.write, &["billing.quote", "umami.sites.create"], &[]);
        matches(
            &rpc.read,
            &["umami.sites.create"],
            &["billing.quote", "umamix.a", "#", "*.x"],
        );
        let retry = topic_of(umami, "mesh.retry");
        matches(
            &retry.write,
            &[
                "n1.umami.events.retry.5s",
                "shared.umami.events.retry.2m",
                "n1.umami.events",
            ],
            &[
                "n1.billing.events",
                "n1.billing.events.retry.5s",
                "n1.umami.events.retry.5s.x",
                "#",
            ],
        );
        matches(
            &retry.read,
            &["n1.umami.events", "n1.umami.events.retry.5s"],
            &["n1.billing.events", "#", "n1.umami.#"],
        );
        let logs = topic_of(umami, "mesh.logs");
        matches(
            &logs.write,
            &["n1.umami.info", "n2.umami.error"],
            &["n1.billing.info", "umami.x.y"],
        );
        matches(&logs.read, &[""], &["#", "n1.umami.info"]);
        let dead = topic_of(umami, "mesh.events.dead");
        matches(&dead.write, &["module.billing.x"], &[]);
    }

    /// The expressions, as the crate docs and docs/CONTRACT.md write them.
    #[test]
    fn the_expressions_are_the_documented_ones() {
        let grants = grants(&spec());
        let umami = grant(&grants, "module.umami");
        let q = r"[^.]+\.umami\.events(?:\.retry\.[^.]+)?|serve\.umami\..+|amq\.gen-.+";
        assert_eq!(umami.permissions.configure, format!("^(?:{q})$"));
        assert_eq!(
            umami.permissions.write,
            format!(
                r"^(?:{q}|mesh\.events|mesh\.rpc|mesh\.events\.dead|mesh\.retry|mesh\.reply|mesh\.logs)$"
            )
        );
        assert_eq!(
            umami.permissions.read,
            format!(r"^(?:{q}|mesh\.events|mesh\.rpc|mesh\.events\.dead|mesh\.retry|mesh\.reply)$")
        );
        let topic: Vec<(&str, &str, &str)> = umami
            .topic
            .iter()
            .map(|t| (t.exchange.as_str(), t.write.as_str(), t.read.as_str()))
            .collect();
        assert_eq!(
            topic,
            [
                (
                    "mesh.events",
                    r"^module\.umami\.",
                    r"^(?:module\.billing\.\#)$"
                ),
                ("mesh.events.dead", ".*", ".*"),
                ("mesh.logs", r"^[^.]+\.umami\.", "^$"),
                (
                    "mesh.retry",
                    r"^[^.]+\.umami\.events(?:\.retry\.[^.]+)?$",
                    r"^[^.]+\.umami\.events(?:\.retry\.[^.]+)?$"
                ),
                ("mesh.rpc", ".*", r"^umami\."),
            ]
        );
        let logger = grant(&grants, "audit-logger.n1");
        let a = r"n1\.audit\-logger\.(?:events|dead)(?:\.retry\.[^.]+)?|mesh\.dead\-letters|amq\.gen-.+";
        assert_eq!(logger.permissions.configure, format!("^(?:{a})$"));
        assert_eq!(
            logger.permissions.write,
            format!(r"^(?:{a}|mesh\.events\.dead|mesh\.retry|mesh\.logs)$")
        );
        let node = grant(&grants, "node.n1");
        assert_eq!(
            node.permissions.configure,
            r"^(?:serve\.n1\..+|amq\.gen-.+)$"
        );
    }

    #[test]
    fn a_module_without_patterns_binds_nothing_on_events() {
        let spec = AccessSpec::new(name("n1")).module(name("quiet"), []);
        let grants = grants(&spec);
        let quiet = grant(&grants, "module.quiet");
        assert_eq!(topic_of(quiet, "mesh.events").read, "^$");
    }

    #[test]
    fn contexts_and_the_node_consume_no_durable_queue() {
        let grants = grants(&spec());
        let node = grant(&grants, "node.n1");
        matches(
            &node.permissions.configure,
            &["serve.n1.ping", "amq.gen-1"],
            &["x.n1.events", "n1.n1.events", "n1.umami.events"],
        );
        matches(
            &topic_of(node, "mesh.events").write,
            &["node.n1.joined"],
            &["module.n1.x", "node.n2.joined"],
        );
        assert_eq!(topic_of(node, "mesh.retry").write, "^$");
        let ctx = grant(&grants, "mesh.ctx");
        matches(
            &topic_of(ctx, "mesh.events").write,
            &["mesh.ctx.started"],
            &["mesh.ctxx.a", "module.ctx.a"],
        );
    }

    #[test]
    fn the_audit_logger_reads_everything_and_emits_nothing() {
        let grants = grants(&spec());
        let logger = grant(&grants, "audit-logger.n1");
        matches(
            &logger.permissions.configure,
            &[
                "n1.audit-logger.events",
                "n1.audit-logger.dead",
                "mesh.dead-letters",
                "n1.audit-logger.events.retry.5s",
            ],
            &[
                "n2.audit-logger.events",
                "n1.umami.events",
                "mesh.events",
                "mesh.events.dead",
            ],
        );
        matches(
            &logger.permissions.write,
            &["mesh.events.dead", "mesh.dead-letters"],
            &["mesh.events", "amq.default", "mesh.rpc"],
        );
        matches(
            &logger.permissions.read,
            &["mesh.events", "mesh.events.dead", "mesh.dead-letters"],
            &["amq.default"],
        );
        let events = topic_of(logger, "mesh.events");
        matches(&events.read, &["#", "module.x.#"], &[]);
        matches(
            &events.write,
            &[""],
            &["module.audit-logger.x", "module.umami.x"],
        );
        matches(&topic_of(logger, "mesh.events.dead").read, &["#"], &[]);
        // Not a module user.
        assert!(!grants.iter().any(|g| g.user == "module.audit-logger"));
    }

    #[test]
    fn names_are_escaped() {
        assert_eq!(escape("a.b-c"), r"a\.b\-c");
        assert_eq!(escape("module.*.#"), r"module\.\*\.\#");
        assert_eq!(escape(r"x(y)|[z]{1}^$+?\"), r"x\(y\)\|\[z\]\{1\}\^\$\+\?\\");
        let spec = AccessSpec::new(name("n-1")).module(name("a+b"), [pattern("a.b")]);
        let grants = grants(&spec);
        let module = grant(&grants, "module.a+b");
        matches(
            &module.permissions.configure,
            &["n-1.a+b.events"],
            &["n-1.aab.events", "n-1.aaab.events"],
        );
        matches(&topic_of(module, "mesh.events").read, &["a.b"], &["axb"]);
    }

    fn hash(algorithm: &str, salt: [u8; 4], password: &str) -> String {
        let digest: Vec<u8> = if algorithm.ends_with("sha512") {
            let mut h = sha2::Sha512::new();
            h.update(salt);
            h.update(password);
            h.finalize().to_vec()
        } else {
            let mut h = sha2::Sha256::new();
            h.update(salt);
            h.update(password);
            h.finalize().to_vec()
        };
        let mut bytes = salt.to_vec();
        bytes.extend(digest);
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    #[test]
    fn definitions_carry_each_user_with_its_hash_permissions_and_topics() {
        let spec = AccessSpec::new(Name::parse("n1").unwrap()).module(
            Name::parse("umami").unwrap(),
            [TopicPattern::parse("module.shop.#").unwrap()],
        );
        let grants = grants(&spec);
        let mut passwords = Passwords::new();
        passwords.insert("module.umami", Password::new("pw-umami"));
        let defs = definitions("v", &grants, &passwords, [9, 8, 7, 6]);
        // Only the users with a password.
        let users = defs["users"].as_array().unwrap();
        assert_eq!(users.len(), 1);
        assert_eq!(users[0]["name"], "module.umami");
        let hash = users[0]["password_hash"].as_str().unwrap();
        assert_eq!(
            password_matches(
                hash,
                Some("rabbit_password_hashing_sha256"),
                &Password::new("pw-umami")
            ),
            Some(true)
        );
        assert!(!defs.to_string().contains("pw-umami"));
        let umami = grants.iter().find(|g| g.user == "module.umami").unwrap();
        assert_eq!(defs["permissions"][0]["write"], umami.permissions.write);
        assert_eq!(
            defs["topic_permissions"].as_array().unwrap().len(),
            umami.topic.len()
        );
        assert!(defs["topic_permissions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["vhost"] == "v" && t["user"] == "module.umami"));
    }

    #[test]
    fn passwords_are_checked_against_the_stored_hash() {
        let pw = Password::new("s3cret");
        for algorithm in [
            "rabbit_password_hashing_sha256",
            "rabbit_password_hashing_sha512",
        ] {
            let stored = hash(algorithm, [1, 2, 3, 4], "s3cret");
            assert_eq!(password_matches(&stored, Some(algorithm), &pw), Some(true));
            assert_eq!(
                password_matches(&stored, Some(algorithm), &Password::new("other")),
                Some(false)
            );
        }
        // RabbitMQ's own: `rabbitmqctl hash_password guest`-style, salt then SHA-256.
        assert_eq!(
            password_matches("", Some("rabbit_password_hashing_sha256"), &pw),
            Some(false)
        );
        assert_eq!(
            password_matches("abc", Some("rabbit_password_hashing_md5"), &pw),
            None
        );
        assert_eq!(
            password_matches("!!", Some("rabbit_password_hashing_sha256"), &pw),
            None
        );
        assert_eq!(
            password_matches("AQID", Some("rabbit_password_hashing_sha256"), &pw),
            None
        );
        assert!(!format!("{pw:?}").contains("s3cret"));
        let mut passwords = Passwords::new();
        passwords.insert("module.umami", pw);
        assert!(!format!("{passwords:?}").contains("s3cret"));
        assert!(format!("{passwords:?}").contains("module.umami"));
    }

    fn user_row(name: &str, tags: &[&str], password: &str) -> UserRow {
        serde_json::from_value(serde_json::json!({
            "name": name, "tags": tags,
            "password_hash": hash("rabbit_password_hashing_sha256", [9, 9, 9, 9], password),
            "hashing_algorithm": "rabbit_password_hashing_sha256"
        }))
        .unwrap()
    }

    fn broker_as_planned(grants: &[Grant]) -> BrokerAccess {
        let mut broker = BrokerAccess::default();
        for g in grants {
            let tags: Vec<&str> = g.tags.iter().map(String::as_str).collect();
            broker.users.push(user_row(&g.user, &tags, "pw"));
            broker.permissions.push(
                serde_json::from_value(serde_json::json!({
                    "user": g.user, "vhost": "v", "configure": g.permissions.configure,
                    "write": g.permissions.write, "read": g.permissions.read
                }))
                .unwrap(),
            );
            for t in &g.topic {
                broker.topic_permissions.push(
                    serde_json::from_value(serde_json::json!({
                        "user": g.user, "vhost": "v", "exchange": t.exchange,
                        "write": t.write, "read": t.read
                    }))
                    .unwrap(),
                );
            }
        }
        broker
    }

    fn all_passwords(grants: &[Grant], password: &str) -> Passwords {
        let mut passwords = Passwords::new();
        for g in grants {
            passwords.insert(g.user.clone(), Password::new(password));
        }
        passwords
    }

    #[test]
    fn a_broker_as_planned_has_no_change() {
        let grants = grants(&spec());
        let broker = broker_as_planned(&grants);
        let plan = plan(&grants, &broker, &all_passwords(&grants, "pw"), "");
        assert!(plan.is_empty(), "{plan:#?}");
        assert!(plan.notes.is_empty(), "{plan:#?}");
    }

    #[test]
    fn every_difference_is_a_change() {
        let grants = grants(&spec());
        let mut broker = broker_as_planned(&grants);
        // A missing user, another password, other tags, other permissions, a topic
        // permission changed, one missing, one extra, and a foreign user.
        broker.users.retain(|u| u.name != "mesh.ctx");
        broker.users.push(user_row("stranger", &[], "x"));
        broker.permissions.push(
            serde_json::from_value(serde_json::json!({
                "user": "stranger", "vhost": "v", "configure": ".*", "write": ".*", "read": ".*"
            }))
            .unwrap(),
        );
        let umami = broker
            .users
            .iter_mut()
            .find(|u| u.name == "module.umami")
            .unwrap();
        umami.tags = vec!["administrator".into()];
        for p in &mut broker.permissions {
            if p.user == "module.billing" {
                p.write = ".*".into();
            }
        }
        broker
            .topic_permissions
            .retain(|t| !(t.user == "node.n1" && t.exchange == "mesh.rpc"));
        for t in &mut broker.topic_permissions {
            if t.user == "module.umami" && t.exchange == "mesh.events" {
                t.write = ".*".into();
            }
        }
        broker.topic_permissions.push(
            serde_json::from_value(serde_json::json!({
                "user": "operator", "vhost": "v", "exchange": "amq.topic", "write": ".*", "read": ".*"
            }))
            .unwrap(),
        );
        let mut passwords = all_passwords(&grants, "pw");
        passwords.insert("audit-logger.n1", Password::new("new"));
        let plan = plan(&grants, &broker, &passwords, "");
        let kinds: Vec<(&str, &str)> = plan.changes.iter().map(|c| (c.user(), c.kind())).collect();
        assert_eq!(
            kinds,
            [
                ("operator", "extra-topic-permission"),
                ("audit-logger.n1", "password-differs"),
                ("node.n1", "missing-topic-permission"),
                ("mesh.ctx", "missing-user"),
                ("module.billing", "permissions-differ"),
                ("module.umami", "tags-differ"),
                ("module.umami", "topic-permission-differs"),
            ]
        );
        assert_eq!(
            plan.notes,
            [Note::Unplanned {
                user: "stranger".into()
            }]
        );
        assert!(plan.changes[6].to_string().contains("mesh.events"));
        // Without the prefix, the stranger is not worth a note.
        let prefixed = super::plan(&grants, &broker, &passwords, "acme/");
        assert!(prefixed.notes.is_empty());
        // Without passwords, they are not compared, and that is said.
        let blind = super::plan(&grants, &broker, &Passwords::new(), "");
        assert!(!blind.changes.iter().any(|c| c.kind() == "password-differs"));
        assert_eq!(blind.missing_passwords().len(), grants.len());
    }
}
