//! [`BoxFuture`]: what the object-safe traits of the seam return.

use std::future::Future;
use std::pin::Pin;

/// A boxed, sendable future: what the object-safe traits of this module return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
