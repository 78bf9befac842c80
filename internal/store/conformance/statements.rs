//! How statements are put together: a `?` in SQL text is text on every
//! backend (placeholders are written only as values are bound, never by
//! reading the SQL), and a statement built bind by bind reaches its rows
//! in order.

use sea_orm::Value;

use super::{Kit, conformance};
use crate::store::driver::{Sql, sql};

conformance!(
    a_question_mark_in_a_string_is_text,
    a_built_statement_binds_in_order,
);

async fn a_question_mark_in_a_string_is_text(k: Kit) {
    k.partition("p?", None).await;
    let n = k
        .exec(sql!(k.store.driver();
            "UPDATE feed_partitions SET tenant = 'who? me?' WHERE id = " {"p?"} " AND 'a?' <> " {"b"}
        ))
        .await;
    assert_eq!(n, 1);
    let rows: Vec<(String, String)> = k
        .rows(
            "SELECT id, tenant FROM feed_partitions WHERE tenant LIKE '%?%'",
            &["id", "tenant"],
        )
        .await;
    assert_eq!(rows, [("p?".to_string(), "who? me?".to_string())]);
}

async fn a_built_statement_binds_in_order(k: Kit) {
    let ids = k.partitions("b", 3).await;
    let driver = k.store.driver();
    let mut s = Sql::new(driver);
    s.push("SELECT id FROM feed_partitions WHERE id IN (")
        .binds(ids.iter().map(|id| Value::from(id.as_str())))
        .push(") AND (id, version) IN ");
    let pairs: Vec<_> = [
        (ids[0].clone(), 0),
        (ids[2].clone(), 0),
        (ids[1].clone(), 7),
    ]
    .into();
    driver.id_version_pairs(&mut s, &pairs, 0);
    s.push(" AND {now} > ").bind(0).push(" ORDER BY id");
    let rows = k.store.fetch(s.statement()).await.unwrap();
    let got: Vec<String> = rows
        .iter()
        .map(|r| r.try_get::<String>("", "id").unwrap())
        .collect();
    assert_eq!(got, [ids[0].to_string(), ids[2].to_string()]);
}
