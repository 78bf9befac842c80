//! Producer tokens with a scope: created, listed and revoked with the
//! command line and the admin API, stored only as a hash, and held to
//! their tenant, prefix and caps; the legacy `--producer-token` has the
//! narrowest scope (partitions of no tenant).

use feed::store::{NewItem, PartitionSpec, ProducerScope};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::cli::processor;
use crate::enqueue_api::{ADMIN, PRODUCER, message, send, serve};
use crate::on_all_backends;
use crate::support::TestDb;

/// `processor tokens create` with `args`: the token it printed.
fn create(db: &TestDb, args: &[&str]) -> String {
    let mut all = vec!["tokens", "create", "--database-url", &db.url];
    all.extend_from_slice(args);
    let o = processor(&all, "");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap().trim().to_string()
}

/// Enqueues one item (`body`) into `partition` with `token` and the query `q`.
async fn put(base: &str, token: &str, partition: &str, q: &str, body: &str) -> (StatusCode, Value) {
    let path = format!("/api/v1/partitions/{partition}/items?{q}");
    send(base, &path, Some(token), None, body.to_string()).await
}

async fn tenant_of(db: &TestDb, partition: &str) -> Option<String> {
    let rows = db
        .query(
            "SELECT tenant FROM feed_partitions WHERE id = ?",
            vec![partition.into()],
        )
        .await;
    rows[0].try_get("", "tenant").unwrap()
}

on_all_backends!(producer_tokens_are_scoped);
async fn producer_tokens_are_scoped(db: TestDb) {
    let acme = create(&db, &["--tenant", "acme", "--prefix", "acme/"]);
    let acme_any = create(
        &db,
        &[
            "--tenant",
            "acme",
            "--max-weight",
            "5",
            "--max-in-flight",
            "10",
        ],
    );
    let beta = create(&db, &["--tenant", "beta"]);
    assert!(acme.starts_with("fpt_") && acme.len() > 60, "{acme}");

    // Listed with their scopes, never the tokens; stored as SHA-256 hashes.
    let o = processor(&["tokens", "list", "--database-url", &db.url, "--json"], "");
    let listed = String::from_utf8(o.stdout).unwrap();
    let scopes: Vec<Value> = listed
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(scopes.len(), 3, "{listed}");
    assert_eq!(
        (scopes[0]["tenant"].clone(), scopes[0]["prefix"].clone()),
        (json!("acme"), json!("acme/"))
    );
    let hashes: Vec<(String,)> = db
        .rows(
            "SELECT token_hash FROM feed_producer_tokens",
            &["token_hash"],
        )
        .await;
    for token in [&acme, &acme_any, &beta] {
        assert!(!listed.contains(token.as_str()));
        let hash = hex::encode(Sha256::digest(token.as_bytes()));
        assert!(
            hashes.iter().any(|(h,)| *h == hash),
            "only the hash is stored"
        );
        assert!(hashes.iter().all(|(h,)| h != token));
    }

    let base = serve(db.store.clone(), Some(ADMIN), Some(PRODUCER)).await;
    let one = "{\"data\": 1}";

    // Within its scope: the partition is its tenant's, generated ids carry the prefix.
    let (code, a) = put(&base, &acme, "acme%2Fp1", "", one).await;
    assert_eq!(code, StatusCode::OK, "{a}");
    assert_eq!(tenant_of(&db, "acme/p1").await.as_deref(), Some("acme"));
    assert!(a["ids"][0].as_str().unwrap().starts_with("acme/"), "{a}");
    let (code, a) = put(
        &base,
        &acme,
        "acme%2Fp1",
        "tenant=acme",
        "{\"id\": \"acme/i\", \"data\": 2}",
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{a}");

    // Outside it: refused with 403, nothing written.
    let (code, _) = put(&base, &beta, "b1", "", one).await;
    assert_eq!(code, StatusCode::OK);
    let (code, _) = put(&base, PRODUCER, "open", "", one).await;
    assert_eq!(
        code,
        StatusCode::OK,
        "the legacy token creates a partition without a tenant"
    );
    let refused = [
        (&acme, "acme%2Fp2", "tenant=beta", one, "bound to tenant"),
        (&acme, "beta%2Fp", "", one, "must start with"),
        (
            &acme,
            "acme%2Fp3",
            "",
            "{\"id\": \"beta-7\", \"data\": 1}",
            "item ids must start",
        ),
        (
            &acme,
            "acme%2Fp4",
            "weight=1000",
            one,
            "weight may be at most",
        ),
        (
            &acme,
            "acme%2Fp5",
            "max_in_flight=100000",
            one,
            "max_in_flight may be at most",
        ),
        (
            &acme_any,
            "acme-w",
            "weight=6",
            one,
            "weight may be at most 5",
        ),
        (
            &acme_any,
            "acme-m",
            "max_in_flight=11",
            one,
            "max_in_flight may be at most 10",
        ),
        (&acme_any, "b1", "", one, "is not tenant \"acme\"'s"),
        (&acme_any, "open", "", one, "is not tenant \"acme\"'s"),
    ];
    for (token, partition, q, body, says) in refused {
        let (code, e) = put(&base, token, partition, q, body).await;
        assert_eq!(code, StatusCode::FORBIDDEN, "{partition}?{q}: {e}");
        assert!(message(&e).contains(says), "{partition}?{q}: {e}");
    }
    let (code, a) = put(
        &base,
        &acme_any,
        "acme-ok",
        "weight=5&max_in_flight=10",
        one,
    )
    .await;
    assert_eq!(code, StatusCode::OK, "within its caps: {a}");
    let counts: Vec<(String, i64)> = db
        .rows("SELECT partition_id, COUNT(*) AS n FROM feed_items GROUP BY partition_id ORDER BY partition_id", &["partition_id", "n"])
        .await;
    let want = [("acme-ok", 1), ("acme/p1", 2), ("b1", 1), ("open", 1)];
    let want: Vec<(String, i64)> = want.iter().map(|(p, n)| (p.to_string(), *n)).collect();
    assert_eq!(counts, want, "refused requests wrote nothing");
    let partitions = db.count("SELECT COUNT(*) AS n FROM feed_partitions").await;
    assert_eq!(partitions, 4, "nor created a partition");

    // The admin token stays unscoped; the legacy token has the narrowest
    // scope: partitions of no tenant, no tenant, weight or cap of its own.
    let (code, a) = put(&base, ADMIN, "b1", "tenant=zeta&weight=1000", one).await;
    assert_eq!(code, StatusCode::OK, "{a}");
    for (partition, q, says) in [
        ("b1", "", "is not of no tenant"),
        ("open", "tenant=zeta", "processor tokens create --tenant T"),
        ("fresh", "tenant=zeta", "may not choose a tenant"),
        ("open", "weight=1000", "weight may be at most"),
        ("fresh", "max_in_flight=3", "max_in_flight may be at most"),
    ] {
        let (code, e) = put(&base, PRODUCER, partition, q, one).await;
        assert_eq!(code, StatusCode::FORBIDDEN, "{partition}?{q}: {e}");
        assert!(message(&e).contains(says), "{partition}?{q}: {e}");
    }
    assert_eq!(
        put(&base, PRODUCER, "open", "", one).await.0,
        StatusCode::OK,
        "the legacy token still adds to a partition of no tenant"
    );
    let fresh = db
        .count("SELECT COUNT(*) AS n FROM feed_partitions WHERE id = 'fresh'")
        .await;
    assert_eq!(fresh, 0, "a refused legacy request created a partition");

    // A capped token's partition is capped when the producer gives no cap.
    let (code, a) = put(&base, &acme_any, "acme-capped", "", one).await;
    assert_eq!(code, StatusCode::OK, "{a}");
    let cap: Vec<(Option<i32>,)> = db
        .rows(
            "SELECT max_in_flight FROM feed_partitions WHERE id = 'acme-capped'",
            &["max_in_flight"],
        )
        .await;
    assert_eq!(cap, [(Some(10),)], "the token's cap was not applied");

    // The library holds a scope the same way.
    let scope = ProducerScope::new("acme").unwrap();
    let items = vec![NewItem::new(b"1".to_vec())];
    let e = db
        .store
        .enqueue_as("b1", &PartitionSpec::default(), items, Some(&scope))
        .await
        .unwrap_err();
    assert!(matches!(e, feed::Error::Forbidden(_)), "{e}");

    // Revoked with the command line: it stops working at once.
    let id = scopes[0]["id"].as_str().unwrap();
    let o = processor(&["tokens", "revoke", "--database-url", &db.url, id], "");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (code, e) = put(&base, &acme, "acme%2Fp1", "", one).await;
    assert_eq!(code, StatusCode::UNAUTHORIZED, "{e}");
    let o = processor(&["tokens", "revoke", "--database-url", &db.url, id], "");
    assert!(!o.status.success(), "revoking it twice fails");
}

on_all_backends!(producer_tokens_over_the_admin_api);
async fn producer_tokens_over_the_admin_api(db: TestDb) {
    let client = reqwest::Client::new();
    // No token configured: enqueue is disabled until a producer token exists.
    let bare = serve(db.store.clone(), None, None).await;
    let (code, e) = put(
        &bare,
        "fpt_not-a-token-0123456789",
        "p",
        "",
        "{\"data\": 1}",
    )
    .await;
    assert_eq!(code, StatusCode::FORBIDDEN, "{e}");
    assert!(message(&e).contains("processor tokens create"), "{e}");

    let base = serve(db.store.clone(), Some(ADMIN), Some(PRODUCER)).await;
    let url = format!("{base}/api/v1/producer-tokens");
    let body = json!({"tenant": "acme", "prefix": "a-", "max_weight": 3});
    for token in [None, Some(PRODUCER)] {
        let mut req = client.post(&url).body(body.to_string());
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        assert_eq!(req.send().await.unwrap().status(), StatusCode::UNAUTHORIZED);
    }
    for bad in [
        json!({"tenant": "acme", "tennant": "x"}),
        json!({"tenant": "a\u{200B}"}),
        json!({}),
    ] {
        let r = client
            .post(&url)
            .bearer_auth(ADMIN)
            .body(bad.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{bad}");
    }
    let r = client
        .post(&url)
        .bearer_auth(ADMIN)
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let made: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    let (id, token) = (
        made["id"].as_str().unwrap(),
        made["token"].as_str().unwrap(),
    );
    assert_eq!(
        (made["tenant"].clone(), made["max_weight"].clone()),
        (json!("acme"), json!(3)),
        "{made}"
    );

    let r = client.get(&url).send().await.unwrap();
    assert_eq!(
        r.status(),
        StatusCode::UNAUTHORIZED,
        "listing needs the admin token"
    );
    let r = client.get(&url).bearer_auth(ADMIN).send().await.unwrap();
    let list: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    assert_eq!(list[0]["id"], json!(id), "{list}");
    assert!(
        list[0].get("token").is_none() && !list.to_string().contains(token),
        "{list}"
    );

    let (code, a) = put(&base, token, "a-1", "weight=3", "{\"data\": 1}").await;
    assert_eq!(code, StatusCode::OK, "{a}");
    assert_eq!(tenant_of(&db, "a-1").await.as_deref(), Some("acme"));

    let gone = format!("{url}/{id}");
    let r = client
        .delete(&gone)
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let (code, _) = put(&base, token, "a-1", "", "{\"data\": 1}").await;
    assert_eq!(code, StatusCode::UNAUTHORIZED, "revoked");
    let r = client
        .delete(&gone)
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
}
