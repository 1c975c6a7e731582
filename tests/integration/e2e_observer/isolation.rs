//! Isolation as a property: several tenants and subjects talk at once; each exchange writes only
//! into its own `user:<subject>` of its own tenant, one extraction call sees one person's words,
//! and a tenant's admin view shows none of another's.

use super::{Observed, QUICK, body};
use serde_json::json;

#[tokio::test]
async fn e2e_observer_exchanges_write_only_into_their_own_subjects_scope() {
    let gate = Observed::start(&format!("[releases.v1]\nobserve = \"write\"\n{QUICK}"), &[]);
    let tenants = ["acme", "globex"];
    let subjects = ["u-1", "u-2", "u-3"];
    let mut keys = Vec::new();
    for tenant in tenants {
        keys.push(gate.key(tenant, &["observe", "assert_subject"]).await);
    }
    // One distinct preference per (tenant, subject); the same subject name in both tenants.
    let item = |t: usize, s: usize| format!("blend number {} {}", t * 10 + s, ["tea", "coffee", "cocoa"][s]);
    let mut sends = Vec::new();
    for (t, tenant) in tenants.iter().enumerate() {
        for (s, subject) in subjects.iter().enumerate() {
            let text = format!("I prefer {}.", item(t, s));
            // Streamed and not, alternately: both are observed once complete.
            let sent = serde_json::to_vec(&body(None, &text, (t + s) % 2 == 0)).unwrap();
            sends.push((t, *tenant, *subject, sent));
        }
    }
    let answers = futures_util::future::join_all(
        sends.iter().map(|(t, _, subject, sent)| gate.send(&keys[*t], Some(subject), sent)),
    )
    .await;
    assert!(answers.iter().all(|a| a.status == 200));
    for tenant in tenants {
        gate.settled(tenant, subjects.len() * 7).await;
    }
    for (t, tenant) in tenants.iter().enumerate() {
        let records = gate.records(tenant, None).await;
        assert_eq!(records.len(), subjects.len(), "{tenant}: {records:#?}");
        for (s, subject) in subjects.iter().enumerate() {
            let own: Vec<_> =
                records.iter().filter(|r| r["scope"] == json!([format!("user:{subject}")])).collect();
            assert_eq!(own.len(), 1, "{tenant}/{subject}: {records:#?}");
            assert_eq!(own[0]["content"]["preference"], item(t, s), "{tenant}/{subject}");
        }
        // The tenant's view names only its own exchanges' subjects and records.
        let status = gate.status(tenant).await;
        for outcome in status["outcomes"].as_array().unwrap() {
            if let Some(id) = outcome["record_id"].as_str() {
                assert!(
                    records.iter().any(|r| r["id"] == id),
                    "{tenant} sees a record not its own: {outcome}"
                );
            }
        }
    }
    // Each extraction call carried exactly one person's words.
    let extractions = gate.extractions().await;
    assert_eq!(extractions.len(), tenants.len() * subjects.len());
    for call in extractions {
        let prompt = call["body"]["messages"][0]["content"].as_str().unwrap().to_owned();
        let person =
            prompt.split_once("<person>").and_then(|(_, r)| r.split_once("</person>")).unwrap().0.to_owned();
        let matching = (0..tenants.len())
            .flat_map(|t| (0..subjects.len()).map(move |s| (t, s)))
            .filter(|(t, s)| person.contains(&item(*t, *s)))
            .count();
        assert_eq!(matching, 1, "{person}");
    }
}
