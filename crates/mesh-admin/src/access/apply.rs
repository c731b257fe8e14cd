//! The I/O of the access plan: reading what the broker has, and making the plan's changes,
//! through the management API.

use std::fmt;

use crate::management::{ManagementClient, ManagementError, ManagementErrorKind};

use super::grants::Grant;
use super::password::Passwords;
use super::plan::{BrokerAccess, Change, Plan};

/// Reads users, permissions and topic permissions of `vhost` (the API lists users to
/// administrators only).
pub async fn read(client: &ManagementClient, vhost: &str) -> Result<BrokerAccess, ManagementError> {
    Ok(BrokerAccess {
        users: client.users().await?,
        permissions: client.permissions(vhost).await?,
        topic_permissions: client.topic_permissions(vhost).await?,
    })
}

/// Why [`apply`](apply()) failed.
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
/// as made. Refuses, changing nothing, when a planned user has no password (a user logging
/// in by certificate needs none: it is put without one).
pub async fn apply(
    client: &ManagementClient,
    vhost: &str,
    grants: &[Grant],
    plan: &Plan,
    passwords: &Passwords,
) -> Result<Vec<Change>, AccessError> {
    let missing: Vec<String> = grants
        .iter()
        .filter(|g| !g.certificate && !passwords.contains(&g.user))
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
        if changes.iter().any(|c| c.is_user()) && grant.certificate {
            let tags: Vec<&str> = grant.tags.iter().map(String::as_str).collect();
            client.put_user_without_password(&grant.user, &tags).await?;
        } else if changes.iter().any(|c| c.is_user()) {
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
