//! Findings 9 and 10, with real replicas on one PostgreSQL: a revoked key stops working on every
//! replica at once (the revocation travels over the change fan-out), and a replica whose clock
//! runs behind cannot keep a deleted record alive on the others (sync follows a sequence the
//! database assigns, not anyone's clock).

use super::error_of;
use crate::e2e_identity::{ADMIN_TOKEN, UPSTREAM_KEY, issue_key};
use crate::support::{Proc, TempDir, TestDb, client, eventually, messages_body};
use serde_json::{Value, json};
use std::time::Duration;

/// A replica that hears of changes only through Redis: its poll runs every ten minutes.
fn redis_replica(mock: &Proc, db: &TestDb, config: &TempDir, extra_env: &[(&str, &str)]) -> Proc {
    let mut env = vec![
        ("MEMGATE_ADMIN_TOKEN", ADMIN_TOKEN),
        ("ANTHROPIC_API_KEY", UPSTREAM_KEY),
        ("MEMGATE_REDIS_URL", "redis://127.0.0.1:6379"),
    ];
    env.extend_from_slice(extra_env);
    Proc::gateway(
        mock,
        &[
            "--auth-mode",
            "managed",
            "--database-url",
            db.url.as_str(),
            "--config",
            config.path.join("memgate.toml").to_str().unwrap(),
        ],
        &env,
    )
}

fn fanout_config(poll_ms: u64) -> TempDir {
    let dir = TempDir::new("security-fanout");
    let prefix = format!("memgate-test-{}", uuid::Uuid::new_v4().simple());
    let text = format!(
        "[database]\npoll_interval_ms = {poll_ms}\n[memory]\nfunnel_timeout_ms = 10000\ndefault_release = \"v1\"\n[redis]\nkey_prefix = \"{prefix}\"\n"
    );
    std::fs::write(dir.path.join("memgate.toml"), text).unwrap();
    dir
}

async fn ask(gateway: &Proc, key: &str) -> reqwest::Response {
    client()
        .post(gateway.url("/v1/messages"))
        .header("x-api-key", key)
        .json(&messages_body("claude-test", false))
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_revoked_key_stops_on_every_replica_within_a_second() {
    let db = TestDb::postgres().await;
    let mock = Proc::mock(&[]);
    let config = fanout_config(600_000);
    let a = redis_replica(&mock, &db, &config, &[]);
    let b = redis_replica(&mock, &db, &config, &[]);
    let (key, issued) = issue_key(&a, "default", json!({"name": "bot"})).await;
    // B knows the key and caches it.
    assert_eq!(ask(&b, &key).await.status(), 200);
    let id = issued["id"].as_str().unwrap();
    let revoked = client()
        .delete(a.url(&format!("/admin/v1/keys/{id}")))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), 200);
    eventually(Duration::from_secs(1), "replica B to refuse the revoked key", || async {
        (ask(&b, &key).await.status() == 401).then_some(())
    })
    .await;
    let (status, error) = error_of(ask(&a, &key).await).await;
    assert_eq!((status, error["type"].as_str()), (401, Some("authentication_error")));
}

async fn injected(gateway: &Proc, key: &str) -> Vec<String> {
    let body = json!({"model": "claude-test", "max_tokens": 8,
        "messages": [{"role": "user", "content": "Tell me about order ORD-7781 please"}]});
    let response = client()
        .post(gateway.url("/v1/messages"))
        .header("x-api-key", key)
        .header("x-memory-debug", "1")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let trace: Value = serde_json::from_str(response.headers()["x-memory-trace"].to_str().unwrap()).unwrap();
    trace["injected"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_owned()).collect()
}

/// Replica B's clock runs 30 s behind (libfaketime). Before, the tombstone of its delete carried
/// B's time, and replica A — looking for changes after its own "now minus 5 s" — never saw it:
/// the deleted record stayed in A's index for good.
#[tokio::test]
async fn a_replica_with_a_slow_clock_cannot_keep_a_deleted_record_alive() {
    let faketime = std::path::Path::new("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1");
    assert!(faketime.exists(), "libfaketime is needed (apt-get install faketime; scripts/test installs it)");
    let db = TestDb::postgres().await;
    let mock = Proc::mock(&[]);
    let config = fanout_config(1000);
    let a = redis_replica(&mock, &db, &config, &[]);
    let b = redis_replica(
        &mock,
        &db,
        &config,
        &[
            ("LD_PRELOAD", faketime.to_str().unwrap()),
            ("FAKETIME", "-30s"),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
            ("FAKETIME_DONT_RESET", "1"),
        ],
    );
    let (key, _) = issue_key(&a, "default", json!({"name": "bot", "permissions": ["debug"]})).await;
    let record = json!({"id": "order-7781", "type": "fact", "scope": ["public"], "key": "order:ORD-7781",
        "aliases": ["ORD-7781"], "valid_from": "2024-01-01T00:00:00Z", "content": {"statement": "Order ORD-7781 ships on Monday."}});
    let created = client()
        .post(a.url("/admin/v1/memories"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&record)
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    assert_eq!(injected(&a, &key).await, ["order-7781"]);
    eventually(Duration::from_secs(5), "replica B to take in the record", || async {
        (injected(&b, &key).await == ["order-7781"]).then_some(())
    })
    .await;

    let deleted = client()
        .delete(b.url("/admin/v1/memories/order-7781"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 200);
    eventually(Duration::from_secs(5), "replica A to drop the record B deleted", || async {
        injected(&a, &key).await.is_empty().then_some(())
    })
    .await;
}

async fn explain_in(gateway: &Proc, tenant: &str, question: &str) {
    let body = json!({"request": {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": question}]},
        "caller": {"scopes": ["public"]}});
    let answer = client()
        .post(gateway.url("/admin/v1/explain"))
        .bearer_auth(ADMIN_TOKEN)
        .header("x-memory-tenant", tenant)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
}

async fn query_embeddings(gateway: &Proc, source: &str) -> f64 {
    let text = client().get(gateway.url("/metrics")).send().await.unwrap().text().await.unwrap();
    let line = format!("memgate_query_embeddings_total{{source=\"{source}\"}} ");
    text.lines().find_map(|l| l.strip_prefix(&line)).map_or(0.0, |v| v.parse().unwrap())
}

/// A replica's offers of query vectors to the others: written, failed, no_connection.
async fn shared_puts(gateway: &Proc) -> [f64; 3] {
    let text = client().get(gateway.url("/metrics")).send().await.unwrap().text().await.unwrap();
    ["written", "failed", "no_connection"].map(|outcome| {
        let line = format!("memgate_shared_query_embedding_puts_total{{outcome=\"{outcome}\"}} ");
        text.lines().find_map(|l| l.strip_prefix(&line)).map_or(0.0, |v| v.parse().unwrap())
    })
}

/// The gateway's offers once every model-made query vector's offer is over, and at least one
/// more than `before` (the question just asked).
async fn offers_over(gateway: &Proc, before: [f64; 3]) -> [f64; 3] {
    eventually(Duration::from_secs(10), "the offer to be over", || async {
        let puts = shared_puts(gateway).await;
        let over = puts.iter().sum::<f64>();
        (over > before.iter().sum::<f64>() && over == query_embeddings(gateway, "model").await)
            .then_some(puts)
    })
    .await
}

/// The query embeddings shared through Redis were keyed by a bare SHA-256 of the
/// text — readable by anyone who can guess a question, and shared across tenants, so one tenant
/// could learn (by a cache hit's timing) what another asked. Keys are now an HMAC of the model,
/// the tenant and the text under the deployment's secret.
#[tokio::test]
async fn shared_query_embeddings_are_per_tenant_and_name_no_question() {
    use sha2::{Digest, Sha256};
    let db = TestDb::postgres().await;
    let mock = Proc::mock(&[]);
    let config = fanout_config(600_000);
    let a = redis_replica(&mock, &db, &config, &[]);
    let b = redis_replica(&mock, &db, &config, &[]);
    // With no record to compare a question with, it is not embedded at all: one per tenant.
    for tenant in ["acme", "globex"] {
        let record = json!({"type": "fact", "scope": ["public"], "content": {"statement": "Orders to Norway ship from Oslo."}});
        let created = client()
            .post(a.url("/admin/v1/memories"))
            .bearer_auth(ADMIN_TOKEN)
            .header("x-memory-tenant", tenant)
            .json(&record)
            .send()
            .await
            .unwrap();
        assert_eq!(created.status(), 201);
    }
    // B has both tenants' records in its index once an explain there finds them (with another
    // question, so that these runs leave the one under test uncached).
    for tenant in ["acme", "globex"] {
        eventually(Duration::from_secs(10), "B to have the tenant's record", || async {
            let body = json!({"request": {"model": "m", "max_tokens": 5,
                "messages": [{"role": "user", "content": "Orders to Norway ship from Oslo."}]}, "caller": {}});
            let answer: Value = client()
                .post(b.url("/admin/v1/explain"))
                .bearer_auth(ADMIN_TOKEN)
                .header("x-memory-tenant", tenant)
                .json(&body)
                .send()
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            (answer["injected"].as_array().map(Vec::len) == Some(1)).then_some(())
        })
        .await;
    }
    let prefix = std::fs::read_to_string(config.path.join("memgate.toml")).unwrap();
    let prefix = prefix.split("key_prefix = \"").nth(1).unwrap().split('"').next().unwrap().to_owned();
    let mut redis = redis::Client::open("redis://127.0.0.1:6379")
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let keys = |redis: &redis::aio::MultiplexedConnection| {
        let mut redis = redis.clone();
        let pattern = format!("{prefix}:qvec:*");
        async move { redis::cmd("KEYS").arg(&pattern).query_async::<Vec<String>>(&mut redis).await.unwrap() }
    };
    // B's own offers (the setup's questions, one per tenant) are over before the snapshot, or
    // one landing late would count as the question's.
    eventually(Duration::from_secs(10), "B's offers to be over", || async {
        let puts = shared_puts(&b).await;
        (puts.iter().sum::<f64>() == query_embeddings(&b, "model").await).then_some(())
    })
    .await;
    // A offers a vector only once its Redis connection is up: wait for one of its offers to be
    // written (each warm-up text new, so that each runs the model and offers again).
    for attempt in 0.. {
        assert!(attempt < 100, "A's offers never reached Redis: {:?}", shared_puts(&a).await);
        let before = shared_puts(&a).await;
        explain_in(&a, "acme", &format!("Do orders to Norway ship on day {attempt}?")).await;
        let after = offers_over(&a, before).await;
        if after[0] > before[0] {
            break;
        }
    }
    let question = "Which warehouse ships my order to Norway?";
    let earlier = keys(&redis).await;
    let before = shared_puts(&a).await;
    explain_in(&a, "acme", question).await;
    assert_eq!(offers_over(&a, before).await[0], before[0] + 1.0, "A shared the question's vector");
    let new: Vec<String> = keys(&redis).await.into_iter().filter(|k| !earlier.contains(k)).collect();
    assert_eq!(new.len(), 1, "one question, one shared vector: {new:?}");
    let digest: String = Sha256::digest(question.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    assert!(
        !new[0].contains(&digest) && !new[0].contains("Norway") && !new[0].contains("acme"),
        "{}",
        new[0]
    );

    // Another tenant asking the same words runs its own model: nothing crosses tenants.
    let before = query_embeddings(&b, "model").await;
    explain_in(&b, "globex", question).await;
    assert_eq!(query_embeddings(&b, "shared_cache").await, 0.0, "globex got acme's cached question");
    assert_eq!(query_embeddings(&b, "model").await, before + 1.0);
    // The same tenant on another replica does get it from Redis.
    explain_in(&b, "acme", question).await;
    assert_eq!(query_embeddings(&b, "shared_cache").await, 1.0);
    let all: Vec<String> =
        redis::cmd("KEYS").arg(format!("{prefix}:*")).query_async(&mut redis).await.unwrap();
    let _: () = redis::cmd("DEL").arg(all).query_async(&mut redis).await.unwrap();
}
