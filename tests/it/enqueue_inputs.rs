//! What enqueue refuses at the door: item fields given twice, and ids or
//! tenants that could pose as others (invisible, reordering and
//! line-separating characters, text not in Unicode NFC).

use reqwest::StatusCode;

use crate::cli::processor;
use crate::enqueue_api::{PRODUCER, enqueue, message, send, serve};
use crate::on_all_backends;
use crate::support::TestDb;

on_all_backends!(enqueue_refuses_lookalikes_and_repeated_fields);
async fn enqueue_refuses_lookalikes_and_repeated_fields(db: TestDb) {
    let base = serve(db.store.clone(), None, Some(PRODUCER)).await;

    // A field of the item given twice, whichever the body's form.
    for body in [
        "{\"id\": \"a\", \"data\": 1, \"id\": \"b\"}",
        "[{\"data\": 1, \"data\": 2}]",
        "{\"data\": 1, \"gate\": 0, \"gate\": 5}",
    ] {
        let (code, e) = enqueue(&base, "p", body).await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{body}: {e}");
        assert!(message(&e).contains("is given twice"), "{e}");
    }

    // Lookalike partition ids (percent-encoded in the path), item ids and tenants.
    let bidi = "%E2%80%AE"; // U+202E
    let (code, e) = enqueue(&base, &format!("invoice{bidi}fdp"), "{\"data\": 1}").await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{e}");
    assert!(message(&e).contains("U+202E"), "{e}");
    let (code, e) = enqueue(&base, "cafe%CC%81", "{\"data\": 1}").await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{e}");
    assert!(
        message(&e).contains("NFC") && message(&e).contains("café"),
        "{e}"
    );
    for id in ["\\u200bitem", "a\\u2028b", "x\\ufeff"] {
        let body = format!("{{\"id\": \"{id}\", \"data\": 1}}");
        let (code, e) = enqueue(&base, "p", &body).await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{id}: {e}");
        assert!(message(&e).contains("item id"), "{e}");
    }
    for tenant in ["acme%E2%80%8B", "ac%E2%80%A8me", "acme%E2%81%A6"] {
        let path = format!("/api/v1/partitions/p/items?tenant={tenant}");
        let (code, e) = send(&base, &path, Some(PRODUCER), None, "{\"data\": 1}").await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{tenant}: {e}");
        assert!(message(&e).contains("tenant"), "{e}");
    }

    // The command line refuses them too, with exit code 2.
    let o = processor(
        &[
            "enqueue",
            "--database-url",
            &db.url,
            "--partition",
            "p",
            "--tenant",
            "acme\u{202E}",
        ],
        "{\"data\": 1}\n",
    );
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = processor(
        &["enqueue", "--database-url", &db.url, "--partition", "p"],
        "{\"id\": \"cafe\\u0301\", \"data\": 1}\n",
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("NFC"), "{err}");

    assert_eq!(db.count("SELECT COUNT(*) AS n FROM feed_items").await, 0);
    assert_eq!(
        db.count("SELECT COUNT(*) AS n FROM feed_partitions").await,
        0
    );

    // The composed forms are fine.
    let (code, a) = enqueue(&base, "caf%C3%A9", "{\"id\": \"Zo\\u00eb\", \"data\": 1}").await;
    assert_eq!(code, StatusCode::OK, "{a}");
    assert_eq!(db.partition_status("café").await, "available");
}
