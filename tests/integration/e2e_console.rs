//! The console end to end (console/API.md): the real binary in front of the real
//! mock-upstream, driven over HTTP the way the browser app drives it — the served app and its
//! headers, logins with the admin and the viewer token, the session cookie on the admin API with
//! the CSRF rule, logout, admin strikes, and what real Messages traffic leaves in the recent
//! requests and, across a graceful restart on the same PostgreSQL database, in the metrics
//! history. Every assertion is on what a browser or an operator sees.

use crate::e2e_identity::{ADMIN_TOKEN, JWT_SECRET, UPSTREAM_KEY, issue_key};
use crate::support::{Proc, TempDir, TestDb, client, eventually, messages_body};
use reqwest::{Method, RequestBuilder, StatusCode};
use serde_json::{Value, json};
use std::time::Duration;

const VIEWER_TOKEN: &str = "test-viewer-token-0123456789";

/// The CSP of every `/console` answer (console/API.md §1).
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; font-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// A managed gateway with the admin and the viewer token, on `db` (its own SQLite when `None`),
/// reading `toml` as its config when given.
fn gateway(mock: &Proc, db: Option<&TestDb>, toml: Option<(&TempDir, &str)>) -> Proc {
    let mut extra = vec!["--auth-mode", "managed"];
    if let Some(db) = db {
        extra.extend_from_slice(&["--database-url", db.url.as_str()]);
    }
    let config;
    if let Some((dir, text)) = toml {
        config = dir.path.join("memgate.toml");
        std::fs::write(&config, text).unwrap();
        extra.extend_from_slice(&["--config", config.to_str().unwrap()]);
    }
    Proc::gateway(
        mock,
        &extra,
        &[
            ("ANTHROPIC_API_KEY", UPSTREAM_KEY),
            ("MEMGATE_ADMIN_TOKEN", ADMIN_TOKEN),
            ("MEMGATE_ADMIN_VIEWER_TOKEN", VIEWER_TOKEN),
            ("MEMGATE_JWT_HS256_SECRET", JWT_SECRET),
        ],
    )
}

/// One answer, read whole.
struct Answer {
    status: StatusCode,
    headers: reqwest::header::HeaderMap,
    json: Value,
}

async fn send(request: RequestBuilder) -> Answer {
    let response = request.send().await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let text = response.text().await.unwrap();
    Answer { status, headers, json: serde_json::from_str(&text).unwrap_or(Value::Null) }
}

impl Answer {
    fn header(&self, name: &str) -> &str {
        self.headers.get(name).map(|v| v.to_str().unwrap()).unwrap_or("")
    }

    fn code(&self) -> &str {
        self.json["error"]["code"].as_str().unwrap_or("")
    }
}

/// `POST /console/session` as the app sends it; returns the answer and the cookie's value.
async fn login(gw: &Proc, token: &str, actor: &str) -> (Answer, Option<String>) {
    let answer = send(
        client()
            .post(gw.url("/console/session"))
            .header("x-memgate-console", "1")
            .json(&json!({"token": token, "actor": actor})),
    )
    .await;
    let cookie = answer
        .header("set-cookie")
        .split(';')
        .next()
        .and_then(|pair| pair.strip_prefix("memgate_console="))
        .map(str::to_owned);
    (answer, cookie)
}

/// A request carrying the session cookie, with the app's CSRF header when `console_header`.
fn with_cookie(gw: &Proc, method: Method, path: &str, cookie: &str, console_header: bool) -> RequestBuilder {
    let request =
        client().request(method, gw.url(path)).header("cookie", format!("memgate_console={cookie}"));
    if console_header { request.header("x-memgate-console", "1") } else { request }
}

fn fact(id: &str) -> Value {
    json!({"id": id, "type": "fact", "scope": ["public"], "content": {"statement": "The shop opens at nine."}})
}

#[tokio::test]
async fn e2e_console_is_served_and_an_admin_session_works_the_admin_api_until_logout() {
    let mock = Proc::mock(&[]);
    let gw = gateway(&mock, None, None);

    // The app itself, with its security headers.
    let page = client().get(gw.url("/console/")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert_eq!(page.headers()["content-type"], "text/html; charset=utf-8");
    assert_eq!(page.headers()["content-security-policy"], CSP);
    assert_eq!(page.headers()["x-frame-options"], "DENY");
    let html = page.text().await.unwrap();
    assert!(html.contains("<script") && html.contains("./assets/"), "{html}");
    let bare = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let redirect = bare.get(gw.url("/console?x=1")).send().await.unwrap();
    assert_eq!(redirect.status(), 308);
    assert_eq!(redirect.headers()["location"], "/console/?x=1");

    // Before logging in: the app's first call says so, and the admin API wants a credential.
    let who = send(client().get(gw.url("/console/session")).header("x-memgate-console", "1")).await;
    assert_eq!((who.status, who.json.clone()), (StatusCode::OK, json!({"authenticated": false})));

    let (answer, cookie) = login(&gw, ADMIN_TOKEN, "alice").await;
    assert_eq!(answer.status, 200, "{}", answer.json);
    let set_cookie = answer.header("set-cookie").to_owned();
    for part in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=43200"] {
        assert!(set_cookie.split("; ").any(|p| p == part), "{part} missing from {set_cookie}");
    }
    assert!(!set_cookie.contains("Secure"), "plain http must not get a Secure cookie: {set_cookie}");
    assert_eq!(answer.header("cache-control"), "no-store");
    assert_eq!(answer.header("content-security-policy"), CSP);
    assert_eq!(answer.json["role"], "admin");
    assert_eq!(answer.json["actor"], "console:alice");
    let cookie = cookie.expect("a memgate_console cookie");
    assert_eq!(cookie.len(), 43, "32 random bytes, base64url");
    assert!(!answer.json.to_string().contains(&cookie), "the cookie's value is not in the body");

    // The session on the admin API, as the app calls it.
    let who = send(with_cookie(&gw, Method::GET, "/console/session", &cookie, true)).await;
    assert_eq!((who.json["authenticated"].clone(), who.json["role"].clone()), (json!(true), json!("admin")));
    let list = send(with_cookie(&gw, Method::GET, "/admin/v1/memories", &cookie, true)).await;
    assert_eq!(list.status, 200, "{}", list.json);
    assert_eq!(list.json["data"], json!([]));
    assert_eq!(list.header("cache-control"), "no-store");
    let created =
        send(with_cookie(&gw, Method::POST, "/admin/v1/memories", &cookie, true).json(&fact("mem-by-alice")))
            .await;
    assert_eq!(created.status, 201, "{}", created.json);
    // The session names who made the change, whatever X-Memory-Actor says.
    let history = send(
        with_cookie(&gw, Method::GET, "/admin/v1/memories/mem-by-alice/history", &cookie, true)
            .header("x-memory-actor", "mallory"),
    )
    .await;
    assert_eq!(history.json["data"][0]["actor"], "console:alice", "{}", history.json);

    // Without the CSRF header a cookie alone changes nothing, and reads nothing either.
    let forged =
        send(with_cookie(&gw, Method::POST, "/admin/v1/memories", &cookie, false).json(&fact("mem-forged")))
            .await;
    assert_eq!((forged.status, forged.code()), (StatusCode::FORBIDDEN, "csrf_refused"), "{}", forged.json);
    let read = send(with_cookie(&gw, Method::GET, "/admin/v1/memories", &cookie, false)).await;
    assert_eq!((read.status, read.code()), (StatusCode::FORBIDDEN, "csrf_refused"));
    let other_site = send(
        with_cookie(&gw, Method::POST, "/admin/v1/memories", &cookie, true)
            .header("origin", "http://evil.example")
            .json(&fact("mem-forged")),
    )
    .await;
    assert_eq!((other_site.status, other_site.code()), (StatusCode::FORBIDDEN, "csrf_refused"));
    let missing = send(client().get(gw.url("/admin/v1/memories/mem-forged")).bearer_auth(ADMIN_TOKEN)).await;
    assert_eq!(missing.status, 404, "a refused request wrote nothing");

    // Logout ends the session on the server: the same cookie is refused afterwards.
    let logout = send(with_cookie(&gw, Method::DELETE, "/console/session", &cookie, true)).await;
    assert_eq!(logout.status, 204);
    assert!(logout.header("set-cookie").starts_with("memgate_console=;"), "{}", logout.header("set-cookie"));
    assert!(logout.header("set-cookie").contains("Max-Age=0"));
    let after = send(with_cookie(&gw, Method::GET, "/admin/v1/memories", &cookie, true)).await;
    assert_eq!((after.status, after.code()), (StatusCode::UNAUTHORIZED, "no_session"), "{}", after.json);
    let who = send(with_cookie(&gw, Method::GET, "/console/session", &cookie, true)).await;
    assert_eq!(who.json, json!({"authenticated": false}));
}

#[tokio::test]
async fn e2e_console_a_viewer_reads_everything_and_changes_nothing() {
    let mock = Proc::mock(&[]);
    let gw = gateway(&mock, None, None);
    let seeded =
        send(client().post(gw.url("/admin/v1/memories")).bearer_auth(ADMIN_TOKEN).json(&fact("mem-seen")))
            .await;
    assert_eq!(seeded.status, 201);
    let before = send(client().get(gw.url("/admin/v1/memories/mem-seen")).bearer_auth(ADMIN_TOKEN)).await;

    let (answer, cookie) = login(&gw, VIEWER_TOKEN, "bob").await;
    assert_eq!(answer.status, 200, "{}", answer.json);
    assert_eq!(answer.json["role"], "viewer");
    let cookie = cookie.unwrap();

    for path in ["/admin/v1/memories/mem-seen", "/admin/v1/releases", "/admin/v1/keys", "/admin/v1/schemas"] {
        let read = send(with_cookie(&gw, Method::GET, path, &cookie, true)).await;
        assert_eq!(read.status, 200, "GET {path}: {}", read.json);
    }
    let refused = [
        (Method::POST, "/admin/v1/memories", fact("mem-viewer")),
        (Method::PATCH, "/admin/v1/memories/mem-seen", json!({"priority": 5})),
        (Method::POST, "/admin/v1/memories/mem-seen/pause", json!({})),
        (Method::PATCH, "/admin/v1/releases/v2", json!({"stage": "canary", "canary_percent": 5})),
        (Method::POST, "/admin/v1/keys", json!({"name": "sneaky", "scopes": ["public"]})),
    ];
    for (method, path, body) in refused {
        let answer = send(with_cookie(&gw, method.clone(), path, &cookie, true).json(&body)).await;
        assert_eq!(
            (answer.status, answer.code()),
            (StatusCode::FORBIDDEN, "read_only_role"),
            "{method} {path}"
        );
        assert_eq!(answer.json["error"]["type"], "permission_error");
    }
    // The same role for the viewer token as a bearer (a monitoring script's read-only token).
    let bearer =
        send(client().post(gw.url("/admin/v1/memories")).bearer_auth(VIEWER_TOKEN).json(&fact("mem-b")))
            .await;
    assert_eq!((bearer.status, bearer.code()), (StatusCode::FORBIDDEN, "read_only_role"));

    // Nothing changed.
    let after = send(client().get(gw.url("/admin/v1/memories/mem-seen")).bearer_auth(ADMIN_TOKEN)).await;
    assert_eq!(after.json, before.json);
    let releases = send(client().get(gw.url("/admin/v1/releases/v2")).bearer_auth(ADMIN_TOKEN)).await;
    assert_ne!(releases.json["rollout"]["stage"], "canary", "{}", releases.json);
    let keys = send(client().get(gw.url("/admin/v1/keys")).bearer_auth(ADMIN_TOKEN)).await;
    assert_eq!(keys.json["data"], json!([]));
}

#[tokio::test]
async fn e2e_console_a_wrong_login_token_is_an_admin_strike() {
    let mock = Proc::mock(&[]);
    let dir = TempDir::new("console-strikes");
    let gw = gateway(&mock, None, Some((&dir, "[admin]\nrate_limit_per_minute = 3\n")));
    for _ in 0..3 {
        let (answer, cookie) = login(&gw, "not-the-admin-token-at-all", "eve").await;
        assert_eq!(
            (answer.status, answer.code()),
            (StatusCode::UNAUTHORIZED, "admin_token_invalid"),
            "{}",
            answer.json
        );
        assert_eq!(answer.json["error"]["type"], "authentication_error");
        assert!(cookie.is_none());
    }
    // The strike past the limit blocks the address: then even the right token waits, at login
    // and on the bearer path alike (the strikes are the admin API's).
    let (answer, _) = login(&gw, "not-the-admin-token-at-all", "eve").await;
    assert_eq!(answer.status, 429, "{}", answer.json);
    assert!(!answer.header("retry-after").is_empty());
    let (answer, cookie) = login(&gw, ADMIN_TOKEN, "alice").await;
    assert_eq!(answer.status, 429, "{}", answer.json);
    assert!(cookie.is_none());
    let bearer = send(client().get(gw.url("/admin/v1/memories")).bearer_auth(ADMIN_TOKEN)).await;
    assert_eq!(bearer.status, 429);
}

#[tokio::test]
async fn e2e_console_schemas_list_both_versions_and_serve_each_document() {
    let mock = Proc::mock(&[]);
    let gw = gateway(&mock, None, None);
    let (_, cookie) = login(&gw, ADMIN_TOKEN, "alice").await;
    let cookie = cookie.unwrap();
    let list = send(with_cookie(&gw, Method::GET, "/admin/v1/schemas", &cookie, true)).await;
    assert_eq!(list.status, 200);
    let versions: Vec<&str> =
        list.json["data"].as_array().unwrap().iter().map(|v| v["schema_version"].as_str().unwrap()).collect();
    assert_eq!(versions, ["v1", "v2"]);
    for version in &list.json["data"].as_array().unwrap()[..] {
        let types: Vec<&str> =
            version["types"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
        for wanted in ["customer_profile", "fact", "internal_sop", "preference"] {
            assert!(types.contains(&wanted), "{wanted} missing from {version}");
        }
    }
    let fact = send(with_cookie(&gw, Method::GET, "/admin/v1/schemas/v1/fact", &cookie, true)).await;
    assert_eq!(fact.status, 200);
    assert_eq!(fact.header("content-type"), "application/json");
    assert_eq!(fact.json["required"], json!(["statement"]));
    assert_eq!(fact.json["properties"]["statement"]["type"], "string");
    let unknown = send(with_cookie(&gw, Method::GET, "/admin/v1/schemas/v9/fact", &cookie, true)).await;
    assert_eq!(unknown.status, 404);
    assert!(unknown.json["error"]["message"].as_str().unwrap().contains("v1"), "{}", unknown.json);
}

#[tokio::test]
async fn e2e_console_recent_requests_list_real_calls_and_the_history_survives_a_graceful_restart() {
    let mock = Proc::mock(&[]);
    let db = TestDb::postgres().await;
    let mut gw = gateway(&mock, Some(&db), None);
    let (key, issued) =
        issue_key(&gw, "default", json!({"name": "support-bot", "scopes": ["team:support"]})).await;

    // Three calls through memgate, each with words that must never be kept.
    let mut ids = Vec::new();
    for i in 0..3 {
        let mut body = messages_body("claude-sonnet-4-5", false);
        body["messages"][0]["content"] = json!(format!("my secret parcel number is zebra-{i}"));
        let answer = client()
            .post(gw.url("/v1/messages"))
            .header("x-api-key", &key)
            .header("anthropic-version", "2023-06-01")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        ids.push(answer.headers()["request-id"].to_str().unwrap().to_owned());
    }

    let (_, cookie) = login(&gw, ADMIN_TOKEN, "alice").await;
    let cookie = cookie.unwrap();
    let recent =
        send(with_cookie(&gw, Method::GET, "/admin/v1/requests/recent?limit=10", &cookie, true)).await;
    assert_eq!(recent.status, 200, "{}", recent.json);
    let listed = recent.json["data"].as_array().unwrap();
    let listed_ids: Vec<&str> = listed.iter().map(|r| r["request_id"].as_str().unwrap()).collect();
    let newest_first: Vec<&str> = ids.iter().rev().map(String::as_str).collect();
    assert_eq!(listed_ids, newest_first);
    for entry in listed {
        assert_eq!(entry["status"], 200);
        assert_eq!(entry["release"], "v1");
        assert_eq!(entry["model"], "claude-sonnet-4-5");
        assert_eq!(entry["caller"]["kind"], "key");
        assert_eq!(entry["caller"]["key_id"], issued["id"]);
        assert_eq!(entry["caller"]["name"], "support-bot");
        assert_eq!(entry["explainable"], false);
    }
    assert!(!recent.json.to_string().contains("zebra"), "a conversation was kept: {}", recent.json);
    let limited =
        send(with_cookie(&gw, Method::GET, "/admin/v1/requests/recent?limit=1", &cookie, true)).await;
    assert_eq!(limited.json["data"].as_array().unwrap().len(), 1);

    // A graceful shutdown writes the minutes not yet written; a new memgate on the same database
    // shows them (the history is the database's, the recent requests only this process's).
    gw.terminate();
    let status = gw.wait_exit(Duration::from_secs(20)).expect("memgate did not exit after SIGTERM");
    assert!(status.success(), "{status:?}: {}", gw.stderr());
    drop(gw);
    let gw = gateway(&mock, Some(&db), None);
    let (_, cookie) = login(&gw, ADMIN_TOKEN, "alice").await;
    let cookie = cookie.unwrap();
    let history =
        send(with_cookie(&gw, Method::GET, "/admin/v1/metrics/history?window=1h", &cookie, true)).await;
    assert_eq!(history.status, 200, "{}", history.json);
    assert_eq!(history.json["bucket_secs"], 60);
    assert_eq!(history.json["buckets"].as_array().unwrap().len(), 60);
    let totals = &history.json["totals"];
    assert_eq!(totals["calls"], 3, "{}", history.json);
    assert_eq!(
        totals["errors"],
        json!({"upstream": 0, "memory": 0, "rate_limited": 0, "client": 0, "internal": 0})
    );
    let calls_in_buckets: u64 =
        history.json["buckets"].as_array().unwrap().iter().map(|b| b["calls"].as_u64().unwrap()).sum();
    assert_eq!(calls_in_buckets, 3);
    let releases =
        send(with_cookie(&gw, Method::GET, "/admin/v1/metrics/releases?window=1h", &cookie, true)).await;
    let v1 = releases.json["data"].as_array().unwrap().iter().find(|r| r["release"] == "v1").unwrap().clone();
    assert_eq!((v1["calls"].clone(), v1["share"].clone()), (json!(3), json!(1.0)), "{}", releases.json);
    let recent = send(with_cookie(&gw, Method::GET, "/admin/v1/requests/recent", &cookie, true)).await;
    assert_eq!(recent.json["data"], json!([]), "recent requests are kept in memory only");
}

#[tokio::test]
async fn e2e_console_data_health_counts_paused_records_and_what_was_injected() {
    let mock = Proc::mock(&[]);
    let gw = gateway(&mock, None, None);
    let admin = |method: Method, path: &str| client().request(method, gw.url(path)).bearer_auth(ADMIN_TOKEN);
    for (id, text) in [
        ("refunds", "Refunds are paid back within 14 days of the return."),
        ("opening-hours", "The Berlin store opens at 9 and closes at 18."),
        ("old-promo", "Winter promotion: 10% off every sofa."),
    ] {
        let record = json!({"id": id, "type": "fact", "scope": ["public"], "content": {"statement": text}});
        let created = send(admin(Method::POST, "/admin/v1/memories").json(&record)).await;
        assert_eq!(created.status, 201, "{}", created.json);
    }
    let paused = send(admin(Method::POST, "/admin/v1/memories/old-promo/pause")).await;
    assert_eq!(paused.status, 200, "{}", paused.json);
    let (key, _) = issue_key(&gw, "default", json!({"name": "shop"})).await;
    let mut body = messages_body("claude-sonnet-4-5", false);
    body["messages"][0]["content"] = json!("How long until my refund is paid back?");
    let answer =
        client().post(gw.url("/v1/messages")).header("x-api-key", &key).json(&body).send().await.unwrap();
    assert_eq!(answer.headers()["x-memory-injected"], "1");

    // The paused record counts (the index no longer holds it), and once the access counts are
    // written (the ticker, once a second) the injected record is no longer "never injected".
    let health = eventually(Duration::from_secs(20), "the injection counted in data health", || async {
        let health = send(admin(Method::GET, "/admin/v1/health/data")).await;
        (health.json["never_injected"]["count"] == 1).then_some(health.json)
    })
    .await;
    assert_eq!(health["records"]["paused"], 1, "{health}");
    assert_eq!(health["records"]["total"], 3, "{health}");
    assert_eq!(health["never_injected"]["sample"], json!(["opening-hours"]), "{health}");
}
