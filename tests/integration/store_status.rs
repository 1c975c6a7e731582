//! Status changes name the status they expect, on SQLite and on the real PostgreSQL: the store
//! compares and sets in the write's transaction, so a change that finds the record in another
//! status changes nothing. A dormancy sweep that judged a record idle, or a tool's read that found
//! it dormant, cannot undo a pause or an archive an operator made meanwhile; a review's bulk
//! approval takes only what awaits review (`proposed`) or sleeps (`dormant`).

use crate::support::TestDb;
use crate::support::on_both_stores;
use memgate::memory::review::Decision;
use memgate::memory::{MemoryError, MemoryService};
use memgate::record::Status;
use memgate::store::StoreError;
use serde_json::json;

async fn service(db: &TestDb) -> MemoryService {
    crate::support::memory_service(&db.url).await
}

/// One record of each status, `id` = its status.
async fn one_of_each(memories: &MemoryService) {
    for status in ["active", "paused", "archived", "proposed", "dormant"] {
        let record = json!({"id": status, "type": "fact", "scope": ["public"], "status": status,
            "content": {"statement": format!("a {status} record")}});
        memories.create("t", &record, "ops").await.unwrap();
    }
}

async fn status(memories: &MemoryService, id: &str) -> Status {
    memories.get("t", id).await.unwrap().status
}

on_both_stores!(
    a_status_change_from_a_status_it_does_not_expect_changes_nothing,
    a_tools_read_wakes_only_a_dormant_record,
    a_bulk_approval_takes_only_proposed_and_dormant_records,
);

/// What a sweep does to a record paused after it was found idle: `active → dormant` finds it
/// `paused`, and the record keeps its status, revision and history.
async fn a_status_change_from_a_status_it_does_not_expect_changes_nothing(db: TestDb) {
    let memories = service(&db).await;
    one_of_each(&memories).await;
    let store = memories.store();
    let now = memgate::clock::now_ms();
    for id in ["paused", "archived", "proposed"] {
        let before = memories.get("t", id).await.unwrap();
        let refused =
            store.set_record_status("t", id, &[Status::Active], Status::Dormant, "dormancy", now).await;
        assert!(
            matches!(refused, Err(StoreError::StatusConflict { actual }) if actual == before.status),
            "{id}: {refused:?}"
        );
        assert_eq!(memories.get("t", id).await.unwrap(), before, "{id} changed");
        assert_eq!(memories.history("t", id).await.unwrap().len(), 1, "{id}: a change was logged");
    }
    let slept =
        store.set_record_status("t", "active", &[Status::Active], Status::Dormant, "dormancy", now).await;
    assert_eq!(slept.unwrap().status, Status::Dormant);
    // Already where the change leads: nothing to do, whatever it expected.
    let again =
        store.set_record_status("t", "active", &[Status::Active], Status::Dormant, "dormancy", now).await;
    assert_eq!(again.unwrap().revision, 2, "a second change to the same status writes nothing");
    assert!(matches!(
        store.set_record_status("t", "nope", &[Status::Active], Status::Dormant, "dormancy", now).await,
        Err(StoreError::NotFound)
    ));
}

/// Only `dormant` wakes on use: a tool's read names the records it found dormant, and one an
/// operator paused or archived since (or never active) stays as it is.
async fn a_tools_read_wakes_only_a_dormant_record(db: TestDb) {
    let memories = service(&db).await;
    one_of_each(&memories).await;
    let ids: Vec<String> =
        ["active", "paused", "archived", "proposed", "dormant"].iter().map(|s| (*s).to_owned()).collect();
    memories.wake("t", &ids, "agent:k-1").await;
    assert_eq!(status(&memories, "dormant").await, Status::Active, "the dormant record wakes");
    for (id, expected) in
        [("paused", Status::Paused), ("archived", Status::Archived), ("proposed", Status::Proposed)]
    {
        assert_eq!(status(&memories, id).await, expected, "a tool's read revived {id}");
        assert_eq!(memories.history("t", id).await.unwrap().len(), 1, "{id}: a change was logged");
    }
    assert_eq!(memories.get("t", "active").await.unwrap().revision, 1, "an active record is left alone");
}

/// Bulk approval (the review queue's) is for `proposed` and `dormant` records; a paused or
/// archived one is refused by id, with the status it has, and keeps it. One record's own
/// `activate` (an operator naming it) still brings a paused or archived record back.
async fn a_bulk_approval_takes_only_proposed_and_dormant_records(db: TestDb) {
    let memories = service(&db).await;
    one_of_each(&memories).await;
    let ids: Vec<String> =
        ["proposed", "dormant", "paused", "archived", "active"].iter().map(|s| (*s).to_owned()).collect();
    let results = memories.review("t", &ids, Decision::Approve, "ops").await;
    let outcome: Vec<(String, Result<Status, String>)> = results
        .into_iter()
        .map(|(id, result)| {
            let said = match result {
                Ok(record) => Ok(record.status),
                Err(MemoryError::StatusConflict { actual, .. }) => Err(actual.to_owned()),
                Err(other) => panic!("{id}: {other:?}"),
            };
            (id, said)
        })
        .collect();
    assert_eq!(
        outcome,
        [
            ("proposed".to_owned(), Ok(Status::Active)),
            ("dormant".to_owned(), Ok(Status::Active)),
            ("paused".to_owned(), Err("paused".to_owned())),
            ("archived".to_owned(), Err("archived".to_owned())),
            ("active".to_owned(), Ok(Status::Active)),
        ]
    );
    assert_eq!(status(&memories, "paused").await, Status::Paused);
    assert_eq!(status(&memories, "archived").await, Status::Archived);
    for id in ["paused", "archived"] {
        let record = memories.approve("t", id, None, None, "ops").await.unwrap();
        assert_eq!(record.status, Status::Active, "{id}: its own activate resumes it");
    }
}
