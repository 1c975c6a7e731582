//! Several memgate replicas on loopback sharing one PostgreSQL: what one replica writes, the
//! others serve within about a second — records (their in-memory indexes) and rollout alike.

use crate::e2e_identity::{ADMIN_TOKEN, UPSTREAM_KEY};
use crate::support::{Proc, TempDir, TestDb, client, eventually};
use serde_json::{Value, json};
use std::time::Duration;

fn replica(mock: &Proc, db: &TestDb) -> Proc {
    Proc::gateway(
        mock,
        &["--database-url", db.url.as_str()],
        &[("MEMGATE_ADMIN_TOKEN", ADMIN_TOKEN), ("ANTHROPIC_API_KEY", UPSTREAM_KEY)],
    )
}

/// An admin call to one replica; its status.
async fn admin(gateway: &Proc, method: reqwest::Method, path: &str, body: Option<&Value>) -> u16 {
    let mut request =
        client().request(method, gateway.url(&format!("/admin/v1{path}"))).bearer_auth(ADMIN_TOKEN);
    if let Some(body) = body {
        request = request.json(body);
    }
    request.send().await.unwrap().status().as_u16()
}

async fn explain_ids(gateway: &Proc, question: &str) -> Vec<String> {
    let body = json!({
        "request": {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": question}]},
        "caller": {"scopes": ["team:support"]},
    });
    let answer: Value = client()
        .post(gateway.url("/admin/v1/explain"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    answer["injected"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_owned()).collect()
}

#[tokio::test]
async fn replicas_on_one_postgres_serve_each_others_writes_within_seconds() {
    let db = TestDb::postgres().await;
    let mock = Proc::mock(&[]);
    let a = replica(&mock, &db);
    let b = replica(&mock, &db);

    let record = json!({"id": "sop-refund", "type": "fact", "scope": ["team:support"], "key": "sop:refund-window",
        "content": {"statement": "Refunds are possible within 30 days of delivery for order ORD-2024-0615."}});
    assert_eq!(admin(&a, reqwest::Method::POST, "/memories", Some(&record)).await, 201);
    let question = "Can I still get a refund for ORD-2024-0615?";
    assert_eq!(explain_ids(&a, question).await, ["sop-refund"]);
    eventually(Duration::from_secs(5), "replica B to serve A's new record", || async {
        (explain_ids(&b, question).await == ["sop-refund"]).then_some(())
    })
    .await;

    assert_eq!(admin(&a, reqwest::Method::DELETE, "/memories/sop-refund", None).await, 200);
    eventually(Duration::from_secs(5), "replica B to drop A's deleted record", || async {
        explain_ids(&b, question).await.is_empty().then_some(())
    })
    .await;

    let canary = json!({"stage": "canary", "canary_percent": 5});
    assert_eq!(admin(&a, reqwest::Method::PATCH, "/releases/v2", Some(&canary)).await, 200);
    eventually(Duration::from_secs(3), "replica B to see the canary", || async {
        let rollout = release_rollout(&b, "v2").await;
        (rollout["stage"] == "canary" && rollout["canary_percent"] == 5.0).then_some(())
    })
    .await;
}

/// A replica that listens to Redis for changes and polls the store only every ten minutes: what
/// it learns within seconds, it learned through Redis.
fn redis_replica(mock: &Proc, db: &TestDb, config: &TempDir, redis_url: &str) -> Proc {
    Proc::gateway(
        mock,
        &["--database-url", db.url.as_str(), "--config", config.path.join("memgate.toml").to_str().unwrap()],
        &[
            ("MEMGATE_ADMIN_TOKEN", ADMIN_TOKEN),
            ("ANTHROPIC_API_KEY", UPSTREAM_KEY),
            ("MEMGATE_REDIS_URL", redis_url),
        ],
    )
}

/// The config of `redis_replica`: a channel of this test's own, so other tests' replicas
/// sharing the Redis server cannot wake these.
fn slow_poll_config() -> TempDir {
    let dir = TempDir::new("fanout-config");
    let prefix = format!("memgate-test-{}", uuid::Uuid::new_v4().simple());
    let text = format!(
        "[database]\npoll_interval_ms = 600000\n[memory]\nfunnel_timeout_ms = 5000\ndefault_release = \"v1\"\n[redis]\nkey_prefix = \"{prefix}\"\n\
         shared_read_timeout_ms = 2000\n"
    );
    std::fs::write(dir.path.join("memgate.toml"), text).unwrap();
    dir
}

/// The rollout state of release `name` as this replica routes by it.
async fn release_rollout(gateway: &Proc, name: &str) -> Value {
    let listed: Value = client()
        .get(gateway.url(&format!("/admin/v1/releases/{name}")))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    listed["rollout"].clone()
}

#[tokio::test]
async fn with_redis_replicas_take_in_each_others_changes_without_waiting_for_the_poll() {
    let db = TestDb::postgres().await;
    let mock = Proc::mock(&[]);
    let config = slow_poll_config();
    let a = redis_replica(&mock, &db, &config, "redis://127.0.0.1:6379");
    let b = redis_replica(&mock, &db, &config, "redis://127.0.0.1:6379");
    for replica in [&a, &b] {
        eventually(Duration::from_secs(10), "the replica to subscribe", || async {
            replica.stderr().contains("listening for other replicas' changes on redis").then_some(())
        })
        .await;
    }
    let question = "Can I still get a refund for ORD-2024-0615?";
    assert!(explain_ids(&b, question).await.is_empty());

    let record = json!({"id": "sop-refund", "type": "fact", "scope": ["team:support"],
        "content": {"statement": "Refunds are possible within 30 days of delivery for order ORD-2024-0615."}});
    assert_eq!(admin(&a, reqwest::Method::POST, "/memories", Some(&record)).await, 201);
    eventually(Duration::from_secs(10), "replica B to serve A's new record", || async {
        (explain_ids(&b, question).await == ["sop-refund"]).then_some(())
    })
    .await;
    // B may have taken the first record in with the look it takes after subscribing; by now
    // that look is over, so only A's message can bring B the second one.
    let second = json!({"id": "sop-exchange", "type": "fact", "scope": ["team:support"],
        "content": {"statement": "Exchanges for order ORD-2024-0777 are free within 14 days."}});
    assert_eq!(admin(&a, reqwest::Method::POST, "/memories", Some(&second)).await, 201);
    eventually(Duration::from_secs(10), "replica B to serve A's second record", || async {
        explain_ids(&b, "Can I exchange ORD-2024-0777?")
            .await
            .contains(&"sop-exchange".to_owned())
            .then_some(())
    })
    .await;

    assert_eq!(admin(&b, reqwest::Method::DELETE, "/memories/sop-refund", None).await, 200);
    eventually(Duration::from_secs(10), "replica A to drop B's deleted record", || async {
        (!explain_ids(&a, question).await.contains(&"sop-refund".to_owned())).then_some(())
    })
    .await;

    assert_eq!(release_rollout(&b, "v2").await["stage"], "available");
    let canary = json!({"stage": "canary", "canary_percent": 5});
    assert_eq!(admin(&a, reqwest::Method::PATCH, "/releases/v2", Some(&canary)).await, 200);
    eventually(Duration::from_secs(10), "replica B to see A's canary", || async {
        (release_rollout(&b, "v2").await["stage"] == "canary").then_some(())
    })
    .await;
}

#[tokio::test]
async fn an_unreachable_redis_costs_nothing_but_the_poll() {
    let db = TestDb::postgres().await;
    let mock = Proc::mock(&[]);
    let config = slow_poll_config();
    // Nothing listens on port 1.
    let a = redis_replica(&mock, &db, &config, "redis://127.0.0.1:1");
    let ready = client().get(a.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200, "a replica without its Redis is still ready");
    let record = json!({"type": "fact", "scope": ["team:support"], "aliases": ["ORD-2024-0615"],
        "content": {"statement": "Order ORD-2024-0615 left the warehouse."}});
    assert_eq!(
        admin(&a, reqwest::Method::POST, "/memories", Some(&record)).await,
        201,
        "writes go on without Redis"
    );
    assert_eq!(explain_ids(&a, "Where is ORD-2024-0615?").await.len(), 1, "and are served at once");
    eventually(Duration::from_secs(10), "the replica to say Redis is unavailable", || async {
        a.stderr().contains("redis unavailable").then_some(())
    })
    .await;
}

/// `memgate_query_embeddings_total{source="…"}` on a replica's /metrics.
async fn query_embeddings(gateway: &Proc, source: &str) -> f64 {
    let text = client().get(gateway.url("/metrics")).send().await.unwrap().text().await.unwrap();
    let series = format!("memgate_query_embeddings_total{{source=\"{source}\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&series))
        .map_or(0.0, |value| value.trim().parse().unwrap())
}

#[tokio::test]
async fn a_question_embedded_on_one_replica_is_not_embedded_again_on_another() {
    let db = TestDb::postgres().await;
    let mock = Proc::mock(&[]);
    let config = slow_poll_config();
    let a = redis_replica(&mock, &db, &config, "redis://127.0.0.1:6379");
    let b = redis_replica(&mock, &db, &config, "redis://127.0.0.1:6379");
    // With no record to compare it with, a question is not embedded at all: give them one.
    let record = json!({"type": "fact", "scope": ["team:support"], "aliases": ["nordic shipping"],
        "content": {"statement": "Orders to Norway ship from the Oslo warehouse."}});
    assert_eq!(admin(&a, reqwest::Method::POST, "/memories", Some(&record)).await, 201);
    eventually(Duration::from_secs(10), "replica B to have the record", || async {
        (explain_ids(&b, "nordic shipping").await.len() == 1).then_some(())
    })
    .await;
    let prefix = std::fs::read_to_string(config.path.join("memgate.toml")).unwrap();
    let prefix = prefix.split("key_prefix = \"").nth(1).unwrap().split('"').next().unwrap().to_owned();
    let mut redis = redis::Client::open("redis://127.0.0.1:6379")
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let shared_vectors = |redis: &redis::aio::MultiplexedConnection| {
        let mut redis = redis.clone();
        let pattern = format!("{prefix}:qvec:*");
        async move { redis::cmd("KEYS").arg(&pattern).query_async::<Vec<String>>(&mut redis).await.unwrap().len() }
    };
    eventually(Duration::from_secs(10), "B's vector of its question in Redis", || async {
        (shared_vectors(&redis).await == 1).then_some(())
    })
    .await;
    let b_model_runs = query_embeddings(&b, "model").await;

    let question = "Which warehouse ships orders to Norway?";
    let a_model_runs = query_embeddings(&a, "model").await;
    explain_ids(&a, question).await;
    assert_eq!(query_embeddings(&a, "model").await, a_model_runs + 1.0, "A embeds the new question");
    // A offers the vector to Redis in the background; wait until it is there.
    eventually(Duration::from_secs(10), "A's vector of the question in Redis", || async {
        (shared_vectors(&redis).await == 2).then_some(())
    })
    .await;

    assert_eq!(explain_ids(&b, question).await.len(), 1);
    assert_eq!(query_embeddings(&b, "shared_cache").await, 1.0, "B ran the model for A's question");
    assert_eq!(query_embeddings(&b, "model").await, b_model_runs);
    explain_ids(&b, question).await;
    assert_eq!(query_embeddings(&b, "local_cache").await, 1.0, "the second time B has it itself");
    explain_ids(&b, "Do you ship to Iceland?").await;
    assert_eq!(query_embeddings(&b, "model").await, b_model_runs + 1.0, "a new question runs B's model");
    let keys: Vec<String> =
        redis::cmd("KEYS").arg(format!("{prefix}:*")).query_async(&mut redis).await.unwrap();
    let _: () = redis::cmd("DEL").arg(keys).query_async(&mut redis).await.unwrap();
}
