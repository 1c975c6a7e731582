//! The store's behaviour, one set of test bodies run against SQLite and against the real
//! PostgreSQL (each test on a fresh database of its own).

use crate::support::TestDb;
use crate::support::on_both_stores;
use memgate::memory::checks::schemas::SchemaSet;
use memgate::memory::{MemoryError, MemoryService};
use memgate::record::Status;
use memgate::store::Store;
use memgate::store::memories::{Created, ListFilter, Validity};
use serde_json::{Value, json};
use std::sync::Arc;

async fn service(db: &TestDb) -> MemoryService {
    let store = Store::connect(&db.url).await.unwrap();
    store.migrate().await.unwrap();
    MemoryService::new(
        store,
        Arc::new(SchemaSet::load(None).unwrap()),
        64 * 1024,
        crate::support::embedder(),
        0.95,
    )
}

fn fact(id: &str, scope: &[&str], statement: &str) -> Value {
    json!({"id": id, "type": "fact", "scope": scope, "content": {"statement": statement}})
}

fn created(outcome: Created) -> memgate::record::Record {
    match outcome {
        Created::New(r) => r,
        other => panic!("expected a new record, got {other:?}"),
    }
}

on_both_stores!(
    create_read_update_keeps_history,
    same_key_and_scope_supersedes,
    an_exact_repeat_answers_the_existing_record,
    concurrent_updates_with_one_if_match_let_exactly_one_through,
    status_changes_and_filters,
    delete_keeps_history_and_forget_erases_it,
    list_search_and_cursor_paging,
    import_preview_apply_undo_and_export_round_trip,
    tenants_never_see_each_other,
    accesses_add_up_move_forward_and_survive_an_update,
    changes_come_in_the_stores_own_order_whatever_the_clocks_say,
    pruned_tombstones_send_a_replica_that_fell_behind_to_reload,
    an_export_reads_the_store_a_page_at_a_time_as_it_is_taken,
    a_large_import_is_read_on_every_core_and_reported_and_indexed_in_line_order,
    dormancy_candidates_are_idle_unpinned_active_records_of_one_type,
    each_records_token_count_is_kept_with_it_and_a_start_reads_it,
);

/// What a dormancy rule reaches: active records of its type, not pinned (priority 5), untouched
/// since the cutoff (written or used), in one tenant or all, a page at a time.
async fn dormancy_candidates_are_idle_unpinned_active_records_of_one_type(db: TestDb) {
    let memories = service(&db).await;
    for (tenant, id) in [("t1", "a"), ("t1", "b"), ("t2", "a")] {
        created(
            memories
                .create(tenant, &fact(id, &["public"], &format!("{tenant} {id} is idle")), "x")
                .await
                .unwrap(),
        );
    }
    let pinned = json!({"id": "pinned", "type": "fact", "scope": ["public"], "priority": 5, "content": {"statement": "pinned"}});
    created(memories.create("t1", &pinned, "x").await.unwrap());
    let pref = json!({"id": "pref", "type": "preference", "scope": ["public"], "content": {"topic": "t", "preference": "p"}});
    created(memories.create("t1", &pref, "x").await.unwrap());
    created(memories.create("t1", &fact("paused", &["public"], "paused one"), "x").await.unwrap());
    memories.set_status("t1", "paused", Status::Paused, "x").await.unwrap();
    let store = memories.store();
    let later = memgate::clock::now_ms() + 3_600_000;
    let ids = |records: Vec<memgate::record::Record>| -> Vec<(String, String)> {
        records.into_iter().map(|r| (r.tenant, r.id)).collect()
    };
    let pair = |t: &str, id: &str| (t.to_owned(), id.to_owned());
    let all = ids(store.dormancy_candidates(None, "fact", later, None, 100).await.unwrap());
    assert_eq!(all, [pair("t1", "a"), pair("t1", "b"), pair("t2", "a")]);
    let t1 = ids(store.dormancy_candidates(Some("t1"), "fact", later, None, 100).await.unwrap());
    assert_eq!(t1, [pair("t1", "a"), pair("t1", "b")]);
    let page = ids(store.dormancy_candidates(None, "fact", later, Some(("t1", "b")), 1).await.unwrap());
    assert_eq!(page, [pair("t2", "a")], "the page after (t1, b)");
    let earlier = memgate::clock::now_ms() - 3_600_000;
    assert!(store.dormancy_candidates(None, "fact", earlier, None, 100).await.unwrap().is_empty());
    // Used at the cutoff: not idle; a moment later it is.
    memories.note_accesses("t1", &["a".to_owned()]);
    memories.flush_accesses().await.unwrap();
    let used = memories.get("t1", "a").await.unwrap().last_accessed_at_ms.unwrap();
    let at_use = ids(store.dormancy_candidates(Some("t1"), "fact", used, None, 100).await.unwrap());
    assert!(!at_use.contains(&pair("t1", "a")), "a record used at the cutoff is not idle: {at_use:?}");
    let after = ids(store.dormancy_candidates(Some("t1"), "fact", used + 1, None, 100).await.unwrap());
    assert!(after.contains(&pair("t1", "a")), "{after:?}");
}

async fn create_read_update_keeps_history(db: TestDb) {
    let memories = service(&db).await;
    let record = created(
        memories.create("t1", &fact("f-1", &["public"], "Paris is the capital"), "alice").await.unwrap(),
    );
    assert_eq!((record.id.as_str(), record.revision, record.status), ("f-1", 1, Status::Active));
    assert_eq!(memories.get("t1", "f-1").await.unwrap(), record);

    let patch = json!({"content": {"statement": "Paris is the capital of France"}, "priority": 5});
    let updated = memories.update("t1", "f-1", &patch, Some(1), "bob").await.unwrap();
    assert_eq!(updated.revision, 2);
    assert_eq!(updated.priority, 5);
    assert_eq!(updated.created_at_ms, record.created_at_ms);

    let stale = memories.update("t1", "f-1", &json!({"priority": 1}), Some(1), "bob").await;
    assert!(matches!(stale, Err(MemoryError::Conflict { expected: 1, actual: 2 })), "{stale:?}");

    let history = memories.history("t1", "f-1").await.unwrap();
    let actions: Vec<(&str, &str, i64)> =
        history.iter().map(|c| (c.action.as_str(), c.actor.as_str(), c.revision)).collect();
    assert_eq!(actions, [("create", "alice", 1), ("update", "bob", 2)]);
    assert_eq!(history[0].before, None);
    assert_eq!(history[1].before.as_ref().unwrap()["content"]["statement"], "Paris is the capital");
    assert_eq!(history[1].after.as_ref().unwrap()["content"]["statement"], "Paris is the capital of France");
}

async fn same_key_and_scope_supersedes(db: TestDb) {
    let memories = service(&db).await;
    let first = json!({"type": "fact", "key": "customer:u-1:plan", "scope": ["user:u-1"], "content": {"statement": "plan: basic"}});
    let second = json!({"type": "fact", "key": "customer:u-1:plan", "scope": ["user:u-1"], "content": {"statement": "plan: pro"}});
    let original = created(memories.create("t", &first, "a").await.unwrap());
    let Created::Superseded(now) = memories.create("t", &second, "a").await.unwrap() else {
        panic!("not superseded")
    };
    assert_eq!((now.id.as_str(), now.revision), (original.id.as_str(), 2));
    assert_eq!(now.content["statement"], "plan: pro");
    let listed = memories.list("t", &ListFilter::default(), None, 100).await.unwrap();
    assert_eq!(listed.len(), 1, "one live record per key and scope");
    let history = memories.history("t", &original.id).await.unwrap();
    assert_eq!(history[1].action, "supersede");
    assert_eq!(history[1].before.as_ref().unwrap()["content"]["statement"], "plan: basic");

    // The same key in another scope is another topic.
    let team = json!({"type": "fact", "key": "customer:u-1:plan", "scope": ["team:sales"], "content": {"statement": "plan: pro"}});
    created(memories.create("t", &team, "a").await.unwrap());
}

async fn an_exact_repeat_answers_the_existing_record(db: TestDb) {
    let memories = service(&db).await;
    let body = json!({"type": "fact", "scope": ["team:a", "public"], "content": {"statement": "x", "source": "crm"}});
    let original = created(memories.create("t", &body, "a").await.unwrap());
    // Same content with keys in another order and the scope listed differently.
    let again = json!({"scope": ["public", "team:a"], "type": "fact", "content": {"source": "crm", "statement": "x"}});
    let Created::ExactRepeat(existing) = memories.create("t", &again, "a").await.unwrap() else {
        panic!("not a repeat")
    };
    assert_eq!(existing.id, original.id);
    assert_eq!(existing.revision, 1);
    assert_eq!(memories.list("t", &ListFilter::default(), None, 100).await.unwrap().len(), 1);
}

async fn concurrent_updates_with_one_if_match_let_exactly_one_through(db: TestDb) {
    let memories = service(&db).await;
    created(memories.create("t", &fact("race", &["public"], "v1"), "a").await.unwrap());
    for round in 1..=5i64 {
        let a = json!({"content": {"statement": format!("A{round}")}});
        let b = json!({"content": {"statement": format!("B{round}")}});
        let (ra, rb) = tokio::join!(
            memories.update("t", "race", &a, Some(round), "a"),
            memories.update("t", "race", &b, Some(round), "b"),
        );
        let winners: Vec<_> = [&ra, &rb].into_iter().filter(|r| r.is_ok()).collect();
        assert_eq!(winners.len(), 1, "round {round}: {ra:?} / {rb:?}");
        let loser = if ra.is_ok() { &rb } else { &ra };
        assert!(matches!(loser, Err(MemoryError::Conflict { .. })), "{loser:?}");
        let stored = memories.get("t", "race").await.unwrap();
        assert_eq!(stored.revision, round + 1);
        let winner = winners[0].as_ref().unwrap();
        assert_eq!(stored.content, winner.content, "the winner's write is what is stored");
    }
    assert_eq!(memories.history("t", "race").await.unwrap().len(), 6, "every accepted write is in history");
}

async fn status_changes_and_filters(db: TestDb) {
    let memories = service(&db).await;
    for id in ["a", "b", "c"] {
        created(memories.create("t", &fact(id, &["public"], id), "x").await.unwrap());
    }
    assert_eq!(memories.set_status("t", "a", Status::Paused, "x").await.unwrap().revision, 2);
    memories.set_status("t", "b", Status::Archived, "x").await.unwrap();
    let only = |status| ListFilter { status: Some(status), ..ListFilter::default() };
    let ids = |records: Vec<memgate::record::Record>| records.into_iter().map(|r| r.id).collect::<Vec<_>>();
    assert_eq!(ids(memories.list("t", &only(Status::Paused), None, 10).await.unwrap()), ["a"]);
    assert_eq!(ids(memories.list("t", &only(Status::Archived), None, 10).await.unwrap()), ["b"]);
    assert_eq!(ids(memories.list("t", &only(Status::Active), None, 10).await.unwrap()), ["c"]);
    memories.set_status("t", "a", Status::Active, "x").await.unwrap();
    let history = memories.history("t", "a").await.unwrap();
    assert_eq!(
        history.iter().map(|c| c.action.as_str()).collect::<Vec<_>>(),
        ["create", "pause", "activate"]
    );
    assert!(matches!(
        memories.set_status("t", "zzz", Status::Paused, "x").await,
        Err(MemoryError::NotFound(_))
    ));
}

async fn delete_keeps_history_and_forget_erases_it(db: TestDb) {
    let memories = service(&db).await;
    created(memories.create("t", &fact("mine", &["user:u-789"], "likes tea"), "x").await.unwrap());
    created(memories.create("t", &fact("shared", &["user:u-789", "team:sales"], "VIP"), "x").await.unwrap());
    created(memories.create("t", &fact("other", &["user:u-1"], "likes coffee"), "x").await.unwrap());
    // A record that named the user once and no longer does: its old history names the user.
    created(memories.create("t", &fact("moved", &["user:u-789"], "old"), "x").await.unwrap());
    memories.update("t", "moved", &json!({"scope": ["team:ops"]}), None, "x").await.unwrap();
    // Deleted earlier: history kept, and it names the user.
    created(memories.create("t", &fact("gone", &["user:u-789"], "deleted"), "x").await.unwrap());
    memories.delete("t", "gone", "x").await.unwrap();
    assert!(matches!(memories.get("t", "gone").await, Err(MemoryError::NotFound(_))));
    assert_eq!(memories.history("t", "gone").await.unwrap().last().unwrap().action, "delete");

    let (ids, _changes) = memories.forget("t", "user:u-789").await.unwrap();
    let records = ids.len() as u64;
    assert_eq!(records, 2);
    for id in ["mine", "shared", "gone"] {
        assert!(matches!(memories.get("t", id).await, Err(MemoryError::NotFound(_))), "{id}");
        assert!(
            matches!(memories.history("t", id).await, Err(MemoryError::NotFound(_))),
            "{id} history survived"
        );
    }
    // The record that moved away keeps its place, but no history entry that named the user.
    assert_eq!(memories.get("t", "moved").await.unwrap().scope, ["team:ops"]);
    // Nothing left anywhere names the user: not records, not any history entry.
    let everything = memories.list("t", &ListFilter::default(), None, 100).await.unwrap();
    for record in &everything {
        assert!(!record.to_json().to_string().contains("u-789"), "{}", record.id);
        for change in memories.history("t", &record.id).await.unwrap() {
            let text = format!("{:?}{:?}", change.before, change.after);
            assert!(!text.contains("u-789"), "history of {} still names the user", record.id);
        }
    }
    assert!(everything.iter().any(|r| r.id == "other"), "other users' records stay");
}

async fn list_search_and_cursor_paging(db: TestDb) {
    let memories = service(&db).await;
    for i in 0..23 {
        let scope = if i % 2 == 0 { "team:even" } else { "team:odd" };
        created(
            memories
                .create("t", &fact(&format!("r{i:02}"), &[scope], &format!("note number {i}")), "x")
                .await
                .unwrap(),
        );
    }
    let sop = json!({"id": "sop-1", "type": "internal_sop", "scope": ["public"], "aliases": ["下周发货", "Next Week Delivery"],
        "key": "sop:delivery", "valid_until": "2999-01-01T00:00:00Z",
        "content": {"title": "Delivery", "steps": "Check the 库存 first, then ship 100% of it"}});
    created(memories.create("t", &sop, "x").await.unwrap());

    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = memories.list("t", &ListFilter::default(), cursor.as_deref(), 5).await.unwrap();
        seen.extend(page.iter().map(|r| r.id.clone()));
        if page.len() < 5 {
            break;
        }
        cursor = page.last().map(|r| r.id.clone());
    }
    assert_eq!(seen.len(), 24, "paging returns every record once: {seen:?}");
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), 24);

    let memories = &memories;
    let filter = |f: ListFilter| async move { memories.list("t", &f, None, 100).await.unwrap().len() };
    assert_eq!(filter(ListFilter { scope: Some("team:even".into()), ..Default::default() }).await, 12);
    assert_eq!(
        filter(ListFilter { record_type: Some("internal_sop".into()), ..Default::default() }).await,
        1
    );
    assert_eq!(
        filter(ListFilter { q: Some("NUMBER 1".into()), ..Default::default() }).await,
        11,
        "case-insensitive, 1 and 10-19"
    );
    assert_eq!(filter(ListFilter { q: Some("下周".into()), ..Default::default() }).await, 1);
    assert_eq!(filter(ListFilter { q: Some("next week".into()), ..Default::default() }).await, 1);
    assert_eq!(filter(ListFilter { q: Some("100%".into()), ..Default::default() }).await, 1, "% is literal");
    assert_eq!(filter(ListFilter { q: Some("1_0".into()), ..Default::default() }).await, 0, "_ is literal");
    // The console's filters: a topic key exactly, and where validity lies against a moment.
    assert_eq!(filter(ListFilter { key: Some("sop:delivery".into()), ..Default::default() }).await, 1);
    assert_eq!(filter(ListFilter { key: Some("sop:deliver".into()), ..Default::default() }).await, 0);
    let now = memgate::clock::now_ms();
    let valid = |v, at| ListFilter { valid: Some((v, at)), ..Default::default() };
    assert_eq!(filter(valid(Validity::Now, now)).await, 24);
    assert_eq!(filter(valid(Validity::Expired, now)).await, 0);
    let far = memgate::clock::parse_rfc3339_ms("2999-06-01T00:00:00Z").unwrap();
    assert_eq!(filter(valid(Validity::Expired, far)).await, 1, "only the SOP ends");
    assert_eq!(filter(valid(Validity::Future, 0)).await, 24, "all begin after 1970");
}

async fn import_preview_apply_undo_and_export_round_trip(db: TestDb) {
    let memories = service(&db).await;
    created(memories.create("t", &fact("exists", &["public"], "already here"), "x").await.unwrap());
    let lines = [
        fact("n1", &["public"], "one").to_string(),
        fact("n2", &["team:a"], "two").to_string(),
        fact("exists", &["public"], "different text, same id").to_string(),
        json!({"type": "fact", "scope": ["public"], "content": {"statement": "already here"}}).to_string(),
        "{not json".to_owned(),
        json!({"type": "fact", "scope": ["public"], "content": {"wrong": 1}}).to_string(),
        fact("n1", &["public"], "repeats the id of line 1").to_string(),
    ];
    let body = lines.join("\n");
    let preview = memories.import("t", &body, true, "x").await.unwrap();
    assert_eq!((preview.counts.new, preview.counts.existing, preview.counts.invalid), (2, 2, 3));
    assert!(!preview.applied);
    assert_eq!(
        memories.list("t", &ListFilter::default(), None, 100).await.unwrap().len(),
        1,
        "a dry run writes nothing"
    );

    // An apply with invalid lines adds nothing at all.
    let refused = memories.import("t", &body, false, "x").await.unwrap();
    assert!(!refused.applied && refused.import_id.is_none());
    assert_eq!(memories.list("t", &ListFilter::default(), None, 100).await.unwrap().len(), 1);

    let good = lines[..4].join("\n");
    let applied = memories.import("t", &good, false, "x").await.unwrap();
    assert!(applied.applied);
    let import_id = applied.import_id.unwrap();
    assert_eq!(memories.list("t", &ListFilter::default(), None, 100).await.unwrap().len(), 3);
    assert_eq!(memories.history("t", "n1").await.unwrap()[0].action, "import");

    let removed = memories.undo_import("t", &import_id, "x").await.unwrap();
    assert_eq!(removed, ["n1", "n2"]);
    let left: Vec<String> = memories
        .list("t", &ListFilter::default(), None, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(left, ["exists"], "undo removes exactly what the import added");
    assert!(
        memories.undo_import("t", &import_id, "x").await.unwrap().is_empty(),
        "undo twice removes nothing more"
    );

    // Export → import into an empty store gives the same records.
    memories.import("t", &good, false, "x").await.unwrap();
    memories.set_status("t", "n2", Status::Paused, "x").await.unwrap();
    let exported = memories.export("t", &ListFilter::default()).await.unwrap();
    let other_db = TestDb::sqlite();
    let fresh = service(&other_db).await;
    let report = fresh.import("t", &exported, false, "x").await.unwrap();
    assert_eq!(report.counts.new, 3);
    let before = memories.list("t", &ListFilter::default(), None, 100).await.unwrap();
    let after = fresh.list("t", &ListFilter::default(), None, 100).await.unwrap();
    let envelopes = |rs: &[memgate::record::Record]| rs.iter().map(|r| r.envelope_json()).collect::<Vec<_>>();
    assert_eq!(envelopes(&before), envelopes(&after));
}

/// A body large enough to be read on every core (the lines split between threads) is reported
/// exactly as one read line by line: each line's own number and outcome, blank lines counted,
/// invalid lines wherever a split falls; applied, every record is in the index with its terms.
async fn a_large_import_is_read_on_every_core_and_reported_and_indexed_in_line_order(db: TestDb) {
    let memories = service(&db).await;
    let count = 3_000;
    let broken = [1, 2, 1_499, 1_500, 1_501, count];
    let mut lines: Vec<String> = (1..=count)
        .map(|n| {
            fact(&format!("big-{n:05}"), &["public"], &format!("line {n} says ORD-{n:06} shipped"))
                .to_string()
        })
        .collect();
    let valid_body = lines.join("\n");
    for n in broken {
        lines[n - 1] = if n % 2 == 0 { "{not json".to_owned() } else { json!({"type": "fact"}).to_string() };
    }
    // A blank line after line 10 moves every later line's number by one.
    lines.insert(10, "   ".to_owned());
    let body = lines.join("\n");
    assert!(body.len() > memgate::cpu::INLINE_BYTES, "the body must be large enough to be split");

    let preview = memories.import("t", &body, true, "x").await.unwrap();
    assert_eq!((preview.counts.new, preview.counts.invalid), (count - broken.len(), broken.len()));
    let numbered: Vec<(usize, bool)> = preview
        .lines
        .iter()
        .map(|line| {
            (line.line, matches!(line.outcome, memgate::memory::transfer::LineOutcome::Invalid { .. }))
        })
        .collect();
    let expected: Vec<(usize, bool)> =
        (1..=count).map(|n| (if n > 10 { n + 1 } else { n }, broken.contains(&n))).collect();
    assert_eq!(numbered, expected);
    for line in &preview.lines {
        if let memgate::memory::transfer::LineOutcome::New { id } = &line.outcome {
            let n = if line.line > 11 { line.line - 1 } else { line.line };
            assert_eq!(id, &format!("big-{n:05}"), "line {} reports its own record", line.line);
        }
    }

    let applied = memories.import("t", &valid_body, false, "x").await.unwrap();
    assert_eq!(applied.counts.new, count);
    if db.url.starts_with("postgres") {
        // PostgreSQL plans the next import's lookups from statistics that know these rows: a
        // table left as analyzed empty is read whole for every `topic_key IN (…)`.
        let mut conn = <sqlx::AnyConnection as sqlx::Connection>::connect(&db.url).await.unwrap();
        let row = sqlx::query(
            "SELECT c.reltuples::bigint AS rows FROM pg_class c WHERE c.oid = to_regclass('memories')",
        )
        .fetch_one(&mut conn)
        .await
        .unwrap();
        let rows: i64 = sqlx::Row::get(&row, "rows");
        assert_eq!(rows, count as i64, "the import left the planner's statistics current");
    }
    let index = memories.index().tenant("t").expect("the tenant is indexed");
    let index = index.read().unwrap();
    assert_eq!(index.len(), count);
    for n in [1, 1_500, count] {
        let slot = index.slot_of(&format!("big-{n:05}")).expect("every imported record is indexed");
        let listed = index
            .by_term
            .get(&format!("ord-{n:06}"))
            .map(|slots| slots.iter().copied().collect::<Vec<u32>>());
        assert_eq!(listed, Some(vec![slot]), "big-{n:05} is listed under its order number");
    }
}

/// Every write keeps the record's token count (`record::line_tokens`) beside it, a start takes
/// it from there instead of counting again, and a row kept before counts were (NULL) is counted.
async fn each_records_token_count_is_kept_with_it_and_a_start_reads_it(db: TestDb) {
    let memories = service(&db).await;
    created(memories.create("t", &fact("made", &["public"], "the office opens at nine"), "x").await.unwrap());
    created(memories.create("t", &fact("grown", &["public"], "parcels ship from Lyon"), "x").await.unwrap());
    let longer =
        json!({"content": {"statement": "a much longer statement, with many more words in it than before"}});
    memories.update("t", "grown", &longer, None, "x").await.unwrap();
    let lines: Vec<String> = (0..3)
        .map(|n| fact(&format!("imported-{n}"), &["public"], &"word ".repeat(n * 7 + 1)).to_string())
        .collect();
    assert_eq!(memories.import("t", &lines.join("\n"), false, "x").await.unwrap().counts.new, 3);

    let mut conn = <sqlx::AnyConnection as sqlx::Connection>::connect(&db.url).await.unwrap();
    let kept = |rows: Vec<sqlx::any::AnyRow>| -> Vec<(String, Option<i64>)> {
        rows.iter().map(|r| (sqlx::Row::get(r, "id"), sqlx::Row::get(r, "line_tokens"))).collect()
    };
    let rows =
        sqlx::query("SELECT id, line_tokens FROM memories ORDER BY id").fetch_all(&mut conn).await.unwrap();
    let kept = kept(rows);
    assert_eq!(kept.len(), 5);
    for (id, tokens) in &kept {
        let record = memories.get("t", id).await.unwrap();
        assert_eq!(*tokens, Some(i64::from(record.line_tokens())), "{id}: the count of its current revision");
        let index = memories.index().tenant("t").unwrap();
        assert_eq!(index.read().unwrap().get(id).unwrap().tokens, record.line_tokens() as usize, "{id}");
    }

    // A count set by hand shows that a start reads it; a row with none is counted at load.
    sqlx::query("UPDATE memories SET line_tokens = 4242 WHERE id = 'made'").execute(&mut conn).await.unwrap();
    sqlx::query("UPDATE memories SET line_tokens = NULL WHERE id = 'grown'")
        .execute(&mut conn)
        .await
        .unwrap();
    let restarted = service(&db).await;
    restarted.load_index().await.unwrap();
    let index = restarted.index().tenant("t").unwrap();
    let index = index.read().unwrap();
    assert_eq!(index.get("made").unwrap().tokens, 4242);
    let grown = memories.get("t", "grown").await.unwrap();
    assert_eq!(index.get("grown").unwrap().tokens, grown.line_tokens() as usize);
    assert!(grown.line_tokens() > 20, "the update's longer content is what was counted");
    drop(index);

    // The count the load had to take is kept for the next start; the count set by hand stays.
    let url = db.url.clone();
    let stored = |id: &'static str| {
        let url = url.clone();
        async move {
            let mut conn = <sqlx::AnyConnection as sqlx::Connection>::connect(&url).await.unwrap();
            let row = sqlx::query("SELECT line_tokens FROM memories WHERE id = $1")
                .bind(id)
                .fetch_one(&mut conn)
                .await
                .unwrap();
            sqlx::Row::get::<Option<i64>, _>(&row, "line_tokens")
        }
    };
    let kept = crate::support::eventually(std::time::Duration::from_secs(10), "the count kept", || async {
        stored("grown").await
    })
    .await;
    assert_eq!(kept, i64::from(grown.line_tokens()));
    assert_eq!(stored("made").await, Some(4242));
}

/// A property over random operations: whatever one tenant does, another never sees or changes it.
/// Archived facts as JSON Lines (archived: nothing to embed), ids `{prefix}-0000` on.
fn archived_lines(prefix: &str, count: usize) -> String {
    (0..count)
        .map(|i| {
            let record = json!({"id": format!("{prefix}-{i:04}"), "type": "fact", "scope": ["public"],
                "status": "archived", "content": {"statement": format!("note {prefix} {i}")}});
            format!("{record}\n")
        })
        .collect()
}

/// An export is read from the store page by page as its reader takes the pages, never collected
/// whole first: a record written after the first page was taken, with an id that sorts after
/// it, is in the rest of the export.
async fn an_export_reads_the_store_a_page_at_a_time_as_it_is_taken(db: TestDb) {
    use futures_util::TryStreamExt;
    let memories = service(&db).await;
    assert!(memories.import("t", &archived_lines("a", 600), false, "x").await.unwrap().applied);
    let mut pages = std::pin::pin!(memories.export_pages("t", &ListFilter::default()));
    let first = pages.try_next().await.unwrap().unwrap();
    assert_eq!(first.lines().count(), 500);
    assert!(memories.import("t", &archived_lines("b", 1), false, "x").await.unwrap().applied);
    let rest: String =
        pages.try_fold(String::new(), |all, page| async move { Ok(all + &page) }).await.unwrap();
    assert_eq!(rest.lines().count(), 101, "{rest}");
    assert!(rest.contains("\"id\":\"b-0000\""), "{rest}");
    // Taken whole, the same bytes as page after page.
    let whole = memories.export("t", &ListFilter::default()).await.unwrap();
    assert_eq!(whole, format!("{first}{rest}"));
}

async fn tenants_never_see_each_other(db: TestDb) {
    let memories = service(&db).await;
    let tenants = ["acme", "globex", "initech"];
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    for step in 0..60 {
        let tenant = tenants[next(3) as usize];
        let id = format!("shared-{}", next(8));
        match next(4) {
            0 | 1 => {
                let _ = memories
                    .create(tenant, &fact(&id, &["public"], &format!("{tenant} says {step}")), tenant)
                    .await;
            }
            2 => {
                let _ = memories
                    .update(
                        tenant,
                        &id,
                        &json!({"content": {"statement": format!("{tenant} edit {step}")}}),
                        None,
                        tenant,
                    )
                    .await;
            }
            _ => {
                let _ = memories.delete(tenant, &id, tenant).await;
            }
        }
    }
    for tenant in tenants {
        for record in memories.list(tenant, &ListFilter::default(), None, 1000).await.unwrap() {
            assert_eq!(record.tenant, tenant);
            let statement = record.content["statement"].as_str().unwrap();
            assert!(statement.starts_with(tenant), "{tenant} sees `{statement}`");
            for change in memories.history(tenant, &record.id).await.unwrap() {
                assert_eq!(change.actor, tenant, "{tenant}'s history holds another tenant's change");
            }
        }
        let exported = memories.export(tenant, &ListFilter::default()).await.unwrap();
        for other in tenants.iter().filter(|t| **t != tenant) {
            assert!(!exported.contains(&format!("{other} ")), "{tenant}'s export holds {other}'s data");
        }
    }
}

async fn accesses_add_up_move_forward_and_survive_an_update(db: TestDb) {
    let memories = service(&db).await;
    created(memories.create("t1", &fact("f-1", &["public"], "Paris is the capital"), "alice").await.unwrap());
    created(
        memories.create("t2", &fact("f-1", &["public"], "Another tenant's twin id"), "alice").await.unwrap(),
    );
    let ids = ["f-1".to_owned()];
    memories.note_accesses("t1", &ids);
    memories.note_accesses("t1", &ids);
    memories.flush_accesses().await.unwrap();
    let read = memories.get("t1", "f-1").await.unwrap();
    assert_eq!((read.access_count, read.revision), (2, 1));
    let first_access = read.last_accessed_at_ms.expect("last_accessed_at is set");
    assert_eq!(memories.get("t2", "f-1").await.unwrap().access_count, 0, "another tenant's record counted");

    // Another replica flushing an older access adds to the count but does not move the time back.
    memories
        .store()
        .add_accesses(&[memgate::record::Access {
            tenant: "t1".into(),
            id: "f-1".into(),
            count: 3,
            last_ms: first_access - 60_000,
        }])
        .await
        .unwrap();
    let read = memories.get("t1", "f-1").await.unwrap();
    assert_eq!((read.access_count, read.last_accessed_at_ms), (5, Some(first_access)));

    // An edit keeps the counts; a deleted record's pending accesses are dropped without error.
    let updated = memories.update("t1", "f-1", &json!({"priority": 5}), None, "bob").await.unwrap();
    assert_eq!((updated.access_count, updated.last_accessed_at_ms), (5, Some(first_access)));
    memories.note_accesses("t1", &["gone".to_owned()]);
    memories.flush_accesses().await.unwrap();
}

/// Two replicas' services on one store: what one writes, the other takes in by the store's
/// sequence, never by a time.
async fn changes_come_in_the_stores_own_order_whatever_the_clocks_say(db: TestDb) {
    let a = service(&db).await;
    let b = service(&db).await;
    a.load_index().await.unwrap();
    b.load_index().await.unwrap();
    a.create("t", &fact("m1", &["public"], "The depot opens at six."), "a").await.unwrap();
    let store = a.store();
    let seq_after_create = store.sync_cursor().await.unwrap();
    let changes = store.changed_since(0).await.unwrap().unwrap();
    assert_eq!(changes.records.len(), 1);
    assert_eq!(changes.upto, seq_after_create);
    assert!(changes.records[0].change_seq > 0 && changes.records[0].change_seq <= changes.upto);
    // Nothing new after the cursor.
    let none = store.changed_since(changes.upto).await.unwrap().unwrap();
    assert!(none.records.is_empty() && none.removed.is_empty());

    b.sync_from_store().await.unwrap();
    assert!(b.index().tenant("t").is_some_and(|i| i.read().unwrap().get("m1").is_some()));
    // A tombstone stamped with a time far in the past, as a replica with a slow clock writes it,
    // is taken in all the same: the sequence decides.
    a.delete("t", "m1", "a").await.unwrap();
    let changes = store.changed_since(seq_after_create).await.unwrap().unwrap();
    assert_eq!(changes.removed.len(), 1);
    assert!(changes.removed[0].2 > seq_after_create);
    b.sync_from_store().await.unwrap();
    assert!(b.index().tenant("t").is_none_or(|i| i.read().unwrap().get("m1").is_none()));
}

/// Tombstones keep the ids of deleted and forgotten records: they are pruned, and a replica
/// whose cursor is older than the pruned ones reloads rather than miss a removal.
async fn pruned_tombstones_send_a_replica_that_fell_behind_to_reload(db: TestDb) {
    let a = service(&db).await;
    a.load_index().await.unwrap();
    a.create("t", &fact("gone", &["user:u-1"], "Paris office, floor 3."), "a").await.unwrap();
    a.create("t", &fact("kept", &["public"], "Support answers within a day."), "a").await.unwrap();
    a.forget("t", "user:u-1").await.unwrap();
    let store = a.store();
    assert_eq!(store.changed_since(0).await.unwrap().unwrap().removed.len(), 1);
    // Nothing is old enough yet.
    assert_eq!(store.prune_tombstones(0).await.unwrap(), 0);
    let pruned = store.prune_tombstones(memgate::clock::now_ms() + 1).await.unwrap();
    assert_eq!(pruned, 1, "the forgotten record's id is gone from the tombstones");
    assert!(
        store.changed_since(0).await.unwrap().is_none(),
        "a cursor below the pruned tombstones must reload"
    );
    let cursor = store.sync_cursor().await.unwrap();
    assert!(store.changed_since(cursor).await.unwrap().is_some());
    // A replica that fell behind reloads and ends up right.
    let late = service(&db).await;
    late.sync_from_store().await.unwrap();
    let index = late.index().tenant("t").unwrap();
    let index = index.read().unwrap();
    assert!(index.get("kept").is_some() && index.get("gone").is_none());
}

/// Every connection to PostgreSQL sends without Nagle's delay (`TCP_NODELAY`). Without it a
/// statement larger than one segment leaves its tail in the kernel until the server's delayed
/// acknowledgement (40 ms on Linux): an import's multi-row inserts waited on that several times a
/// chunk, and on a real network any write over ~1.4 KB would. sqlx 0.9.0 stopped setting it;
/// 0.9.1 sets it again, and this keeps it so.
#[tokio::test]
async fn postgres_connections_send_without_nagles_delay() {
    let db = TestDb::postgres().await;
    let store = Store::connect(&db.url).await.unwrap();
    store.migrate().await.unwrap();
    let port: u16 =
        db.url.rsplit_once(':').and_then(|(_, rest)| rest.split('/').next()).unwrap().parse().unwrap();
    let to_postgres = tcp_sockets_to_port(port);
    assert!(!to_postgres.is_empty(), "the store holds a connection to port {port}");
    for (fd, nodelay) in to_postgres {
        assert!(
            nodelay,
            "the connection on fd {fd} to PostgreSQL waits for acknowledgements (TCP_NODELAY off)"
        );
    }
    drop(store);
}

/// This process's TCP sockets whose peer listens on `port`, with whether each has `TCP_NODELAY`.
#[allow(unsafe_code)]
fn tcp_sockets_to_port(port: u16) -> Vec<(i32, bool)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let Ok(fd) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        if !std::fs::read_link(entry.path())
            .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"))
        {
            continue;
        }
        // SAFETY: plain reads of a socket's options into local buffers of the sizes passed; a
        // descriptor closed meanwhile makes the calls fail, which skips it.
        unsafe {
            let mut addr: libc::sockaddr_storage = std::mem::zeroed();
            let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            if libc::getpeername(fd, (&raw mut addr).cast(), &mut len) != 0 {
                continue;
            }
            let peer_port = match i32::from(addr.ss_family) {
                libc::AF_INET => u16::from_be((*(&raw const addr).cast::<libc::sockaddr_in>()).sin_port),
                libc::AF_INET6 => u16::from_be((*(&raw const addr).cast::<libc::sockaddr_in6>()).sin6_port),
                _ => continue,
            };
            if peer_port != port {
                continue;
            }
            let mut on: libc::c_int = 0;
            let mut size = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            if libc::getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, (&raw mut on).cast(), &mut size)
                == 0
            {
                found.push((fd, on != 0));
            }
        }
    }
    found
}
