//! What Feed accepts at its entrances (the library, the command line, the
//! API and the console): ids it can store, send as a header and show on
//! every backend, gates exact in JavaScript, and text filters without the
//! characters a database refuses.

use unicode_normalization::UnicodeNormalization;

use std::time::Duration;

use crate::status::Status;
use crate::{Error, Result};

/// Longest id, in bytes: it fits every backend's key and a header line.
pub const MAX_ID_BYTES: usize = 255;

/// The highest gate: 2^53, so that every gate is exact as a JavaScript
/// number in the console and the API.
pub const MAX_GATE: i64 = 1 << 53;

/// Refuses an id (or a tenant) that is empty, longer than
/// [`MAX_ID_BYTES`], holds a control character (no header, log line or
/// terminal could carry it) or an invisible one that can make one id look
/// like another ([`invisible`]), starts or ends with a space (an HTTP
/// header's value is read without them: the handler would see another
/// id), or is not in Unicode NFC: `café` written
/// with a combining accent would be a second id that looks the same, so it
/// is refused, naming the NFC form to use, rather than changed behind the
/// producer's back. `what` names it in the error ("partition id", "item id").
pub fn id(what: &str, id: &str) -> Result<()> {
    let why = if id.is_empty() {
        "is empty".to_string()
    } else if id.len() > MAX_ID_BYTES {
        "is longer than 255 bytes".to_string()
    } else if id.chars().any(char::is_control) {
        "holds a control character".to_string()
    } else if let Some(c) = id.chars().find(|&c| invisible(c)) {
        format!(
            "holds U+{:04X}, an invisible or reordering character that would make it look like another id",
            u32::from(c)
        )
    } else if id.starts_with(' ') || id.ends_with(' ') {
        "starts or ends with a space, which the handler's Feed-Item-Id and Feed-Partition-Id headers cannot carry (their values are read without them)".to_string()
    } else if !unicode_normalization::is_nfc(id) {
        let nfc: String = id.nfc().collect();
        format!(
            "is not in Unicode NFC (a character with a combining mark that has a composed form): write it {:?}",
            shown(&nfc)
        )
    } else {
        return Ok(());
    };
    Err(Error::Invalid(format!(
        "{what} {:?} {why}; use 1 to 255 bytes of printable text",
        shown(id)
    )))
}

/// Characters that show nothing, or change the order in which the rest
/// is shown: bidirectional controls (U+061C, U+200E, U+200F, U+202A to
/// U+202E, U+2066 to U+2069), line and paragraph separators (U+2028,
/// U+2029) and zero-width or otherwise invisible format characters
/// (U+00AD, U+180E, U+200B to U+200D, U+2060 to U+2064, U+206A to U+206F,
/// U+FEFF, U+FFF9 to U+FFFB).
pub fn invisible(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{061C}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{2028}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206F}'
            | '\u{FEFF}'
            | '\u{FFF9}'..='\u{FFFB}'
    )
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

/// The highest partition priority; the lowest is its negative.
pub const MAX_PRIORITY: i32 = 1000;

/// Refuses a priority outside -[`MAX_PRIORITY`]..=[`MAX_PRIORITY`].
pub fn priority(priority: i32) -> Result<()> {
    if (-MAX_PRIORITY..=MAX_PRIORITY).contains(&priority) {
        return Ok(());
    }
    Err(Error::Invalid(format!(
        "priority {priority} is out of range; priorities run from -{MAX_PRIORITY} to {MAX_PRIORITY} (0 by default)"
    )))
}

/// The earliest `not_before` accepted: 2000-01-01T00:00:00Z. An earlier
/// time is almost always seconds given for milliseconds.
pub const MIN_NOT_BEFORE: i64 = 946_684_800_000;

/// The latest `not_before` accepted: 9999-12-31T23:59:59.999Z, the last
/// time RFC 3339 can write (and exact in JavaScript).
pub const MAX_NOT_BEFORE: i64 = 253_402_300_799_999;

/// The longest `delay` accepted: 100 years (36,500 days).
pub const MAX_DELAY: Duration = Duration::from_secs(36_500 * 86_400);

/// Why `ms` is no `not_before` Feed accepts, saying what to write.
pub fn not_before(ms: i64) -> std::result::Result<(), String> {
    if ms < MIN_NOT_BEFORE && ms > MIN_NOT_BEFORE / 1000 {
        return Err(format!(
            "not_before {ms} is before the year 2000: it looks like seconds; not_before is epoch \
             milliseconds (write {}), or an RFC 3339 time such as \"2030-01-01T09:00:00Z\"",
            ms.saturating_mul(1000)
        ));
    }
    if !(MIN_NOT_BEFORE..=MAX_NOT_BEFORE).contains(&ms) {
        return Err(format!(
            "not_before {ms} is out of range: write epoch milliseconds from {MIN_NOT_BEFORE} \
             (2000-01-01) to {MAX_NOT_BEFORE} (9999-12-31), or an RFC 3339 time such as \
             \"2030-01-01T09:00:00Z\""
        ));
    }
    Ok(())
}

/// Why `d` is no `delay` Feed accepts, saying what to write.
pub fn delay(d: Duration) -> std::result::Result<(), String> {
    if d > MAX_DELAY {
        return Err(format!(
            "delay {} is longer than 100 years; write a shorter one, such as \"10m\" or \"36h\"",
            humantime::format_duration(d)
        ));
    }
    Ok(())
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
        "status {:?} is not one of available, complete, failed, cancelled",
        shown(value)
    )))
}

/// The deepest nesting of arrays and objects accepted in an item's JSON
/// data. Handlers parse their body into a tree, and common parsers give up
/// beyond about this (Python's `json` raises `RecursionError`, serde_json
/// stops at 128): data nested deeper would only burn its attempts.
pub const MAX_DATA_DEPTH: usize = 128;

/// Refuses item data that is JSON nested deeper than [`MAX_DATA_DEPTH`].
/// A byte scan counting brackets outside strings, no tree built; only data
/// that nests that deep is then read whole, to leave alone bytes that are
/// not JSON (a `--raw` line, `data_base64`) and merely hold many brackets.
pub fn data_depth(data: &[u8]) -> std::result::Result<(), String> {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in data {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_DATA_DEPTH {
                    return match std::str::from_utf8(data)
                        .ok()
                        .and_then(|t| serde_json::from_str::<&serde_json::value::RawValue>(t).ok())
                    {
                        Some(_) => Err(format!(
                            "data nests arrays and objects more than {MAX_DATA_DEPTH} deep; \
                             handlers' JSON parsers fail on such data: flatten it"
                        )),
                        None => Ok(()),
                    };
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// At most 80 characters of `text`, for an error message (shown with
/// `{:?}`, which writes invisible characters as `\u{…}`).
pub(crate) fn shown(text: &str) -> String {
    text.chars().take(80).collect()
}

/// Checks a producer's `traceparent` as W3C Trace Context has it:
/// `00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`, lowercase,
/// neither id all zeros, exactly 55 characters. A later version (not
/// `ff`) may carry more after a `-`, which is dropped: the known fields
/// are what is returned (and stored). Anything else is refused, so that
/// no column receives more than 55 ASCII characters.
pub fn traceparent(text: &str) -> std::result::Result<String, String> {
    const LEN: usize = 55;
    let b = text.as_bytes();
    let hex =
        |r: std::ops::Range<usize>| b[r].iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'));
    let zeros = |r: std::ops::Range<usize>| b[r].iter().all(|&c| c == b'0');
    let valid = b.len() >= LEN
        && hex(0..2)
        && &b[..2] != b"ff"
        && b[2] == b'-'
        && hex(3..35)
        && !zeros(3..35)
        && b[35] == b'-'
        && hex(36..52)
        && !zeros(36..52)
        && b[52] == b'-'
        && hex(53..55)
        && (b.len() == LEN || (&b[..2] != b"00" && b[LEN] == b'-'));
    if valid {
        // The first 55 bytes are ASCII: a character boundary.
        return Ok(text[..LEN].to_string());
    }
    Err(format!(
        "traceparent {:?} is not a W3C traceparent (00-, a 32-digit trace id, -, a 16-digit \
         parent id, -, 2-digit flags, in lowercase hex, neither id all zeros); give one such as \
         \"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\"",
        shown(text)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids() {
        assert!(id("item id", "a/b-1 é").is_ok());
        assert!(id("item id", &"x".repeat(255)).is_ok());
        for bad in ["", "a\nb", "a\0b", "a\u{1b}[31m", "\u{7f}", "acme-1 ", " a"] {
            assert!(id("item id", bad).is_err(), "{bad:?}");
        }
        assert!(id("item id", &"x".repeat(256)).is_err());
    }

    #[test]
    fn invisible_and_unnormalised_ids() {
        for bad in [
            "invoice\u{202E}fdp.exe",
            "a\u{2028}b",
            "a\u{2029}b",
            "\u{200B}acme",
            "acme\u{FEFF}",
            "a\u{2066}b\u{2069}",
            "a\u{200E}",
        ] {
            let e = id("tenant", bad).unwrap_err().to_string();
            assert!(e.contains("invisible or reordering"), "{bad:?}: {e}");
            assert!(e.contains("\\u{"), "the message shows the character: {e}");
            assert!(!e.chars().any(invisible), "{e}");
        }
        let e = id("partition id", "cafe\u{301}").unwrap_err().to_string();
        assert!(
            e.contains("not in Unicode NFC") && e.contains("\"café\""),
            "{e}"
        );
        for good in ["café", "Zoë/1", "日本語", "a-b_c.d:e", "\u{1F600}"] {
            assert!(id("item id", good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn data_depth_counts_brackets_outside_strings() {
        let nest = |n: usize| format!("{}1{}", "[{\"a\":".repeat(n), "}]".repeat(n));
        assert!(data_depth(nest(64).as_bytes()).is_ok(), "128 deep");
        let e = data_depth(nest(65).as_bytes()).unwrap_err();
        assert!(e.contains("more than 128 deep"), "{e}");
        // Escaped quotes and brackets in strings do not count.
        let s = format!(r#"["\"{}", "\\", {}]"#, "[".repeat(200), "[]".repeat(200));
        assert!(data_depth(s.as_bytes()).is_ok(), "{s}");
        // Not JSON: opaque bytes, whatever their brackets.
        for opaque in [&b"[".repeat(200)[..], &[0xff; 3], b"{{{{"] {
            assert!(data_depth(opaque).is_ok());
        }
    }

    #[test]
    fn gates_and_filters() {
        assert!(gate("gate", 0).is_ok() && gate("gate", MAX_GATE).is_ok());
        assert!(gate("gate", -1).is_err() && gate("gate", MAX_GATE + 1).is_err());
        assert!(filter("prefix", "a b").is_ok() && filter("prefix", "a\0").is_err());
        assert!(status("failed").is_ok() && status("bogus").is_err() && status("a\0").is_err());
        let e = status(&"x".repeat(100_000)).unwrap_err().to_string();
        assert!(e.len() < 300, "the value is cut: {e}");
    }

    #[test]
    fn traceparents_are_checked() {
        let good = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        assert_eq!(traceparent(good).as_deref(), Ok(good));
        let tail = "-".to_string() + &"x".repeat(60_000);
        for bad in [
            "",
            "00-1-1-1",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "zz-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            " 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01 ",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\0",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\u{1b}",
            "\u{202e}00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-more",
            "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01x",
            "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0\u{e9}",
            &format!("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01{tail}"),
        ] {
            let e = traceparent(bad).unwrap_err();
            assert!(e.contains("is not a W3C traceparent"), "{e}");
            assert!(e.len() < 400, "the value is cut: {} bytes", e.len());
        }
        // A later version: the known fields, the rest after a `-` dropped.
        let later = format!("01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01{tail}");
        let kept = traceparent(&later).unwrap();
        assert_eq!(
            kept,
            "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        );
        assert_eq!(
            traceparent("cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-09").as_deref(),
            Ok("cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-09")
        );
    }
}
