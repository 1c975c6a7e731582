//! The console's reads and rows in the store, on SQLite and on the real PostgreSQL: sessions bound
//! to the token that opened them, and data health computed by the database (aggregates and a paged
//! read of live contents) giving the very answer a pass over every record gives.

use crate::console::{
    ADMIN, VIEWER, assert_code, console_request, count, host_with_tokens, login, raw, router, send, store,
};
use crate::support::TestDb;
use crate::support::on_both_stores;
use memgate::console::data_health::{data_health, data_health_from_store};
use memgate::console::session::{self, SessionPolicy};
use memgate::console::{AdminTokens, ConsoleAuth, Role};
use memgate::memory::checks::schemas::SchemaSet;
use memgate::record::{Access, Envelope, OPEN_END_MS, Status};
use memgate::store::Store;
use memgate::store::memories::ListFilter;
use serde_json::{Value, json};

const ROTATED: &str = "rotated-admin-token-for-the-console-tests";
const KEY: &[u8] = b"the deployment's session key";

on_both_stores!(
    a_replica_with_another_token_refuses_and_deletes_the_session,
    at_start_only_the_sessions_of_the_tokens_configured_now_are_kept,
    data_health_from_the_database_is_the_answer_of_every_record,
);

fn tokens(admin: Option<&str>, viewer: Option<&str>) -> AdminTokens {
    AdminTokens::new(admin.map(Into::into), viewer.map(Into::into)).with_session_key(KEY)
}

async fn sessions(db: &TestDb) -> i64 {
    count(&mut raw(db).await, "SELECT COUNT(*) FROM console_sessions").await
}

async fn a_replica_with_another_token_refuses_and_deletes_the_session(db: TestDb) {
    let policy = SessionPolicy::default();
    // One database, two replicas in the middle of a rotation: `old` still has the old admin
    // token, `new` has the new one; both have the same viewer token.
    let old = router(host_with_tokens(store(&db).await, tokens(Some(ADMIN), Some(VIEWER)), policy));
    let new = router(host_with_tokens(store(&db).await, tokens(Some(ROTATED), Some(VIEWER)), policy));
    let admin = login(&old, ADMIN, Some("alice")).await;
    let viewer = login(&old, VIEWER, Some("vic")).await;
    let ok = send(&old, console_request("GET", "/admin/v1/memories", Some(&admin), &[], None)).await;
    assert_eq!(ok.status, 200, "{}", ok.body);

    let refused = send(&new, console_request("POST", "/admin/v1/memories", Some(&admin), &[], None)).await;
    assert_code(&refused, 401, "authentication_error", "no_session");
    let who = send(&new, console_request("GET", "/console/session", Some(&admin), &[], None)).await;
    assert_eq!(who.body, json!({"authenticated": false}));
    // The session is gone for every replica, the one that opened it included.
    let gone = send(&old, console_request("GET", "/admin/v1/memories", Some(&admin), &[], None)).await;
    assert_code(&gone, 401, "authentication_error", "no_session");
    // The viewer token did not change: its session works on both.
    for replica in [&old, &new] {
        let read =
            send(replica, console_request("GET", "/admin/v1/memories", Some(&viewer), &[], None)).await;
        assert_eq!(read.status, 200, "{}", read.body);
    }
    assert_eq!(sessions(&db).await, 1);

    // Another session key (another deployment's, or a changed `admin.session_secret`) is another
    // binding, even for the same token.
    let rekeyed = AdminTokens::new(Some(ADMIN.into()), Some(VIEWER.into())).with_session_key(b"another key");
    let rekeyed = router(host_with_tokens(store(&db).await, rekeyed, policy));
    let refused =
        send(&rekeyed, console_request("GET", "/admin/v1/memories", Some(&viewer), &[], None)).await;
    assert_code(&refused, 401, "authentication_error", "no_session");
    assert_eq!(sessions(&db).await, 0);
}

async fn at_start_only_the_sessions_of_the_tokens_configured_now_are_kept(db: TestDb) {
    let store = store(&db).await;
    let policy = SessionPolicy::default();
    let now = memgate::clock::now_ms();
    let before = ConsoleAuth { tokens: tokens(Some(ADMIN), Some(VIEWER)), policy };
    let (admin, _) = session::create(&store, &before, Role::Admin, "console:a", now).await.unwrap();
    let (viewer, _) = session::create(&store, &before, Role::Viewer, "console:v", now).await.unwrap();
    // A row from before sessions were bound: no fingerprint.
    sqlx::query(
        "INSERT INTO console_sessions (token_hash, role, actor, created_at, expires_at, last_seen_at) \
         VALUES ('legacy', 'admin', 'console', $1, $2, $1)",
    )
    .bind(now)
    .bind(now + 3_600_000)
    .execute(&mut raw(&db).await)
    .await
    .unwrap();

    // Restarted with the same tokens: only the unbound row goes.
    assert_eq!(session::end_unbound(&store, &before.tokens).await.unwrap(), 1);
    assert!(session::find(&store, &admin, &before, now).await.unwrap().is_some());
    assert!(session::find(&store, &viewer, &before, now).await.unwrap().is_some());
    // Without the viewer token: the viewer's session goes, the admin's stays.
    let no_viewer = ConsoleAuth { tokens: tokens(Some(ADMIN), None), policy };
    assert_eq!(session::end_unbound(&store, &no_viewer.tokens).await.unwrap(), 1);
    assert!(session::find(&store, &admin, &no_viewer, now).await.unwrap().is_some());
    assert_eq!(sessions(&db).await, 1);
    // A new admin token: none is left; with the admin API off, none either.
    let (_, _) = session::create(&store, &no_viewer, Role::Admin, "console:b", now).await.unwrap();
    assert_eq!(session::end_unbound(&store, &tokens(Some(ROTATED), Some(VIEWER))).await.unwrap(), 2);
    let (_, _) = session::create(&store, &no_viewer, Role::Admin, "console:c", now).await.unwrap();
    assert_eq!(session::end_unbound(&store, &tokens(None, Some(VIEWER))).await.unwrap(), 1);
    assert_eq!(sessions(&db).await, 0);
    // Logout-all: every session, whoever opened it.
    for actor in ["console:d", "console:e"] {
        session::create(&store, &no_viewer, Role::Admin, actor, now).await.unwrap();
    }
    session::create(&store, &before, Role::Viewer, "console:f", now).await.unwrap();
    assert_eq!(session::end_all(&store).await.unwrap(), 3);
    assert_eq!(session::end_all(&store).await.unwrap(), 0);
}

// ---------------------------------------------------------------- data health

const NOW: i64 = 1_750_000_000_000;

fn envelope(i: usize) -> Envelope {
    let record_type = if i.is_multiple_of(3) { "preference" } else { "fact" };
    let content = match i {
        i if i % 7 == 0 => json!({"tier": format!("gold-{i}")}),
        i if i % 11 == 0 => json!({"statement": ""}),
        i if i % 19 == 0 => json!({}),
        i => json!({"statement": format!("Fact number {i}.")}),
    };
    let (valid_from_ms, valid_until_ms) = match i {
        i if i % 5 == 0 => (0, NOW - 1),
        i if i % 13 == 0 => (NOW + 1_000, OPEN_END_MS),
        _ => (0, OPEN_END_MS),
    };
    Envelope {
        id: None,
        record_type: record_type.into(),
        schema_version: if i.is_multiple_of(2) { "v1" } else { "v2" }.into(),
        scope: vec!["public".into()],
        valid_from_ms,
        valid_until_ms,
        priority: 3,
        key: None,
        aliases: vec![],
        content,
        metadata: serde_json::Map::new(),
        status: None,
    }
}

/// Ids whose byte order and a language collation's order differ: upper and lower case,
/// punctuation, digits.
fn id(i: usize) -> String {
    match i % 4 {
        0 => format!("Rec-{i:04}"),
        1 => format!("rec.{i:04}"),
        2 => format!("rec_{i}"),
        _ => format!("a-{i}"),
    }
}

async fn every_record(store: &Store, tenant: &str) -> Vec<memgate::record::Record> {
    let mut records = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = store.list_records(tenant, &ListFilter::default(), after.as_deref(), 1000).await.unwrap();
        after = page.last().map(|r| r.id.clone());
        let done = page.len() < 1000;
        records.extend(page);
        if done {
            return records;
        }
    }
}

async fn data_health_from_the_database_is_the_answer_of_every_record(db: TestDb) {
    let store = store(&db).await;
    let schemas = SchemaSet::load(None).unwrap();
    // More live records than one page of contents, more failures than are listed, more
    // never-injected records than the sample.
    let records: Vec<(String, Envelope)> = (0..2_100).map(|i| (id(i), envelope(i))).collect();
    store.apply_import("acme", "imp-1", &records, "test", NOW - 10_000).await.unwrap();
    store.apply_import("other", "imp-2", &records[..50], "test", NOW - 10_000).await.unwrap();
    for i in (0..records.len()).filter(|i| i % 9 == 4 || i % 17 == 8) {
        let status = if i % 9 == 4 { Status::Paused } else { Status::Archived };
        store
            .set_record_status("acme", &id(i), &[Status::Active], status, "test", NOW - 5_000)
            .await
            .unwrap();
    }
    let accesses: Vec<Access> = (0..records.len())
        .filter(|i| i % 3 != 1 || *i > 1_900)
        .map(|i| Access { tenant: "acme".into(), id: id(i), count: 2, last_ms: NOW - 1_000 })
        .collect();
    store.add_accesses(&accesses).await.unwrap();

    let answer = data_health_from_store(&store, "acme", &schemas, NOW).await.unwrap();
    let expected = data_health(&every_record(&store, "acme").await, &schemas, NOW);
    assert_eq!(answer, expected);
    // The seed exercises every figure.
    assert_eq!(answer.records.total, 2_100);
    assert!(answer.records.paused > 0 && answer.records.archived > 0);
    assert!(answer.live > 1_000, "{}", answer.live);
    assert!(answer.schema_failures.count > 100, "{}", answer.schema_failures.count);
    assert_eq!(answer.schema_failures.items.len(), 50);
    assert!(answer.never_injected.count > 20, "{}", answer.never_injected.count);
    assert_eq!(answer.never_injected.sample.len(), 20);
    assert!(answer.non_empty_content.count < answer.live);
    assert!(answer.future_valid_until.count < answer.live && answer.not_yet_valid.count > 0);
    assert_eq!(answer.by_type.len(), 2);
    // The answer's JSON is what the endpoint serves; compare it whole too.
    let as_json = |health: &memgate::console::data_health::DataHealth| -> Value {
        serde_json::to_value(health).unwrap()
    };
    assert_eq!(as_json(&answer), as_json(&expected));

    // A tenant without records.
    let empty = data_health_from_store(&store, "nobody", &schemas, NOW).await.unwrap();
    assert_eq!(empty, data_health(&[], &schemas, NOW));
}
