//! Item data is kept byte for byte from every door (the command line, the
//! enqueue API, the library and plain SQL) to the handler and back out of
//! `export` and `items.ndjson`: big numbers, key order, repeated keys,
//! escapes and whitespace as sent.

use base64::Engine;
use feed::store::{NewItem, PartitionSpec};
use serde_json::value::RawValue;

use crate::cli::processor;
use crate::on_all_backends;
use crate::support::{Spawned, TestDb, done, wait_for};

const PRODUCER: &str = "test-producer-token-9876543210";

/// Data that a JSON tree would rewrite.
const SAMPLES: [&str; 5] = [
    r#"{"z":1,"big":12345678901234567890123,"f":1.10}"#,
    r#"{"a":1,"a":2,"A":[]}"#,
    r#"{ "x" : [ 1 , 2.50 ] , "s" : "caf\u00e9 é \" \\" }"#,
    "-0.0e+00",
    r#""\ud83d\ude00 😀""#,
];

/// An exported line's data: its `data` exactly as written, or its
/// `data_base64` decoded.
fn exported_data(line: &str) -> (String, Vec<u8>) {
    #[derive(serde::Deserialize)]
    struct Line<'a> {
        id: String,
        #[serde(borrow)]
        data: Option<&'a RawValue>,
        data_base64: Option<String>,
    }
    let l: Line = serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}"));
    let data = match (l.data, l.data_base64) {
        (Some(d), None) => d.get().as_bytes().to_vec(),
        (None, Some(b)) => base64::engine::general_purpose::STANDARD.decode(b).unwrap(),
        _ => panic!("{line}"),
    };
    (l.id, data)
}

on_all_backends!(data_is_kept_byte_for_byte);
async fn data_is_kept_byte_for_byte(db: TestDb) {
    let scene = Spawned::start(&db, &["--ui", "--producer-token", PRODUCER], |_| done()).await;
    let base = format!("http://{}", scene.1.listen.as_ref().unwrap());
    // The API answers 503 until the processor has migrated the database.
    wait_for("the schema", std::time::Duration::from_secs(30), || async {
        let r = reqwest::get(format!("{base}/readyz")).await;
        let body = match r {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        body.contains("\"schema\":true")
    })
    .await;
    let mut sent: Vec<(String, String, Vec<u8>)> = Vec::new();

    // The command line, from JSON lines.
    let lines: String = SAMPLES
        .iter()
        .enumerate()
        .map(|(n, d)| format!("{{\"id\": \"cli-{n}\", \"data\": {d} }}\n"))
        .collect();
    let o = processor(
        &["enqueue", "--database-url", &db.url, "--partition", "cli"],
        &lines,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for (n, d) in SAMPLES.iter().enumerate() {
        sent.push(("cli".into(), format!("cli-{n}"), d.as_bytes().to_vec()));
    }

    // The API: a JSON array (whose data may span lines) and JSON lines.
    let mut api: Vec<(String, String)> = SAMPLES
        .iter()
        .enumerate()
        .map(|(n, d)| (format!("api-{n}"), d.to_string()))
        .collect();
    api.push(("api-lines".into(), "{\n  \"x\":\t1\n}".into()));
    let array = format!(
        "[{}]",
        api.iter()
            .map(|(id, d)| format!("{{\"id\": \"{id}\", \"data\":  {d}\n}}"))
            .collect::<Vec<_>>()
            .join(",\n")
    );
    let ndjson: String = SAMPLES
        .iter()
        .enumerate()
        .map(|(n, d)| format!("{{\"data\": {d}, \"id\": \"api-nd-{n}\"}}\r\n"))
        .collect();
    let client = reqwest::Client::new();
    for body in [array, ndjson] {
        let r = client
            .post(format!("{base}/api/v1/partitions/api/items"))
            .bearer_auth(PRODUCER)
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    }
    for (id, d) in api {
        sent.push(("api".into(), id, d.into_bytes()));
    }
    for (n, d) in SAMPLES.iter().enumerate() {
        sent.push(("api".into(), format!("api-nd-{n}"), d.as_bytes().to_vec()));
    }

    // The library.
    let items = SAMPLES
        .iter()
        .enumerate()
        .map(|(n, d)| NewItem::new(d.as_bytes().to_vec()).with_id(format!("lib-{n}")))
        .collect();
    db.store
        .enqueue("lib", &PartitionSpec::default(), items)
        .await
        .unwrap();
    for (n, d) in SAMPLES.iter().enumerate() {
        sent.push(("lib".into(), format!("lib-{n}"), d.as_bytes().to_vec()));
    }

    // Plain SQL, with the data bound as bytes.
    db.sql("INSERT INTO feed_partitions (id) VALUES ('sql')")
        .await;
    for (n, d) in SAMPLES.iter().enumerate() {
        let id = format!("sql-{n}");
        db.exec(
            "INSERT INTO feed_items (id, partition_id, data) VALUES (?, 'sql', ?)",
            vec![id.clone().into(), d.as_bytes().to_vec().into()],
        )
        .await;
        sent.push(("sql".into(), id, d.as_bytes().to_vec()));
    }

    // The handler received every item's data exactly, as its whole body.
    let handler = &scene.0;
    wait_for(
        "every item delivered",
        std::time::Duration::from_secs(60),
        || async {
            sent.iter()
                .all(|(_, id, _)| !handler.calls_for(id).is_empty())
        },
    )
    .await;
    for (_, id, data) in &sent {
        let call = &handler.calls_for(id)[0];
        assert_eq!(
            String::from_utf8_lossy(&call.body),
            String::from_utf8_lossy(data),
            "{id}: the handler's body"
        );
        assert_eq!(&call.body, data, "{id}");
    }

    // `export` and `items.ndjson` give the same bytes back.
    for partition in ["cli", "api", "lib", "sql"] {
        db.wait_partition(partition, "complete").await;
        let o = processor(
            &[
                "export",
                "--database-url",
                &db.url,
                "--partition",
                partition,
            ],
            "",
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let cli = String::from_utf8(o.stdout).unwrap();
        let over_http = client
            .get(format!("{base}/api/v1/partitions/{partition}/items.ndjson"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert_eq!(cli, over_http, "{partition}: the same lines");
        let exported: Vec<(String, Vec<u8>)> = cli.lines().map(exported_data).collect();
        let want: Vec<(String, Vec<u8>)> = sent
            .iter()
            .filter(|(p, _, _)| p == partition)
            .map(|(_, id, d)| (id.clone(), d.clone()))
            .collect();
        assert_eq!(exported, want, "{partition}: export in write order");
        // A line that carries its data as JSON carries it verbatim.
        let first = cli.lines().next().unwrap();
        assert!(first.contains(SAMPLES[0]), "{first}");
    }
}
