//! How to reach the broker and how the binding behaves: [`AmqpOptions`].
//!
//! Options are plain data: `Default` plus consuming setters, [`FromStr`] for `amqp://` and
//! `amqps://` URLs, and [`AmqpOptions::from_env`], which is the only place this crate reads
//! the environment.
//!
//! The password never leaves this module in text meant for people: `Debug` and `Display`
//! redact it, and no parse error quotes a part of the URL that may hold it.
//!
//! `auth` holds the login mechanism; `builder` holds the options themselves (defaults, setters, getters, validation); `url`
//! reads and writes them as a URL.
//!
//! [`FromStr`]: std::str::FromStr

mod auth;
mod builder;
mod url;

pub use auth::AuthMechanism;
pub use builder::{AmqpOptions, BrokerAddress, QueueType, URL_ENV};
pub use url::redact_url;
