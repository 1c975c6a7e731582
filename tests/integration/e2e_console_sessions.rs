//! The console's sessions and the admin API's guard against the real binary, as an operator sees
//! them: a session is bound to the token that opened it (rotating the token ends it, a restart
//! with the same token keeps it, `memgate console logout-all` ends them all), only requests that
//! present a credential count as admin strikes and a live session is never locked out, an IPv6
//! client is counted by its /64, the viewer's share of the admin API under its real paths, and a
//! login body that stalls. Each test failed before its fix (`MEMGATE_TEST_BIN`).

use crate::e2e_identity::{ADMIN_TOKEN, UPSTREAM_KEY};
use crate::support::{Proc, TempDir, TestDb, client};
use reqwest::{Method, RequestBuilder, StatusCode};
use serde_json::{Value, json};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const VIEWER_TOKEN: &str = "test-viewer-token-0123456789";
const ROTATED_ADMIN_TOKEN: &str = "rotated-admin-token-0123456789";

/// A managed gateway on `db` with `admin` (and `viewer`, when given) as its tokens, reading
/// `toml` as its config when given.
fn gateway(mock: &Proc, db: &TestDb, admin: &str, viewer: Option<&str>, toml: Option<&str>) -> Proc {
    let dir = TempDir::new("console-sessions");
    let config = dir.path.join("memgate.toml");
    std::fs::write(
        &config,
        format!("[memory]\nfunnel_timeout_ms = 5000\ndefault_release = \"v1\"\n{}", toml.unwrap_or("")),
    )
    .unwrap();
    let mut env = vec![("ANTHROPIC_API_KEY", UPSTREAM_KEY), ("MEMGATE_ADMIN_TOKEN", admin)];
    if let Some(viewer) = viewer {
        env.push(("MEMGATE_ADMIN_VIEWER_TOKEN", viewer));
    }
    let gateway = Proc::gateway(
        mock,
        &["--auth-mode", "managed", "--database-url", &db.url, "--config", config.to_str().unwrap()],
        &env,
    );
    // The config was read at start.
    drop(dir);
    gateway
}

struct Answer {
    status: StatusCode,
    json: Value,
}

async fn send(request: RequestBuilder) -> Answer {
    let response = request.send().await.unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    Answer { status, json: serde_json::from_str(&text).unwrap_or(Value::Null) }
}

impl Answer {
    fn code(&self) -> &str {
        self.json["error"]["code"].as_str().unwrap_or("")
    }
}

/// Logs in as the app does; returns the cookie's value.
async fn login(gw: &Proc, token: &str) -> String {
    let response = client()
        .post(gw.url("/console/session"))
        .header("x-memgate-console", "1")
        .json(&json!({"token": token, "actor": "alice"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let set_cookie = response.headers()["set-cookie"].to_str().unwrap().to_owned();
    set_cookie.split(';').next().unwrap().strip_prefix("memgate_console=").unwrap().to_owned()
}

/// A request as the app sends it with the session cookie.
fn with_cookie(gw: &Proc, method: Method, path: &str, cookie: &str) -> RequestBuilder {
    client()
        .request(method, gw.url(path))
        .header("cookie", format!("memgate_console={cookie}"))
        .header("x-memgate-console", "1")
}

fn new_key() -> Value {
    json!({"name": "minted-by-a-session", "scopes": ["public"]})
}

/// Stops a gateway the way an operator does, and waits for it to be gone.
fn stop(mut gw: Proc) {
    gw.terminate();
    gw.wait_exit(Duration::from_secs(20)).expect("memgate did not exit after SIGTERM");
}

#[tokio::test]
async fn e2e_console_a_rotated_token_ends_its_sessions_and_the_same_token_keeps_them() {
    let mock = Proc::mock(&[]);
    let db = TestDb::sqlite();
    let gw = gateway(&mock, &db, ADMIN_TOKEN, Some(VIEWER_TOKEN), None);
    let admin = login(&gw, ADMIN_TOKEN).await;
    let viewer = login(&gw, VIEWER_TOKEN).await;
    stop(gw);

    // A restart with the same tokens: both sessions go on.
    let gw = gateway(&mock, &db, ADMIN_TOKEN, Some(VIEWER_TOKEN), None);
    for cookie in [&admin, &viewer] {
        let read = send(with_cookie(&gw, Method::GET, "/admin/v1/keys", cookie)).await;
        assert_eq!(read.status, 200, "{}", read.json);
    }
    stop(gw);

    // A new admin token and no viewer token: neither session opens anything, not even a key.
    let gw = gateway(&mock, &db, ROTATED_ADMIN_TOKEN, None, None);
    let minted = send(with_cookie(&gw, Method::POST, "/admin/v1/keys", &admin).json(&new_key())).await;
    assert_eq!((minted.status, minted.code()), (StatusCode::UNAUTHORIZED, "no_session"), "{}", minted.json);
    for cookie in [&admin, &viewer] {
        let read = send(with_cookie(&gw, Method::GET, "/admin/v1/keys", cookie)).await;
        assert_eq!((read.status, read.code()), (StatusCode::UNAUTHORIZED, "no_session"), "{}", read.json);
        let who = send(with_cookie(&gw, Method::GET, "/console/session", cookie)).await;
        assert_eq!(who.json, json!({"authenticated": false}));
    }
    let keys =
        send(client().get(gw.url("/admin/v1/keys")).bearer_auth(ROTATED_ADMIN_TOKEN)).await.json["data"]
            .clone();
    assert_eq!(keys, json!([]), "a key was minted through an ended session");
    // The new token logs in as usual.
    let fresh = login(&gw, ROTATED_ADMIN_TOKEN).await;
    let read = send(with_cookie(&gw, Method::GET, "/admin/v1/keys", &fresh)).await;
    assert_eq!(read.status, 200, "{}", read.json);
}

#[tokio::test]
async fn e2e_console_logout_all_ends_every_live_session() {
    let mock = Proc::mock(&[]);
    let db = TestDb::sqlite();
    let gw = gateway(&mock, &db, ADMIN_TOKEN, Some(VIEWER_TOKEN), None);
    let cookies =
        [login(&gw, ADMIN_TOKEN).await, login(&gw, ADMIN_TOKEN).await, login(&gw, VIEWER_TOKEN).await];
    for cookie in &cookies {
        assert_eq!(send(with_cookie(&gw, Method::GET, "/admin/v1/keys", cookie)).await.status, 200);
    }

    // From another shell, while memgate runs: no admin token needed, only the database.
    let mut command = std::process::Command::new(crate::support::gateway_bin());
    command.args(["console", "logout-all", "--database-url", &db.url]);
    for var in ["MEMGATE_DATABASE_URL", "MEMGATE_ADMIN_TOKEN", "MEMGATE_ADMIN_VIEWER_TOKEN"] {
        command.env_remove(var);
    }
    let output = command.output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "memgate console logout-all failed: {stderr}");
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "3", "{stderr}");

    for cookie in &cookies {
        let read = send(with_cookie(&gw, Method::GET, "/admin/v1/keys", cookie)).await;
        assert_eq!((read.status, read.code()), (StatusCode::UNAUTHORIZED, "no_session"), "{}", read.json);
    }
    assert_eq!(send(client().get(gw.url("/admin/v1/keys")).bearer_auth(ADMIN_TOKEN)).await.status, 200);
}

async fn keys_from(gw: &Proc, client_addr: &str, credential: Option<&str>, cookie: Option<&str>) -> Answer {
    let mut request = client().get(gw.url("/admin/v1/keys")).header("x-forwarded-for", client_addr);
    if let Some(token) = credential {
        request = request.bearer_auth(token);
    }
    if let Some(cookie) = cookie {
        request =
            request.header("cookie", format!("memgate_console={cookie}")).header("x-memgate-console", "1");
    }
    send(request).await
}

#[tokio::test]
async fn e2e_console_only_presented_credentials_are_strikes_and_a_live_session_is_never_locked_out() {
    let mock = Proc::mock(&[]);
    let db = TestDb::sqlite();
    // Behind a trusted proxy (this test), so that each phase has an address of its own.
    let toml = "[admin]\nrate_limit_per_minute = 5\n[client_ip]\ntrusted_proxies = [\"127.0.0.1\"]\n";
    let gw = gateway(&mock, &db, ADMIN_TOKEN, None, Some(toml));
    let live = login(&gw, ADMIN_TOKEN).await;

    // What a page on another site can make a browser send: no credential at all. Many of them
    // lock nobody out.
    let bystander = "203.0.113.10";
    for _ in 0..40 {
        let answer = keys_from(&gw, bystander, None, None).await;
        assert_eq!((answer.status, answer.code()), (StatusCode::UNAUTHORIZED, "admin_token_invalid"));
    }
    assert_eq!(keys_from(&gw, bystander, Some(ADMIN_TOKEN), None).await.status, 200);
    assert_eq!(keys_from(&gw, bystander, None, Some(&live)).await.status, 200);

    // Wrong tokens still lock the address out, the right token with it...
    let guesser = "203.0.113.20";
    let mut statuses = Vec::new();
    for i in 0..7 {
        statuses.push(
            keys_from(&gw, guesser, Some(&format!("wrong-token-guess-{i:06}")), None).await.status.as_u16(),
        );
    }
    assert_eq!(statuses, [401, 401, 401, 401, 401, 429, 429]);
    assert_eq!(keys_from(&gw, guesser, Some(ADMIN_TOKEN), None).await.status, 429);
    // ...but a live session from there goes on: its cookie is nothing one could guess.
    let through = keys_from(&gw, guesser, None, Some(&live)).await;
    assert_eq!(through.status, 200, "{}", through.json);

    // Every address of one IPv6 /64 is one client: rotating through them buys no fresh guesses.
    let mut statuses = Vec::new();
    for i in 1..=7 {
        let rotating = format!("2001:db8:7:7::{i:x}");
        let guess = format!("wrong-token-guess-{i:06}");
        statuses.push(keys_from(&gw, &rotating, Some(&guess), None).await.status.as_u16());
    }
    assert_eq!(statuses, [401, 401, 401, 401, 401, 429, 429]);
    assert_eq!(keys_from(&gw, "2001:db8:7:7:ffff::1", Some(ADMIN_TOKEN), None).await.status, 429);
    // The next /64 is another client.
    assert_eq!(keys_from(&gw, "2001:db8:7:8::1", Some(ADMIN_TOKEN), None).await.status, 200);

    // A cookie that opens no session is a presented credential: it counts.
    let prober = "203.0.113.30";
    let mut statuses = Vec::new();
    for i in 0..6 {
        let dead = format!("{i:0>43}");
        statuses.push(keys_from(&gw, prober, None, Some(&dead)).await.status.as_u16());
    }
    assert_eq!(statuses, [401, 401, 401, 401, 401, 429]);
}

#[tokio::test]
async fn e2e_console_the_viewer_explains_and_previews_imports_under_the_real_paths() {
    let mock = Proc::mock(&[]);
    let db = TestDb::sqlite();
    let gw = gateway(&mock, &db, ADMIN_TOKEN, Some(VIEWER_TOKEN), None);
    let viewer_session = login(&gw, VIEWER_TOKEN).await;
    let record = json!({"id": "opening-hours", "type": "fact", "scope": ["public"],
        "content": {"statement": "The Berlin store opens at 9."}});
    let jsonl = format!("{record}\n");
    let explain = json!({"request": {"model": "claude-test", "max_tokens": 8,
        "messages": [{"role": "user", "content": "When does the Berlin store open?"}]}});

    let by_bearer =
        |method: Method, path: &str| client().request(method, gw.url(path)).bearer_auth(VIEWER_TOKEN);
    let by_session = |method: Method, path: &str| with_cookie(&gw, method, path, &viewer_session);
    for (how, request) in
        [("bearer", &by_bearer as &dyn Fn(Method, &str) -> RequestBuilder), ("session", &by_session)]
    {
        let explained = send(request(Method::POST, "/admin/v1/explain").json(&explain)).await;
        assert_eq!(explained.status, 200, "{how}: {}", explained.json);
        assert_eq!(explained.json["status"], "ok", "{how}: {}", explained.json);
        assert_eq!(explained.json["request"], explain["request"], "{how}: {}", explained.json);
        let preview = send(request(Method::POST, "/admin/v1/import?dry_run=true").body(jsonl.clone())).await;
        assert_eq!(preview.status, 200, "{how}: {}", preview.json);
        assert_eq!(preview.json["counts"]["new"], 1, "{how}: {}", preview.json);
        let applied = send(request(Method::POST, "/admin/v1/import").body(jsonl.clone())).await;
        assert_eq!((applied.status, applied.code()), (StatusCode::FORBIDDEN, "read_only_role"), "{how}");
        let applied = send(request(Method::POST, "/admin/v1/import?dry_run=false").body(jsonl.clone())).await;
        assert_eq!((applied.status, applied.code()), (StatusCode::FORBIDDEN, "read_only_role"), "{how}");
    }
    let stored =
        send(client().get(gw.url("/admin/v1/memories/opening-hours")).bearer_auth(ADMIN_TOKEN)).await;
    assert_eq!(stored.status, 404, "the viewer imported: {}", stored.json);
}

#[tokio::test]
async fn e2e_console_a_login_body_that_stalls_gets_408() {
    let mock = Proc::mock(&[]);
    let db = TestDb::sqlite();
    let gw = gateway(&mock, &db, ADMIN_TOKEN, None, Some("[limits]\nbody_read_timeout_ms = 500\n"));
    let addr = gw.base.trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "POST /console/session HTTP/1.1\r\nhost: {addr}\r\nx-memgate-console: 1\r\n\
         content-type: application/json\r\ncontent-length: 200\r\n\r\n{{\"token\": \"{ADMIN_TOKEN}"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    // The rest never comes; the connection stays open.
    let mut answer = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(15), stream.read(&mut answer))
        .await
        .expect("memgate waited forever for a stalled login body")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"timeout_error\""), "{answer}");
    assert!(!answer.to_ascii_lowercase().contains("set-cookie"), "{answer}");
}
