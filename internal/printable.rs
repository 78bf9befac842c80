//! Text from the database, a handler or a producer, made safe to print on
//! a terminal or in a text log line: control characters (newlines, ESC,
//! NUL…) are shown as escapes, so no id or error message can forge a log
//! line or drive a terminal.

use std::borrow::Cow;

/// `text` with every control character written as its Rust escape
/// (`\n`, `\u{1b}`); borrowed when there is none.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_escaped() {
        assert!(matches!(printable("plain é"), Cow::Borrowed("plain é")));
        assert_eq!(printable("a\nb"), "a\\nb");
        assert_eq!(printable("\u{1b}]0;title\u{7}"), "\\u{1b}]0;title\\u{7}");
    }
}
