//! A database fault is never an attempt: a database that takes no writes
//! for a while (as a demoted primary does) while the handler answers
//! costs no attempt, fails no item and delivers nothing twice; the
//! answers are kept and written once it takes writes again.

use std::sync::Arc;
use std::time::Duration;

use sea_orm::ConnectionTrait;
use tokio::sync::{Notify, Semaphore};

use crate::backend_tests;
use crate::support::{Scene, TestDb, done, numbered, wait_for};

/// Sets (or resets) `default_transaction_read_only` on the test's database
/// from the server's admin database, and ends the database's sessions so
/// that every connection opens again under the new setting: to the
/// processor it looks like a failover onto a node that takes no writes.
async fn read_only(db: &TestDb, on: bool) {
    let name = db
        .url
        .rsplit('/')
        .next()
        .unwrap()
        .split('?')
        .next()
        .unwrap();
    let admin = testkit::Servers::default()
        .admin(testkit::Backend::Postgres)
        .unwrap()
        .unwrap();
    let conn = sea_orm::Database::connect(admin).await.unwrap();
    let set = if on {
        format!("ALTER DATABASE {name} SET default_transaction_read_only = on")
    } else {
        format!("ALTER DATABASE {name} RESET default_transaction_read_only")
    };
    conn.execute_unprepared(&set).await.unwrap();
    conn.execute_unprepared(&format!(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"
    ))
    .await
    .unwrap();
    conn.close().await.unwrap();
}

backend_tests!(a_database_that_takes_no_writes_costs_no_attempt: postgres => Postgres);
/// The handler holds its first answer; meanwhile the database stops
/// taking writes and the processor's connections are cut. The answer is
/// kept (no attempt, no second call for it), dispatch holds off (no other
/// call), `status` says why, the log says it a bounded number of times;
/// once writes are taken again, every item completes after one call.
async fn a_database_that_takes_no_writes_costs_no_attempt(db: TestDb) {
    let ids = numbered("i", 20);
    db.partition_of("p", true, false, "block", &ids).await;
    let (arrived, release) = (Arc::new(Notify::new()), Arc::new(Semaphore::new(0)));
    let (a, r) = (arrived.clone(), release.clone());
    let args = [
        "--concurrency",
        "1",
        "--session-expiry",
        "20s",
        "--statement-timeout",
        "2s",
    ];
    let Scene(handler, proc) = Scene::start_async(&db, &args, move |call| {
        let (a, r) = (a.clone(), r.clone());
        async move {
            if call.item == "i0" {
                a.notify_one();
                r.acquire().await.unwrap().forget();
            }
            done()
        }
    })
    .await;
    arrived.notified().await;
    read_only(&db, true).await;
    release.add_permits(1);
    // The database takes no writes, so the processor cannot record why it
    // holds off there: /readyz says it.
    let ready = format!("http://{}/readyz", proc.listen.as_deref().unwrap());
    wait_for(
        "dispatch to hold off for the database",
        Duration::from_secs(20),
        || async {
            let body = reqwest::get(&ready).await.unwrap().text().await.unwrap();
            body.contains("the database does not take results: the database server takes no writes")
        },
    )
    .await;
    wait_for(
        "/readyz to name the missing primary",
        Duration::from_secs(20),
        || async {
            let body = reqwest::get(&ready).await.unwrap().text().await.unwrap();
            body.contains("\"primary\":false")
        },
    )
    .await;
    let calls = handler.calls().len();
    read_only(&db, false).await;
    db.wait_complete(20).await;
    // The calls started before the first write failed (at most the
    // in-flight room of one slot), then none while answers wait.
    assert!(
        calls <= 5,
        "{calls} calls while answers could not be stored"
    );
    for id in &ids {
        let row = db.item_row(id).await;
        assert_eq!((row.status.as_str(), row.attempts), ("complete", 1), "{id}");
        assert_eq!(handler.calls_for(id).len(), 1, "{id} delivered once");
    }
    let log = proc.log();
    let lines = log.matches("the database does not take results").count();
    assert!((1..=3).contains(&lines), "{lines} lines about it");
    assert!(
        log.contains("the database takes results again"),
        "recovery is said"
    );
}
