//! Finds secrets in a record's content before it is stored. Memory that leaks secrets is worse
//! than none: a record is injected into prompts for every caller in its scope, so one pasted API
//! key would be handed to a model, and through it to users, on every matching request.
//!
//! `scan` walks every string in a JSON value (object keys included) and also judges values by the
//! name of the key they sit under (`"password": "…"`). Each finding names the secret's kind and
//! the JSON path of the value that holds it, never the secret itself.
//!
//! The detectors are hand-written scans over bytes, tuned against what a support bot stores:
//! order numbers, SKUs, emails, URLs, UUIDs, hashes, prose in many languages. A false positive
//! blocks legitimate memory, so each detector wants the shape of a real credential (a known
//! prefix and enough random-looking characters, a decodable JWT header, a PEM body, a password
//! after `password:` that is not a word of the sentence going on) rather than a keyword alone.

use super::json_path::{child_index, child_key};
use serde_json::Value;

/// What a secret looks like it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretKind {
    AwsAccessKey,
    AwsSecretKey,
    AnthropicKey,
    OpenAiKey,
    GithubToken,
    SlackToken,
    Jwt,
    PrivateKey,
    Password,
    ConnectionStringCredential,
}

impl SecretKind {
    /// The kind's stable snake_case name, as 422 answers carry it.
    pub fn as_str(&self) -> &'static str {
        match self {
            SecretKind::AwsAccessKey => "aws_access_key",
            SecretKind::AwsSecretKey => "aws_secret_key",
            SecretKind::AnthropicKey => "anthropic_key",
            SecretKind::OpenAiKey => "openai_key",
            SecretKind::GithubToken => "github_token",
            SecretKind::SlackToken => "slack_token",
            SecretKind::Jwt => "jwt",
            SecretKind::PrivateKey => "private_key",
            SecretKind::Password => "password",
            SecretKind::ConnectionStringCredential => "connection_string_credential",
        }
    }

    /// A phrase for messages: "content holds {description}".
    pub fn description(&self) -> &'static str {
        match self {
            SecretKind::AwsAccessKey => "an AWS access key id",
            SecretKind::AwsSecretKey => "an AWS secret access key",
            SecretKind::AnthropicKey => "an Anthropic API key",
            SecretKind::OpenAiKey => "an OpenAI-style API key",
            SecretKind::GithubToken => "a GitHub token",
            SecretKind::SlackToken => "a Slack token or webhook URL",
            SecretKind::Jwt => "a JSON Web Token",
            SecretKind::PrivateKey => "a PEM private key",
            SecretKind::Password => "a password or API secret",
            SecretKind::ConnectionStringCredential => "a connection string with a password",
        }
    }
}

/// One secret: where it is and what it looks like. Never the secret's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretFinding {
    pub path: String,
    pub kind: SecretKind,
}

/// What a path says instead of an object key that is itself a secret.
pub const REDACTED_KEY: &str = "<redacted>";

/// Whether a piece of text holds a secret of any kind.
pub fn is_secret_text(text: &str) -> bool {
    !text_secrets(text).is_empty()
}

/// Every secret in `value`, each named by kind and JSON path under `base` (e.g. "$.content").
/// A value holding several kinds yields one finding per kind, in the order `value` holds them.
pub fn scan(value: &Value, base: &str) -> Vec<SecretFinding> {
    let mut findings = Vec::new();
    walk(value, base, &mut findings);
    findings
}

fn walk(value: &Value, path: &str, out: &mut Vec<SecretFinding>) {
    match value {
        Value::String(text) => {
            for kind in text_secrets(text) {
                push(out, path, kind);
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                walk(item, &child_index(path, i), out);
            }
        }
        Value::Object(map) => {
            for (key, child) in map {
                // A secret used as a key must not reappear in the path that names it.
                let key_secrets = text_secrets(key);
                let child_path =
                    if key_secrets.is_empty() { child_key(path, key) } else { child_key(path, REDACTED_KEY) };
                for kind in key_secrets {
                    push(out, &child_path, kind);
                }
                if let Some(kind) = sensitive_key(key) {
                    flag_values_under_key(child, &child_path, &kind, out);
                }
                walk(child, &child_path, out);
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

fn push(out: &mut Vec<SecretFinding>, path: &str, kind: SecretKind) {
    if !out.iter().any(|f| f.path == path && f.kind == kind) {
        out.push(SecretFinding { path: path.to_owned(), kind });
    }
}

/// A value under a key named like a credential is one, whatever it looks like, unless it is a
/// placeholder (`"********"`, `"<redacted>"`, `"${DB_PASSWORD}"`) or says where the secret is
/// kept (`"https://vault.example.com/…"`). Strings in which a specific
/// detector already found something are left to that detector, so the finding says more.
fn flag_values_under_key(value: &Value, path: &str, kind: &SecretKind, out: &mut Vec<SecretFinding>) {
    match value {
        Value::String(text)
            if !is_placeholder(text) && !is_reference(text) && text_secrets(text).is_empty() =>
        {
            push(out, path, kind.clone());
        }
        Value::Number(_) => push(out, path, kind.clone()),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                if matches!(item, Value::String(_) | Value::Number(_)) {
                    flag_values_under_key(item, &child_index(path, i), kind, out);
                }
            }
        }
        _ => {}
    }
}

/// Key names whose values are credentials, compared after lower-casing and dropping everything
/// but letters and digits, as suffixes: `db_password`, `Client-Secret` and `openaiApiKey` match;
/// `password_hint`, `password_policy` and `secret_santa` do not.
const SENSITIVE_KEY_SUFFIXES: &[&str] = &[
    "password",
    "passwords",
    "passwd",
    "pwd",
    "passphrase",
    "secret",
    "secrets",
    "apikey",
    "apikeys",
    "accesstoken",
    "refreshtoken",
    "authtoken",
    "sessiontoken",
    "bearertoken",
    "apitoken",
    "privatekey",
    "secretkey",
];

fn sensitive_key(key: &str) -> Option<SecretKind> {
    let normalized: String =
        key.chars().filter(|c| c.is_ascii_alphanumeric()).map(|c| c.to_ascii_lowercase()).collect();
    let aws_secret = normalized.contains("secretaccesskey")
        || (normalized.contains("aws")
            && (normalized.ends_with("secret") || normalized.ends_with("secretkey")));
    let lower = key.to_lowercase();
    if aws_secret {
        Some(SecretKind::AwsSecretKey)
    } else if SENSITIVE_KEY_SUFFIXES.iter().any(|suffix| normalized.ends_with(suffix))
        || ["密码", "口令", "пароль"].iter().any(|word| lower.ends_with(word))
    {
        Some(SecretKind::Password)
    } else {
        None
    }
}

/// The kinds of secret found in one string. Specific shapes first; the free-text password
/// detector only speaks when none of them did, since `api_key=sk-ant-…` is better reported as
/// the Anthropic key it is.
fn text_secrets(text: &str) -> Vec<SecretKind> {
    let bytes = text.as_bytes();
    let lower = text.to_ascii_lowercase();
    let lower = lower.as_bytes();
    let mut kinds = Vec::new();
    let detectors: [(SecretKind, bool); 9] = [
        (SecretKind::PrivateKey, has_private_key(lower)),
        (SecretKind::Jwt, has_jwt(bytes)),
        (SecretKind::AnthropicKey, has_anthropic_key(bytes)),
        (SecretKind::OpenAiKey, has_openai_key(bytes)),
        (SecretKind::GithubToken, has_github_token(bytes)),
        (SecretKind::SlackToken, has_slack_token(bytes, lower)),
        (SecretKind::AwsAccessKey, has_aws_access_key(bytes)),
        (SecretKind::AwsSecretKey, has_aws_secret_key(bytes, lower)),
        (SecretKind::ConnectionStringCredential, has_connection_string_credential(bytes)),
    ];
    for (kind, found) in detectors {
        if found {
            kinds.push(kind);
        }
    }
    if kinds.is_empty() && has_password_assignment(text, bytes, lower) {
        kinds.push(SecretKind::Password);
    }
    kinds
}

// ---------------------------------------------------------------------------------------------
// Byte helpers.

/// Where `needle` starts in `hay`, left to right, overlapping matches included.
fn positions<'a>(hay: &'a [u8], needle: &'a [u8]) -> impl Iterator<Item = usize> + 'a {
    let first = needle.first().copied();
    let starts = (hay.len() + 1).saturating_sub(needle.len().max(1));
    (0..starts).filter(move |&i| Some(hay[i]) == first && hay[i..].starts_with(needle))
}

fn run_len(bytes: &[u8], start: usize, allowed: impl Fn(u8) -> bool) -> usize {
    bytes.get(start..).map_or(0, |rest| rest.iter().take_while(|b| allowed(**b)).count())
}

/// True when a token starting at `i` is not the tail of a longer word (`task-`, `risk-`).
fn token_starts_at(bytes: &[u8], i: usize) -> bool {
    i == 0 || !matches!(bytes[i - 1], b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'-')
}

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

fn is_base64url_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

struct Mix {
    upper: bool,
    lower: bool,
    digit: bool,
}

fn mix(bytes: &[u8]) -> Mix {
    Mix {
        upper: bytes.iter().any(u8::is_ascii_uppercase),
        lower: bytes.iter().any(u8::is_ascii_lowercase),
        digit: bytes.iter().any(u8::is_ascii_digit),
    }
}

// ---------------------------------------------------------------------------------------------
// Detectors, one per shape.

/// `-----BEGIN … PRIVATE KEY-----` followed by a key body. A header alone (a runbook saying
/// what such a file starts with) is not a key.
fn has_private_key(lower: &[u8]) -> bool {
    positions(lower, b"-----begin ").any(|start| {
        let label_start = start + b"-----begin ".len();
        let label_window = &lower[label_start..lower.len().min(label_start + 80)];
        let Some(label_len) = positions(label_window, b"-----").next() else {
            return false;
        };
        let label = &lower[label_start..label_start + label_len];
        if positions(label, b"private key").next().is_none() {
            return false;
        }
        // Key bodies come in 64-character lines; prose has no such runs. The first line follows
        // the header closely (after at most a few `Proc-Type:` lines).
        let body_start = label_start + label_len + 5;
        let body = &lower[body_start..lower.len().min(body_start + 512)];
        let body_end = positions(body, b"-----end").next().unwrap_or(body.len());
        body[..body_end]
            .split(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=')))
            .any(|run| run.len() >= 24)
    })
}

/// Three base64url segments whose first decodes to a JSON object with `alg`.
fn has_jwt(bytes: &[u8]) -> bool {
    positions(bytes, b"eyJ").any(|start| {
        if start > 0 && (is_base64url_byte(bytes[start - 1]) || bytes[start - 1] == b'.') {
            return false;
        }
        let header_len = run_len(bytes, start, is_base64url_byte);
        let payload_start = start + header_len + 1;
        if header_len < 10 || bytes.get(payload_start - 1) != Some(&b'.') {
            return false;
        }
        let payload_len = run_len(bytes, payload_start, is_base64url_byte);
        let signature_start = payload_start + payload_len + 1;
        if payload_len < 2 || bytes.get(signature_start - 1) != Some(&b'.') {
            return false;
        }
        if run_len(bytes, signature_start, is_base64url_byte) < 8 {
            return false;
        }
        base64url_decode(&bytes[start..start + header_len])
            .and_then(|header| serde_json::from_slice::<Value>(&header).ok())
            .is_some_and(|header| header.get("alg").is_some())
    })
}

fn base64url_decode(input: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(input.len() * 3 / 4);
    let mut buffer: u32 = 0;
    let mut bits = 0;
    for &b in input {
        let sextet = match b {
            b'A'..=b'Z' => b - b'A',
            b'a'..=b'z' => b - b'a' + 26,
            b'0'..=b'9' => b - b'0' + 52,
            b'-' | b'+' => 62,
            b'_' | b'/' => 63,
            _ => return None,
        };
        buffer = (buffer << 6) | u32::from(sextet);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(((buffer >> bits) & 0xff) as u8);
        }
    }
    Some(out)
}

/// `sk-ant-` and at least 20 more key characters, some of them digits.
fn has_anthropic_key(bytes: &[u8]) -> bool {
    positions(bytes, b"sk-ant-").any(|start| {
        if !token_starts_at(bytes, start) {
            return false;
        }
        let body_start = start + b"sk-ant-".len();
        let body_len = run_len(bytes, body_start, is_token_byte);
        body_len >= 20 && mix(&bytes[body_start..body_start + body_len]).digit
    })
}

/// `sk-` (including `sk-proj-`, `sk-svcacct-`, …) followed by a long random-looking run: at least
/// 32 characters mixing upper case, lower case and digits. Slugs like `sk-ii-facial-essence` or
/// `sk-items` are words, not keys.
fn has_openai_key(bytes: &[u8]) -> bool {
    positions(bytes, b"sk-").any(|start| {
        let body_start = start + 3;
        if !token_starts_at(bytes, start) || bytes[body_start..].starts_with(b"ant-") {
            return false;
        }
        let body_len = run_len(bytes, body_start, is_token_byte);
        let m = mix(&bytes[body_start..body_start + body_len]);
        body_len >= 32 && m.upper && m.lower && m.digit
    })
}

/// Classic tokens (`ghp_` and kin, 36 characters) and fine-grained `github_pat_` tokens.
fn has_github_token(bytes: &[u8]) -> bool {
    let classic = [b"ghp_", b"gho_", b"ghu_", b"ghs_", b"ghr_"].iter().any(|prefix| {
        positions(bytes, *prefix).any(|start| {
            token_starts_at(bytes, start) && run_len(bytes, start + 4, |b| b.is_ascii_alphanumeric()) >= 36
        })
    });
    classic
        || positions(bytes, b"github_pat_").any(|start| {
            token_starts_at(bytes, start)
                && run_len(bytes, start + 11, |b| b.is_ascii_alphanumeric() || b == b'_') >= 40
        })
}

/// `xoxb-` and kin with a numeric body, and incoming-webhook URLs.
fn has_slack_token(bytes: &[u8], lower: &[u8]) -> bool {
    let token = [b"xoxb-", b"xoxp-", b"xoxa-", b"xoxr-", b"xoxs-", b"xoxe-"].iter().any(|prefix| {
        positions(bytes, *prefix).any(|start| {
            if !token_starts_at(bytes, start) {
                return false;
            }
            let body_start = start + 5;
            let body_len = run_len(bytes, body_start, |b| b.is_ascii_alphanumeric() || b == b'-');
            body_len >= 10 && mix(&bytes[body_start..body_start + body_len]).digit
        })
    });
    let marker = b"hooks.slack.com/services/";
    token
        || positions(lower, marker).any(|start| {
            run_len(bytes, start + marker.len(), |b| b.is_ascii_alphanumeric() || b == b'/' || b == b'_')
                >= 20
        })
}

/// `AKIA` or `ASIA` and 16 upper-case letters or digits, standing alone.
fn has_aws_access_key(bytes: &[u8]) -> bool {
    [b"AKIA", b"ASIA"].iter().any(|prefix| {
        positions(bytes, *prefix).any(|start| {
            if start > 0 && bytes[start - 1].is_ascii_alphanumeric() {
                return false;
            }
            let body = run_len(bytes, start + 4, |b| b.is_ascii_uppercase() || b.is_ascii_digit());
            body == 16 && bytes.get(start + 20).is_none_or(|b| !b.is_ascii_alphanumeric())
        })
    })
}

/// A 40-character base64 run on the same line as a name like `aws_secret_access_key`. Without
/// the name a 40-character run is as likely a SHA-1 or a file digest.
fn has_aws_secret_key(bytes: &[u8], lower: &[u8]) -> bool {
    let is_b64 = |b: u8| b.is_ascii_alphanumeric() || b == b'/' || b == b'+';
    let mut i = 0;
    while i < bytes.len() {
        if !is_b64(bytes[i]) {
            i += 1;
            continue;
        }
        let len = run_len(bytes, i, is_b64);
        let m = mix(&bytes[i..i + len]);
        if len == 40 && m.upper && m.lower {
            let line_start =
                lower[..i].iter().rposition(|b| *b == b'\n').map_or(0, |p| p + 1).max(i.saturating_sub(100));
            let context: Vec<u8> =
                lower[line_start..i].iter().copied().filter(u8::is_ascii_alphanumeric).collect();
            if positions(&context, b"secretaccesskey").next().is_some()
                || positions(&context, b"awssecret").next().is_some()
            {
                return true;
            }
        }
        i += len;
    }
    false
}

/// `scheme://user:password@host`: a URL whose authority carries a password.
fn has_connection_string_credential(bytes: &[u8]) -> bool {
    positions(bytes, b"://").any(|sep| {
        let scheme_len = bytes[..sep]
            .iter()
            .rev()
            .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'.' | b'-'))
            .count();
        if scheme_len == 0 || !bytes[sep - scheme_len].is_ascii_alphabetic() {
            return false;
        }
        let authority_start = sep + 3;
        let authority_len = run_len(bytes, authority_start, |b| {
            !b.is_ascii_whitespace() && !matches!(b, b'/' | b'?' | b'#' | b'"' | b'\'' | b'<' | b'>' | b'`')
        });
        let authority = &bytes[authority_start..authority_start + authority_len];
        let Some(at) = authority.iter().rposition(|b| *b == b'@') else {
            return false;
        };
        let userinfo = &authority[..at];
        let Some(colon) = userinfo.iter().position(|b| *b == b':') else {
            return false;
        };
        let password = String::from_utf8_lossy(&userinfo[colon + 1..]);
        !is_placeholder(&password)
    })
}

// ---------------------------------------------------------------------------------------------
// Passwords in free text.

/// Names after which `:` or `=` introduces a credential. ASCII ones are matched case-insensitively
/// and may end a longer name (`DB_PASSWORD=…`, `spring.datasource.password=…`).
const PASSWORD_WORDS: &[&[u8]] = &[
    b"password",
    b"passwd",
    b"pwd",
    b"passphrase",
    b"secret",
    b"api_key",
    b"api-key",
    b"apikey",
    b"access_token",
    b"auth_token",
    b"refresh_token",
];

/// The same in other languages support bots meet; matched as written.
const PASSWORD_WORDS_INTL: &[&str] = &["密码", "口令", "пароль", "Пароль", "ПАРОЛЬ"];

/// Words that follow `password:` in forms and policies rather than being the password.
const NOT_PASSWORDS: &[&str] = &[
    "required",
    "optional",
    "unknown",
    "hidden",
    "masked",
    "redacted",
    "removed",
    "reset",
    "expired",
    "changed",
    "updated",
    "unchanged",
    "same",
    "provided",
    "needed",
    "missing",
    "sent",
    "invalid",
    "incorrect",
    "wrong",
    "weak",
    "strong",
    "forgotten",
    "locked",
    "disabled",
    "enabled",
    "pending",
    "true",
    "false",
    "none",
    "null",
];

/// `password: hunter2`, `pwd=S3cr3t!`, `"password": "…"`, `DB_PASSWORD=…`, `密码：abc123`, and
/// `the password is Summer2024`, but not `reset your password in settings`, `the password policy
/// requires 12 characters` or `Password: must be 12 characters long`.
fn has_password_assignment(text: &str, bytes: &[u8], lower: &[u8]) -> bool {
    let ascii = PASSWORD_WORDS.iter().any(|word| {
        positions(lower, word).any(|start| {
            let end = start + word.len();
            let before_ok = start == 0 || !lower[start - 1].is_ascii_alphanumeric();
            let after_ok = lower.get(end).is_none_or(|b| !is_token_byte(*b));
            before_ok && after_ok && value_after_name(bytes, lower, end)
        })
    });
    ascii
        || PASSWORD_WORDS_INTL.iter().any(|word| {
            text.match_indices(word).any(|(start, _)| {
                // Chinese runs words together; Russian separates them.
                let before_ok = word.starts_with(is_cjk)
                    || text[..start].chars().next_back().is_none_or(|c| !c.is_alphabetic());
                before_ok && value_after_name(bytes, lower, start + word.len())
            })
        })
}

fn is_cjk(c: char) -> bool {
    matches!(c, '\u{4e00}'..='\u{9fff}' | '\u{3400}'..='\u{4dbf}')
}

/// How far past a credential's name a value is read. Passwords are shorter; the bound keeps a
/// string made of many `password="` from costing quadratic time.
const MAX_VALUE_BYTES: usize = 512;

/// Whether what follows a credential's name at `i` assigns it a value that looks like one.
fn value_after_name(bytes: &[u8], lower: &[u8], mut i: usize) -> bool {
    let bytes = &bytes[..bytes.len().min(i + MAX_VALUE_BYTES)];
    let skip_blanks = |mut i: usize| {
        while matches!(bytes.get(i), Some(b' ' | b'\t')) {
            i += 1;
        }
        i
    };
    i = skip_blanks(i);
    if matches!(bytes.get(i), Some(b'"' | b'\'')) {
        i = skip_blanks(i + 1);
    }
    let assigned = if bytes[i..].starts_with(":=".as_bytes()) || bytes[i..].starts_with(b"=>") {
        i += 2;
        true
    } else if matches!(bytes.get(i), Some(b':' | b'=')) {
        i += 1;
        true
    } else if bytes[i..].starts_with("：".as_bytes()) {
        i += "：".len();
        true
    } else {
        false
    };
    if !assigned {
        // `the password is Summer2024`: only a value mixing letters and digits counts here.
        if !lower[i..].starts_with(b"is ") {
            return false;
        }
        let start = skip_blanks(i + 3);
        let len = run_len(bytes, start, is_value_byte);
        let value = trim_trailing_punctuation(&bytes[start..start + len]);
        let m = mix(value);
        return value.len() >= 6 && m.digit && (m.upper || m.lower);
    }
    i = skip_blanks(i);
    if let Some(quote @ (b'"' | b'\'')) = bytes.get(i).copied() {
        let start = i + 1;
        let len = run_len(bytes, start, |b| b != quote && b != b'\n');
        let value = String::from_utf8_lossy(&bytes[start..start + len]);
        return value.chars().count() >= 4 && !is_placeholder(&value) && !is_reference(&value);
    }
    let len = run_len(bytes, i, is_value_byte);
    let value = trim_trailing_punctuation(&bytes[i..i + len]);
    let rest = &bytes[i + len..];
    looks_like_password(value, prose_continues(rest))
}

/// Password characters in free text: printable ASCII but quotes. Stops at spaces and at any
/// non-ASCII character (`密码：abc123，请保管` ends at `，`).
fn is_value_byte(b: u8) -> bool {
    b.is_ascii_graphic() && !matches!(b, b'"' | b'\'' | b'`')
}

fn trim_trailing_punctuation(value: &[u8]) -> &[u8] {
    let keep = value.len()
        - value
            .iter()
            .rev()
            .take_while(|b| matches!(b, b'.' | b',' | b';' | b':' | b'!' | b'?' | b')' | b']' | b'}'))
            .count();
    &value[..keep]
}

/// True when the sentence goes on with another word on the same line.
fn prose_continues(rest: &[u8]) -> bool {
    let blanks = rest.iter().take_while(|b| matches!(b, b' ' | b'\t')).count();
    // One character is at most four bytes.
    let next = String::from_utf8_lossy(&rest[blanks..rest.len().min(blanks + 4)]);
    next.chars().next().is_some_and(char::is_alphabetic)
}

fn looks_like_password(value: &[u8], sentence_goes_on: bool) -> bool {
    let text = String::from_utf8_lossy(value);
    if value.len() < 4 || is_placeholder(&text) || is_reference(&text) {
        return false;
    }
    let m = mix(value);
    let letters = m.upper || m.lower;
    let symbols = value.iter().any(|b| !b.is_ascii_alphanumeric());
    match (letters, m.digit, symbols) {
        // A PIN: digits alone. `12 characters` and `8-16 chars` are quantities, `2024-06-15` a date.
        (false, _, symbols) => !sentence_goes_on && !symbols,
        // A plain word: the password only if the sentence ends with it.
        (true, false, false) => {
            !sentence_goes_on && !NOT_PASSWORDS.contains(&text.to_ascii_lowercase().as_str())
        }
        // `case-sensitive`, `one-time` in a sentence; `Pa$$word` alone.
        (true, false, true) => !sentence_goes_on,
        (true, true, _) => true,
    }
}

/// Values that say where something is rather than being a secret: a link (`https://vault…`; a URL
/// with a password in it is caught as a connection string) or a file path (`PWD=/srv/app`).
fn is_reference(value: &str) -> bool {
    let path_like = ["/", "~/", "./", "../"].iter().any(|prefix| value.starts_with(prefix))
        && value.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'.' | b'_' | b'-' | b'~'))
        && (value.matches('/').count() >= 2 || !value.bytes().any(|b| b.is_ascii_digit()));
    path_like || value.contains("://")
}

/// Values that stand for a secret without being one: masks, template references, "redacted".
fn is_placeholder(value: &str) -> bool {
    let t = value.trim().trim_matches(|c| c == '"' || c == '\'');
    if t.is_empty() || t.chars().all(|c| "*•●·xX#.-_?".contains(c)) {
        return true;
    }
    if t.starts_with(['<', '{', '[']) || t.starts_with("${") || t.starts_with("%(") || t == "%s" {
        return true;
    }
    // `$DB_PASSWORD`, `%DB_PASSWORD%`: environment references.
    let env_name = |name: &str| {
        !name.is_empty() && name.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
    };
    if t.strip_prefix('$').is_some_and(env_name)
        || t.strip_prefix('%').and_then(|r| r.strip_suffix('%')).is_some_and(env_name)
    {
        return true;
    }
    let lower = t.to_lowercase();
    matches!(
        lower.as_str(),
        "redacted"
            | "hidden"
            | "masked"
            | "removed"
            | "none"
            | "null"
            | "nil"
            | "n/a"
            | "na"
            | "tbd"
            | "unknown"
            | "unset"
            | "not set"
            | "empty"
            | "placeholder"
            | "dummy"
            | "example"
    ) || lower.starts_with("your_")
        || lower.starts_with("your-")
        || lower.starts_with("your ")
}

#[cfg(test)]
mod tests;
