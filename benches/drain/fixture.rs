//! Fresh databases, the processor under test and the workload, on the
//! shared test kit.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use feed::store::{NewItem, PartitionSpec};
use futures_util::{StreamExt, TryStreamExt, stream};
use sea_orm::Value;
use tokio::task::JoinSet;

use crate::Args;
use testkit::{Backend, Database, Outcomes, Process};

/// The processor under test: this build's, or `FEED_BENCH_PROCESSOR` (an
/// earlier build, to compare before and after on the same machine).
pub(crate) fn processor_bin() -> String {
    std::env::var("FEED_BENCH_PROCESSOR")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_processor").to_string())
}

/// A fresh, uniquely named, migrated database; `drop_db` removes it.
pub(crate) struct Db(Database);

impl std::ops::Deref for Db {
    type Target = Database;
    fn deref(&self) -> &Database {
        &self.0
    }
}

impl Db {
    pub(crate) async fn create(backend: Backend, args: &Args, pool: u32) -> Result<Db> {
        Ok(Db(Database::migrated(
            backend,
            &args.servers(),
            "feed_bench_",
            pool,
        )
        .await?))
    }

    pub(crate) async fn drop_db(self) {
        self.0.drop_db().await
    }

    /// Runs `f` on a fresh database with a pool of `pool`, dropped afterwards
    /// whatever `f` returns.
    pub(crate) async fn scoped<T>(
        backend: Backend,
        args: &Args,
        pool: u32,
        f: impl AsyncFnOnce(&Db) -> Result<T>,
    ) -> Result<T> {
        let db = Db::create(backend, args, pool).await?;
        let r = f(&db).await;
        db.drop_db().await;
        r
    }

    /// (whether a partition is still available, whether one failed): two
    /// index probes, so polling does not load the database it measures.
    pub(crate) async fn open_partitions(&self) -> Result<(bool, bool)> {
        let rows = self
            .query(
                "SELECT (SELECT COUNT(*) FROM (SELECT 1 AS x FROM feed_partitions WHERE status = 'available' LIMIT 1) a) AS open, \
                 (SELECT COUNT(*) FROM (SELECT 1 AS x FROM feed_partitions WHERE status = 'failed' LIMIT 1) f) AS failed",
                vec![],
            )
            .await?;
        let row = rows.first().context("no row from the partition probe")?;
        let open: i64 = row.try_get("", "open")?;
        let failed: i64 = row.try_get("", "failed")?;
        Ok((open > 0, failed > 0))
    }
}

/// A running `processor run` at its defaults (plus the flags a phase
/// names); killed if dropped.
pub(crate) struct Proc(Process);

impl std::ops::Deref for Proc {
    type Target = Process;
    fn deref(&self) -> &Process {
        &self.0
    }
}

impl std::ops::DerefMut for Proc {
    fn deref_mut(&mut self) -> &mut Process {
        &mut self.0
    }
}

impl Proc {
    /// Spawns the processor with only the URLs, `--listen` and `flags`.
    pub(crate) fn spawn(db_url: &str, handler_url: &str, flags: &[&str]) -> Result<Proc> {
        Self::spawn_with_env(db_url, handler_url, flags, &[])
    }

    /// [`Proc::spawn`] with the variables `env` set.
    pub(crate) fn spawn_with_env(
        db_url: &str,
        handler_url: &str,
        flags: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Proc> {
        Ok(Proc(Process::spawn_with_env(
            &processor_bin(),
            db_url,
            handler_url,
            flags,
            None,
            env,
        )?))
    }

    pub(crate) async fn outcomes(&self, client: &reqwest::Client) -> Outcomes {
        Outcomes::parse(&self.0.metrics(client).await)
    }

    /// SIGTERM (graceful: release partitions, delete the session), then wait.
    pub(crate) async fn stop(mut self) {
        if !self.0.stop(Duration::from_secs(40)).await {
            eprintln!("  warning: processor did not stop on SIGTERM; killing it");
        }
    }
}

pub(crate) fn item_body(n: usize, multistep: bool) -> Vec<u8> {
    if multistep {
        format!(r#"{{"n":{n},"s":0}}"#).into_bytes()
    } else {
        format!(r#"{{"n":{n}}}"#).into_bytes()
    }
}

/// Enqueues `items` across `partitions` with Store::enqueue (one transaction
/// per partition), `parallel` partitions at a time; with `tenants`, the
/// partitions belong to that many tenants in turn, each given limits that
/// never bind (a cap of a million in flight, weight 1).
pub(crate) async fn enqueue_backlog(
    db: &Db,
    items: usize,
    partitions: usize,
    multistep: bool,
    tenants: usize,
) -> Result<Duration> {
    let parallel = if db.backend == Backend::Sqlite { 1 } else { 4 };
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for t in 0..parallel {
        let store = db.store.clone();
        tasks.spawn(async move {
            for k in (t..partitions).step_by(parallel) {
                let count = items / partitions + usize::from(k < items % partitions);
                let batch = (0..count)
                    .map(|j| NewItem::new(item_body(j * partitions + k, multistep)))
                    .collect();
                let mut spec = PartitionSpec::default();
                spec.tenant = (tenants > 0).then(|| format!("t{}", k % tenants).into());
                store.enqueue(&format!("p-{k:05}"), &spec, batch).await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    for t in 0..tenants {
        let limit = feed::store::limits::Limit {
            tenant: format!("t{t}").into(),
            max_in_flight: Some(1_000_000),
            weight: Some(1),
            ..Default::default()
        };
        db.store.set_limit(&limit).await?;
    }
    Ok(started.elapsed())
}

/// One item per partition, `{"spawn": K}`: the handler answers it with
/// the partition's K of the `items` (see `handler::answer`).
pub(crate) async fn enqueue_folders(db: &Db, items: usize, partitions: usize) -> Result<Duration> {
    let started = Instant::now();
    for k in 0..partitions {
        let count = items / partitions + usize::from(k < items % partitions);
        let folder = NewItem::new(format!(r#"{{"spawn":{count}}}"#).into_bytes());
        let spec = PartitionSpec::default();
        db.store
            .enqueue(&format!("p-{k:05}"), &spec, vec![folder])
            .await?;
    }
    Ok(started.elapsed())
}

/// Parameters per multi-row INSERT: a few thousand rows, well under every
/// backend's limit on bound values.
const INSERT_VALUES: usize = 6000;

/// Inserts `rows` rows of `width` columns into `into` (`table (columns)`)
/// in multi-row INSERTs, as any producer may (the schema is a public
/// contract); `row(k)` gives row `k`'s values. A few statements run at once
/// except on SQLite (one writer).
pub(crate) async fn insert_rows(
    db: &Db,
    into: &str,
    width: usize,
    rows: usize,
    row: impl Fn(usize) -> Vec<Value>,
) -> Result<()> {
    let per = (INSERT_VALUES / width).max(1);
    let parallel = if db.backend == Backend::Sqlite { 1 } else { 4 };
    let one = format!("({})", vec!["?"; width].join(", "));
    stream::iter((0..rows).step_by(per))
        .map(|start| {
            let end = (start + per).min(rows);
            let values: Vec<Value> = (start..end).flat_map(&row).collect();
            let sql = format!(
                "INSERT INTO {into} VALUES {}",
                vec![one.as_str(); end - start].join(", ")
            );
            async move { db.exec(&sql, values).await }
        })
        .buffer_unordered(parallel)
        .try_for_each(|_| async { Ok(()) })
        .await
}

/// Creates `n` empty partitions with auto_close = false (they stay open and
/// held while idle).
pub(crate) async fn idle_partitions(db: &Db, n: usize) -> Result<()> {
    insert_rows(db, "feed_partitions (id, auto_close)", 2, n, |k| {
        vec![format!("idle-{k:06}").into(), false.into()]
    })
    .await
}

/// Creates `partitions` partitions, then `items` single-step items spread
/// evenly over them (each partition's items written together), with plain
/// SQL: seconds for a million items, where Store::enqueue takes minutes.
/// Every id starts with `prefix`, so that several backlogs can share a
/// database.
pub(crate) async fn insert_backlog(
    db: &Db,
    items: usize,
    partitions: usize,
    prefix: &str,
) -> Result<Duration> {
    let started = Instant::now();
    let part = |k: usize| format!("{prefix}s-{k:07}");
    insert_rows(db, "feed_partitions (id)", 1, partitions, |k| {
        vec![part(k).into()]
    })
    .await?;
    insert_rows(db, "feed_items (id, partition_id, data)", 3, items, |n| {
        vec![
            format!("{prefix}i-{n:07}").into(),
            part(n * partitions / items).into(),
            item_body(n, false).into(),
        ]
    })
    .await?;
    Ok(started.elapsed())
}

/// Waits until `want` open partitions have an owner; returns how many do.
pub(crate) async fn wait_held(
    db: &Db,
    procs: &mut [&mut Proc],
    want: usize,
    timeout: Duration,
) -> Result<usize> {
    let deadline = Instant::now() + timeout;
    loop {
        for p in procs.iter_mut() {
            p.check_alive()?;
        }
        let held = db
            .count("SELECT COUNT(*) AS n FROM feed_partitions WHERE status = 'available' AND owner IS NOT NULL")
            .await? as usize;
        if held >= want || Instant::now() >= deadline {
            return Ok(held);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
