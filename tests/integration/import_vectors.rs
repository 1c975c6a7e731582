//! Embeddings travel with records: an export with `embeddings` carries each record's stored
//! vector and model id, and an import stores a carried vector of the running model as it came
//! once the model has found it to be its text's (every line of a small file, a sample of a large
//! one), re-embeds the text of a line carrying another model's or dimension's vector, and refuses
//! a line whose vector is malformed or not its text's. On SQLite and on PostgreSQL.

use crate::support::TestDb;
use crate::support::on_both_stores;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use futures_util::TryStreamExt;
use memgate::memory::MemoryService;
use memgate::store::memories::ListFilter;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

async fn service(db: &TestDb) -> MemoryService {
    crate::support::memory_service(&db.url).await
}

/// A fresh, empty database of the same kind as `db`.
async fn fresh_like(db: &TestDb) -> TestDb {
    if db.dir().is_some() { TestDb::sqlite() } else { TestDb::postgres().await }
}

on_both_stores!(
    an_export_with_embeddings_imports_into_a_fresh_store_with_the_same_vectors,
    another_models_or_dimensions_vectors_are_embedded_again_from_the_text,
    a_malformed_vector_is_refused_by_line_and_nothing_is_imported,
    a_carried_vector_that_is_not_its_texts_embedding_is_refused_by_line,
);

async fn export_lines(memories: &MemoryService, tenant: &str) -> Vec<Value> {
    let pages = memories.export_pages_with(tenant, &ListFilter::default(), true);
    let text: String =
        pages.try_fold(String::new(), |all, page| async move { Ok(all + &page) }).await.unwrap();
    text.lines().map(|line| serde_json::from_str(line).unwrap()).collect()
}

fn by_id<'a>(lines: &'a [Value], id: &str) -> &'a Value {
    lines.iter().find(|l| l["id"] == id).unwrap_or_else(|| panic!("no line {id} in {lines:?}"))
}

fn jsonl(lines: &[Value]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

fn fact(id: &str, statement: &str) -> Value {
    json!({"id": id, "type": "fact", "scope": ["public"], "content": {"statement": statement}})
}

/// Waits (bounded) until every record the import added is embedded by the running model.
async fn wait_ready(memories: &MemoryService, tenant: &str, import_id: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let progress = memories.import_progress(tenant, import_id).await.unwrap();
        if progress.state == "ready" {
            return;
        }
        assert!(Instant::now() < deadline, "the import was not embedded within 60 s: {progress:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Source records embedded at write time, exported with their vectors.
async fn embedded_source(db: &TestDb) -> (MemoryService, Vec<Value>) {
    let memories = service(db).await;
    for (id, statement) in [
        ("kb-1", "Refunds are paid back to the original card within five working days."),
        ("kb-2", "The warehouse in Leeds ships orders placed before 3 pm the same day."),
        ("kb-3", "Premium support answers the phone from 8 am to 8 pm on weekdays."),
    ] {
        memories.create("acme", &fact(id, statement), "admin").await.unwrap();
    }
    let lines = export_lines(&memories, "acme").await;
    assert_eq!(lines.len(), 3);
    (memories, lines)
}

async fn an_export_with_embeddings_imports_into_a_fresh_store_with_the_same_vectors(db: TestDb) {
    let (source, exported) = embedded_source(&db).await;
    let model = exported[0]["embedding"]["model"].as_str().unwrap().to_owned();
    for line in &exported {
        assert_eq!(line["embedding"]["model"], model.as_str(), "{line}");
        let bytes = STANDARD.decode(line["embedding"]["vector"].as_str().unwrap()).unwrap();
        assert_eq!(bytes.len(), 384 * 4, "a multilingual-e5-small vector is 384 little-endian f32");
    }
    // Without the flag an export is what it always was.
    let plain = source.export("acme", &ListFilter::default()).await.unwrap();
    assert!(!plain.contains("\"embedding\""), "{plain}");

    // A vector of the running model is stored as it came, not embedded again (after the model
    // checked that it is its text's): the target's export shows exactly the source's bytes.
    let target_db = fresh_like(&db).await;
    let target = service(&target_db).await;
    let report = target.import("acme", &jsonl(&exported), false, "restore").await.unwrap();
    assert!(report.applied, "{report:?}");
    assert_eq!(report.counts.new, 3);
    let said = serde_json::to_value(&report).unwrap();
    let counts = report.embeddings.expect("the report says what became of the carried vectors");
    assert_eq!((counts.stored, counts.re_embedded), (3, 0));
    // A file this small has every vector checked.
    assert_eq!(
        (&said["embeddings"]["sampled"], &said["embeddings"]["matched"]),
        (&json!(3), &json!(3)),
        "{said}"
    );
    assert!(!target.is_backfilling(), "nothing was left to embed");
    let progress = target.import_progress("acme", report.import_id.as_deref().unwrap()).await.unwrap();
    assert_eq!((progress.state, progress.embedded), ("ready", 3), "findable by meaning at once");

    let after = export_lines(&target, "acme").await;
    assert_eq!(after, exported, "the round trip changed a record or a vector's bytes");
}

/// A line may carry the running model's vector only for its own text: a note about a bird
/// census carrying a refund question's vector would be injected for refund questions. The model
/// embeds the text of each sampled line (here every line: the file is small) and a vector that
/// is not the text's refuses the line, by path and with the cosine, in the dry run as in the
/// apply; the report says how many it checked and how many matched.
async fn a_carried_vector_that_is_not_its_texts_embedding_is_refused_by_line(db: TestDb) {
    let (_source, exported) = embedded_source(&db).await;
    let mut census =
        fact("kb-9", "Volunteers counted 412 lapwings and 38 curlews at the estuary bird census.");
    census["embedding"] = by_id(&exported, "kb-1")["embedding"].clone();
    let mut lines = exported.clone();
    lines.push(census);
    let target_db = fresh_like(&db).await;
    let target = service(&target_db).await;
    for dry_run in [true, false] {
        let report = target.import("acme", &jsonl(&lines), dry_run, "restore").await.unwrap();
        assert!(!report.applied, "dry run {dry_run}: {report:?}");
        assert_eq!((report.counts.new, report.counts.invalid), (3, 1), "dry run {dry_run}: {report:?}");
        let said = serde_json::to_value(&report).unwrap();
        let line = said["lines"].as_array().unwrap().iter().find(|l| l["line"] == 4).unwrap();
        assert_eq!(line["status"], "invalid", "{line}");
        let problem = &line["problems"][0];
        assert_eq!(
            (problem["path"].as_str(), problem["kind"].as_str()),
            (Some("$.embedding.vector"), Some("vector_mismatch")),
            "{line}"
        );
        assert!(problem["message"].as_str().unwrap().contains("cosine"), "{line}");
        assert_eq!(
            (&said["embeddings"]["sampled"], &said["embeddings"]["matched"]),
            (&json!(4), &json!(3)),
            "{said}"
        );
    }
    assert!(export_lines(&target, "acme").await.is_empty(), "an import with a forged vector added something");
    // The text alone (no vector) imports, and is embedded from its words.
    let mut plain = lines[3].clone();
    plain.as_object_mut().unwrap().remove("embedding");
    let report = target.import("acme", &jsonl(&[plain]), false, "restore").await.unwrap();
    assert!(report.applied, "{report:?}");
    wait_ready(&target, "acme", report.import_id.as_deref().unwrap()).await;
    let after = export_lines(&target, "acme").await;
    assert!(cosine(&vector(&after[0]["embedding"]), &vector(&by_id(&exported, "kb-1")["embedding"])) < 0.9);
}

async fn another_models_or_dimensions_vectors_are_embedded_again_from_the_text(db: TestDb) {
    let (_source, exported) = embedded_source(&db).await;
    let model = exported[0]["embedding"]["model"].as_str().unwrap().to_owned();
    let mut lines = exported.clone();
    // kb-1: kb-2's vector, said to be another model's. kb-2: the running model's id, 8 dimensions.
    lines[0]["embedding"] =
        json!({"model": "some-other-model", "vector": exported[1]["embedding"]["vector"]});
    let small: Vec<u8> = (0..8).flat_map(|i| if i == 0 { 1f32 } else { 0f32 }.to_le_bytes()).collect();
    lines[1]["embedding"] = json!({"model": model, "vector": STANDARD.encode(small)});
    let target_db = fresh_like(&db).await;
    let target = service(&target_db).await;
    let report = target.import("acme", &jsonl(&lines), false, "restore").await.unwrap();
    assert!(report.applied, "{report:?}");
    let counts = report.embeddings.unwrap();
    assert_eq!((counts.stored, counts.re_embedded), (1, 2));
    wait_ready(&target, "acme", report.import_id.as_deref().unwrap()).await;

    let after = export_lines(&target, "acme").await;
    for line in &after {
        assert_eq!(line["embedding"]["model"], model.as_str(), "{line}");
    }
    // The model's own embedding of each text (what the source stored at write time, up to the
    // last bits a batched model run rounds differently), never the supplied vector.
    for id in ["kb-1", "kb-2"] {
        let stored = vector(&by_id(&after, id)["embedding"]);
        assert!(
            cosine(&stored, &vector(&by_id(&exported, id)["embedding"])) > 0.9999,
            "{id} is not its text's embedding"
        );
    }
    let kb1 = vector(&by_id(&after, "kb-1")["embedding"]);
    assert!(cosine(&kb1, &vector(&exported[1]["embedding"])) < 0.99, "kb-1 kept the supplied vector");
    assert_eq!(vector(&by_id(&after, "kb-2")["embedding"]).len(), 384, "kb-2 kept the 8-dimension vector");
    // kb-3 carried its own vector of the running model: stored as it came.
    assert_eq!(by_id(&after, "kb-3")["embedding"], by_id(&exported, "kb-3")["embedding"]);
}

fn vector(embedding: &Value) -> Vec<f32> {
    let bytes = STANDARD.decode(embedding["vector"].as_str().unwrap()).unwrap();
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (norm(a) * norm(b))
}

async fn a_malformed_vector_is_refused_by_line_and_nothing_is_imported(db: TestDb) {
    let (_source, exported) = embedded_source(&db).await;
    let model = exported[0]["embedding"]["model"].as_str().unwrap().to_owned();
    let unit = |len: usize, scale: f32| -> String {
        let bytes: Vec<u8> =
            (0..len).flat_map(|i| if i == 0 { scale } else { 0.0f32 }.to_le_bytes()).collect();
        STANDARD.encode(bytes)
    };
    let nan: Vec<u8> = (0..384).flat_map(|i| if i == 7 { f32::NAN } else { 0.05f32 }.to_le_bytes()).collect();
    let cases = [
        (json!({"model": model, "vector": "not base64!"}), "invalid_base64"),
        (json!({"model": model, "vector": STANDARD.encode([1u8, 2, 3, 4, 5, 6])}), "invalid_length"),
        (json!({"model": "some-other-model", "vector": STANDARD.encode(nan)}), "not_finite"),
        (json!({"model": model, "vector": unit(384, 3.0)}), "not_normalized"),
        (json!({"model": model}), "invalid_embedding"),
        (json!("a string"), "invalid_embedding"),
    ];
    let mut lines = vec![exported[0].clone()];
    for (n, (embedding, _)) in cases.iter().enumerate() {
        let mut line = fact(&format!("bad-{n}"), &format!("Broken line number {n}"));
        line["embedding"] = embedding.clone();
        lines.push(line);
    }
    let target_db = fresh_like(&db).await;
    let target = service(&target_db).await;
    let report = target.import("acme", &jsonl(&lines), false, "restore").await.unwrap();
    assert!(!report.applied, "{report:?}");
    assert_eq!(report.counts.invalid, cases.len());
    assert_eq!(report.counts.new, 1, "the good line is still classified");
    let listed = serde_json::to_value(&report).unwrap();
    for (n, (_, kind)) in cases.iter().enumerate() {
        let line = listed["lines"].as_array().unwrap().iter().find(|l| l["line"] == n + 2).unwrap();
        assert_eq!(line["status"], "invalid", "{line}");
        assert_eq!(line["problems"][0]["kind"], *kind, "{line}");
        assert!(line["problems"][0]["path"].as_str().unwrap().starts_with("$.embedding"), "{line}");
        assert!(!line["problems"][0]["message"].as_str().unwrap().is_empty());
    }
    assert!(export_lines(&target, "acme").await.is_empty(), "an import with a bad line added something");

    // The good line on its own imports, vector and all: nothing of it was lost.
    let report = target.import("acme", &jsonl(&lines[..1]), false, "restore").await.unwrap();
    assert!(report.applied);
    assert_eq!(export_lines(&target, "acme").await, vec![exported[0].clone()]);
}

/// On PostgreSQL each vector stays in its row of `memory_embeddings`: a startup reads a million
/// of them in one pass, and a vector moved out of line (TOAST) was a second lookup each. Written
/// by the write path, by an import of carried vectors and by the background embedding alike.
#[tokio::test]
async fn postgres_keeps_each_vector_in_its_row() {
    let db = TestDb::postgres().await;
    let (source, exported) = embedded_source(&db).await;
    let target_db = TestDb::postgres().await;
    let target = service(&target_db).await;
    let mut lines = exported.clone();
    lines.push(fact("kb-4", "Gift cards never expire and can be used online or in store."));
    let report = target.import("acme", &jsonl(&lines), false, "restore").await.unwrap();
    assert!(report.applied, "{report:?}");
    // kb-4 came without a vector: the background job embeds and stores it.
    wait_ready(&target, "acme", report.import_id.as_deref().unwrap()).await;
    // A second start migrates again: setting what is already set is not an error.
    let _again = service(&target_db).await;
    drop(source);
    for (url, stored) in [(&db.url, 3), (&target_db.url, 4)] {
        let pool = sqlx::AnyPool::connect(url).await.unwrap();
        let (rows, out_of_line): (i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM memory_embeddings), \
             (SELECT pg_relation_size(reltoastrelid) FROM pg_class WHERE relname = 'memory_embeddings')",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(rows, stored, "{url}: embeddings stored");
        assert_eq!(out_of_line, 0, "{url}: vectors were moved out of their rows");
    }
}

/// A store written before vectors were kept in their rows has them out of line until the rewrite
/// docs/operations.md gives: `vectors_out_of_line` (which each start logs) sees them, and sees
/// none once that rewrite ran.
#[tokio::test]
async fn postgres_vectors_out_of_line_are_seen_and_the_documented_rewrite_moves_them() {
    let db = TestDb::postgres().await;
    let (_source, exported) = embedded_source(&db).await;
    let target_db = TestDb::postgres().await;
    let target = service(&target_db).await;
    let pool = sqlx::AnyPool::connect(&target_db.url).await.unwrap();
    // As a store upgraded from before: PostgreSQL's default row target.
    sqlx::query("ALTER TABLE memory_embeddings RESET (toast_tuple_target)").execute(&pool).await.unwrap();
    let report = target.import("acme", &jsonl(&exported), false, "restore").await.unwrap();
    assert!(report.applied, "{report:?}");
    let store = memgate::store::Store::connect(&target_db.url).await.unwrap();
    assert!(store.vectors_out_of_line().await.unwrap() > 0, "three vectors were written out of line");

    // A start sets the row target again; the rows written before stay where they are.
    store.migrate().await.unwrap();
    assert!(store.vectors_out_of_line().await.unwrap() > 0, "migrating alone moves nothing");
    let operations =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md")).unwrap();
    let rewrite = operations
        .lines()
        .skip_while(|line| !line.contains("**Vectors in their rows (PostgreSQL).**"))
        .map(str::trim)
        .filter(|line| line.starts_with("UPDATE memory_embeddings") || line.starts_with("VACUUM FULL"))
        .collect::<Vec<_>>();
    assert_eq!(rewrite.len(), 2, "docs/operations.md gives the rewrite: {rewrite:?}");
    for statement in rewrite {
        // The statements as the page gives them to an operator, not literals of this test.
        let statement = sqlx::AssertSqlSafe(statement.trim_end_matches(';').to_owned());
        sqlx::query(statement).execute(&pool).await.unwrap();
    }
    assert_eq!(store.vectors_out_of_line().await.unwrap(), 0, "the documented rewrite moved every vector");
    let stored: i64 =
        sqlx::query_scalar("SELECT count(*) FROM memory_embeddings").fetch_one(&pool).await.unwrap();
    assert_eq!(stored, 3, "and kept every vector");
}
