//! Finding partitions and items: the partitions list (API and console)
//! filters by gate, by age and by text in an item's `last_error` (any
//! case), and a bulk action takes the same filter; a partition's items
//! are searched by id prefix and by a field of their JSON data, paged,
//! data that is not JSON being no match.

use feed::store::{NewItem, PartitionSpec};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::behaviour;
use crate::console_api::{TOKEN, get, post, serve};
use crate::support::{TestDb, page};

/// The ids of a list of partitions or items.
fn ids(v: &Value) -> Vec<String> {
    v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap().to_string())
        .collect()
}

behaviour!(partitions_filter_by_gate_age_and_error_text);
/// `young` at gate 0; `gated` at gate 2 with an item that failed with
/// "Timeout from upstream"; `old`, created two hours ago. Each filter
/// picks its one; a filter that is not one says why.
async fn partitions_filter_by_gate_age_and_error_text(db: TestDb) {
    let spec = PartitionSpec::default();
    for p in ["young", "gated", "old"] {
        let item = NewItem::new(b"{}".to_vec())
            .with_id("x")
            .at_gate(if p == "gated" { 2 } else { 0 });
        db.store.enqueue(p, &spec, vec![item]).await.unwrap();
    }
    db.sql("UPDATE feed_partitions SET gate = 2 WHERE id = 'gated'")
        .await;
    db.sql("UPDATE feed_items SET attempts = 1, last_error = 'handler error: Timeout from upstream' WHERE partition_id = 'gated'")
        .await;
    db.sql("UPDATE feed_partitions SET created_at = {now} - 7200000 WHERE id = 'old'")
        .await;
    let base = serve(db.store.clone(), Some(TOKEN)).await;
    let list = |q: &'static str| {
        let base = base.clone();
        async move { get(&base, &format!("/api/v1/partitions?{q}")).await }
    };
    assert_eq!(ids(&list("gate=2").await.1), ["gated"]);
    assert_eq!(ids(&list("older_than=1h").await.1), ["old"]);
    assert_eq!(ids(&list("error=TIMEOUT").await.1), ["gated"]);
    assert_eq!(
        ids(&list("error=50%25").await.1),
        Vec::<String>::new(),
        "% is the text itself"
    );
    assert_eq!(ids(&list("gate=0&older_than=30m").await.1), ["old"]);
    let (code, body) = list("gate=two").await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    assert!(body.to_string().contains("whole number"), "{body}");
    let (code, body) = list("older_than=soon").await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    assert!(body.to_string().contains("30m or 2h"), "{body}");

    // A bulk action takes the same filter.
    let bulk = json!({"action": "pause", "error": "timeout", "dry_run": true});
    let (code, done) = post(&base, "/api/v1/bulk", Some(TOKEN), Some(bulk)).await;
    assert_eq!(
        (code, &done["matched"]),
        (StatusCode::OK, &json!(1)),
        "{done}"
    );
    assert_eq!(done["filter"], json!("error=timeout"));

    // The console's list, filtered the same way.
    let html = page(&format!(
        "{base}/partitions?error=timeout&gate=&older_than="
    ))
    .await;
    assert!(
        html.contains(r#"data-id="gated""#) && !html.contains(r#"data-id="young""#),
        "{html}"
    );
    let html = page(&format!("{base}/partitions?older_than=1h")).await;
    assert!(
        html.contains(r#"data-id="old""#) && !html.contains(r#"data-id="gated""#),
        "{html}"
    );
}

behaviour!(a_partitions_items_are_found_by_id_prefix_and_data_field);
/// 1,200 items, every seventh of customer acme, and one that is not
/// JSON: the data search pages through exactly acme's 172, the prefix
/// `i001` finds ten, and a search that is not `field = value` says so.
async fn a_partitions_items_are_found_by_id_prefix_and_data_field(db: TestDb) {
    let mut items: Vec<NewItem> = (0..1200)
        .map(|i| {
            let customer = if i % 7 == 0 { "acme" } else { "other" };
            let data = json!({"customer": customer, "n": i});
            NewItem::new(serde_json::to_vec(&data).unwrap()).with_id(format!("i{i:04}"))
        })
        .collect();
    items.push(NewItem::new(b"\xff{not json".to_vec()).with_id("raw"));
    db.store
        .enqueue("d", &PartitionSpec::default(), items)
        .await
        .unwrap();
    let base = serve(db.store.clone(), None).await;
    let search = "/api/v1/partitions/d/items?limit=50&data=customer%20%3D%20%22acme%22";
    let (mut found, mut after) = (Vec::new(), String::new());
    loop {
        let (code, body) = get(&base, &format!("{search}{after}")).await;
        assert_eq!(code, StatusCode::OK, "{body}");
        for item in body["data"].as_array().unwrap() {
            assert!(
                item["data_preview"].as_str().unwrap().contains(r#""acme""#),
                "{item}"
            );
        }
        found.extend(ids(&body));
        match body["next"].as_str() {
            Some(next) => after = format!("&after={next}"),
            None => break,
        }
    }
    let acme: Vec<String> = (0..1200)
        .filter(|i| i % 7 == 0)
        .map(|i| format!("i{i:04}"))
        .collect();
    assert_eq!(found, acme);
    let (_, body) = get(&base, "/api/v1/partitions/d/items?prefix=i001").await;
    assert_eq!(ids(&body).len(), 10, "{body}");
    let (_, body) = get(&base, "/api/v1/partitions/d/items?prefix=i001&data=n%3D14").await;
    assert_eq!(ids(&body), ["i0014"]);
    let (code, body) = get(&base, "/api/v1/partitions/d/items?data=acme").await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    assert!(body.to_string().contains("field = value"), "{body}");

    // The partition's page searches the same way.
    let html = page(&format!("{base}/partitions/d?data=customer+%3D+%22acme%22")).await;
    assert!(
        html.contains(r#"data-id="i0007""#) && !html.contains(r#"data-id="i0001""#),
        "{html}"
    );
}
