//! An answer that spawns items: its result and its children are written
//! together under the result's fence, once, or not at all.

use std::sync::Arc;

use super::fence::done;
use super::{EXPIRY, Kit, conformance};
use crate::store::{Ack, NewItem, Written};

conformance!(
    an_answer_spawns_its_items_once,
    a_stale_answer_spawns_nothing,
    a_child_whose_id_exists_refuses_the_whole_answer,
);

/// `x`'s ack completing it and spawning `ids` (at gate 0 but the last,
/// at gate 1), delivered by `session`.
fn spawning(session: &str, ids: &[&str]) -> Ack {
    let mut ack = done("x", "p", session, 0, 0);
    let children: Vec<NewItem> = ids
        .iter()
        .enumerate()
        .map(|(n, id)| {
            let mut item = NewItem::new(format!("{{\"n\":{n}}}").into_bytes()).with_id(*id);
            item.gate = Some(if n + 1 == ids.len() { 1 } else { 0 });
            item.parent = Some("x".into());
            item
        })
        .collect();
    ack.write.spawned = Some(Arc::from(children));
    ack
}

/// Session `s1` holding `p` with one available item, `x`.
async fn held(k: &Kit) {
    k.session("s1").await;
    k.session("s2").await;
    k.partition("p", Some("s1")).await;
    k.item("x", "p", 0, "available").await;
}

/// The partition's items other than `x`: (id, gate, status, parent).
async fn children(k: &Kit) -> Vec<(String, i64, String, Option<String>)> {
    k.rows(
        "SELECT id, gate, status, parent_id FROM feed_items WHERE partition_id = 'p' AND id <> 'x' ORDER BY id",
        &["id", "gate", "status", "parent_id"],
    )
    .await
}

/// The children come with the result; the same answer written again (a
/// replayed delivery) is stale and adds nothing.
async fn an_answer_spawns_its_items_once(k: Kit) {
    held(&k).await;
    let ack = spawning("s1", &["x/0", "x/1", "x/2"]);
    let first = k
        .store
        .write_results(std::slice::from_ref(&ack), EXPIRY)
        .await
        .unwrap();
    assert_eq!(first, [Written::Yes]);
    let again = k.store.write_results(&[ack], EXPIRY).await.unwrap();
    assert_eq!(again, [Written::Stale]);
    assert_eq!(k.item_row("x").await, ("complete".into(), 0, 1, 0));
    let parent = Some("x".to_string());
    assert_eq!(
        children(&k).await,
        [
            ("x/0".into(), 0, "available".into(), parent.clone()),
            ("x/1".into(), 0, "available".into(), parent.clone()),
            ("x/2".into(), 1, "available".into(), parent),
        ]
    );
}

/// An answer from a session that no longer holds the partition (it was
/// stolen) writes neither the result nor the children.
async fn a_stale_answer_spawns_nothing(k: Kit) {
    held(&k).await;
    let written = k
        .store
        .write_results(&[spawning("s2", &["x/0", "x/1"])], EXPIRY)
        .await
        .unwrap();
    assert_eq!(written, [Written::Stale]);
    assert_eq!(k.item_row("x").await, ("available".into(), 0, 0, 0));
    assert!(children(&k).await.is_empty());
}

/// A child named like an item its partition has refuses the
/// answer whole, saying so: the result is not written either, so the
/// attempt can be recorded as failed.
async fn a_child_whose_id_exists_refuses_the_whole_answer(k: Kit) {
    held(&k).await;
    k.item("taken", "p", 0, "complete").await;
    let written = k
        .store
        .write_results(&[spawning("s1", &["x/0", "taken", "x/2"])], EXPIRY)
        .await
        .unwrap();
    let [Written::Refused(why)] = written.as_slice() else {
        panic!("{written:?}");
    };
    assert!(why.contains("already exists"), "{why}");
    assert_eq!(k.item_row("x").await, ("available".into(), 0, 0, 0));
    let kept: Vec<(String, i64, String, Option<String>)> = children(&k).await;
    assert_eq!(kept, [("taken".into(), 0, "complete".into(), None)]);
}
