//! Starting and stopping a processor: connect (waiting for the database),
//! migrate, register a session, run the loops, and on shutdown drain,
//! release every partition and delete the session so others take over at once.
//!
//! Every task is started in one of two groups (see `tasks`): `work`
//! (dispatch and its side tasks, the notification listener, retention, the
//! health listener) stops at the signal; `session` (the keeper and the
//! completer) goes on through the drain, so that results are still written
//! under a live session, and stops after it.
//!
//! Shutdown is bounded whatever the database does: in-flight work gets
//! `--drain-timeout` from the signal, then stopping every task, releasing
//! partitions and deleting the session get [`RELEASE_BOUND`] together (best
//! effort: what does not finish frees up when the session expires).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use prometheus_client::registry::Registry;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::completer::Completer;
use crate::context::{Context, Session};
use crate::handler::{Handler, HttpHandler};
use crate::ids::SessionId;
use crate::inputs::{Inputs, InputsUrl};
use crate::metrics::Metrics;
use crate::server::Health;
use crate::session;
use crate::store::{redact, shown};
use crate::tasks::Tasks;
use crate::webhooks::Webhooks;
use crate::{Config, Error, Result, dispatch, retention};

mod connect;

use connect::{open, register};

/// How long releasing partitions, deleting the session and stopping the
/// health listener may take, together, after the drain.
pub const RELEASE_BOUND: Duration = Duration::from_secs(5);

/// Runs a processor that POSTs items to `config.handler.url` until
/// `shutdown` resolves.
///
/// ```no_run
/// # async fn f() -> feed::Result<()> {
/// let mut config = feed::Config::new("sqlite://feed.db?mode=rwc", "http://127.0.0.1:9000/feed");
/// config.handler.concurrency = 16;
/// feed::run(config, async { tokio::signal::ctrl_c().await.ok(); }).await
/// # }
/// ```
pub async fn run(
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let handler = Arc::new(HttpHandler::new(&config.handler)?);
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
///         Outcome::done()
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
    // Two groups: `work` stops at the signal; `session` (heartbeats and
    // result writes) goes on through the drain and stops after it.
    let work = Tasks::default();
    let session = work.beside();
    let stop = work.token();
    work.spawn("signal", async move {
        tokio::select! {
            () = shutdown => tracing::info!("shutdown requested: no new work; draining"),
            () = stop.cancelled() => return,
        }
        stop.cancel();
    });
    let ran = start(&work, &session, config, handler).await;
    let ctx = ran.as_ref().ok().cloned().flatten();
    if let Some(ctx) = &ctx {
        let dispatch = work.spawn("dispatch", dispatch::run(ctx.clone(), work.token()));
        drain(dispatch, &work.token(), ctx.config.dispatch.drain_timeout).await;
    }
    shut_down(&work, &session, ctx.as_deref()).await;
    if let Some((task, message)) = work.panicked() {
        return Err(Error::Panicked { task, message });
    }
    ran.map(drop)
}

/// Starts everything but dispatch: the listener, the store, the session
/// and the tasks beside dispatch. None when shutdown came first.
async fn start(
    work: &Tasks,
    session: &Tasks,
    config: Config,
    handler: Arc<dyn Handler>,
) -> Result<Option<Arc<Context>>> {
    let mut registry = Registry::default();
    let metrics = Metrics::new(&mut registry);
    if let Some(cap) = config.listen.metrics_tenants {
        metrics.tenants.set_cap(cap);
    }
    let health = Arc::new(Health::default());
    let wake = Arc::new(tokio::sync::Notify::new());
    let mut inputs = None;
    if let Some(addr) = &config.listen.address {
        let listener = crate::server::bind(addr, true).await?;
        inputs = listener
            .local_addr()
            .ok()
            .and_then(|local| Inputs::new(&config, local));
        let registry = Arc::new(registry);
        let app = crate::server::app(health.clone(), registry, &config, wake.clone(), &inputs);
        let proxies = config.listen.trusted_proxies.clone();
        work.spawn("listener", serve(listener, app, work.token(), proxies));
    } else if config.listen.inputs_url != InputsUrl::Off {
        tracing::info!(
            "fan-in inputs are off: --listen is off, so items at gates above 0 carry no Feed-Inputs URL; give --listen an address to serve them (--inputs-url off says so without this line)"
        );
    }
    let Some(store) = open(&config, &metrics, &health, &work.token()).await? else {
        return Ok(None);
    };
    if let Some(inputs) = &inputs {
        inputs.connect(store.clone());
    }
    let id = SessionId::random();
    let ctx = Arc::new(Context {
        wake,
        completer: Completer::start(
            session,
            store.clone(),
            config.leases.session_expiry,
            config.handler.batch_size,
        ),
        breaker: crate::breaker::Breaker::new(config.flow.breaker_calls, config.flow.breaker_ratio),
        limits: crate::limits::Limits::new(
            config.flow.rate_limit,
            config.flow.rate_burst,
            config.handler.batch_size,
        ),
        config,
        store,
        session: Arc::new(Session::new(id.clone())),
        metrics: Arc::new(metrics),
        health,
        handler,
        tasks: work.clone(),
        inputs,
    });
    if !register(&ctx.store, &ctx.config, &id, &work.token()).await? {
        return Ok(None);
    }
    started(&ctx).await;
    session.spawn("keeper", session::keep(keeper(&ctx), session.token()));
    if ctx.store.listens() {
        let listen = crate::notify::listen(ctx.config.clone(), ctx.wake.clone(), work.token());
        work.spawn("notifications", listen);
    }
    let session = ctx.session.clone();
    let claimer = crate::limits::Claimer {
        every: ctx.config.leases.heartbeat_interval,
        expiry: ctx.config.leases.session_expiry,
        batch: ctx.config.handler.batch_size,
        store: ctx.store.clone(),
        session: Box::new({
            let session = session.clone();
            move || session.id()
        }),
        live: {
            let expiry = ctx.config.leases.session_expiry;
            Box::new(move || session.live(expiry))
        },
        limits: ctx.limits.clone(),
    };
    work.spawn("limits", crate::limits::run(claimer, work.token()));
    work.spawn(
        "schedules",
        crate::recurring::run(ctx.store.clone(), work.token()),
    );
    let (store, metrics) = (ctx.store.clone(), ctx.metrics.clone());
    if let Some(webhooks) = Webhooks::new(&ctx.config, store, metrics, ctx.session.clone())? {
        work.spawn("webhooks", webhooks.run(work.token()));
    }
    let (store, metrics) = (ctx.store.clone(), ctx.metrics.clone());
    let backlog = crate::backlog::run(store, ctx.session.clone(), metrics, work.token());
    work.spawn("backlog", backlog);
    if let Some(age) = ctx.config.retention {
        let prune = retention::run(ctx.store.clone(), ctx.session.clone(), age, work.token());
        work.spawn("retention", prune);
    }
    Ok(Some(ctx))
}

/// Marks the processor healthy and says what it runs against, warning when
/// the database will slow it down.
async fn started(ctx: &Context) {
    for flag in [&ctx.health.session, &ctx.health.handler] {
        flag.store(true, Ordering::Relaxed);
    }
    // Without --events-url the completion events are written and kept,
    // but this processor sends none: said here, where it starts.
    let events = ctx.config.events.url.as_deref().map_or_else(
        || "kept in feed_events, not sent (no --events-url)".to_string(),
        redact,
    );
    tracing::info!(session = %ctx.session.id(), database = %shown(&ctx.config.database.url), handler = %redact(&ctx.config.handler.url), %events, "processor started");
    if ctx.store.autovacuum_off().await.unwrap_or(false) {
        tracing::warn!(
            "autovacuum is off on this PostgreSQL server: feed_items and feed_partitions keep every dead row version and stale planner statistics, and statements slow down as work goes on; turn autovacuum on (Feed's tables carry their own settings for it) or run VACUUM ANALYZE on them often"
        );
    }
}

fn keeper(ctx: &Context) -> session::Keeper {
    session::Keeper {
        store: ctx.store.clone(),
        session: ctx.session.clone(),
        health: ctx.health.clone(),
        metrics: ctx.metrics.clone(),
        config: ctx.config.clone(),
    }
}

/// Waits for the dispatch loop, which drains by itself once `stop` is
/// cancelled; at `drain_timeout` after that it is aborted even when stuck
/// in a statement, abandoning its deliveries (their items stay available).
async fn drain(mut dispatch: JoinHandle<()>, stop: &CancellationToken, drain_timeout: Duration) {
    let deadline = async {
        stop.cancelled().await;
        tokio::time::sleep(drain_timeout).await;
    };
    tokio::select! {
        _ = &mut dispatch => {}
        () = deadline => {
            tracing::warn!(drain_timeout = ?drain_timeout, "shutdown: work still running at the drain timeout is abandoned; its items stay available");
            dispatch.abort();
        }
    }
}

/// Stops every task, then hands the session's partitions over at once,
/// within [`RELEASE_BOUND`] in all. Tasks first: the keeper must not
/// heartbeat a session being deleted, nor an acquire cycle lease a
/// partition after the release. Tasks still running at half the bound are
/// left to end on their own, so that the hand-over gets its turn.
async fn shut_down(work: &Tasks, session: &Tasks, ctx: Option<&Context>) {
    let half = RELEASE_BOUND / 2;
    let (worked, kept) = tokio::join!(work.stopped(half), session.stopped(half));
    if !(worked && kept) {
        tracing::warn!(bound = ?half, "shutdown: some tasks did not stop in time; handing over anyway");
    }
    let Some(ctx) = ctx else { return };
    if tokio::time::timeout(half, hand_over(ctx)).await.is_err() {
        tracing::warn!(bound = ?half, "shutdown: releasing partitions and the session did not finish in time; they free up when the session expires");
    }
    tracing::info!(session = %ctx.session.id(), "processor stopped");
}

/// Releases every partition, then deletes the session row, so that others
/// take over at once (best effort: both free up when the session expires).
async fn hand_over(ctx: &Context) {
    let me = ctx.session.id();
    match ctx.store.release_all(&me).await {
        Ok(n) => tracing::info!(partitions = n, "released partitions"),
        Err(e) => {
            tracing::warn!(error = %e, "could not release partitions; they free up when the session expires")
        }
    }
    if let Err(e) = ctx.store.release_slots(&me).await {
        tracing::warn!(error = %e, "could not give back in-flight slots; they go when the session expires");
    }
    if let Err(e) = ctx.store.delete_session(&me).await {
        tracing::warn!(error = %e, "could not delete the session row; it expires by itself");
    }
}

/// Serves the health and metrics listener until `stop`.
async fn serve(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    stop: CancellationToken,
    proxies: Vec<ipnet::IpNet>,
) {
    let stop = async move { stop.cancelled().await };
    if let Err(e) = crate::server::serve_trusting(listener, app, stop, &proxies).await {
        tracing::warn!(error = %e, "health listener stopped");
    }
}
