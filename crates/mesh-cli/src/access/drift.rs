//! What `mesh access` checks beside the users: the limits the spec sets (each planned
//! user's `max-connections` and `max-channels`, the vhost's `max-queues`) and the bindings
//! on mesh's exchanges that the contract does not explain. Both are drift for `plan
//! --check`; `apply` sets the limits and removes the foreign bindings (`--dry-run` lists
//! them).

use mesh::amqp::access::{self, Grant, LimitChange, LimitsSpec};
use mesh::amqp::management::ManagementErrorKind;
use mesh_admin::topology::{foreign_bindings, ForeignBinding};
use serde_json::{json, Value};

use crate::management::Management;
use crate::output::{self, escape, paint, BAD, GOOD, WARN};

/// The limits and foreign bindings that differ from the plan.
#[derive(Debug, Default)]
pub(super) struct Drift {
    pub(super) limits: Vec<LimitChange>,
    pub(super) foreign: Vec<ForeignBinding>,
}

impl Drift {
    /// Reads the broker's limits and bindings, and compares them with the plan.
    pub(super) async fn read(
        management: &Management,
        spec: &LimitsSpec,
        grants: &[Grant],
    ) -> anyhow::Result<Drift> {
        let broker = access::read_limits(management.client(), management.vhost())
            .await
            .map_err(|e| management.error(e))?;
        let limits = access::plan_limits(spec, grants, management.vhost(), &broker);
        let foreign = foreign_bindings(&management.bindings().await?);
        Ok(Drift { limits, foreign })
    }

    pub(super) fn is_empty(&self) -> bool {
        self.limits.is_empty() && self.foreign.is_empty()
    }

    pub(super) fn len(&self) -> usize {
        self.limits.len() + self.foreign.len()
    }

    /// As JSON entries, after the users' changes.
    pub(super) fn to_json(&self) -> Vec<Value> {
        let limits = self.limits.iter().map(|c| {
            json!({
                "kind": c.kind(), "user": c.user(), "limit": c.name, "want": c.want,
                "have": c.have, "description": c.to_string()
            })
        });
        let foreign = self.foreign.iter().map(|b| {
            let mut v = b.to_json();
            v["description"] = Value::from(b.describe());
            v
        });
        limits.chain(foreign).collect()
    }

    /// One line each, `what` after a colon when given (`would apply`, `fixed`).
    pub(super) fn print(&self, what: Option<&str>) -> anyhow::Result<()> {
        let suffix = |line: String| match what {
            Some(what) => format!("{line}: {}", paint(GOOD, what)),
            None => line,
        };
        for change in &self.limits {
            let sign = change.sign();
            let style = match sign {
                '+' => GOOD,
                '-' => BAD,
                _ => WARN,
            };
            output::line(format_args!(
                "{} {}",
                paint(style, sign),
                suffix(escape(&change.to_string()).into_owned())
            ))?;
        }
        for binding in &self.foreign {
            output::line(format_args!(
                "{} {}",
                paint(BAD, '-'),
                suffix(escape(&binding.describe()).into_owned())
            ))?;
        }
        Ok(())
    }

    /// Sets the limits and removes the foreign bindings.
    pub(super) async fn apply(&self, management: &Management) -> anyhow::Result<()> {
        access::apply_limits(management.client(), &self.limits)
            .await
            .map_err(|e| management.error(e))?;
        for binding in &self.foreign {
            remove_foreign(management, binding).await?;
        }
        Ok(())
    }
}

/// Removes a foreign binding; one already gone is fine.
pub(crate) async fn remove_foreign(
    management: &Management,
    binding: &ForeignBinding,
) -> anyhow::Result<()> {
    match management
        .client()
        .unbind_any(
            management.vhost(),
            &binding.source,
            &binding.destination_type,
            &binding.destination,
            &binding.properties_key,
        )
        .await
    {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ManagementErrorKind::NotFound => Ok(()),
        Err(e) => Err(management.error(e)),
    }
}
