//! The harness's assertions: each waits, up to the harness's timeout, for a record it
//! expects, and otherwise fails naming what it expected and what was seen.

use std::fmt;
use std::time::Duration;

use mesh_core::DeadReason;

use super::harness::Harness;
use super::record::{Called, DeadLettered, Handled, Published, Record, Replied, Retried};
use crate::event::Event;

/// How many records a failure message lists before it only counts the rest.
const SHOWN: usize = 10;

/// What an assertion found: the event, decoded as the type asked for, and its record.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Observed<E, R> {
    /// The event.
    pub event: E,
    /// Where and how it was seen.
    pub record: R,
}

/// An assertion that did not hold within its timeout: what was expected, and what was seen.
///
/// Its `Debug` is its message, so a test that `unwrap`s it or returns it from `main` or a
/// `#[test]` shows the message rather than a structure.
#[derive(Clone)]
pub struct AssertionError {
    expected: String,
    seen: String,
    timeout: Duration,
    log_full: bool,
}

impl AssertionError {
    /// What the assertion expected, e.g. ``a published `module.billing.invoice.paid` ``.
    pub fn expected(&self) -> &str {
        &self.expected
    }

    /// What was seen instead, e.g. ``nothing published``.
    pub fn seen(&self) -> &str {
        &self.seen
    }
}

impl fmt::Display for AssertionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "expected {} within {:?}; saw {}",
            self.expected, self.timeout, self.seen
        )?;
        if self.log_full {
            write!(
                f,
                " (the harness stopped recording after {} records)",
                super::record::MAX_RECORDS
            )?;
        }
        Ok(())
    }
}

impl fmt::Debug for AssertionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for AssertionError {}

/// How a failure message names the records it lists.
#[derive(Clone, Copy)]
struct Noun {
    one: &'static str,
    many: &'static str,
    none: &'static str,
}

const OUTCOMES: Noun = Noun {
    one: "outcome",
    many: "outcomes",
    none: "no delivery handled, retried or dead-lettered",
};

/// `records` as a failure message's list: their count and kind, then each on a line of
/// its own (the first [`SHOWN`]).
fn listing<'a>(records: impl IntoIterator<Item = &'a Record>, noun: Noun) -> String {
    let records: Vec<&Record> = records.into_iter().collect();
    let Noun { one, many, none } = noun;
    match records.len() {
        0 => none.to_owned(),
        n => {
            let mut text = format!("{n} {}: ", if n == 1 { one } else { many });
            let shown: Vec<String> = records.iter().take(SHOWN).map(|r| r.to_string()).collect();
            text.push_str(&shown.join("; "));
            if n > SHOWN {
                text.push_str(&format!("; and {} more", n - SHOWN));
            }
            text
        }
    }
}

impl Harness {
    /// Waits for a record `find` accepts (looking at every record since the harness was
    /// made): `None` once the timeout passed without one.
    async fn wait<T>(&self, mut find: impl FnMut(&Record) -> Option<T>) -> Option<T> {
        let mut count = self.log.subscribe();
        let deadline = tokio::time::Instant::now() + self.timeout;
        let mut scanned = 0;
        loop {
            // Marked seen before reading: a record pushed after this wakes the wait below.
            count.borrow_and_update();
            let new = self.log.since(scanned);
            scanned += new.len();
            if let Some(found) = new.iter().find_map(&mut find) {
                return Some(found);
            }
            match tokio::time::timeout_at(deadline, count.changed()).await {
                Ok(Ok(())) => {}
                // The log (and its sender) lives as long as the harness: a closed channel
                // cannot happen, and would mean nothing more is coming.
                Ok(Err(_)) | Err(_) => return None,
            }
        }
    }

    fn unmet(&self, expected: String, seen: String) -> AssertionError {
        AssertionError {
            expected,
            seen,
            timeout: self.timeout,
            log_full: self.log.is_full(),
        }
    }

    /// What the records of `module` say, or that no such module was started.
    fn seen_in(&self, module: &str, records: &[Record], noun: Noun) -> String {
        let outcomes = records.iter().filter(|r| match r {
            Record::Handled(h) => h.module == module,
            Record::Retried(r) => r.module == module,
            Record::DeadLettered(d) => d.module == module,
            _ => false,
        });
        let mut seen = listing(outcomes, noun);
        let modules = self.modules();
        if !modules.iter().any(|m| m == module) {
            seen.push_str(&format!(
                " (no module `{module}` was started; started: {})",
                if modules.is_empty() {
                    "none".to_owned()
                } else {
                    modules.join(", ")
                }
            ));
        }
        seen
    }

    /// Waits for a published `E` (an event under `E::KEY` whose body reads as an `E`), from
    /// any module.
    pub async fn published<E: Event>(&self) -> Result<Observed<E, Published>, AssertionError> {
        self.published_where::<E>(|_| true).await.map_err(|mut e| {
            e.expected = format!("a published `{}`", E::KEY);
            e
        })
    }

    /// Waits for a published `E` for which `matches` holds (FastStream's
    /// `assert_called_with`).
    pub async fn published_where<E: Event>(
        &self,
        matches: impl Fn(&E) -> bool,
    ) -> Result<Observed<E, Published>, AssertionError> {
        let mut unreadable = None;
        let found = self
            .wait(|record| match record {
                Record::Published(p) if p.key == E::KEY => match p.event::<E>() {
                    Ok(event) if matches(&event) => Some(Observed {
                        event,
                        record: p.clone(),
                    }),
                    Ok(_) => None,
                    Err(e) => {
                        unreadable = Some(e.to_string());
                        None
                    }
                },
                _ => None,
            })
            .await;
        found.ok_or_else(|| {
            let records = self.records();
            let mut seen = listing(
                records.iter().filter(|r| matches!(r, Record::Published(_))),
                Noun {
                    one: "published",
                    many: "published",
                    none: "nothing published",
                },
            );
            if let Some(error) = unreadable {
                seen.push_str(&format!(
                    " (a body of `{}` does not read as `{}`: {error})",
                    E::KEY,
                    std::any::type_name::<E>()
                ));
            }
            self.unmet(
                format!("a published `{}` matching the condition", E::KEY),
                seen,
            )
        })
    }

    /// Waits for module `module` to have handled an `E`: every handler matching it returned
    /// `Ok` and the bus acked it.
    pub async fn handled<E: Event>(
        &self,
        module: &str,
    ) -> Result<Observed<E, Handled>, AssertionError> {
        let mut unreadable = None;
        let found = self
            .wait(|record| match record {
                Record::Handled(h) if h.module == module && h.key == E::KEY => {
                    match h.event::<E>() {
                        Ok(event) => Some(Observed {
                            event,
                            record: h.clone(),
                        }),
                        Err(e) => {
                            unreadable = Some(e.to_string());
                            None
                        }
                    }
                }
                _ => None,
            })
            .await;
        found.ok_or_else(|| {
            let mut seen = self.seen_in(module, &self.records(), OUTCOMES);
            if let Some(error) = unreadable {
                seen.push_str(&format!(
                    " (a body of `{}` does not read as `{}`: {error})",
                    E::KEY,
                    std::any::type_name::<E>()
                ));
            }
            self.unmet(format!("`{module}` to handle `{}`", E::KEY), seen)
        })
    }

    /// Waits for module `module` to have sent an `E` down its retry ladder (its handlers
    /// failed with a retryable error and attempts were left).
    pub async fn retried<E: Event>(&self, module: &str) -> Result<Retried, AssertionError> {
        let found = self
            .wait(|record| match record {
                Record::Retried(r) if r.module == module && r.key == E::KEY => Some(r.clone()),
                _ => None,
            })
            .await;
        found.ok_or_else(|| {
            let seen = self.seen_in(module, &self.records(), OUTCOMES);
            self.unmet(format!("`{module}` to retry `{}`", E::KEY), seen)
        })
    }

    /// Waits for a dead letter with reason `reason`, from any module.
    pub async fn dead_lettered(&self, reason: DeadReason) -> Result<DeadLettered, AssertionError> {
        let found = self
            .wait(|record| match record {
                Record::DeadLettered(d) if d.reason == reason => Some(d.clone()),
                _ => None,
            })
            .await;
        found.ok_or_else(|| {
            let records = self.records();
            let seen = listing(
                records
                    .iter()
                    .filter(|r| matches!(r, Record::DeadLettered(_))),
                Noun {
                    one: "dead letter",
                    many: "dead letters",
                    none: "no dead letter",
                },
            );
            self.unmet(format!("a dead letter with reason `{reason}`"), seen)
        })
    }

    /// Waits for a call to tool `tool` to have ended (replied, refused or failed), from any
    /// module.
    pub async fn called(&self, tool: &str) -> Result<Called, AssertionError> {
        let found = self
            .wait(|record| match record {
                Record::Called(c) if c.tool == tool => Some(c.clone()),
                _ => None,
            })
            .await;
        found.ok_or_else(|| {
            let records = self.records();
            let seen = listing(
                records.iter().filter(|r| matches!(r, Record::Called(_))),
                Noun {
                    one: "call",
                    many: "calls",
                    none: "no call",
                },
            );
            self.unmet(format!("a call to `{tool}`"), seen)
        })
    }

    /// Waits for a server of tool `tool` to have replied to a request (with its reply or an
    /// error).
    pub async fn replied(&self, tool: &str) -> Result<Replied, AssertionError> {
        let found = self
            .wait(|record| match record {
                Record::Replied(r) if r.tool == tool => Some(r.clone()),
                _ => None,
            })
            .await;
        found.ok_or_else(|| {
            let records = self.records();
            let seen = listing(
                records.iter().filter(|r| matches!(r, Record::Replied(_))),
                Noun {
                    one: "reply",
                    many: "replies",
                    none: "no reply",
                },
            );
            self.unmet(format!("a reply from `{tool}`"), seen)
        })
    }
}
