//! The trigger outbox in the store, one set of test bodies run against SQLite and against the
//! real PostgreSQL (each test on a fresh database of its own). Times are passed in, so leases and
//! schedules are tested without waiting.

use crate::support::TestDb;
use crate::support::on_both_stores;
use memgate::store::outbox::{MAX_EXCERPT_BYTES, NewOutboxAction, OutboxFilter, OutboxState, Replay};
use memgate::store::trigger_limits::{NewCooldown, NewFiring, Outcome, Pace, Written};
use memgate::store::{Store, StoreError};
use serde_json::json;
use std::collections::BTreeSet;

on_both_stores!(
    a_decision_is_inserted_once,
    concurrent_claimers_never_get_the_same_action,
    an_expired_lease_makes_the_action_due_again,
    failures_are_scheduled_and_only_the_lease_owner_marks,
    dead_actions_wait_for_a_replay,
    lists_filter_by_tenant_state_and_time_and_page,
    pruning_and_forgetting,
    a_cooldown_lets_one_turn_fire_for_a_subject_until_it_runs_out,
    concurrent_writers_share_one_cooldown,
    a_tenants_cap_refuses_whole_firings_and_counts_only_waiting_actions,
    an_endpoints_pace_allows_a_burst_then_one_per_interval_and_deferral_gives_the_attempt_back,
);

const T0: i64 = 1_750_000_000_000;
const LEASE: i64 = 60_000;

async fn store(db: &TestDb) -> Store {
    let store = Store::connect(&db.url).await.unwrap();
    store.migrate().await.unwrap();
    store
}

fn action(tenant: &str, request: &str, index: i64) -> NewOutboxAction {
    let id = memgate::triggers::event_id(tenant, request, "sop-escalation", index as usize);
    NewOutboxAction {
        id,
        tenant: tenant.to_owned(),
        request_id: request.to_owned(),
        record_id: "sop-escalation".to_owned(),
        record_revision: 1,
        action_index: index,
        endpoint: "ticketing".to_owned(),
        method: "create_ticket".to_owned(),
        subject: Some("u-789".to_owned()),
        matched: json!({"index": 1, "kind": "keywords", "hit": "lawyer"}),
        body: format!(r#"{{"request": "{request}", "index": {index}}}"#),
        dead_reason: None,
    }
}

async fn a_decision_is_inserted_once(db: TestDb) {
    let store = store(&db).await;
    let first = [action("t", "req-1", 0), action("t", "req-1", 1)];
    assert_eq!(store.outbox_insert(&first, T0).await.unwrap(), 2);
    // The same (request, record, action) again, from a retry or another replica: nothing new,
    // and the stored row is not touched (its body and time stay the first decision's).
    let mut again = action("t", "req-1", 0);
    again.body = "{}".to_owned();
    assert_eq!(store.outbox_insert(&[again, action("t", "req-2", 0)], T0 + 5).await.unwrap(), 1);
    let kept = store.outbox_get("t", &first[0].id).await.unwrap();
    assert_eq!((kept.state, kept.attempts, kept.created_at_ms), (OutboxState::Pending, 0, T0));
    assert_eq!(kept.body, first[0].body);
    assert_eq!(kept.matched["hit"], "lawyer");
    assert_eq!(kept.subject.as_deref(), Some("u-789"));
    assert!(matches!(store.outbox_get("other-tenant", &first[0].id).await, Err(StoreError::NotFound)));
    let counts = store.outbox_counts(None).await.unwrap();
    assert_eq!(counts.values().sum::<i64>(), 3);
    assert_eq!(counts["pending"], 3);

    // An action that cannot be delivered as decided goes in dead, with its reason.
    let mut orphan = action("t", "req-3", 0);
    orphan.dead_reason = Some("no endpoint named `ops_chat` is configured".to_owned());
    store.outbox_insert(&[orphan.clone()], T0).await.unwrap();
    let dead = store.outbox_get("t", &orphan.id).await.unwrap();
    assert_eq!(dead.state, OutboxState::Dead);
    assert!(dead.last_error.unwrap().contains("ops_chat"));
    assert!(store.outbox_claim("w", T0 + 1, LEASE, 100).await.unwrap().iter().all(|a| a.id != orphan.id));
}

async fn concurrent_claimers_never_get_the_same_action(db: TestDb) {
    let store = store(&db).await;
    let actions: Vec<NewOutboxAction> = (0..60).map(|i| action("t", &format!("req-{i}"), 0)).collect();
    store.outbox_insert(&actions, T0).await.unwrap();
    // Four replicas claiming small batches at once until nothing is left.
    let claimers = (0..4).map(|worker| {
        let store = store.clone();
        tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let owner = format!("worker-{worker}-{}", mine.len());
                let claimed = store.outbox_claim(&owner, T0 + 1, LEASE, 3).await.unwrap();
                if claimed.is_empty() {
                    return mine;
                }
                for action in claimed {
                    assert_eq!(action.attempts, 1);
                    assert_eq!(action.locked_until_ms, Some(T0 + 1 + LEASE));
                    mine.push(action.id);
                }
            }
        })
    });
    let mut all = Vec::new();
    for claimer in claimers {
        all.extend(claimer.await.unwrap());
    }
    let distinct: BTreeSet<&String> = all.iter().collect();
    assert_eq!(all.len(), 60, "every action claimed");
    assert_eq!(distinct.len(), 60, "no action claimed twice");
    assert!(store.outbox_claim("late", T0 + 2, LEASE, 100).await.unwrap().is_empty(), "all leased");
}

async fn an_expired_lease_makes_the_action_due_again(db: TestDb) {
    let store = store(&db).await;
    let decided = action("t", "req-1", 0);
    store.outbox_insert(std::slice::from_ref(&decided), T0).await.unwrap();
    // A replica claims it, then dies before it can say how the delivery went.
    let claimed = store.outbox_claim("dead-replica", T0, 1_000, 10).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert!(store.outbox_claim("other", T0 + 999, 1_000, 10).await.unwrap().is_empty(), "still leased");
    assert_eq!(store.outbox_next_due(T0 + 999).await.unwrap(), Some(T0 + 1_000), "when the lease ends");
    let again = store.outbox_claim("other", T0 + 1_000, 1_000, 10).await.unwrap();
    assert_eq!(again.len(), 1, "due again once the lease ran out");
    assert_eq!(again[0].attempts, 2, "the interrupted attempt counts");
    // The first replica's late answer no longer counts; the new owner's does.
    assert!(!store.outbox_mark_delivered(&decided.id, "dead-replica", T0 + 1_100, 200, "ok").await.unwrap());
    assert!(store.outbox_mark_delivered(&decided.id, "other", T0 + 1_200, 204, "").await.unwrap());
    let done = store.outbox_get("t", &decided.id).await.unwrap();
    assert_eq!(
        (done.state, done.delivered_at_ms, done.last_status, done.locked_until_ms),
        (OutboxState::Delivered, Some(T0 + 1_200), Some(204), None)
    );
    assert_eq!(store.outbox_next_due(T0 + 1_300).await.unwrap(), None);
}

async fn failures_are_scheduled_and_only_the_lease_owner_marks(db: TestDb) {
    let store = store(&db).await;
    let decided = action("t", "req-1", 0);
    store.outbox_insert(std::slice::from_ref(&decided), T0).await.unwrap();
    store.outbox_claim("w1", T0, LEASE, 10).await.unwrap();
    assert!(
        !store.outbox_mark_retry(&decided.id, "intruder", T0 + 10, T0 + 5_000, Some(500), "x").await.unwrap()
    );
    let long_error = format!("HTTP 503: {}", "é".repeat(MAX_EXCERPT_BYTES));
    assert!(
        store
            .outbox_mark_retry(&decided.id, "w1", T0 + 10, T0 + 5_000, Some(503), &long_error)
            .await
            .unwrap()
    );
    let waiting = store.outbox_get("t", &decided.id).await.unwrap();
    assert_eq!((waiting.state, waiting.attempts, waiting.next_at_ms), (OutboxState::Retrying, 1, T0 + 5_000));
    assert_eq!(waiting.last_status, Some(503));
    let kept = waiting.last_error.unwrap();
    assert!(
        kept.len() <= MAX_EXCERPT_BYTES && kept.starts_with("HTTP 503: é"),
        "cut at a character: {}",
        kept.len()
    );
    assert_eq!(waiting.locked_until_ms, None);

    assert_eq!(store.outbox_next_due(T0 + 10).await.unwrap(), Some(T0 + 5_000));
    assert!(store.outbox_claim("w2", T0 + 4_999, LEASE, 10).await.unwrap().is_empty(), "not due yet");
    let retried = store.outbox_claim("w2", T0 + 5_000, LEASE, 10).await.unwrap();
    assert_eq!((retried.len(), retried[0].attempts), (1, 2));
    // A connection failure has no status.
    assert!(
        store
            .outbox_mark_retry(&decided.id, "w2", T0 + 5_010, T0 + 6_000, None, "could not connect")
            .await
            .unwrap()
    );
    let waiting = store.outbox_get("t", &decided.id).await.unwrap();
    assert_eq!((waiting.last_status, waiting.last_error.as_deref()), (None, Some("could not connect")));
}

async fn dead_actions_wait_for_a_replay(db: TestDb) {
    let store = store(&db).await;
    let decided = action("t", "req-1", 0);
    store.outbox_insert(std::slice::from_ref(&decided), T0).await.unwrap();
    store.outbox_claim("w", T0, LEASE, 10).await.unwrap();
    assert!(store.outbox_mark_dead(&decided.id, "w", T0 + 1, Some(410), "410 Gone").await.unwrap());
    let dead = store.outbox_get("t", &decided.id).await.unwrap();
    assert_eq!((dead.state, dead.attempts, dead.last_status), (OutboxState::Dead, 1, Some(410)));
    assert!(store.outbox_claim("w", T0 + 1_000_000, LEASE, 10).await.unwrap().is_empty(), "dead is not due");
    assert_eq!(store.outbox_next_due(T0).await.unwrap(), None);

    assert!(matches!(
        store.outbox_replay("other-tenant", &decided.id, T0 + 2).await,
        Err(StoreError::NotFound)
    ));
    let Replay::Replayed(replayed) = store.outbox_replay("t", &decided.id, T0 + 2).await.unwrap() else {
        panic!("a dead action replays")
    };
    assert_eq!(
        (replayed.state, replayed.attempts, replayed.next_at_ms, replayed.replays, replayed.last_error),
        (OutboxState::Pending, 0, T0 + 2, 1, None)
    );
    assert_eq!(replayed.id, decided.id, "the same webhook-id");
    assert_eq!(replayed.body, decided.body, "the same body");
    assert!(matches!(store.outbox_replay("t", &decided.id, T0 + 3).await.unwrap(), Replay::AlreadyQueued(_)));
    let claimed = store.outbox_claim("w", T0 + 3, LEASE, 10).await.unwrap();
    assert_eq!(claimed[0].attempts, 1, "a fresh count of attempts");
    assert!(store.outbox_mark_delivered(&decided.id, "w", T0 + 4, 200, "").await.unwrap());
    // A delivered action can be sent again too (a receiver that lost it).
    assert!(matches!(store.outbox_replay("t", &decided.id, T0 + 5).await.unwrap(), Replay::Replayed(_)));
}

async fn lists_filter_by_tenant_state_and_time_and_page(db: TestDb) {
    let store = store(&db).await;
    for i in 0..5 {
        store.outbox_insert(&[action("t", &format!("req-{i}"), 0)], T0 + i).await.unwrap();
    }
    store.outbox_insert(&[action("u", "req-u", 0)], T0 + 10).await.unwrap();
    let delivered = action("t", "req-0", 0).id;
    store.outbox_claim("w", T0 + 20, LEASE, 1).await.unwrap();
    store.outbox_mark_delivered(&delivered, "w", T0 + 21, 200, "").await.unwrap();

    let ids = |actions: Vec<memgate::store::outbox::OutboxAction>| -> Vec<String> {
        actions.into_iter().map(|a| a.request_id).collect()
    };
    let t = OutboxFilter { tenant: Some("t".into()), ..Default::default() };
    assert_eq!(
        ids(store.outbox_list(&t, None, 100).await.unwrap()),
        ["req-4", "req-3", "req-2", "req-1", "req-0"]
    );
    let all = store.outbox_list(&OutboxFilter::default(), None, 100).await.unwrap();
    assert_eq!(all.len(), 6);
    let done = OutboxFilter { state: Some(OutboxState::Delivered), ..t.clone() };
    assert_eq!(ids(store.outbox_list(&done, None, 100).await.unwrap()), ["req-0"]);
    let recent = OutboxFilter { since_ms: Some(T0 + 3), ..t.clone() };
    assert_eq!(ids(store.outbox_list(&recent, None, 100).await.unwrap()), ["req-4", "req-3"]);
    let by_record = OutboxFilter {
        record_id: Some("sop-escalation".into()),
        endpoint: Some("ticketing".into()),
        ..t.clone()
    };
    assert_eq!(store.outbox_list(&by_record, None, 100).await.unwrap().len(), 5);
    // Pages: newest first, the cursor is the last row's (created_at, id).
    let first = store.outbox_list(&t, None, 2).await.unwrap();
    let last = first.last().unwrap();
    let second = store.outbox_list(&t, Some((last.created_at_ms, &last.id)), 2).await.unwrap();
    assert_eq!(ids(first), ["req-4", "req-3"]);
    assert_eq!(ids(second), ["req-2", "req-1"]);
    let counts = store.outbox_counts(Some("t")).await.unwrap();
    assert_eq!((counts["pending"], counts["delivered"], counts["retrying"], counts["dead"]), (4, 1, 0, 0));
}

async fn pruning_and_forgetting(db: TestDb) {
    let store = store(&db).await;
    let old = action("t", "old", 0);
    let new = action("t", "new", 0);
    let dead = action("t", "dead", 0);
    let waiting = action("t", "waiting", 0);
    store.outbox_insert(&[old.clone(), new.clone(), dead.clone(), waiting.clone()], T0).await.unwrap();
    for (a, at) in [(&old, T0 + 1), (&new, T0 + 1_000)] {
        let owner = format!("w-{at}");
        let claimed = store.outbox_claim(&owner, at, LEASE, 10).await.unwrap();
        assert!(claimed.iter().any(|c| c.id == a.id));
        store.outbox_mark_delivered(&a.id, &owner, at, 200, "").await.unwrap();
        // Put the others back: only `a` is meant to change here.
        for other in claimed.iter().filter(|c| c.id != a.id) {
            store.outbox_mark_retry(&other.id, &owner, at, at, None, "put back").await.unwrap();
        }
    }
    let claimed = store.outbox_claim("w-dead", T0 + 2_000, LEASE, 10).await.unwrap();
    for c in &claimed {
        if c.id == dead.id {
            store.outbox_mark_dead(&c.id, "w-dead", T0 + 2_000, None, "gave up").await.unwrap();
        } else {
            store.outbox_mark_retry(&c.id, "w-dead", T0 + 2_000, T0 + 2_000, None, "put back").await.unwrap();
        }
    }
    // Delivered before T0 + 500 and dead before T0 + 1_500: only `old` goes.
    assert_eq!(store.outbox_prune(T0 + 500, T0 + 1_500).await.unwrap(), 1);
    assert!(matches!(store.outbox_get("t", &old.id).await, Err(StoreError::NotFound)));
    // Dead before T0 + 3_000 too: `dead` goes; waiting actions are never pruned.
    assert_eq!(store.outbox_prune(T0 + 500, T0 + 3_000).await.unwrap(), 1);
    assert!(store.outbox_get("t", &waiting.id).await.is_ok());
    assert!(store.outbox_get("t", &new.id).await.is_ok());

    // Erasure: a record's actions, then a subject's, whatever their state.
    assert_eq!(store.outbox_forget_records("t", &["sop-escalation".to_owned()]).await.unwrap(), 2);
    store.outbox_insert(&[action("t", "again", 0)], T0).await.unwrap();
    assert_eq!(store.outbox_forget_subject("t", "u-789").await.unwrap(), 1);
    assert_eq!(store.outbox_forget_subject("t", "u-789").await.unwrap(), 0);
}

#[test]
fn an_action_as_the_admin_api_shows_it() {
    let action = memgate::store::outbox::OutboxAction {
        id: "evt_1".into(),
        tenant: "t".into(),
        request_id: "req-1".into(),
        record_id: "sop".into(),
        record_revision: 2,
        action_index: 0,
        endpoint: "ticketing".into(),
        method: "create_ticket".into(),
        subject: None,
        matched: json!({"hit": "lawyer"}),
        body: "{\"secret-ish\": true}".into(),
        state: OutboxState::Retrying,
        attempts: 2,
        next_at_ms: T0,
        locked_until_ms: None,
        lease_owner: Some("lease_x".into()),
        last_status: Some(503),
        last_error: Some("HTTP 503".into()),
        last_response: None,
        replays: 0,
        created_at_ms: T0 - 1_000,
        updated_at_ms: T0 - 500,
        delivered_at_ms: None,
    };
    let shown = action.to_json();
    assert_eq!(shown["state"], "retrying");
    assert_eq!(shown["next_at"], "2025-06-15T15:06:40Z");
    assert_eq!(shown["created_at"], "2025-06-15T15:06:39Z");
    assert_eq!(shown["delivered_at"], serde_json::Value::Null);
    assert!(shown.get("body").is_none() && shown.get("lease_owner").is_none());
}

/// One firing of the SOP for `subject` in turn `request`, `actions` actions, cooling until `until`.
fn firing(tenant: &str, request: &str, subject: &str, actions: i64, until: Option<i64>) -> NewFiring {
    NewFiring {
        tenant: tenant.to_owned(),
        record_id: "sop-escalation".to_owned(),
        request_id: request.to_owned(),
        cooldown: until.map(|until_ms| NewCooldown {
            cooled_for: memgate::triggers::limits::cooled_for(tenant, Some(subject), ""),
            until_ms,
        }),
        actions: (0..actions).map(|i| action(tenant, request, i)).collect(),
    }
}

const NO_CAP: u64 = 1_000_000;

async fn a_cooldown_lets_one_turn_fire_for_a_subject_until_it_runs_out(db: TestDb) {
    let store = store(&db).await;
    let until = Some(T0 + 600_000);
    let write = |f: NewFiring, at: i64| {
        let store = store.clone();
        async move { Written::of(&store.outbox_insert_firings(&[f], at, NO_CAP).await.unwrap()) }
    };
    assert_eq!(
        write(firing("t", "turn-1", "cust-1", 2, until), T0).await,
        Written { added: 2, ..Written::default() }
    );
    // Another turn of the same customer: cooling. The same turn again (a retry): already there.
    assert_eq!(
        write(firing("t", "turn-2", "cust-1", 2, until), T0 + 1).await,
        Written { cooled: 1, ..Written::default() }
    );
    assert_eq!(
        write(firing("t", "turn-1", "cust-1", 2, until), T0 + 2).await,
        Written { repeated: 1, ..Written::default() }
    );
    // Another customer, another tenant: their own cooldowns.
    assert_eq!(write(firing("t", "turn-3", "cust-2", 1, until), T0 + 3).await.added, 1);
    assert_eq!(write(firing("u", "turn-2", "cust-1", 1, until), T0 + 3).await.added, 1);
    // A record without a cooldown fires every time.
    assert_eq!(write(firing("t", "turn-4", "cust-1", 1, None), T0 + 4).await.added, 1);
    // Once it ran out, the next turn fires and starts the next cooldown.
    let later = Some(T0 + 1_200_000);
    assert_eq!(write(firing("t", "turn-5", "cust-1", 1, later), T0 + 600_000).await.added, 1);
    assert_eq!(write(firing("t", "turn-6", "cust-1", 1, later), T0 + 600_001).await.cooled, 1);
    // Pruned once run out; erased with the record or the subject.
    assert_eq!(store.trigger_cooldowns_prune(T0 + 600_000).await.unwrap(), 2, "t/cust-2 and u/cust-1");
    let cust_1 = memgate::triggers::limits::for_subject("t", "cust-1");
    assert_eq!(store.trigger_cooldowns_forget("t", &[], Some(&cust_1)).await.unwrap(), 1);
    assert_eq!(write(firing("t", "turn-7", "cust-1", 1, later), T0 + 600_002).await.added, 1);
    assert_eq!(store.trigger_cooldowns_forget("t", &["sop-escalation".to_owned()], None).await.unwrap(), 1);
}

async fn concurrent_writers_share_one_cooldown(db: TestDb) {
    let store = store(&db).await;
    // Eight replicas write eight turns of one customer at once: one fires.
    let writers = (0..8).map(|i| {
        let store = store.clone();
        tokio::spawn(async move {
            let f = firing("t", &format!("turn-{i}"), "cust-1", 2, Some(T0 + 600_000));
            Written::of(&store.outbox_insert_firings(&[f], T0, NO_CAP).await.unwrap())
        })
    });
    let mut total = Written::default();
    for writer in writers {
        let written = writer.await.unwrap();
        total.added += written.added;
        total.cooled += written.cooled;
    }
    assert_eq!((total.added, total.cooled), (2, 7));
    assert_eq!(store.outbox_counts(Some("t")).await.unwrap()["pending"], 2);
}

async fn a_tenants_cap_refuses_whole_firings_and_counts_only_waiting_actions(db: TestDb) {
    let store = store(&db).await;
    let write = |firings: Vec<NewFiring>| {
        let store = store.clone();
        async move { store.outbox_insert_firings(&firings, T0, 3).await.unwrap() }
    };
    assert_eq!(write(vec![firing("t", "turn-1", "a", 2, None)]).await, [Outcome::Added(2)]);
    // Two more would make four: the firing is refused whole, the next one fits.
    let written = write(vec![firing("t", "turn-2", "b", 2, None), firing("t", "turn-3", "c", 1, None)]).await;
    assert_eq!(written, [Outcome::Refused(2), Outcome::Added(1)]);
    // A refused firing started no cooldown: with room again it may fire.
    assert_eq!(write(vec![firing("t", "turn-4", "d", 1, Some(T0 + 600_000))]).await, [Outcome::Refused(1)]);
    // Actions that go in dead wait for nobody; another tenant has its own room.
    let mut orphan = firing("t", "turn-5", "e", 1, None);
    orphan.actions[0].dead_reason = Some("no endpoint named `crm`".to_owned());
    assert_eq!(write(vec![orphan]).await, [Outcome::Added(1)]);
    assert_eq!(write(vec![firing("u", "turn-1", "a", 3, None)]).await, [Outcome::Added(3)]);
    // Delivered actions make room.
    let claimed = store.outbox_claim("w", T0 + 1, LEASE, 1).await.unwrap();
    store.outbox_mark_delivered(&claimed[0].id, "w", T0 + 2, 200, "ok").await.unwrap();
    let tenant = claimed[0].tenant.clone();
    let again = write(vec![firing(&tenant, "turn-4", "d", 1, Some(T0 + 600_000))]).await;
    assert_eq!(again, [Outcome::Added(1)]);
}

async fn an_endpoints_pace_allows_a_burst_then_one_per_interval_and_deferral_gives_the_attempt_back(
    db: TestDb,
) {
    let store = store(&db).await;
    // Three a minute: one every 20 s, in bursts of three.
    let take = |endpoint: &'static str, at: i64| {
        let store = store.clone();
        async move { store.trigger_pace_take(endpoint, at, 20_000, 40_000).await.unwrap() }
    };
    for i in 0..3 {
        assert_eq!(take("ticketing", T0 + i).await, Pace::Taken, "burst {i}");
    }
    assert_eq!(take("ticketing", T0 + 10).await, Pace::Full { allowed_at_ms: T0 + 20_000 });
    assert_eq!(take("ops_chat", T0 + 10).await, Pace::Taken, "each endpoint its own pace");
    assert_eq!(take("ticketing", T0 + 19_999).await, Pace::Full { allowed_at_ms: T0 + 20_000 });
    assert_eq!(take("ticketing", T0 + 20_000).await, Pace::Taken);
    assert_eq!(take("ticketing", T0 + 20_001).await, Pace::Full { allowed_at_ms: T0 + 40_000 });
    // Quiet for long enough, a whole burst again.
    for i in 0..3 {
        assert_eq!(take("ticketing", T0 + 600_000 + i).await, Pace::Taken);
    }

    // A claimed action put off: waiting as it was, its attempt given back, due at the slot.
    let decided = action("t", "req-1", 0);
    store.outbox_insert(std::slice::from_ref(&decided), T0).await.unwrap();
    let claimed = store.outbox_claim("w", T0 + 1, LEASE, 10).await.unwrap();
    assert_eq!(claimed[0].attempts, 1);
    assert!(!store.outbox_defer(&decided.id, "someone else", T0 + 2, T0 + 20_000).await.unwrap());
    assert!(store.outbox_defer(&decided.id, "w", T0 + 2, T0 + 20_000).await.unwrap());
    let waiting = store.outbox_get("t", &decided.id).await.unwrap();
    assert_eq!((waiting.state, waiting.attempts, waiting.next_at_ms), (OutboxState::Pending, 0, T0 + 20_000));
    assert_eq!(waiting.locked_until_ms, None);
    assert!(store.outbox_claim("w2", T0 + 19_999, LEASE, 10).await.unwrap().is_empty());
    assert_eq!(store.outbox_claim("w2", T0 + 20_000, LEASE, 10).await.unwrap().len(), 1);
}
