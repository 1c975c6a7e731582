//! Tenant isolation, as a property over random interleavings.

use super::*;

/// xorshift64: a fixed seed gives the same run every time.
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

#[derive(Debug, Clone, PartialEq)]
struct ModelRecord {
    statement: String,
    scope: String,
    revision: i64,
    status: String,
}

/// What one tenant should see: its live records and, per id, the scope each history entry named.
#[derive(Default)]
struct TenantModel {
    records: BTreeMap<String, ModelRecord>,
    history: BTreeMap<String, Vec<String>>,
}

fn observed(record: &Value, tenant: &str, what: &str) -> ModelRecord {
    assert_eq!(record["tenant"], tenant, "{what}: another tenant's record: {record}");
    ModelRecord {
        statement: record["content"]["statement"].as_str().unwrap().to_owned(),
        scope: record["scope"][0].as_str().unwrap().to_owned(),
        revision: record["revision"].as_i64().unwrap(),
        status: record["status"].as_str().unwrap().to_owned(),
    }
}

const TENANTS: [Option<&str>; 3] = [None, Some("t-alpha"), Some("t-beta")];
const SHARED_IDS: [&str; 4] = ["mem-shared-1", "mem-shared-2", "mem-shared-3", "mem-shared-4"];

fn label(tenant: Option<&str>) -> &str {
    tenant.unwrap_or("default")
}

/// Everything `tenant` can see agrees with its model: list, export, get and history.
async fn check_tenant(admin: &Admin, tenant: Option<&str>, model: &TenantModel, what: &str) {
    let name = label(tenant);
    let listed: BTreeMap<String, ModelRecord> = admin
        .list_all(tenant, "", 3)
        .await
        .iter()
        .map(|r| (r["id"].as_str().unwrap().to_owned(), observed(r, name, what)))
        .collect();
    assert_eq!(listed, model.records, "{what}: list of {name}");
    let exported: BTreeMap<String, String> = admin
        .export(tenant, "")
        .await
        .lines()
        .map(|line| {
            let r: Value = serde_json::from_str(line).unwrap();
            (r["id"].as_str().unwrap().to_owned(), r["content"]["statement"].as_str().unwrap().to_owned())
        })
        .collect();
    let want: BTreeMap<String, String> =
        model.records.iter().map(|(id, r)| (id.clone(), r.statement.clone())).collect();
    assert_eq!(exported, want, "{what}: export of {name}");
    for id in SHARED_IDS {
        check_get(admin, tenant, model, id, what).await;
        check_history(admin, tenant, model, id, what).await;
    }
}

async fn check_get(admin: &Admin, tenant: Option<&str>, model: &TenantModel, id: &str, what: &str) {
    let answer = admin.get(tenant, id).await;
    match model.records.get(id) {
        Some(want) => {
            assert_eq!(&observed(answer.expect(200, what), label(tenant), what), want, "{what}: get {id}")
        }
        None => answer.assert_error(404, "not_found_error", &format!("{what}: get {id}")),
    }
}

async fn check_history(admin: &Admin, tenant: Option<&str>, model: &TenantModel, id: &str, what: &str) {
    let answer = admin.history(tenant, id).await;
    let want = model.history.get(id).map_or(0, Vec::len);
    if want == 0 && !model.records.contains_key(id) {
        answer.assert_error(404, "not_found_error", &format!("{what}: history of {id}"));
        return;
    }
    let data = answer.expect(200, what)["data"].as_array().unwrap();
    assert_eq!(data.len(), want, "{what}: history of {id}: {}", answer.text);
    for change in data {
        for side in ["before", "after"] {
            if !change[side].is_null() {
                observed(&change[side], label(tenant), what);
                let statement = change[side]["content"]["statement"].as_str().unwrap();
                assert!(
                    statement.starts_with(label(tenant)),
                    "{what}: {statement} in {}'s history",
                    label(tenant)
                );
            }
        }
    }
}

#[tokio::test]
async fn tenants_never_read_or_change_each_others_records() {
    // Some 2,000 requests in a few seconds: over the admin API's default rate limit.
    let admin = Admin::start_with_config("[admin]\nrate_limit_per_minute = 1000000\n");
    let scopes = ["user:u-1", "user:u-2", "public"];
    let mut models: Vec<TenantModel> = TENANTS.iter().map(|_| TenantModel::default()).collect();
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    for step in 0..400 {
        let t = rng.below(TENANTS.len());
        let tenant = TENANTS[t];
        let name = label(tenant);
        let id = SHARED_IDS[rng.below(SHARED_IDS.len())];
        let what = format!("step {step}: {name} on {id}");
        let model = &mut models[t];
        let statement = format!("{name} wrote #{step}");
        match rng.below(20) {
            0..=4 => {
                let scope = scopes[rng.below(scopes.len())];
                let answer = admin.create(tenant, &with(fact(&statement, &[scope]), "id", json!(id))).await;
                if model.records.contains_key(id) {
                    answer.assert_error(409, "invalid_request_error", &what);
                } else {
                    answer.expect(201, &what);
                    let record = ModelRecord {
                        statement,
                        scope: scope.to_owned(),
                        revision: 1,
                        status: "active".into(),
                    };
                    assert_eq!(observed(&answer.json["record"], name, &what), record);
                    model.records.insert(id.to_owned(), record);
                    model.history.entry(id.to_owned()).or_default().push(scope.to_owned());
                }
            }
            5..=7 => {
                let revision = model.records.get(id).map_or(1, |r| r.revision);
                let answer = admin
                    .patch(tenant, id, Some(revision), &json!({"content": {"statement": statement}}))
                    .await;
                match model.records.get_mut(id) {
                    Some(record) => {
                        record.statement = statement;
                        record.revision += 1;
                        assert_eq!(&observed(answer.expect(200, &what), name, &what), record);
                        model.history.entry(id.to_owned()).or_default().push(record.scope.clone());
                    }
                    None => answer.assert_error(404, "not_found_error", &what),
                }
            }
            8..=9 => {
                let answer = send(admin.req(Method::DELETE, &format!("/memories/{id}"), tenant)).await;
                match model.records.remove(id) {
                    Some(record) => {
                        answer.expect(200, &what);
                        model.history.entry(id.to_owned()).or_default().push(record.scope);
                    }
                    None => answer.assert_error(404, "not_found_error", &what),
                }
            }
            10..=11 => {
                let (action, status) =
                    if rng.below(2) == 0 { ("pause", "paused") } else { ("activate", "active") };
                let answer = admin.action(tenant, id, action).await;
                match model.records.get_mut(id) {
                    Some(record) => {
                        if record.status != status {
                            record.status = status.to_owned();
                            record.revision += 1;
                            model.history.entry(id.to_owned()).or_default().push(record.scope.clone());
                        }
                        assert_eq!(&observed(answer.expect(200, &what), name, &what), record);
                    }
                    None => answer.assert_error(404, "not_found_error", &what),
                }
            }
            12..=13 => check_get(&admin, tenant, model, id, &what).await,
            14..=15 => check_history(&admin, tenant, model, id, &what).await,
            16..=17 => check_tenant(&admin, tenant, model, &what).await,
            _ => {
                let scope = scopes[rng.below(scopes.len())];
                let answer =
                    send(admin.req(Method::POST, "/memories/forget", tenant).json(&json!({"scope": scope})))
                        .await;
                let erased: Vec<String> = model
                    .records
                    .iter()
                    .filter(|(_, r)| r.scope == scope)
                    .map(|(id, _)| id.clone())
                    .collect();
                let before: usize = model.history.values().map(Vec::len).sum();
                for id in &erased {
                    model.records.remove(id);
                    model.history.remove(id);
                }
                for entries in model.history.values_mut() {
                    entries.retain(|s| s != scope);
                }
                let after: usize = model.history.values().map(Vec::len).sum();
                let body = answer.expect(200, &what);
                assert_eq!(body["records_erased"], erased.len(), "{what}: forget {scope}");
                assert_eq!(body["changes_erased"], before - after, "{what}: forget {scope}");
            }
        }
        // Now and then, make sure the others were left alone.
        if step % 25 == 0 {
            for (other, model) in TENANTS.iter().zip(&models) {
                check_tenant(&admin, *other, model, &format!("{what}, checking {}", label(*other))).await;
            }
        }
    }
    for (tenant, model) in TENANTS.iter().zip(&models) {
        check_tenant(&admin, *tenant, model, "at the end").await;
        assert!(
            !model.records.is_empty() || !model.history.is_empty(),
            "the run never wrote to {}",
            label(*tenant)
        );
    }
}
