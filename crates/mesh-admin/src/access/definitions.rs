//! The grants as RabbitMQ definitions, for a broker reached without the management API.

use super::grants::Grant;
use super::password::{sha256_password_hash, Password, Passwords};

/// The grants as RabbitMQ definitions (the format of `rabbitmqctl import_definitions` and
/// the management API's `POST /api/definitions`): the users with their password hashes
/// (salted with `salt`), their permissions and topic permissions on `vhost`. Users without
/// a password in `passwords` are left out, except those logging in by certificate, which
/// get an empty hash (no password logs in as them). For a broker reached without the management API
/// (the plan itself goes through it).
pub fn definitions(
    vhost: &str,
    grants: &[Grant],
    passwords: &Passwords,
    salt: [u8; 4],
) -> serde_json::Value {
    let with_password: Vec<(&Grant, Option<&Password>)> = grants
        .iter()
        .filter_map(|g| match (g.certificate, passwords.get(&g.user)) {
            (true, _) => Some((g, None)),
            (false, password) => password.map(|p| (g, Some(p))),
        })
        .collect();
    let users: Vec<serde_json::Value> = with_password
        .iter()
        .map(|(g, password)| {
            serde_json::json!({
                "name": g.user,
                "password_hash": password
                    .map(|p| sha256_password_hash(p, salt))
                    .unwrap_or_default(),
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
