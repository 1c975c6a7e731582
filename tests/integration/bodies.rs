//! The index keeps records' heads, not their bodies: what a request renders comes from the body
//! cache or the store. Whatever the cache holds, a body read for an indexed record is its current
//! revision, of the caller's own tenant: never the content the record had before a write (this
//! replica's or another's), never a record moved out of the scope the funnel judged, never
//! another tenant's record of the same id. On SQLite and on PostgreSQL.

use crate::support::TestDb;
use crate::support::on_both_stores;
use memgate::index::RecordHead;
use memgate::memory::MemoryService;
use serde_json::{Value, json};

on_both_stores!(
    a_body_read_past_the_index_is_the_stores_current_revision,
    the_cache_never_serves_a_revision_the_index_replaced,
    two_tenants_with_the_same_id_each_read_their_own_body,
);

async fn service(db: &TestDb, body_cache_bytes: u64) -> MemoryService {
    let memories = crate::support::memory_service(&db.url).await.with_body_cache(body_cache_bytes);
    memories.load_index().await.unwrap();
    memories
}

fn preference(scope: &str, text: &str) -> Value {
    json!({"id": "pref-delivery", "type": "preference", "scope": [scope],
        "content": {"topic": "delivery", "preference": text, "strength": "must"}})
}

/// The index's head of `id` in `tenant`.
fn head(memories: &MemoryService, tenant: &str, id: &str) -> RecordHead {
    let index = memories.index().tenant(tenant).expect("the tenant is indexed");
    let index = index.read().unwrap();
    index.get(id).expect("the record is indexed").head.clone()
}

/// The body `memories` gives for its own index's head of `id`: its content's `preference`.
async fn preference_read(memories: &MemoryService, tenant: &str, id: &str) -> Option<String> {
    let head = head(memories, tenant, id);
    let bodies = memories.bodies(&[&head]).await.unwrap();
    let body = bodies.into_iter().next().unwrap()?;
    assert_eq!((body.tenant.as_str(), body.id.as_str()), (tenant, id));
    Some(body.content["preference"].as_str().unwrap().to_owned())
}

async fn a_body_read_past_the_index_is_the_stores_current_revision(db: TestDb) {
    // This replica keeps no bodies: each is read from the store. Another replica writes the
    // record meanwhile; this one's index has not taken the write in yet.
    let here = service(&db, 0).await;
    here.create("acme", &preference("user:u-1", "Leave parcels with the concierge."), "admin:test")
        .await
        .unwrap();
    let other = service(&db, 0).await;
    assert_eq!(
        preference_read(&here, "acme", "pref-delivery").await.as_deref(),
        Some("Leave parcels with the concierge.")
    );
    assert!(here.index().bodies().is_empty(), "a cache of 0 bytes holds nothing");

    // Updated elsewhere, same scope: the current revision's words, not the ones the index ranked.
    let patch = json!({"content": {"topic": "delivery", "preference": "Use the locker by the gate.", "strength": "must"}});
    other.update("acme", "pref-delivery", &patch, None, "admin:test").await.unwrap();
    assert_eq!(head(&here, "acme", "pref-delivery").revision, 1, "this replica's index is behind");
    assert_eq!(
        preference_read(&here, "acme", "pref-delivery").await.as_deref(),
        Some("Use the locker by the gate.")
    );

    // Moved to another customer elsewhere: the body is not shown for the scope the funnel judged.
    other.update("acme", "pref-delivery", &json!({"scope": ["user:u-2"]}), None, "admin:test").await.unwrap();
    assert_eq!(preference_read(&here, "acme", "pref-delivery").await, None);

    // Deleted elsewhere: nothing.
    other.delete("acme", "pref-delivery", "admin:test").await.unwrap();
    assert_eq!(preference_read(&here, "acme", "pref-delivery").await, None);

    // Once this replica syncs, the record is gone from its index too.
    here.sync_from_store().await.unwrap();
    assert!(here.index().tenant("acme").unwrap().read().unwrap().get("pref-delivery").is_none());
}

async fn the_cache_never_serves_a_revision_the_index_replaced(db: TestDb) {
    let memories = service(&db, 64 * 1024 * 1024).await;
    let cache = memories.index().bodies().clone();
    memories
        .create("acme", &preference("user:u-1", "Leave parcels with the concierge."), "admin:test")
        .await
        .unwrap();
    assert!(
        cache.get("acme", "pref-delivery", 1).is_some(),
        "a record just written is rendered without a store read"
    );

    let patch = json!({"content": {"topic": "delivery", "preference": "Use the locker by the gate.", "strength": "must"}});
    memories.update("acme", "pref-delivery", &patch, None, "admin:test").await.unwrap();
    assert!(cache.get("acme", "pref-delivery", 1).is_none(), "the replaced revision's body is dropped");
    assert_eq!(
        preference_read(&memories, "acme", "pref-delivery").await.as_deref(),
        Some("Use the locker by the gate.")
    );

    // A restart reads the bodies in with the index; a delete takes them out.
    let restarted = service(&db, 64 * 1024 * 1024).await;
    assert!(restarted.index().bodies().get("acme", "pref-delivery", 2).is_some());
    assert_eq!(
        preference_read(&restarted, "acme", "pref-delivery").await.as_deref(),
        Some("Use the locker by the gate.")
    );
    restarted.delete("acme", "pref-delivery", "admin:test").await.unwrap();
    assert!(
        restarted.index().bodies().get("acme", "pref-delivery", 2).is_none(),
        "a deleted record's body stays nowhere"
    );
    assert!(restarted.index().bodies().is_empty());
}

async fn two_tenants_with_the_same_id_each_read_their_own_body(db: TestDb) {
    for cache in [0, 64 * 1024 * 1024] {
        let memories = service(&db, cache).await;
        let (acme, globex) = (format!("acme-{cache}"), format!("globex-{cache}"));
        memories
            .create(&acme, &preference("user:u-1", "Leave parcels with the concierge."), "admin:test")
            .await
            .unwrap();
        memories.create(&globex, &preference("user:u-1", "Ring twice."), "admin:test").await.unwrap();
        let restarted = service(&db, cache).await;
        for memories in [&memories, &restarted] {
            assert_eq!(
                preference_read(memories, &acme, "pref-delivery").await.as_deref(),
                Some("Leave parcels with the concierge.")
            );
            assert_eq!(
                preference_read(memories, &globex, "pref-delivery").await.as_deref(),
                Some("Ring twice.")
            );
            // A head of one tenant never reads the other's body, whatever else matches.
            let acme_head = head(memories, &acme, "pref-delivery");
            let acme_body = memories.bodies(&[&acme_head]).await.unwrap().remove(0).expect("acme's body");
            let mut forged = (*acme_body).clone();
            forged.tenant = format!("initech-{cache}");
            let forged = RecordHead::of(&forged);
            assert_eq!(forged.id(), acme_head.id());
            assert_eq!(forged.revision, acme_head.revision);
            assert_eq!(memories.bodies(&[&forged]).await.unwrap(), vec![None]);
        }
    }
}
