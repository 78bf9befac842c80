//! Producer operations: enqueue items (one transaction), retry failed items.

use sea_orm::{
    ConnectionTrait, DatabaseTransaction, DbBackend, SqliteTransactionMode, TransactionOptions,
    TransactionTrait, Value,
};

use super::dialect::{is_transient, stmt};
use super::{Store, get};
use crate::{Error, Result};

/// What to do with a partition when one of its items fails for good.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OnFailure {
    /// The partition becomes `failed`; fan-in cannot pass a failed item.
    #[default]
    Block,
    /// Failed items count as finished; the partition goes on.
    Continue,
}

impl OnFailure {
    /// The stored text.
    pub fn as_str(self) -> &'static str {
        match self {
            OnFailure::Block => "block",
            OnFailure::Continue => "continue",
        }
    }
}

/// Settings of a partition created by [`Store::enqueue`].
#[derive(Clone, Debug)]
pub struct PartitionSpec {
    /// Close when nothing is left (default true).
    pub auto_close: bool,
    /// Never advance the gate automatically (default false).
    pub manual_checkpoint: bool,
    /// Default `block`.
    pub on_failure: OnFailure,
}

impl Default for PartitionSpec {
    fn default() -> Self {
        Self {
            auto_close: true,
            manual_checkpoint: false,
            on_failure: OnFailure::Block,
        }
    }
}

/// One item to add.
#[derive(Clone, Debug)]
pub struct NewItem {
    /// Item id; None = a new UUID.
    pub id: Option<String>,
    /// Gate; None = the partition's current gate.
    pub gate: Option<i64>,
    /// Bytes forwarded to the handler (normally JSON).
    pub data: Vec<u8>,
}

/// What [`Store::enqueue`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Enqueued {
    /// Items inserted.
    pub items: usize,
    /// The partition did not exist.
    pub created: bool,
    /// The partition was `complete` and is `available` again.
    pub reopened: bool,
}

const BATCH: usize = 500;

impl Store {
    pub(super) async fn begin_write(&self) -> Result<DatabaseTransaction> {
        let opts = TransactionOptions {
            sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
            ..Default::default()
        };
        Ok(self.connection().begin_with_options(opts).await?)
    }

    /// Creates or extends a partition and inserts `items`, all in one
    /// transaction: on any error nothing is written. Items below the
    /// partition's current gate are refused (they could never run); adding to
    /// a `complete` partition reopens it. `spec` applies when the partition
    /// is created.
    ///
    /// ```no_run
    /// # async fn f() -> feed::Result<()> {
    /// use feed::store::{NewItem, PartitionSpec};
    /// let store = feed::Store::connect("sqlite://feed.db?mode=rwc", 4).await?;
    /// store.migrate().await?;
    /// let items = vec![NewItem { id: None, gate: None, data: br#"{"resume": 1}"#.to_vec() }];
    /// store.enqueue("folder-1", &PartitionSpec::default(), items).await?;
    /// # Ok(()) }
    /// ```
    pub async fn enqueue(
        &self,
        partition: &str,
        spec: &PartitionSpec,
        items: Vec<NewItem>,
    ) -> Result<Enqueued> {
        let mut delay = std::time::Duration::from_millis(20);
        for attempt in 1.. {
            match self.enqueue_once(partition, spec, &items).await {
                Err(Error::Db(e)) if attempt < 8 && is_transient(&e) => {
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                }
                other => return other,
            }
        }
        unreachable!("the loop returns")
    }

    async fn enqueue_once(
        &self,
        partition: &str,
        spec: &PartitionSpec,
        items: &[NewItem],
    ) -> Result<Enqueued> {
        let b = self.backend();
        let txn = self.begin_write().await?;
        let lock = if b == DbBackend::Sqlite {
            ""
        } else {
            " FOR UPDATE"
        };
        let rows = txn
            .query_all_raw(stmt(
                b,
                &format!("SELECT gate, status FROM feed_partitions WHERE id = ?{lock}"),
                vec![partition.into()],
            ))
            .await?;
        let (gate, status) = match rows.first() {
            Some(r) => (get::<i64>(r, "gate")?, Some(get::<String>(r, "status")?)),
            None => (0, None),
        };
        for (n, item) in items.iter().enumerate() {
            if let Some(g) = item.gate
                && g < gate
            {
                let id = item.id.clone().unwrap_or_else(|| format!("#{}", n + 1));
                return Err(Error::Invalid(format!(
                    "item {id} has gate {g}, below partition {partition}'s current gate {gate}: it could never run. \
                     Give it gate {gate} or higher (or omit the gate to use the current one)"
                )));
            }
        }
        if status.is_none() {
            txn.execute_raw(stmt(
                b,
                "INSERT INTO feed_partitions (id, auto_close, manual_checkpoint, on_failure) VALUES (?, ?, ?, ?)",
                vec![
                    partition.into(),
                    spec.auto_close.into(),
                    spec.manual_checkpoint.into(),
                    spec.on_failure.as_str().into(),
                ],
            ))
            .await?;
        } else {
            // Bumping the version makes a holder re-check the partition's gate.
            txn.execute_raw(stmt(
                b,
                "UPDATE feed_partitions SET status = CASE WHEN status = 'complete' THEN 'available' ELSE status END, \
                 version = version + 1, updated_at = {now} WHERE id = ?",
                vec![partition.into()],
            ))
            .await?;
        }
        for chunk in items.chunks(BATCH) {
            insert_items(&txn, b, partition, gate, chunk).await?;
        }
        txn.commit().await?;
        Ok(Enqueued {
            items: items.len(),
            created: status.is_none(),
            reopened: status.as_deref() == Some("complete"),
        })
    }

    /// Puts failed items (of one partition, or all) back to `available` with
    /// attempts reset, and reopens their partitions. `last_error` is kept as
    /// history until the next attempt overwrites or clears it. Returns the
    /// number of items reset.
    ///
    /// ```no_run
    /// # async fn f(store: feed::Store) -> feed::Result<()> {
    /// let n = store.retry_failed(Some("folder-1")).await?;
    /// println!("{n} items will run again");
    /// # Ok(()) }
    /// ```
    pub async fn retry_failed(&self, partition: Option<&str>) -> Result<u64> {
        let b = self.backend();
        let txn = self.begin_write().await?;
        let (filter, values): (&str, Vec<Value>) = match partition {
            Some(p) => (" AND partition_id = ?", vec![p.into()]),
            None => ("", vec![]),
        };
        txn.execute_raw(stmt(
            b,
            &format!(
                "UPDATE feed_partitions SET status = 'available', version = version + 1, updated_at = {{now}} \
                 WHERE status <> 'available' AND id IN (SELECT partition_id FROM feed_items WHERE status = 'failed'{filter})"
            ),
            values.clone(),
        ))
        .await?;
        let n = txn
            .execute_raw(stmt(
                b,
                &format!(
                    "UPDATE feed_items SET status = 'available', attempts = 0, not_before = NULL, \
                     version = version + 1, updated_at = {{now}} WHERE status = 'failed'{filter}"
                ),
                values,
            ))
            .await?
            .rows_affected();
        if b == DbBackend::Postgres && n > 0 {
            txn.execute_unprepared("NOTIFY feed_items").await?;
        }
        txn.commit().await?;
        Ok(n)
    }

    /// Puts one failed item back to `available` with attempts reset and
    /// reopens its partition if it had failed; false when the item is not
    /// `failed` (or does not exist).
    pub async fn retry_item(&self, id: &str) -> Result<bool> {
        let b = self.backend();
        let txn = self.begin_write().await?;
        txn.execute_raw(stmt(
            b,
            "UPDATE feed_partitions SET status = 'available', version = version + 1, updated_at = {now} \
             WHERE status = 'failed' AND id IN (SELECT partition_id FROM feed_items WHERE id = ? AND status = 'failed')",
            vec![id.into()],
        ))
        .await?;
        let n = txn
            .execute_raw(stmt(
                b,
                "UPDATE feed_items SET status = 'available', attempts = 0, not_before = NULL, \
                 version = version + 1, updated_at = {now} WHERE id = ? AND status = 'failed'",
                vec![id.into()],
            ))
            .await?
            .rows_affected();
        if b == DbBackend::Postgres && n > 0 {
            txn.execute_unprepared("NOTIFY feed_items").await?;
        }
        txn.commit().await?;
        Ok(n == 1)
    }
}

async fn insert_items(
    txn: &DatabaseTransaction,
    b: DbBackend,
    partition: &str,
    gate: i64,
    items: &[NewItem],
) -> Result<()> {
    if items.is_empty() {
        return Ok(());
    }
    let rows = vec!["(?, ?, ?, ?)"; items.len()].join(", ");
    let mut values: Vec<Value> = Vec::with_capacity(items.len() * 4);
    for item in items {
        values.push(
            item.id
                .clone()
                .unwrap_or_else(|| uuid::Uuid::new_v4().to_string())
                .into(),
        );
        values.push(partition.into());
        values.push(item.gate.unwrap_or(gate).into());
        values.push(item.data.clone().into());
    }
    let sql = format!("INSERT INTO feed_items (id, partition_id, gate, data) VALUES {rows}");
    txn.execute_raw(stmt(b, &sql, values)).await.map_err(|e| {
        if e.to_string().to_lowercase().contains("unique") || e.to_string().contains("Duplicate") {
            Error::Invalid(format!(
                "an item id already exists (ids are unique across all partitions); nothing was written: {e}"
            ))
        } else {
            Error::Db(e)
        }
    })?;
    Ok(())
}
