//! Ids and tenants compared byte for byte on MariaDB, as on the other
//! backends: its default collation ignores case and trailing spaces, so
//! `case-1` found `Case-1`'s row, `"acme-1 "` found `acme-1`'s and tenant
//! `acme` matched `ACME`. Each id-like column gets a binary collation
//! without padding: `utf8mb4_nopad_bin` (MariaDB's `utf8mb4_bin` still
//! pads, so `"a "` equals `"a"`); a fresh database gets it here too. The foreign key from `feed_items` to
//! `feed_partitions` is dropped and added again around the change (MariaDB
//! refuses to change a column a foreign key uses). Columns already binary
//! are left alone, so a second run does nothing. A no-op elsewhere.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend, Statement};

#[derive(DeriveMigrationName)]
pub(crate) struct Migration;

/// The binary collations of ids, best first: MariaDB's that does not pad,
/// MySQL 8's, and the padding one where neither is there.
const BINARY: [&str; 3] = ["utf8mb4_nopad_bin", "utf8mb4_0900_bin", "utf8mb4_bin"];

/// Each id-like column: (table, column, its type and nullability).
const COLUMNS: [(&str, &str, &str); 10] = [
    ("feed_partitions", "id", "VARCHAR(255) NOT NULL"),
    ("feed_partitions", "tenant", "VARCHAR(255) NULL"),
    ("feed_items", "id", "VARCHAR(255) NOT NULL"),
    ("feed_items", "partition_id", "VARCHAR(255) NOT NULL"),
    ("feed_events", "partition_id", "VARCHAR(255) NOT NULL"),
    ("feed_limits", "tenant", "VARCHAR(255) NOT NULL"),
    ("feed_buckets", "name", "VARCHAR(255) NOT NULL"),
    ("feed_slots", "tenant", "VARCHAR(255) NOT NULL"),
    ("feed_producer_tokens", "tenant", "VARCHAR(255) NOT NULL"),
    ("feed_producer_tokens", "prefix", "VARCHAR(255) NULL"),
];

/// One column's collation now and its table's default.
struct Now {
    column: String,
    table: String,
}

async fn collation(
    db: &SchemaManagerConnection<'_>,
    table: &str,
    column: &str,
) -> Result<Now, DbErr> {
    let row = db
        .query_one_raw(Statement::from_sql_and_values(
            DbBackend::MySql,
            "SELECT c.COLLATION_NAME AS c, t.TABLE_COLLATION AS t FROM information_schema.COLUMNS c \
             JOIN information_schema.TABLES t ON t.TABLE_SCHEMA = c.TABLE_SCHEMA AND t.TABLE_NAME = c.TABLE_NAME \
             WHERE c.TABLE_SCHEMA = DATABASE() AND c.TABLE_NAME = ? AND c.COLUMN_NAME = ?",
            [table.into(), column.into()],
        ))
        .await?
        .ok_or_else(|| DbErr::Custom(format!("{table}.{column} is not there")))?;
    Ok(Now {
        column: row.try_get("", "c")?,
        table: row.try_get("", "t")?,
    })
}

/// The first of [`BINARY`] the server has.
pub(crate) async fn binary(db: &SchemaManagerConnection<'_>) -> Result<String, DbErr> {
    for name in BINARY {
        let found = db
            .query_one_raw(Statement::from_sql_and_values(
                DbBackend::MySql,
                "SELECT COLLATION_NAME AS n FROM information_schema.COLLATIONS WHERE COLLATION_NAME = ?",
                [name.into()],
            ))
            .await?;
        if found.is_some() {
            return Ok(name.to_string());
        }
    }
    Err(DbErr::Custom(
        "the server has no utf8mb4 binary collation".into(),
    ))
}

/// The foreign keys of `feed_items.partition_id`, by name.
async fn item_keys(db: &SchemaManagerConnection<'_>) -> Result<Vec<String>, DbErr> {
    let rows = db
        .query_all_raw(Statement::from_string(
            DbBackend::MySql,
            "SELECT CONSTRAINT_NAME AS n FROM information_schema.KEY_COLUMN_USAGE \
             WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'feed_items' \
             AND COLUMN_NAME = 'partition_id' AND REFERENCED_TABLE_NAME = 'feed_partitions'",
        ))
        .await?;
    rows.iter().map(|r| r.try_get("", "n")).collect()
}

/// Gives every id-like column a binary collation (`binary`), or its
/// table's default collation, changing only those that differ.
async fn collate(manager: &SchemaManager<'_>, binary: bool) -> Result<(), DbErr> {
    if manager.get_database_backend() != DbBackend::MySql {
        return Ok(());
    }
    let db = manager.get_connection();
    let target = if binary {
        Some(self::binary(db).await?)
    } else {
        None
    };
    let target = target.as_deref();
    let mut changes: Vec<(&str, String)> = Vec::new();
    for (table, column, definition) in COLUMNS {
        let now = collation(db, table, column).await?;
        let want = target.unwrap_or(&now.table);
        if now.column != want {
            changes.push((
                table,
                format!("MODIFY {column} {definition} COLLATE {want}"),
            ));
        }
    }
    if changes.is_empty() {
        return Ok(());
    }
    let keyed = ["feed_partitions", "feed_items"];
    let keys = if changes.iter().any(|(t, _)| keyed.contains(t)) {
        item_keys(db).await?
    } else {
        vec![]
    };
    for key in &keys {
        db.execute_unprepared(&format!("ALTER TABLE feed_items DROP FOREIGN KEY {key}"))
            .await?;
    }
    // Partitions first, so that the items' key is added against the
    // changed column.
    let mut tables: Vec<&str> = changes.iter().map(|(t, _)| *t).collect();
    tables.dedup();
    for table in tables {
        let mut parts: Vec<String> = changes
            .iter()
            .filter(|(t, _)| *t == table)
            .map(|(_, m)| m.clone())
            .collect();
        if table == "feed_items" {
            parts.extend(keys.iter().map(|k| {
                format!(
                    "ADD CONSTRAINT {k} FOREIGN KEY (partition_id) REFERENCES feed_partitions (id)"
                )
            }));
        }
        db.execute_unprepared(&format!("ALTER TABLE {table} {}", parts.join(", ")))
            .await?;
    }
    // The items' ids were already right: their key goes back alone.
    if !changes.iter().any(|(t, _)| *t == "feed_items") {
        for key in &keys {
            db.execute_unprepared(&format!(
                "ALTER TABLE feed_items ADD CONSTRAINT {key} FOREIGN KEY (partition_id) REFERENCES feed_partitions (id)"
            ))
            .await?;
        }
    }
    Ok(())
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        collate(manager, true).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        collate(manager, false).await
    }
}
