//! The memory paths, one by one: create, read, update, delete, supersede, list, history,
//! forget and near repeats.

use super::*;

#[tokio::test]
async fn create_read_update_delete_supersede_and_exact_repeat() {
    let admin = Admin::start();

    // A minimal record: id generated, defaults filled in.
    let answer = admin.create(None, &fact("The warehouse closes at 18:00", &["public"])).await;
    let body = answer.expect(201, "create");
    let id = body["id"].as_str().unwrap().to_owned();
    assert!(!id.is_empty());
    assert_eq!(body["revision"], 1);
    assert!(body.get("superseded").is_none() && body.get("exact_repeat").is_none(), "{}", answer.text);
    let record = &body["record"];
    assert_eq!(record["id"], id.as_str());
    assert_eq!(record["tenant"], "default");
    assert_eq!((record["status"].as_str(), record["priority"].as_u64()), (Some("active"), Some(3)));
    assert_eq!(record["schema_version"], "v1");
    assert_eq!(record["valid_until"], "9999-12-31T23:59:59Z");
    assert_eq!(record["metadata"]["last_updated"], record["updated_at"]);
    assert_eq!(admin.get(None, &id).await.expect(200, "get"), record);

    // The contract's example record, every envelope field given.
    let profile = json!({
        "id": "mem-cust-2024-0615-001",
        "type": "customer_profile",
        "schema_version": "v1",
        "scope": ["user:u-789", "team:sales"],
        "valid_from": "2024-06-15T09:00:00Z",
        "valid_until": "9999-12-31T23:59:59Z",
        "priority": 4,
        "key": "customer:u-789:profile",
        "aliases": ["下周发货", "next week delivery"],
        "content": {"name": "Li Wei", "preferred_language": "zh-CN", "special_requests": ["ship on Fridays"]},
        "metadata": {"source": "CRM_v4.2", "updated_by": "sales-bot-03"}
    });
    let answer = admin.create(None, &profile).await;
    let body = answer.expect(201, "create the profile");
    assert_eq!(body["id"], "mem-cust-2024-0615-001");
    let record = &body["record"];
    for field in ["type", "valid_from", "valid_until", "priority", "key", "aliases", "content"] {
        assert_eq!(record[field], profile[field], "{field}");
    }
    assert_eq!(record["scope"], json!(["team:sales", "user:u-789"]));
    assert_eq!(record["metadata"]["source"], "CRM_v4.2");

    // Same id, other content: the id is taken.
    let taken = admin.create(None, &with(profile.clone(), "key", json!("customer:other"))).await;
    taken.assert_error(409, "invalid_request_error", "an id that exists");
    taken.assert_code("id_taken", "an id that exists");

    // Same key and scope (in another order), no id: supersedes in place.
    let mut newer = profile.clone();
    newer.as_object_mut().unwrap().remove("id");
    newer["scope"] = json!(["team:sales", "user:u-789"]);
    newer["content"] = json!({"name": "Li Wei", "preferred_language": "en"});
    let answer = admin.create(None, &newer).await;
    let body = answer.expect(200, "supersede by key");
    assert_eq!(body["superseded"], true, "{}", answer.text);
    assert_eq!((body["id"].as_str(), body["revision"].as_i64()), (Some("mem-cust-2024-0615-001"), Some(2)));
    let current = admin.get(None, "mem-cust-2024-0615-001").await;
    assert_eq!(current.expect(200, "get")["content"], newer["content"]);
    let topic = admin.list_all(None, "q=customer:u-789:profile", 50).await;
    assert_eq!(ids_of(&topic), BTreeSet::from(["mem-cust-2024-0615-001".to_owned()]));

    // The same write again: an exact repeat, nothing changes.
    let answer = admin.create(None, &newer).await;
    let body = answer.expect(200, "exact repeat");
    assert_eq!(body["exact_repeat"], true, "{}", answer.text);
    assert_eq!((body["id"].as_str(), body["revision"].as_i64()), (Some("mem-cust-2024-0615-001"), Some(2)));
    let history = admin.history(None, "mem-cust-2024-0615-001").await;
    assert_eq!(history.expect(200, "history")["data"].as_array().unwrap().len(), 2, "{}", history.text);

    // PATCH: revision + 1, untouched fields kept; a stale If-Match is refused and changes nothing.
    let id = "mem-cust-2024-0615-001";
    let answer =
        admin.patch(None, id, Some(2), &json!({"priority": 5, "aliases": ["Friday shipping"]})).await;
    let patched = answer.expect(200, "patch").clone();
    assert_eq!(patched["revision"], 3);
    assert_eq!(patched["priority"], 5);
    assert_eq!(patched["aliases"], json!(["Friday shipping"]));
    assert_eq!(patched["content"], newer["content"]);
    assert_eq!(patched["key"], "customer:u-789:profile");
    assert_eq!(patched["created_at"], current.json["created_at"]);
    assert!(parse_time(&patched["updated_at"]) >= parse_time(&current.json["updated_at"]));
    let stale = admin.patch(None, id, Some(2), &json!({"priority": 1})).await;
    stale.assert_error(409, "invalid_request_error", "stale If-Match");
    stale.assert_code("revision_conflict", "stale If-Match");
    assert_eq!(admin.get(None, id).await.expect(200, "get"), &patched);
    let quoted = send(
        admin
            .req(Method::PATCH, &format!("/memories/{id}"), None)
            .header("if-match", "\"3\"")
            .json(&json!({"priority": 2})),
    )
    .await;
    assert_eq!(quoted.expect(200, "quoted If-Match")["revision"], 4);
    let unguarded = admin.patch(None, id, None, &json!({"aliases": null})).await;
    let unguarded = unguarded.expect(200, "patch without If-Match");
    assert_eq!((unguarded["revision"].as_i64(), unguarded["aliases"].clone()), (Some(5), json!([])));

    // A PATCH that would break the record is refused whole.
    let bad = admin.patch(None, id, Some(5), &json!({"content": {"name": ""}, "priority": 1})).await;
    bad.assert_problem("$.content.name", "schema_violation", "patch with bad content");
    let renamed = admin.patch(None, id, None, &json!({"id": "mem-other"})).await;
    renamed.assert_problem("$.id", "invalid_value", "patch the id");
    let after = admin.get(None, id).await;
    assert_eq!((after.json["revision"].as_i64(), after.json["priority"].as_i64()), (Some(5), Some(2)));

    // Status changes: each a revision; paused and archived records leave the active list.
    for (action, status, revision) in [
        ("pause", "paused", 6),
        ("archive", "archived", 7),
        ("archive", "archived", 7),
        ("activate", "active", 8),
    ] {
        let answer = admin.action(None, id, action).await;
        let record = answer.expect(200, action);
        assert_eq!((record["status"].as_str(), record["revision"].as_i64()), (Some(status), Some(revision)));
        let active = ids_of(&admin.list_all(None, "status=active", 50).await);
        assert_eq!(active.contains(id), status == "active", "{action}");
    }

    // DELETE: gone for GET, PATCH, DELETE and lists.
    let deleted = admin.req(Method::DELETE, &format!("/memories/{id}"), None);
    let deleted = send(deleted).await;
    assert_eq!(deleted.expect(200, "delete"), &json!({"id": id, "deleted": true}));
    admin.get(None, id).await.assert_error(404, "not_found_error", "get after delete");
    admin.patch(None, id, None, &json!({"priority": 1})).await.assert_error(404, "not_found_error", "patch");
    let again = send(admin.req(Method::DELETE, &format!("/memories/{id}"), None)).await;
    again.assert_error(404, "not_found_error", "delete twice");
    assert!(!ids_of(&admin.list_all(None, "", 50).await).contains(id));
    admin.get(None, "mem-never-was").await.assert_error(404, "not_found_error", "unknown id");
}

#[tokio::test]
async fn list_filters_search_and_cursor_paging_reach_every_record_once() {
    let admin = Admin::start();
    // (id, scope, type, status, searchable text)
    let mut expected: Vec<(String, &str, &str, &str, String)> = Vec::new();
    for i in 0..17 {
        let scope = if i % 3 == 0 { "team:a" } else { "team:b" };
        let statement = format!("Fact number {i:02}");
        let id = admin.create_ok(None, &fact_with_id(&format!("mem-f{i:02}"), &statement, &[scope])).await;
        expected.push((id, scope, "fact", "active", statement));
    }
    for i in 0..4 {
        let mut record = json!({"id": format!("mem-p{i}"), "type": "preference", "scope": ["team:a"],
            "content": {"topic": "delivery", "preference": format!("Deliver before noon, slot {i}")}});
        if i == 2 {
            record["aliases"] = json!(["Morning-Delivery"]);
        }
        let id = admin.create_ok(None, &record).await;
        expected.push((id, "team:a", "preference", "active", format!("slot {i}")));
    }
    for (n, (statement, key)) in [
        ("Discount is 50% for VIPs", None),
        ("Discount is 500 points", None),
        ("Reference order_42 shipped", None),
        ("Reference orderX42 shipped", None),
        ("Spare parts", Some("sku:AB-1234")),
    ]
    .into_iter()
    .enumerate()
    {
        let mut record = fact_with_id(&format!("mem-x{n}"), statement, &["public"]);
        if let Some(key) = key {
            record["key"] = json!(key);
        }
        let id = admin.create_ok(None, &record).await;
        expected.push((id, "public", "fact", "active", statement.to_owned()));
    }
    for (index, action, status) in
        [(1, "pause", "paused"), (4, "pause", "paused"), (18, "archive", "archived")]
    {
        admin.action(None, &expected[index].0, action).await.expect(200, action);
        expected[index].3 = status;
    }
    // Another tenant's records never show up.
    admin.create_ok(Some("elsewhere"), &fact("Fact number 99", &["team:a"])).await;

    let all_ids: BTreeSet<String> = expected.iter().map(|e| e.0.clone()).collect();
    for limit in [1, 5, 26, 500] {
        assert_eq!(ids_of(&admin.list_all(None, "", limit).await), all_ids, "limit {limit}");
    }
    let first = send(admin.req(Method::GET, "/memories?limit=5", None)).await;
    assert_eq!(first.expect(200, "first page")["data"].as_array().unwrap().len(), 5);
    assert!(first.json["next_cursor"].is_string());

    let select = |keep: &dyn Fn(&(String, &str, &str, &str, String)) -> bool| -> BTreeSet<String> {
        expected.iter().filter(|e| keep(e)).map(|e| e.0.clone()).collect()
    };
    let cases: Vec<(&str, BTreeSet<String>)> = vec![
        ("scope=team:a", select(&|e| e.1 == "team:a")),
        ("type=preference", select(&|e| e.2 == "preference")),
        ("status=paused", select(&|e| e.3 == "paused")),
        ("status=archived", select(&|e| e.3 == "archived")),
        ("scope=team:b&type=fact&status=active", select(&|e| e.1 == "team:b" && e.3 == "active")),
        ("q=MORNING-delivery", select(&|e| e.4 == "slot 2")),
        ("q=fact%20number%201", select(&|e| e.4.starts_with("Fact number 1"))),
        ("q=50%25", select(&|e| e.4.contains("50%"))),
        ("q=order_4", select(&|e| e.4.contains("order_42"))),
        ("q=ab-1234", select(&|e| e.4 == "Spare parts")),
        ("q=nothing-matches-this", BTreeSet::new()),
    ];
    for (query, want) in &cases {
        assert!(query.starts_with("q=nothing") || !want.is_empty(), "{query} selects nothing");
        let got = ids_of(&admin.list_all(None, query, 2).await);
        assert_eq!(&got, want, "list ?{query}");
    }
    // Export takes the same filters.
    assert_eq!(
        export_ids(&admin.export(None, "?scope=team:a&type=fact").await),
        select(&|e| e.1 == "team:a" && e.2 == "fact")
    );
    assert_eq!(export_ids(&admin.export(None, "").await), all_ids);
}

#[tokio::test]
async fn history_holds_every_change_in_order_with_before_after_actor_and_time() {
    let admin = Admin::start();
    let started = OffsetDateTime::now_utc() - Duration::from_millis(5);
    let as_actor = |request: RequestBuilder, actor: &str| request.header("x-memory-actor", actor.to_owned());
    let record = with(fact("Order ORD-1 is packed", &["user:u-9"]), "key", json!("order:ORD-1:status"));

    // Each step: the actor, the action history should name, and the record it left.
    let mut steps: Vec<(&str, &str, Value)> = Vec::new();
    let created = send(as_actor(admin.req(Method::POST, "/memories", None).json(&record), "alice")).await;
    let id = created.expect(201, "create")["id"].as_str().unwrap().to_owned();
    steps.push(("alice", "create", created.json["record"].clone()));
    let path = format!("/memories/{id}");
    for (actor, body) in [
        ("bob", json!({"content": {"statement": "Order ORD-1 has shipped"}})),
        ("carol", json!({"priority": 5})),
    ] {
        let answer = send(as_actor(admin.req(Method::PATCH, &path, None).json(&body), actor)).await;
        steps.push((actor, "update", answer.expect(200, "patch").clone()));
    }
    for (actor, action) in [("dave", "pause"), ("dave", "pause"), ("erin", "activate")] {
        let answer = send(as_actor(admin.req(Method::POST, &format!("{path}/{action}"), None), actor)).await;
        let after = answer.expect(200, action).clone();
        if steps.last().unwrap().2["status"] != after["status"] {
            steps.push((actor, action, after));
        } else {
            assert_eq!(after, steps.last().unwrap().2, "a second pause changes nothing");
        }
    }
    let newer = with(record.clone(), "content", json!({"statement": "Order ORD-1 was delivered"}));
    let answer = send(as_actor(admin.req(Method::POST, "/memories", None).json(&newer), "frank")).await;
    assert_eq!(answer.expect(200, "supersede")["superseded"], true);
    steps.push(("frank", "supersede", answer.json["record"].clone()));
    let answer = send(as_actor(admin.req(Method::POST, &format!("{path}/archive"), None), "gina")).await;
    steps.push(("gina", "archive", answer.expect(200, "archive").clone()));
    let answer = send(as_actor(admin.req(Method::DELETE, &path, None), "hank")).await;
    answer.expect(200, "delete");
    steps.push(("hank", "delete", Value::Null));
    let finished = OffsetDateTime::now_utc() + Duration::from_millis(5);

    let history = admin.history(None, &id).await;
    let data = history.expect(200, "history")["data"].as_array().unwrap().clone();
    assert_eq!(history.json["id"], id.as_str());
    let actions: Vec<&str> = data.iter().map(|c| c["action"].as_str().unwrap()).collect();
    assert_eq!(
        actions,
        ["create", "update", "update", "pause", "activate", "supersede", "archive", "delete"]
    );
    assert_eq!(data.len(), steps.len());
    let mut previous_after = Value::Null;
    let mut previous_at = started;
    for (i, (change, (actor, action, after))) in data.iter().zip(&steps).enumerate() {
        let what = format!("change {i} ({action})");
        assert_eq!(change["actor"], *actor, "{what}");
        assert_eq!(change["action"], *action, "{what}");
        assert_eq!(change["before"], previous_after, "{what}: before is the previous after");
        assert_eq!(&change["after"], after, "{what}: after is what the write answered");
        let at = parse_time(&change["at"]);
        assert!(previous_at <= at && at <= finished, "{what}: time {at} out of order");
        let revision = change["revision"].as_i64().unwrap();
        assert_eq!(revision, (i as i64 + 1).min(7), "{what}");
        if !after.is_null() {
            assert_eq!(change["at"], after["updated_at"], "{what}");
        }
        previous_after = change["after"].clone();
        previous_at = at;
    }
    assert_eq!(data[7]["before"]["status"], "archived");

    // History is the tenant's own, and an unknown id has none.
    admin.history(Some("someone-else"), &id).await.assert_error(404, "not_found_error", "other tenant");
    admin.history(None, "mem-never-was").await.assert_error(404, "not_found_error", "unknown id");
    for action in ["pause", "archive", "activate"] {
        admin.action(None, "mem-never-was", action).await.assert_error(404, "not_found_error", action);
    }
}

#[tokio::test]
async fn forget_erases_a_scope_and_its_history_and_nothing_else() {
    let admin = Admin::start();
    let erased = admin.create_ok(None, &fact_with_id("mem-tea", "Likes green tea", &["user:u-789"])).await;
    let shared = json!({"type": "customer_profile", "scope": ["user:u-789", "team:sales"],
        "key": "customer:u-789:profile", "content": {"name": "Li Wei"}});
    let shared = admin.create_ok(None, &shared).await;
    let moved =
        admin.create_ok(None, &fact_with_id("mem-moved", "Escalations go to tier 2", &["user:u-789"])).await;
    admin.patch(None, &moved, None, &json!({"scope": ["team:support"]})).await.expect(200, "move");
    let deleted =
        admin.create_ok(None, &fact_with_id("mem-deleted", "Old address on file", &["user:u-789"])).await;
    send(admin.req(Method::DELETE, &format!("/memories/{deleted}"), None)).await.expect(200, "delete");
    let sales = admin.create_ok(None, &fact("Sales quota is 40 calls", &["team:sales"])).await;
    admin.patch(None, &sales, None, &json!({"priority": 4})).await.expect(200, "patch");
    let other_user = admin.create_ok(None, &fact("Prefers email", &["user:u-100"])).await;
    let public = admin.create_ok(None, &fact("We ship worldwide", &["public"])).await;
    let other_tenant = admin.create_ok(Some("acme"), &fact("Likes green tea", &["user:u-789"])).await;
    let sales_history = admin.history(None, &sales).await.json;
    assert!(admin.export(None, "").await.contains("user:u-789"));

    let answer =
        send(admin.req(Method::POST, "/memories/forget", None).json(&json!({"scope": "user:u-789"}))).await;
    let body = answer.expect(200, "forget");
    assert_eq!(body["scope"], "user:u-789");
    assert_eq!(body["records_erased"], 2, "{}", answer.text);
    // erased: 1 + shared: 1 + moved: create and update + deleted: create and delete.
    assert_eq!(body["changes_erased"], 6, "{}", answer.text);

    for id in [&erased, &shared, &deleted] {
        admin.get(None, id).await.assert_error(404, "not_found_error", "get after forget");
        admin.history(None, id).await.assert_error(404, "not_found_error", "history after forget");
    }
    let moved_history = admin.history(None, &moved).await;
    moved_history.expect(200, "history of the moved record");
    assert!(!moved_history.text.contains("u-789"), "history kept a trace: {}", moved_history.text);
    assert_eq!(admin.get(None, &moved).await.json["scope"], json!(["team:support"]));

    let remaining = admin.list_all(None, "", 50).await;
    let want: BTreeSet<String> = [&moved, &sales, &other_user, &public].into_iter().cloned().collect();
    assert_eq!(ids_of(&remaining), want);
    assert!(admin.list_all(None, "scope=user:u-789", 50).await.is_empty());
    assert!(admin.list_all(None, "q=green%20tea", 50).await.is_empty());
    let export = admin.export(None, "").await;
    assert_eq!(export_ids(&export), want);
    assert!(!export.contains("u-789") && !export.contains("Li Wei"), "export kept a trace: {export}");
    assert_eq!(admin.history(None, &sales).await.json, sales_history, "other scopes' history stays");
    let kept = admin.get(Some("acme"), &other_tenant).await;
    assert_eq!(kept.expect(200, "other tenant")["content"]["statement"], "Likes green tea");
    assert_eq!(admin.history(Some("acme"), &other_tenant).await.json["data"].as_array().unwrap().len(), 1);

    // Writing the same thing again starts afresh.
    let again = admin.create(None, &fact("Likes green tea", &["user:u-789"])).await;
    assert_eq!(again.expect(201, "create after forget")["revision"], 1);

    let bad =
        send(admin.req(Method::POST, "/memories/forget", None).json(&json!({"scope": "not a scope"}))).await;
    bad.assert_problem("$.scope", "invalid_value", "forget a malformed scope");
    let missing = send(admin.req(Method::POST, "/memories/forget", None).json(&json!({}))).await;
    missing.assert_error(400, "invalid_request_error", "forget without a scope");
}

#[tokio::test]
async fn a_near_repeat_updates_its_twin_and_says_so() {
    let admin = Admin::start();
    let text = "Deliveries to this customer must arrive before noon.";
    let first = admin.create(None, &fact(text, &["user:u-42"])).await;
    let id = first.expect(201, "first")["id"].as_str().unwrap().to_owned();
    let near = "Deliveries to this customer must arrive before noon";
    let answer = admin.create(None, &fact(near, &["user:u-42"])).await;
    let body = answer.expect(200, "a near repeat");
    assert_eq!(body["deduplicated"], true, "{}", answer.text);
    assert_eq!((body["id"].as_str(), body["revision"].as_i64()), (Some(id.as_str()), Some(2)));
    let similarity = body["similarity"].as_f64().unwrap();
    assert!((0.9..=1.0001).contains(&similarity), "similarity {similarity}");
    assert_eq!(body["record"]["content"]["statement"], near);
    assert_eq!(ids_of(&admin.list_all(None, "scope=user:u-42", 50).await), BTreeSet::from([id.clone()]));
    let history = admin.history(None, &id).await;
    assert_eq!(history.expect(200, "history")["data"].as_array().unwrap().len(), 2, "{}", history.text);

    // Another scope, another tenant, a topic key or an id of its own: never merged.
    admin.create(None, &fact(text, &["user:u-43"])).await.expect(201, "another scope");
    admin.create(Some("other"), &fact(text, &["user:u-42"])).await.expect(201, "another tenant");
    let keyed = with(fact(text, &["user:u-42"]), "key", json!("delivery:u-42"));
    admin.create(None, &keyed).await.expect(201, "a record with a key");
    admin
        .create(None, &fact_with_id("mem-own", &format!("{near}!"), &["user:u-42"]))
        .await
        .expect(201, "an id");

    // A deleted record is no twin.
    let gone = admin.create_ok(None, &fact(text, &["user:u-44"])).await;
    send(admin.req(Method::DELETE, &format!("/memories/{gone}"), None)).await.expect(200, "delete");
    let again = admin.create(None, &fact(text, &["user:u-44"])).await;
    assert_ne!(again.expect(201, "after the twin was deleted")["id"], gone.as_str());
}

#[tokio::test]
async fn different_facts_in_one_scope_are_not_merged_as_near_repeats() {
    // A support bot's memory is full of facts that differ in one number or one word. Merging
    // them would overwrite the first with the second: memory silently lost.
    let admin = Admin::start();
    let pairs = [
        ("Order ORD-1001 shipped on Monday", "Order ORD-1002 shipped on Monday"),
        ("Refund limit is 50 EUR", "Refund limit is 500 EUR"),
        ("The customer is allergic to peanuts", "The customer is not allergic to peanuts"),
        ("The warehouse closes at 18:00", "The warehouse closes at 20:00"),
        ("Imported one", "Written after the import"),
    ];
    let mut merged = Vec::new();
    for (i, (a, b)) in pairs.iter().enumerate() {
        let scope = format!("user:pair-{i}");
        admin.create(None, &fact(a, &[&scope])).await.expect(201, a);
        let answer = admin.create(None, &fact(b, &[&scope])).await;
        if answer.status != 201 {
            merged.push(format!("{a:?} + {b:?} -> {} {}", answer.status, answer.json["similarity"]));
        }
        let kept: BTreeSet<String> = admin
            .list_all(None, &format!("scope={scope}"), 50)
            .await
            .iter()
            .map(|r| r["content"]["statement"].as_str().unwrap().to_owned())
            .collect();
        if kept.len() != 2 {
            merged.push(format!("{scope} keeps only {kept:?}"));
        }
    }
    assert!(merged.is_empty(), "distinct facts merged as near repeats:\n{}", merged.join("\n"));
}
