//! Three replicas act as one: what one is told, the others serve within a second (a write, a
//! delete, a forget, a key revocation, a rollout change); a caller's rate limit holds for the
//! whole fleet; Redis going away and coming back costs no request and no restart; PostgreSQL going
//! away leaves proxying with memory running, refuses writes with a 503 and `Retry-After`, loses
//! nothing acknowledged, and the replicas catch up when it is back.

use super::{PrivatePostgres, PrivateRedis, admin, fleet_config, replica};
use crate::e2e_identity::issue_key;
use crate::support::{Proc, client, eventually};
use reqwest::Method;
use serde_json::{Value, json};
use std::time::Duration;

const SECOND: Duration = Duration::from_secs(1);

fn question(text: &str) -> Value {
    json!({"model": "claude-test", "max_tokens": 8, "messages": [{"role": "user", "content": text}]})
}

/// What `gateway` injects for `text`, by its trace (the key has the debug permission).
async fn injected(gateway: &Proc, key: &str, text: &str) -> Vec<String> {
    let response = client()
        .post(gateway.url("/v1/messages"))
        .header("x-api-key", key)
        .header("x-memory-debug", "1")
        .json(&question(text))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    let trace: Value = serde_json::from_str(response.headers()["x-memory-trace"].to_str().unwrap()).unwrap();
    trace["injected"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_owned()).collect()
}

/// Polls every replica until `id` is (or is no longer) among what it injects for `text`. Only
/// that record counts: semantically close others may come along (they all talk of orders).
async fn all_inject(fleet: &[&Proc], key: &str, text: &str, id: &str, present: bool, what: &str) {
    let deadline = std::time::Instant::now() + SECOND;
    for (i, replica) in fleet.iter().enumerate() {
        loop {
            let got = injected(replica, key, text).await;
            if got.iter().any(|g| g == id) == present {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "replica {i}: {what}: it injects {got:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

fn fact(id: &str, scope: &str, order: &str) -> Value {
    json!({"id": id, "type": "fact", "scope": [scope], "aliases": [order], "valid_from": "2024-01-01T00:00:00Z",
        "content": {"statement": format!("Order {order} ships from the Hamburg warehouse.")}})
}

#[tokio::test]
async fn three_replicas_act_as_one_through_redis_and_database_outages() {
    let pg = PrivatePostgres::start();
    let mut redis = PrivateRedis::start();
    let mock = Proc::mock(&[]);
    let (_dir, config) = fleet_config("[database]\npoll_interval_ms = 1000\n");
    let db = pg.url();
    let a = replica(&mock, &db, &redis.url(), &config, 0);
    let b = replica(&mock, &db, &redis.url(), &config, 0);
    let c = replica(&mock, &db, &redis.url(), &config, 0);
    let fleet = [&a, &b, &c];
    let pids: Vec<u32> = fleet.iter().map(|r| r.pid()).collect();
    let (key, issued) = issue_key(
        &a,
        "default",
        json!({"name": "bot", "permissions": ["debug", "assert_subject"],
        "rate_limit_per_minute": 100000}),
    )
    .await;

    // A write through A, a delete through B, a forget through C: each reaches the others.
    assert_eq!(admin(&a, Method::POST, "/memories", Some(&fact("ord-1", "public", "ORD-1001"))).await.0, 201);
    all_inject(&fleet, &key, "Where is ORD-1001?", "ord-1", true, "A's write").await;
    assert_eq!(admin(&b, Method::DELETE, "/memories/ord-1", None).await.0, 200);
    all_inject(&fleet, &key, "Where is ORD-1001?", "ord-1", false, "B's delete").await;
    assert_eq!(
        admin(&a, Method::POST, "/memories", Some(&fact("ord-2", "user:u-9", "ORD-2002"))).await.0,
        201
    );
    eventually(SECOND, "C to take in A's record for u-9", || async {
        let response = client()
            .post(c.url("/v1/messages"))
            .header("x-api-key", &key)
            .header("x-memory-subject", "u-9")
            .json(&question("Where is ORD-2002?"))
            .send()
            .await
            .unwrap();
        (response.headers()["x-memory-injected"] == "1").then_some(())
    })
    .await;
    let (status, _) = admin(&c, Method::POST, "/memories/forget", Some(&json!({"scope": "user:u-9"}))).await;
    assert_eq!(status, 200);
    for (i, replica) in fleet.iter().enumerate() {
        eventually(SECOND, &format!("replica {i} to forget u-9"), || async {
            let (status, _) = admin(replica, Method::GET, "/memories/ord-2", None).await;
            let response = client()
                .post(replica.url("/v1/messages"))
                .header("x-api-key", &key)
                .header("x-memory-subject", "u-9")
                .json(&question("Where is ORD-2002?"))
                .send()
                .await
                .unwrap();
            (status == 404 && response.headers()["x-memory-injected"] == "0").then_some(())
        })
        .await;
    }

    // A rollout change through A: B and C route by it.
    let canary = json!({"stage": "canary", "canary_percent": 5});
    assert_eq!(admin(&a, Method::PATCH, "/releases/v2", Some(&canary)).await.0, 200);
    for (i, replica) in [&b, &c].iter().enumerate() {
        eventually(SECOND, &format!("replica {i} to see the canary"), || async {
            let (_, release) = admin(replica, Method::GET, "/releases/v2", None).await;
            (release["rollout"]["stage"] == "canary").then_some(())
        })
        .await;
    }

    // The fleet-wide rate limit: 60 a minute for one key, asked of all three in turn.
    let (limited, _) = issue_key(&a, "default", json!({"name": "small", "rate_limit_per_minute": 60})).await;
    let mut allowed = 0;
    for i in 0..150 {
        let response = client()
            .post(fleet[i % 3].url("/v1/messages"))
            .header("x-api-key", &limited)
            .json(&question("hello"))
            .send()
            .await
            .unwrap();
        if response.status() == 200 {
            allowed += 1;
        } else {
            assert_eq!(response.status(), 429);
        }
    }
    assert!((54..=66).contains(&allowed), "the fleet let {allowed} of 150 through for a limit of 60");

    // Redis goes away: every request is still served; when it is back, fan-out resumes alone.
    redis.stop();
    for i in 0..30 {
        let response = client()
            .post(fleet[i % 3].url("/v1/messages"))
            .header("x-api-key", &key)
            .json(&question("hi"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "a request failed while Redis was away");
    }
    redis.resume();
    // The replicas resubscribe by themselves (they retry every second), and share query
    // embeddings through it again.
    let mut connection =
        redis::Client::open(redis.url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let prefix = prefix_of(&config_text(&config));
    let prefix = prefix.as_str();
    eventually(Duration::from_secs(10), "all three replicas to listen on Redis again", || {
        let mut connection = connection.clone();
        async move {
            let channel = format!("{prefix}:changes");
            let (_, listeners): (String, usize) =
                redis::cmd("PUBSUB").arg("NUMSUB").arg(&channel).query_async(&mut connection).await.ok()?;
            (listeners == 3).then_some(())
        }
    })
    .await;
    eventually(Duration::from_secs(10), "a new question's embedding to be shared through Redis", || {
        let mut connection = connection.clone();
        let (a, key) = (&a, &key);
        async move {
            let _ = injected(a, key, "Is the Hamburg warehouse open on Sundays?").await;
            let pattern = format!("{prefix}:qvec:*");
            let shared: Vec<String> =
                redis::cmd("KEYS").arg(&pattern).query_async(&mut connection).await.ok()?;
            (!shared.is_empty()).then_some(())
        }
    })
    .await;
    let _: () = redis::cmd("PING").query_async(&mut connection).await.unwrap();
    assert_eq!(admin(&c, Method::POST, "/memories", Some(&fact("ord-3", "public", "ORD-3003"))).await.0, 201);
    all_inject(&fleet, &key, "Where is ORD-3003?", "ord-3", true, "C's write after Redis came back").await;

    // PostgreSQL goes away: proxying with memory goes on (marked stale), writes get 503 with
    // Retry-After, and nothing acknowledged before is lost.
    pg.stop();
    for (i, replica) in fleet.iter().enumerate() {
        let response =
            eventually(Duration::from_secs(10), &format!("replica {i} to mark its memory stale"), || async {
                let response = client()
                    .post(replica.url("/v1/messages"))
                    .header("x-api-key", &key)
                    .json(&question("Where is ORD-3003?"))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(response.status(), 200, "proxying stopped with the database");
                response.headers().contains_key("x-memory-stale").then_some(response)
            })
            .await;
        assert_eq!(
            response.headers()["x-memory-injected"],
            "1",
            "memory from the index while the database is away"
        );
    }
    let refused = client()
        .post(a.url("/admin/v1/memories"))
        .bearer_auth(crate::e2e_identity::ADMIN_TOKEN)
        .json(&fact("ord-4", "public", "ORD-4004"))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 503);
    assert!(refused.headers().contains_key("retry-after"));
    let ready = client().get(b.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200, "an unreachable database must not take a replica out of the balancer");

    pg.resume();
    // Back: the acknowledged write is there, the refused one is not, and the replicas catch up.
    eventually(Duration::from_secs(10), "the database to answer again", || async {
        (admin(&a, Method::GET, "/memories/ord-3", None).await.0 == 200).then_some(())
    })
    .await;
    assert_eq!(admin(&a, Method::GET, "/memories/ord-4", None).await.0, 404);
    assert_eq!(admin(&b, Method::POST, "/memories", Some(&fact("ord-5", "public", "ORD-5005"))).await.0, 201);
    all_inject(&fleet, &key, "Where is ORD-5005?", "ord-5", true, "a write after the database came back")
        .await;
    for (i, replica) in fleet.iter().enumerate() {
        eventually(Duration::from_secs(5), &format!("replica {i}'s memory to be fresh again"), || async {
            let response = client()
                .post(replica.url("/v1/messages"))
                .header("x-api-key", &key)
                .json(&question("hi"))
                .send()
                .await
                .unwrap();
            (!response.headers().contains_key("x-memory-stale")).then_some(())
        })
        .await;
    }

    // A key revoked through C stops on A and B within a second.
    let id = issued["id"].as_str().unwrap();
    assert_eq!(admin(&c, Method::DELETE, &format!("/keys/{id}"), None).await.0, 200);
    for (i, replica) in [&a, &b].iter().enumerate() {
        eventually(SECOND, &format!("replica {i} to refuse the revoked key"), || async {
            let response = client()
                .post(replica.url("/v1/messages"))
                .header("x-api-key", &key)
                .json(&question("hi"))
                .send()
                .await
                .unwrap();
            (response.status() == 401).then_some(())
        })
        .await;
    }
    // No replica restarted through all of it.
    assert_eq!(fleet.iter().map(|r| r.pid()).collect::<Vec<_>>(), pids);
}

fn config_text(path: &str) -> String {
    std::fs::read_to_string(path).unwrap()
}

/// The Redis key prefix a fleet config sets.
fn prefix_of(config: &str) -> String {
    let line = config.lines().find(|l| l.starts_with("key_prefix")).unwrap();
    line.split('"').nth(1).unwrap().to_owned()
}
