//! Fenced result writes: a result is stored only while its item is as it
//! was delivered (version and attempts) and its partition is held by the
//! live session that delivered it; each row of a batch is fenced on its
//! own, and a row the database refuses costs only itself.

use std::time::Duration;

use sea_orm::ConnectionTrait;

use super::{EXPIRY, Kit, conformance};
use crate::status::Status;
use crate::store::{Ack, Fence, ItemWrite, Written};

conformance!(
    a_result_is_stored_once,
    stale_writers_are_refused_one_by_one,
    a_batch_is_fenced_row_by_row,
    a_batch_from_two_sessions_is_fenced_by_each,
    a_batch_of_one_write_is_stored_whole,
    a_batch_of_mixed_writes_is_stored_whole,
    a_long_batch_of_one_write_is_stored_whole,
    a_result_names_the_partition_it_was_delivered_from,
    a_failed_attempt_keeps_the_version,
    an_expired_session_writes_nothing,
    a_refused_row_costs_only_itself,
);

/// The ack of item `id` of `partition`, delivered by `session` at
/// `version` and `attempts`, completing it with `{"r":1}`.
pub(super) fn done(id: &str, partition: &str, session: &str, version: i64, attempts: i32) -> Ack {
    Ack {
        fence: Fence {
            id: id.into(),
            partition_id: partition.into(),
            gate: 0,
            version,
            attempts,
            steps: 0,
        },
        session: session.into(),
        write: ItemWrite {
            status: Status::Complete,
            gate: 0,
            data: Some(bytes::Bytes::from_static(b"{\"r\":1}")),
            attempts: 0,
            steps: 0,
            last_error: None,
            delay: None,
            new_step: true,
            ends: None,
            spawned: None,
        },
    }
}

/// The ack of item `id` of `p`, delivered by `s1`, as a first failed
/// attempt that `error` ended, to be tried again in `secs` seconds.
fn failed_attempt(id: &str, error: &str, secs: u64) -> Ack {
    let mut ack = done(id, "p", "s1", 0, 0);
    ack.write = ItemWrite {
        status: Status::Available,
        gate: 0,
        data: None,
        attempts: 1,
        steps: 0,
        last_error: Some(error.into()),
        delay: Some(Duration::from_secs(secs)),
        new_step: false,
        ends: None,
        spawned: None,
    };
    ack
}

/// Sessions `s1` and `s2`; `p` held by s1 with items a, b, c, e (b's
/// version and c's attempts moved on since delivery); `q` held by s2 with d.
async fn scene(k: &Kit) -> Vec<Ack> {
    k.session("s1").await;
    k.session("s2").await;
    k.partition("p", Some("s1")).await;
    k.partition("q", Some("s2")).await;
    for id in ["a", "b", "c", "e"] {
        k.item(id, "p", 0, "available").await;
    }
    k.item("d", "q", 0, "available").await;
    k.sqls(&[
        "UPDATE feed_items SET version = 5 WHERE id = 'b'",
        "UPDATE feed_items SET attempts = 2 WHERE id = 'c'",
    ])
    .await;
    vec![
        done("a", "p", "s1", 0, 0),
        done("b", "p", "s1", 0, 0),
        done("c", "p", "s1", 0, 0),
        done("d", "q", "s1", 0, 0),
        done("e", "p", "s1", 0, 0),
    ]
}

/// Session `s1` holding `p` with one available item, `x`.
async fn lone_item(k: &Kit) {
    k.session("s1").await;
    k.partition("p", Some("s1")).await;
    k.item("x", "p", 0, "available").await;
}

/// Item `id`'s data.
async fn data(k: &Kit, id: &str) -> Vec<u8> {
    k.store.item_data(None, id).await.unwrap()
}

async fn write(k: &Kit, acks: &[Ack]) -> Vec<Written> {
    k.store.write_results(acks, EXPIRY).await.unwrap()
}

/// What the scene's rows must be after its acks were written.
async fn scene_after(k: &Kit) {
    scene_after_but_d(k).await;
    assert_eq!(k.item_row("d").await, ("available".into(), 0, 0, 0));
}

/// The scene's rows of `p` after its acks were written.
async fn scene_after_but_d(k: &Kit) {
    assert_eq!(k.item_row("a").await, ("complete".into(), 0, 1, 0));
    assert_eq!(k.item_row("b").await, ("available".into(), 0, 5, 0));
    assert_eq!(k.item_row("c").await, ("available".into(), 0, 0, 2));
    assert_eq!(k.item_row("e").await, ("complete".into(), 0, 1, 0));
}

async fn a_result_is_stored_once(k: Kit) {
    lone_item(&k).await;
    let ack = done("x", "p", "s1", 0, 0);
    let w = write(&k, std::slice::from_ref(&ack)).await;
    assert_eq!(w, vec![Written::Yes]);
    assert_eq!(k.item_row("x").await, ("complete".into(), 0, 1, 0));
    assert_eq!(data(&k, "x").await, b"{\"r\":1}");
    // The same delivery again (a duplicate answer): the version moved on.
    let w = write(&k, &[ack]).await;
    assert_eq!(w, vec![Written::Stale]);
    assert_eq!(k.item_row("x").await, ("complete".into(), 0, 1, 0));
}

async fn stale_writers_are_refused_one_by_one(k: Kit) {
    let acks = scene(&k).await;
    let mut got = Vec::new();
    for ack in acks {
        got.extend(write(&k, &[ack]).await);
    }
    use Written::{Stale, Yes};
    assert_eq!(got, vec![Yes, Stale, Stale, Stale, Yes]);
    scene_after(&k).await;
}

async fn a_batch_is_fenced_row_by_row(k: Kit) {
    let acks = scene(&k).await;
    let got = write(&k, &acks).await;
    use Written::{Stale, Yes};
    assert_eq!(got, vec![Yes, Stale, Stale, Stale, Yes]);
    scene_after(&k).await;
}

/// Results that two sessions delivered in one batch (a session registered
/// again, with results of the old one still queued): each row is fenced
/// on its own session and answered in its place.
async fn a_batch_from_two_sessions_is_fenced_by_each(k: Kit) {
    let mut acks = scene(&k).await;
    // d (of q, held by s2) delivered by s2 passes; f (of p, held by s1)
    // delivered by s2 does not.
    k.item("f", "p", 0, "available").await;
    acks[3].session = "s2".into();
    acks.insert(1, done("f", "p", "s2", 0, 0));
    let got = write(&k, &acks).await;
    use Written::{Stale, Yes};
    assert_eq!(got, vec![Yes, Stale, Stale, Stale, Yes, Yes]);
    assert_eq!(k.item_row("d").await, ("complete".into(), 0, 1, 0));
    assert_eq!(k.item_row("f").await, ("available".into(), 0, 0, 0));
    scene_after_but_d(&k).await;
}

/// Session `s1` holding `p` with available items `ids`, and `q` with `y`.
async fn many_items(k: &Kit, ids: &[&str]) {
    lone_item(k).await;
    k.partition("q", Some("s1")).await;
    k.item("y", "q", 0, "available").await;
    for id in ids {
        k.item(id, "p", 0, "available").await;
    }
}

/// Every result of the batch the same write (a drain's usual batch, which
/// MySQL/MariaDB write with one single-table `UPDATE`), across partitions
/// and with rows the fence passes only: all stored by the batch statement
/// (not row by row after it), each row's version bumped once.
async fn a_batch_of_one_write_is_stored_whole(k: Kit) {
    many_items(&k, &["a", "b"]).await;
    let acks: Vec<Ack> = [("x", "p"), ("a", "p"), ("y", "q"), ("b", "p")]
        .iter()
        .map(|(id, p)| done(id, p, "s1", 0, 0))
        .collect();
    let before = k.store.statements.get();
    let got = write(&k, &acks).await;
    assert_eq!(got, vec![Written::Yes; 4]);
    // One statement, or the partitions' lock and one on MySQL/MariaDB.
    assert!(k.store.statements.get() - before <= 2);
    for id in ["x", "a", "y", "b"] {
        assert_eq!(k.item_row(id).await, ("complete".into(), 0, 1, 0), "{id}");
        assert_eq!(data(&k, id).await, b"{\"r\":1}", "{id}");
    }
}

/// 300 results of one write: more than one batch statement holds (256
/// rows), each batch stored by its statement, none row by row.
async fn a_long_batch_of_one_write_is_stored_whole(k: Kit) {
    let ids: Vec<String> = (0..300).map(|i| format!("i{i:03}")).collect();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    many_items(&k, &refs).await;
    let acks: Vec<Ack> = ids.iter().map(|id| done(id, "p", "s1", 0, 0)).collect();
    let before = k.store.statements.get();
    let got = write(&k, &acks).await;
    assert_eq!(got, vec![Written::Yes; 300]);
    // Two batches: each one statement, or a lock and an update.
    assert!(k.store.statements.get() - before <= 4);
    let stored = k
        .ids("SELECT id FROM feed_items WHERE status = 'complete' AND version = 1 AND id LIKE 'i%'")
        .await;
    assert_eq!(stored.len(), 300);
}

/// A batch of different writes: each row gets its own.
async fn a_batch_of_mixed_writes_is_stored_whole(k: Kit) {
    many_items(&k, &["a"]).await;
    let retry = failed_attempt("a", "HTTP 503", 60);
    let mut next = done("y", "q", "s1", 0, 0);
    next.write.status = Status::Available;
    next.write.gate = 2;
    let acks = vec![done("x", "p", "s1", 0, 0), retry, next];
    let got = write(&k, &acks).await;
    assert_eq!(got, vec![Written::Yes; 3]);
    assert_eq!(k.item_row("x").await, ("complete".into(), 0, 1, 0));
    assert_eq!(k.item_row("a").await, ("available".into(), 0, 0, 1));
    assert_eq!(data(&k, "a").await, b"{}", "data kept");
    assert_eq!(k.item_row("y").await, ("available".into(), 2, 1, 0));
}

/// An item id that now lives in another partition of the same session
/// (pruned, then written again with plain SQL) is not the item that was
/// delivered: the result names the partition it came from, and is stale.
async fn a_result_names_the_partition_it_was_delivered_from(k: Kit) {
    many_items(&k, &[]).await;
    let acks = vec![done("x", "p", "s1", 0, 0), done("y", "p", "s1", 0, 0)];
    let got = write(&k, &acks).await;
    assert_eq!(got, vec![Written::Yes, Written::Stale]);
    assert_eq!(k.item_row("y").await, ("available".into(), 0, 0, 0));
}

/// A failed attempt bumps `attempts`, not `version` (the idempotency key
/// stays), sets the backoff, and fences out the delivery before it.
async fn a_failed_attempt_keeps_the_version(k: Kit) {
    lone_item(&k).await;
    let retry = failed_attempt("x", "HTTP 500", 3600);
    let w = write(&k, std::slice::from_ref(&retry)).await;
    assert_eq!(w, vec![Written::Yes]);
    assert_eq!(k.item_row("x").await, ("available".into(), 0, 0, 1));
    let waiting: Vec<(String,)> = k
        .rows(
            "SELECT last_error FROM feed_items WHERE id = 'x' AND not_before > {now} + 3500000",
            &["last_error"],
        )
        .await;
    assert_eq!(waiting, vec![("HTTP 500".to_string(),)]);
    assert_eq!(data(&k, "x").await, b"{}", "data kept");
    // The first delivery's answer arriving late: attempts moved on.
    let late = done("x", "p", "s1", 0, 0);
    let w = write(&k, &[late]).await;
    assert_eq!(w, vec![Written::Stale]);
    let second = done("x", "p", "s1", 0, 1);
    let w = write(&k, &[second]).await;
    assert_eq!(w, vec![Written::Yes]);
    assert_eq!(k.item_row("x").await, ("complete".into(), 0, 1, 0));
}

/// A session whose heartbeat is older than the expiry has lost its
/// leases: its results are stale until it heartbeats again.
async fn an_expired_session_writes_nothing(k: Kit) {
    lone_item(&k).await;
    k.sql("UPDATE feed_processors SET heartbeat_at = heartbeat_at - 3600000")
        .await;
    let ack = done("x", "p", "s1", 0, 0);
    let w = write(&k, std::slice::from_ref(&ack)).await;
    assert_eq!(w, vec![Written::Stale]);
    assert_eq!(k.item_row("x").await, ("available".into(), 0, 0, 0));
    assert!(
        k.store
            .heartbeat(&"s1".into(), &Default::default(), None, None)
            .await
            .unwrap()
    );
    let w = write(&k, &[ack]).await;
    assert_eq!(w, vec![Written::Yes]);
}

/// A row the database refuses (here a trigger the test installs, or a
/// check) is
/// reported with the database's reason; the rest of its batch is stored.
async fn a_refused_row_costs_only_itself(k: Kit) {
    use testkit::Backend;
    let trigger: &[&str] = match k.backend {
        Backend::Sqlite => &[
            "CREATE TRIGGER refuse BEFORE UPDATE ON feed_items WHEN NEW.last_error = 'refuse me' \
             BEGIN SELECT RAISE(ABORT, 'refused by the test'); END",
        ],
        // Citus runs no trigger on a distributed table: a check instead.
        Backend::Citus => &[
            "ALTER TABLE feed_items ADD CONSTRAINT \"refused by the test\" \
             CHECK (last_error IS DISTINCT FROM 'refuse me')",
        ],
        Backend::Postgres => &[
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
             IF NEW.last_error = 'refuse me' THEN RAISE EXCEPTION 'refused by the test'; END IF; \
             RETURN NEW; END $$",
            "CREATE TRIGGER refuse BEFORE UPDATE ON feed_items FOR EACH ROW EXECUTE FUNCTION refuse()",
        ],
        Backend::Mysql => &[
            "CREATE TRIGGER refuse BEFORE UPDATE ON feed_items FOR EACH ROW \
             IF NEW.last_error = 'refuse me' THEN \
             SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'refused by the test'; END IF",
        ],
    };
    for sql in trigger {
        k.store.connection().execute_unprepared(sql).await.unwrap();
    }
    k.session("s1").await;
    k.partition("p", Some("s1")).await;
    for id in ["a", "b", "c"] {
        k.item(id, "p", 0, "available").await;
    }
    let mut bad = done("b", "p", "s1", 0, 0);
    bad.write.last_error = Some("refuse me".into());
    let acks = [done("a", "p", "s1", 0, 0), bad, done("c", "p", "s1", 0, 0)];
    let got = write(&k, &acks).await;
    assert_eq!((&got[0], &got[2]), (&Written::Yes, &Written::Yes));
    match &got[1] {
        Written::Refused(why) => assert!(why.contains("refused by the test"), "{why}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(k.item_row("a").await.0, "complete");
    assert_eq!(k.item_row("b").await, ("available".into(), 0, 0, 0));
    assert_eq!(k.item_row("c").await.0, "complete");
}
