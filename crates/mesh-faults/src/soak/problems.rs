//! Problems a soak finds along the way, gathered from every task that finds one.

use std::sync::{Arc, Mutex, MutexGuard};

/// Problems found along the way, shared by the tasks that find them.
#[derive(Debug, Clone, Default)]
pub(super) struct Problems(Arc<Mutex<Vec<String>>>);

impl Problems {
    pub(super) fn push(&self, problem: impl Into<String>) {
        let problem = problem.into();
        eprintln!("[soak] problem: {problem}");
        lock(&self.0).push(problem);
    }

    pub(super) fn take(&self) -> Vec<String> {
        std::mem::take(&mut *lock(&self.0))
    }
}

/// Locks a std mutex, recovering from poisoning (a panicked task must not hide the books).
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
