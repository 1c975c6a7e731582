//! Detector tests: every kind found where it hides, and realistic support-bot content left alone.
//! The keys below are made up; they have the shape of real ones and nothing else.

use super::*;
use serde_json::json;

fn found(value: Value) -> Vec<(String, &'static str)> {
    scan(&value, "$.content").into_iter().map(|f| (f.path, f.kind.as_str())).collect()
}

fn found_in_text(text: &str) -> Vec<&'static str> {
    found(json!(text)).into_iter().map(|(_, kind)| kind).collect()
}

fn assert_no_findings(value: Value) {
    assert_eq!(found(value.clone()), Vec::<(String, &str)>::new(), "false positive in {value}");
}

fn assert_clean(text: &str) {
    assert_eq!(found_in_text(text), Vec::<&str>::new(), "false positive in {text:?}");
}

fn assert_kind(text: &str, kind: &str) {
    assert!(found_in_text(text).contains(&kind), "missed {kind} in {text:?}: {:?}", found_in_text(text));
}

fn anthropic_key() -> String {
    format!("sk-ant-api03-{}AA", "Qx7mN2pL9vR4tK8wZ3bH6jF1".repeat(4))
}

fn openai_key() -> String {
    format!("sk-proj-{}", "Xy9Kq2Lm4Np6Rs8Tv0Wz_b-C".repeat(5))
}

fn legacy_openai_key() -> String {
    format!("sk-{}", "aB3dE5fG7hJ9kL1m".repeat(3))
}

fn github_classic() -> String {
    format!("ghp_{}", "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8")
}

fn github_fine_grained() -> String {
    format!("github_pat_11ABCDEFG0{}", "aB3dE5fG7hJ9kL1mN3pQ_5rS7tV9wX1yZ3bD5fH7jK9mP1rT3vW5x".repeat(2))
}

const JWT: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c";

const PEM: &str = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7bq0fKx3Zt8kL2mN9pQ4rS6tV8wX0yZ2bD4fH6jK8mP0rT2v\nW4x6Z8b0D2f4H6j8K0m2P4r6T8v0W2x4Z6b8D0f2H4j6K8m0P2r4T6v8W0x2Z4b6\n-----END RSA PRIVATE KEY-----";

// ---------------------------------------------------------------------------------------------
// Each kind, alone.

#[test]
fn kind_names_are_snake_case() {
    let all = [
        (SecretKind::AwsAccessKey, "aws_access_key"),
        (SecretKind::AwsSecretKey, "aws_secret_key"),
        (SecretKind::AnthropicKey, "anthropic_key"),
        (SecretKind::OpenAiKey, "openai_key"),
        (SecretKind::GithubToken, "github_token"),
        (SecretKind::GitlabToken, "gitlab_token"),
        (SecretKind::SlackToken, "slack_token"),
        (SecretKind::StripeKey, "stripe_key"),
        (SecretKind::GoogleApiKey, "google_api_key"),
        (SecretKind::HuggingFaceToken, "hugging_face_token"),
        (SecretKind::NpmToken, "npm_token"),
        (SecretKind::MemgateKey, "memgate_key"),
        (SecretKind::WebhookSecret, "webhook_secret"),
        (SecretKind::BearerToken, "bearer_token"),
        (SecretKind::Jwt, "jwt"),
        (SecretKind::PrivateKey, "private_key"),
        (SecretKind::Password, "password"),
        (SecretKind::ConnectionStringCredential, "connection_string_credential"),
    ];
    for (kind, name) in all {
        assert_eq!(kind.as_str(), name);
        assert!(!kind.description().is_empty());
    }
}

/// The credential shapes a security review found missing, each alone, in a
/// sentence and under an innocent key.
#[test]
fn vendor_tokens_and_opaque_bearers() {
    let cases = [
        (format!("sk_live_{}", "4eC39HqLyjWDarjtT1zdp7dc"), "stripe_key"),
        (format!("sk_test_{}", "51Hx9aBcD3eF5gH7iJ9kL1mN"), "stripe_key"),
        (format!("rk_live_{}", "9aBcD3eF5gH7iJ9kL1mN3pQ5"), "stripe_key"),
        (format!("mgk_0123456789abcdef_{}", "9f2c4e6a8b0d1f3e5a7c9b1d3f5e7a9c"), "memgate_key"),
        ("glpat-xK9mP2qR7vT4wZ8bN3hJ".to_owned(), "gitlab_token"),
        ("AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY".to_owned(), "google_api_key"),
        ("hf_aBcDeFgHiJkLmNoPqRsTuVwXyZaBcDeFgHi".to_owned(), "hugging_face_token"),
        ("npm_aB3dE5fG7hJ9kL1mN3pQ5rS7tV9wX1yZ3bD5".to_owned(), "npm_token"),
        ("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_owned(), "webhook_secret"),
        ("Authorization: Bearer 7f3a9c2e8b1d4f6a0c5e9b2d".to_owned(), "bearer_token"),
        ("curl -H 'authorization: bearer AbC123dEf456GhI789' …".to_owned(), "bearer_token"),
    ];
    for (secret, kind) in cases {
        assert_eq!(found_in_text(&secret), [kind], "{secret}");
        assert_kind(&format!("use {secret} for the nightly sync"), kind);
        assert_eq!(found(json!({"note": secret})), [("$.content.note".to_owned(), kind)]);
    }
}

#[test]
fn vendor_prefixes_in_prose_are_clean() {
    for text in [
        "Stripe secret keys start with sk_live_ and must stay in the vault",
        "publishable key pk_live_51Hx9aBcD3eF5gH7iJ9kL1mN is fine in the browser",
        "GitLab tokens look like glpat-… ; rotate yearly",
        "call hf_hub_download with the repo id",
        "npm_config_registry points at the mirror",
        "mgk_ keys are issued by the admin API",
        "Send the Bearer token in the Authorization header",
        "Authorization: Bearer <your token>",
        "Authorization: Bearer ${TOKEN}",
        "the bearer of this voucher gets 10% off",
    ] {
        assert_clean(text);
    }
}

#[test]
fn aws_access_keys() {
    assert_eq!(found_in_text("AKIAIOSFODNN7EXAMPLE"), ["aws_access_key"]);
    assert_kind("temporary creds: ASIAY34FZKBOKMUTVV7A expire at noon", "aws_access_key");
    assert_kind("key=AKIAIOSFODNN7EXAMPLE;", "aws_access_key");
}

#[test]
fn aws_secret_keys_next_to_their_name() {
    let secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
    assert_kind(&format!("aws_secret_access_key = {secret}"), "aws_secret_key");
    assert_kind(
        &format!("[default]\naws_access_key_id = AKIAIOSFODNN7EXAMPLE\naws_secret_access_key = {secret}\n"),
        "aws_secret_key",
    );
    assert_kind(&format!("export AWS_SECRET_ACCESS_KEY=\"{secret}\""), "aws_secret_key");
    assert_eq!(
        found(json!({"aws_secret_access_key": secret})),
        [("$.content.aws_secret_access_key".to_owned(), "aws_secret_key")]
    );
    assert_eq!(
        found(json!({"AwsSecret": "anything non-empty"})),
        [("$.content.AwsSecret".to_owned(), "aws_secret_key")]
    );
}

#[test]
fn anthropic_keys() {
    let key = anthropic_key();
    assert_eq!(found_in_text(&key), ["anthropic_key"]);
    assert_kind(&format!("Customer pasted {key} into chat, please rotate it"), "anthropic_key");
    assert_kind(&format!("ANTHROPIC_API_KEY={key}"), "anthropic_key");
    assert_kind(&format!("密钥是{key}，请保管"), "anthropic_key");
}

#[test]
fn openai_keys() {
    assert_eq!(found_in_text(&openai_key()), ["openai_key"]);
    assert_eq!(found_in_text(&legacy_openai_key()), ["openai_key"]);
    assert_kind(&format!("use `{}` for the eval job", openai_key()), "openai_key");
}

#[test]
fn github_tokens() {
    assert_eq!(found_in_text(&github_classic()), ["github_token"]);
    assert_eq!(found_in_text(&github_fine_grained()), ["github_token"]);
    for prefix in ["gho_", "ghu_", "ghs_", "ghr_"] {
        let token = format!("{prefix}{}", "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2");
        assert_kind(&format!("token: {token}"), "github_token");
    }
}

#[test]
fn slack_tokens_and_webhooks() {
    assert_eq!(found_in_text("xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"), ["slack_token"]);
    for prefix in ["xoxp-", "xoxa-", "xoxr-", "xoxs-"] {
        assert_kind(&format!("bot uses {prefix}2048-1190-AbCd3f9"), "slack_token");
    }
    assert_kind(
        "alerts go to https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
        "slack_token",
    );
}

#[test]
fn jwts() {
    assert_eq!(found_in_text(JWT), ["jwt"]);
    assert_kind(&format!("Authorization: Bearer {JWT}"), "jwt");
    assert_kind(&format!("session cookie was {JWT}."), "jwt");
}

#[test]
fn private_keys() {
    assert_eq!(found_in_text(PEM), ["private_key"]);
    let openssh = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n-----END OPENSSH PRIVATE KEY-----";
    assert_eq!(found_in_text(openssh), ["private_key"]);
    let pkcs8 = "key file:\n-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\n-----END PRIVATE KEY-----\n";
    assert_eq!(found_in_text(pkcs8), ["private_key"]);
    let encrypted = "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIFHzBJBgkqhkiG9w0BBQ0wPDAbBgkqhkiG9w0BBQwwDgQI";
    assert_eq!(found_in_text(encrypted), ["private_key"]);
}

#[test]
fn passwords_under_credential_keys() {
    let content = json!({
        "password": "hunter2",
        "DB_PASSWORD": "pg-2024",
        "clientSecret": "b4f2",
        "api_key": "abc",
        "openaiApiKey": "not-a-real-key",
        "access_token": "opaque",
        "Refresh-Token": "r1",
        "pwd": 1234,
        "passphrase": "correct horse battery staple",
        "密码": "abc123",
        "Пароль": "qwerty",
        "wifi": {"passwords": ["Guest2024", "Staff2024"]},
    });
    let mut got = found(content);
    got.sort();
    let mut want: Vec<(String, &str)> = [
        "$.content.DB_PASSWORD",
        "$.content[\"Refresh-Token\"]",
        "$.content.access_token",
        "$.content.api_key",
        "$.content.clientSecret",
        "$.content.openaiApiKey",
        "$.content.passphrase",
        "$.content.password",
        "$.content.pwd",
        "$.content.wifi.passwords[0]",
        "$.content.wifi.passwords[1]",
        "$.content[\"Пароль\"]",
        "$.content[\"密码\"]",
    ]
    .into_iter()
    .map(|p| (p.to_owned(), "password"))
    .collect();
    want.sort();
    assert_eq!(got, want);
    assert_eq!(
        found(json!({"secret": ["alpha1", 42, {"nested": "x"}]})),
        [("$.content.secret[0]".to_owned(), "password"), ("$.content.secret[1]".to_owned(), "password"),]
    );
}

#[test]
fn short_credential_key_names() {
    let content = json!({
        "token": "opaque-value",
        "github_token": "x1",
        "slack-token": "x2",
        "botToken": "x3",
        "pass": "swordfish",
        "pin": 4821,
        "PIN": "0000",
        "credentials": "admin/admin",
        "db_credentials": {"user": "app", "secret": "k"},
    });
    let mut paths: Vec<String> = found(content).into_iter().map(|(path, _)| path).collect();
    paths.sort();
    assert_eq!(
        paths,
        [
            "$.content.PIN",
            "$.content.botToken",
            "$.content.credentials",
            "$.content.db_credentials.secret",
            "$.content.github_token",
            "$.content.pass",
            "$.content.pin",
            "$.content.token",
            "$.content[\"slack-token\"]",
        ]
    );
    // Names that only contain those words.
    assert_no_findings(json!({
        "token_count": 1532,
        "tokens": 20,
        "max_tokens": 512,
        "next_page_token": "CAESBggDEAEYAQ",
        "bypass": "allowed",
        "compass": "N",
        "spin": "cycle",
        "pinned": "yes",
        "pin_hint": "your birthday",
        "credential_type": "oauth",
    }));
}

#[test]
fn bracketed_passwords_are_not_placeholders() {
    assert_eq!(
        found(json!({"db_password": "[Xk9#pL2qR]"})),
        [("$.content.db_password".to_owned(), "password")]
    );
    assert_eq!(found(json!({"secret": "{S3cretPw}"})), [("$.content.secret".to_owned(), "password")]);
    assert_eq!(found(json!({"secret": "<Tr0ub4dor&3>"})), [("$.content.secret".to_owned(), "password")]);
    assert_eq!(found(json!({"secret": "${Xk9pL2}"})), [("$.content.secret".to_owned(), "password")]);
    assert_eq!(found_in_text("postgres://app:{S3cretPw}@db/app"), ["connection_string_credential"]);
    assert_eq!(found_in_text("mysql://root:[pw123]@db/shop"), ["connection_string_credential"]);
    assert_eq!(found_in_text("password: [Xk9#pL2qR]"), ["password"]);
    // Template slots, whole, still pass.
    assert_no_findings(json!({
        "a_password": "${DB_PASSWORD_2}",
        "b_secret": "{{ access_token }}",
        "c_secret": "%(password)s",
        "d_secret": "<your-key>",
        "e_secret": "[REDACTED]",
        "f_secret": "{secret}",
    }));
}

/// A long run of blanks after a credential's name once indexed past the end of the text (the
/// connection dropped and a whole import aborted), and past 512 blanks the value was not read.
#[test]
fn blanks_after_a_credential_name_do_not_panic_or_hide_the_value() {
    for blanks in [1, 3, 509, 510, 511, 512, 513, 600, 5000] {
        let text = format!("password{}is Summer2024", " ".repeat(blanks));
        assert_eq!(found_in_text(&text), ["password"], "{blanks} blanks");
        let text = format!("password{}：", " ".repeat(blanks));
        let _ = scan(&json!({"note": text}), "$");
        let text = format!("pwd{}={}Xk9#pL2qR", " ".repeat(blanks), "\t".repeat(blanks));
        assert_eq!(found_in_text(&text), ["password"], "{blanks} blanks and tabs");
    }
}

/// Any run of blanks is one: tabs, no-break and ideographic spaces too. A line break is not a
/// blank: the value of `PASSWORD=` on one line is not the next line.
#[test]
fn any_run_of_blanks_is_read_as_one_space() {
    for text in [
        "password:\u{a0}hunter22",
        "password\u{3000}\u{3000}is\u{2003}Summer2024",
        "密码：\u{3000}abc123456",
        &format!("secret ={}S3cr3t!", " \t\u{a0}".repeat(400)),
    ] {
        assert_eq!(found_in_text(text), ["password"], "{text:?}");
    }
    for text in [
        "DB_PASSWORD=\nPORT=5432",
        "reset your password\u{a0}in settings",
        "password:\u{3000}\u{3000}required",
    ] {
        assert_clean(text);
    }
}

/// `*_token` names are credentials inside text as they are as keys: JSON, YAML or env text
/// pasted into a string. Cursors and counts named like them, and prose about tokens, are not.
#[test]
fn token_names_inside_text() {
    for text in [
        r#"{"bot_token": "7d1f0c2a9b8e4f6a3c5d7e9f1a2b3c4d"}"#,
        "SLACK_BOT_TOKEN=7d1f0c2a9b8e4f6a",
        "github-token: Xk9pL2qR7vT4wZ8b",
        "config.token = 'opaque-value'",
        "{botToken: 'Xk9pL2qR7vT4'}",
        "csrf_token=48213377",
    ] {
        assert_eq!(found_in_text(text), ["password"], "{text:?}");
    }
    for text in [
        r#"{"next_page_token": "CAESBggDEAEYAQ", "max_tokens": 1024}"#,
        "pageToken: CAESBggDEAEYAQ",
        "the token_count was 1532 and input_tokens: 20",
        "Rotate the bot token every 90 days.",
        "Token: expired",
        "the api_token is stored in the vault",
        "bot_token: <your bot token>",
        "access_token: ${ACCESS_TOKEN}",
        r#"{"eos_token": "</s>", "pad_token": "<pad>", "unk_token": "[UNK]"}"#,
    ] {
        assert_clean(text);
    }
}

#[test]
fn passwords_in_free_text() {
    for text in [
        "password: hunter2",
        "Password: hunter2",
        "pwd=S3cr3t!",
        "DB_PASSWORD=Tr0ub4dor&3",
        "spring.datasource.password=changeme",
        "login: admin / password: swordfish",
        "username=bob&password=letmein99",
        r#"{"user": "bob", "password": "correct horse battery staple"}"#,
        "client_secret: 9f8e7d6c5b4a",
        "api_key = abcd1234efgh",
        "the wifi password is Guest2024",
        "PIN password: 482913",
        "密码：abc123456",
        "您的密码：Zz123456，请妥善保管",
        "Пароль: qwerty123",
        "пароль=Secret_2024",
        "note\npasswd := hunter22\nend",
    ] {
        assert_eq!(found_in_text(text), ["password"], "{text:?}");
    }
}

#[test]
fn connection_string_credentials() {
    for url in [
        "postgres://app:s3cr3t@db.internal:5432/app",
        "postgresql://app:s3cr3t@db.internal/app?sslmode=require",
        "mysql://root:pw123@10.0.0.5/shop",
        "mongodb+srv://svc:Zx9q@cluster0.abcde.mongodb.net/test?retryWrites=true",
        "redis://:hunter2@cache:6379/0",
        "amqp://guest:guest@rabbit:5672/",
        "https://bob:pa55@example.com/private",
    ] {
        assert_eq!(found_in_text(url), ["connection_string_credential"], "{url}");
        assert_kind(&format!("DATABASE_URL=\"{url}\" in the runbook"), "connection_string_credential");
    }
}

// ---------------------------------------------------------------------------------------------
// Where findings point.

#[test]
fn nested_secrets_are_named_by_path() {
    let content = json!({
        "name": "Acme",
        "integrations": [
            {"kind": "slack", "config": {"note": "xoxb-123456789012-1234567890123-AbCdEfGhIjKl"}},
            {"kind": "db", "dsn": "postgres://app:s3cr3t@db/app"},
        ],
        "备注": anthropic_key(),
        "odd key": [[JWT]],
    });
    // Sorted: the order of an object's members is serde_json's business.
    let mut got = found(content);
    got.sort();
    assert_eq!(
        got,
        [
            ("$.content.integrations[0].config.note".to_owned(), "slack_token"),
            ("$.content.integrations[1].dsn".to_owned(), "connection_string_credential"),
            ("$.content[\"odd key\"][0][0]".to_owned(), "jwt"),
            ("$.content[\"备注\"]".to_owned(), "anthropic_key"),
        ]
    );
}

#[test]
fn a_secret_used_as_an_object_key_is_found_and_not_repeated_in_its_path() {
    assert_eq!(
        found(json!({"AKIAIOSFODNN7EXAMPLE": "prod"})),
        [(crate::memory::checks::json_path::child_key("$.content", super::REDACTED_KEY), "aws_access_key")]
    );
}

#[test]
fn several_kinds_in_one_string_are_each_reported_once() {
    let text = format!("keys: {} and {} and again {}", anthropic_key(), github_classic(), anthropic_key());
    assert_eq!(found_in_text(&text), ["anthropic_key", "github_token"]);
}

#[test]
fn a_specific_kind_under_a_credential_key_is_reported_as_that_kind() {
    assert_eq!(
        found(json!({"api_key": anthropic_key()})),
        [("$.content.api_key".to_owned(), "anthropic_key")]
    );
    assert_eq!(found_in_text(&format!("api_key={}", anthropic_key())), ["anthropic_key"]);
}

#[test]
fn root_strings_use_the_base_path() {
    assert_eq!(scan(&json!(JWT), "$"), [SecretFinding { path: "$".to_owned(), kind: SecretKind::Jwt }]);
}

#[test]
fn findings_never_hold_the_secret() {
    let key = anthropic_key();
    let findings = scan(&json!({"k": key, "password": "hunter2", "x": JWT}), "$.content");
    assert_eq!(findings.len(), 3);
    let shown = format!("{findings:?}");
    assert!(!shown.contains(&key) && !shown.contains("hunter2") && !shown.contains(JWT));
}

// ---------------------------------------------------------------------------------------------
// What a support bot stores, which must pass.

#[test]
fn realistic_records_are_clean() {
    let records = [
        json!({
            "name": "张伟",
            "preferred_language": "zh-CN",
            "special_requests": ["下周发货", "请用中文回复", "next week delivery"],
            "email": "zhang.wei@example.com",
            "phone": "+86 138 0013 8000",
            "customer_since": "2021-03-14",
        }),
        json!({
            "sku": "RTR-AX3000-BLK",
            "name": "AX3000 Wi-Fi 6 Router",
            "description": "Dual-band router; default admin page at http://192.168.0.1, set your own admin password on first login.",
            "firmware_sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
            "compatible_with": ["SK-II-FTE-230", "MESH-NODE-2"],
        }),
        json!({
            "title": "Refund process",
            "steps": "1. Verify order ORD-2024-0615 in the OMS.\n2. If the password reset link expired, send a new one.\n3. Escalate to team:billing after 48 hours.",
            "escalation_contact": "billing-oncall@example.com",
        }),
        json!({
            "summary": "Клиент забыл пароль, отправили ссылку для сброса. Заказ ORD-2024-0615 доставят на следующей неделе.",
            "conversation_id": "550e8400-e29b-41d4-a716-446655440000",
            "topics": ["password reset", "delivery"],
        }),
        json!({
            "password_hint": "first pet",
            "密码提示": "宠物名字",
            "password_policy": "12+ chars, one digit",
            "password_last_changed": "2024-06-01",
            "password_reset_url": "https://example.com/account/reset",
            "has_password": true,
            "two_factor_secret_configured": false,
            "api_key_id": "key-7f3a",
            "token_count": 1532,
        }),
    ];
    for record in records {
        assert_no_findings(record);
    }
}

#[test]
fn placeholders_under_credential_keys_are_clean() {
    let content = json!({
        "password": "",
        "secret": "[REDACTED]",
        "api_key": "********",
        "db_password": "${DB_PASSWORD}",
        "client_secret": "<client secret>",
        "access_token": "{{ access_token }}",
        "passwd": "$PGPASSWORD",
        "pwd": null,
        "app_secret": "your_app_secret_here",
        "private_key": "redacted",
        "vault_secret": "https://vault.example.com/v1/kv/app",
        "PWD": "/srv/app",
    });
    assert_no_findings(content);
}

#[test]
fn prose_about_passwords_is_clean() {
    for text in [
        "reset your password in settings",
        "the password policy requires 12 characters",
        "Password: must be at least 12 characters long",
        "Password requirements: 8-16 characters, one digit",
        "password: 12 characters minimum",
        "Passwords must match",
        "Forgot password? Click 'Reset password' on the login page.",
        "password reset link sent to customer",
        "Password: required",
        "Password: reset",
        "password: ********",
        "password: <redacted>",
        "password = ${DB_PASSWORD}",
        "The password is case-sensitive.",
        "the password is stored in the vault",
        "Top secret: we are launching next week",
        "API key rotation happens every 90 days",
        "The api_key field is required",
        "Secret: see 1Password entry 'Prod DB'",
        "set PWD to the repo root",
        "请在设置中重置密码",
        "密码必须至少12个字符",
        "Пароль должен содержать 12 символов",
        "Клиент забыл пароль",
        "passwordless login via magic link",
        "PWD=/srv/app",
        "password: https://vault.example.com/ui/vault/secrets/prod-db",
        "password: 2024-06-15",
        r#"{"secret": "https://vault.example.com/v1/kv/app"}"#,
    ] {
        assert_clean(text);
    }
}

#[test]
fn ids_hashes_and_words_are_clean() {
    for text in [
        "ORD-2024-0615",
        "SKU-RTR-AX3000-BLK",
        "SK-1234",
        "SK-II-FTE-230",
        "sk-items",
        "sk-ii-facial-treatment-essence-230ml",
        "task-list, desk-lamp, risk-free, whisk-attachment",
        "see sk-learn docs",
        "550e8400-e29b-41d4-a716-446655440000",
        "da39a3ee5e6b4b0d3255bfef95601890afd80709",
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "commit 4f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39",
        "1Z999AA10123456784",
        "tracking AKIA1234 and AKIAIOSFODNN7EXAMPLEXYZ and akiaiosfodnn7example",
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAf",
        "GitHub tokens start with ghp_ and Slack bot tokens with xoxb-",
        "post alerts to hooks.slack.com/services/ (ask #it for the URL)",
        "v1.2.3 shipped in release.tar.gz",
        "eyJmb28iOiJiYXIifQ.eyJ4IjoxfQ.c2lnbmF0dXJlX3h5eg",
        "a.b.c and eyJ.eyJ.sig",
        "contact: help@example.com, mailto:help@example.com",
        "🙂 Доставка завтра, спасибо! 下周发货",
        "price 1299.00 CNY, qty 3",
    ] {
        assert_clean(text);
    }
}

#[test]
fn urls_without_passwords_are_clean() {
    for text in [
        "https://example.com",
        "https://shop.example.com/orders/ORD-2024-0615?ref=email&utm_source=crm",
        "postgres://db.internal:5432/app",
        "postgres://host/db",
        "postgres://app@db.internal/app",
        "https://example.com:8443/path",
        "redis://cache:6379/0",
        "ftp://ftp.example.com/pub",
        "https://example.com/users/bob@example.com",
        "postgres://app:@db/app",
        "postgres://app:${DB_PASSWORD}@db/app",
        "postgres://user:<password>@host/db",
        "mysql://root:****@10.0.0.5/shop",
    ] {
        assert_clean(text);
    }
}

#[test]
fn public_keys_certificates_and_mentions_are_clean() {
    for text in [
        "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAu1SU1LfVLPHCozMxH2Mo\n-----END PUBLIC KEY-----",
        "-----BEGIN CERTIFICATE-----\nMIIDdzCCAl+gAwIBAgIEAgAAuTANBgkqhkiG9w0BAQUFADBaMQswCQYDVQQGEwJJ\n-----END CERTIFICATE-----",
        "A key file starts with -----BEGIN RSA PRIVATE KEY----- and must never be pasted here.",
    ] {
        assert_clean(text);
    }
}

// ---------------------------------------------------------------------------------------------
// Robustness: the scan runs on every write, on whatever a client sends.

// That any text gets an answer, never a panic, is a property test in `crate::fuzz`; that every
// shape costs linear time is tests/integration/linear/secrets.rs.
