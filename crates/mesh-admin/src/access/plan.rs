//! The differences between the grants and what the broker has: the [`Change`]s to make
//! and the [`Note`]s worth telling.

use std::collections::BTreeSet;
use std::fmt;

use crate::management::{PermissionRow, TopicPermissionRow, UserRow};

use super::grants::{topic, Grant, Permissions, TopicGrant};
use super::password::{password_matches, Passwords};

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

/// One difference between a grant and the broker, fixed by [`apply`](super::apply()).
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
    /// The user logs in with its client certificate, and has a password that would log in
    /// as it too.
    HasPassword {
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
            | Change::HasPassword { user }
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
            Change::HasPassword { .. } => "has-password",
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

    pub(super) fn is_topic(&self) -> bool {
        self.exchange().is_some()
    }

    pub(super) fn is_user(&self) -> bool {
        matches!(
            self,
            Change::MissingUser { .. }
                | Change::PasswordDiffers { .. }
                | Change::HasPassword { .. }
                | Change::TagsDiffer { .. }
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
            Change::HasPassword { user } => write!(
                f,
                "user {user} has a password, wants none (it logs in with its certificate)"
            ),
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
    /// [`apply`](super::apply()) refuses to run.
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
    /// What [`apply`](super::apply()) changes, user by user in the grants' order.
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

/// Compares `grants` with `broker`; `prefix` picks the unplanned users worth a note. A user
/// logging in by certificate ([`Grant::certificate`]) needs no password and must have none:
/// a password given for it is ignored.
pub fn plan(grants: &[Grant], broker: &BrokerAccess, passwords: &Passwords, prefix: &str) -> Plan {
    let mut out = Plan::default();
    for grant in grants {
        let user = grant.user.clone();
        if !grant.certificate && !passwords.contains(&user) {
            out.notes.push(Note::NoPassword { user: user.clone() });
        }
        match broker.users.iter().find(|u| u.name == user) {
            None => out.changes.push(Change::MissingUser { user: user.clone() }),
            Some(have) => {
                if grant.certificate {
                    if !have.password_hash.is_empty() {
                        out.changes.push(Change::HasPassword { user: user.clone() });
                    }
                } else if let Some(password) = passwords.get(&user) {
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
