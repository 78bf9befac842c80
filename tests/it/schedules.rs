//! Recurring partitions: a schedule creates one partition per tick,
//! `<name>-<tick>`, with its items, whichever processors run; processors
//! racing on a tick create it once; ticks missed while none ran follow the
//! backfill; the CLI, the API and the console set, list and remove them.

use std::time::Duration;

use chrono::DateTime;
use feed::recurring::{self, Recurring};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::cli::processor;
use crate::console_api::TOKEN;
use testkit::Scene;

use crate::support::{Handler, Proc, TestDb, done, wait_for};
use crate::{behaviour, on_all_backends, slow};

/// The partitions of schedule `name`, by id (so by tick).
async fn ticks(db: &TestDb, name: &str) -> Vec<String> {
    let rows: Vec<(String,)> = db
        .rows(
            &format!("SELECT id FROM feed_partitions WHERE id LIKE '{name}-%' ORDER BY id"),
            &["id"],
        )
        .await;
    rows.into_iter().map(|(id,)| id).collect()
}

/// The tick time of a schedule's partition id, epoch ms.
fn tick_of(name: &str, id: &str) -> i64 {
    let at = id.strip_prefix(&format!("{name}-")).unwrap();
    DateTime::parse_from_rfc3339(at).unwrap().timestamp_millis()
}

/// `processor schedules set NAME --cron CRON` with the items `lines`.
fn set_cli(db: &TestDb, name: &str, cron: &str, lines: &str) -> std::process::Output {
    processor(
        &[
            "schedules",
            "set",
            name,
            "--database-url",
            &db.url,
            "--cron",
            cron,
        ],
        lines,
    )
}

/// Checks that the partitions of `name` are consecutive ticks `every` ms
/// apart, each holding the one template item; answers how many.
async fn consecutive(db: &TestDb, name: &str, every: i64) -> usize {
    let ids = ticks(db, name).await;
    for pair in ids.windows(2) {
        assert_eq!(
            tick_of(name, &pair[1]) - tick_of(name, &pair[0]),
            every,
            "{ids:?}"
        );
    }
    for id in &ids {
        let items = db
            .count(&format!(
                "SELECT COUNT(*) AS n FROM feed_items WHERE partition_id = '{id}' AND id = '{id}/a'"
            ))
            .await;
        assert_eq!(items, 1, "{id}");
    }
    ids.len()
}

/// Schedule `name` set by the CLI to tick every two seconds with the item
/// `a`; a handler that completes every item.
async fn every_two_seconds(db: &TestDb, name: &str) -> Handler {
    let out = set_cli(db, name, "*/2 * * * * *", "{\"id\": \"a\", \"data\": 1}\n");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Handler::start(|_| done()).await
}

behaviour!(a_schedule_creates_a_partition_per_tick);
/// An hourly schedule, Feed in process, the database clock moved an hour
/// at a time: a partition per hour with the template's item, which runs
/// once. (Sessions outlive the jumps: this is not about their expiry.)
async fn a_schedule_creates_a_partition_per_tick(db: TestDb) {
    let scene = Scene::new(&db.url, |_| done()).await;
    let store = db.store.with_clock(scene.clock);
    let hourly = Recurring::new("hourly", "0 * * * *", "{\"id\": \"a\", \"data\": 1}\n");
    recurring::set(&store, &hourly).await.unwrap();
    let mut config = scene.config();
    config.leases.session_expiry = Duration::from_secs(4 * 3600);
    let _node = scene.node_with(config);
    for hour in 1..=3 {
        scene.clock.advance(Duration::from_secs(3600));
        wait_for("the hour's partition", Duration::from_secs(30), || async {
            ticks(&db, "hourly").await.len() == hour
        })
        .await;
    }
    assert_eq!(consecutive(&db, "hourly", 3_600_000).await, 3);
    let first = ticks(&db, "hourly").await.remove(0);
    db.wait_partition(&first, "complete").await;
    assert_eq!(scene.handler.calls_for(&format!("{first}/a")).len(), 1);
    let listed = db.store.schedules().await.unwrap();
    assert!(
        listed[0]
            .last_partition
            .as_deref()
            .is_some_and(|p| p.starts_with("hourly-"))
    );
}

slow!(two_processors_create_each_tick_once);
/// Two processors for ten ticks (20 s): one partition per tick, none
/// missing.
async fn two_processors_create_each_tick_once(db: TestDb) {
    let h = every_two_seconds(&db, "pair").await;
    let _a = Proc::start(&db, &h.url(), &[]);
    let _b = Proc::start(&db, &h.url(), &[]);
    wait_for("ten ticks", Duration::from_secs(90), || async {
        ticks(&db, "pair").await.len() >= 10
    })
    .await;
    assert!(consecutive(&db, "pair", 2_000).await >= 10);
}

/// Schedule `name` set through the library with `cron` and `backfill`,
/// its next tick moved `back` ticks of `every` ms into the past.
async fn late(db: &TestDb, name: &str, cron: &str, every: i64, back: i64, backfill: u32) -> i64 {
    let mut r = Recurring::new(name, cron, "{\"id\": \"a\", \"data\": 1}\n");
    r.backfill = backfill;
    let row = recurring::set(&db.store, &r).await.unwrap();
    let past = row.next_tick - back * every;
    db.exec(
        &format!("UPDATE feed_schedules SET next_tick = {past} WHERE name = '{name}'"),
        vec![],
    )
    .await;
    row.next_tick
}

on_all_backends!(processors_racing_on_a_tick_create_it_once);
/// Two processors read the same due tick before either writes: one
/// partition, one item, and the schedule moved on once.
async fn processors_racing_on_a_tick_create_it_once(db: TestDb) {
    let next = late(&db, "race", "0 * * * * *", 60_000, 1, 1).await;
    let (now_a, rows_a) = db.store.due_schedules().await.unwrap();
    let (now_b, rows_b) = db.store.due_schedules().await.unwrap();
    let (now_a, now_b) = (now_a.unwrap(), now_b.unwrap());
    recurring::create_due(&db.store, &rows_a[0], now_a)
        .await
        .unwrap();
    recurring::create_due(&db.store, &rows_b[0], now_b)
        .await
        .unwrap();
    assert_eq!(ticks(&db, "race").await.len(), 1);
    assert_eq!(consecutive(&db, "race", 60_000).await, 1);
    let row = &db.store.schedules().await.unwrap()[0];
    assert_eq!(row.next_tick, next);
    assert_eq!(
        row.last_partition.as_deref(),
        Some(recurring::partition_id("race", next - 60_000).as_str())
    );
}

on_all_backends!(missed_ticks_follow_the_backfill);
/// Five minutes without a processor: the latest tick once by default,
/// the three latest with backfill 3.
async fn missed_ticks_follow_the_backfill(db: TestDb) {
    let next = late(&db, "once", "0 * * * * *", 60_000, 5, 1).await;
    late(&db, "three", "0 * * * * *", 60_000, 5, 3).await;
    recurring::tick(&db.store).await.unwrap();
    let once = ticks(&db, "once").await;
    assert_eq!(once, [recurring::partition_id("once", next - 60_000)]);
    let three = ticks(&db, "three").await;
    assert_eq!(three.len(), 3, "{three:?}");
    assert_eq!(tick_of("three", &three[0]), next - 180_000);
    // Moved on: another look creates nothing more.
    recurring::tick(&db.store).await.unwrap();
    assert_eq!(
        ticks(&db, "once").await.len() + ticks(&db, "three").await.len(),
        4
    );
}

/// A request's status and JSON answer.
async fn send(req: reqwest::RequestBuilder) -> (StatusCode, Value) {
    let r = req.send().await.unwrap();
    let code = r.status();
    let text = r.text().await.unwrap();
    (code, serde_json::from_str(&text).unwrap_or(Value::Null))
}

behaviour!(schedules_through_the_cli_the_api_and_the_console);
/// Bad expressions and time zones are refused and write nothing; set,
/// list and remove by the CLI and the API (its writes need the admin
/// token); the console lists them.
async fn schedules_through_the_cli_the_api_and_the_console(db: TestDb) {
    for (cron, tz, says) in [
        ("every night", "UTC", "write 5 fields"),
        ("0 2 * * *", "Mars/Olympus", "IANA time zone"),
    ] {
        let out = processor(
            &[
                "schedules",
                "set",
                "bad",
                "--database-url",
                &db.url,
                "--cron",
                cron,
                "--timezone",
                tz,
            ],
            "",
        );
        assert!(!out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(says),
            "{cron} {tz}"
        );
    }
    assert!(
        db.store.schedules().await.unwrap().is_empty(),
        "nothing written"
    );
    assert!(
        set_cli(&db, "nightly", "0 2 * * *", "{\"data\": 1}\n")
            .status
            .success()
    );
    let listed = processor(
        &["schedules", "list", "--json", "--database-url", &db.url],
        "",
    );
    let line: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(
        (&line["name"], &line["cron"]),
        (&json!("nightly"), &json!("0 2 * * *"))
    );

    let base = crate::console_api::serve(db.store.clone(), Some(TOKEN)).await;
    let c = reqwest::Client::new();
    let (code, list) = send(c.get(format!("{base}/api/v1/schedules"))).await;
    assert_eq!(
        (code, list[0]["name"].clone()),
        (StatusCode::OK, json!("nightly"))
    );
    let body = json!({"cron": "*/5 * * * *", "timezone": "Europe/Paris",
                      "partition": {"tenant": "acme", "priority": 5}, "items": [{"data": 2}]});
    let put = |auth: bool, body: &Value| {
        let r = c
            .put(format!("{base}/api/v1/schedules/hourly"))
            .body(body.to_string());
        if auth { r.bearer_auth(TOKEN) } else { r }
    };
    assert_eq!(send(put(false, &body)).await.0, StatusCode::UNAUTHORIZED);
    let (code, made) = send(put(true, &body)).await;
    assert_eq!(code, StatusCode::OK, "{made}");
    assert_eq!(made["partition"]["tenant"], "acme");
    assert_eq!(made["timezone"], "Europe/Paris");
    let bad = json!({"cron": "61 * * * *", "items": []});
    let (code, e) = send(put(true, &bad)).await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{e}");

    let page = crate::support::page(&format!("{base}/schedules")).await;
    assert!(
        page.contains("hourly") && page.contains("nightly"),
        "{page}"
    );

    let delete = |auth: bool| {
        let r = c.delete(format!("{base}/api/v1/schedules/hourly"));
        if auth { r.bearer_auth(TOKEN) } else { r }
    };
    assert_eq!(send(delete(false)).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(send(delete(true)).await.0, StatusCode::OK);
    assert_eq!(send(delete(true)).await.0, StatusCode::NOT_FOUND);
    let removed = processor(
        &["schedules", "remove", "nightly", "--database-url", &db.url],
        "",
    );
    assert!(removed.status.success());
    let again = processor(
        &["schedules", "remove", "nightly", "--database-url", &db.url],
        "",
    );
    assert!(!again.status.success());
    assert!(db.store.schedules().await.unwrap().is_empty());
}
