//! The seal of an exported AsyncAPI document: a digest of its readable half.
//!
//! An exported document says the system twice: as AsyncAPI (`channels`, `operations`,
//! `components`), which people and tools read and may edit, and as the system itself in
//! [`ASYNCAPI_EXTENSION`](crate::ASYNCAPI_EXTENSION), which `check` reads. An edit to the
//! first half alone would leave `check` comparing the unedited system and passing. So the
//! exporter seals the first half with its SHA-256 under [`DIGEST_EXTENSION`], and
//! [`System::from_document`](crate::System::from_document) refuses a document whose first half
//! no longer matches its seal ([`ErrorKind::EditedDocument`](crate::ErrorKind)): the two halves
//! disagree, and a contract is changed in the module that announces it, then exported again.

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::error::{Error, ErrorKind};
use crate::schema::sorted_keys;

/// The extension of an exported AsyncAPI document holding the seal of its AsyncAPI half:
/// `sha256:` and the hex digest of its `channels`, `operations` and `components`.
pub const DIGEST_EXTENSION: &str = "x-mesh-digest";

/// The parts of the document the seal covers.
const SEALED: [&str; 3] = ["channels", "operations", "components"];

/// The seal of `document`'s AsyncAPI half, over its keys in sorted order (so the order a
/// tool rewrote them in does not matter).
pub(crate) fn seal(document: &Map<String, Value>) -> String {
    let mut sealed = Map::new();
    for part in SEALED {
        sealed.insert(
            part.to_owned(),
            document.get(part).cloned().unwrap_or(Value::Null),
        );
    }
    let text = sorted_keys(&Value::Object(sealed)).to_string();
    let digest = Sha256::digest(text.as_bytes());
    let mut hex = String::with_capacity(7 + digest.len() * 2);
    hex.push_str("sha256:");
    for byte in digest {
        hex.push(char::from(b"0123456789abcdef"[usize::from(byte >> 4)]));
        hex.push(char::from(b"0123456789abcdef"[usize::from(byte & 0xf)]));
    }
    hex
}

/// Whether `document`'s AsyncAPI half is still the one exported with its system: an error
/// when its seal is missing or differs.
pub(crate) fn verify(document: &Map<String, Value>) -> Result<(), Error> {
    let edited = |why: &str| {
        Error::new(ErrorKind::EditedDocument {
            why: why.to_owned(),
        })
    };
    match document.get(DIGEST_EXTENSION) {
        Some(Value::String(found)) if *found == seal(document) => Ok(()),
        Some(Value::String(_)) => Err(edited(
            "its channels, operations or components were changed after the export",
        )),
        Some(_) => Err(edited(&format!("its `{DIGEST_EXTENSION}` is not text"))),
        None => Err(edited(&format!("it has no `{DIGEST_EXTENSION}`"))),
    }
}

/// `document` with its seal added.
pub(crate) fn sealed(mut document: Map<String, Value>) -> Value {
    let seal = seal(&document);
    document.insert(DIGEST_EXTENSION.to_owned(), json!(seal));
    Value::Object(document)
}
