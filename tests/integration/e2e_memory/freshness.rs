//! The body a request injects is the record's current revision, of the caller's own tenant: after
//! an update the next request carries the new content, and two tenants holding the same id and key
//! each get their own. The same with no body cache, every injected body read from the store.

use super::*;

#[tokio::test]
async fn the_current_revision_of_the_callers_own_tenant_is_injected() {
    current_revision_of_own_tenant_injected(CONFIG).await;
}

#[tokio::test]
async fn without_a_body_cache_the_current_revision_of_the_callers_own_tenant_is_injected() {
    current_revision_of_own_tenant_injected(&CONFIG.replace("[memory]\n", "[memory]\nbody_cache_mb = 0\n"))
        .await;
}

async fn current_revision_of_own_tenant_injected(config: &str) {
    assert!(config.contains("[memory]"));
    let gate = Memgate::start(config);
    let preference = |text: &str| {
        json!({
            "id": "pref-delivery",
            "type": "preference",
            "scope": ["user:u-1"],
            "key": "customer:u-1:delivery",
            "aliases": ["delivery instructions"],
            "content": {"topic": "delivery", "preference": text, "strength": "must"}
        })
    };
    gate.remember(TENANT, &preference("Leave parcels with the building concierge.")).await;
    gate.remember("globex", &preference("Ring twice and hand parcels over in person.")).await;
    let acme = gate.key(TENANT, &["team:support"], &["assert_subject"]).await;
    let globex = gate.key("globex", &["team:support"], &["assert_subject"]).await;
    let body = support_bot("What are my delivery instructions?");
    let subject = [("x-memory-subject", "u-1")];
    let block_for = |key: String| {
        let gate = &gate;
        let body = &body;
        async move {
            gate.ask(&key, &subject, body).await.assert_ok(1, "one preference");
            block_in(&gate.last_upstream().await["body"]).expect("a memory block")
        }
    };

    let acme_block = block_for(acme.clone()).await;
    let globex_block = block_for(globex.clone()).await;
    assert!(acme_block.contains("building concierge") && !acme_block.contains("Ring twice"), "{acme_block}");
    assert!(globex_block.contains("Ring twice") && !globex_block.contains("concierge"), "{globex_block}");

    // An update: the next request carries revision 2's content, never revision 1's.
    let response = client()
        .patch(gate.gw.url("/admin/v1/memories/pref-delivery"))
        .bearer_auth(ADMIN_TOKEN)
        .header("x-memory-tenant", TENANT)
        .json(&json!({"content": {"topic": "delivery", "preference": "Leave parcels in the locker by the gate.", "strength": "must"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let updated = block_for(acme.clone()).await;
    assert!(updated.contains("locker by the gate") && !updated.contains("concierge"), "{updated}");
    let globex_again = block_for(globex).await;
    assert!(globex_again.contains("Ring twice") && !globex_again.contains("locker"), "{globex_again}");
}
