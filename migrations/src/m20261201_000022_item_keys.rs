//! `feed_items`' primary key becomes `(partition_id, id)`: item ids are
//! unique within their partition, and two partitions may each have an
//! item `a`. A distributed database (Citus) spreads items over machines
//! by partition and can only enforce a key that includes it; the meaning
//! is the same on every backend.
//!
//! PostgreSQL and MySQL/MariaDB swap the key in one `ALTER TABLE`. SQLite
//! cannot change a table's key: the table is built again under the new
//! key with every row (rowids kept: they are the write order), its
//! indexes and the trigger that reads it, in one transaction. A table
//! whose key is already the new one is left alone, so a second run does
//! nothing. `down` brings the key on `id` back, refused by the database
//! while two partitions share an item id.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend, Statement, TransactionTrait};

#[derive(DeriveMigrationName)]
pub(crate) struct Migration;

/// The key's columns, before and after.
const OLD: &str = "id";
const NEW: &str = "partition_id, id";

/// How many columns `feed_items`' primary key has.
async fn key_columns(manager: &SchemaManager<'_>) -> Result<i64, DbErr> {
    let backend = manager.get_database_backend();
    let sql = match backend {
        DbBackend::Postgres => {
            "SELECT COALESCE(MAX(array_length(conkey, 1)), 0)::BIGINT AS n FROM pg_constraint \
             WHERE conrelid = 'feed_items'::regclass AND contype = 'p'"
        }
        DbBackend::MySql => {
            "SELECT COUNT(*) AS n FROM information_schema.KEY_COLUMN_USAGE \
             WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'feed_items' AND CONSTRAINT_NAME = 'PRIMARY'"
        }
        _ => "SELECT COUNT(*) AS n FROM pragma_table_info('feed_items') WHERE pk > 0",
    };
    let row = manager
        .get_connection()
        .query_one_raw(Statement::from_string(backend, sql))
        .await?
        .ok_or_else(|| DbErr::Custom("feed_items has no key to read".into()))?;
    row.try_get("", "n")
}

/// Makes `columns` the key of `feed_items`, unless it has `want` columns.
async fn key(manager: &SchemaManager<'_>, columns: &str, want: i64) -> Result<(), DbErr> {
    if key_columns(manager).await? == want {
        return Ok(());
    }
    let db = manager.get_connection();
    match manager.get_database_backend() {
        DbBackend::Postgres => {
            let row = db
                .query_one_raw(Statement::from_string(
                    DbBackend::Postgres,
                    "SELECT conname::TEXT AS n FROM pg_constraint \
                     WHERE conrelid = 'feed_items'::regclass AND contype = 'p'",
                ))
                .await?
                .ok_or_else(|| DbErr::Custom("feed_items has no primary key".into()))?;
            let name: String = row.try_get("", "n")?;
            db.execute_unprepared(&format!(
                "ALTER TABLE feed_items DROP CONSTRAINT \"{name}\", ADD PRIMARY KEY ({columns})"
            ))
            .await?;
        }
        DbBackend::MySql => {
            db.execute_unprepared(&format!(
                "ALTER TABLE feed_items DROP PRIMARY KEY, ADD PRIMARY KEY ({columns})"
            ))
            .await?;
        }
        _ => {
            // One transaction, on one connection: a pool would spread the
            // steps over several.
            let txn = db.begin().await?;
            rebuild(&txn, columns).await?;
            txn.commit().await?;
        }
    }
    Ok(())
}

/// SQLite: `feed_items` built again with the key `columns`: its own
/// `CREATE TABLE` with the key changed, every row copied with its rowid,
/// then its indexes and the triggers that name it, as they were.
async fn rebuild(db: &impl ConnectionTrait, columns: &str) -> Result<(), DbErr> {
    let schema = |sql: &str| Statement::from_string(DbBackend::Sqlite, sql.to_string());
    let text = |r: &sea_orm_migration::sea_orm::QueryResult| r.try_get::<String>("", "sql");
    let table = db
        .query_one_raw(schema(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'feed_items'",
        ))
        .await?
        .ok_or_else(|| DbErr::Custom("feed_items is not there".into()))?;
    let table = text(&table)?;
    // The definition without a key, then with the one asked for.
    let (keyed, plain) = (
        "id VARCHAR(255) NOT NULL PRIMARY KEY,",
        "id VARCHAR(255) NOT NULL,",
    );
    let bare = table.replacen(keyed, plain, 1);
    let bare = match bare.rfind(", PRIMARY KEY (") {
        Some(at) => format!("{})", &bare[..at]),
        None => bare,
    };
    let create = match (columns, bare.rfind(')')) {
        _ if !bare.contains(plain) => {
            return Err(DbErr::Custom(format!(
                "feed_items' definition is not one this migration knows: {table}"
            )));
        }
        (OLD, _) => bare.replacen(plain, keyed, 1),
        (_, Some(end)) => format!("{}, PRIMARY KEY ({columns}))", &bare[..end]),
        (_, None) => return Err(DbErr::Custom("feed_items' definition has no end".into())),
    };
    // The name as written may be quoted (a renamed table's is).
    let columns_at = create.find('(').unwrap_or(0);
    let create = format!("CREATE TABLE feed_items_keyed {}", &create[columns_at..]);
    // Indexes and triggers go with the table, and a trigger that reads it
    // would stop the rename: both are made again from their own text.
    let others: Vec<(String, String, String)> = db
        .query_all_raw(schema(
            "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL \
             AND ((type = 'index' AND tbl_name = 'feed_items') \
             OR (type = 'trigger' AND sql LIKE '%feed_items%'))",
        ))
        .await?
        .iter()
        .map(|r| Ok((r.try_get("", "type")?, r.try_get("", "name")?, text(r)?)))
        .collect::<Result<_, DbErr>>()?;
    for (kind, name, _) in others.iter().filter(|(k, ..)| k == "trigger") {
        db.execute_unprepared(&format!("DROP {kind} IF EXISTS \"{name}\""))
            .await?;
    }
    let names: Vec<String> = db
        .query_all_raw(schema("SELECT name FROM pragma_table_info('feed_items')"))
        .await?
        .iter()
        .map(|r| r.try_get("", "name"))
        .collect::<Result<_, DbErr>>()?;
    let names = names.join(", ");
    db.execute_unprepared("DROP TABLE IF EXISTS feed_items_keyed")
        .await?;
    db.execute_unprepared(&create).await?;
    db.execute_unprepared(&format!(
        "INSERT INTO feed_items_keyed (rowid, {names}) SELECT rowid, {names} FROM feed_items"
    ))
    .await?;
    db.execute_unprepared("DROP TABLE feed_items").await?;
    db.execute_unprepared("ALTER TABLE feed_items_keyed RENAME TO feed_items")
        .await?;
    for (_, _, sql) in &others {
        db.execute_unprepared(sql).await?;
    }
    Ok(())
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        key(manager, NEW, 2).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        key(manager, OLD, 1).await
    }
}
