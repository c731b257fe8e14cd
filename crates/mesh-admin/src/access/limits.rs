//! The plan's limits: `max-connections` and `max-channels` for every planned user but the
//! operator (the only per-user limits RabbitMQ 3.10 has), and where the operator asks for
//! one, a vhost-wide `max-queues`. A limit the broker has that the plan does not set is a
//! difference too (apply removes it); a negative value is the broker's "no limit".

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

use crate::management::{LimitRow, ManagementClient, ManagementError};

use super::grants::{Grant, Role};

/// A user's connection limit.
pub const MAX_CONNECTIONS: &str = "max-connections";
/// A user's channel limit (per connection).
pub const MAX_CHANNELS: &str = "max-channels";
/// A vhost's queue limit.
pub const MAX_QUEUES: &str = "max-queues";

/// What the operator's spec asks for: each `None` is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LimitsSpec {
    /// Connections each planned user may have open at once.
    pub max_connections: Option<u64>,
    /// Channels each planned user may have open on one connection.
    pub max_channels: Option<u64>,
    /// Queues the vhost may hold (every user's together).
    pub max_queues: Option<u64>,
}

impl LimitsSpec {
    /// No limit.
    pub fn new() -> LimitsSpec {
        LimitsSpec::default()
    }

    /// Each planned user's `max-connections`.
    pub fn max_connections(mut self, value: Option<u64>) -> LimitsSpec {
        self.max_connections = value;
        self
    }

    /// Each planned user's `max-channels`.
    pub fn max_channels(mut self, value: Option<u64>) -> LimitsSpec {
        self.max_channels = value;
        self
    }

    /// The vhost's `max-queues`.
    pub fn max_queues(mut self, value: Option<u64>) -> LimitsSpec {
        self.max_queues = value;
        self
    }
}

/// Whose limit it is.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum LimitOwner {
    /// A planned user.
    User(String),
    /// The vhost.
    Vhost(String),
}

impl fmt::Display for LimitOwner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LimitOwner::User(user) => write!(f, "user {user}"),
            LimitOwner::Vhost(vhost) => write!(f, "vhost {vhost}"),
        }
    }
}

/// One limit that differs from the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LimitChange {
    /// Whose.
    pub owner: LimitOwner,
    /// `max-connections`, `max-channels` or `max-queues`.
    pub name: &'static str,
    /// Wanted (`None`: no limit).
    pub want: Option<u64>,
    /// Had (`None`: no limit).
    pub have: Option<u64>,
}

impl LimitChange {
    /// `+` missing, `~` differs, `-` not wanted.
    pub fn sign(&self) -> char {
        match (self.want, self.have) {
            (Some(_), None) => '+',
            (None, Some(_)) => '-',
            _ => '~',
        }
    }

    /// A short machine name.
    pub fn kind(&self) -> &'static str {
        match self.sign() {
            '+' => "missing-limit",
            '-' => "extra-limit",
            _ => "limit-differs",
        }
    }

    /// The user, for a user's limit.
    pub fn user(&self) -> Option<&str> {
        match &self.owner {
            LimitOwner::User(user) => Some(user),
            LimitOwner::Vhost(_) => None,
        }
    }
}

impl fmt::Display for LimitChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (owner, name) = (&self.owner, self.name);
        match (self.want, self.have) {
            (Some(want), None) => write!(f, "{owner} has no {name}, wants {want}"),
            (None, Some(have)) => {
                write!(f, "{owner} has {name} {have}, which the plan does not set")
            }
            (Some(want), Some(have)) => write!(f, "{owner} has {name} {have}, wants {want}"),
            (None, None) => write!(f, "{owner} has no {name}"),
        }
    }
}

/// The broker's limits: every user's, and the vhost's.
#[derive(Debug, Clone, Default)]
pub struct BrokerLimits {
    /// Every user that has a limit.
    pub users: Vec<LimitRow>,
    /// The vhost's.
    pub vhost: Vec<LimitRow>,
}

/// Reads every user's limits and `vhost`'s.
pub async fn read_limits(
    client: &ManagementClient,
    vhost: &str,
) -> Result<BrokerLimits, ManagementError> {
    Ok(BrokerLimits {
        users: client.user_limits().await?,
        vhost: client.vhost_limits(vhost).await?,
    })
}

/// A limit's value; a negative one (or one that is not a number) is no limit.
fn value(row: Option<&LimitRow>, name: &str) -> Option<u64> {
    row.and_then(|r| r.value.get(name)).and_then(Value::as_u64)
}

/// Compares the limits `spec` sets for `grants` (every user but the operator) and `vhost`
/// with the broker's.
pub fn plan_limits(
    spec: &LimitsSpec,
    grants: &[Grant],
    vhost: &str,
    broker: &BrokerLimits,
) -> Vec<LimitChange> {
    let mut out = Vec::new();
    let mut compare = |owner: LimitOwner, name: &'static str, want, have| {
        if want != have {
            out.push(LimitChange {
                owner,
                name,
                want,
                have,
            });
        }
    };
    let users: BTreeMap<&str, &LimitRow> = broker
        .users
        .iter()
        .filter_map(|r| r.user.as_deref().map(|u| (u, r)))
        .collect();
    for grant in grants.iter().filter(|g| g.role != Role::Operator) {
        let row = users.get(grant.user.as_str()).copied();
        for (name, want) in [
            (MAX_CONNECTIONS, spec.max_connections),
            (MAX_CHANNELS, spec.max_channels),
        ] {
            compare(
                LimitOwner::User(grant.user.clone()),
                name,
                want,
                value(row, name),
            );
        }
    }
    let row = broker
        .vhost
        .iter()
        .find(|r| r.vhost.as_deref().is_none_or(|v| v == vhost));
    compare(
        LimitOwner::Vhost(vhost.to_owned()),
        MAX_QUEUES,
        spec.max_queues,
        value(row, MAX_QUEUES),
    );
    out
}

/// Makes `changes`: sets each wanted limit, removes each one not wanted.
pub async fn apply_limits(
    client: &ManagementClient,
    changes: &[LimitChange],
) -> Result<(), ManagementError> {
    for change in changes {
        match (&change.owner, change.want) {
            (LimitOwner::User(user), Some(value)) => {
                client.put_user_limit(user, change.name, value).await?;
            }
            (LimitOwner::User(user), None) => client.delete_user_limit(user, change.name).await?,
            (LimitOwner::Vhost(vhost), Some(value)) => {
                client.put_vhost_limit(vhost, change.name, value).await?;
            }
            (LimitOwner::Vhost(vhost), None) => {
                client.delete_vhost_limit(vhost, change.name).await?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::{grants, AccessSpec};
    use mesh_core::Name;
    use serde_json::json;

    fn row(value: Value) -> LimitRow {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn limits_are_planned_for_every_user_but_the_operator() {
        let spec =
            AccessSpec::new(Name::parse("n1").unwrap()).module(Name::parse("umami").unwrap(), []);
        let grants = grants(&spec);
        let limits = LimitsSpec::new()
            .max_connections(Some(4))
            .max_channels(Some(16));
        let broker = BrokerLimits {
            users: vec![
                row(
                    json!({"user": "module.umami", "value": {"max-connections": 4, "max-channels": 99}}),
                ),
                row(json!({"user": "node.n1", "value": {"max-connections": -1}})),
                row(json!({"user": "operator", "value": {"max-connections": 1}})),
            ],
            vhost: vec![row(json!({"vhost": "v", "value": {"max-queues": 10}}))],
        };
        let changes = plan_limits(&limits, &grants, "v", &broker);
        let shown: Vec<String> = changes.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "user node.n1 has no max-connections, wants 4",
                "user node.n1 has no max-channels, wants 16",
                "user module.umami has max-channels 99, wants 16",
                "vhost v has max-queues 10, which the plan does not set",
            ],
            "{changes:#?}"
        );
        assert_eq!(changes[0].sign(), '+');
        assert_eq!(changes[2].kind(), "limit-differs");
        assert_eq!(changes[3].sign(), '-');
        assert_eq!(changes[3].user(), None);

        let agreeing = BrokerLimits {
            users: vec![
                row(
                    json!({"user": "module.umami", "value": {"max-connections": 4, "max-channels": 16}}),
                ),
                row(
                    json!({"user": "node.n1", "value": {"max-connections": 4, "max-channels": 16}}),
                ),
            ],
            vhost: vec![row(json!({"vhost": "v", "value": {"max-queues": 10}}))],
        };
        assert_eq!(
            plan_limits(&limits.max_queues(Some(10)), &grants, "v", &agreeing),
            []
        );
    }
}
