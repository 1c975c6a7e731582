//! Near-duplicate and identical writes.

use super::*;

#[tokio::test]
async fn a_near_duplicate_write_updates_its_twin_and_a_different_fact_is_new() {
    let gate = Memgate::start(CONFIG);
    let fact = |statement: &str, scope: &str| {
        json!({
            "type": "fact",
            "scope": [scope],
            "content": {"statement": statement, "subject": "customer u-789"}
        })
    };
    let first = fact("The customer asked us to always ship with signature-required delivery.", "user:u-789");
    let id = gate.remember(TENANT, &first).await;

    // The same sentence with a trivial change: the twin is updated, not doubled.
    let near = fact("The customer asked us to always ship with signature required delivery", "user:u-789");
    let (status, answer) = gate.write(TENANT, &near).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["deduplicated"], true, "{answer}");
    assert_eq!(answer["id"], id.as_str(), "{answer}");
    assert_eq!(answer["revision"], 2, "{answer}");
    let similarity = answer["similarity"].as_f64().unwrap();
    assert!(similarity >= 0.95, "{answer}");
    eprintln!("near-duplicate similarity: {similarity:.4}");
    let stored = gate.admin_get(TENANT, &format!("/memories/{id}")).await;
    assert_eq!(stored["content"], near["content"], "the twin holds the newer wording");
    let listed = gate.admin_get(TENANT, "/memories?scope=user:u-789").await;
    assert_eq!(listed["data"].as_array().unwrap().len(), 1, "a twin was added: {listed}");

    // A different fact about the same customer, and the same fact in another scope: new records.
    let other = fact("The customer's billing address changed to 12 Harbour Road, Leeds.", "user:u-789");
    let (status, answer) = gate.write(TENANT, &other).await;
    assert_eq!(status, 201, "{answer}");
    assert_ne!(answer["id"], id.as_str());
    assert!(answer.get("deduplicated").is_none(), "{answer}");
    let (status, answer) = gate
        .write(
            TENANT,
            &fact("The customer asked us to always ship with signature-required delivery.", "user:u-790"),
        )
        .await;
    assert_eq!(status, 201, "another scope is another record: {answer}");
}

/// A bot that re-sends a fact it already stored (no id, no key) should change nothing, as the
/// same write of a keyed record does (`exact_repeat`, same revision, no changelog entry).
#[tokio::test]
async fn writing_an_identical_record_again_is_an_exact_repeat_not_a_new_revision() {
    let gate = Memgate::start(CONFIG);
    let fact = json!({
        "type": "fact",
        "scope": ["user:u-789"],
        "content": {"statement": "The customer asked us to always ship with signature-required delivery."}
    });
    let id = gate.remember(TENANT, &fact).await;
    let (status, answer) = gate.write(TENANT, &fact).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["id"], id.as_str(), "{answer}");
    assert_eq!(answer["revision"], 1, "an identical write added a revision: {answer}");
    assert_eq!(answer["exact_repeat"], true, "an identical write is not reported as a repeat: {answer}");
}
