//! Auth and hostile input.

use super::*;

#[tokio::test]
async fn without_an_admin_token_the_admin_api_is_off() {
    let gateway = Proc::gateway_to(NO_UPSTREAM, &[], &[]);
    let http = client();
    for (method, path) in [
        (Method::GET, "/admin/v1/memories"),
        (Method::POST, "/admin/v1/memories"),
        (Method::GET, "/admin/v1/export"),
        (Method::POST, "/admin/v1/memories/forget"),
        (Method::GET, "/admin/v1/nope"),
    ] {
        for auth in [None, Some(TOKEN)] {
            let mut request =
                http.request(method.clone(), gateway.url(path)).json(&json!({"scope": "public"}));
            if let Some(token) = auth {
                request = request.bearer_auth(token);
            }
            let answer = send(request).await;
            answer.assert_error(404, "not_found_error", path);
            let message = answer.json["error"]["message"].as_str().unwrap();
            assert!(
                message.contains("admin API is off") && message.contains("MEMGATE_ADMIN_TOKEN"),
                "{message}"
            );
        }
    }
}

#[tokio::test]
async fn a_short_admin_token_stops_startup() {
    let db = TestDb::sqlite();
    let mut child = std::process::Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--upstream-url", NO_UPSTREAM, "--database-url", &db.url])
        .env("MEMGATE_ADMIN_TOKEN", "short")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("memgate started with a 5-character admin token");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(!status.success());
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(stderr.contains("admin.token") && stderr.contains("16"), "{stderr}");
}

#[tokio::test]
async fn a_wrong_or_missing_bearer_is_an_authentication_error() {
    let admin = Admin::start();
    let url = admin.gw.url("/admin/v1/memories");
    let short = &TOKEN[..TOKEN.len() - 1];
    let longer = format!("{TOKEN}x");
    let headers: Vec<Option<String>> = vec![
        None,
        Some("Bearer wrong-token-0123456789abcdef".into()),
        Some(format!("Bearer {short}")),
        Some(format!("Bearer {longer}")),
        Some(TOKEN.into()),
        Some(format!("Bearer{TOKEN}")),
        Some(format!("Basic {TOKEN}")),
        Some("Bearer ".into()),
    ];
    for header in &headers {
        for method in [Method::GET, Method::POST] {
            let mut request = admin.http.request(method.clone(), &url).json(&fact("sneaky", &["public"]));
            if let Some(value) = header {
                request = request.header("authorization", value);
            }
            let answer = send(request).await;
            answer.assert_error(401, "authentication_error", &format!("{method} with {header:?}"));
            assert!(!answer.text.contains("wrong-token"), "the presented token came back");
        }
    }
    let keyed = send(admin.http.get(&url).header("x-api-key", TOKEN)).await;
    keyed.assert_error(401, "authentication_error", "the token as x-api-key");
    assert!(admin.list_all(None, "", 50).await.is_empty(), "an unauthenticated create was stored");
}

#[tokio::test]
async fn hostile_input_gets_a_4xx_in_anthropics_shape_and_the_gateway_lives_on() {
    let admin = Admin::start();
    let id = admin.create_ok(None, &fact("Still here", &["public"])).await;
    let record_path = format!("/memories/{id}");
    let deep_array = "[".repeat(100_000) + &"]".repeat(100_000);
    let deep_content = format!(
        "{{\"type\":\"fact\",\"scope\":[\"public\"],\"content\":{{\"statement\":\"x\",\"n\":{}1{}}}}}",
        "{\"a\":".repeat(5000),
        "}".repeat(5000)
    );
    let bad_utf8: Vec<u8> =
        b"{\"type\":\"fact\",\"scope\":[\"public\"],\"content\":{\"statement\":\"\xff\xfe\"}}".to_vec();
    let long_tenant = "t".repeat(200);

    // (what, request, status, error type)
    let cases: Vec<(&str, RequestBuilder, u16, &str)> = vec![
        (
            "malformed JSON",
            admin.req(Method::POST, "/memories", None).body("{\"type\": \"fact\","),
            400,
            "invalid_request_error",
        ),
        ("empty body", admin.req(Method::POST, "/memories", None), 400, "invalid_request_error"),
        (
            "an array body",
            admin.req(Method::POST, "/memories", None).body("[1, 2]"),
            422,
            "invalid_request_error",
        ),
        (
            "a string body",
            admin.req(Method::POST, "/memories", None).body("\"fact\""),
            422,
            "invalid_request_error",
        ),
        (
            "a null body",
            admin.req(Method::POST, "/memories", None).body("null"),
            422,
            "invalid_request_error",
        ),
        (
            "an array patch",
            admin.req(Method::PATCH, &record_path, None).body("[]"),
            422,
            "invalid_request_error",
        ),
        (
            "a number to forget",
            admin.req(Method::POST, "/memories/forget", None).body("42"),
            400,
            "invalid_request_error",
        ),
        (
            "bad UTF-8",
            admin.req(Method::POST, "/memories", None).body(bad_utf8.clone()),
            400,
            "invalid_request_error",
        ),
        (
            "bad UTF-8 import",
            admin.req(Method::POST, "/import", None).body(bad_utf8.clone()),
            400,
            "invalid_request_error",
        ),
        (
            "deeply nested body",
            admin.req(Method::POST, "/memories", None).body(deep_array.clone()),
            400,
            "invalid_request_error",
        ),
        (
            "deeply nested content",
            admin.req(Method::POST, "/memories", None).body(deep_content.clone()),
            400,
            "invalid_request_error",
        ),
        (
            "tenant with spaces",
            admin.req(Method::GET, "/memories", Some("acme corp")),
            400,
            "invalid_request_error",
        ),
        (
            "200-character tenant",
            admin.req(Method::GET, "/memories", Some(&long_tenant)),
            400,
            "invalid_request_error",
        ),
        ("empty tenant", admin.req(Method::GET, "/memories", Some("")), 400, "invalid_request_error"),
        (
            "tenant with a slash",
            admin.req(Method::POST, "/memories", Some("acme/../default")).json(&fact("x", &["public"])),
            400,
            "invalid_request_error",
        ),
        (
            "non-ASCII tenant",
            admin
                .req(Method::GET, "/memories", None)
                .header("x-memory-tenant", reqwest::header::HeaderValue::from_bytes(b"t\xe9nant").unwrap()),
            400,
            "invalid_request_error",
        ),
        (
            "actor with spaces",
            admin.req(Method::GET, "/memories", None).header("x-memory-actor", "Robert'); DROP TABLE"),
            400,
            "invalid_request_error",
        ),
        (
            "If-Match not a revision",
            admin
                .req(Method::PATCH, &record_path, None)
                .header("if-match", "abc")
                .json(&json!({"priority": 1})),
            400,
            "invalid_request_error",
        ),
        (
            "If-Match empty",
            admin.req(Method::PATCH, &record_path, None).header("if-match", "").json(&json!({"priority": 1})),
            400,
            "invalid_request_error",
        ),
        (
            "If-Match a fraction",
            admin
                .req(Method::PATCH, &record_path, None)
                .header("if-match", "1.5")
                .json(&json!({"priority": 1})),
            400,
            "invalid_request_error",
        ),
        (
            "unknown query parameter",
            admin.req(Method::GET, "/memories?colour=red", None),
            400,
            "invalid_request_error",
        ),
        ("limit=abc", admin.req(Method::GET, "/memories?limit=abc", None), 400, "invalid_request_error"),
        ("negative limit", admin.req(Method::GET, "/memories?limit=-5", None), 400, "invalid_request_error"),
        (
            "unknown status",
            admin.req(Method::GET, "/memories?status=deleted", None),
            400,
            "invalid_request_error",
        ),
        (
            "q too long",
            admin.req(Method::GET, &format!("/memories?q={}", "a".repeat(300)), None),
            400,
            "invalid_request_error",
        ),
        (
            "export unknown parameter",
            admin.req(Method::GET, "/export?format=csv", None),
            400,
            "invalid_request_error",
        ),
        (
            "dry_run=maybe",
            admin.req(Method::POST, "/import?dry_run=maybe", None).body(""),
            400,
            "invalid_request_error",
        ),
        ("unknown admin path", admin.req(Method::GET, "/memorys", None), 404, "not_found_error"),
        (
            "a very long id",
            admin.req(Method::GET, &format!("/memories/{}", "i".repeat(5000)), None),
            404,
            "not_found_error",
        ),
        (
            "an id of escapes",
            admin.req(Method::GET, "/memories/..%2F..%2Fetc%00", None),
            404,
            "not_found_error",
        ),
    ];
    for (what, request, status, error_type) in cases {
        send(request).await.assert_error(status, error_type, what);
    }
    // Bodies over 1 MiB, declared or chunked, are refused without reading them whole.
    let declared = format!("Content-Length: {}\r\n\r\n", 1024 * 1024 + 1);
    let over = raw_http(&admin, "POST", "/memories", &declared, &[]).await;
    over.assert_error(413, "request_too_large", "a declared body over 1 MiB");
    let over = raw_http(&admin, "PATCH", &record_path, &declared, &[]).await;
    over.assert_error(413, "request_too_large", "a declared patch over 1 MiB");
    let size = 1024 * 1024 + 1;
    let chunk = [format!("{size:x}\r\n").into_bytes(), vec![b'x'; size]].concat();
    let over = raw_http(&admin, "POST", "/memories", "Transfer-Encoding: chunked\r\n\r\n", &chunk).await;
    over.assert_error(413, "request_too_large", "a chunked body over 1 MiB");

    admin.healthy().await;
    let record = admin.get(None, &id).await;
    assert_eq!((record.status, record.json["revision"].as_i64()), (200, Some(1)), "{}", record.text);
    assert_eq!(admin.list_all(None, "", 50).await.len(), 1, "hostile input wrote something");
    admin.create_ok(None, &fact_with_id("mem-after", "Writes still work", &["public"])).await;
}

#[tokio::test]
async fn a_wrong_method_on_an_admin_path_answers_in_anthropics_shape() {
    let admin = Admin::start();
    for (method, path) in [
        (Method::PUT, "/memories"),
        (Method::DELETE, "/memories"),
        (Method::GET, "/memories/forget"),
        (Method::GET, "/import"),
        (Method::PUT, "/memories/mem-1"),
    ] {
        let answer = send(admin.req(method.clone(), path, None)).await;
        assert!((400..500).contains(&answer.status), "{method} {path}: {}", answer.status);
        assert_eq!(
            answer.json["type"], "error",
            "{method} {path} answered {} {:?}",
            answer.status, answer.text
        );
        assert!(answer.json["error"]["type"].is_string(), "{method} {path}: {}", answer.text);
    }
    admin.healthy().await;
}
