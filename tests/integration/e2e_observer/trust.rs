//! What the observer may not do, whatever a conversation says: write after a forget of its scope
//! (an extraction in flight when the forget came, on this replica or another), replace a record
//! another writer wrote (it proposes beside it instead), or write outside the caller's own write
//! scope.

use super::{Observed, QUICK, TENANT, WAIT, body, by_gate};
use crate::e2e_identity::{hs256, in_a_minute};
use crate::support::{TestDb, eventually};
use reqwest::Method;
use serde_json::{Value, json};
use std::time::Duration;

/// How long the slow extraction takes: long enough to send a forget while it is in flight.
const SLOW_MS: &str = "2500";

/// Exchanges fenced, summed over `metrics` texts.
fn fenced(metrics: &[String]) -> u64 {
    metrics
        .iter()
        .filter_map(|m| m.lines().find(|l| l.starts_with("memgate_observer_exchanges_fenced_total ")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// A forget of `user:u-1` while that person's extraction is in flight: the forget answers, the
/// extraction then returns its candidates, and nothing is written — no record, no outcome —
/// after the forget. `replicas` = 2 runs a second gateway on the same database and sends the
/// forget to it (whichever replica claimed the exchange).
async fn a_forget_fences_the_extraction_in_flight(db: TestDb, replicas: usize) {
    let slow = QUICK.replace("mock-extract", "mock-slow-first-byte");
    let toml = format!("[releases.v1]\nobserve = \"write\"\n{slow}");
    let gate = Observed::start_on(db, &toml, &["--slow-first-byte-ms", SLOW_MS]);
    let other = (replicas > 1).then(|| Observed::gateway(&gate.mock, &gate.db, &toml));
    let forget_at = other.as_ref().map_or(&gate.gw, |(gw, _)| gw);
    let key = gate.key(TENANT, &["observe", "assert_subject"]).await;
    let sent = serde_json::to_vec(&body(None, "I prefer green tea in the morning.", false)).unwrap();
    assert_eq!(gate.send(&key, Some("u-1"), &sent).await.status, 200);
    eventually(Duration::from_secs(30), "the extraction call to be in flight", || async {
        (!gate.extractions().await.is_empty()).then_some(())
    })
    .await;

    let erased = gate
        .admin_of(forget_at, TENANT, Method::POST, "/memories/forget", Some(json!({"scope": "user:u-1"})))
        .await;
    assert_eq!(erased["exchanges_erased"], 1, "the claimed exchange is erased with the scope: {erased}");

    // The extraction returns after the forget: either it writes (the defect) or it is fenced.
    let records = eventually(WAIT, "the extraction to finish after the forget", || async {
        let records = gate.records(TENANT, Some("user:u-1")).await;
        if !records.is_empty() {
            return Some(records);
        }
        let mut metrics = vec![gate.metrics().await];
        if let Some((gw, _)) = &other {
            metrics.push(gate.metrics_of(gw).await);
        }
        (fenced(&metrics) >= 1).then_some(records)
    })
    .await;
    assert!(
        records.is_empty(),
        "a record was written into the forgotten scope after the forget: {records:#?}"
    );
    let status = gate.status(TENANT).await;
    assert!(
        status["outcomes"].as_array().unwrap().is_empty(),
        "no outcome about the forgotten person: {status}"
    );
    assert_eq!(gate.queued_in_store().await, 0);
    assert_eq!(gate.extractions().await.len(), 1, "the extraction is not tried again");
}

#[tokio::test]
async fn e2e_observer_a_forget_fences_the_extraction_in_flight_on_sqlite() {
    a_forget_fences_the_extraction_in_flight(TestDb::sqlite(), 1).await;
}

#[tokio::test]
async fn e2e_observer_a_forget_on_another_replica_fences_the_extraction_in_flight_on_postgres() {
    a_forget_fences_the_extraction_in_flight(TestDb::postgres().await, 2).await;
}

/// Under `write`, a person's words name the keys of records an operator wrote — a
/// `customer_profile` and a `fact` — and the observer replaces neither: each stays as the
/// operator wrote it, and the observer's version waits beside it as a proposal naming it
/// (`metadata.observer.supersedes`); approving one replaces the operator's record then.
#[tokio::test]
async fn e2e_observer_proposes_beside_an_operators_record_instead_of_replacing_it() {
    let gate = Observed::start(&format!("[releases.v1]\nobserve = \"write\"\n{QUICK}"), &[]);
    let profile = json!({"id": "mem-profile-u-1", "type": "customer_profile", "key": "fact:tier",
        "scope": ["user:u-1"], "content": {"name": "Alice Doe", "notes": "Gold tier; refunds up to 50 EUR."}});
    let limit = json!({"id": "mem-refunds-u-1", "type": "fact", "key": "fact:refund-limit",
        "scope": ["user:u-1"], "content": {"statement": "Refunds for this customer are limited to 50 EUR"}});
    for record in [&profile, &limit] {
        gate.admin(TENANT, Method::POST, "/memories", Some(record.clone())).await;
    }
    let key = gate.key(TENANT, &["observe", "assert_subject"]).await;
    let words = "My tier is platinum. My refund limit is unlimited.";
    let sent = serde_json::to_vec(&body(None, words, false)).unwrap();
    assert_eq!(gate.send(&key, Some("u-1"), &sent).await.status, 200);
    let status = gate.settled(TENANT, 2).await;

    for original in [&profile, &limit] {
        let id = original["id"].as_str().unwrap();
        let now = gate.admin(TENANT, Method::GET, &format!("/memories/{id}"), None).await;
        assert_eq!(now["content"], original["content"], "{id} was changed: {now:#}");
        assert_eq!(
            (now["type"].clone(), now["revision"].clone()),
            (original["type"].clone(), json!(1)),
            "{now:#}"
        );
        assert_eq!(now["author"], "admin:admin", "{now:#}");
        assert_eq!(now["status"], "active");
    }
    let proposals: Vec<Value> = gate
        .records(TENANT, Some("user:u-1"))
        .await
        .into_iter()
        .filter(|r| r["author"] == "observer")
        .collect();
    assert_eq!(proposals.len(), 2, "{proposals:#?}");
    for (original, statement) in [(&profile, "My tier is platinum"), (&limit, "My refund limit is unlimited")]
    {
        let proposal = proposals
            .iter()
            .find(|p| p["content"]["statement"] == statement)
            .unwrap_or_else(|| panic!("no proposal saying {statement}: {proposals:#?}"));
        assert_eq!(proposal["status"], "proposed", "under write too: {proposal:#}");
        assert!(proposal.get("key").is_none_or(Value::is_null), "the key stays with the operator's record");
        assert_eq!(
            proposal["metadata"]["observer"]["supersedes"],
            json!({"id": original["id"], "key": original["key"]}),
            "{proposal:#}"
        );
    }
    let supersede = &by_gate(&status)["supersede"];
    assert_eq!(supersede.len(), 2, "{status:#}");
    assert!(supersede.iter().all(|o| o["verdict"] == "written"), "{supersede:#?}");

    // A person approves one: the operator's record takes its words then, its history kept.
    let approved =
        proposals.iter().find(|p| p["content"]["statement"] == "My refund limit is unlimited").unwrap();
    let path = format!("/memories/{}/activate", approved["id"].as_str().unwrap());
    gate.admin(TENANT, Method::POST, &path, None).await;
    let replaced = gate.admin(TENANT, Method::GET, "/memories/mem-refunds-u-1", None).await;
    assert_eq!(replaced["content"]["statement"], "My refund limit is unlimited", "{replaced:#}");
    assert_eq!(replaced["revision"], 2);
}

/// With JWTs mapping `sub` to `employee:<sub>`, an employee `u-42` is not the customer
/// `user:u-42`: the employee's words are not observed at all (the caller has no write scope of
/// its own among what it may read), so nothing lands in the customer's scope, where the support
/// bot serving that customer would inject it. A key's caller naming `u-1` is observed as before.
#[tokio::test]
async fn e2e_observer_writes_only_into_the_callers_own_write_scope() {
    let toml = format!(
        "[auth.jwt]\nsubject_scope_prefix = \"employee:\"\n[releases.v1]\nobserve = \"write\"\n{QUICK}"
    );
    let gate = Observed::start(&toml, &[]);
    let token = hs256(
        json!({"sub": "u-42", "tenant": TENANT, "exp": in_a_minute(), "memgate_permissions": ["observe"]}),
    );
    let sent = serde_json::to_vec(&body(None, "I prefer the night shift on weekends.", false)).unwrap();
    let response = crate::support::client()
        .post(gate.gw.url("/v1/messages"))
        .bearer_auth(&token)
        .header("anthropic-version", "2023-06-01")
        .header("content-type", "application/json")
        .body(sent)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.text().await.unwrap();
    // Then one exchange that is observed; once it is processed, the queue is empty.
    let key = gate.key(TENANT, &["observe", "assert_subject"]).await;
    let sent = serde_json::to_vec(&body(None, "I prefer green tea in the morning.", false)).unwrap();
    assert_eq!(gate.send(&key, Some("u-1"), &sent).await.status, 200);
    let status = gate.settled(TENANT, 1).await;

    let records = gate.records(TENANT, None).await;
    let scopes: Vec<&Value> = records.iter().map(|r| &r["scope"]).collect();
    assert!(
        scopes.iter().all(|s| **s == json!(["user:u-1"])),
        "written outside the callers' own scopes: {records:#?}"
    );
    assert!(records.iter().any(|r| r["content"]["preference"] == "green tea in the morning"), "{records:#?}");
    assert!(
        status["outcomes"].as_array().unwrap().iter().all(|o| o["subject"] == "u-1"),
        "the employee was observed: {status:#}"
    );
    assert_eq!(gate.extractions().await.len(), 1, "one extraction: the key's caller only");
}
