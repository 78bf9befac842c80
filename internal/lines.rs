//! The JSON-lines item format that producers feed to `processor enqueue`:
//! one item per line, `{"id"?: string, "gate"?: int, "data": any}`, or with
//! `raw` each line is an item's data as it is. Blank lines are skipped.

use std::io::BufRead;

use serde::Deserialize;

use crate::store::NewItem;
use crate::{Error, Result};

/// One line as written by a producer.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    id: Option<String>,
    gate: Option<i64>,
    data: serde_json::Value,
}

/// Reads every item of `input`, calling `on_line` once per line read (for
/// a progress display). The first bad line fails the whole read, naming its
/// line number, so that nothing is written.
pub fn read(input: impl BufRead, raw: bool, mut on_line: impl FnMut()) -> Result<Vec<NewItem>> {
    let mut items = Vec::new();
    for (n, line) in input.lines().enumerate() {
        let line = line.map_err(|e| Error::Invalid(format!("reading line {}: {e}", n + 1)))?;
        on_line();
        if line.trim().is_empty() {
            continue;
        }
        let item = parse(&line, raw)
            .map_err(|e| Error::Invalid(format!("line {}: {e}; nothing was written", n + 1)))?;
        items.push(item);
    }
    Ok(items)
}

/// One line: `{"id"?, "gate"?, "data"}`, or with `raw` the data itself.
pub fn parse(line: &str, raw: bool) -> std::result::Result<NewItem, String> {
    if raw {
        return Ok(NewItem {
            id: None,
            gate: None,
            data: line.as_bytes().to_vec(),
        });
    }
    let l: Line = serde_json::from_str(line).map_err(|e| {
        let what = e.to_string().replace(" at line 1 column", " at column");
        format!(
            "{what}; expected {{\"id\"?: string, \"gate\"?: int, \"data\": any}} (or use --raw)"
        )
    })?;
    if l.gate.is_some_and(|g| g < 0) {
        return Err("gate must not be negative".into());
    }
    Ok(NewItem {
        id: l.id,
        gate: l.gate,
        data: serde_json::to_vec(&l.data).map_err(|e| e.to_string())?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines() {
        let input = "{\"id\": \"a\", \"gate\": 2, \"data\": {\"x\": 1}}\n\n{\"data\": [1]}\n";
        let mut seen = 0;
        let items = read(input.as_bytes(), false, || seen += 1).unwrap();
        assert_eq!(seen, 3);
        assert_eq!(items.len(), 2);
        assert_eq!(
            (items[0].id.as_deref(), items[0].gate),
            (Some("a"), Some(2))
        );
        assert_eq!(items[0].data, br#"{"x":1}"#.to_vec());
        assert_eq!((items[1].id.as_deref(), items[1].gate), (None, None));
        let raw = read("not json\n".as_bytes(), true, || {}).unwrap();
        assert_eq!(raw[0].data, b"not json".to_vec());
    }

    #[test]
    fn bad_lines_name_their_number() {
        let e = read("{\"data\": 1}\n{\"dta\": 1}\n".as_bytes(), false, || {}).unwrap_err();
        let text = e.to_string();
        assert!(text.starts_with("line 2: unknown field `dta`"), "{text}");
        assert!(text.ends_with("nothing was written"), "{text}");
        assert!(
            parse("{\"gate\": -1, \"data\": 0}", false)
                .unwrap_err()
                .contains("negative")
        );
        assert!(
            parse("[1]", false)
                .unwrap_err()
                .contains("expected {\"id\"?")
        );
    }
}
