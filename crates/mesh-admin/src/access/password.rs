//! Passwords that no `Debug` shows, and RabbitMQ's salted password hashes.

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine as _;
use sha2::Digest as _;

/// A password: shown by no `Debug`, no `Display`, no error.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

impl Password {
    /// Wraps a password.
    pub fn new(password: impl Into<String>) -> Password {
        Password(password.into())
    }

    /// The password itself, for the request that sets it.
    pub(super) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Password(<redacted>)")
    }
}

/// The passwords of users, by user name (`Debug` shows the names only).
#[derive(Clone, Default)]
pub struct Passwords {
    by_user: BTreeMap<String, Password>,
}

impl Passwords {
    /// No password.
    pub fn new() -> Passwords {
        Passwords::default()
    }

    /// Sets the password of `user` (replacing one given before).
    pub fn insert(&mut self, user: impl Into<String>, password: Password) {
        self.by_user.insert(user.into(), password);
    }

    /// The password of `user`.
    pub fn get(&self, user: &str) -> Option<&Password> {
        self.by_user.get(user)
    }

    /// Whether `user` has a password.
    pub fn contains(&self, user: &str) -> bool {
        self.by_user.contains_key(user)
    }
}

impl fmt::Debug for Passwords {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.by_user.keys()).finish()
    }
}

/// Whether `password` is the one `hash` was made from, with RabbitMQ's `algorithm`: `None`
/// when that cannot be told (another algorithm, a hash that is not base64 of a salt and a
/// digest). An empty hash is a user without a password: never a match.
pub fn password_matches(hash: &str, algorithm: Option<&str>, password: &Password) -> Option<bool> {
    if hash.is_empty() {
        return Some(false);
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(hash.trim())
        .ok()?;
    if bytes.len() < 4 {
        return None;
    }
    let (salt, digest) = bytes.split_at(4);
    let computed: Vec<u8> = match algorithm? {
        "rabbit_password_hashing_sha256" => {
            let mut h = sha2::Sha256::new();
            h.update(salt);
            h.update(password.expose().as_bytes());
            h.finalize().to_vec()
        }
        "rabbit_password_hashing_sha512" => {
            let mut h = sha2::Sha512::new();
            h.update(salt);
            h.update(password.expose().as_bytes());
            h.finalize().to_vec()
        }
        _ => return None,
    };
    if computed.len() != digest.len() {
        return None;
    }
    // Compared without an early exit.
    let differing = computed
        .iter()
        .zip(digest)
        .fold(0u8, |acc, (a, b)| acc | (a ^ b));
    Some(differing == 0)
}

/// `password` hashed as RabbitMQ stores it with `rabbit_password_hashing_sha256`: base64 of
/// the 4-byte `salt` followed by SHA-256 of the salt and the password.
pub fn sha256_password_hash(password: &Password, salt: [u8; 4]) -> String {
    let mut h = sha2::Sha256::new();
    h.update(salt);
    h.update(password.expose().as_bytes());
    let mut bytes = salt.to_vec();
    bytes.extend_from_slice(&h.finalize());
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
