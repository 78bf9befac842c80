//! What Feed says of a Citus cluster that is not set up as it needs: a
//! server whose TLS certificate Feed cannot read (the X.509 v1 kind Citus
//! makes by itself), no node that may hold shards, a coordinator alone, and
//! a schema that is only partly distributed.

use std::process::Output;

use crate::backend_tests;
use crate::citus_moves::{change_nodes, shard_ports};
use crate::cli::processor;
use crate::support::{EmptyDb, TestDb};

/// `processor <command> --database-url <url>`.
fn command(command: &str, url: &str) -> Output {
    processor(&[command, "--database-url", url], "")
}

fn said(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Asserts that the command's output holds each of `words`.
fn says(out: &Output, words: &[&str]) {
    let text = said(out);
    for w in words {
        assert!(text.contains(w), "{w:?} in: {text}");
    }
}

backend_tests!(a_certificate_feed_cannot_read_says_what_to_do: citus => Citus [slow]);
/// The cluster's coordinator serves TLS with a self-signed X.509 v1
/// certificate, as Citus makes one. Without `sslmode=disable` a command
/// ends with words that name the certificate and both ways out; with it,
/// the same command works.
async fn a_certificate_feed_cannot_read_says_what_to_do(db: TestDb) {
    let with_tls = db.url.replace("?sslmode=disable", "");
    assert_ne!(with_tls, db.url, "the test's URL disables TLS");
    let out = command("status", &with_tls);
    assert!(!out.status.success());
    says(&out, &["certificate", "sslmode=disable", "X.509 v3"]);
    let out = command("status", &db.url);
    assert!(out.status.success(), "{}", said(&out));
}

backend_tests!(a_cluster_without_a_node_for_shards_is_named: citus => Citus [slow]);
/// With both workers removed and the coordinator not holding shards,
/// `migrate` creates nothing and says how to add a node. Once the
/// coordinator may hold them, it migrates and warns that every partition
/// stays on it.
async fn a_cluster_without_a_node_for_shards_is_named(db: EmptyDb) {
    let db = db.0;
    for port in [9701, 9702] {
        change_nodes(
            &db,
            &format!("SELECT citus_remove_node('127.0.0.1', {port})"),
        )
        .await;
    }
    let out = command("migrate", &db.url);
    assert!(!out.status.success());
    says(
        &out,
        &[
            "no node may hold shards",
            "citus_add_node",
            "shouldhaveshards",
        ],
    );
    let tables = "SELECT COUNT(*) AS n FROM pg_tables WHERE tablename = 'feed_partitions'";
    assert_eq!(db.count(tables).await, 0, "nothing created");

    change_nodes(
        &db,
        "SELECT citus_set_node_property('127.0.0.1', 9700, 'shouldhaveshards', true)",
    )
    .await;
    let out = command("migrate", &db.url);
    assert!(out.status.success(), "{}", said(&out));
    says(&out, &["Citus has no worker node", "citus_rebalance_start"]);
    assert_eq!(shard_ports(&db).await, [9700]);
}

backend_tests!(a_partly_distributed_schema_is_named_and_migrate_finishes_it: citus => Citus [slow]);
/// Tables given back to the coordinator by hand: `status` names them and
/// says to migrate; `migrate` distributes them again, rows and all, and
/// `status` works.
async fn a_partly_distributed_schema_is_named_and_migrate_finishes_it(db: TestDb) {
    db.sql("INSERT INTO feed_partitions (id) VALUES ('p'), ('q')")
        .await;
    db.sql("SELECT undistribute_table('feed_events', cascade_via_foreign_keys => true)")
        .await;
    let out = command("status", &db.url);
    assert!(!out.status.success());
    says(
        &out,
        &["not distributed", "feed_events", "run processor migrate"],
    );

    let out = command("migrate", &db.url);
    assert!(out.status.success(), "{}", said(&out));
    says(&out, &["only partly distributed"]);
    let left = "SELECT COUNT(*) AS n FROM (VALUES ('feed_partitions'), ('feed_items'), \
                ('feed_events'), ('feed_processors'), ('feed_slots')) t(name) \
                WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition d \
                WHERE d.logicalrelid = t.name::regclass)";
    assert_eq!(db.count(left).await, 0);
    assert_eq!(shard_ports(&db).await, [9701, 9702]);
    assert_eq!(
        db.count("SELECT COUNT(*) AS n FROM feed_partitions").await,
        2
    );
    let out = command("status", &db.url);
    assert!(out.status.success(), "{}", said(&out));
}
