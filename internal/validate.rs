//! What Feed accepts at its entrances (the library, the command line, the
//! API and the console): ids it can store, send as a header and show on
//! every backend, gates exact in JavaScript, and text filters without the
//! characters a database refuses.

use crate::status::Status;
use crate::{Error, Result};

/// Longest id, in bytes: it fits every backend's key and a header line.
pub const MAX_ID_BYTES: usize = 255;

/// The highest gate: 2^53, so that every gate is exact as a JavaScript
/// number in the console and the API.
pub const MAX_GATE: i64 = 1 << 53;

/// Refuses an id that is empty, longer than [`MAX_ID_BYTES`] or holds a
/// control character (no header, log line or terminal could carry it).
/// `what` names it in the error ("partition id", "item id").
pub fn id(what: &str, id: &str) -> Result<()> {
    let why = if id.is_empty() {
        "is empty"
    } else if id.len() > MAX_ID_BYTES {
        "is longer than 255 bytes"
    } else if id.chars().any(char::is_control) {
        "holds a control character"
    } else {
        return Ok(());
    };
    Err(Error::Invalid(format!(
        "{what} {:?} {why}; use 1 to 255 bytes of printable text",
        shown(id)
    )))
}

/// Refuses a gate outside 0..=[`MAX_GATE`].
pub fn gate(what: &str, gate: i64) -> Result<()> {
    if (0..=MAX_GATE).contains(&gate) {
        return Ok(());
    }
    Err(Error::Invalid(format!(
        "{what} {gate} is out of range; gates run from 0 to 2^53 ({MAX_GATE})"
    )))
}

/// Refuses a text filter (`prefix`, `after`, `status`) holding a NUL or
/// another control character, which PostgreSQL cannot even compare.
pub fn filter(name: &str, value: &str) -> Result<()> {
    if value.chars().any(char::is_control) {
        return Err(Error::Invalid(format!(
            "{name} holds a control character; remove it"
        )));
    }
    Ok(())
}

/// Refuses a `status` filter that no row can have.
pub fn status(value: &str) -> Result<()> {
    if Status::parse(value).is_some() {
        return Ok(());
    }
    filter("status", value)?;
    Err(Error::Invalid(format!(
        "status {value:?} is not one of available, complete, failed, cancelled"
    )))
}

/// At most 80 characters of `text`, for an error message.
fn shown(text: &str) -> String {
    text.chars().take(80).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids() {
        assert!(id("item id", "a/b-1 é").is_ok());
        assert!(id("item id", &"x".repeat(255)).is_ok());
        for bad in ["", "a\nb", "a\0b", "a\u{1b}[31m", "\u{7f}"] {
            assert!(id("item id", bad).is_err(), "{bad:?}");
        }
        assert!(id("item id", &"x".repeat(256)).is_err());
    }

    #[test]
    fn gates_and_filters() {
        assert!(gate("gate", 0).is_ok() && gate("gate", MAX_GATE).is_ok());
        assert!(gate("gate", -1).is_err() && gate("gate", MAX_GATE + 1).is_err());
        assert!(filter("prefix", "a b").is_ok() && filter("prefix", "a\0").is_err());
        assert!(status("failed").is_ok() && status("bogus").is_err() && status("a\0").is_err());
    }
}
