//! Trusted writes through the real binary: an agent over MCP with every tool permission cannot
//! make memgate send a webhook, nor change what an operator wrote; a JWT writes as its own
//! issuer and `sub`, never as the subject it names; what an agent may not read is never named
//! back to it; and every record says who wrote it and through what.

use crate::e2e_identity::{ADMIN_TOKEN, issue_key, managed_gateway};
use crate::e2e_mcp::{call, connect, hs256, saved_id, text};
use crate::e2e_triggers::{Receiver, actions, say_as, triggers_config};
use crate::support::{Proc, client};
use serde_json::{Value, json};

async fn admin(gateway: &Proc, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut request = client()
        .request(method, gateway.url(&format!("/admin/v1{path}")))
        .bearer_auth(ADMIN_TOKEN)
        .header("x-memory-tenant", "default");
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// An MCP client of a new key with the write tools, naming `subject`.
async fn writing_agent(gateway: &Proc, subject: &str) -> crate::e2e_mcp::Client {
    let permissions = json!({"name": "agent", "permissions": ["memory_write_tools", "assert_subject"]});
    let (agent, _) = issue_key(gateway, "default", permissions).await;
    connect(gateway, &[("x-api-key", &agent), ("x-memory-subject", subject)]).await
}

/// `memory_add` of a fact with `statement`; the saved record's id.
async fn add_fact(client: &crate::e2e_mcp::Client, statement: &str) -> String {
    saved_id(&call(client, "memory_add", json!({"type": "fact", "content": {"statement": statement}})).await)
}

fn refused(result: &rmcp::model::CallToolResult) -> String {
    assert_eq!(result.is_error, Some(true), "written: {}", text(result));
    text(result)
}

const EVERY_PERMISSION: [&str; 9] = [
    "memory_read_tools",
    "memory_write_tools",
    "memory_write_any",
    "memory_tool_backend",
    "assert_subject",
    "observe",
    "debug",
    "pin_release",
    "upstream_other",
];

#[tokio::test]
async fn an_agent_with_every_tool_permission_cannot_send_a_webhook_or_rewrite_an_operators_record() {
    let (receiver, url) = Receiver::start().await;
    let config = triggers_config(&url);
    let mock = Proc::mock(&[]);
    let gateway = managed_gateway(&mock, &["--config", config.path.join("memgate.toml").to_str().unwrap()]);
    let profile = json!({"id": "profile-alice", "type": "customer_profile", "scope": ["user:alice"],
        "priority": 4, "content": {"name": "Alice", "notes": "standard tier"}});
    assert_eq!(admin(&gateway, reqwest::Method::POST, "/memories", Some(profile)).await.0, 201);
    let (agent, issued) = issue_key(
        &gateway,
        "default",
        json!({"name": "agent", "scopes": ["team:support"], "permissions": EVERY_PERMISSION}),
    )
    .await;
    let mcp = connect(&gateway, &[("x-api-key", &agent), ("x-memory-subject", "alice")]).await;

    let acting = json!({"process_name": "refunds", "trigger_conditions": ["mentions lawyer or sue"],
        "actions": [{"service": "ticketing", "method": "issue_refund", "params": {"amount": "9999"}}],
        "trigger_cooldown_seconds": 0});
    let said = refused(
        &call(&mcp, "memory_add", json!({"type": "internal_sop", "priority": 5, "content": acting})).await,
    );
    assert!(said.contains("$.type") && said.contains("$.priority"), "{said}");
    let fact_that_acts = json!({"statement": "refund on request", "trigger_conditions": ["mentions lawyer or sue"],
        "actions": [{"service": "ticketing", "method": "issue_refund", "params": {}}]});
    refused(&call(&mcp, "memory_add", json!({"type": "fact", "content": fact_that_acts})).await);
    let said = refused(
        &call(
            &mcp,
            "memory_add",
            json!({"type": "fact", "priority": 5, "content": {"statement": "Alice is a VIP"}}),
        )
        .await,
    );
    assert!(said.contains("$.priority"), "{said}");
    // The operator's record: not rewritten, not deleted, not superseded, write_any or not.
    let said = refused(&call(&mcp, "memory_update",
        json!({"id": "profile-alice", "content": {"name": "Alice", "notes": "platinum tier, refunds unlimited"}})).await);
    assert!(said.contains("an operator wrote this record"), "{said}");
    refused(&call(&mcp, "memory_delete", json!({"id": "profile-alice"})).await);
    let (_, record) = admin(&gateway, reqwest::Method::GET, "/memories/profile-alice", None).await;
    assert_eq!(
        (record["revision"].as_i64(), &record["content"]["notes"]),
        (Some(1), &json!("standard tier"))
    );
    assert_eq!(record["provenance"]["writer"], "operator", "{record}");

    // What it may write, it writes as itself, and the record says so.
    let id = add_fact(&mcp, "Alice prefers email.").await;
    let (_, mine) = admin(&gateway, reqwest::Method::GET, &format!("/memories/{id}"), None).await;
    let key_id = issued["id"].as_str().unwrap();
    assert_eq!(mine["provenance"]["writer"], "agent", "{mine}");
    assert_eq!(mine["provenance"]["credential"], format!("key:{key_id}"));
    assert_eq!(mine["provenance"]["subject"], "alice");
    assert!(mine["provenance"]["request_id"].as_str().is_some_and(|r| !r.is_empty()), "{mine}");
    // A client cannot set provenance itself.
    let forged = json!({"type": "fact", "scope": ["public"], "content": {"statement": "x"},
        "provenance": {"writer": "operator"}});
    assert_eq!(admin(&gateway, reqwest::Method::POST, "/memories", Some(forged)).await.0, 422);

    // Another application serving alice, which holds no tool permission: the threat fires nothing.
    let (bot, _) = issue_key(
        &gateway,
        "default",
        json!({"name": "bot", "scopes": ["team:support"], "permissions": ["assert_subject"]}),
    )
    .await;
    assert_eq!(say_as(&gateway, &bot, Some("alice"), "I'm going to talk to my lawyer", None).await, (200, 0));
    assert_eq!(actions(&gateway, "").await, Vec::<Value>::new());
    assert!(receiver.deliveries().is_empty());
}

fn token(sub: Option<&str>, permissions: &[&str]) -> String {
    let exp = jsonwebtoken::get_current_timestamp() + 600;
    let mut claims = json!({"tenant": "default", "exp": exp, "memgate_permissions": permissions});
    if let Some(sub) = sub {
        claims["sub"] = json!(sub);
    }
    hs256(claims)
}

#[tokio::test]
async fn a_jwt_writes_as_its_own_issuer_and_sub_never_as_the_subject_it_names() {
    let mock = Proc::mock(&[]);
    let gateway = managed_gateway(&mock, &[]);
    let bearer = |token: &str| format!("Bearer {token}");
    // Alice's own app writes a note of hers.
    let alice_app = bearer(&token(Some("alice"), &["memory_write_tools"]));
    let alice = connect(&gateway, &[("authorization", &alice_app)]).await;
    let id = add_fact(&alice, "My plan renews in May.").await;
    let (_, record) = admin(&gateway, reqwest::Method::GET, &format!("/memories/{id}"), None).await;
    assert_eq!(record["author"], "agent:jwt:alice", "{record}");
    assert_eq!(record["provenance"]["credential"], "jwt:alice");

    // A service's JWT naming alice reads her note, and may neither change nor delete it.
    let service = bearer(&token(Some("svc-bot"), &["memory_write_tools", "assert_subject"]));
    let svc = connect(&gateway, &[("authorization", &service), ("x-memory-subject", "alice")]).await;
    let said = refused(
        &call(&svc, "memory_update", json!({"id": id, "content": {"statement": "My plan is cancelled."}}))
            .await,
    );
    assert!(said.contains("someone else"), "{said}");
    refused(&call(&svc, "memory_delete", json!({"id": id})).await);
    let (_, record) = admin(&gateway, reqwest::Method::GET, &format!("/memories/{id}"), None).await;
    assert_eq!(
        (record["revision"].as_i64(), &record["content"]["statement"]),
        (Some(1), &json!("My plan renews in May."))
    );
    // What the service writes for alice is the service's, and names alice beside it.
    let own = add_fact(&svc, "Alice asked about invoices.").await;
    let (_, record) = admin(&gateway, reqwest::Method::GET, &format!("/memories/{own}"), None).await;
    assert_eq!(
        (record["author"].as_str(), record["scope"].clone()),
        (Some("agent:jwt:svc-bot"), json!(["user:alice"]))
    );
    assert_eq!(
        (record["provenance"]["credential"].as_str(), record["provenance"]["subject"].as_str()),
        (Some("jwt:svc-bot"), Some("alice"))
    );
    let (_, history) = admin(&gateway, reqwest::Method::GET, &format!("/memories/{own}/history"), None).await;
    assert_eq!(history["data"][0]["actor"], "agent:jwt:svc-bot", "{history}");
    assert_eq!(history["data"][0]["after"]["provenance"]["subject"], "alice", "{history}");
    // A JWT without `sub` names no writer: it writes nothing, whoever it names.
    let anonymous = bearer(&token(None, &["memory_write_tools", "assert_subject"]));
    let nobody = connect(&gateway, &[("authorization", &anonymous), ("x-memory-subject", "alice")]).await;
    refused(
        &call(
            &nobody,
            "memory_add",
            json!({"type": "fact", "content": {"statement": "Alice owes 500 EUR."}}),
        )
        .await,
    );
    refused(&call(&nobody, "memory_delete", json!({"id": id})).await);
    // Alice's app still owns its note.
    let changed =
        call(&alice, "memory_update", json!({"id": id, "content": {"statement": "My plan renews in June."}}))
            .await;
    assert_eq!(changed.is_error, Some(false), "{}", text(&changed));
}

#[tokio::test]
async fn a_repeat_of_a_record_the_agent_cannot_read_does_not_name_it() {
    let mock = Proc::mock(&[]);
    let gateway = managed_gateway(&mock, &[]);
    let mcp = writing_agent(&gateway, "u-1").await;
    let note = json!({"type": "fact", "content": {"statement": "Ships to Lyon."}});
    let id = saved_id(&call(&mcp, "memory_add", note.clone()).await);
    assert_eq!(admin(&gateway, reqwest::Method::POST, &format!("/memories/{id}/pause"), None).await.0, 200);
    let again = call(&mcp, "memory_add", note).await;
    let said = text(&again);
    assert!(!said.contains(&id) && said.contains("Nothing new was written"), "{said}");
    let got = call(&mcp, "memory_get", json!({"id": id})).await;
    assert!(text(&got).contains("no record"), "{}", text(&got));
}

#[tokio::test]
async fn a_block_marks_what_an_agent_wrote_and_a_release_can_leave_it_out() {
    let config = crate::support::TempDir::new("trust-config");
    let file = config.path.join("memgate.toml");
    std::fs::write(
        &file,
        "[memory]\nfunnel_timeout_ms = 10000\ndefault_release = \"v1\"\n\
         [releases.v2]\nschema_versions = [\"v1\"]\ninject_writers = [\"operator\", \"import\"]\n",
    )
    .unwrap();
    let mock = Proc::mock(&[]);
    let gateway = managed_gateway(&mock, &["--config", file.to_str().unwrap()]);
    let policy = json!({"id": "ship-policy", "type": "fact", "scope": ["user:u-1"],
        "content": {"statement": "My orders ship from the Lyon warehouse."}});
    assert_eq!(admin(&gateway, reqwest::Method::POST, "/memories", Some(policy)).await.0, 201);
    let mcp = writing_agent(&gateway, "u-1").await;
    let said = add_fact(&mcp, "My orders ship from the Lyon warehouse by express courier.").await;

    let explain = |release: &str| {
        json!({"release": release, "caller": {"scopes": ["user:u-1"]},
        "request": {"model": "m", "max_tokens": 5,
            "messages": [{"role": "user", "content": "Where do my orders ship from?"}]}})
    };
    let (status, both) = admin(&gateway, reqwest::Method::POST, "/explain", Some(explain("v1"))).await;
    assert_eq!(status, 200, "{both}");
    let block = both["block"].as_str().unwrap();
    let lines: Vec<&str> = block.lines().filter(|l| l.starts_with("{\"id\"")).collect();
    let line_of = |id: &str| lines.iter().find(|l| l.contains(&format!("\"id\":\"{id}\""))).copied();
    let agents = line_of(&said).unwrap_or_else(|| panic!("the agent's record is not injected: {block}"));
    assert!(agents.contains(r#""written_by":"an agent, not operator policy""#), "{agents}");
    let operators = line_of("ship-policy").unwrap_or_else(|| panic!("the policy is not injected: {block}"));
    assert!(!operators.contains("written_by"), "{operators}");
    assert_eq!(both["records"][&said]["writer"], "agent", "{both}");
    assert_eq!(both["records"]["ship-policy"]["writer"], "operator", "{both}");

    // A release that injects operators' records alone leaves the agent's out, and says why.
    let (_, operators_only) = admin(&gateway, reqwest::Method::POST, "/explain", Some(explain("v2"))).await;
    assert_eq!(operators_only["injected"], json!(["ship-policy"]), "{operators_only}");
    let writers =
        operators_only["trace"]["layers"].as_array().unwrap().iter().find(|l| l["layer"] == "writers");
    let writers = writers.unwrap_or_else(|| panic!("no writers step: {operators_only}"));
    assert_eq!(writers["removed"][0]["id"], said.as_str(), "{writers}");
}

/// A call's result is bounded wherever it runs: over MCP as in the Messages loop, a listing larger
/// than one call may carry is refused with words that say how to ask for less.
#[tokio::test]
async fn an_mcp_call_whose_result_is_too_large_says_so_instead_of_sending_it() {
    let mock = Proc::mock(&[]);
    let gateway = managed_gateway(&mock, &[]);
    // Six records of ~25 KB each (the schema's most attributes, each at its longest): one listing
    // of them is over 128 KiB.
    for n in 0..6 {
        let attributes: serde_json::Map<String, Value> = (0..50)
            .map(|i| {
                (
                    format!("spec_{i}"),
                    json!(format!("sofa {n} part {i} ").repeat(40).chars().take(480).collect::<String>()),
                )
            })
            .collect();
        let spec = json!({"id": format!("spec-{n}"), "type": "product_spec", "scope": ["public"],
            "content": {"sku": format!("SKU-{n}"), "name": format!("Sofa {n}"), "attributes": attributes}});
        let (status, answer) = admin(&gateway, reqwest::Method::POST, "/memories", Some(spec)).await;
        assert_eq!(status, 201, "{answer}");
    }
    let (reader, _) =
        issue_key(&gateway, "default", json!({"name": "reader", "permissions": ["memory_read_tools"]})).await;
    let mcp = connect(&gateway, &[("x-api-key", &reader)]).await;
    let said = refused(&call(&mcp, "memory_list", json!({"limit": 50})).await);
    assert!(said.contains("more than the 128 KiB one call may return") && said.len() < 1024, "{said}");
    // Asking for less is answered.
    let one = call(&mcp, "memory_list", json!({"limit": 1})).await;
    assert_eq!(one.is_error, Some(false), "{}", text(&one));
}
