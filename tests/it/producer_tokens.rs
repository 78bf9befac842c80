//! Producer tokens with a scope: created, listed and revoked with the
//! command line and the admin API, stored only as a hash, and held to
//! their tenant, prefix and caps; the legacy `--producer-token` has the
//! narrowest scope (partitions of no tenant). A prefix is its tenant's
//! alone (no other tenant's token may share it or write into it), and a
//! revoke that has answered is final (an enqueue under way writes nothing).

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

/// The id of the producer token `token`.
async fn id_of(db: &TestDb, token: &str) -> String {
    db.store.producer_scope(token).await.unwrap().unwrap().id
}

/// `POST /api/v1/producer-tokens` with the admin token.
async fn create_over_api(base: &str, body: Value) -> (StatusCode, Value) {
    send(
        base,
        "/api/v1/producer-tokens",
        Some(ADMIN),
        None,
        body.to_string(),
    )
    .await
}

on_all_backends!(overlapping_prefixes_of_two_tenants_are_refused);
async fn overlapping_prefixes_of_two_tenants_are_refused(db: TestDb) {
    let acme = create(&db, &["--tenant", "acme", "--prefix", "a-"]);
    let acme_id = id_of(&db, &acme).await;

    // With the command line: exit 1, naming the token in the way and what to do.
    for prefix in ["a-x", "a", "a-"] {
        let args = [
            "tokens",
            "create",
            "--database-url",
            &db.url,
            "--tenant",
            "beta",
            "--prefix",
            prefix,
        ];
        let o = processor(&args, "");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{prefix}: {err}");
        assert!(o.stdout.is_empty(), "{prefix}: no token is printed");
        for says in [
            "overlaps the prefix \"a-\"",
            &format!("producer token {acme_id} of tenant \"acme\""),
            &format!("processor tokens revoke {acme_id}"),
        ] {
            assert!(err.contains(says), "{prefix}: {err}");
        }
    }

    // Over the API: 409, the same message.
    let base = serve(db.store.clone(), Some(ADMIN), None).await;
    let (code, e) = create_over_api(&base, json!({"tenant": "beta", "prefix": "a-b"})).await;
    assert_eq!(code, StatusCode::CONFLICT, "{e}");
    assert!(message(&e).contains(&acme_id), "{e}");

    // The same tenant may overlap its own prefixes; prefixes apart pass.
    let (code, a) = create_over_api(&base, json!({"tenant": "acme", "prefix": "a-x"})).await;
    assert_eq!(code, StatusCode::OK, "{a}");
    for prefix in ["b-", "ab", "A-"] {
        let (code, a) = create_over_api(&base, json!({"tenant": "beta", "prefix": prefix})).await;
        assert_eq!(code, StatusCode::OK, "{prefix}: {a}");
    }
    let beta_any = create(&db, &["--tenant", "beta"]);
    assert!(
        beta_any.starts_with("fpt_"),
        "a token without a prefix overlaps nothing"
    );
    let mut got: Vec<(String, Option<String>)> = db
        .rows(
            "SELECT tenant, prefix FROM feed_producer_tokens",
            &["tenant", "prefix"],
        )
        .await;
    got.sort();
    let want: Vec<(String, Option<String>)> = [
        ("acme", Some("a-")),
        ("acme", Some("a-x")),
        ("beta", None),
        ("beta", Some("A-")),
        ("beta", Some("ab")),
        ("beta", Some("b-")),
    ]
    .into_iter()
    .map(|(t, p)| (t.to_string(), p.map(str::to_string)))
    .collect();
    assert_eq!(got, want, "refused tokens were not stored");
}

on_all_backends!(tokens_keep_out_of_another_tenants_prefix);
async fn tokens_keep_out_of_another_tenants_prefix(db: TestDb) {
    let acme = create(&db, &["--tenant", "acme", "--prefix", "a-"]);
    let acme_id = id_of(&db, &acme).await;
    let beta = create(&db, &["--tenant", "beta"]);
    let base = serve(db.store.clone(), Some(ADMIN), Some(PRODUCER)).await;
    let one = "{\"data\": 1}";

    // Neither a partition nor a given item id in acme's prefix: 403, naming
    // acme's token and what to do; nothing written.
    let refused = [
        (&beta, "a-squat", one, "partition id \"a-squat\""),
        (
            &beta,
            "b1",
            "{\"id\": \"a-future-1\", \"data\": 1}",
            "item id \"a-future-1\"",
        ),
        (&PRODUCER.to_string(), "a-legacy", one, "partition id"),
    ];
    for (token, partition, body, says) in refused {
        let (code, e) = put(&base, token, partition, "", body).await;
        assert_eq!(code, StatusCode::FORBIDDEN, "{partition} {body}: {e}");
        let m = message(&e);
        assert!(m.contains(says), "{partition} {body}: {e}");
        assert!(
            m.contains(&format!(
                "starts with \"a-\", the prefix of producer token {acme_id}"
            )),
            "{e}"
        );
    }
    let written = db.count("SELECT COUNT(*) AS n FROM feed_partitions").await;
    assert_eq!(written, 0, "a refused request created a partition");

    // Outside it, beta's tokens work (generated ids included), and acme's
    // ids are acme's.
    let (code, a) = put(
        &base,
        &beta,
        "b1",
        "",
        "{\"id\": \"b-1\", \"data\": 1}\n{\"data\": 2}",
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{a}");
    let (code, a) = put(
        &base,
        &acme,
        "a-squat",
        "",
        "{\"id\": \"a-future-1\", \"data\": 1}",
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{a}");
    assert_eq!(tenant_of(&db, "a-squat").await.as_deref(), Some("acme"));
    // The admin token is not scoped.
    let (code, a) = put(&base, ADMIN, "a-admin", "", one).await;
    assert_eq!(code, StatusCode::OK, "{a}");

    // Revoked, acme's prefix is free again.
    assert!(db.store.revoke_producer_token(&acme_id).await.unwrap());
    let (code, a) = put(&base, &beta, "a-now", "", one).await;
    assert_eq!(code, StatusCode::OK, "{a}");
}

on_all_backends!(a_revoked_tokens_admitted_enqueue_writes_nothing);
async fn a_revoked_tokens_admitted_enqueue_writes_nothing(db: TestDb) {
    let token = create(&db, &["--tenant", "acme", "--prefix", "a-"]);
    // What the API reads when it lets a request in.
    let scope = db.store.producer_scope(&token).await.unwrap().unwrap();
    let items = |id: &str| vec![NewItem::new(b"1".to_vec()).with_id(id)];
    let spec = PartitionSpec::default();
    let r = db
        .store
        .enqueue_as("a-1", &spec, items("a-i1"), Some(&scope))
        .await
        .unwrap();
    assert_eq!(r.items, 1);

    // Revoked after the scope was read: the enqueue writes nothing.
    let o = processor(
        &["tokens", "revoke", "--database-url", &db.url, &scope.id],
        "",
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for partition in ["a-1", "a-2"] {
        let e = db
            .store
            .enqueue_as(partition, &spec, items("a-i2"), Some(&scope))
            .await
            .unwrap_err();
        assert!(matches!(e, feed::Error::Unauthorized(_)), "{e}");
        let says = format!("producer token {} was revoked", scope.id);
        assert!(e.to_string().contains(&says), "{e}");
    }
    let items = db.count("SELECT COUNT(*) AS n FROM feed_items").await;
    let partitions = db.count("SELECT COUNT(*) AS n FROM feed_partitions").await;
    assert_eq!((items, partitions), (1, 1), "nothing was written");
}

// SQLite has one writer: a revoke cannot commit while an enqueue's
// transaction is open, so there is nothing to hold up there.
crate::backend_tests!(a_revoke_during_an_admitted_request: postgres => Postgres, mariadb => Mysql);
async fn a_revoke_during_an_admitted_request(db: TestDb) {
    use sea_orm::{ConnectionTrait, Statement, TransactionTrait};

    let base = serve(db.store.clone(), Some(ADMIN), None).await;
    let (code, made) = create_over_api(&base, json!({"tenant": "acme", "prefix": "a-"})).await;
    assert_eq!(code, StatusCode::OK, "{made}");
    let (id, token) = (
        made["id"].as_str().unwrap().to_string(),
        made["token"].as_str().unwrap().to_string(),
    );
    let (code, a) = put(&base, &token, "a-p", "", "{\"id\": \"a-1\", \"data\": 1}").await;
    assert_eq!(code, StatusCode::OK, "{a}");

    // Another transaction holds the partition: the next request is let in
    // and waits in its own transaction, before its writes.
    let backend = db.store.backend();
    let blocker = db.store.connection().begin().await.unwrap();
    let lock = "SELECT id FROM feed_partitions WHERE id = 'a-p' FOR UPDATE";
    blocker
        .query_all_raw(Statement::from_string(backend, lock))
        .await
        .unwrap();
    let request = {
        let (base, token) = (base.clone(), token.clone());
        tokio::spawn(async move {
            put(&base, &token, "a-p", "", "{\"id\": \"a-2\", \"data\": 2}").await
        })
    };
    let waiting = match db.backend {
        crate::support::Backend::Postgres => {
            "SELECT COUNT(*) AS n FROM pg_stat_activity \
             WHERE datname = current_database() AND wait_event_type = 'Lock'"
        }
        // A statement on the partitions still running: it waits for the
        // row (`INNODB_TRX` is a cache, refreshed only when not read for
        // 100 ms, so it is no use to poll).
        _ => {
            "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST \
             WHERE DB = DATABASE() AND ID <> CONNECTION_ID() \
             AND INFO LIKE '% feed_partitions %'"
        }
    };
    crate::support::wait_for(
        "the request to wait for the partition's lock",
        std::time::Duration::from_secs(30),
        || async { db.count(waiting).await > 0 },
    )
    .await;

    // The revoke answers meanwhile; the request then writes nothing.
    let r = reqwest::Client::new()
        .delete(format!("{base}/api/v1/producer-tokens/{id}"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    blocker.rollback().await.unwrap();
    let (code, e) = request.await.unwrap();
    assert_eq!(code, StatusCode::UNAUTHORIZED, "{e}");
    let says = format!("producer token {id} was revoked; nothing was written");
    assert_eq!(message(&e), says, "{e}");
    let ids: Vec<(String,)> = db.rows("SELECT id FROM feed_items", &["id"]).await;
    assert_eq!(
        ids,
        [("a-1".to_string(),)],
        "the admitted request wrote nothing"
    );
}

on_all_backends!(two_overlapping_creations_at_once_give_one_token);
async fn two_overlapping_creations_at_once_give_one_token(db: TestDb) {
    // Each round starts both transactions together: whichever order the
    // database puts them in, the second sees the first's token.
    for round in 0..20 {
        let mut a = ProducerScope::new("acme").unwrap();
        a.prefix = Some(format!("r{round}-"));
        let mut b = ProducerScope::new("beta").unwrap();
        b.prefix = Some(format!("r{round}-x"));
        let (ra, rb) = tokio::join!(
            db.store.create_producer_token(&a),
            db.store.create_producer_token(&b)
        );
        let refused = match (ra, rb) {
            (Ok(_), Err(e)) | (Err(e), Ok(_)) => e,
            (ra, rb) => panic!("round {round}: {:?} {:?}", ra.map(|r| r.0), rb.map(|r| r.0)),
        };
        assert!(matches!(refused, feed::Error::Conflict(_)), "{refused}");
    }
    let tokens = db.store.producer_tokens().await.unwrap();
    assert_eq!(tokens.len(), 20, "one token a round");
}
