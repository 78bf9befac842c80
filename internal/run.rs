//! Starting and stopping a processor: connect (waiting for the database),
//! migrate, register a session, run the loops, and on shutdown drain,
//! release every partition and delete the session so others take over at once.
//!
//! Shutdown is bounded whatever the database does: in-flight work gets
//! `--drain-timeout` from the signal, then releasing partitions, deleting the
//! session and stopping the listener get [`RELEASE_BOUND`] together (best
//! effort: what does not finish frees up when the session expires).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::completer::Completer;
use crate::context::{Context, Session};
use crate::handler::{Handler, HttpHandler};
use crate::metrics::Metrics;
use crate::server::Health;
use crate::session;
use crate::store::{Store, redact};
use crate::{Config, Error, Result, dispatch};

/// How long releasing partitions, deleting the session and stopping the
/// health listener may take, together, after the drain.
pub const RELEASE_BOUND: Duration = Duration::from_secs(5);

/// Runs a processor that POSTs items to `config.handler_url` until
/// `shutdown` resolves.
///
/// ```no_run
/// # async fn f() -> feed::Result<()> {
/// let mut config = feed::Config::new("sqlite://feed.db?mode=rwc", "http://127.0.0.1:9000/feed");
/// config.concurrency = 16;
/// feed::run(config, async { tokio::signal::ctrl_c().await.ok(); }).await
/// # }
/// ```
pub async fn run(
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let handler = Arc::new(HttpHandler::new(&config)?);
    run_with(config, handler, shutdown).await
}

/// Runs a processor with any [`Handler`] (an in-process one, say)
/// until `shutdown` resolves.
///
/// ```no_run
/// use std::sync::Arc;
/// use feed::{Config, Handler, Job, Outcome};
///
/// struct Done;
///
/// #[async_trait::async_trait]
/// impl Handler for Done {
///     async fn handle(&self, _job: &Job) -> Outcome {
///         Outcome::Step { gate: None, done: true, data: None }
///     }
/// }
///
/// # async fn f() -> feed::Result<()> {
/// // The handler URL is unused with an in-process handler.
/// let config = Config::new("sqlite://feed.db?mode=rwc", "http://unused/");
/// feed::run_with(config, Arc::new(Done), async { tokio::signal::ctrl_c().await.ok(); }).await
/// # }
/// ```
pub async fn run_with(
    config: Config,
    handler: Arc<dyn Handler>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    config.validate()?;
    let cancel = CancellationToken::new();
    {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            shutdown.await;
            tracing::info!("shutdown requested: no new work; draining");
            cancel.cancel();
        });
    }
    let mut registry = Registry::default();
    let metrics = Metrics::new(&mut registry);
    let health = Arc::new(Health::default());
    let server = match &config.listen {
        Some(addr) => Some(listen(addr, health.clone(), registry, &config, cancel.clone()).await?),
        None => None,
    };

    let Some(mut store) = connect(&config, &cancel).await? else {
        return Ok(());
    };
    store.set_statement_counter(metrics.statements.clone());
    store.set_timeout_counter(metrics.statement_timeouts.clone());
    health
        .database
        .store(true, std::sync::atomic::Ordering::Relaxed);
    if config.migrate {
        tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            r = store.migrate() => r?,
        }
    }
    let id = session::new_id();
    let completer = Completer::start(store.clone(), config.session_expiry);
    let wake = Arc::new(tokio::sync::Notify::new());
    if store.listens() {
        crate::notify::listen(&config, wake.clone(), cancel.clone());
    }
    let shared = Arc::new(Context {
        wake,
        completer,
        config,
        store,
        session: Arc::new(Session::new(id.clone())),
        metrics,
        health: health.clone(),
        handler,
    });
    if !register(&shared.store, &shared.config, &id, &cancel).await? {
        return Ok(());
    }
    health
        .session
        .store(true, std::sync::atomic::Ordering::Relaxed);
    health
        .handler
        .store(true, std::sync::atomic::Ordering::Relaxed);
    tracing::info!(session = %id, database = %redact(&shared.config.database_url), handler = %redact(&shared.config.handler_url), "processor started");
    if shared.store.autovacuum_off().await.unwrap_or(false) {
        tracing::warn!(
            "autovacuum is off on this PostgreSQL server: feed_items and feed_partitions keep every dead row version and stale planner statistics, and statements slow down as work goes on; turn autovacuum on (Feed's tables carry their own settings for it) or run VACUUM ANALYZE on them often"
        );
    }

    // Heartbeats go on through the drain (results need a live session); the
    // keeper is aborted after it.
    let keeper = session::Keeper {
        store: shared.store.clone(),
        session: shared.session.clone(),
        health: health.clone(),
        sessions_lost: shared.metrics.sessions_lost.clone(),
        config: shared.config.clone(),
    };
    let keeper = tokio::spawn(session::keep(keeper, CancellationToken::new()));
    crate::retention::spawn(
        shared.store.clone(),
        shared.session.clone(),
        shared.config.retention,
        cancel.clone(),
    );
    let drain_timeout = shared.config.drain_timeout;
    let deadline = async {
        cancel.cancelled().await;
        tokio::time::sleep(drain_timeout).await;
    };
    // The loop drains by itself; this bounds it even when it is stuck in a
    // statement at the signal. Dropping it abandons its deliveries.
    tokio::select! {
        () = dispatch::run(shared.clone(), cancel.clone()) => {}
        () = deadline => tracing::warn!(drain_timeout = ?drain_timeout, "shutdown: work still running at the drain timeout is abandoned; its items stay available"),
    }
    keeper.abort();

    // Hand over at once: release partitions, then delete the session.
    let me = shared.session.id();
    let finish = async {
        match shared.store.release_all(&me).await {
            Ok(n) => tracing::info!(partitions = n, "released partitions"),
            Err(e) => {
                tracing::warn!(error = %e, "could not release partitions; they free up when the session expires")
            }
        }
        if let Err(e) = shared.store.delete_session(&me).await {
            tracing::warn!(error = %e, "could not delete the session row; it expires by itself");
        }
        if let Some(server) = server {
            let _ = server.await;
        }
    };
    if tokio::time::timeout(RELEASE_BOUND, finish).await.is_err() {
        tracing::warn!(bound = ?RELEASE_BOUND, "shutdown: releasing partitions and the session did not finish in time; they free up when the session expires");
    }
    tracing::info!(session = %me, "processor stopped");
    Ok(())
}

/// Registers the session, retrying with backoff while the database does not
/// answer; false when shutdown came first. Other errors (no schema, say)
/// are returned: retrying would not help.
async fn register(
    store: &Store,
    config: &Config,
    id: &str,
    cancel: &CancellationToken,
) -> Result<bool> {
    let mut backoff = Backoff::new(Duration::from_millis(250), Duration::from_secs(5));
    loop {
        let delay = backoff.next_delay();
        match session::register(store, config, id).await {
            Ok(()) => return Ok(true),
            Err(e @ Error::StatementTimeout(_)) => {
                tracing::warn!(session = %id, error = %e, retry_in = ?delay, "the database does not answer; retrying the registration")
            }
            Err(Error::Db(e)) if crate::store::is_transient(&e) => {
                tracing::warn!(session = %id, error = %e, retry_in = ?delay, "cannot register the session; retrying")
            }
            Err(e) => return Err(e),
        }
        tokio::select! {
            _ = cancel.cancelled() => return Ok(false),
            _ = tokio::time::sleep(delay) => {}
        }
    }
}

/// Connects, retrying with backoff while the database is unreachable;
/// None when shutdown came first. A URL that can never work fails at once.
async fn connect(config: &Config, cancel: &CancellationToken) -> Result<Option<Store>> {
    let pool = u32::try_from(config.concurrency / 4 + 4)
        .unwrap_or(32)
        .min(32);
    let mut backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));
    loop {
        let delay = backoff.next_delay();
        let attempt = Store::connect_with(&config.database_url, pool, config.statement_timeout);
        let result = tokio::select! {
            _ = cancel.cancelled() => return Ok(None),
            r = attempt => r,
        };
        match result {
            Ok(store) => return Ok(Some(store)),
            Err(Error::Connect { url, reason }) => {
                tracing::warn!(database = %url, error = %reason, retry_in = ?delay, "database unreachable; retrying");
            }
            Err(e) => return Err(e),
        }
        tokio::select! {
            _ = cancel.cancelled() => return Ok(None),
            _ = tokio::time::sleep(delay) => {}
        }
    }
}

async fn listen(
    addr: &str,
    health: Arc<Health>,
    registry: Registry,
    config: &Config,
    cancel: CancellationToken,
) -> Result<tokio::task::JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Listen {
            addr: addr.to_string(),
            source,
        })?;
    let app = crate::server::app(health, Arc::new(registry), config);
    Ok(tokio::spawn(async move {
        let stop = async move { cancel.cancelled().await };
        if let Err(e) = crate::server::serve(listener, app, stop).await {
            tracing::warn!(error = %e, "health listener stopped");
        }
    }))
}
