//! The observer's queue in the store, on SQLite and on the real PostgreSQL: claims take tenants in
//! turn, and a claim fences what its exchange writes once a forget of its scope removed it.

use crate::support::{TestDb, memory_service, on_both_stores};
use memgate::memory::{MemoryError, Writer};
use memgate::record::{Provenance, WriterKind};
use memgate::store::memories::ListFilter;
use memgate::store::observer::{Claim, NewExchange, Outcome};
use memgate::store::{Store, StoreError};
use serde_json::json;
use std::collections::BTreeSet;

const LEASE_MS: i64 = 60_000;

async fn store(db: &TestDb) -> Store {
    let store = Store::connect(&db.url).await.unwrap();
    store.migrate().await.unwrap();
    store
}

fn exchange(id: &str, tenant: &str, subject: &str) -> NewExchange {
    NewExchange {
        id: id.to_owned(),
        tenant: tenant.to_owned(),
        subject: subject.to_owned(),
        scope: format!("user:{subject}"),
        release: "v1".to_owned(),
        mode: "write".to_owned(),
        min_confidence: 0.7,
        schema_version: "v1".to_owned(),
        request_id: format!("req_{id}"),
        person_text: "I prefer green tea.".to_owned(),
        answer_text: "Noted.".to_owned(),
        system_text: String::new(),
        injected_ids: Vec::new(),
    }
}

fn outcome(exchange: &NewExchange, position: i64) -> Outcome {
    Outcome {
        exchange_id: exchange.id.clone(),
        position,
        tenant: exchange.tenant.clone(),
        subject: exchange.subject.clone(),
        scope: exchange.scope.clone(),
        request_id: exchange.request_id.clone(),
        record_type: "preference".to_owned(),
        verdict: "written".to_owned(),
        gate: "kept".to_owned(),
        reason: "written".to_owned(),
        record_id: None,
        at_ms: memgate::clock::now_ms(),
    }
}

on_both_stores!(
    claims_take_tenants_in_turn_whatever_one_tenant_has_waiting,
    concurrent_claims_take_disjoint_exchanges,
    a_claim_writes_outcomes_only_while_its_exchange_is_there,
    a_record_written_under_a_claim_never_outlives_a_forget_racing_it,
);

/// One tenant with 200 exchanges waiting, queued before two other tenants' one each: claimed one
/// at a time (a worker whose slots free up one by one), the others' come second and third, not
/// after the 200; a batch takes one of each tenant before a second of any.
async fn claims_take_tenants_in_turn_whatever_one_tenant_has_waiting(db: TestDb) {
    let store = store(&db).await;
    let now = memgate::clock::now_ms() - 10_000;
    for i in 0..200 {
        assert!(
            store.observer_insert(&exchange(&format!("big-{i:03}"), "big", "u-1"), now + i).await.unwrap()
        );
    }
    store.observer_insert(&exchange("small-a", "small", "u-2"), now + 500).await.unwrap();
    store.observer_insert(&exchange("other-a", "other", "u-3"), now + 600).await.unwrap();
    store.observer_insert(&exchange("other-b", "other", "u-3"), now + 601).await.unwrap();

    let at = memgate::clock::now_ms();
    let mut order = Vec::new();
    for _ in 0..6 {
        let claimed = store.observer_claim("one-by-one", at, LEASE_MS, 1).await.unwrap();
        assert_eq!(claimed.len(), 1);
        order.push((claimed[0].new.tenant.clone(), claimed[0].new.id.clone()));
    }
    let tenants: Vec<&str> = order.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(tenants, ["big", "small", "other", "big", "other", "big"], "{order:?}");
    // Each tenant's own exchanges oldest first.
    let bigs: Vec<&str> = order.iter().filter(|(t, _)| t == "big").map(|(_, id)| id.as_str()).collect();
    assert_eq!(bigs, ["big-000", "big-001", "big-002"]);

    // A batch: the next of each tenant that has any left (the one served longest ago first)
    // before a second of the same.
    store.observer_insert(&exchange("small-b", "small", "u-2"), now + 700).await.unwrap();
    let batch = store.observer_claim("batch", at, LEASE_MS, 4).await.unwrap();
    let ids: Vec<&str> = batch.iter().map(|e| e.new.id.as_str()).collect();
    assert_eq!(ids, ["small-b", "big-003", "big-004", "big-005"], "{ids:?}");
}

/// Four claims at once never take the same exchange (PostgreSQL: `SKIP LOCKED`, and the due
/// conditions checked again on a row another claim took).
async fn concurrent_claims_take_disjoint_exchanges(db: TestDb) {
    let store = store(&db).await;
    let now = memgate::clock::now_ms() - 10_000;
    for i in 0..40 {
        let tenant = ["a", "b", "c"][i % 3];
        store.observer_insert(&exchange(&format!("x-{i:02}"), tenant, "u-1"), now + i as i64).await.unwrap();
    }
    let at = memgate::clock::now_ms();
    let claims = (0..4).map(|n| {
        let store = store.clone();
        tokio::spawn(
            async move { store.observer_claim(&format!("owner-{n}"), at, LEASE_MS, 8).await.unwrap() },
        )
    });
    let mut seen = BTreeSet::new();
    let mut total = 0;
    for claim in futures_util::future::join_all(claims).await {
        for exchange in claim.unwrap() {
            total += 1;
            assert!(seen.insert(exchange.new.id.clone()), "{} claimed twice", exchange.new.id);
        }
    }
    assert!(total > 0);
    let rest = store.observer_claim("last", at, LEASE_MS, 100).await.unwrap();
    assert_eq!(total + rest.len(), 40, "every exchange claimed exactly once");
    assert!(rest.iter().all(|e| !seen.contains(&e.new.id)));
}

/// An outcome is recorded under its exchange's claim only: after a forget of the exchange's scope
/// (or once another claim took the exchange over) nothing about it is recorded again.
async fn a_claim_writes_outcomes_only_while_its_exchange_is_there(db: TestDb) {
    let store = store(&db).await;
    let alice = exchange("obs-alice", "t", "alice");
    store.observer_insert(&alice, memgate::clock::now_ms() - 1000).await.unwrap();
    let claimed = store.observer_claim("worker-1", memgate::clock::now_ms(), LEASE_MS, 10).await.unwrap();
    assert_eq!(claimed.len(), 1);
    let claim = Claim { exchange_id: alice.id.clone(), owner: "worker-1".to_owned() };
    store.observer_outcome_insert(&outcome(&alice, 0), &claim).await.unwrap();
    let stranger = Claim { exchange_id: alice.id.clone(), owner: "worker-2".to_owned() };
    assert!(matches!(
        store.observer_outcome_insert(&outcome(&alice, 1), &stranger).await,
        Err(StoreError::Fenced)
    ));

    assert_eq!(store.observer_forget_scope("t", "user:alice").await.unwrap(), (1, 1));
    assert!(matches!(
        store.observer_outcome_insert(&outcome(&alice, 1), &claim).await,
        Err(StoreError::Fenced)
    ));
    assert!(store.observer_outcomes("t", None, 10).await.unwrap().is_empty(), "nothing about alice is back");
}

/// The observer as a writer under `claim`.
fn observer(claim: &Claim) -> Writer<'_> {
    Writer {
        actor: "observer",
        author: Some("observer"),
        provenance: Provenance::new(WriterKind::Observer, None),
        write_any: false,
        bounds: None,
        claim: Some(claim),
    }
}

/// Records written under an exchange's claim while a forget of their scope runs beside them (its
/// exchanges first, then its records, as `POST /admin/v1/memories/forget` does): whichever
/// commits first, nothing is left in the scope afterwards, and no write under the claim succeeds
/// after the forget.
async fn a_record_written_under_a_claim_never_outlives_a_forget_racing_it(db: TestDb) {
    let memories = memory_service(&db.url).await;
    let store = memories.store().clone();
    let scope = ListFilter { scope: Some("user:alice".to_owned()), ..ListFilter::default() };
    for round in 0..8 {
        let alice = exchange(&format!("obs-race-{round}"), "t", "alice");
        store.observer_insert(&alice, memgate::clock::now_ms() - 1000).await.unwrap();
        let owner = format!("worker-{round}");
        assert_eq!(
            store.observer_claim(&owner, memgate::clock::now_ms(), LEASE_MS, 10).await.unwrap().len(),
            1
        );
        let claim = Claim { exchange_id: alice.id.clone(), owner };
        let writes = {
            let (memories, claim) = (memories.clone(), claim.clone());
            tokio::spawn(async move {
                for i in 0..4 {
                    let record = json!({"type": "fact", "scope": ["user:alice"],
                        "content": {"statement": format!("Alice keeps locker {round}{i} in hall B")}});
                    match memories.create_as("t", &record, &observer(&claim)).await {
                        Ok(_) | Err(MemoryError::Store(StoreError::Fenced)) => {}
                        Err(other) => panic!("{other}"),
                    }
                }
            })
        };
        let forget = {
            let (memories, store) = (memories.clone(), store.clone());
            tokio::spawn(async move {
                store.observer_forget_scope("t", "user:alice").await.unwrap();
                memories.forget("t", "user:alice").await.unwrap();
            })
        };
        writes.await.unwrap();
        forget.await.unwrap();
        let left = memories.list("t", &scope, None, 100).await.unwrap();
        assert!(left.is_empty(), "round {round}: a write outlived the forget: {left:?}");
        let late =
            json!({"type": "fact", "scope": ["user:alice"], "content": {"statement": "Alice is back"}});
        let refused = memories.create_as("t", &late, &observer(&claim)).await;
        assert!(matches!(refused, Err(MemoryError::Store(StoreError::Fenced))), "round {round}: {refused:?}");
    }
    assert!(memories.list("t", &scope, None, 100).await.unwrap().is_empty());
}
