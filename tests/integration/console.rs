//! The console's server side (src/console, docs/console.md), in process: sessions, the CSRF rule
//! and the viewer role through a tiny router (the console's own routes and an admin route behind
//! `authorize`), the metrics history's writer and queries, and the embedded files. Everything
//! that touches the store runs on SQLite and on the real PostgreSQL.

use crate::support::TestDb;
use crate::support::on_both_stores;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use memgate::console::history::{self, HistoryParams, HistoryRetention, Window};
use memgate::console::session::{self, SessionPolicy};
use memgate::console::{
    AdminTokens, CallError, CallOutcome, ConsoleAuth, MemoryOutcome, MetricsRecorder, Role,
};
use memgate::http::console::{ConsoleHost, auth};
use memgate::identity::rate_limit::Strikes;
use memgate::store::Store;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;

pub(crate) const ADMIN: &str = "admin-token-for-the-console-tests";
pub(crate) const VIEWER: &str = "viewer-token-for-the-console-tests";
const HOST: &str = "memgate.test:8080";
const ORIGIN: &str = "http://memgate.test:8080";

on_both_stores!(
    login_sets_the_cookie_and_the_store_keeps_only_its_hash,
    a_wrong_token_is_refused_and_counted,
    sessions_end_after_their_lifetime_or_when_idle,
    logout_ends_the_session_on_every_replica,
    the_csrf_rule_refuses_each_case,
    the_viewer_reads_explains_and_previews_only,
    without_an_admin_token_there_is_no_login,
    a_replicas_flush_shows_in_both_views,
    two_replicas_are_summed,
    flushes_add_and_retention_prunes,
    a_failed_flush_is_retried_whole,
    the_releases_view_gives_shares_and_savings,
    data_health_reads_the_tenants_records,
);

// ---------------------------------------------------------------- a tiny host and router

#[derive(Clone)]
pub(crate) struct Host(Arc<HostInner>);

struct HostInner {
    auth: ConsoleAuth,
    store: Store,
    strikes: Strikes,
}

impl ConsoleHost for Host {
    fn console_auth(&self) -> &ConsoleAuth {
        &self.0.auth
    }
    fn console_store(&self) -> &Store {
        &self.0.store
    }
    fn admin_strikes(&self) -> &Strikes {
        &self.0.strikes
    }
    fn strike_key(&self, _parts: &Parts) -> String {
        "127.0.0.1".to_owned()
    }
    fn body_read_timeout(&self) -> Duration {
        Duration::from_secs(5)
    }
    fn is_https(&self, parts: &Parts) -> bool {
        // As if every peer were a trusted proxy.
        memgate::http::client::forwarded_https(&parts.headers, true)
    }
}

pub(crate) async fn store(db: &TestDb) -> Store {
    let store = Store::connect(&db.url).await.unwrap();
    store.migrate().await.unwrap();
    store
}

fn host_with(store: Store, admin: Option<&str>, policy: SessionPolicy) -> Host {
    host_with_tokens(store, AdminTokens::new(admin.map(Into::into), Some(VIEWER.into())), policy)
}

pub(crate) fn host_with_tokens(store: Store, tokens: AdminTokens, policy: SessionPolicy) -> Host {
    Host(Arc::new(HostInner { auth: ConsoleAuth { tokens, policy }, store, strikes: Strikes::new(3) }))
}

async fn host(db: &TestDb) -> Host {
    host_with(store(db).await, Some(ADMIN), SessionPolicy::default())
}

/// What the lead's admin middleware does: `authorize`, strikes on a failed credential.
async fn admin_guard(State(host): State<Host>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let https = host.is_https(&parts);
    let auth = host.console_auth();
    match auth::authorize(
        &parts.headers,
        &parts.method,
        &parts.uri,
        https,
        host.console_store(),
        auth,
        memgate::clock::now_ms(),
    )
    .await
    {
        Ok(principal) => {
            let mut request = Request::from_parts(parts, body);
            request.extensions_mut().insert(principal);
            next.run(request).await
        }
        Err(refusal) => {
            if refusal.is_strike() && host.admin_strikes().fail("127.0.0.1").is_err() {
                return StatusCode::TOO_MANY_REQUESTS.into_response();
            }
            refusal.into_response()
        }
    }
}

async fn whoami(request: Request) -> Json<Value> {
    let principal = request.extensions().get::<auth::Principal>().unwrap();
    Json(
        json!({"role": principal.role.as_str(), "actor": principal.actor, "via": format!("{:?}", principal.via)}),
    )
}

pub(crate) fn router(host: Host) -> Router {
    let admin = Router::new()
        .route("/admin/v1/memories", get(whoami).post(whoami))
        .route("/admin/v1/explain", post(whoami))
        .route("/admin/v1/import", post(whoami))
        .layer(axum::middleware::from_fn_with_state(host.clone(), admin_guard));
    memgate::http::console::routes::<Host>().merge(admin).with_state(host)
}

pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Value,
    bytes: bytes::Bytes,
}

pub(crate) async fn send(router: &Router, request: axum::http::Request<Body>) -> Answer {
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Answer { status, headers, body, bytes }
}

/// A request as the console sends it: the CSRF header, the Host, and `extra` headers.
pub(crate) fn console_request(
    method: &str,
    path: &str,
    cookie: Option<&str>,
    extra: &[(&str, &str)],
    body: Option<Value>,
) -> axum::http::Request<Body> {
    let mut builder = axum::http::Request::builder().method(method).uri(path).header("host", HOST);
    if let Some(cookie) = cookie {
        builder = builder.header("cookie", format!("theme=dark; memgate_console={cookie}"));
    }
    let mut marked = true;
    for (name, value) in extra {
        if *name == "x-memgate-console" && value.is_empty() {
            marked = false;
            continue;
        }
        builder = builder.header(*name, *value);
    }
    if marked && !extra.iter().any(|(n, _)| *n == "x-memgate-console") {
        builder = builder.header("x-memgate-console", "1");
    }
    match body {
        Some(body) => {
            builder.header("content-type", "application/json").body(Body::from(body.to_string())).unwrap()
        }
        None => builder.body(Body::empty()).unwrap(),
    }
}

/// Logs in and returns the cookie value.
pub(crate) async fn login(router: &Router, token: &str, actor: Option<&str>) -> String {
    let answer = send(
        router,
        console_request("POST", "/console/session", None, &[], Some(json!({"token": token, "actor": actor}))),
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    cookie_of(&answer.headers)
}

fn cookie_of(headers: &HeaderMap) -> String {
    let set = headers["set-cookie"].to_str().unwrap();
    set.strip_prefix("memgate_console=").unwrap().split(';').next().unwrap().to_owned()
}

pub(crate) fn assert_code(answer: &Answer, status: u16, error_type: &str, code: &str) {
    assert_eq!(answer.status.as_u16(), status, "{}", answer.body);
    assert_eq!(answer.body["type"], "error", "{}", answer.body);
    assert_eq!(answer.body["error"]["type"], error_type, "{}", answer.body);
    assert_eq!(answer.body["error"]["code"], code, "{}", answer.body);
}

pub(crate) async fn count(conn: &mut sqlx::AnyConnection, sql: &'static str) -> i64 {
    sqlx::Row::get::<i64, _>(&sqlx::query(sql).fetch_one(conn).await.unwrap(), 0)
}

pub(crate) async fn raw(db: &TestDb) -> sqlx::AnyConnection {
    sqlx::any::install_default_drivers();
    <sqlx::AnyConnection as sqlx::Connection>::connect(&db.url).await.unwrap()
}

// ---------------------------------------------------------------- sessions

async fn login_sets_the_cookie_and_the_store_keeps_only_its_hash(db: TestDb) {
    let host = host(&db).await;
    // Tenants come from records and keys.
    host.console_store()
        .insert_key(&memgate::store::keys::KeyRecord {
            tenant: "beta".into(),
            id: "k-beta".into(),
            name: "bot".into(),
            secret_sha256: "0".repeat(64),
            scopes: vec![],
            permissions: vec![],
            rate_limit_per_minute: None,
            created_at_ms: 1,
            revoked_at_ms: None,
        })
        .await
        .unwrap();
    let router = router(host);
    let answer = send(
        &router,
        console_request(
            "POST",
            "/console/session",
            None,
            &[("origin", ORIGIN), ("sec-fetch-site", "same-origin")],
            Some(json!({"token": ADMIN, "actor": "alice"})),
        ),
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let set_cookie = answer.headers["set-cookie"].to_str().unwrap().to_owned();
    let cookie = cookie_of(&answer.headers);
    assert_eq!(cookie.len(), 43);
    assert!(cookie.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'), "{cookie}");
    assert_eq!(
        set_cookie,
        format!("memgate_console={cookie}; Path=/; HttpOnly; SameSite=Strict; Max-Age=43200")
    );
    assert_eq!(answer.headers["cache-control"], "no-store");
    assert!(answer.headers.contains_key("content-security-policy"));
    assert_eq!(answer.body["authenticated"], true);
    assert_eq!(answer.body["role"], "admin");
    assert_eq!(answer.body["actor"], "console:alice");
    assert_eq!(answer.body["tenants"], json!(["beta", "default"]));
    assert_eq!(answer.body["idle_timeout_secs"], 3600);
    assert!(answer.body["expires_at"].as_str().unwrap().ends_with('Z'));

    // The store has the hash, nowhere the value.
    let mut conn = raw(&db).await;
    let rows = sqlx::query("SELECT token_hash, role, actor FROM console_sessions")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    let hash: String = sqlx::Row::get(&rows[0], "token_hash");
    let expected: String = Sha256::digest(cookie.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(hash, expected);
    for column in ["token_hash", "role", "actor"] {
        let value: String = sqlx::Row::get(&rows[0], column);
        assert!(!value.contains(&cookie));
    }

    // Who am I, and the admin API with the cookie: the session's role and actor.
    let me = send(&router, console_request("GET", "/console/session", Some(&cookie), &[], None)).await;
    assert_eq!(
        (me.status, &me.body["role"], &me.body["actor"]),
        (StatusCode::OK, &json!("admin"), &json!("console:alice"))
    );
    let call = send(
        &router,
        console_request("POST", "/admin/v1/memories", Some(&cookie), &[("x-memory-actor", "mallory")], None),
    )
    .await;
    assert_eq!(call.status, StatusCode::OK, "{}", call.body);
    assert_eq!(call.body, json!({"role": "admin", "actor": "console:alice", "via": "Session"}));
    // Without an actor: `console`. Over HTTPS (a trusted proxy says so): Secure.
    let https = send(
        &router,
        console_request(
            "POST",
            "/console/session",
            None,
            &[("x-forwarded-proto", "https"), ("origin", "https://memgate.test:8080")],
            Some(json!({"token": ADMIN})),
        ),
    )
    .await;
    assert_eq!(https.status, StatusCode::OK, "{}", https.body);
    assert!(https.headers["set-cookie"].to_str().unwrap().ends_with("; Max-Age=43200; Secure"));
    assert_eq!(https.body["actor"], "console");
    // A cookie nobody issued, and no cookie: not logged in.
    let unknown =
        send(&router, console_request("GET", "/console/session", Some(&"A".repeat(43)), &[], None)).await;
    assert_eq!((unknown.status, unknown.body.clone()), (StatusCode::OK, json!({"authenticated": false})));
    let none = send(&router, console_request("GET", "/console/session", None, &[], None)).await;
    assert_eq!(none.body, json!({"authenticated": false}));
    let ended =
        send(&router, console_request("GET", "/admin/v1/memories", Some(&"A".repeat(43)), &[], None)).await;
    assert_code(&ended, 401, "authentication_error", "no_session");
}

async fn a_wrong_token_is_refused_and_counted(db: TestDb) {
    let router = router(host(&db).await);
    for _ in 0..3 {
        let answer = send(
            &router,
            console_request("POST", "/console/session", None, &[], Some(json!({"token": "not-the-token"}))),
        )
        .await;
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{}", answer.body);
        assert_eq!(answer.body["error"]["message"], "that token is not this memgate's admin or viewer token");
        assert!(answer.headers.get("set-cookie").is_none());
    }
    // Past the limit (3 a minute here): 429, even with the right token.
    let answer = send(
        &router,
        console_request("POST", "/console/session", None, &[], Some(json!({"token": "still-wrong"}))),
    )
    .await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS, "{}", answer.body);
    assert!(answer.headers.contains_key("retry-after"));
    let answer =
        send(&router, console_request("POST", "/console/session", None, &[], Some(json!({"token": ADMIN}))))
            .await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS);
    // Bad bodies are 400s, not strikes.
    let fresh = self::router(host(&db).await);
    for body in [json!({}), json!({"token": 7}), json!({"token": ADMIN, "actor": "bad actor"})] {
        let answer = send(&fresh, console_request("POST", "/console/session", None, &[], Some(body))).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", answer.body);
    }
    login(&fresh, ADMIN, None).await;
}

async fn sessions_end_after_their_lifetime_or_when_idle(db: TestDb) {
    let store = store(&db).await;
    let policy = SessionPolicy::default();
    let auth = ConsoleAuth { tokens: AdminTokens::new(Some(ADMIN.into()), None), policy };
    let t0 = 1_750_000_000_000_i64;
    let minute = 60_000;
    let (cookie, _) = session::create(&store, &auth, Role::Admin, "console:a", t0).await.unwrap();
    let headers = {
        let mut h = HeaderMap::new();
        h.insert("cookie", format!("memgate_console={cookie}").parse().unwrap());
        h.insert("x-memgate-console", "1".parse().unwrap());
        h
    };
    let uri: axum::http::Uri = "/admin/v1/memories".parse().unwrap();
    let at = |now: i64| {
        let (headers, uri, store, auth) = (&headers, &uri, &store, &auth);
        async move { auth::authorize(headers, &axum::http::Method::GET, uri, false, store, auth, now).await }
    };
    // Idle: 59 minutes without a request is fine, and that request counts as activity...
    assert!(at(t0 + 59 * minute).await.is_ok());
    // ...so 59 minutes after it is fine too, and so on, until 12 h after login.
    let mut now = t0 + 59 * minute;
    while now + 59 * minute < t0 + 12 * 60 * minute {
        now += 59 * minute;
        assert!(at(now).await.is_ok(), "at {} min", (now - t0) / minute);
    }
    assert!(matches!(at(t0 + 12 * 60 * minute).await, Err(auth::Refusal::SessionEnded)));

    // A session left alone for an hour has ended.
    let (idle, _) = session::create(&store, &auth, Role::Admin, "console:b", t0).await.unwrap();
    assert!(session::find(&store, &idle, &auth, t0 + 60 * minute - 1).await.unwrap().is_some());
    assert!(session::find(&store, &idle, &auth, t0 + 60 * minute).await.unwrap().is_none());
    // `last_seen_at` is written at most once a minute.
    let (quiet, _) = session::create(&store, &auth, Role::Admin, "console:c", t0).await.unwrap();
    let found = session::find(&store, &quiet, &auth, t0 + 30_000).await.unwrap().unwrap();
    session::touch(&store, &quiet, &found, &policy, t0 + 30_000).await.unwrap();
    assert_eq!(session::find(&store, &quiet, &auth, t0 + 31_000).await.unwrap().unwrap().last_seen_at_ms, t0);

    // Through HTTP (the handlers use the clock): a session that ended is logged out.
    let router = router(host_with(store.clone(), Some(ADMIN), policy));
    let now = memgate::clock::now_ms();
    let (old, _) =
        session::create(&store, &auth, Role::Admin, "console:d", now - 13 * 60 * minute).await.unwrap();
    let (idle, _) =
        session::create(&store, &auth, Role::Admin, "console:e", now - 61 * minute).await.unwrap();
    for cookie in [&old, &idle] {
        let me = send(&router, console_request("GET", "/console/session", Some(cookie), &[], None)).await;
        assert_eq!(me.body, json!({"authenticated": false}));
        let call = send(&router, console_request("GET", "/admin/v1/memories", Some(cookie), &[], None)).await;
        assert_code(&call, 401, "authentication_error", "no_session");
    }
    // A login deletes ended rows.
    login(&router, ADMIN, None).await;
    let left = session::prune(&store, &policy, now).await.unwrap();
    assert_eq!(left, 0, "the login pruned them already");
}

async fn logout_ends_the_session_on_every_replica(db: TestDb) {
    let a = router(host(&db).await);
    let b = router(host(&db).await);
    let cookie = login(&a, ADMIN, Some("alice")).await;
    let on_b = send(&b, console_request("GET", "/admin/v1/memories", Some(&cookie), &[], None)).await;
    assert_eq!(on_b.status, StatusCode::OK, "{}", on_b.body);
    // Logging out carries the CSRF header like any change.
    let forged = send(
        &a,
        console_request("DELETE", "/console/session", Some(&cookie), &[("x-memgate-console", "")], None),
    )
    .await;
    assert_code(&forged, 403, "permission_error", "csrf_refused");
    let out = send(&a, console_request("DELETE", "/console/session", Some(&cookie), &[], None)).await;
    assert_eq!(out.status, StatusCode::NO_CONTENT);
    assert_eq!(out.headers["set-cookie"], "memgate_console=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0");
    assert_eq!(out.headers["cache-control"], "no-store");
    let on_b = send(&b, console_request("GET", "/admin/v1/memories", Some(&cookie), &[], None)).await;
    assert_code(&on_b, 401, "authentication_error", "no_session");
    let me = send(&b, console_request("GET", "/console/session", Some(&cookie), &[], None)).await;
    assert_eq!(me.body, json!({"authenticated": false}));
    // Without a session: 204 all the same.
    let again = send(&a, console_request("DELETE", "/console/session", None, &[], None)).await;
    assert_eq!(again.status, StatusCode::NO_CONTENT);
}

async fn the_csrf_rule_refuses_each_case(db: TestDb) {
    let router = router(host(&db).await);
    let cookie = login(&router, ADMIN, None).await;
    let refused: &[(&str, &[(&str, &str)])] = &[
        ("no X-Memgate-Console", &[("x-memgate-console", "")]),
        ("X-Memgate-Console not 1", &[("x-memgate-console", "yes")]),
        ("another host", &[("origin", "http://evil.test:8080")]),
        ("another port", &[("origin", "http://memgate.test:9090")]),
        ("another scheme", &[("origin", "https://memgate.test:8080")]),
        ("Origin null", &[("origin", "null")]),
        ("cross-site fetch", &[("sec-fetch-site", "cross-site")]),
        ("same-site fetch", &[("sec-fetch-site", "same-site")]),
        ("typed URL", &[("sec-fetch-site", "none")]),
    ];
    for (case, headers) in refused {
        for (method, path) in
            [("GET", "/admin/v1/memories"), ("POST", "/admin/v1/memories"), ("GET", "/console/session")]
        {
            let answer = send(&router, console_request(method, path, Some(&cookie), headers, None)).await;
            assert_code(&answer, 403, "permission_error", "csrf_refused");
            assert_eq!(
                answer.body["error"]["message"], "console requests must come from the console itself",
                "{case}"
            );
        }
        let login = send(
            &router,
            console_request("POST", "/console/session", None, headers, Some(json!({"token": ADMIN}))),
        )
        .await;
        assert_code(&login, 403, "permission_error", "csrf_refused");
        assert!(login.headers.get("set-cookie").is_none(), "{case}");
    }
    // The console's own requests pass: same origin (default port or not), same-origin fetch.
    let passing = [("origin", ORIGIN), ("sec-fetch-site", "same-origin")];
    let ok =
        send(&router, console_request("POST", "/admin/v1/memories", Some(&cookie), &passing, None)).await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.body);
    let default_port = axum::http::Request::builder()
        .method("GET")
        .uri("/admin/v1/memories")
        .header("host", "memgate.test")
        .header("origin", "http://MEMGATE.test:80")
        .header("x-memgate-console", "1")
        .header("cookie", format!("memgate_console={cookie}"))
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&router, default_port).await.status, StatusCode::OK);
    // A bearer token needs no CSRF header (a browser never sends one by itself).
    let bearer = axum::http::Request::builder()
        .method("POST")
        .uri("/admin/v1/memories")
        .header("authorization", format!("Bearer {ADMIN}"))
        .header("origin", "http://evil.test")
        .body(Body::empty())
        .unwrap();
    let answer = send(&router, bearer).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(answer.body["via"], "Bearer");
}

async fn the_viewer_reads_explains_and_previews_only(db: TestDb) {
    let router = router(host(&db).await);
    let cookie = login(&router, VIEWER, Some("vic")).await;
    let me = send(&router, console_request("GET", "/console/session", Some(&cookie), &[], None)).await;
    assert_eq!(me.body["role"], "viewer");
    let allowed = [
        ("GET", "/admin/v1/memories"),
        ("POST", "/admin/v1/explain"),
        ("POST", "/admin/v1/import?dry_run=true"),
    ];
    for (method, path) in allowed {
        let answer = send(&router, console_request(method, path, Some(&cookie), &[], None)).await;
        assert_eq!(answer.status, StatusCode::OK, "{method} {path}: {}", answer.body);
        assert_eq!(answer.body["role"], "viewer");
    }
    let refused = [
        ("POST", "/admin/v1/memories"),
        ("POST", "/admin/v1/import?dry_run=false"),
        ("POST", "/admin/v1/import"),
    ];
    for (method, path) in refused {
        let answer = send(&router, console_request(method, path, Some(&cookie), &[], None)).await;
        assert_code(&answer, 403, "permission_error", "read_only_role");
        assert_eq!(
            answer.body["error"]["message"],
            "this session is read-only (viewer); log in with the admin token to change anything"
        );
    }
    // The same with the viewer token as a bearer.
    let bearer = |method: &str, path: &str| {
        axum::http::Request::builder()
            .method(method)
            .uri(path)
            .header("authorization", format!("Bearer {VIEWER}"))
            .body(Body::empty())
            .unwrap()
    };
    assert_eq!(send(&router, bearer("GET", "/admin/v1/memories")).await.status, StatusCode::OK);
    assert_code(
        &send(&router, bearer("POST", "/admin/v1/memories")).await,
        403,
        "permission_error",
        "read_only_role",
    );
    // Logging out is every role's right.
    let out = send(&router, console_request("DELETE", "/console/session", Some(&cookie), &[], None)).await;
    assert_eq!(out.status, StatusCode::NO_CONTENT);
}

async fn without_an_admin_token_there_is_no_login(db: TestDb) {
    let router = router(host_with(store(&db).await, None, SessionPolicy::default()));
    let answer =
        send(&router, console_request("POST", "/console/session", None, &[], Some(json!({"token": VIEWER}))))
            .await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    assert_eq!(
        answer.body["error"]["message"],
        "the admin API is off; set MEMGATE_ADMIN_TOKEN to turn it on"
    );
    let me = send(&router, console_request("GET", "/console/session", None, &[], None)).await;
    assert_eq!(me.body, json!({"authenticated": false}));
    let admin = send(
        &router,
        console_request("GET", "/admin/v1/memories", None, &[("authorization", "Bearer x")], None),
    )
    .await;
    assert_eq!(admin.status, StatusCode::NOT_FOUND);
    // The files are served all the same.
    let index = send(&router, console_request("GET", "/console/", None, &[], None)).await;
    assert_eq!(index.status, StatusCode::OK);
}

// ---------------------------------------------------------------- the metrics history

const NOW: i64 = 1_750_000_000_000; // 2025-06-15T15:06:40Z
const MINUTE: i64 = 60_000;

fn call(ms: f64, error: Option<CallError>, memory: MemoryOutcome) -> CallOutcome {
    CallOutcome {
        error,
        memory,
        injected_records: 2,
        injected_tokens: 200,
        visible_tokens: 2000,
        added_latency: Duration::from_secs_f64(ms / 1000.0),
    }
}

fn ok(ms: f64) -> CallOutcome {
    call(ms, None, MemoryOutcome::Ok)
}

fn releases() -> Vec<String> {
    vec!["v1".into(), "v2".into(), "v3".into()]
}

async fn hour(store: &Store, tenant: &str, release: Option<&str>, now: i64) -> history::History {
    let params = HistoryParams { window: Window::Hour, release: release.map(Into::into) };
    history::history(store, tenant, &params, &releases(), now).await.unwrap()
}

async fn day(store: &Store, tenant: &str, now: i64) -> history::History {
    let params = HistoryParams { window: Window::Day, release: None };
    history::history(store, tenant, &params, &releases(), now).await.unwrap()
}

async fn a_replicas_flush_shows_in_both_views(db: TestDb) {
    let store = store(&db).await;
    let recorder = MetricsRecorder::new("replica-a", HistoryRetention::default());
    let minute = NOW - NOW % MINUTE;
    for i in 0..100 {
        recorder.record_at(minute - 2 * MINUTE + i * 100, "acme", "v1", &ok(1.0));
    }
    recorder.record_at(minute, "acme", "v1", &call(3.0, Some(CallError::Upstream), MemoryOutcome::Ok));
    recorder.record_at(minute, "acme", "v2", &call(8.0, Some(CallError::Memory), MemoryOutcome::Degraded));
    recorder.record_at(minute, "acme", "", &call(0.1, Some(CallError::RateLimited), MemoryOutcome::Skipped));
    recorder.record_at(minute, "other", "v1", &ok(1.0));
    let report = recorder.flush_at(&store, NOW).await.unwrap();
    assert_eq!((report.minutes, report.calls), (5, 104));
    assert_eq!(recorder.unwritten(), 0);

    let h = hour(&store, "acme", None, NOW).await;
    assert_eq!((h.buckets.len(), h.bucket_secs), (60, 60));
    assert_eq!(h.buckets.last().unwrap().t, memgate::clock::format_ms(minute));
    assert_eq!(h.from, memgate::clock::format_ms(minute - 59 * MINUTE));
    assert_eq!(h.to, memgate::clock::format_ms(minute + MINUTE));
    let newest = &h.buckets[59].figures;
    assert_eq!(newest.calls, 3);
    assert_eq!((newest.errors.upstream, newest.errors.memory, newest.errors.rate_limited), (1, 1, 1));
    assert_eq!((newest.memory.ok, newest.memory.degraded, newest.memory.skipped), (1, 1, 1));
    let older = &h.buckets[57].figures;
    assert_eq!(older.calls, 100);
    assert!((0.75..=1.1).contains(&older.added_latency_ms.p50), "{:?}", older.added_latency_ms);
    assert_eq!(h.buckets[58].figures.calls, 0, "no holes: empty buckets are zeros");
    assert_eq!(h.totals.calls, 103);
    assert_eq!(h.totals.injected_tokens, 103 * 200);
    assert_eq!(h.totals.visible_tokens, 103 * 2000);
    let v2 = hour(&store, "acme", Some("v2"), NOW).await;
    assert_eq!((v2.totals.calls, v2.release.as_deref()), (1, Some("v2")));
    assert_eq!(hour(&store, "nobody", None, NOW).await.totals.calls, 0);

    let d = day(&store, "acme", NOW).await;
    assert_eq!((d.buckets.len(), d.bucket_secs), (288, 300));
    assert_eq!(d.totals, h.totals);
    // minute - 2 and minute fall in two 5-minute buckets.
    assert_eq!(d.buckets.iter().filter(|b| b.figures.calls > 0).count(), 2);
    // Unknown releases are a 404.
    let params = HistoryParams { window: Window::Hour, release: Some("v9".into()) };
    let err = history::history(&store, "acme", &params, &releases(), NOW).await.unwrap_err();
    assert_eq!(err.kind(), memgate::error::ErrorKind::NotFound);
    // Serialized as API.md shapes it.
    let json = serde_json::to_value(&h).unwrap();
    assert_eq!(json["window"], "1h");
    assert_eq!(json["buckets"][59]["errors"]["upstream"], 1);
    assert!(json["buckets"][59]["added_latency_ms"]["p99"].is_number());
}

async fn two_replicas_are_summed(db: TestDb) {
    let store = store(&db).await;
    let minute = NOW - NOW % MINUTE;
    let a = MetricsRecorder::new("replica-a", HistoryRetention::default());
    let b = MetricsRecorder::new("replica-b", HistoryRetention::default());
    for i in 0..30 {
        a.record_at(minute + i, "acme", "v1", &ok(1.0));
    }
    for i in 0..12 {
        b.record_at(minute + i, "acme", "v1", &ok(40.0));
    }
    b.record_at(minute - 6 * MINUTE, "acme", "v1", &ok(1.0));
    a.flush_at(&store, NOW).await.unwrap();
    b.flush_at(&store, NOW).await.unwrap();
    let h = hour(&store, "acme", None, NOW).await;
    assert_eq!(h.buckets[59].figures.calls, 42);
    assert_eq!(h.buckets[53].figures.calls, 1);
    // The quantiles come from the summed histograms: 12 of 42 calls took 40 ms.
    let latency = &h.buckets[59].figures.added_latency_ms;
    assert!(latency.p50 < 1.5 && latency.p99 > 30.0, "{latency:?}");
    let d = day(&store, "acme", NOW).await;
    assert_eq!(d.totals.calls, 43);
    // Minute rows are per replica; the 5-minute rows are shared.
    let mut conn = raw(&db).await;
    let minute_rows = "SELECT COUNT(*) FROM metric_buckets WHERE bucket_secs = 60 AND replica <> ''";
    assert_eq!(count(&mut conn, minute_rows).await, 3);
    let shared_rows = "SELECT COUNT(*) FROM metric_buckets WHERE bucket_secs = 300 AND replica = ''";
    assert_eq!(count(&mut conn, shared_rows).await, 2);
}

async fn flushes_add_and_retention_prunes(db: TestDb) {
    let store = store(&db).await;
    let retention = HistoryRetention::new(2, 1); // 2 days of 5-minute rows, 1 h of minute rows
    let recorder = MetricsRecorder::new("r", retention);
    let minute = NOW - NOW % MINUTE;
    recorder.record_at(minute, "acme", "v1", &ok(1.0));
    recorder.flush_at(&store, NOW).await.unwrap();
    recorder.record_at(minute + 1, "acme", "v1", &ok(1.0));
    recorder.flush_at(&store, NOW).await.unwrap();
    assert_eq!(hour(&store, "acme", None, NOW).await.buckets[59].figures.calls, 2, "added, not replaced");

    // Two hours later the minute rows are gone, the 5-minute rows stay.
    let later = NOW + 2 * 60 * MINUTE;
    let report = recorder.flush_at(&store, later).await.unwrap();
    assert_eq!(report.pruned, 1);
    assert_eq!(hour(&store, "acme", None, NOW).await.totals.calls, 0);
    assert_eq!(day(&store, "acme", later).await.totals.calls, 2);
    // The next prune waits ten minutes; three days later the 5-minute rows are gone too.
    assert_eq!(recorder.flush_at(&store, later + MINUTE).await.unwrap().pruned, 0);
    assert_eq!(recorder.flush_at(&store, NOW + 3 * 24 * 60 * MINUTE).await.unwrap().pruned, 1);
    assert_eq!(day(&store, "acme", later).await.totals.calls, 0);
}

async fn a_failed_flush_is_retried_whole(db: TestDb) {
    let store = store(&db).await;
    let recorder = MetricsRecorder::new("r", HistoryRetention::default());
    let minute = NOW - NOW % MINUTE;
    recorder.record_at(minute, "acme", "v1", &ok(1.0));
    recorder.record_at(minute, "acme", "v2", &ok(1.0));
    let mut conn = raw(&db).await;
    sqlx::query("ALTER TABLE metric_buckets RENAME TO metric_buckets_away").execute(&mut conn).await.unwrap();
    assert!(recorder.flush_at(&store, NOW).await.is_err());
    assert_eq!(recorder.unwritten(), 2);
    recorder.record_at(minute, "acme", "v1", &ok(1.0));
    sqlx::query("ALTER TABLE metric_buckets_away RENAME TO metric_buckets").execute(&mut conn).await.unwrap();
    let report = recorder.flush_at(&store, NOW).await.unwrap();
    assert_eq!(report.calls, 3);
    let h = hour(&store, "acme", None, NOW).await;
    assert_eq!(h.totals.calls, 3);
    assert_eq!(hour(&store, "acme", Some("v1"), NOW).await.totals.calls, 2);
}

async fn the_releases_view_gives_shares_and_savings(db: TestDb) {
    let store = store(&db).await;
    let recorder = MetricsRecorder::new("r", HistoryRetention::default());
    let minute = NOW - NOW % MINUTE;
    for i in 0..90 {
        let error = (i < 3).then_some(CallError::Upstream);
        recorder.record_at(minute - 30 * MINUTE, "acme", "v1", &call(1.0, error, MemoryOutcome::Ok));
    }
    for _ in 0..10 {
        recorder.record_at(minute - 2 * 60 * MINUTE, "acme", "v2", &call(2.0, None, MemoryOutcome::Ok));
    }
    recorder.record_at(minute, "acme", "", &call(0.1, Some(CallError::Client), MemoryOutcome::Skipped));
    recorder.flush_at(&store, NOW).await.unwrap();

    let day = history::releases(&store, "acme", Window::Day, &releases(), NOW).await.unwrap();
    let names: Vec<&str> = day.data.iter().map(|r| r.release.as_str()).collect();
    assert_eq!(names, ["v1", "v2", "v3"], "every defined release, by name; unrouted calls are not a release");
    let v1 = &day.data[0];
    assert_eq!((v1.calls, v1.share, v1.error_rate), (90, 0.9, 3.0 / 90.0));
    assert_eq!((v1.injected_tokens, v1.visible_tokens, v1.saved_tokens), (18_000, 180_000, 162_000));
    assert_eq!((v1.injected_tokens_per_call, v1.saved_share), (200.0, 0.9));
    let v3 = &day.data[2];
    assert_eq!((v3.calls, v3.share, v3.error_rate, v3.saved_share), (0, 0.0, 0.0, 0.0));
    // The last hour saw only v1.
    let hour = history::releases(&store, "acme", Window::Hour, &releases(), NOW).await.unwrap();
    assert_eq!((hour.data[0].calls, hour.data[0].share, hour.data[1].calls), (90, 1.0, 0));
    let json = serde_json::to_value(&day).unwrap();
    assert_eq!(json["window"], "24h");
    assert_eq!(json["data"][0]["saved_share"], 0.9);
}

async fn data_health_reads_the_tenants_records(db: TestDb) {
    let store = store(&db).await;
    let schemas = memgate::memory::checks::schemas::SchemaSet::load(None).unwrap();
    let envelope = |id: &str, content: Value| memgate::record::Envelope {
        id: Some(id.into()),
        record_type: "fact".into(),
        schema_version: "v1".into(),
        scope: vec!["public".into()],
        valid_from_ms: 0,
        valid_until_ms: memgate::record::OPEN_END_MS,
        priority: 3,
        key: None,
        aliases: vec![],
        content,
        metadata: serde_json::Map::new(),
        status: None,
    };
    // Written straight to the store, as an old schema would have let them in.
    store.create_record("acme", &envelope("f-1", json!({"statement": "ok"})), "x", "t", 1).await.unwrap();
    store.create_record("acme", &envelope("f-2", json!({"statement": ""})), "x", "t", 1).await.unwrap();
    store.create_record("acme", &envelope("f-3", json!({"tier": "gold"})), "x", "t", 1).await.unwrap();
    store.create_record("other", &envelope("f-4", json!({"statement": "x"})), "x", "t", 1).await.unwrap();
    let health =
        memgate::console::data_health::data_health_from_store(&store, "acme", &schemas, NOW).await.unwrap();
    assert_eq!((health.records.total, health.live), (3, 3));
    assert_eq!(health.non_empty_content.count, 2);
    let failing: Vec<&str> = health.schema_failures.items.iter().map(|f| f.id.as_str()).collect();
    assert_eq!(failing, ["f-2", "f-3"]);
    assert_eq!(health.never_injected.count, 3);
}

// ---------------------------------------------------------------- the files

#[tokio::test]
async fn the_files_are_served_with_their_rules() {
    let db = TestDb::sqlite();
    let router = router(host(&db).await);
    let get = |path: &str, headers: &[(&str, &str)]| {
        let mut builder = axum::http::Request::builder().method("GET").uri(path);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(Body::empty()).unwrap()
    };
    let security = |answer: &Answer| {
        let h = &answer.headers;
        assert_eq!(h["content-security-policy"], memgate::http::console::assets::CSP);
        assert_eq!(h["x-content-type-options"], "nosniff");
        assert_eq!(h["referrer-policy"], "no-referrer");
        assert_eq!(h["x-frame-options"], "DENY");
        assert_eq!(h["cross-origin-opener-policy"], "same-origin");
        assert_eq!(h["cross-origin-resource-policy"], "same-origin");
    };

    let redirect = send(&router, get("/console?tenant=acme", &[])).await;
    assert_eq!(redirect.status, StatusCode::PERMANENT_REDIRECT);
    assert_eq!(redirect.headers["location"], "/console/?tenant=acme");
    security(&redirect);
    assert_eq!(send(&router, get("/console", &[])).await.headers["location"], "/console/");

    let index = send(&router, get("/console/", &[])).await;
    assert_eq!(index.status, StatusCode::OK);
    assert_eq!(index.headers["content-type"], "text/html; charset=utf-8");
    assert_eq!(index.headers["cache-control"], "no-cache");
    let etag = index.headers["etag"].to_str().unwrap().to_owned();
    assert!(etag.starts_with('"') && etag.len() == 34, "{etag}");
    assert_eq!(index.bytes.as_ref(), std::fs::read("console/dist/index.html").unwrap());
    security(&index);
    let same = send(&router, get("/console/index.html", &[])).await;
    assert_eq!((same.status, same.bytes.clone()), (StatusCode::OK, index.bytes.clone()));

    let revalidated = send(&router, get("/console/", &[("if-none-match", &etag)])).await;
    assert_eq!(revalidated.status, StatusCode::NOT_MODIFIED);
    assert!(revalidated.bytes.is_empty());
    assert_eq!(revalidated.headers["etag"], etag.as_str());
    security(&revalidated);
    let changed = send(&router, get("/console/", &[("if-none-match", "\"0123\"")])).await;
    assert_eq!(changed.status, StatusCode::OK);

    let head = axum::http::Request::builder().method("HEAD").uri("/console/").body(Body::empty()).unwrap();
    let head = send(&router, head).await;
    assert_eq!(head.status, StatusCode::OK);
    assert!(head.bytes.is_empty());

    let html = String::from_utf8(index.bytes.to_vec()).unwrap();
    let script = html.split("./assets/").nth(1).unwrap().split('"').next().unwrap();
    let asset = send(&router, get(&format!("/console/assets/{script}"), &[])).await;
    assert_eq!(asset.status, StatusCode::OK);
    assert_eq!(asset.headers["cache-control"], "public, max-age=31536000, immutable");
    let expected_type =
        if script.ends_with(".js") { "text/javascript; charset=utf-8" } else { "text/css; charset=utf-8" };
    assert_eq!(asset.headers["content-type"], expected_type);
    security(&asset);

    for path in [
        "/console/assets/missing-1234.js",
        "/console/records",
        "/console/assets/",
        "/console/a/b/c",
        "/console/index.htm",
    ] {
        let missing = send(&router, get(path, &[])).await;
        assert_eq!(missing.status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(missing.body["type"], "error", "{path}");
        assert_eq!(missing.body["error"]["type"], "not_found_error", "{path}");
        security(&missing);
    }
    // A method the files do not take: 405, with the headers still.
    let post = axum::http::Request::builder().method("POST").uri("/console/").body(Body::empty()).unwrap();
    let post = send(&router, post).await;
    assert_eq!(post.status, StatusCode::METHOD_NOT_ALLOWED);
    security(&post);
    // The session endpoint carries them too, and no-store.
    let session = send(&router, get("/console/session", &[])).await;
    security(&session);
    assert_eq!(session.headers["cache-control"], "no-store");
}
