//! Sessions: a heartbeat keeps a session live and says whether its
//! dispatch holds off, why and since when, and its cap.

use std::time::Duration;

use super::{Kit, conformance};

conformance!(a_heartbeat_records_why_dispatch_holds_off);

/// A heartbeat records why the processor's dispatch holds off and since
/// when (by the database clock), and clears both once it dispatches again;
/// it writes the session's cap too.
async fn a_heartbeat_records_why_dispatch_holds_off(k: Kit) {
    k.session("s1").await;
    let why = "handler at http://127.0.0.1:9/feed: connection refused";
    let held = Some((why, Duration::from_secs(90)));
    assert!(
        k.store
            .heartbeat(&"s1".into(), &Default::default(), held, None)
            .await
            .unwrap()
    );
    let p = k.store.processors().await.unwrap();
    assert_eq!(p[0].held_reason.as_deref(), Some(why));
    let since = p[0].held_since.expect("held_since is set");
    let ago = p[0].heartbeat_at - since;
    assert!(
        (89_000..=91_000).contains(&ago),
        "held since {ago} ms before the heartbeat"
    );
    assert!(
        k.store
            .heartbeat(&"s1".into(), &Default::default(), None, None)
            .await
            .unwrap()
    );
    let p = k.store.processors().await.unwrap();
    assert_eq!((p[0].held_reason.as_deref(), p[0].held_since), (None, None));
    // A processor giving its partitions back heartbeats a cap of 0; the
    // cap it was started with comes back with the next heartbeat.
    let expiry = Duration::from_secs(60);
    assert!(
        k.store
            .heartbeat(&"s1".into(), &Default::default(), held, Some(0))
            .await
            .unwrap()
    );
    assert_eq!(k.store.session_caps(expiry).await.unwrap(), vec![0]);
    // A session held off is no peer to give partitions to.
    let (s1, s2) = ("s1".into(), "s2".into());
    assert_eq!(k.store.dispatching_peers(&s2, expiry).await.unwrap(), 0);
    assert!(
        k.store
            .heartbeat(&"s1".into(), &Default::default(), None, None)
            .await
            .unwrap()
    );
    assert!(k.store.session_caps(expiry).await.unwrap().is_empty());
    assert_eq!(k.store.dispatching_peers(&s2, expiry).await.unwrap(), 1);
    let itself = k.store.dispatching_peers(&s1, expiry).await.unwrap();
    assert_eq!(itself, 0, "not itself");
}

conformance!(registering_again_keeps_the_session);

/// A registration tried again after its first try committed unseen (the
/// caller stopped waiting) keeps the one row and refreshes its heartbeat.
async fn registering_again_keeps_the_session(k: Kit) {
    k.dead_session("s1").await;
    k.session("s1").await;
    let p = k.store.processors().await.unwrap();
    assert_eq!(p.len(), 1, "one row");
    let expiry = Duration::from_secs(60);
    assert_eq!(
        k.store
            .dispatching_peers(&"s2".into(), expiry)
            .await
            .unwrap(),
        1,
        "the heartbeat is fresh again"
    );
}
