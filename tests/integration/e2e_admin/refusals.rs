//! Refusals: every problem named by JSON path and kind, and secrets never echoed or logged.

use super::*;

#[tokio::test]
async fn refusals_name_every_problem_by_json_path_and_kind() {
    let admin = Admin::start();
    let base = fact("A plain statement", &["public"]);
    let cases: Vec<(&str, Value, Vec<(&str, &str)>)> = vec![
        (
            "missing required field",
            with(base.clone(), "content", json!({})),
            vec![("$.content.statement", "schema_violation")],
        ),
        (
            "wrong type in content",
            with(base.clone(), "content", json!({"statement": 5})),
            vec![("$.content.statement", "schema_violation")],
        ),
        (
            "field the schema lacks",
            with(base.clone(), "content", json!({"statement": "x", "colour": "red"})),
            vec![("$.content.colour", "schema_violation")],
        ),
        (
            "nested violation",
            json!({"type": "customer_profile", "scope": ["public"], "content": {"name": "A", "special_requests": ["ok", ""]}}),
            vec![("$.content.special_requests[1]", "schema_violation")],
        ),
        ("unknown type", with(base.clone(), "type", json!("horoscope")), vec![("$.type", "unknown_type")]),
        (
            "unknown schema version",
            with(base.clone(), "schema_version", json!("v9")),
            vec![("$.schema_version", "unknown_schema_version")],
        ),
        (
            "valid_until before valid_from",
            with(
                with(base.clone(), "valid_from", json!("2024-06-15T09:00:00Z")),
                "valid_until",
                json!("2024-06-14T09:00:00Z"),
            ),
            vec![("$.valid_until", "invalid_time_range")],
        ),
        (
            "valid_until equal to valid_from",
            with(
                with(base.clone(), "valid_from", json!("2024-06-15T09:00:00Z")),
                "valid_until",
                json!("2024-06-15T11:00:00+02:00"),
            ),
            vec![("$.valid_until", "invalid_time_range")],
        ),
        (
            "valid_until in the past, valid_from defaulted",
            with(base.clone(), "valid_until", json!("2001-01-01T00:00:00Z")),
            vec![("$.valid_until", "invalid_time_range")],
        ),
        (
            "month 13",
            with(base.clone(), "valid_from", json!("2024-13-01T00:00:00Z")),
            vec![("$.valid_from", "invalid_date")],
        ),
        (
            "a date without a time",
            with(base.clone(), "valid_until", json!("2030-01-01")),
            vec![("$.valid_until", "invalid_date")],
        ),
        (
            "not a date",
            with(base.clone(), "valid_from", json!("yesterday")),
            vec![("$.valid_from", "invalid_date")],
        ),
        (
            "date of the wrong type",
            with(base.clone(), "valid_from", json!(1718442000)),
            vec![("$.valid_from", "invalid_type")],
        ),
        (
            "unknown envelope field",
            with(base.clone(), "colour", json!("red")),
            vec![("$.colour", "unknown_field")],
        ),
        (
            "oversized content",
            with(base.clone(), "content", json!({"statement": "x".repeat(70 * 1024)})),
            vec![("$.content", "too_large")],
        ),
        (
            "no scope",
            json!({"type": "fact", "content": {"statement": "x"}}),
            vec![("$.scope", "missing_field")],
        ),
        (
            "bad scope entry",
            with(base.clone(), "scope", json!(["public", "User U1"])),
            vec![("$.scope[1]", "invalid_value")],
        ),
        (
            "priority out of range",
            with(base.clone(), "priority", json!(9)),
            vec![("$.priority", "invalid_value")],
        ),
        (
            "no type",
            json!({"scope": ["public"], "content": {"statement": "x"}}),
            vec![("$.type", "missing_field")],
        ),
        (
            "content not an object",
            with(base.clone(), "content", json!("x")),
            vec![("$.content", "invalid_type")],
        ),
        (
            "a thread without a position",
            with(base.clone(), "metadata", json!({"thread": "chat-7"})),
            vec![("$.metadata.position", "missing_field")],
        ),
        (
            "a position that is no place",
            with(base.clone(), "metadata", json!({"thread": "chat-7", "position": -1})),
            vec![("$.metadata.position", "invalid_value")],
        ),
        (
            "a thread that is no name",
            with(base.clone(), "metadata", json!({"thread": "", "position": 2})),
            vec![("$.metadata.thread", "invalid_value")],
        ),
        (
            "several at once",
            json!({
            "type": "fact", "scope": ["public", 7], "colour": "red", "valid_from": "not a date",
            "priority": 0, "aliases": [""], "content": {"confidence": 2, "extra": true},
            "metadata": {"db_password": "Vx7!qPz#4Lm"}}),
            vec![
                ("$.colour", "unknown_field"),
                ("$.scope[1]", "invalid_value"),
                ("$.valid_from", "invalid_date"),
                ("$.priority", "invalid_value"),
                ("$.aliases[0]", "invalid_value"),
                ("$.content.statement", "schema_violation"),
                ("$.content.confidence", "schema_violation"),
                ("$.content.extra", "schema_violation"),
                ("$.metadata.db_password", "secret"),
            ],
        ),
    ];
    for (what, record, expected) in &cases {
        let answer = admin.create(None, record).await;
        for (path, kind) in expected {
            answer.assert_problem(path, kind, what);
        }
        assert_eq!(
            answer.problems().len(),
            expected.len(),
            "{what}: unexpected extra problems in {}",
            answer.text
        );
        for (_, _, message) in answer.problems() {
            assert!(!message.is_empty(), "{what}: a problem without a message");
        }
    }
    assert!(admin.list_all(None, "", 50).await.is_empty(), "a refused write was stored");

    // The same checks guard PATCH and import.
    let id = admin.create_ok(None, &base).await;
    let patch = admin
        .patch(None, &id, Some(1), &json!({"valid_until": "2000-01-01T00:00:00Z", "type": "horoscope"}))
        .await;
    patch.assert_problem("$.valid_until", "invalid_time_range", "patch");
    patch.assert_problem("$.type", "unknown_type", "patch");
    assert_eq!(admin.get(None, &id).await.json["revision"], 1);
}

/// Made-up credentials with the shape of real ones, and the part of each that must never be
/// repeated back.
fn secrets() -> Vec<(&'static str, String, &'static str)> {
    vec![
        ("aws_access_key", "AKIAZ7Q3R5T8W2X4Y6V9".to_owned(), "AKIAZ7Q3R5T8W2X4Y6V9"),
        ("anthropic_key", "sk-ant-api03-Hq4Zt8Wm2Kx6Pv9Rb3Nc7Lf1Jd5Gs0Ty-QeUiOp7AAA".to_owned(), "Hq4Zt8Wm2Kx6Pv9Rb3Nc7"),
        ("openai_key", "sk-proj-T4kW9mQ2xZ7vB3nR8pL5cF1hJ6dG0sYa".to_owned(), "T4kW9mQ2xZ7vB3nR8pL5c"),
        ("github_token", "ghp_aB3dE5fG7hJ9kL1mN2pQ4rS6tU8vW0xY2zA4".to_owned(), "aB3dE5fG7hJ9kL1mN2pQ4"),
        ("slack_token", "xoxb-2048197534-5839201746132-Lm4Qx8Tz2Wv6Rb9Np3Ks7Hd".to_owned(), "5839201746132-Lm4Qx8"),
        ("jwt", "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJ1LTc4OSIsInJvbGUiOiJhZ2VudCJ9.Q2xvdWRTaWduYXR1cmVfMTIzNDU2Nzg5YWJj".to_owned(), "Q2xvdWRTaWduYXR1cmVfMTIzNDU2"),
        ("private_key", "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBkg4LVWM9nuwNSk3yByxZpYRTBnVJk5oo6aAnXi9GuNoAoGCCqGSM49\nAwEHoUQDQgAEuFZ4TLHbN1f0d3Xq8F9pZJ1kZx2yN7Gd0pR2L6vKp9n3\n-----END EC PRIVATE KEY-----".to_owned(), "MHcCAQEEIBkg4LVWM9nuwNSk3yByxZ"),
        ("password", "Vx7!qPz#4Lm".to_owned(), "Vx7!qPz#4Lm"),
        ("connection_string_credential", "postgres://billing:Hn5Wq2Zr8Tk@db.internal:5432/billing".to_owned(), "Hn5Wq2Zr8Tk"),
    ]
}

#[tokio::test]
async fn secrets_are_refused_by_kind_and_path_and_never_echoed_or_logged() {
    let admin = Admin::start_with(&[], &[("MEMGATE_LOG_LEVEL", "debug")]);
    let existing = admin.create_ok(None, &fact("A record to patch", &["public"])).await;
    let secrets = secrets();
    let s = |kind: &str| secrets.iter().find(|(k, _, _)| *k == kind).unwrap().1.clone();
    // Where each secret hides, and the path the answer must name.
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "aws_access_key",
            fact(&format!("Customer pasted {} in chat", s("aws_access_key")), &["public"]),
            "$.content.statement",
        ),
        (
            "anthropic_key",
            json!({"type": "customer_profile", "scope": ["user:u-1"], "content": {"name": "A",
            "special_requests": ["call after 6pm", format!("use key {}", s("anthropic_key"))]}}),
            "$.content.special_requests[1]",
        ),
        (
            "openai_key",
            with(fact("Eval setup", &["public"]), "aliases", json!([format!("openai {}", s("openai_key"))])),
            "$.aliases[0]",
        ),
        (
            "github_token",
            with(
                fact("CI notes", &["public"]),
                "metadata",
                json!({"note": format!("token {}", s("github_token"))}),
            ),
            "$.metadata.note",
        ),
        (
            "slack_token",
            with(fact("Alerts channel", &["public"]), "key", json!(format!("slack:{}", s("slack_token")))),
            "$.key",
        ),
        (
            "jwt",
            json!({"type": "internal_sop", "scope": ["team:ops"], "content": {"title": "Call the API",
            "steps": format!("1. Send Authorization: Bearer {}\n2. Done", s("jwt"))}}),
            "$.content.steps",
        ),
        (
            "private_key",
            fact(&format!("Deploy key:\n{}", s("private_key")), &["team:ops"]),
            "$.content.statement",
        ),
        (
            "password",
            with(fact("Billing database", &["team:ops"]), "metadata", json!({"db_password": s("password")})),
            "$.metadata.db_password",
        ),
        (
            "connection_string_credential",
            json!({"type": "task", "scope": ["team:ops"], "content": {"title": "Migrate",
            "status": "open", "description": format!("connect with {}", s("connection_string_credential"))}}),
            "$.content.description",
        ),
    ];
    let mut answers: Vec<Answer> = Vec::new();
    for (kind, record, path) in &cases {
        let answer = admin.create(None, record).await;
        answer.assert_problem(path, "secret", &format!("create with {kind}"));
        let problem = answer.problems().into_iter().find(|(p, k, _)| p == path && k == "secret").unwrap();
        assert!(problem.2.contains(kind), "the problem does not name the kind {kind}: {}", answer.text);
        answers.push(answer);

        // The same record through PATCH and import.
        let mut patch = record.clone();
        patch.as_object_mut().unwrap().remove("type");
        let patched = admin.patch(None, &existing, Some(1), &patch).await;
        patched.assert_problem(path, "secret", &format!("patch with {kind}"));
        answers.push(patched);
        let line = record.to_string();
        let preview = admin.import(None, &line, true).await;
        let problems = problems_of(&preview.expect(200, "dry run")["lines"][0]["problems"]);
        assert!(
            problems.iter().any(|(p, k, m)| p == path && k == "secret" && m.contains(kind)),
            "import {kind}: {problems:?}"
        );
        answers.push(preview);
        let refused = admin.import(None, &line, false).await;
        refused.assert_error(422, "invalid_request_error", &format!("import {kind}"));
        answers.push(refused);
    }

    // Secrets where the value also breaks the schema: both named, neither message quoting it.
    let mixed = json!({"type": "customer_profile", "scope": ["user:u-1"], "content": {"name": "A",
        "preferred_language": s("openai_key"), "customer_since": s("anthropic_key"), "preferred_channel": s("github_token"),
        "notes": format!("db at {} with {}", s("connection_string_credential"), s("aws_access_key"))},
        "aliases": [s("jwt")], "metadata": {"api_key": s("password")}});
    let answer = admin.create(None, &mixed).await;
    for (path, kind) in [
        ("$.content.preferred_language", "schema_violation"),
        ("$.content.preferred_language", "secret"),
        ("$.content.customer_since", "schema_violation"),
        ("$.content.customer_since", "secret"),
        ("$.content.preferred_channel", "schema_violation"),
        ("$.content.preferred_channel", "secret"),
        ("$.content.notes", "secret"),
        ("$.aliases[0]", "secret"),
        ("$.metadata.api_key", "secret"),
    ] {
        answer.assert_problem(path, kind, "several secrets in one record");
    }
    let notes: Vec<String> = answer
        .problems()
        .into_iter()
        .filter(|(p, k, _)| p == "$.content.notes" && k == "secret")
        .map(|(_, _, m)| m)
        .collect();
    for kind in ["connection_string_credential", "aws_access_key"] {
        assert!(notes.iter().any(|m| m.contains(kind)), "notes: {kind} not named in {notes:?}");
    }
    answers.push(answer);

    assert_eq!(admin.get(None, &existing).await.json["revision"], 1, "a refused patch was applied");
    assert_eq!(admin.export(None, "").await.lines().count(), 1, "a refused write was stored");
    assert_no_secret_in(&admin, &answers, &secrets).await;
}

/// No answer body nor the gateway's log holds any of `secrets` (once the log has every answer's
/// line, so the check covers them).
async fn assert_no_secret_in(admin: &Admin, answers: &[Answer], secrets: &[(&str, String, &str)]) {
    let ids: Vec<String> = answers.iter().map(Answer::request_id).collect();
    let log = eventually(Duration::from_secs(10), "the log lines of every request", || {
        let log = admin.gw.stderr();
        let complete = ids.iter().all(|id| log.contains(id.as_str()));
        std::future::ready(complete.then_some(log))
    })
    .await;
    let mut leaks = Vec::new();
    for (kind, _, needle) in secrets {
        for answer in answers.iter().filter(|a| a.text.contains(needle)) {
            leaks.push(format!("the {kind} came back in an answer: {}", answer.text));
        }
        if log.contains(needle) {
            leaks.push(format!("the {kind} is in the gateway's log"));
        }
    }
    assert!(leaks.is_empty(), "{} leak(s):\n{}", leaks.len(), leaks.join("\n"));
}

#[tokio::test]
async fn a_secret_used_as_a_field_name_is_not_echoed() {
    // A map keyed by credential (`{"AKIA…": "prod"}`) puts the secret in the path itself.
    let admin = Admin::start();
    let secrets = secrets();
    let aws = &secrets[0].1;
    let github = &secrets[3].1;
    let anthropic = &secrets[1].1;
    let records = [
        with(fact("Keys in use", &["public"]), "metadata", json!({"keys": {aws.clone(): "prod"}})),
        with(fact("Keys in use", &["public"]), "content", json!({"statement": "x", github.clone(): "ci"})),
        with(fact("Keys in use", &["public"]), anthropic, json!(true)),
        with(fact("Keys in use", &["public"]), "aliases", json!([{aws.clone(): 1}])),
    ];
    let mut answers = Vec::new();
    for record in &records {
        let answer = admin.create(None, record).await;
        answer.assert_error(422, "invalid_request_error", "a secret as a field name");
        answers.push(answer);
    }
    let refused = admin.import(None, &records[0].to_string(), true).await;
    answers.push(refused);
    assert_no_secret_in(&admin, &answers, &secrets).await;
}
