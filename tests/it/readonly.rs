//! Commands that only read (or change rows, never tables) check the schema
//! instead of migrating: on a database without Feed's schema they create
//! nothing and say to run `processor migrate`; a schema with a migration
//! pending is said as such; a migrated database reads as before.

use crate::cli::{processor, text};
use crate::on_all_backends;
use crate::support::{Backend, EmptyDb, TestDb};

/// The commands that must not change the schema, with their arguments.
const READERS: [&[&str]; 8] = [
    &["status"],
    &["status", "--json"],
    &["wait", "--partition", "p", "--timeout", "1s"],
    &["export", "--partition", "p"],
    &["events", "list"],
    &["retry", "--all"],
    &["tokens", "list"],
    &["limits", "list"],
];

/// Feed's tables (and PostgreSQL functions) in the database.
async fn feed_objects(db: &TestDb) -> Vec<String> {
    let sql = match db.backend {
        Backend::Sqlite => "SELECT name FROM sqlite_master WHERE name LIKE 'feed%'",
        Backend::Postgres | Backend::Citus => {
            "SELECT table_name::text AS name FROM information_schema.tables \
             WHERE table_schema = current_schema() AND table_name LIKE 'feed%' \
             UNION ALL SELECT proname::text FROM pg_proc WHERE proname LIKE 'feed%'"
        }
        Backend::Mysql => {
            "SELECT CAST(table_name AS CHAR) AS name FROM information_schema.tables \
             WHERE table_schema = DATABASE() AND table_name LIKE 'feed%'"
        }
    };
    db.rows::<(String,)>(sql, &["name"])
        .await
        .into_iter()
        .map(|(n,)| n)
        .collect()
}

/// Runs each reader on `url`; each must exit non-zero saying `message`.
fn readers_refuse(url: &str, message: &str) {
    for args in READERS {
        let mut all = args.to_vec();
        all.extend(["--database-url", url]);
        let o = processor(&all, "");
        let t = text(&o);
        assert!(!o.status.success(), "{args:?} succeeded: {t}");
        assert!(t.contains(message), "{args:?} did not say {message:?}: {t}");
    }
}

on_all_backends!(read_commands_never_write_the_schema);
async fn read_commands_never_write_the_schema(EmptyDb(db): EmptyDb) {
    readers_refuse(
        &db.url,
        "no Feed schema in this database (run processor migrate)",
    );
    assert_eq!(feed_objects(&db).await, Vec::<String>::new());

    // One migration behind: said with the count, and still not applied.
    db.store.migrate().await.unwrap();
    let last: Vec<(String,)> = db
        .rows("SELECT MAX(version) AS v FROM feed_migrations", &["v"])
        .await;
    db.exec(
        "DELETE FROM feed_migrations WHERE version = ?",
        vec![last[0].0.clone().into()],
    )
    .await;
    readers_refuse(
        &db.url,
        "the schema is 1 migration behind (run processor migrate)",
    );
    let n = db.count("SELECT COUNT(*) AS n FROM feed_migrations").await;
    assert_eq!(n as usize, migration_count() - 1, "no reader migrated");

    // `migrate` applies it, and the readers read.
    let o = processor(&["migrate", "--database-url", &db.url], "");
    assert!(o.status.success(), "{}", text(&o));
    let o = processor(&["status", "--database-url", &db.url], "");
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("partitions  none"), "{}", text(&o));
}

/// The migrations this Feed has.
fn migration_count() -> usize {
    use migration::MigratorTrait;
    migration::Migrator::migrations().len()
}

#[test]
/// An SQLite URL with `mode=rwc` names a file to create, but a reader
/// creates none.
fn a_reader_creates_no_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("nothing.db");
    let url = format!("sqlite://{}?mode=rwc", file.display());
    readers_refuse(&url, "no database here");
    assert!(!file.exists(), "no empty database left behind");
}
