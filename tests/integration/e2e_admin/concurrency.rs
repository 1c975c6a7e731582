//! Concurrency: one If-Match winner, one record per id or topic, and a body never chooses the
//! tenant.

use super::*;

#[tokio::test]
async fn concurrent_patches_with_the_same_if_match_let_exactly_one_through() {
    let admin = Admin::start();
    let id = admin.create_ok(None, &fact("round 0", &["public"])).await;
    for round in 1..=8 {
        let revision = admin.get(None, &id).await.json["revision"].as_i64().unwrap();
        let texts = [format!("round {round} by A"), format!("round {round} by B")];
        let body_a = json!({"content": {"statement": texts[0]}});
        let body_b = json!({"content": {"statement": texts[1]}});
        let (a, b) = tokio::join!(
            admin.patch(None, &id, Some(revision), &body_a),
            admin.patch(None, &id, Some(revision), &body_b),
        );
        let mut statuses = [a.status, b.status];
        statuses.sort_unstable();
        assert_eq!(statuses, [200, 409], "round {round}: {} / {}", a.text, b.text);
        let (winner, loser) = if a.status == 200 { (&a, &b) } else { (&b, &a) };
        loser.assert_error(409, "invalid_request_error", "the losing PATCH");
        let won = winner.json["content"]["statement"].as_str().unwrap().to_owned();
        assert!(texts.contains(&won));
        let current = admin.get(None, &id).await;
        assert_eq!(current.json["content"]["statement"], won.as_str(), "round {round}");
        assert_eq!(current.json["revision"], revision + 1, "round {round}");
        assert_eq!(&current.json, &winner.json);
        let history = admin.history(None, &id).await.json;
        let updates: Vec<&Value> =
            history["data"].as_array().unwrap().iter().filter(|c| c["action"] == "update").collect();
        assert_eq!(updates.len(), round as usize, "round {round}: {history}");
        let last = updates.last().unwrap();
        assert_eq!(last["after"]["content"]["statement"], won.as_str());
        assert_eq!(last["before"]["revision"], revision);
    }
}

#[tokio::test]
async fn concurrent_creates_of_one_id_or_one_topic_leave_one_record() {
    let admin = Admin::start();
    for round in 0..6 {
        let id = format!("mem-race-{round}");
        let a = with(fact(&format!("{id} by A"), &["public"]), "id", json!(id));
        let b = with(fact(&format!("{id} by B"), &["public"]), "id", json!(id));
        let (a, b) = tokio::join!(admin.create(None, &a), admin.create(None, &b));
        let mut statuses = [a.status, b.status];
        statuses.sort_unstable();
        assert_eq!(statuses, [201, 409], "same id, round {round}: {} / {}", a.text, b.text);
        let winner = if a.status == 201 { &a } else { &b };
        assert_eq!(admin.get(None, &id).await.json["content"], winner.json["record"]["content"]);

        let key = format!("topic:{round}");
        let a = with(fact(&format!("{key} by A"), &["user:u-1"]), "key", json!(key));
        let b = with(fact(&format!("{key} by B"), &["user:u-1"]), "key", json!(key));
        let (a, b) = tokio::join!(admin.create(None, &a), admin.create(None, &b));
        let mut statuses = [a.status, b.status];
        statuses.sort_unstable();
        assert_eq!(statuses, [200, 201], "same topic, round {round}: {} / {}", a.text, b.text);
        let (first, second) = if a.status == 201 { (&a, &b) } else { (&b, &a) };
        assert_eq!(second.json["superseded"], true, "{}", second.text);
        assert_eq!(first.json["id"], second.json["id"]);
        let live = admin.list_all(None, &format!("q={key}"), 50).await;
        assert_eq!(live.len(), 1, "round {round}: {live:?}");
        assert_eq!(live[0]["content"], second.json["record"]["content"]);
        assert_eq!(live[0]["revision"], 2);
    }
}

#[tokio::test]
async fn a_tenant_named_in_the_body_never_chooses_the_tenant() {
    let admin = Admin::start();
    let record =
        with(with(fact("Alpha's note", &["public"]), "tenant", json!("t-beta")), "id", json!("mem-t"));
    let created = admin.create(Some("t-alpha"), &record).await;
    assert_eq!(created.expect(201, "create")["record"]["tenant"], "t-alpha");
    let patched =
        admin.patch(Some("t-alpha"), "mem-t", None, &json!({"tenant": "t-beta", "priority": 4})).await;
    assert_eq!(patched.expect(200, "patch")["tenant"], "t-alpha");
    let line =
        with(with(fact("Imported by alpha", &["public"]), "tenant", json!("t-beta")), "id", json!("mem-i"));
    admin.import(Some("t-alpha"), &line.to_string(), false).await.expect(201, "import");
    assert_eq!(
        export_ids(&admin.export(Some("t-alpha"), "").await),
        BTreeSet::from(["mem-i".into(), "mem-t".into()])
    );
    for tenant in [Some("t-beta"), None] {
        assert_eq!(admin.export(tenant, "").await, "", "{tenant:?} got alpha's records");
        admin.get(tenant, "mem-t").await.assert_error(404, "not_found_error", "another tenant's id");
    }
}
