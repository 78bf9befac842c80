use super::*;

#[test]
fn lines() {
    let input = "{\"id\": \"a\", \"gate\": 2, \"data\": {\"x\": 1}}\n\n{\"data\": [1]}\n";
    let mut seen = 0;
    let items = read(input.as_bytes(), false, || seen += 1).unwrap();
    assert_eq!(seen, 3);
    assert_eq!(items.len(), 2);
    assert_eq!((items[0].0, items[1].0), (1, 3), "line numbers");
    let (a, b) = (&items[0].1, &items[1].1);
    assert_eq!((a.id.as_deref(), a.gate), (Some("a"), Some(2)));
    assert_eq!(a.data, br#"{"x": 1}"#.to_vec());
    assert_eq!((b.id.as_deref(), b.gate), (None, None));
    let raw = read("not json\n".as_bytes(), true, || {}).unwrap();
    assert_eq!(raw[0].1.data, b"not json".to_vec());
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

fn exported(id: &str, data: &[u8]) -> ExportedItem {
    ExportedItem {
        seq: 1,
        id: id.into(),
        gate: 3,
        status: "failed".into(),
        attempts: 2,
        last_error: Some("boom \"quoted\"\nnext".into()),
        not_before: None,
        parent_id: None,
        data: data.to_vec(),
    }
}

#[test]
fn data_is_kept_byte_for_byte() {
    let data = r#"{"z":1, "big":12345678901234567890123,"f":1.10,"z":2,"e":"\u00e9"}"#;
    for line in [
        format!(r#"{{"data": {data}}}"#),
        format!("{{ \"id\" : \"a\" , \"data\" :\t{data}  }}"),
    ] {
        assert_eq!(parse(&line, false).unwrap().data, data.as_bytes());
    }
    // Escaped keys are the same keys.
    let item = parse(r#"{"d\u0061ta": [1.0]}"#, false).unwrap();
    assert_eq!(item.data, &b"[1.0]"[..]);
}

#[test]
fn a_line_carries_its_producers_trace() {
    let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let item = parse(&format!(r#"{{"data": 1, "traceparent": "{tp}"}}"#), false).unwrap();
    assert_eq!(item.traceparent.as_deref(), Some(tp));
    let e = parse(r#"{"data": 1, "traceparent": "00-abc"}"#, false).unwrap_err();
    assert!(e.contains("is not a W3C traceparent"), "{e}");
    let e = parse(r#"{"data": 1, "traceparent": 7}"#, false).unwrap_err();
    assert_eq!(e, "traceparent must be a string");
    assert!(
        parse(r#"{"data": 1, "traceparent": null}"#, false)
            .unwrap()
            .traceparent
            .is_none()
    );
}

#[test]
fn scheduled_lines_and_their_export() {
    use crate::store::Schedule;
    let at = parse(r#"{"data": 1, "not_before": 1893488400000}"#, false).unwrap();
    assert_eq!(at.schedule, Some(Schedule::At(1_893_488_400_000)));
    let after = parse(r#"{"delay": "10m", "data": 1}"#, false).unwrap();
    let ten = std::time::Duration::from_secs(600);
    assert_eq!(after.schedule, Some(Schedule::After(ten)));
    let e = read(
        "{\"data\": 1}\n{\"data\": 2, \"delay\": \"-1m\"}\n".as_bytes(),
        false,
        || {},
    )
    .unwrap_err()
    .to_string();
    assert!(e.starts_with("line 2: delay \"-1m\" is negative"), "{e}");
    let mut item = exported("i", b"1");
    item.not_before = Some(1_893_488_400_000);
    let line = export_line(&item);
    assert!(line.contains(r#""not_before":1893488400000"#), "{line}");
    let back = parse(&line, false).unwrap();
    assert_eq!(back.schedule, Some(Schedule::At(1_893_488_400_000)));
    assert!(!export_line(&exported("j", b"1")).contains("not_before"));
    let e = parse(r#"{"data": 1, "delay": "1m", "delay": "2m"}"#, false).unwrap_err();
    assert!(e.contains("`delay` is given twice"), "{e}");
}

#[test]
fn repeated_fields_are_refused() {
    for line in [
        r#"{"data": 1, "data": 2}"#,
        r#"{"id": "a", "data": 1, "id": "b"}"#,
        r#"{"data": 1, "d\u0061ta": 2}"#,
        r#"{"data": 1, "status": "failed", "status": "complete"}"#,
    ] {
        let e = parse(line, false).unwrap_err();
        assert!(e.contains("is given twice"), "{line}: {e}");
    }
    // Repeated keys inside the data are the data's own business.
    assert!(parse(r#"{"data": {"a": 1, "a": 2}}"#, false).is_ok());
}

#[test]
fn exported_lines_enqueue_as_they_are() {
    let cases: [(&[u8], &str); 6] = [
        (
            br#"{"b":1,"a":[true,null],"n":1.10}"#,
            r#""data":{"b":1,"a":[true,null],"n":1.10}"#,
        ),
        (br#"{"x": 1, "x": 2}"#, r#""data":{"x": 1, "x": 2}"#),
        // Lines or whitespace around the data: base64, which keeps them.
        (
            b"{\n  \"x\": 1\n}\n",
            r#""data_base64":"ewogICJ4IjogMQp9Cg==""#,
        ),
        (b" 1", r#""data_base64":"IDE=""#),
        (b"not json", r#""data_base64":"bm90IGpzb24=""#),
        (&[0xff, 0x00], r#""data_base64":"/wA=""#),
    ];
    for (data, shows) in cases {
        let line = export_line(&exported("i", data));
        assert!(!line.contains('\n'), "{line}");
        assert!(line.contains(shows), "{line}");
        assert!(line.contains(r#""status":"failed","attempts":2"#), "{line}");
        let item = parse(&line, false).unwrap();
        assert_eq!((item.id.as_deref(), item.gate), (Some("i"), Some(3)));
        assert_eq!(item.data, data, "{line}");
    }
    let both = parse(r#"{"data": 1, "data_base64": "AA=="}"#, false);
    assert!(both.unwrap_err().contains("not both"));
    assert!(
        parse(r#"{"data_base64": "%%"}"#, false)
            .unwrap_err()
            .contains("not base64")
    );
    assert!(
        parse(r#"{"data_base64": 1}"#, false)
            .unwrap_err()
            .contains("must be a string")
    );
    assert!(
        parse(r#"{"id": 1, "data": 1}"#, false)
            .unwrap_err()
            .contains("id must be a string")
    );
    assert!(
        parse(r#"{"gate": 1.5, "data": 1}"#, false)
            .unwrap_err()
            .contains("integer")
    );
    assert!(
        parse(r#"{"id": "x"}"#, false)
            .unwrap_err()
            .contains("missing field `data`")
    );
    assert_eq!(
        parse(r#"{"data": null}"#, false).unwrap().data,
        &b"null"[..]
    );
    let nulls = parse(r#"{"id": null, "gate": null, "data": 0}"#, false).unwrap();
    assert_eq!((nulls.id, nulls.gate), (None, None));
    let escaped = parse(r#"{"id": "a\u00e9", "data": 0}"#, false).unwrap();
    assert_eq!(escaped.id.as_deref(), Some("aé"));
}

#[test]
fn data_nested_too_deep_is_refused_naming_its_line() {
    let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    let ok = format!("{{\"data\": {}}}\n", deep(128));
    assert!(read(ok.as_bytes(), false, || {}).is_ok());
    let input = format!("{ok}{{\"data\": {}}}\n", deep(100_000));
    let e = read(input.as_bytes(), false, || {})
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("line 2: data nests arrays and objects more than 128 deep"),
        "{e}"
    );
    // Brackets inside strings do not nest.
    let quoted = format!(
        r#"{{"data": ["{}\"{}"]}}"#,
        "[".repeat(500),
        "{".repeat(500)
    );
    assert!(parse(&quoted, false).is_ok());
    // Raw lines and data_base64: deep JSON is refused, bytes that are not
    // JSON are data like any other.
    assert!(
        parse(&deep(129), true)
            .unwrap_err()
            .contains("more than 128 deep")
    );
    assert!(parse(&"[".repeat(1000), true).is_ok());
    let b64 = BASE64.encode(deep(129));
    let e = parse(&format!(r#"{{"data_base64": "{b64}"}}"#), false).unwrap_err();
    assert!(e.contains("more than 128 deep"), "{e}");
}

#[test]
fn echoed_values_are_cut() {
    let huge = "\u{202E}".repeat(100_000);
    for line in [
        format!(r#"{{"data": 1, "delay": "1{huge}"}}"#),
        format!(r#"{{"data": 1, "delay": "{huge}"}}"#),
        format!(r#"{{"data": 1, "delay": ["{huge}"]}}"#),
        format!(r#"{{"data": 1, "not_before": "{huge}"}}"#),
        format!(r#"{{"data": 1, "not_before": "{}"}}"#, "9".repeat(100_000)),
        format!(r#"{{"data": 1, "not_before": ["{huge}"]}}"#),
        format!(r#"{{"data": 1, "traceparent": "{huge}"}}"#),
        format!(r#"{{"data": 1, "gate": "{huge}"}}"#),
        format!(r#"{{"data": 1, "{huge}": 1}}"#),
        format!(r#"{{"data": 1, "{huge}": 1, "{huge}": 1}}"#),
        format!(r#"{{"data": 1, "id": "{huge}"}}"#),
    ] {
        let e = match parse(&line, false) {
            Err(e) => e,
            // The id is checked by the store.
            Ok(item) => crate::validate::id("item id", item.id.as_deref().unwrap())
                .unwrap_err()
                .to_string(),
        };
        assert!(e.len() < 1000, "{} bytes: {}", e.len(), &e[..200]);
    }
}
