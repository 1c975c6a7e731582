//! Export and import.

use super::*;

/// Records of every kind of envelope, in tenant `acme`; returns their ids.
pub(super) async fn seed_varied_records(admin: &Admin) -> Vec<String> {
    let t = Some("acme");
    let mut ids = Vec::new();
    let profile = json!({"id": "mem-cust-1", "type": "customer_profile", "scope": ["user:u-789", "team:sales"],
        "valid_from": "2024-06-15T09:00:00Z", "priority": 4, "key": "customer:u-789:profile",
        "aliases": ["下周发货", "next week delivery"],
        "content": {"name": "李伟", "preferred_language": "zh-CN", "special_requests": ["call after 18:00 <b>&</b>"]},
        "metadata": {"source": "CRM_v4.2", "nested": {"n": [1, 2.5, null, true]}}});
    ids.push(admin.create_ok(t, &profile).await);
    let paused =
        admin.create_ok(t, &fact_with_id("mem-returns", "Returns need a receipt", &["public"])).await;
    admin.action(t, &paused, "pause").await.expect(200, "pause");
    ids.push(paused);
    let old = json!({"id": "mem-old", "type": "fact", "scope": ["team:support"], "valid_from": "2020-01-01T00:00:00Z",
        "valid_until": "2021-01-01T00:00:00+02:00", "content": {"statement": "2020 holiday hours", "confidence": 0.85}});
    let old = admin.create_ok(t, &old).await;
    admin.action(t, &old, "archive").await.expect(200, "archive");
    ids.push(old);
    let preference = json!({"type": "preference", "scope": ["user:u-1"], "priority": 1,
        "content": {"topic": "tone", "preference": "formal", "strength": "must"}});
    ids.push(admin.create_ok(t, &preference).await);
    let task = json!({"id": "mem-task-7", "type": "task", "schema_version": "v2", "scope": ["agent:bot-3"],
        "content": {"title": "Call back", "status": "open", "checklist": [{"item": "check order", "done": false}]}});
    ids.push(admin.create_ok(t, &task).await);
    let edited = admin.create_ok(t, &fact_with_id("mem-hours", "Store opens at 9", &["public"])).await;
    admin
        .patch(t, &edited, Some(1), &json!({"content": {"statement": "Store opens at 10"}}))
        .await
        .expect(200, "p");
    admin.patch(t, &edited, Some(2), &json!({"aliases": ["opening hours"]})).await.expect(200, "p");
    ids.push(edited);
    // Another tenant's records stay out of acme's export.
    admin.create_ok(None, &fact("Default tenant note", &["public"])).await;
    ids
}

#[tokio::test]
async fn export_then_import_into_an_empty_store_reproduces_the_same_records() {
    let source = Admin::start();
    let ids = seed_varied_records(&source).await;
    let exported = source.export(Some("acme"), "").await;
    assert_eq!(exported.lines().count(), ids.len(), "{exported}");
    assert!(exported.ends_with('\n'));
    assert_eq!(export_ids(&exported), ids.iter().cloned().collect());
    assert!(!exported.contains("Default tenant note"));

    let target = Admin::start();
    let preview = target.import(Some("acme"), &exported, true).await;
    let report = preview.expect(200, "dry run");
    assert_eq!(report["counts"], json!({"new": ids.len(), "existing": 0, "invalid": 0}), "{}", preview.text);
    assert_eq!((report["dry_run"].as_bool(), report["applied"].as_bool()), (Some(true), Some(false)));
    assert!(report["import_id"].is_null());
    assert_eq!(target.export(Some("acme"), "").await, "", "a dry run writes nothing");

    let applied = target.import(Some("acme"), &exported, false).await;
    let report = applied.expect(201, "apply");
    assert!(report["import_id"].as_str().is_some_and(|id| !id.is_empty()), "{}", applied.text);
    assert_eq!(report["applied"], true);
    assert_eq!(target.export(Some("acme"), "").await, exported, "the two stores' exports differ");
    assert_eq!(target.export(None, "").await, "", "imported into the wrong tenant");
    for id in &ids {
        let a = source.get(Some("acme"), id).await.json;
        let b = target.get(Some("acme"), id).await;
        let b = b.expect(200, "get the imported record");
        assert_eq!(b["revision"], 1);
        for field in [
            "type",
            "schema_version",
            "scope",
            "valid_from",
            "valid_until",
            "priority",
            "aliases",
            "content",
            "status",
        ] {
            assert_eq!(a[field], b[field], "{id}.{field}");
        }
    }
    // An import and export over several pages of 500.
    let many: String =
        (0..1001).map(|i| format!("{}\n", fact(&format!("Bulk fact {i:04}"), &["team:bulk"]))).collect();
    let bulk = target.import(Some("bulk"), &many, false).await;
    assert_eq!(bulk.expect(201, "bulk import")["counts"]["new"], 1001);
    let bulk_export = target.export(Some("bulk"), "").await;
    assert_eq!(export_ids(&bulk_export).len(), 1001);
    assert_eq!(bulk_export.lines().count(), 1001);
    assert_eq!(target.list_all(Some("bulk"), "", 500).await.len(), 1001);
    let import_id = bulk.json["import_id"].as_str().unwrap();
    let undone = send(target.req(Method::POST, &format!("/imports/{import_id}/undo"), Some("bulk"))).await;
    assert_eq!(undone.expect(200, "undo the bulk import")["removed"], 1001);
    assert_eq!(target.export(Some("bulk"), "").await, "");

    let again = target.import(Some("acme"), &exported, true).await;
    let counts = &again.expect(200, "dry run again")["counts"];
    assert_eq!(counts, &json!({"new": 0, "existing": ids.len(), "invalid": 0}));
}

/// A restore into a new gateway: the export carries every record's vector and model id, and the
/// import stores them as they came, so the records are findable by meaning without embedding.
#[tokio::test]
async fn an_export_with_embeddings_restores_into_a_new_gateway_without_embedding_again() {
    let source = Admin::start();
    let ids = seed_varied_records(&source).await;
    let exported = source.export(Some("acme"), "?embeddings=true").await;
    let lines: Vec<Value> = exported.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), ids.len());
    let carried = lines.iter().filter(|l| l["embedding"]["vector"].is_string()).count();
    assert!(carried > 0, "no line carried a vector: {exported}");
    let plain = source.export(Some("acme"), "").await;
    assert!(!plain.contains("\"embedding\""), "{plain}");
    let refused = send(source.req(Method::GET, "/memories?embeddings=true", Some("acme"))).await;
    assert_eq!(refused.status, 400, "{}", refused.text);

    let target = Admin::start();
    let applied = target.import(Some("acme"), &exported, false).await;
    let report = applied.expect(201, "import with vectors");
    // A file this small has every carried vector checked against its text, and each is its own.
    assert_eq!(
        report["embeddings"],
        json!({"stored": carried, "re_embedded": 0, "sampled": carried, "matched": carried}),
        "{}",
        applied.text
    );
    assert_eq!(target.export(Some("acme"), "?embeddings=true").await, exported, "vectors changed in transit");
    assert_eq!(target.export(Some("acme"), "").await, plain);
}

#[tokio::test]
async fn a_patch_cannot_leave_two_live_records_on_one_topic() {
    // "One live record per topic": if a PATCH could give a second record the key and scope of a
    // first, the store would hold what no create can make, and its own export would not import.
    let source = Admin::start();
    let first = with(fact("Plan: gold", &["user:u-5"]), "key", json!("plan:u-5"));
    source.create_ok(None, &first).await;
    let second = source.create_ok(None, &fact("Plan: silver", &["user:u-5"])).await;
    let patched = source.patch(None, &second, None, &json!({"key": "plan:u-5"})).await;
    if patched.status == 200 {
        let live = source.list_all(None, "q=plan:u-5", 50).await;
        assert_eq!(live.len(), 1, "two live records share key plan:u-5 and scope user:u-5: {live:?}");
    } else {
        assert!(matches!(patched.status, 409 | 422), "{}", patched.text);
    }
    let exported = source.export(None, "").await;
    let target = Admin::start();
    let applied = target.import(None, &exported, false).await;
    assert_eq!(applied.status, 201, "an export does not import into an empty store: {}", applied.text);
    assert_eq!(target.export(None, "").await, exported);
}

#[tokio::test]
async fn import_previews_applies_and_undoes_exactly_what_it_added() {
    let admin = Admin::start();
    let t = Some("acme");
    let kept = admin.create_ok(t, &with(fact("Kept record", &["public"]), "id", json!("mem-kept"))).await;
    let topic = with(fact("Plan: gold", &["user:u-5"]), "key", json!("plan:u-5"));
    let keyed = admin.create_ok(t, &topic).await;
    let before = admin.export(t, "").await;

    let new_1 = with(fact("Imported one", &["public"]), "id", json!("mem-imp-1")).to_string();
    let new_2 = fact("Imported two, id generated", &["team:x"]).to_string();
    let same_id = with(fact("Different text, same id", &["public"]), "id", json!("mem-kept")).to_string();
    let same_topic = with(topic.clone(), "content", json!({"statement": "Plan: bronze"})).to_string();
    let same_content = fact("Kept record", &["public"]).to_string();
    let valid = [new_1.as_str(), &new_2, &same_id, &same_topic, &same_content].join("\n");
    let secret = "ghp_aB3dE5fG7hJ9kL1mN2pQ4rS6tU8vW0xY2zA4";
    let invalid_lines = [
        "{\"type\": \"fact\", ".to_owned(),
        json!({"type": "fact", "scope": ["public"], "content": {}}).to_string(),
        fact(&format!("token {secret}"), &["public"]).to_string(),
        new_1.clone(),
    ];
    let body = format!("{valid}\n\n{}\n", invalid_lines.join("\n"));

    let preview = admin.import(t, &body, true).await;
    let report = preview.expect(200, "dry run").clone();
    assert!(!preview.text.contains(secret), "the secret came back: {}", preview.text);
    assert_eq!(report["counts"], json!({"new": 2, "existing": 3, "invalid": 4}), "{}", preview.text);
    let lines = report["lines"].as_array().unwrap();
    let by_line: BTreeMap<u64, &Value> = lines.iter().map(|l| (l["line"].as_u64().unwrap(), l)).collect();
    assert_eq!(
        by_line.keys().copied().collect::<Vec<_>>(),
        [1, 2, 3, 4, 5, 7, 8, 9, 10],
        "blank line 6 skipped"
    );
    assert_eq!(
        (by_line[&1]["status"].as_str(), by_line[&1]["id"].as_str()),
        (Some("new"), Some("mem-imp-1"))
    );
    assert_eq!(by_line[&2]["status"], "new");
    for (line, id) in [(3, &kept), (4, &keyed), (5, &kept)] {
        assert_eq!(
            (by_line[&line]["status"].as_str(), by_line[&line]["id"].as_str()),
            (Some("existing"), Some(id.as_str())),
            "line {line}"
        );
    }
    for (line, path, kind) in [
        (7, "$", "invalid_json"),
        (8, "$.content.statement", "schema_violation"),
        (9, "$.content.statement", "secret"),
        (10, "$.id", "duplicate"),
    ] {
        assert_eq!(by_line[&line]["status"], "invalid", "line {line}");
        let problems = problems_of(&by_line[&line]["problems"]);
        assert!(
            problems.iter().any(|(p, k, m)| p == path && k == kind && !m.is_empty()),
            "line {line}: {problems:?}"
        );
    }
    assert_eq!(admin.export(t, "").await, before, "a dry run writes nothing");

    // An apply with invalid lines adds nothing and says why.
    let refused = admin.import(t, &body, false).await;
    refused.assert_error(422, "invalid_request_error", "apply with invalid lines");
    assert_eq!(refused.json["error"]["report"]["counts"]["invalid"], 4);
    assert!(!refused.text.contains(secret));
    assert_eq!(admin.export(t, "").await, before);

    let applied = admin.import(t, &valid, false).await;
    let report = applied.expect(201, "apply");
    assert_eq!(report["counts"], json!({"new": 2, "existing": 3, "invalid": 0}));
    let import_id = report["import_id"].as_str().unwrap().to_owned();
    let mut added: Vec<String> = report["lines"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["status"] == "new")
        .map(|l| l["id"].as_str().unwrap().to_owned())
        .collect();
    added.sort();
    assert_eq!(added.len(), 2, "{}", applied.text);
    assert!(added.contains(&"mem-imp-1".to_owned()));
    assert_eq!(admin.get(t, "mem-kept").await.json["revision"], 1, "an existing record was touched");
    assert_eq!(admin.get(t, &keyed).await.json["content"]["statement"], "Plan: gold");
    let imported = admin.history(t, "mem-imp-1").await;
    assert_eq!(imported.expect(200, "history")["data"][0]["action"], "import");

    // Later writes are not the import's.
    let later = admin.create_ok(t, &fact_with_id("mem-later", "Written after the import", &["public"])).await;
    admin.patch(t, "mem-kept", None, &json!({"priority": 2})).await.expect(200, "patch");

    // Undo is tenant-bounded, removes exactly the added records, and only once.
    let path = format!("/imports/{import_id}/undo");
    send(admin.req(Method::POST, &path, Some("other"))).await.assert_error(
        404,
        "not_found_error",
        "undo elsewhere",
    );
    assert_eq!(admin.get(t, "mem-imp-1").await.status, 200);
    let undone = send(admin.req(Method::POST, &path, t)).await;
    let body = undone.expect(200, "undo");
    assert_eq!(body["import_id"], import_id.as_str());
    assert_eq!(body["removed"], 2);
    let mut removed: Vec<String> =
        body["ids"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_owned()).collect();
    removed.sort();
    assert_eq!(removed, added);
    for id in &added {
        admin.get(t, id).await.assert_error(404, "not_found_error", "an undone record");
    }
    let left = ids_of(&admin.list_all(t, "", 50).await);
    assert_eq!(left, BTreeSet::from([kept.clone(), keyed.clone(), later.clone()]));
    assert_eq!(admin.get(t, "mem-kept").await.json["priority"], 2);
    let actions: Vec<Value> = admin.history(t, "mem-imp-1").await.json["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["action"].clone())
        .collect();
    assert_eq!(actions, [json!("import"), json!("undo_import")]);
    let twice = send(admin.req(Method::POST, &path, t)).await;
    assert_eq!(twice.expect(200, "undo twice")["removed"], 0);
    assert_eq!(ids_of(&admin.list_all(t, "", 50).await), left);
    send(admin.req(Method::POST, "/imports/imp-never-was/undo", t)).await.assert_error(
        404,
        "not_found_error",
        "unknown import",
    );
}

/// `GET /admin/v1/imports/{id}` says how far an import is from being findable by meaning, and
/// ends at `ready` once every record it added is embedded.
#[tokio::test]
async fn an_imports_progress_ends_ready_with_every_record_embedded() {
    let admin = Admin::start();
    let lines: String = (0..40)
        .map(|i| {
            format!(
                "{}\n",
                fact_with_id(
                    &format!("mem-bulk-{i}"),
                    &format!("Bulk note {i} about shelf {}", i * 7),
                    &["public"]
                )
            )
        })
        .collect();
    let applied = admin.import(Some("acme"), &lines, false).await.expect(201, "import").clone();
    let import_id = applied["import_id"].as_str().unwrap().to_owned();
    let path = format!("/imports/{import_id}");
    let first = send(admin.req(Method::GET, &path, Some("acme"))).await.expect(200, "progress").clone();
    assert_eq!((first["added"].as_i64(), first["present"].as_i64()), (Some(40), Some(40)), "{first}");
    assert!(["embedding", "ready"].contains(&first["state"].as_str().unwrap()), "{first}");
    let ready = eventually(Duration::from_secs(60), "the import to be embedded", || async {
        let progress =
            send(admin.req(Method::GET, &path, Some("acme"))).await.expect(200, "progress").clone();
        (progress["state"] == "ready").then_some(progress)
    })
    .await;
    assert_eq!(ready["embedded"], 40, "{ready}");
    // Other tenants do not see it; an unknown id is a 404.
    send(admin.req(Method::GET, &path, None)).await.expect(404, "another tenant's import");
    send(admin.req(Method::GET, "/imports/imp-nope", Some("acme"))).await.expect(404, "unknown import");
    // Undone, it says so.
    send(admin.req(Method::POST, &format!("{path}/undo"), Some("acme"))).await.expect(200, "undo");
    let undone = send(admin.req(Method::GET, &path, Some("acme"))).await.expect(200, "progress").clone();
    assert_eq!((undone["state"].as_str(), undone["present"].as_i64()), (Some("undone"), Some(0)), "{undone}");
}

/// An export of more records than the store reads at once is sent as the store reads it: no
/// length known in advance (chunked), every record once, in id order, the same bytes on every
/// call. Collected whole first, it went out with a `content-length`.
#[tokio::test]
async fn an_export_of_several_store_pages_is_streamed_with_every_record_once() {
    let admin = Admin::start();
    // Archived: nothing for the background embedder to do.
    let ids: Vec<String> = (0..1234).map(|i| format!("mem-page-{i:05}")).collect();
    let body: Vec<String> = ids
        .iter()
        .map(|id| {
            with(fact_with_id(id, &format!("note {id}"), &["public"]), "status", json!("archived"))
                .to_string()
        })
        .collect();
    admin.import(None, &body.join("\n"), false).await.expect(201, "import");

    let answer = send(admin.req(Method::GET, "/export", None)).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert!(answer.headers.get("content-length").is_none(), "{:?}", answer.headers);
    assert_eq!(answer.headers.get("transfer-encoding").and_then(|v| v.to_str().ok()), Some("chunked"));
    let exported: Vec<String> = answer
        .text
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap()["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(exported, ids, "every record once, in id order");
    assert!(answer.text.ends_with('\n'));
    assert_eq!(admin.export(None, "").await, answer.text, "two exports of the same records differ");
}
