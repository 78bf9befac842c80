//! Bulk actions through the API: a dry run counts what a filter matches;
//! retrying the failed items of every partition of one tenant among 1,000
//! partitions (200 on Citus, whose one-partition statements each cross
//! the network) retries exactly those (a running processor then completes
//! them) and leaves the others failed; a filter that matches nothing says
//! so; every action is in the audit record with who acted; without the
//! admin token nothing is done.

use std::time::Duration;

use serde_json::json;

use crate::console_api::{TOKEN, get, post};
use crate::on_all_backends;
use crate::support::{Backend, Handler, Proc, TestDb, done, wait_console, wait_for};

on_all_backends!(a_filtered_retry_reaches_every_partition_it_matches);
async fn a_filtered_retry_reaches_every_partition_it_matches(db: TestDb) {
    // Failed partitions, each with one failed item; three in five of
    // tenant acme, the rest of tenant zed.
    let partitions = if db.backend == Backend::Citus {
        200
    } else {
        1_000
    };
    let (acme, zed) = (partitions * 3 / 5, partitions * 2 / 5);
    let rows: Vec<String> = (0..partitions)
        .map(|i| {
            let tenant = if i < acme { "acme" } else { "zed" };
            format!("('p{i:04}', 'failed', '{tenant}')")
        })
        .collect();
    db.sql(&format!(
        "INSERT INTO feed_partitions (id, status, tenant) VALUES {}",
        rows.join(", ")
    ))
    .await;
    let data = serde_json::to_vec(&json!({})).unwrap();
    let items: Vec<String> = (0..partitions)
        .map(|_| "('i', ?, 'failed', ?, 5, 'boom')".into())
        .collect();
    let values = (0..partitions)
        .flat_map(|i| [format!("p{i:04}").into(), data.clone().into()])
        .collect();
    db.exec(
        &format!("INSERT INTO feed_items (id, partition_id, status, data, attempts, last_error) VALUES {}", items.join(", ")),
        values,
    )
    .await;

    let h = Handler::start(|_| done()).await;
    let p = Proc::start(&db, &h.url(), &["--ui", "--admin-token", TOKEN]);
    let base = format!("http://{}", p.listen.as_deref().unwrap());
    wait_console(&base).await;
    let retry = json!({"action": "retry", "status": "failed", "tenant": "acme"});

    let (code, _) = post(&base, "/api/v1/bulk", None, Some(retry.clone())).await;
    assert_eq!(code, 401, "without the admin token nothing is done");
    let mut dry = retry.clone();
    dry["dry_run"] = json!(true);
    let (code, r) = post(&base, "/api/v1/bulk", Some(TOKEN), Some(dry)).await;
    assert_eq!(code, 200, "{r}");
    assert_eq!(
        (&r["matched"], &r["changed"]),
        (&json!(acme), &json!(0)),
        "{r}"
    );
    assert_eq!(
        db.count("SELECT COUNT(*) AS n FROM feed_items WHERE status = 'failed'")
            .await,
        partitions as i64
    );

    let (code, r) = post(&base, "/api/v1/bulk", Some(TOKEN), Some(retry)).await;
    if code == 408 {
        // A loaded machine may take longer than a request may: the
        // action goes on to its end, and its record says what it did.
        wait_for(
            "the bulk action's record",
            Duration::from_secs(300),
            || async {
                get_with_token(&base, "/api/v1/audit").await.1[0]["changed"] == json!(acme)
            },
        )
        .await;
    } else {
        assert_eq!(code, 200, "{r}");
        assert_eq!(
            (&r["matched"], &r["changed"]),
            (&json!(acme), &json!(acme)),
            "{r}"
        );
    }
    wait_for(
        "acme's items completed",
        Duration::from_secs(300),
        || async {
            db.count("SELECT COUNT(*) AS n FROM feed_items WHERE status = 'complete'")
                .await
                == acme as i64
        },
    )
    .await;
    let untouched = "SELECT COUNT(*) AS n FROM feed_items i JOIN feed_partitions p ON p.id = i.partition_id \
               WHERE p.tenant = 'zed' AND i.status = 'failed' AND p.status = 'failed'";
    assert_eq!(
        db.count(untouched).await,
        zed as i64,
        "the other tenant's partitions are untouched"
    );

    let nobody = json!({"action": "pause", "tenant": "nobody"});
    let (code, r) = post(&base, "/api/v1/bulk", Some(TOKEN), Some(nobody)).await;
    assert_eq!(code, 200, "{r}");
    assert_eq!(r["matched"], json!(0), "{r}");
    assert!(
        r["message"]
            .as_str()
            .unwrap()
            .contains("no partition matches tenant=nobody"),
        "{r}"
    );
    let (code, r) = post(
        &base,
        "/api/v1/bulk",
        Some(TOKEN),
        Some(json!({"action": "explode"})),
    )
    .await;
    assert_eq!(code, 400, "{r}");

    let (code, audit) = get_with_token(&base, "/api/v1/audit").await;
    assert_eq!(code, 200, "{audit}");
    let entries = audit.as_array().unwrap();
    assert_eq!(entries.len(), 2, "the dry run is not recorded: {audit}");
    let retry = &entries[1];
    assert_eq!(
        (
            &retry["action"],
            &retry["filter"],
            &retry["matched"],
            &retry["changed"],
            &retry["actor"]
        ),
        (
            &json!("retry"),
            &json!("status=failed, tenant=acme"),
            &json!(acme),
            &json!(acme),
            &json!("api (admin token)")
        ),
        "{audit}"
    );
    assert_eq!(
        entries[0]["action"],
        json!("pause"),
        "newest first: {audit}"
    );
    let (code, _) = get(&base, "/api/v1/audit").await;
    assert_eq!(code, 401, "the audit needs the admin token");
}

/// GETs `path` with the admin token.
async fn get_with_token(base: &str, path: &str) -> (reqwest::StatusCode, serde_json::Value) {
    let r = reqwest::Client::new()
        .get(format!("{base}{path}"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    let code = r.status();
    (
        code,
        serde_json::from_str(&r.text().await.unwrap()).unwrap_or_default(),
    )
}
