//! Text from the database, a handler or a producer, made safe to print on
//! a terminal, in a text log line or on a console page: control characters
//! (newlines, ESC, NUL…) and invisible or reordering ones (U+202E…, see
//! [`crate::validate::invisible`]) are shown as escapes, so no id or error
//! message can forge a log line, drive a terminal or show its text
//! backwards.

use std::borrow::Cow;

/// `text` with every control, invisible or reordering character written
/// as its Rust escape (`\n`, `\u{1b}`, `\u{202e}`); borrowed when there
/// is none.
pub fn printable(text: &str) -> Cow<'_, str> {
    let hidden = |c: char| c.is_control() || crate::validate::invisible(c);
    if !text.chars().any(hidden) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if hidden(c) {
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
        assert_eq!(printable("exe.\u{202e}fdp"), "exe.\\u{202e}fdp");
        assert_eq!(printable("a\u{200b}b\u{2028}"), "a\\u{200b}b\\u{2028}");
    }
}
