//! Network faults between a processor and its database: connections that
//! stop answering without being closed (a partition, a failover, a firewall
//! that forgot the flow) must never hang the processor. The processor under
//! test talks to the database through [`Proxy`]; a second one, when there
//! is one, talks to it directly.

use std::process::ExitStatus;
use std::time::{Duration, Instant};

use feed::store::{NewItem, PartitionSpec};
use sea_orm::{ConnectionTrait, TransactionTrait};
use serde_json::json;

use crate::backend_tests;
use crate::on_network_backends;
use crate::proxy::{Proxy, upstream};
use crate::support::{
    Backend, Call, Handler, Proc, TestDb, json as reply, metric, tail, wait_for, waited,
};

on_network_backends!(dead_connections_give_back_their_pool_slots);
/// Statements cut off on dead connections do not keep their pool slots:
/// sqlx pings every connection it takes back, with no time limit of its
/// own, so without the store's bounded check each dead connection would
/// hold its slot for good and, the pool full of them, nothing would run.
/// Plain TCP: over TLS, sqlx's own close of a connection that failed the
/// check still waits for the silent peer (see the book, "Network faults and failover").
async fn dead_connections_give_back_their_pool_slots(db: TestDb) {
    let proxy = Proxy::start(upstream(&db.url)).await;
    let limit = Duration::from_secs(1);
    let store = feed::Store::connect_with(&plain(&proxy, &db), 2, limit)
        .await
        .unwrap();
    let (sleep, sleeping) = match db.backend {
        Backend::Postgres => (
            "SELECT pg_sleep(5)",
            "SELECT COUNT(*) AS n FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep%'",
        ),
        _ => (
            "SELECT SLEEP(5)",
            "SELECT COUNT(*) AS n FROM information_schema.processlist WHERE info LIKE 'SELECT SLEEP%'",
        ),
    };
    let run = |sql: &'static str| {
        let s = store.clone();
        async move {
            let st = testkit::statement(s.driver(), sql, vec![]);
            s.bounded(s.connection().query_all_raw(st)).await
        }
    };
    // Both connections of the pool busy when the network dies.
    let busy: Vec<_> = (0..2).map(|_| tokio::spawn(run(sleep))).collect();
    wait_for("two statements running", WAIT, || async {
        let rows = db.query(sleeping, vec![]).await;
        rows[0].try_get::<i64>("", "n").unwrap() == 2
    })
    .await;
    proxy.cut();
    proxy.heal_fresh();
    for call in busy {
        let r = call.await.unwrap();
        assert!(matches!(r, Err(feed::Error::StatementTimeout(_))), "{r:?}");
    }
    wait_for(
        "a statement on a fresh connection",
        Duration::from_secs(20),
        || async { run("SELECT 1").await.is_ok() },
    )
    .await;
}

/// `db` through `proxy`, over plain TCP.
fn plain(proxy: &Proxy, db: &TestDb) -> String {
    match db.backend {
        Backend::Postgres => format!("{}?sslmode=disable", proxy.url(&db.url)),
        _ => format!("{}?ssl-mode=disabled", proxy.url(&db.url)),
    }
}

on_network_backends!(one_cut_off_statement_retires_the_idle_connections);
/// Connections idle in the pool when the network died are as dead as the
/// one a statement was cut off on: once a statement has been cut off, the
/// next ones do not wait out a timeout each on the others, they get fresh
/// connections (a heartbeat meeting two dead connections in a row would
/// outlive its session). Over TLS, PostgreSQL's default here, as a
/// processor connects.
async fn one_cut_off_statement_retires_the_idle_connections(db: TestDb) {
    let proxy = Proxy::start(upstream(&db.url)).await;
    let store = feed::Store::connect_with(&proxy.url(&db.url), 8, Duration::from_secs(1))
        .await
        .unwrap();
    let run = |sql: &'static str| {
        let s = store.clone();
        async move {
            let st = testkit::statement(s.driver(), sql, vec![]);
            s.bounded(s.connection().query_all_raw(st)).await
        }
    };
    let sleep = match db.backend {
        Backend::Postgres => "SELECT pg_sleep(0.3)",
        _ => "SELECT SLEEP(0.3)",
    };
    // Four connections opened at once, then idle.
    let opened: Vec<_> = (0..4).map(|_| tokio::spawn(run(sleep))).collect();
    for call in opened {
        call.await.unwrap().unwrap();
    }
    proxy.cut();
    proxy.heal_fresh();
    let first = run("SELECT 1").await;
    assert!(
        matches!(first, Err(feed::Error::StatementTimeout(_))),
        "the first statement meets a dead idle connection: {first:?}"
    );
    for n in 2..=4 {
        let next = run("SELECT 1").await;
        assert!(next.is_ok(), "statement {n} after the cut-off: {next:?}");
    }
}

backend_tests!(mariadb_ends_a_transaction_cut_off_before_its_commit: mariadb => Mysql);
/// MariaDB: a processor cut off between a transaction's UPDATE and its
/// COMMIT leaves the server holding that transaction's row locks, which
/// block whoever takes its partitions over. The server ends a transaction
/// idle for longer than the statement timeout (its client has given up).
/// PostgreSQL needs no such test: the processor writes there in single
/// statements, which never leave a transaction open.
async fn mariadb_ends_a_transaction_cut_off_before_its_commit(db: TestDb) {
    let proxy = Proxy::start(upstream(&db.url)).await;
    db.partition("p", true, false, "block").await;
    let limit = Duration::from_secs(1);
    let cut_off = feed::Store::connect_with(&proxy.url(&db.url), 2, limit)
        .await
        .unwrap();
    let txn = cut_off.connection().begin().await.unwrap();
    let lock = "UPDATE feed_partitions SET version = version + 1 WHERE id = ?";
    txn.execute_raw(testkit::statement(cut_off.driver(), lock, vec!["p".into()]))
        .await
        .unwrap();
    proxy.cut();
    proxy.heal_fresh();
    // Without the server ending it, this waits out the lock wait timeout
    // and fails.
    db.exec(
        "SET STATEMENT innodb_lock_wait_timeout = 20 FOR \
         UPDATE feed_partitions SET owner = 'other', version = version + 1 WHERE id = ?",
        vec!["p".into()],
    )
    .await;
    assert_eq!(db.partition_row("p").await.2.as_deref(), Some("other"));
    drop(txn);
}

/// FAST plus a short statement timeout and few slots, so that work lasts
/// long enough to be cut in the middle.
const OPTS: &[&str] = &["--statement-timeout", "1s", "--concurrency", "4"];
const EXPIRY: Duration = Duration::from_secs(2);
const ACQUIRE: Duration = Duration::from_millis(200);
const DRAIN: Duration = Duration::from_secs(5);
const WAIT: Duration = Duration::from_secs(60);

/// A handler that takes every item through three steps: `n` goes 0, 1, 2,
/// then 3 with `done`. Each step bumps the item's version once, so a final
/// version above 3 would mean a step written twice.
async fn stepper(delay: Duration) -> Handler {
    Handler::start_async(move |c: Call| async move {
        tokio::time::sleep(delay).await;
        let n = c.data["n"].as_i64().unwrap_or(0);
        reply(200, json!({"done": n >= 2, "data": {"n": n + 1}}))
    })
    .await
}

/// Partitions of `items` items each, every partition written with its items
/// in one transaction (an empty one could be closed before they arrive).
/// A proxy in front of `db`, and `db` as seen through it.
async fn behind_proxy(db: &TestDb) -> (Proxy, TestDb) {
    let proxy = Proxy::start(upstream(&db.url)).await;
    let via = TestDb::alias(db, &proxy.url(&db.url));
    (proxy, via)
}

/// Processor `a` reaches the database through `proxy`, processor `direct`
/// straight; both are registered and `a` (session `a_old`) is at work on
/// the `first` items (6 partitions of 10).
struct Split {
    proxy: Proxy,
    h: Handler,
    a: Proc,
    direct: Proc,
    a_old: String,
    first: Vec<String>,
}

impl Split {
    async fn at_work(db: &TestDb) -> Split {
        let (proxy, via) = behind_proxy(db).await;
        let h = stepper(Duration::from_millis(50)).await;
        let a = Proc::start(&via, &h.url(), OPTS);
        let direct = Proc::start(db, &h.url(), OPTS);
        wait_for("two sessions", WAIT, || async {
            session_of(db, &a).await.is_some() && session_of(db, &direct).await.is_some()
        })
        .await;
        let a_old = session_of(db, &a).await.unwrap();
        let first = enqueue(db, "p", 6, 10).await;
        wait_for("the processor behind the proxy at work", WAIT, || async {
            h.calls().iter().filter(|c| c.processor == a_old).count() >= 4
        })
        .await;
        Split {
            proxy,
            h,
            a,
            direct,
            a_old,
            first,
        }
    }
}

/// The cut-off processor is ready again and counted a statement timeout.
async fn assert_recovered(a: &Proc) {
    wait_for("ready again", WAIT, || async { readyz(a).await == 200 }).await;
    assert!(metric(&a.metrics().await, "feed_statement_timeouts_total") >= 1.0);
}

async fn enqueue(db: &TestDb, prefix: &str, partitions: usize, items: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for p in 0..partitions {
        let pid = format!("{prefix}{p}");
        let new = (0..items)
            .map(|i| NewItem::new(br#"{"n": 0}"#.to_vec()).with_id(format!("{pid}-{i}")))
            .collect();
        db.store
            .enqueue(&pid, &PartitionSpec::default(), new)
            .await
            .unwrap();
        ids.push(pid);
    }
    ids
}

/// Every step of every item of `partitions` was written exactly once.
async fn assert_exactly_once(db: &TestDb, partitions: &[String], items: usize) {
    for p in partitions {
        assert_eq!(db.partition_status(p).await, "complete", "partition {p}");
        for i in 0..items {
            let row = db.item_row(&format!("{p}-{i}")).await;
            assert_eq!(row.status, "complete", "{p}-{i}");
            assert_eq!(row.data, json!({"n": 3}), "{p}-{i}");
            assert_eq!(row.version, 3, "{p}-{i}: a step was written twice");
        }
    }
}

async fn all_complete(db: &TestDb, partitions: &[String]) -> bool {
    for p in partitions {
        if db.partition_status(p).await != "complete" {
            return false;
        }
    }
    true
}

/// The session row of the process `p`, if it has one.
async fn session_of(db: &TestDb, p: &Proc) -> Option<String> {
    db.query(
        "SELECT id FROM feed_processors WHERE pid = ?",
        vec![i64::from(p.child.id()).into()],
    )
    .await
    .first()
    .map(|r| r.try_get("", "id").unwrap())
}

/// Owners of the partitions still available.
async fn active_owners(db: &TestDb) -> Vec<Option<String>> {
    db.query(
        "SELECT owner FROM feed_partitions WHERE status = 'available'",
        vec![],
    )
    .await
    .iter()
    .map(|r| r.try_get("", "owner").unwrap())
    .collect()
}

async fn readyz(p: &Proc) -> u16 {
    let url = format!("http://{}/readyz", p.listen.as_ref().unwrap());
    match reqwest::get(url).await {
        Ok(r) => r.status().as_u16(),
        Err(_) => 0,
    }
}

/// Sends SIGTERM and waits up to `bound` for the exit; kills the process
/// and fails when it does not exit in time.
async fn terminate_within(p: &mut Proc, bound: Duration) -> (Duration, ExitStatus) {
    let started = Instant::now();
    let _ = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(p.child.id().to_string())
        .status();
    while started.elapsed() < bound {
        if let Some(status) = p.child.try_wait().unwrap() {
            return (started.elapsed(), status);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no exit {bound:?} after SIGTERM:\n{}", p.log());
}

on_network_backends!(cut_off_processor_is_taken_over_and_recovers);
/// A processor cut off from the database while another runs: the other
/// takes its partitions within the expiry plus one acquire interval, the
/// cut-off one calls the handler no more after its expiry, every step is
/// written once, and after the heal it registers anew and works again.
async fn cut_off_processor_is_taken_over_and_recovers(db: TestDb) {
    let Split {
        proxy,
        h,
        a,
        direct,
        a_old,
        first,
    } = Split::at_work(&db).await;
    let b_session = session_of(&db, &direct).await.unwrap();

    proxy.cut();
    let cut = Instant::now();
    wait_for("every active partition taken over", WAIT, || async {
        active_owners(&db)
            .await
            .iter()
            .all(|o| o.as_deref() == Some(b_session.as_str()))
    })
    .await;
    let takeover = cut.elapsed();
    eprintln!("{:?}: takeover {takeover:?} after the cut", db.backend);
    assert!(
        takeover < EXPIRY + ACQUIRE + Duration::from_secs(2),
        "takeover took {takeover:?}"
    );
    wait_for("not ready while cut off", WAIT, || async {
        readyz(&a).await == 503
    })
    .await;
    wait_for("all work done by the other processor", WAIT, || async {
        all_complete(&db, &first).await
    })
    .await;
    // Its session's last good heartbeat was before the cut; a call started
    // just before its expiry may reach the handler a moment later.
    let late: Vec<Call> = h
        .calls()
        .into_iter()
        .filter(|c| c.processor == a_old && c.at > cut + EXPIRY + Duration::from_millis(500))
        .collect();
    assert!(late.is_empty(), "handler called after the expiry: {late:?}");
    assert_exactly_once(&db, &first, 10).await;

    proxy.heal();
    wait_for("a new session after the heal", WAIT, || async {
        session_of(&db, &a).await.is_some_and(|s| s != a_old)
    })
    .await;
    let healed = Instant::now();
    let second = enqueue(&db, "q", 6, 10).await;
    wait_for("second batch done", WAIT, || async {
        all_complete(&db, &second).await
    })
    .await;
    // Under whichever session it holds now (a heavy load may have cost
    // it the first one after the heal too).
    assert!(
        h.calls()
            .iter()
            .any(|c| c.at > healed && c.processor != a_old && c.processor != b_session),
        "the healed processor took part"
    );
    assert_exactly_once(&db, &second, 10).await;
    assert_recovered(&a).await;
}

on_network_backends!(dead_connections_are_replaced);
/// The connections open at the cut stay dead after the heal (only new ones
/// work): every task of the cut-off processor gives them up and goes on with
/// fresh ones. Alone afterwards, it heartbeats and finishes new work.
async fn dead_connections_are_replaced(db: TestDb) {
    let Split {
        proxy,
        h: _h,
        a,
        mut direct,
        a_old: _,
        first,
    } = Split::at_work(&db).await;

    proxy.cut();
    wait_for("its session expired and was deleted", WAIT, || async {
        session_of(&db, &a).await.is_none()
    })
    .await;
    proxy.heal_fresh();
    let renewed = waited(WAIT, || async { session_of(&db, &a).await.is_some() }).await;
    assert!(
        renewed,
        "no new session on fresh connections within {WAIT:?}; the processor's log ends:\n{}",
        tail(&a.log(), 40)
    );
    if db.backend == Backend::Postgres {
        wait_for("the dead LISTEN connection replaced", WAIT, || async {
            a.log().contains("LISTEN connection did not answer a ping")
        })
        .await;
    }
    wait_for("first batch done", WAIT, || async {
        all_complete(&db, &first).await
    })
    .await;
    assert_exactly_once(&db, &first, 10).await;

    // Alone now: dispatch, the completer and the heartbeat must all work.
    let (_, status) = terminate_within(&mut direct, DRAIN + Duration::from_secs(15)).await;
    assert!(status.success());
    let second = enqueue(&db, "q", 4, 10).await;
    wait_for(
        "second batch done by the healed processor alone",
        WAIT,
        || async { all_complete(&db, &second).await },
    )
    .await;
    assert_exactly_once(&db, &second, 10).await;
    // Heartbeats go on. Under a heavy load one may still have met a
    // connection of the cut in the pool and outlived the session: the
    // processor then registers a new one (its row and beats count too).
    let beat = tokio::time::timeout(WAIT, async {
        loop {
            if let Some(t) = last_beat(&db, &a).await {
                return t;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the processor has a session");
    wait_for("heartbeats go on", WAIT, || async {
        last_beat(&db, &a).await.is_some_and(|t| t > beat)
    })
    .await;
    assert_recovered(&a).await;
}

/// The latest heartbeat of the process `p`'s session, if it has one.
async fn last_beat(db: &TestDb, p: &Proc) -> Option<i64> {
    db.query(
        "SELECT MAX(heartbeat_at) AS beat FROM feed_processors WHERE pid = ?",
        vec![i64::from(p.child.id()).into()],
    )
    .await
    .first()
    .and_then(|r| r.try_get::<Option<i64>>("", "beat").unwrap())
}

on_network_backends!(slow sigterm_exits_in_bounded_time_whatever_the_network);
/// SIGTERM while the database does not answer, and right after a heal that
/// left the old connections dead: the process exits within the drain
/// timeout plus the release bound every time, also with a statement timeout
/// far longer than both (the shutdown bounds do not rest on it). The hang
/// this guards against was intermittent, so it is tried several times.
async fn sigterm_exits_in_bounded_time_whatever_the_network(db: TestDb) {
    let (proxy, via) = behind_proxy(&db).await;
    let h = stepper(Duration::from_millis(300)).await;
    let bound = DRAIN + feed::run::RELEASE_BOUND + Duration::from_secs(5);
    let mut times = Vec::new();
    for round in 0..8 {
        let dead_after_heal = round % 2 == 1;
        // A heartbeat is cut off after half the expiry whatever this is,
        // so a timeout still shows when the database stops answering.
        let statement_timeout = if round < 4 { "1s" } else { "60s" };
        proxy.heal();
        enqueue(&db, &format!("r{round}p"), 2, 8).await;
        let opts = [OPTS, &["--statement-timeout", statement_timeout]].concat();
        let mut a = Proc::start(&via, &h.url(), &opts);
        wait_for("registered", WAIT, || async {
            session_of(&db, &a).await.is_some()
        })
        .await;
        let me = session_of(&db, &a).await.unwrap();
        wait_for("calls in flight", WAIT, || async {
            h.calls().iter().any(|c| c.processor == me)
        })
        .await;
        proxy.cut();
        wait_for("a statement timed out", WAIT, || async {
            metric(&a.metrics().await, "feed_statement_timeouts_total") >= 1.0
        })
        .await;
        if dead_after_heal {
            proxy.heal_fresh();
        }
        let (took, status) = terminate_within(&mut a, bound).await;
        assert!(status.success(), "exit status {status:?}:\n{}", a.log());
        times.push(took);
    }
    eprintln!(
        "{:?}: SIGTERM exit times (cut, dead after heal, …; statement timeout 1s, then 60s): {times:?}",
        db.backend
    );
}

on_network_backends!(database_connections_send_without_delay);
/// Every connection the store opens has `TCP_NODELAY`: without it a
/// statement larger than one socket write waits for the server's delayed
/// ACK (40 ms on Linux) before its tail is sent. Other tests open sockets
/// in this process at the same time, so the check is on the sockets to the
/// database that appeared while this store connected: at least one of them
/// is the store's, and sqlx 0.9 alone sets the option on none.
async fn database_connections_send_without_delay(db: TestDb) {
    let port = upstream(&db.url).port();
    let before = db_sockets(port);
    let store = feed::Store::connect(&db.url, 2).await.unwrap();
    store.now_ms().await.unwrap();
    let new: Vec<(i32, bool)> = db_sockets(port)
        .into_iter()
        .filter(|(fd, _)| !before.iter().any(|(b, _)| b == fd))
        .collect();
    assert!(!new.is_empty(), "no new connection to port {port} was seen");
    assert!(
        new.iter().any(|(_, nodelay)| *nodelay),
        "no new connection to port {port} has TCP_NODELAY: {new:?}"
    );
}

/// This process's TCP sockets connected to `port`, with whether each has
/// `TCP_NODELAY`.
#[allow(unsafe_code)] // sound for the reason beside the call
fn db_sockets(port: u16) -> Vec<(i32, bool)> {
    use std::os::fd::FromRawFd;
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return vec![];
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|fd| {
            // SAFETY: the stream is never dropped (ManuallyDrop), so the
            // descriptor is only inspected, not closed; on a descriptor that
            // is not a TCP socket (or was closed since) the calls fail.
            let s = std::mem::ManuallyDrop::new(unsafe { std::net::TcpStream::from_raw_fd(fd) });
            let peer = s.peer_addr().ok()?;
            (peer.port() == port).then(|| (fd, s.nodelay().unwrap_or(false)))
        })
        .collect()
}
