//! Writing a chunk of results, each with its own fence, the way each
//! database does it best (the driver builds the statements): a lone result
//! in one fenced `UPDATE`; on PostgreSQL and SQLite a batch in one
//! `UPDATE … FROM (VALUES …) RETURNING partition_id, id` (on Citus one
//! per partition); on MySQL/MariaDB a batch in
//! one transaction that locks the partition rows and writes every row in
//! one `UPDATE`, rewritten row by row when it changed fewer rows than it
//! was sent.

use std::collections::HashSet;
use std::time::Duration;

use sea_orm::ConnectionTrait;

use super::driver::mysql::results::{batch, share_lock};
use super::driver::{Driver, result_statement};
use super::{Ack, Store};
use crate::Result;

impl Store {
    /// Writes a chunk of results; per result, whether it was stored.
    pub(super) async fn write_chunk(&self, acks: &[Ack], expiry: Duration) -> Result<Vec<bool>> {
        match (*self.driver, acks) {
            (Driver::MySql, _) => self.write_locked(acks, expiry).await,
            (_, [one]) => self.write_one(one, expiry).await,
            (Driver::Citus, _) => self.write_by_partition(acks, expiry).await,
            _ => self.write_returning(acks, None, expiry).await,
        }
    }

    /// Citus: a batch per partition, each run by the one worker that
    /// holds it (a statement over several shards cannot lock their
    /// partition rows, and the fence needs that lock).
    async fn write_by_partition(&self, acks: &[Ack], expiry: Duration) -> Result<Vec<bool>> {
        let mut groups: Vec<(&str, Vec<usize>)> = Vec::new();
        for (k, a) in acks.iter().enumerate() {
            let p = a.fence.partition_id.as_str();
            match groups.iter_mut().find(|(q, _)| *q == p) {
                Some((_, members)) => members.push(k),
                None => groups.push((p, vec![k])),
            }
        }
        let mut out = vec![false; acks.len()];
        for (p, members) in groups {
            let group: Vec<Ack> = members.iter().map(|&k| acks[k].clone()).collect();
            let written = match group.as_slice() {
                [one] => self.write_one(one, expiry).await?,
                _ => self.write_returning(&group, Some(p), expiry).await?,
            };
            for (k, w) in members.into_iter().zip(written) {
                out[k] = w;
            }
        }
        Ok(out)
    }

    /// PostgreSQL and SQLite: one result in a plain fenced `UPDATE`. A lone
    /// result needs no VALUES list, which SQLite copies into a table of its
    /// own before it updates (costly for megabytes of data).
    async fn write_one(&self, ack: &Ack, expiry: Duration) -> Result<Vec<bool>> {
        let n = self
            .retry(|| async {
                self.count(1);
                self.execute_raw(result_statement(self.driver, ack, expiry))
                    .await
            })
            .await?;
        Ok(vec![n.rows_affected() == 1])
    }

    /// PostgreSQL and SQLite: the batch in one statement whose returned
    /// items (partition and id) passed the fence.
    async fn write_returning(
        &self,
        acks: &[Ack],
        partition: Option<&str>,
        expiry: Duration,
    ) -> Result<Vec<bool>> {
        let rows = self
            .retry(|| async {
                self.count(1);
                self.query_all_raw(self.driver.result_batch(acks, partition, expiry))
                    .await
            })
            .await?;
        let written: HashSet<(String, String)> = rows
            .iter()
            .filter_map(|r| {
                let partition = r.try_get::<String>("", "partition_id").ok()?;
                Some((partition, r.try_get::<String>("", "id").ok()?))
            })
            .collect();
        Ok(acks
            .iter()
            .map(|a| {
                let f = &a.fence;
                written.contains(&(f.partition_id.to_string(), f.id.to_string()))
            })
            .collect())
    }

    /// MySQL/MariaDB: lock the partition rows first, so the fence holds at
    /// commit whatever the isolation level; then the whole batch in one
    /// `UPDATE`. When some rows were rejected the batch is rolled back and
    /// the rows are written one by one to learn which (rejections are
    /// rare: a lease change mid-call).
    async fn write_locked(&self, acks: &[Ack], expiry: Duration) -> Result<Vec<bool>> {
        let lock = share_lock(acks);
        if let Some(batch) = &batch(self.driver, acks, expiry) {
            let n = acks.len() as u64;
            let all = self
                .retry(|| async {
                    let txn = self.begin_immediate().await?;
                    self.count(2);
                    txn.query_all_raw(lock.clone()).await?;
                    if txn.execute_raw(batch.clone()).await?.rows_affected() == n {
                        self.commit(txn).await?;
                        Ok(true)
                    } else {
                        txn.rollback().await?;
                        Ok(false)
                    }
                })
                .await?;
            if all {
                return Ok(vec![true; acks.len()]);
            }
        }
        let each: Vec<_> = acks
            .iter()
            .map(|a| result_statement(self.driver, a, expiry))
            .collect();
        self.retry(|| async {
            let txn = self.begin_immediate().await?;
            self.count(1);
            txn.query_all_raw(lock.clone()).await?;
            let mut out = Vec::with_capacity(each.len());
            for st in &each {
                self.count(1);
                out.push(txn.execute_raw(st.clone()).await?.rows_affected() == 1);
            }
            self.commit(txn).await?;
            Ok(out)
        })
        .await
    }
}
