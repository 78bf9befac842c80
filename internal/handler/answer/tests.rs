use super::*;
use crate::handler::Child;

fn ok(body: &str) -> Outcome {
    parse_response(
        StatusCode::OK,
        &Bytes::copy_from_slice(body.as_bytes()),
        None,
    )
}

#[test]
fn answers() {
    assert_eq!(ok(""), Outcome::step(None, true, None));
    assert_eq!(
        ok(r#"{"gate": 2, "done": false, "data": {"a": 1}}"#),
        Outcome::step(Some(2), false, Some(Bytes::from_static(br#"{"a": 1}"#)))
    );
    assert_eq!(
        ok(r#"{"complete": true, "response": [1]}"#),
        Outcome::step(None, true, Some(Bytes::from_static(b"[1]")))
    );
    // No "done": done, unless the answer names a gate to move to.
    assert_eq!(
        ok(r#"{"data": {"a": 1}}"#),
        Outcome::step(None, true, Some(Bytes::from_static(br#"{"a": 1}"#)))
    );
    assert_eq!(
        ok(r#"{"gate": 1, "done": null}"#),
        Outcome::step(Some(1), false, None)
    );
    assert!(matches!(
        ok(r#"{"gate": "x"}"#),
        Outcome::Failed { retry: true, .. }
    ));
    assert!(matches!(
        ok(r#"{"gate": -1}"#),
        Outcome::Failed { retry: true, .. }
    ));
    assert!(matches!(
        ok(r#"{"gate": 9007199254740993}"#),
        Outcome::Failed { retry: true, .. }
    ));
    assert!(matches!(
        ok(r#"{"done": "yes"}"#),
        Outcome::Failed { retry: true, .. }
    ));
    assert!(matches!(
        ok("not json"),
        Outcome::Failed { retry: true, .. }
    ));
}

#[test]
fn errors_and_statuses() {
    // The body's error, and whether it is retried: a non-retryable
    // status stays final whatever the body says.
    for (code, body, retry, text) in [
        (
            200,
            r#"{"error": {"message": "bad pdf", "no_retry": true}}"#,
            false,
            "bad pdf",
        ),
        (
            422,
            r#"{"error": {"message": "unprocessable"}}"#,
            false,
            "unprocessable",
        ),
        (503, r#"{"error": {"message": "busy"}}"#, true, "busy"),
    ] {
        let s = StatusCode::from_u16(code).unwrap();
        let e = parse_response(s, &Bytes::copy_from_slice(body.as_bytes()), None);
        assert!(
            matches!(e, Outcome::Failed { retry: r, ref message, .. } if r == retry && message.contains(text)),
            "{code} {body}: {e:?}"
        );
    }
    for (code, retry) in [
        (408, true),
        (429, true),
        (503, true),
        (404, false),
        (422, false),
        (302, false),
    ] {
        let s = StatusCode::from_u16(code).unwrap();
        assert!(
            matches!(parse_response(s, &Bytes::new(), None), Outcome::Failed { retry: r, .. } if r == retry),
            "{code}"
        );
    }
    // 404 and 405 may be a wrong URL (the breaker decides), body or not.
    for (code, body, missing) in [
        (404, "Not Found", Some(404)),
        (405, "", Some(405)),
        (404, r#"{"error": {"message": "no such order"}}"#, Some(404)),
        (410, "", None),
        (503, "", None),
    ] {
        let s = StatusCode::from_u16(code).unwrap();
        let o = parse_response(s, &Bytes::copy_from_slice(body.as_bytes()), None);
        assert_eq!(o.missing(), missing, "{code} {body}");
    }
}

#[test]
fn a_status_says_what_was_answered_not_what_happens_next() {
    // Whether it is retried is the policy's to say: the same 500 is
    // retried, or the item's last attempt.
    let s = StatusCode::INTERNAL_SERVER_ERROR;
    let e = parse_response(s, &Bytes::from_static(b"KeyError: 'name'\n"), None);
    assert!(
        matches!(e, Outcome::Failed { retry: true, ref message, .. }
            if message == "handler answered HTTP 500: KeyError: 'name'"),
        "{e:?}"
    );
    let e = parse_response(StatusCode::NOT_FOUND, &Bytes::new(), None);
    assert!(
        matches!(e, Outcome::Failed { retry: false, ref message, .. } if message == "handler answered HTTP 404"),
        "{e:?}"
    );
}

#[test]
fn retry_after() {
    assert_eq!(parse_retry_after("7"), Some(Duration::from_secs(7)));
    let later = std::time::SystemTime::now() + Duration::from_secs(100);
    let d = parse_retry_after(&httpdate::fmt_http_date(later)).unwrap();
    assert!(d > Duration::from_secs(90) && d <= Duration::from_secs(100));
    assert_eq!(parse_retry_after("soon"), None);
}

#[test]
fn batch_answers() {
    let batch = |status: u16, body: &str, n| {
        parse_batch_response(
            StatusCode::from_u16(status).unwrap(),
            &Bytes::copy_from_slice(body.as_bytes()),
            None,
            n,
        )
    };
    assert_eq!(
        batch(200, " ", 2),
        Ok(vec![Outcome::done(), Outcome::done()])
    );
    let each = batch(
        200,
        r#"[null, {}, {"gate": 3}, {"error": {"message": "no", "no_retry": true}}, 7]"#,
        5,
    )
    .unwrap();
    assert_eq!(each[0], Outcome::done());
    assert_eq!(each[1], Outcome::done());
    assert_eq!(each[2], Outcome::step(Some(3), false, None));
    assert!(matches!(each[3], Outcome::Failed { retry: false, .. }));
    assert!(matches!(each[4], Outcome::Failed { retry: true, .. }));
    for (status, body) in [
        (200, "[null]"),
        (200, "{}"),
        (200, "nope"),
        (503, "[null, null]"),
    ] {
        assert!(
            matches!(
                batch(status, body, 2),
                Err(Outcome::Failed { retry: true, .. })
            ),
            "{status} {body}"
        );
    }
    assert!(matches!(
        batch(404, "", 2),
        Err(Outcome::Failed { retry: false, .. })
    ));
}

#[test]
fn an_answer_can_end_its_partition() {
    use crate::handler::PartitionEnd;
    for (word, end) in [
        ("complete", PartitionEnd::Complete),
        ("cancel", PartitionEnd::Cancel),
        ("fail", PartitionEnd::Fail),
    ] {
        let body = format!(r#"{{"partition": "{word}", "reason": "the folder is empty"}}"#);
        assert_eq!(
            ok(&body),
            Outcome::done().ending(end, Some("the folder is empty".into()))
        );
    }
    assert_eq!(
        ok(r#"{"partition": "cancel"}"#),
        Outcome::done().ending(PartitionEnd::Cancel, None)
    );
    assert_eq!(ok(r#"{"partition": null}"#), Outcome::done());
    for bad in [
        r#"{"partition": "stop"}"#,
        r#"{"partition": 1}"#,
        r#"{"partition": "cancel", "reason": 5}"#,
    ] {
        let Outcome::Failed { message, .. } = ok(bad) else {
            panic!("{bad} is not a failed attempt")
        };
        assert!(
            message.contains("\"partition\"") || message.contains("\"reason\""),
            "{message}"
        );
    }
}

/// The message of a failed attempt (panics on any other outcome).
fn failure(outcome: Outcome) -> String {
    match outcome {
        Outcome::Failed { message, retry, .. } => {
            assert!(retry, "{message}");
            message
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_answer_can_spawn_items() {
    let spawned = ok(
        r#"{"data": 1, "items": [{"data": {"f": "a"}}, {"id": "sum", "gate": 1, "data": null}, {}]}"#,
    );
    let want = Outcome::step(None, true, Some(Bytes::from_static(b"1"))).spawning(vec![
        Child::new(Bytes::from_static(br#"{"f": "a"}"#)),
        Child::new(Bytes::from_static(b"null")).id("sum").gate(1),
        Child::new(Bytes::from_static(b"null")),
    ]);
    assert_eq!(spawned, want);
    assert_eq!(ok(r#"{"items": null}"#), Outcome::done());
    assert_eq!(ok(r#"{"items": []}"#), Outcome::done());
    // In a batch, per item.
    let batch = parse_batch_response(
        StatusCode::OK,
        &Bytes::from_static(br#"[{"items": [{"data": 2}]}, null]"#),
        None,
        2,
    )
    .unwrap();
    assert_eq!(
        batch,
        [
            Outcome::done().spawning(vec![Child::new(Bytes::from_static(b"2"))]),
            Outcome::done()
        ]
    );
    let many = format!(r#"{{"items": [{}]}}"#, vec!["{}"; 10_001].join(","));
    assert!(failure(ok(&many)).contains("at most 10000"));
    for (body, says) in [
        (r#"{"items": {"data": 1}}"#, "must be an array"),
        (r#"{"items": [1]}"#, "items[0]"),
        (r#"{"items": [{"id": 7}]}"#, "items[0].id: 7"),
        (r#"{"items": [{"id": ""}]}"#, "is empty"),
        (r#"{"items": [{"gate": -1}]}"#, "items[0].gate: -1"),
        (r#"{"items": [{"data": 1}], "partition": "cancel"}"#, "both"),
    ] {
        let message = failure(ok(body));
        assert!(message.contains(says), "{body}: {message}");
    }
}
