//! Scope and tenant: other users' and other tenants' records are never injected.

use super::*;

#[tokio::test]
async fn other_users_and_other_tenants_records_are_never_injected() {
    let gate = Memgate::start(CONFIG);
    // One preference, word for word, in five places. The query names its alias, so every copy
    // matches exactly: only scope and tenant can keep one out.
    let preference = |id: &str, scope: &str| {
        json!({
            "id": id,
            "type": "preference",
            "scope": [scope],
            "aliases": ["delivery instructions"],
            "content": {
                "topic": "delivery",
                "preference": "Leave parcels with the building concierge, never at the door.",
                "strength": "must"
            }
        })
    };
    gate.remember(TENANT, &preference("pref-u789", "user:u-789")).await;
    gate.remember(TENANT, &preference("pref-other", "user:other")).await;
    gate.remember(TENANT, &preference("pref-billing", "team:billing")).await;
    gate.remember("globex", &preference("globex-pref-u789", "user:u-789")).await;
    gate.remember("globex", &preference("globex-pref-public", "public")).await;

    let acme = gate.key(TENANT, &["team:support"], &["assert_subject"]).await;
    let globex = gate.key("globex", &["team:support"], &["assert_subject"]).await;
    let body = support_bot("What are my delivery instructions? Where should the courier leave parcels?");
    let cases: [(&str, &str, Option<&str>, &[&str]); 4] = [
        ("acme, subject u-789", &acme, Some("u-789"), &["pref-u789"]),
        ("acme, subject other", &acme, Some("other"), &["pref-other"]),
        ("acme, no subject", &acme, None, &[]),
        ("globex, subject u-789", &globex, Some("u-789"), &["globex-pref-u789", "globex-pref-public"]),
    ];
    for (what, key, subject, expected) in cases {
        let headers: Vec<(&str, &str)> = subject.map(|s| ("x-memory-subject", s)).into_iter().collect();
        let answer = gate.ask(key, &headers, &body).await;
        answer.assert_ok(expected.len(), what);
        let upstream = gate.last_upstream().await;
        assert_eq!(injected_ids(&upstream["body"]), set(expected), "{what}");
        if expected.is_empty() {
            assert_eq!(upstream["body"], body, "{what}: nothing to inject, yet the body changed");
        }
    }
    // The same caller through explain, for the reasons.
    let explained =
        gate.explain(TENANT, &body, json!({"scopes": ["team:support"], "subject": "u-789"}), None).await;
    let scope = removed(&explained, "scope");
    assert_eq!(
        scope.keys().cloned().collect::<BTreeSet<_>>(),
        set(&["pref-other", "pref-billing"]),
        "{explained}"
    );
}
