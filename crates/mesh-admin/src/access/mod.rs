//! The access plan: which broker user may do what on a vhost, so that each module's user can
//! only do what it owns (identity enforced by the broker).
//!
//! Pure parts first (`grants`, `password`, `definitions`, `plan`): an [`AccessSpec`] (the node, its modules with their binding patterns,
//! its runtime contexts, whether it has an audit logger) gives one [`Grant`] per user
//! ([`grants`]); [`plan`] compares the grants with what the broker has ([`BrokerAccess`]) and
//! lists the [`Change`]s; then [`read`](read()) and [`apply`](apply()) do the I/O through the
//! [`ManagementClient`](crate::management::ManagementClient). `mesh access plan|apply` is the command on top.
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
//! | `<o>.<N>` | `^(?:amq\.gen-.+)$` (`^(?:Q)$` with [`AccessSpec::runtime_declares_queues`]) | `^(?:Q\|mesh\.events\|mesh\.rpc\|mesh\.events\.dead\|mesh\.retry\|mesh\.replies\|mesh\.reply\|mesh\.logs)$` | `^(?:Q\|mesh\.events\|mesh\.rpc\|mesh\.events\.dead\|mesh\.retry\|mesh\.replies\|mesh\.reply)$` |
//! | `audit-logger.<X>` | `^(?:A)$` | `^(?:A\|mesh\.events\.dead\|mesh\.retry\|mesh\.logs)$` | `^(?:A\|mesh\.events\|mesh\.rpc\|mesh\.events\.dead\|mesh\.retry\|mesh\.replies\|mesh\.reply)$` |
//! | `operator` | `.*` | `.*` | `.*` |
//!
//! where `A` = `X\.audit\-logger\.(?:events|dead)(?:\.retry\.[^.]+)?|mesh\.dead\-letters|amq\.gen-.+`
//! for the audit logger of node `X` (it unbinds, drains and deletes the retired
//! `mesh.dead-letters`). No user but the operator has `configure` on one of mesh's exchanges
//! (the runtime declares them passively; `configure` would let a module delete `mesh.events`),
//! nor `write` on `amq.default` (the default exchange writes into any queue). A permission
//! names a resource, not its kind: `configure` on a queue name would also let a user declare
//! an *exchange* so named, which its `read` and `write` then cover too, so it could bind that
//! exchange into `mesh.events` and publish there under any key. So modules, contexts and the
//! node configure only server-named queues (RabbitMQ refuses a client any `amq.…` name, queue
//! or exchange): `mesh topology apply` declares their durable queues (a spec lists each
//! module's `retry` steps and `serves`), and the runtime finds them with a passive declare.
//! [`AccessSpec::runtime_declares_queues`] gives back `configure` on `Q` while a deployment's
//! spec does not list them yet. The audit logger keeps `configure` on `A` (it declares its own
//! queues and deletes the retired one). What any side path delivers is not an event anyway:
//! consumers take only what came through `mesh.events` (or their own name on `mesh.retry` and
//! the default exchange), see `docs/SECURITY.md`, "The trusted-path rule".
//!
//! Topic permissions (write / read):
//!
//! | exchange | `<o>.<N>` | `audit-logger.<X>` |
//! |---|---|---|
//! | `mesh.events` | `^o\.N\.` / `^(?:P1\|P2…)$`, its spec patterns exactly (`^$` without) | `^$` / `.*` |
//! | `mesh.rpc` | `.*`, or `^(?:T1\|T2…)$` for the tools the spec lets it call ([`AccessSpec::calls`]) / `^N\.` (it serves only its own) | `^$` / `^$` |
//! | `mesh.retry` | `^[^.]+\.N\.events(?:\.retry\.[^.]+)?$` / the same (`^$` / `^$` for a context or the node): its retry copies to its retry queues, and its retry forwarders' copies back to its queue | `^X\.audit-logger\.(?:events\|dead)(?:\.retry\.[^.]+)?$` / the same |
//! | `mesh.events.dead` | `^(?:[^.]+\.N\.events(?:\.retry\.[^.]+)?\|serve\.N\..+)$` / the same: its dead letters go under the names of its queues (`^serve\.N\..+$` for a context or the node) | `^X\.audit-logger\.(?:events\|dead)(?:\.retry\.[^.]+)?$` / `.*` |
//! | `mesh.logs` | `^[^.]+\.N\.` / `^$` | `^X\.audit-logger\.` / `^$` |
//! | `mesh.replies` | `.*` / `^U\.` (it answers any caller, binds only its own reply keys `<U>.<queue>`; `U` its user name, escaped) | `^$` / `^U\.` |
//!
//! The operator ([`operator_user`]) has no topic permission (so no limit) and the tag
//! `management`: it runs `mesh topology apply`, `mesh dead redrive` (through the default
//! exchange) and `mesh status`. The audit logger's user has the tag `management` too: at
//! start its transport lists its queue's bindings through the management API and removes
//! the stale ones over AMQP (its permissions below allow that unbinding, and the tag lets it
//! read the vhost's objects, never change what its permissions forbid). Module, context and
//! node users have no tag: AMQP only. The retired `mesh.reply` is a direct exchange, where
//! topic permissions do not apply: it stays in `write` and `read` while deployments migrate
//! (callers and servers of both versions answer each other through it), and names nothing
//! once `mesh topology apply` has deleted it.
//!
//! # Plan and apply
//!
//! The plan lists, for each planned user: missing, a password that differs from the stored
//! hash (checked for `rabbit_password_hashing_sha256` and `…_sha512`: base64 of a 4-byte salt
//! and the hash of salt and password), tags that differ, permissions missing or different,
//! topic permissions missing, different or not wanted. Users the plan does not name are never
//! changed; those carrying the prefix with permissions on the vhost are listed as notes.
//! [`apply`](apply()) makes exactly the changes: `PUT` the user only when it is missing or its
//! password or tags differ, `PUT` its permissions, `PUT` each missing or different topic
//! permission, and only when one is not wanted, `DELETE` all of the user's topic permissions
//! and `PUT` the wanted ones again (the management API deletes them together; the user has
//! no limit on topic keys in between).
//!
//! # Limits and foreign bindings
//!
//! Beside the users, the plan sets each planned user's `max-connections` and `max-channels`
//! and the vhost's `max-queues` as the spec asks ([`LimitsSpec`], [`plan_limits`]: a limit
//! that differs, is missing or is not asked for is a difference), and lists every binding on
//! a mesh exchange the contract does not explain ([`foreign_bindings`](crate::topology::foreign_bindings)),
//! which apply removes.
//!
//! A module the spec marks with [`AccessSpec::certificate_login`] logs in with its client
//! certificate (`EXTERNAL`): its user is put without a password (an empty `password_hash`),
//! needs none from the caller, and one found with a password is a change
//! ([`Change::HasPassword`]).
//!
//! Passwords never appear in a `Debug`, an error or a log line ([`Password`]).

mod apply;
mod definitions;
mod grants;
mod limits;
mod password;
mod plan;
#[cfg(test)]
mod tests;

pub use apply::{apply, read, AccessError};
pub use definitions::definitions;
pub use grants::{
    escape, grants, AccessSpec, Grant, Permissions, Role, TopicGrant, LOGS_EXCHANGE, OPERATOR_TAG,
};
pub use limits::{
    apply_limits, plan_limits, read_limits, BrokerLimits, LimitChange, LimitOwner, LimitsSpec,
    MAX_CHANNELS, MAX_CONNECTIONS, MAX_QUEUES,
};
pub use mesh_core::naming::{audit_user, operator_user, owner_user};
pub use password::{password_matches, sha256_password_hash, Password, Passwords};
pub use plan::{plan, BrokerAccess, Change, Note, Plan};
