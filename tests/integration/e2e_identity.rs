//! Identity end to end: gateway keys, JWTs, subjects and rate limits against the real binary.
//! (The official SDK drives the JWT algorithms in tests/sdk/.)

use crate::support::{Proc, client, messages_body};
use serde_json::{Value, json};

pub const ADMIN_TOKEN: &str = "test-admin-token-0123456789";
pub const UPSTREAM_KEY: &str = "sk-ant-memgate-own-key";
pub const JWT_SECRET: &str = "jwt-test-secret-that-is-at-least-32-bytes";

/// A gateway in managed mode with an admin token and an HS256 JWT secret.
pub fn managed_gateway(mock: &Proc, extra: &[&str]) -> Proc {
    Proc::gateway(
        mock,
        &[&["--auth-mode", "managed"], extra].concat(),
        &[
            ("ANTHROPIC_API_KEY", UPSTREAM_KEY),
            ("MEMGATE_ADMIN_TOKEN", ADMIN_TOKEN),
            ("MEMGATE_JWT_HS256_SECRET", JWT_SECRET),
        ],
    )
}

/// Issues a key through the admin API; returns the secret and the whole answer.
pub async fn issue_key(gateway: &Proc, tenant: &str, body: Value) -> (String, Value) {
    let response = client()
        .post(gateway.url("/admin/v1/keys"))
        .bearer_auth(ADMIN_TOKEN)
        .header("x-memory-tenant", tenant)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let answer: Value = response.json().await.unwrap();
    (answer["key"].as_str().unwrap().to_owned(), answer)
}

/// Checks every request the mock received: memgate's key, never a caller's credential.
pub async fn assert_upstream_saw_only_memgates_key(mock: &Proc, forbidden: &[&str]) {
    let recorded = mock.recorded().await;
    assert!(!recorded.is_empty());
    for seen in recorded {
        let headers = seen["headers"].to_string();
        for secret in forbidden {
            assert!(!headers.contains(secret), "a caller credential reached the upstream: {headers}");
        }
        assert_eq!(seen["headers"]["x-api-key"], UPSTREAM_KEY, "{headers}");
        assert!(seen["headers"].get("authorization").is_none(), "{headers}");
    }
}

pub fn hs256(claims: Value) -> String {
    let key = jsonwebtoken::EncodingKey::from_secret(JWT_SECRET.as_bytes()).unwrap();
    jsonwebtoken::encode(&jsonwebtoken::Header::default(), &claims, &key).unwrap()
}

pub fn in_a_minute() -> i64 {
    jsonwebtoken::get_current_timestamp() as i64 + 60
}

async fn error_type(response: reqwest::Response) -> (u16, String) {
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["type"], "error", "{body}");
    (status, body["error"]["type"].as_str().unwrap().to_owned())
}

#[tokio::test]
async fn managed_mode_never_forwards_the_callers_credential() {
    let mock = Proc::mock(&[]);
    let gateway = managed_gateway(&mock, &[]);
    // `files`: in managed mode the files API shares memgate's upstream workspace.
    let (key, _) = issue_key(&gateway, "default", json!({"name": "bot", "permissions": ["files"]})).await;
    let token = hs256(json!({"sub": "u-1", "exp": in_a_minute(), "memgate_permissions": ["files"]}));
    let http = client();
    for path in ["/v1/messages", "/v1/messages/count_tokens", "/v1/models", "/v1/files?limit=2"] {
        for (name, value) in [("x-api-key", key.clone()), ("authorization", format!("Bearer {token}"))] {
            let request = if path.starts_with("/v1/messages") {
                http.post(gateway.url(path)).json(&messages_body("claude-test", false))
            } else {
                http.get(gateway.url(path))
            };
            let response = request.header(name, &value).send().await.unwrap();
            assert_eq!(response.status(), 200, "{path} with {name}");
        }
    }
    assert_upstream_saw_only_memgates_key(&mock, &[&key, &token]).await;
}

#[tokio::test]
async fn missing_unknown_malformed_and_revoked_credentials_get_401() {
    let mock = Proc::mock(&[]);
    let gateway = managed_gateway(&mock, &[]);
    let (key, answer) = issue_key(&gateway, "default", json!({"name": "bot"})).await;
    let http = client();
    let send = |header: Option<(&'static str, String)>| {
        let mut request = http.post(gateway.url("/v1/messages")).json(&messages_body("claude-test", false));
        if let Some((name, value)) = header {
            request = request.header(name, value);
        }
        request.send()
    };
    assert_eq!(error_type(send(None).await.unwrap()).await, (401, "authentication_error".into()));
    let wrong_secret = format!("{}x", &key[..key.len() - 1]);
    for bad in [
        "sk-ant-api03-someone-elses-anthropic-key",
        "mgk_",
        "mgk_0123456789abcdef_",
        "mgk_zz_zz",
        wrong_secret.as_str(),
    ] {
        let answer = error_type(send(Some(("x-api-key", bad.to_owned()))).await.unwrap()).await;
        assert_eq!(answer, (401, "authentication_error".into()), "{bad}");
    }
    assert_eq!(
        error_type(send(Some(("authorization", "Bearer not.a.jwt".into()))).await.unwrap()).await.0,
        401
    );
    assert_eq!(send(Some(("x-api-key", key.clone()))).await.unwrap().status(), 200);

    let id = answer["id"].as_str().unwrap();
    let revoked = http
        .delete(gateway.url(&format!("/admin/v1/keys/{id}")))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), 200);
    let answer = error_type(send(Some(("x-api-key", key.clone()))).await.unwrap()).await;
    assert_eq!(answer, (401, "authentication_error".into()), "a revoked key still works");
    assert_eq!(mock.recorded().await.len(), 1, "only the one good request went upstream");
}

#[tokio::test]
async fn the_keys_admin_api_shows_a_secret_once_and_stays_in_its_tenant() {
    let mock = Proc::mock(&[]);
    let gateway = managed_gateway(&mock, &[]);
    let (secret, answer) = issue_key(
        &gateway,
        "acme",
        json!({"name": "support-bot", "scopes": ["team:support"], "permissions": ["assert_subject"], "rate_limit_per_minute": 100}),
    )
    .await;
    assert!(secret.starts_with("mgk_"));
    assert_eq!(answer["scopes"], json!(["team:support"]));
    let http = client();
    let list = |tenant: &'static str| {
        http.get(gateway.url("/admin/v1/keys"))
            .bearer_auth(ADMIN_TOKEN)
            .header("x-memory-tenant", tenant)
            .send()
    };
    let listed = list("acme").await.unwrap().text().await.unwrap();
    assert!(listed.contains("support-bot"));
    assert!(!listed.contains(&secret[20..]), "the secret is shown again: {listed}");
    let other = list("globex").await.unwrap().json::<Value>().await.unwrap();
    assert_eq!(other["data"], json!([]), "another tenant sees the key");

    let id = answer["id"].as_str().unwrap();
    let cross = http
        .delete(gateway.url(&format!("/admin/v1/keys/{id}")))
        .bearer_auth(ADMIN_TOKEN)
        .header("x-memory-tenant", "globex")
        .send()
        .await
        .unwrap();
    assert_eq!(cross.status(), 404, "another tenant revoked the key");

    for bad in [
        json!({"name": "x", "scopes": ["not a scope"]}),
        json!({"name": "x", "permissions": ["root"]}),
        json!({"name": ""}),
        json!({"name": "x", "rate_limit_per_minute": 0}),
        json!({"name": "x", "unexpected": true}),
        json!(["name"]),
    ] {
        let response = http
            .post(gateway.url("/admin/v1/keys"))
            .bearer_auth(ADMIN_TOKEN)
            .json(&bad)
            .send()
            .await
            .unwrap();
        assert_eq!(error_type(response).await, (400, "invalid_request_error".into()), "{bad}");
    }
}

#[tokio::test]
async fn asserting_a_subject_needs_the_permission() {
    let mock = Proc::mock(&[]);
    let gateway = managed_gateway(&mock, &[]);
    let (plain, _) = issue_key(&gateway, "default", json!({"name": "plain"})).await;
    let (bot, _) =
        issue_key(&gateway, "default", json!({"name": "bot", "permissions": ["assert_subject"]})).await;
    let http = client();
    let send = |key: &str, subject: &str| {
        http.post(gateway.url("/v1/messages"))
            .header("x-api-key", key)
            .header("x-memory-subject", subject)
            .json(&messages_body("claude-test", false))
            .send()
    };
    assert_eq!(error_type(send(&plain, "u-789").await.unwrap()).await, (403, "permission_error".into()));
    assert_eq!(send(&bot, "u-789").await.unwrap().status(), 200);
    assert_eq!(
        error_type(send(&bot, "has space").await.unwrap()).await,
        (400, "invalid_request_error".into())
    );
    // A JWT without the permission claim may not assert one either.
    let token = hs256(json!({"sub": "u-1", "exp": in_a_minute()}));
    let response = http
        .post(gateway.url("/v1/messages"))
        .bearer_auth(&token)
        .header("x-memory-subject", "u-2")
        .json(&messages_body("claude-test", false))
        .send()
        .await
        .unwrap();
    assert_eq!(error_type(response).await, (403, "permission_error".into()));
    // Nothing memgate refused reached the upstream; the header never goes upstream either.
    let recorded = mock.recorded().await;
    assert_eq!(recorded.len(), 1);
    assert!(recorded[0]["headers"].get("x-memory-subject").is_none());
}

#[tokio::test]
async fn a_caller_over_its_limit_gets_429_and_others_are_unaffected() {
    let mock = Proc::mock(&[]);
    let gateway = managed_gateway(&mock, &[]);
    let (limited, _) =
        issue_key(&gateway, "default", json!({"name": "small", "rate_limit_per_minute": 3})).await;
    let (other, _) =
        issue_key(&gateway, "default", json!({"name": "other", "rate_limit_per_minute": 3})).await;
    let http = client();
    let send = |key: &str| {
        http.post(gateway.url("/v1/messages"))
            .header("x-api-key", key)
            .json(&messages_body("claude-test", false))
            .send()
    };
    for _ in 0..3 {
        assert_eq!(send(&limited).await.unwrap().status(), 200);
    }
    let refused = send(&limited).await.unwrap();
    let retry_after: u64 = refused.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    assert_eq!(error_type(refused).await, (429, "rate_limit_error".into()));
    for _ in 0..3 {
        assert_eq!(send(&other).await.unwrap().status(), 200, "another caller was limited too");
    }
    assert_eq!(mock.recorded().await.len(), 6);
}

/// Guessing the admin token is rate limited: failed attempts count (not every request, which
/// once locked out admins; see e2e_security::admin_limits).
#[tokio::test]
async fn the_admin_api_is_rate_limited_too() {
    let mock = Proc::mock(&[]);
    let config = crate::support::TempDir::new("admin-limit");
    let file = config.path.join("memgate.toml");
    std::fs::write(&file, "[admin]\nrate_limit_per_minute = 3\n").unwrap();
    let gateway = managed_gateway(&mock, &["--config", file.to_str().unwrap()]);
    let http = client();
    let mut statuses = Vec::new();
    for i in 0..9 {
        let token = if i % 2 == 0 { ADMIN_TOKEN } else { "wrong-token-guess-000000" };
        statuses.push(
            http.get(gateway.url("/admin/v1/keys"))
                .bearer_auth(token)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16(),
        );
    }
    assert_eq!(statuses, [200, 401, 200, 401, 200, 401, 200, 429, 429]);
}
