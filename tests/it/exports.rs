//! Exports hold memory by bytes, not by items: pages are planned from
//! their items' sizes, lines go out one at a time within the console's
//! export budget, and a reader that stops reading is cut at the
//! write-idle timeout, freeing what its answer held.

use std::time::Duration;

use feed::console::EXPORT_BUDGET_BYTES;
use feed::store::export::{PAGE, PAGE_BYTES};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{Handler, Proc, TestDb};
use crate::{behaviour, slow};

/// A JSON string of `bytes` bytes (its quotes included).
fn data_of(bytes: usize) -> Vec<u8> {
    let mut d = vec![b'x'; bytes];
    d[0] = b'"';
    d[bytes - 1] = b'"';
    d
}

/// A finished partition `id` of `n` items of `bytes` each, written with
/// plain SQL, so that no processor dispatches it.
async fn finished_partition(db: &TestDb, id: &str, n: usize, bytes: usize) {
    db.partition(id, true, false, "block").await;
    db.exec(
        "UPDATE feed_partitions SET status = 'complete' WHERE id = ?",
        vec![id.into()],
    )
    .await;
    for k in 0..n {
        db.exec(
            "INSERT INTO feed_items (id, partition_id, gate, status, data) VALUES (?, ?, 0, 'complete', ?)",
            vec![format!("{id}/{k:04}").into(), id.into(), data_of(bytes).into()],
        )
        .await;
    }
}

behaviour!(pages_are_bounded_by_bytes);
/// Items of 300 KiB come three to a page (1 MiB), items over 1 MiB one to
/// a page, small items [`PAGE`] to a page; every item once, in order.
async fn pages_are_bounded_by_bytes(db: TestDb) {
    for (id, n, bytes, per_page) in [
        ("mid", 10, 300 << 10, 3),
        ("big", 3, (1 << 20) + 10, 1),
        ("small", PAGE + 3, 10, PAGE),
    ] {
        finished_partition(&db, id, n, bytes).await;
        let mut export = db.store.export(id, None, None).unwrap();
        let mut seen = Vec::new();
        while let Some(page) = export.next_page().await.unwrap() {
            let bytes: usize = page.iter().map(|i| i.data.len()).sum();
            assert!(page.len() <= per_page, "{id}: {} items", page.len());
            assert!(
                page.len() == 1 || bytes <= PAGE_BYTES,
                "{id}: {bytes} bytes"
            );
            seen.extend(page.into_iter().map(|i| i.id));
        }
        let want: Vec<String> = (0..n).map(|k| format!("{id}/{k:04}")).collect();
        assert_eq!(seen, want, "{id}");
    }
}

/// A client that asks for `path`, reads 64 bytes of the answer with a
/// receive buffer of 4 KiB, and then stops reading (kept open).
async fn stalled_reader(addr: &str, path: &str) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut s = socket.connect(addr.parse().unwrap()).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    s.write_all(request.as_bytes()).await.unwrap();
    let mut first = [0u8; 64];
    s.read_exact(&mut first).await.unwrap();
    assert!(first.starts_with(b"HTTP/1.1 200"), "{first:?}");
    s
}

/// Items of the partition the stalled readers ask for, and their size.
const ITEMS: usize = 48;
const ITEM_BYTES: usize = 1 << 20;
/// Stalled readers at once.
const READERS: usize = 8;

slow!(stalled_export_readers_are_bounded_and_cut);
/// Eight readers stall on the export of a partition of 48 items of 1 MiB:
/// the processor's peak RSS grows by less than the export budget (64 MiB)
/// over a single full export's peak (each used to hold the whole
/// partition, several times over), each is cut at the
/// write-idle timeout, and the budget they held is free again: a full
/// export still comes through whole.
async fn stalled_export_readers_are_bounded_and_cut(db: TestDb) {
    assert_eq!(EXPORT_BUDGET_BYTES, 64 << 20);
    finished_partition(&db, "big", ITEMS, ITEM_BYTES).await;
    let h = Handler::start(|_| crate::support::done()).await;
    let mut p = Proc::start(&db, &h.url(), &["--ui"]);
    let addr = p.listen.clone().unwrap();
    let url = format!("http://{addr}/api/v1/partitions/big/items.ndjson");
    crate::support::wait_console(&format!("http://{addr}")).await;
    let whole = |url: String| async move {
        let text = reqwest::get(url).await.unwrap().text().await.unwrap();
        text.lines().count()
    };
    assert_eq!(whole(url.clone()).await, ITEMS);
    let (_, single) = p.memory();
    let single = single.expect("VmHWM from /proc");
    let mut readers = Vec::new();
    for _ in 0..READERS {
        readers.push(stalled_reader(&addr, "/api/v1/partitions/big/items.ndjson").await);
    }
    let cut = || {
        p.log()
            .matches("its client read nothing of the answer")
            .count()
    };
    crate::support::wait_for(
        "the stalled readers cut at the write-idle timeout",
        Duration::from_secs(120),
        || async { cut() >= READERS },
    )
    .await;
    let (_, peak) = p.memory();
    let peak = peak.expect("VmHWM from /proc");
    eprintln!("one export: peak {single:.0} MiB; with {READERS} stalled readers: {peak:.0} MiB");
    assert!(
        peak - single < (EXPORT_BUDGET_BYTES >> 20) as f64,
        "{READERS} stalled readers took the peak RSS from {single:.0} to {peak:.0} MiB; \
         the export budget is 64 MiB"
    );
    assert_eq!(
        whole(url).await,
        ITEMS,
        "the budget is free again after the cut"
    );
    p.check_alive().unwrap();
    drop(readers);
}
