//! What owns a connection to the broker and brings it back after a loss: everything a
//! reconnect touches has its home here.
//!
//! - `state`: opening a named connection through the addresses (TLS, a rotated password
//!   read again), watching it for a loss, and the [`LinkState`](state::LinkState) the
//!   broker's callbacks report into (connected, blocked, why it closed);
//! - `owner`: the [`ConnectionOwner`](owner::ConnectionOwner) of one link's connection,
//!   which sees the loss, reconnects with backoff and reports the lifecycle; the publish
//!   task (`publisher`) holds one, the consume link's supervisor the other;
//! - `link`: the consume side's supervisor and its [`ConsumeLink`](link::ConsumeLink)
//!   handle, which hands out channels of the current connection and replays the recorded
//!   topology on every new one before it counts as up;
//! - `backoff`: the reconnect and re-attach schedule, set from the options;
//! - `refused`: a refused login or vhost ([`ConnectRefused`]), which retrying cannot cure.
//!
//! The events these produce, and the counters behind the transport's stats, are the
//! transport's to show (`lifecycle`): consumers, channels and declarations report there too.

pub(crate) mod backoff;
pub(crate) mod link;
pub(crate) mod owner;
pub(crate) mod refused;
pub(crate) mod state;

pub use refused::ConnectRefused;
