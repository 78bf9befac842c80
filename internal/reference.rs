//! Pages of the book's reference written from the code itself: the
//! metrics from their registry, the API's routes from the list the router
//! is built from, the schema's columns from a freshly migrated database.
//! A test compares them with the committed pages, so the book cannot
//! drift from what the processor does.

use std::fmt::Write;

use sea_orm::{ConnectionTrait, DbBackend, Statement};

use crate::console::endpoints;

/// How every generated page starts: where it comes from and how to
/// write it again.
pub fn header(title: &str, source: &str) -> String {
    format!(
        "# {title}\n\n<!-- Generated from {source} by `processor reference`; do not edit.\n     \
         Regenerate: cargo run -- reference --out docs/book/src/reference -->\n\n"
    )
}

/// Escapes text for a markdown table cell: `|` would end the cell, and
/// `<` or `>` outside code would be read as HTML.
pub fn cell(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut code = false;
    for c in text.chars() {
        match c {
            '`' => {
                code = !code;
                out.push(c);
            }
            '|' => out.push_str("\\|"),
            '<' if !code => out.push_str("&lt;"),
            '>' if !code => out.push_str("&gt;"),
            '\n' => out.push(' '),
            _ => out.push(c),
        }
    }
    out
}

/// Every series `/metrics` serves, with its type, labels and help text.
pub fn metrics_page() -> String {
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = crate::metrics::Metrics::new(&mut registry);
    // A family is encoded only once it has a series: give each one.
    let tenant = metrics.tenants.label(Some("acme"));
    metrics.outcome("done", &tenant);
    metrics
        .tenant_handler_seconds
        .get_or_create(&tenant)
        .observe(0.0);
    metrics.queue_wait.get_or_create(&tenant).observe(0.0);
    metrics.backlog_ready.get_or_create(&tenant).set(0);
    metrics.backlog_oldest.get_or_create(&tenant).set(0.0);
    metrics.backlog_scheduled.get_or_create(&tenant).set(0);
    metrics.backlog_retrying.get_or_create(&tenant).set(0);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)
        .expect("encoding into a String does not fail");
    let mut page = header("Metrics", "the metrics registry (internal/metrics.rs)");
    page.push_str(
        "`GET /metrics` on `--listen` serves these in Prometheus text format, \
         one set per processor.\n\n| series | type | meaning |\n| --- | --- | --- |\n",
    );
    let mut help = "";
    let mut family: Option<(String, &str)> = None;
    let mut labels: Vec<String> = Vec::new();
    let mut rows = Vec::new();
    for line in text.lines().chain(["# EOF"]) {
        if line.starts_with("# HELP ") || line == "# EOF" {
            if let Some((series, kind)) = family.take() {
                let shown = if labels.is_empty() {
                    String::new()
                } else {
                    format!("{{{}}}", labels.join(", "))
                };
                rows.push(format!("| `{series}{shown}` | {kind} | {} |", cell(help)));
                labels.clear();
            }
            help = line
                .strip_prefix("# HELP ")
                .and_then(|rest| rest.split_once(' '))
                .map_or("", |(_, h)| h.trim_end_matches('.'));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            let series = match kind {
                "counter" => format!("{name}_total"),
                "histogram" => format!("{name}_bucket, _sum, _count"),
                _ => name.to_string(),
            };
            family = Some((series, kind));
        } else if let Some((_, rest)) = line.split_once('{') {
            if line.contains("_bucket{") {
                continue;
            }
            for pair in rest.split('}').next().unwrap_or("").split(',') {
                let key = pair.split('=').next().unwrap_or("").to_string();
                if !key.is_empty() && !labels.contains(&key) {
                    labels.push(key);
                }
            }
        }
    }
    for row in rows {
        let _ = writeln!(page, "{row}");
    }
    page
}

/// Every route of the JSON API under `/api/v1`.
pub fn api_page() -> String {
    let mut page = header(
        "HTTP API",
        "the route list of the console's API (internal/console/api.rs)",
    );
    page.push_str(
        "Under `/api/v1` on the listener of `processor run --ui` or `processor ui`. \
         Access: *open* is whoever reaches the listener; the tokens go in \
         `Authorization: Bearer <token>`. A query parameter not listed is refused \
         with 400. A body is JSON: a `Content-Type` other than `application/json`, \
         `application/x-ndjson` (items) or none is refused with 415 before it is read. \
         Ids and tenants in paths are percent-encoded.\n\n\
         | method and path | query | body | access | answer |\n| --- | --- | --- | --- | --- |\n",
    );
    for e in endpoints() {
        let query = (e.query)()
            .iter()
            .map(|q| format!("`{q}`"))
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(
            page,
            "| `{} /api/v1{}` | {} | {} | {} | {} |",
            e.method,
            e.path,
            cell(&query),
            cell(e.body),
            e.access.describe(),
            cell(e.answer)
        );
    }
    let query = crate::console::endpoints::fields::<crate::inputs::InputsQuery>()
        .iter()
        .map(|q| format!("`{q}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let _ = write!(
        page,
        "\nThe listener of every `processor run` (with `--ui` or without) also serves \
         a fan-in step's inputs, at the URL its delivery carries in `Feed-Inputs`:\n\n\
         | method and path | query | body | access | answer |\n| --- | --- | --- | --- | --- |\n\
         | `GET {}` | {} |  | the URL's `token`, for its partition and `gate` until `expires` | \
         the partition's items at gates below `gate` as JSON lines `{{id, gate, status, data}}` in \
         write order, streamed (`application/x-ndjson`), after the item `after`, at most `limit` \
         ({} by default, {} at most), with `Link: <…>; rel=\"next\"` when more follow; 401 \
         expired, 403 for another partition or gate |\n",
        crate::inputs::PATH.replace("{partition}", "{id}"),
        query,
        crate::inputs::DEFAULT_LIMIT,
        crate::inputs::MAX_LIMIT,
    );
    page
}

/// Every table, column and index the migrations create, read back from a
/// new SQLite database in the system's temporary folder.
pub async fn schema_page() -> crate::Result<String> {
    let dir = std::env::temp_dir().join(format!("feed-reference-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).map_err(|e| crate::Error::Config(e.to_string()))?;
    let url = format!("sqlite://{}?mode=rwc", dir.join("schema.db").display());
    let page = async {
        let store = crate::Store::connect(&url, 1).await?;
        store.migrate().await?;
        let page = describe(store.connection()).await;
        store.connection().clone().close().await?;
        page
    }
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    page
}

async fn describe(db: &sea_orm::DatabaseConnection) -> crate::Result<String> {
    let rows = |sql: &str| db.query_all_raw(Statement::from_string(DbBackend::Sqlite, sql));
    let mut page = header(
        "Schema",
        "the migrations (migrations/src), applied to SQLite",
    );
    page.push_str(
        "The tables as the migrations create them on SQLite. On PostgreSQL and \
         MySQL/MariaDB the columns are the same, with these differences: \
         `feed_items.data` is `BYTEA` / `LONGBLOB`, `feed_items` has `seq` \
         (an identity column; SQLite uses its `rowid`), times default to the \
         server's clock in epoch milliseconds, ids, tenants and token \
         prefixes are compared byte for byte everywhere (on MySQL/MariaDB \
         their columns use the collation `utf8mb4_nopad_bin`), and some \
         indexes differ (see [The database](../operating/database.md)). What each column \
         means is under [With SQL](../producing/sql.md).\n",
    );
    let tables = rows(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'feed\\_%' ESCAPE '\\' ORDER BY name",
    )
    .await?;
    for table in tables {
        let table: String = table.try_get("", "name")?;
        let _ = write!(
            page,
            "\n## `{table}`\n\n| column | type | null | default | key |\n| --- | --- | --- | --- | --- |\n"
        );
        for c in rows(&format!(
            "SELECT * FROM pragma_table_info('{table}') ORDER BY cid"
        ))
        .await?
        {
            let name: String = c.try_get("", "name")?;
            let kind: String = c.try_get("", "type")?;
            let notnull: i64 = c.try_get("", "notnull")?;
            let default: Option<String> = c.try_get("", "dflt_value")?;
            let pk: i64 = c.try_get("", "pk")?;
            let default = match default {
                Some(d) if d.contains("julianday") => "now (epoch ms)".to_string(),
                Some(d) => format!("`{d}`"),
                None => String::new(),
            };
            let null = if notnull == 1 { "no" } else { "yes" };
            let key = if pk > 0 { "primary" } else { "" };
            let _ = writeln!(page, "| `{name}` | {kind} | {null} | {default} | {key} |");
        }
        let indexes = rows(&format!(
            "SELECT name, \"unique\", partial FROM pragma_index_list('{table}') WHERE origin = 'c' ORDER BY name"
        ))
        .await?;
        for (i, index) in indexes.iter().enumerate() {
            if i == 0 {
                page.push_str("\nIndexes:\n\n");
            }
            let name: String = index.try_get("", "name")?;
            let unique: i64 = index.try_get("", "unique")?;
            let columns: Vec<String> = rows(&format!(
                "SELECT name FROM pragma_index_info('{name}') ORDER BY seqno"
            ))
            .await?
            .iter()
            .map(|c| {
                c.try_get::<Option<String>>("", "name")
                    .map(Option::unwrap_or_default)
            })
            .collect::<Result<_, _>>()?;
            let partial: i64 = index.try_get("", "partial")?;
            let unique = if unique == 1 { " (unique)" } else { "" };
            let partial = if partial == 1 { " (partial)" } else { "" };
            let _ = writeln!(
                page,
                "- `{name}` on `({})`{unique}{partial}",
                columns.join(", ")
            );
        }
    }
    Ok(page)
}
