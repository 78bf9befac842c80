//! The `processor` binary as a child process: spawned with a clean
//! environment and a log file, read through `/metrics` and `/proc`,
//! stopped with SIGTERM, killed when dropped.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// A free TCP port on 127.0.0.1 (nothing listens on it when this returns).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port on 127.0.0.1")
        .port()
}

/// A port on 127.0.0.1 held bound but not listening: connections to it are
/// refused, and no other socket (another test's client, an outgoing
/// connection's source port) can take it until [`Reserved::listen`].
pub struct Reserved(tokio::net::TcpSocket);

impl Reserved {
    /// Binds a fresh port.
    pub fn new() -> Reserved {
        let socket = tokio::net::TcpSocket::new_v4().expect("a TCP socket");
        socket
            .bind(([127, 0, 0, 1], 0).into())
            .expect("a free port on 127.0.0.1");
        Reserved(socket)
    }

    /// The port held.
    pub fn port(&self) -> u16 {
        self.0.local_addr().expect("a bound socket").port()
    }

    /// Starts listening on the held port (needs a Tokio runtime).
    pub fn listen(self) -> tokio::net::TcpListener {
        self.0.listen(1024).expect("listen on the held port")
    }
}

impl Default for Reserved {
    fn default() -> Self {
        Self::new()
    }
}

/// A running `processor run` with `--listen` on a free port.
pub struct Process {
    /// The child.
    pub child: Child,
    /// Its `--listen` address.
    pub listen: String,
    /// When it was spawned.
    pub spawned: Instant,
    log: PathBuf,
}

impl Process {
    /// Spawns `bin run --database-url … --handler-url … --listen … args…`
    /// with `RUST_LOG` = `log_filter` (None = unset) and no `FEED_*`
    /// variables from this environment; stderr goes to a log file.
    pub fn spawn(
        bin: &str,
        database_url: &str,
        handler_url: &str,
        args: &[&str],
        log_filter: Option<&str>,
    ) -> Result<Process> {
        Self::spawn_with_env(bin, database_url, handler_url, args, log_filter, &[])
    }

    /// [`Process::spawn`] with variables `env` set (the OpenTelemetry ones,
    /// say); none is inherited from the test's environment.
    pub fn spawn_with_env(
        bin: &str,
        database_url: &str,
        handler_url: &str,
        args: &[&str],
        log_filter: Option<&str>,
        env: &[(&str, &str)],
    ) -> Result<Process> {
        remember_panics();
        let listen = format!("127.0.0.1:{}", free_port());
        let log =
            std::env::temp_dir().join(format!("feed-proc-{}.log", uuid::Uuid::new_v4().simple()));
        let mut cmd = Command::new(bin);
        cmd.arg("run")
            .args(["--database-url", database_url])
            .args(["--handler-url", handler_url])
            .args(["--listen", &listen])
            .args(args);
        for (k, _) in std::env::vars_os() {
            if let Some(k) = k.to_str()
                && (k.starts_with("FEED_")
                    || k.starts_with("OTEL_")
                    || k == "RUST_LOG"
                    || k == "TRACEPARENT")
            {
                cmd.env_remove(k);
            }
        }
        cmd.envs(env.iter().copied());
        if let Some(filter) = log_filter {
            cmd.env("RUST_LOG", filter);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?);
        let child = cmd.spawn().with_context(|| format!("spawning {bin}"))?;
        Ok(Process {
            child,
            listen,
            spawned: Instant::now(),
            log,
        })
    }

    /// The log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = self.log();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Fails with the end of the log when the processor has exited.
    pub fn check_alive(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!(
                "processor exited early ({status}); log tail:\n{}",
                self.log_tail(15)
            );
        }
        Ok(())
    }

    /// `/metrics` text; empty when it does not answer.
    pub async fn metrics(&self, client: &reqwest::Client) -> String {
        let url = format!("http://{}/metrics", self.listen);
        match client.get(url).timeout(Duration::from_secs(5)).send().await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    /// VmRSS and VmHWM from /proc, in MiB (Linux only).
    pub fn memory(&self) -> (Option<f64>, Option<f64>) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
                .map(|kb| kb / 1024.0)
        };
        (field("VmRSS:"), field("VmHWM:"))
    }

    /// Sends SIGTERM (graceful: release partitions, delete the session).
    pub fn sigterm(&self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .stderr(Stdio::null())
            .status();
    }

    /// SIGTERM, then waits for the exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        self.sigterm();
        self.child.wait().expect("waiting for the processor")
    }

    /// SIGTERM, then waits up to `limit` without blocking the runtime;
    /// false when it did not stop (it is killed on drop).
    pub async fn stop(&mut self, limit: Duration) -> bool {
        self.sigterm();
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }
}

thread_local! {
    /// The message of this thread's latest panic.
    static PANIC: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Keeps each panic's message for [`Process`]'s drop, which prints the
/// processor's log after it, then hands the panic to the hook before.
fn remember_panics() {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let before = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANIC.with(|p| *p.borrow_mut() = Some(info.to_string()));
            before(info);
        }));
    });
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("---- processor log ----\n{}", self.log());
            // Said again after the log: output is often read from its end.
            PANIC.with(|p| {
                if let Some(p) = p.borrow().as_deref() {
                    eprintln!("---- the test failed: {p}");
                }
            });
        }
        let _ = std::fs::remove_file(&self.log);
    }
}
