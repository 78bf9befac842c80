//! A TCP proxy between a processor and its database that fails the way a
//! network does: a cut stops forwarding without closing anything (no RST,
//! no FIN: what a partition, a failover to a new address or a firewall that
//! forgot its state looks like), and a heal either resumes every connection
//! or only new ones, the connections that saw the cut staying dead for good.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy forwards now.
#[derive(Clone, Copy, Debug)]
struct Link {
    /// Nothing is forwarded.
    cut: bool,
    /// Connections accepted before this generation never forward again.
    first_alive: u64,
    /// Bumped by every heal that kills the connections it finds.
    generation: u64,
}

impl Link {
    fn forwards(&self, born: u64) -> bool {
        !self.cut && born >= self.first_alive
    }
}

/// The proxy; dropping it closes every connection it holds.
pub struct Proxy {
    pub addr: SocketAddr,
    link: watch::Sender<Link>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free port and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (link, _) = watch::channel(Link {
            cut: false,
            first_alive: 0,
            generation: 0,
        });
        let rx = link.subscribe();
        let task = tokio::spawn(async move {
            // Owning the connections here: aborting this task closes them all.
            let mut conns = tokio::task::JoinSet::new();
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let born = rx.borrow().generation;
                let rx = rx.clone();
                conns.spawn(async move {
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    tokio::join!(
                        pump(cr, sw, born, rx.clone()),
                        pump(sr, cw, born, rx.clone())
                    );
                });
                while conns.try_join_next().is_some() {}
            }
        });
        Proxy { addr, link, task }
    }

    /// `url` (a PostgreSQL or MySQL test database) with its host and port
    /// replaced by the proxy's.
    pub fn url(&self, url: &str) -> String {
        let mut u = url::Url::parse(url).unwrap();
        u.set_port(Some(self.addr.port())).unwrap();
        u.to_string()
    }

    /// Stops forwarding in both directions; every socket stays open.
    pub fn cut(&self) {
        self.link.send_modify(|l| l.cut = true);
    }

    /// Forwards again, held bytes first, on every connection.
    pub fn heal(&self) {
        self.link.send_modify(|l| l.cut = false);
    }

    /// Forwards again, but only on connections accepted from now on: those
    /// open at the cut (or accepted during it) stay dead for good.
    pub fn heal_fresh(&self) {
        self.link.send_modify(|l| {
            l.generation += 1;
            l.first_alive = l.generation;
            l.cut = false;
        });
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Copies `from` to `to` while the link forwards for a connection of
/// generation `born`; bytes read meanwhile are held, and so is the end of
/// the stream (a dead link carries no FIN either).
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    born: u64,
    mut link: watch::Receiver<Link>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = from.read(&mut buf).await.unwrap_or(0);
        if link.wait_for(|l| l.forwards(born)).await.is_err() {
            return;
        }
        if n == 0 || to.write_all(&buf[..n]).await.is_err() {
            let _ = to.shutdown().await;
            return;
        }
    }
}

/// The address a test database URL points at.
pub fn upstream(url: &str) -> SocketAddr {
    let u = url::Url::parse(url).unwrap();
    let host = u.host_str().unwrap();
    format!("{host}:{}", u.port().unwrap()).parse().unwrap()
}

/// Declares one test per networked backend (PostgreSQL, MariaDB) for
/// `async fn $name(db: TestDb)`; SQLite has no network to cut.
#[macro_export]
macro_rules! on_network_backends {
    (alone $name:ident) => {
        $crate::backend_tests!(alone $name: postgres => Postgres, mariadb => Mysql);
    };
    ($name:ident) => {
        $crate::backend_tests!($name: postgres => Postgres, mariadb => Mysql);
    };
    (slow $name:ident) => {
        $crate::backend_tests!($name: postgres => Postgres [slow], mariadb => Mysql [slow]);
    };
    (slow alone $name:ident) => {
        $crate::backend_tests!(alone $name: postgres => Postgres [slow], mariadb => Mysql [slow]);
    };
}
