//! A per-test-binary registry of costly fixtures (a private node, a private cluster): one per
//! key, started by the first caller, shared by every test of the binary after it.
//!
//! Statics are never dropped, so a registered fixture lives until the test binary exits;
//! the fixtures' own watchdogs then remove them.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};

use anyhow::bail;

use crate::sys::lock;

type Cell<T> = Arc<tokio::sync::OnceCell<Arc<T>>>;
/// Each key's first options and its fixture's cell.
type Fixtures<O, T> = HashMap<String, (O, Cell<T>)>;

/// Fixtures of type `T` started with options `O`, by key.
pub(crate) struct Registry<O, T> {
    fixtures: OnceLock<Mutex<Fixtures<O, T>>>,
}

impl<O: Clone + PartialEq + fmt::Debug, T> Registry<O, T> {
    /// An empty registry, for a `static`.
    pub(crate) const fn new() -> Self {
        Registry {
            fixtures: OnceLock::new(),
        }
    }

    /// The fixture of `key`, started with `start(opts)` by the first caller; fails if `opts`
    /// differ from the first caller's (`what` names the public function in that error).
    pub(crate) async fn get_or_start<F, Fut>(
        &self,
        what: &str,
        key: &str,
        opts: O,
        start: F,
    ) -> anyhow::Result<Arc<T>>
    where
        F: FnOnce(O) -> Fut,
        Fut: Future<Output = anyhow::Result<T>>,
    {
        let cell = {
            let mut fixtures = lock(self.fixtures.get_or_init(Default::default));
            let (first_opts, cell) = fixtures
                .entry(key.to_owned())
                .or_insert_with(|| (opts.clone(), Arc::default()));
            if *first_opts != opts {
                bail!("{what}({key:?}) called with options {opts:?}, but it was first created with {first_opts:?}");
            }
            cell.clone()
        };
        cell.get_or_try_init(|| async { start(opts).await.map(Arc::new) })
            .await
            .cloned()
    }
}
