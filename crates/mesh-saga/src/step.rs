//! What one transition asks for, collected with no I/O: events to emit, timeouts to
//! schedule or cancel, completion. The service performs it in the transaction that stores
//! the new state.

use std::time::Duration;

use mesh::{Event, Outgoing};

use crate::error::{Error, ErrorKind};

/// The effects of one transition: handed to every transition function, and performed,
/// all or none, in the transaction that stores the instance's new state.
///
/// A transition may run more than once for one event (its first result lost a race with
/// another update of the instance and was thrown away), so it must do nothing but change
/// the state and ask through its `Step`.
#[derive(Debug, Default)]
pub struct Step {
    pub(crate) emits: Vec<Outgoing>,
    pub(crate) schedules: Vec<Timeout>,
    pub(crate) cancels: Vec<String>,
    pub(crate) complete: bool,
    pub(crate) failed: Option<Error>,
}

/// A timeout a transition asked for.
#[derive(Debug)]
pub(crate) struct Timeout {
    pub(crate) name: String,
    pub(crate) after: Duration,
    pub(crate) event: Outgoing,
}

impl Step {
    /// Emits `event` (through the outbox: published if and only if the transition commits).
    pub fn emit<E: Event>(&mut self, event: &E) {
        match Outgoing::event(event) {
            Ok(outgoing) => self.emits.push(outgoing),
            Err(e) => self.fail("making an event to emit", e),
        }
    }

    /// Emits an [`Outgoing`], as [`Step::emit`].
    pub fn emit_outgoing(&mut self, outgoing: Outgoing) {
        self.emits.push(outgoing);
    }

    /// Schedules `event` as the instance's timeout `name`, due `after` from now: it arrives
    /// as any event (register its type with [`Saga::on_timeout`](crate::Saga::on_timeout))
    /// unless cancelled first ([`Step::cancel`], or the instance's completion). A timeout of
    /// the same name still pending is cancelled and replaced. Its key must be the saga's
    /// module's own. Of two schedules of one name in one step, the later counts.
    pub fn schedule<E: Event>(&mut self, name: &str, after: Duration, event: &E) {
        self.schedules.retain(|t| t.name != name);
        match Outgoing::event(event) {
            Ok(event) => self.schedules.push(Timeout {
                name: name.to_owned(),
                after,
                event,
            }),
            Err(e) => self.fail("making a timeout event", e),
        }
    }

    /// Cancels the instance's pending timeout `name`, if any: once this transition commits,
    /// it never reaches the instance (even one the outbox published already is ignored on
    /// arrival).
    pub fn cancel(&mut self, name: &str) {
        self.cancels.push(name.to_owned());
    }

    /// Completes the instance: its pending timeouts are cancelled, and every later event
    /// for its key is acknowledged and ignored. Its last state stays readable.
    pub fn complete(&mut self) {
        self.complete = true;
    }

    /// Whether the transition asked to complete the instance.
    pub fn is_complete(&self) -> bool {
        self.complete
    }

    fn fail(&mut self, context: &str, source: mesh::Error) {
        if self.failed.is_none() {
            self.failed = Some(Error::with_source(ErrorKind::Transition, context, source));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Serialize, serde::Deserialize)]
    struct Expired {
        n: u32,
    }
    impl Event for Expired {
        const KEY: &'static str = "module.orders.payment.expired";
    }

    #[test]
    fn a_step_collects_what_a_transition_asks_for() {
        let mut step = Step::default();
        step.schedule("payment", Duration::from_secs(1), &Expired { n: 1 });
        step.schedule("reminder", Duration::from_secs(2), &Expired { n: 2 });
        step.schedule("payment", Duration::from_secs(3), &Expired { n: 3 });
        step.cancel("old");
        step.emit(&Expired { n: 4 });
        assert!(!step.is_complete());
        step.complete();
        assert!(step.is_complete());
        let names: Vec<(&str, Duration)> = step
            .schedules
            .iter()
            .map(|t| (t.name.as_str(), t.after))
            .collect();
        assert_eq!(
            names,
            [
                ("reminder", Duration::from_secs(2)),
                ("payment", Duration::from_secs(3))
            ],
            "the later schedule of a name counts"
        );
        assert_eq!(step.cancels, ["old"]);
        assert_eq!(step.emits.len(), 1);
        assert!(step.failed.is_none());
    }
}
