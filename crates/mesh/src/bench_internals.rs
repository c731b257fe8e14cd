//! An entry point into the consumer loop's dispatch for the micro-benchmarks
//! (`crates/mesh-microbench`), and for nothing else.
//!
//! Compiled only with the non-default `bench-internals` feature and hidden from the docs: it
//! is not part of the API and carries no stability promise. [`Consumer::deliver`] is a thin
//! shell over what the consumer loop does with one delivery (`Dispatcher::handle`: decode,
//! match, span and metrics, the handler, the ack), so what the benchmark measures is that
//! code, not a transport or a runtime.

use mesh_core::{Delivery, RetryPolicy, TopicPattern};

use crate::dispatch::{self, Dispatcher};
use crate::handler::{HandlerCall, HandlerDecl, HandlerEntry};
use crate::telemetry::record::Queue;

/// A consumer of one queue with one raw handler that succeeds.
pub struct Consumer {
    dispatcher: Dispatcher,
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer").finish_non_exhaustive()
    }
}

impl Consumer {
    /// A consumer of queue `queue` whose one handler takes every event matching `pattern`.
    ///
    /// # Panics
    ///
    /// When `pattern` is not a topic pattern (a benchmark's fixture is wrong).
    #[allow(clippy::unwrap_used)]
    pub fn new(queue: &str, pattern: &str) -> Consumer {
        let decl = HandlerDecl::raw(vec![pattern.to_owned()], None, |_event| async { Ok(()) });
        let handler = HandlerEntry {
            patterns: vec![TopicPattern::parse(pattern).unwrap()],
            call: HandlerCall::of(decl.service),
            #[cfg(feature = "schemas")]
            check: None,
        };
        let queue = Queue::new(queue);
        Consumer {
            dispatcher: Dispatcher {
                handlers: vec![handler],
                enforce_identity: None,
                retry: RetryPolicy::default(),
                queue: queue.clone(),
                unmatched: std::sync::Mutex::default(),
                ack_failed: dispatch::ack_failed(queue),
            },
        }
    }

    /// Handles one delivery to its end (decoded, matched, handled and settled), driving the
    /// consumer loop's future for it on this thread.
    pub fn deliver(&self, delivery: Delivery) {
        futures::executor::block_on(self.dispatcher.handle(delivery));
    }
}
