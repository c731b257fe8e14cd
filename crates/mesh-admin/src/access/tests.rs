//! The access plan's unit tests: the expressions, checked with a regex engine, the hashes
//! and the plan.

use super::*;
use crate::management::UserRow;
use base64::Engine as _;
use mesh_core::{Name, TopicPattern};
use regex::Regex;
use sha2::Digest as _;

mod certificates;
mod schedule;

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
    // The audit logger reads its queue's bindings through the management API.
    assert_eq!(grants[1].tags, ["management"]);
    assert!(grants[2..].iter().all(|g| g.tags.is_empty()));
    let without_node = super::grants(&spec().node_user(false));
    assert!(!without_node.iter().any(|g| g.user == "node.n1"));
}

#[test]
fn a_module_configures_only_server_named_queues() {
    let grants = grants(&spec());
    for user in ["module.umami", "node.n1", "mesh.ctx"] {
        // Not even an exchange named like its queues (`x.umami.events`): the operator
        // declares its durable queues.
        matches(
            &grant(&grants, user).permissions.configure,
            &["amq.gen-abc", "amq.gen-JzTY20BRgKO-HjmUJj0wLg"],
            &[
                "n1.umami.events",
                "x.umami.events",
                "n1.umami.events.retry.5s",
                "serve.umami.sites.create",
                "serve.n1.ping",
                "amq.gen-",
                "amq.direct",
                "mesh.events",
            ],
        );
    }
}

#[test]
fn a_module_that_declares_its_queues_configures_only_its_own() {
    let grants = grants(&spec().runtime_declares_queues(true));
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
            "mesh.replies",
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
            "mesh.replies",
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
            "mesh.replies",
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
    // Dead letters under its own queues' names only, written and read.
    let dead = topic_of(umami, "mesh.events.dead");
    for expression in [&dead.write, &dead.read] {
        matches(
            expression,
            &[
                "n1.umami.events",
                "shared.umami.events",
                "*.umami.events",
                "n1.umami.events.retry.5s",
                "*.umami.events.retry.*",
                "serve.umami.pay",
                "serve.umami.#",
            ],
            &[
                "n1.billing.events",
                "module.billing.x",
                "module.umami.x",
                "#",
                "n1.umami.events.x",
                "serve.billing.pay",
                "serve.umamix.pay",
            ],
        );
    }
}

/// The expressions, as the crate docs and docs/CONTRACT.md write them.
#[test]
fn the_expressions_are_the_documented_ones() {
    let grants = grants(&spec());
    let umami = grant(&grants, "module.umami");
    let q = r"[^.]+\.umami\.events(?:\.retry\.[^.]+)?|serve\.umami\..+|amq\.gen-.+";
    assert_eq!(umami.permissions.configure, r"^(?:amq\.gen-.+)$");
    assert_eq!(
        umami.permissions.write,
        format!(
            r"^(?:{q}|mesh\.events|mesh\.rpc|mesh\.events\.dead|mesh\.retry|mesh\.replies|mesh\.reply|mesh\.logs)$"
        )
    );
    assert_eq!(
        umami.permissions.read,
        format!(
            r"^(?:{q}|mesh\.events|mesh\.rpc|mesh\.events\.dead|mesh\.retry|mesh\.replies|mesh\.reply)$"
        )
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
            (
                "mesh.events.dead",
                r"^(?:[^.]+\.umami\.events(?:\.retry\.[^.]+)?|serve\.umami\..+)$",
                r"^(?:[^.]+\.umami\.events(?:\.retry\.[^.]+)?|serve\.umami\..+)$"
            ),
            ("mesh.logs", r"^[^.]+\.umami\.", "^$"),
            ("mesh.replies", ".*", r"^module\.umami\."),
            (
                "mesh.retry",
                r"^[^.]+\.umami\.events(?:\.retry\.[^.]+)?$",
                r"^[^.]+\.umami\.events(?:\.retry\.[^.]+)?$"
            ),
            ("mesh.rpc", ".*", r"^umami\."),
        ]
    );
    let logger = grant(&grants, "audit-logger.n1");
    let a =
        r"n1\.audit\-logger\.(?:events|dead)(?:\.retry\.[^.]+)?|mesh\.dead\-letters|amq\.gen-.+";
    assert_eq!(logger.permissions.configure, format!("^(?:{a})$"));
    assert_eq!(
        logger.permissions.write,
        format!(r"^(?:{a}|mesh\.events\.dead|mesh\.retry|mesh\.logs)$")
    );
    let node = grant(&grants, "node.n1");
    assert_eq!(node.permissions.configure, r"^(?:amq\.gen-.+)$");
    let declaring = super::grants(&spec().runtime_declares_queues(true));
    assert_eq!(
        grant(&declaring, "module.umami").permissions.configure,
        format!("^(?:{q})$")
    );
    assert_eq!(
        grant(&declaring, "node.n1").permissions.configure,
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
        &node.permissions.read,
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
    let dead = topic_of(logger, "mesh.events.dead");
    matches(&dead.read, &["#"], &[]);
    matches(
        &dead.write,
        &["n1.audit-logger.events", "n1.audit-logger.events.retry.5s"],
        &["n2.audit-logger.events", "n1.umami.events", "module.x.y"],
    );
    // Not a module user.
    assert!(!grants.iter().any(|g| g.user == "module.audit-logger"));
}

#[test]
fn a_shared_audit_logger_consumes_the_shared_queues_only() {
    let grants = grants(&spec().shared_audit_logger(true));
    // Still the node's user: every node's shared logger logs in as its own.
    let logger = grant(&grants, "audit-logger.n1");
    matches(
        &logger.permissions.configure,
        &[
            "shared.audit-logger.events",
            "shared.audit-logger.dead",
            "mesh.dead-letters",
        ],
        &[
            "n1.audit-logger.events",
            "n1.audit-logger.dead",
            "shared.umami.events",
            "sharedx.audit-logger.events",
        ],
    );
    matches(
        &logger.permissions.read,
        &["shared.audit-logger.events", "shared.audit-logger.dead"],
        &["n1.audit-logger.events"],
    );
    let dead = topic_of(logger, "mesh.events.dead");
    matches(&dead.read, &["#"], &[]);
    // It dead-letters what it cannot store under the shared queue's name.
    matches(
        &dead.write,
        &["shared.audit-logger.events"],
        &["n1.audit-logger.events", "shared.umami.events"],
    );
    matches(
        &topic_of(logger, "mesh.logs").write,
        &["n1.audit-logger.info"],
        &["shared.audit-logger.info"],
    );
    // Shared implies a logger, even without the module.
    let alone = super::grants(&AccessSpec::new(name("n2")).shared_audit_logger(true));
    assert!(alone.iter().any(|g| g.user == "audit-logger.n2"));
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
        &module.permissions.read,
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

#[test]
fn a_user_binds_only_its_own_replies_and_answers_anyone() {
    let grants = grants(&spec().user_prefix("acme/"));
    let umami = grant(&grants, "acme/module.umami");
    let replies = topic_of(umami, "mesh.replies");
    matches(
        &replies.read,
        &["acme/module.umami.amq.gen-x"],
        &[
            "acme/module.billing.amq.gen-x",
            "acme/module.umamix.amq.gen-x",
            "module.umami.amq.gen-x",
            "amq.gen-x",
            "#",
            "*.amq.gen-x",
        ],
    );
    matches(
        &replies.write,
        &["acme/module.billing.amq.gen-x", "amq.gen-x"],
        &[],
    );
    let logger = grants
        .iter()
        .find(|g| g.role == Role::AuditLogger(Name::parse("n1").unwrap()))
        .expect("the audit logger's grant");
    let replies = topic_of(logger, "mesh.replies");
    matches(&replies.write, &[], &["acme/module.umami.amq.gen-x"]);
    matches(
        &replies.read,
        &["acme/audit-logger.n1.amq.gen-x"],
        &["acme/module.umami.amq.gen-x"],
    );
}
