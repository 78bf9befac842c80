//! A database fault is never an attempt: a database that takes no writes
//! for a while (as a demoted primary does) while the handler answers
//! costs no attempt, fails no item and delivers nothing twice; the
//! answers are kept and written once it takes writes again.

use std::sync::Arc;
use std::time::Duration;

use sea_orm::ConnectionTrait;
use tokio::sync::{Notify, Semaphore};

use crate::backend_tests;
use crate::support::{Spawned, TestDb, done, numbered, wait_for};

/// The test database's name.
fn name(db: &TestDb) -> String {
    let tail = db.url.rsplit('/').next().unwrap();
    tail.split('?').next().unwrap().to_string()
}

/// Runs `sqls` on the server's admin database.
async fn admin(db: &TestDb, sqls: &[String]) {
    let url = testkit::Servers::default()
        .admin(db.backend)
        .unwrap()
        .unwrap();
    let conn = sea_orm::Database::connect(url).await.unwrap();
    for sql in sqls {
        conn.execute_unprepared(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    conn.close().await.unwrap();
}

/// The URL the processor uses. On MariaDB the server's `read_only` binds
/// only users without READ ONLY ADMIN, so it logs in as such a user.
async fn writer_url(db: &TestDb) -> String {
    if db.backend != testkit::Backend::Mysql {
        return db.url.clone();
    }
    let (n, user) = (name(db), format!("ro_{}", &name(db)[7..19]));
    admin(
        db,
        &[
            format!("CREATE USER '{user}'@'%' IDENTIFIED BY 'pw'"),
            format!("GRANT ALL ON {n}.* TO '{user}'@'%'"),
        ],
    )
    .await;
    db.url.replacen("root@", &format!("{user}:pw@"), 1)
}

/// Makes the database take no writes (or take them again), as a failover
/// onto a demoted primary or a replica looks to the processor. PostgreSQL:
/// `default_transaction_read_only` on the database, and its sessions
/// ended so that every connection opens again under it. MariaDB: the
/// server's `read_only` (root, which the suite's other tests use, is not
/// bound by it).
async fn read_only(db: &TestDb, on: bool) {
    let n = name(db);
    let sqls = match (db.backend, on) {
        (testkit::Backend::Mysql, _) => vec![format!("SET GLOBAL read_only = {}", on as u8)],
        (_, true) => vec![
            format!("ALTER DATABASE {n} SET default_transaction_read_only = on"),
            format!("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{n}'"),
        ],
        (_, false) => vec![
            format!("ALTER DATABASE {n} RESET default_transaction_read_only"),
            format!("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{n}'"),
        ],
    };
    admin(db, &sqls).await;
}

backend_tests!(a_database_that_takes_no_writes_costs_no_attempt: postgres => Postgres, mariadb => Mysql);
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
    let writer = TestDb::alias(&db, &writer_url(&db).await);
    let Spawned(handler, proc) = Spawned::start_async(&writer, &args, move |call| {
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
    if db.backend == testkit::Backend::Mysql {
        let user = format!("ro_{}", &name(&db)[7..19]);
        admin(&db, &[format!("DROP USER '{user}'@'%'")]).await;
    }
}

#[tokio::test]
/// On a server that takes no writes (a standby), commands that only read
/// work once the schema is migrated, and a command that writes says the
/// server takes no writes.
async fn commands_that_read_work_on_a_standby() {
    let Some(db) = TestDb::new(testkit::Backend::Postgres).await else {
        return;
    };
    db.partition_of("p", true, false, "block", &numbered("i", 3))
        .await;
    read_only(&db, true).await;
    let o = crate::cli::processor(&["status", "--json", "--database-url", &db.url], "");
    assert!(o.status.success(), "{}", crate::cli::text(&o));
    let status: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        status["partitions"][0]["items_by_status"]["available"], 3,
        "{status}"
    );
    let o = crate::cli::processor(
        &["export", "--database-url", &db.url, "--partition", "p"],
        "",
    );
    assert!(o.status.success(), "{}", crate::cli::text(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 3);
    let o = crate::cli::processor(
        &["enqueue", "--database-url", &db.url, "--partition", "q"],
        "{\"data\": 1}\n",
    );
    assert!(!o.status.success());
    assert!(
        crate::cli::text(&o).contains("takes no writes"),
        "{}",
        crate::cli::text(&o)
    );
    read_only(&db, false).await;
}
