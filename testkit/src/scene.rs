//! Feed run in the test's own process: each [`Node`] is `feed::run` (or
//! `feed::run_with` an in-process handler) on a runtime and thread of its
//! own, so a test can stop it gracefully (the shutdown future, as SIGTERM)
//! or kill it (its runtime dropped at once: nothing more is written,
//! nothing released, as SIGKILL). A [`Scene`] is a recording handler and
//! the nodes sending it work, all reading one movable database clock, so a
//! test moves time (session expiry, backoff, schedules) instead of
//! sleeping through it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::response::Response;
use feed::{Clock, Config};
use tokio::sync::oneshot;

use crate::handler::{Call, Handler};
use crate::process::free_port;

/// Settings that make a test run in a second rather than a minute: the
/// intervals of the binary's tests (`--poll-interval 50ms` and so on).
pub fn fast(database_url: &str, handler_url: &str, clock: Clock) -> Config {
    let mut c = Config::new(database_url, handler_url);
    c.database.clock = clock;
    c.dispatch.poll_interval = Duration::from_millis(50);
    c.dispatch.drain_timeout = Duration::from_secs(5);
    c.leases.heartbeat_interval = Duration::from_millis(200);
    c.leases.session_expiry = Duration::from_secs(2);
    c.leases.acquire_interval = Duration::from_millis(200);
    c.retries.backoff_base = Duration::from_millis(50);
    c.retries.backoff_max = Duration::from_millis(200);
    c.handler.request_timeout = Duration::from_secs(5);
    c.listen.address = Some(format!("127.0.0.1:{}", free_port()));
    c
}

/// One processor running in this process.
pub struct Node {
    /// Its listen address (health, metrics, the API), when it has one.
    pub listen: Option<String>,
    /// Its log: what its tasks logged, as the binary's text log at
    /// `info,feed=debug`. A lasting condition is logged at a bounded rate
    /// per process, not per node: a test that waits for such a line keeps
    /// the binary.
    log: Arc<Mutex<Vec<u8>>>,
    stop: Option<oneshot::Sender<()>>,
    kill: Option<oneshot::Sender<()>>,
    ended: Option<oneshot::Receiver<feed::Result<()>>>,
}

impl Node {
    /// Starts `feed::run(config)`: items go to `config.handler.url`.
    pub fn start(config: Config) -> Node {
        Self::start_inner(config, None)
    }

    /// Starts `feed::run_with(config, handler)`.
    pub fn start_with(config: Config, handler: Arc<dyn feed::Handler>) -> Node {
        Self::start_inner(config, Some(handler))
    }

    fn start_inner(config: Config, handler: Option<Arc<dyn feed::Handler>>) -> Node {
        let listen = config.listen.address.clone();
        let (stop, stopped) = oneshot::channel::<()>();
        let (kill, killed) = oneshot::channel::<()>();
        let (end, ended) = oneshot::channel();
        let log = Arc::new(Mutex::new(Vec::new()));
        let logs = logger(log.clone());
        std::thread::spawn(move || {
            let _logs = tracing::dispatcher::set_default(&logs);
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .on_thread_start(move || {
                    // Each of the node's threads logs to the node's log
                    // for as long as it lives.
                    std::mem::forget(tracing::dispatcher::set_default(&logs));
                })
                .build()
                .expect("a runtime for the node");
            let shutdown = async move {
                let _ = stopped.await;
            };
            let run = async move {
                match handler {
                    Some(h) => feed::run_with(config, h, shutdown).await,
                    None => feed::run(config, shutdown).await,
                }
            };
            let result = runtime.block_on(async move {
                tokio::select! {
                    r = run => Some(r),
                    _ = killed => None,
                }
            });
            // Killed: every task of the node is dropped where it stands.
            runtime.shutdown_background();
            if let Some(r) = result {
                let _ = end.send(r);
            }
        });
        Node {
            listen,
            log,
            stop: Some(stop),
            kill: Some(kill),
            ended: Some(ended),
        }
    }

    /// Asks it to stop as SIGTERM does and waits up to `limit` for the
    /// end: drain, write, release, delete the session. None when it did
    /// not end in time (it is killed then).
    pub async fn stop(&mut self, limit: Duration) -> Option<feed::Result<()>> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let ended = self.ended.take()?;
        match tokio::time::timeout(limit, ended).await {
            Ok(Ok(result)) => Some(result),
            _ => {
                self.kill();
                None
            }
        }
    }

    /// Ends it at once, as SIGKILL does: its session stays until it
    /// expires, its partitions stay held, its calls are cut off.
    pub fn kill(&mut self) {
        if let Some(kill) = self.kill.take() {
            let _ = kill.send(());
        }
    }

    /// Whether it has ended by itself (an error, a panic): Some(result).
    pub fn ended(&mut self) -> Option<feed::Result<()>> {
        let ended = self.ended.as_mut()?;
        match ended.try_recv() {
            Ok(r) => {
                self.ended = None;
                Some(r)
            }
            Err(_) => None,
        }
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        let log = self.log.lock().map(|l| l.clone()).unwrap_or_default();
        String::from_utf8_lossy(&log).into_owned()
    }

    /// `/metrics` text; empty when it does not answer.
    pub async fn metrics(&self) -> String {
        let Some(listen) = &self.listen else {
            return String::new();
        };
        let url = format!("http://{listen}/metrics");
        match reqwest::Client::new()
            .get(url)
            .timeout(Duration::from_secs(5))
            .send()
            .await
        {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }
}

/// A node's log in memory: its tasks' events as the binary's text log.
fn logger(log: Arc<Mutex<Vec<u8>>>) -> tracing::Dispatch {
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    let filter = tracing_subscriber::EnvFilter::new("info,feed=debug,sqlx=warn");
    let layer = tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .with_writer(move || Lines(log.clone()))
        .with_filter(feed::logs::Asked(filter));
    tracing::Dispatch::new(tracing_subscriber::registry().with(layer))
}

/// Appends what is written to a node's log.
struct Lines(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Lines {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut log) = self.0.lock() {
            log.extend_from_slice(bytes);
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A recording handler, the clock every node reads, and the nodes.
pub struct Scene {
    /// The handler the nodes send items to.
    pub handler: Handler,
    /// The database clock as the nodes read it; [`Clock::advance`] moves it.
    pub clock: Clock,
    database_url: String,
}

impl Scene {
    /// A handler answering with `answer` for the database at `database_url`;
    /// no node runs yet.
    pub async fn new<F>(database_url: &str, answer: F) -> Scene
    where
        F: Fn(&Call) -> Response + Send + Sync + 'static,
    {
        Self::serving(database_url, Handler::start(answer).await)
    }

    /// The same with a handler already started (one whose answers wait,
    /// say: [`Handler::start_async`]).
    pub fn serving(database_url: &str, handler: Handler) -> Scene {
        Scene {
            handler,
            clock: Clock::movable(),
            database_url: database_url.to_string(),
        }
    }

    /// [`fast`] settings for a node of this scene, to adjust before
    /// [`Scene::node_with`].
    pub fn config(&self) -> Config {
        fast(&self.database_url, &self.handler.url(), self.clock)
    }

    /// Starts a node with [`fast`] settings.
    pub fn node(&self) -> Node {
        Node::start(self.config())
    }

    /// Starts a node with `config` (from [`Scene::config`]).
    pub fn node_with(&self, config: Config) -> Node {
        Node::start(config)
    }
}
