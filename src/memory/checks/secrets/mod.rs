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

mod bytes;
mod names;
mod passwords;
mod placeholders;
mod shapes;

#[cfg(test)]
mod tests;

use super::json_path::{child_index, child_key};
use names::sensitive_key;
use passwords::has_password_assignment;
use placeholders::{is_placeholder, is_reference};
use serde_json::Value;
use shapes::*;
use std::collections::HashSet;

/// What a secret looks like it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SecretKind {
    AwsAccessKey,
    AwsSecretKey,
    AnthropicKey,
    OpenAiKey,
    GithubToken,
    GitlabToken,
    SlackToken,
    StripeKey,
    GoogleApiKey,
    HuggingFaceToken,
    NpmToken,
    MemgateKey,
    WebhookSecret,
    BearerToken,
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
            SecretKind::GitlabToken => "gitlab_token",
            SecretKind::SlackToken => "slack_token",
            SecretKind::StripeKey => "stripe_key",
            SecretKind::GoogleApiKey => "google_api_key",
            SecretKind::HuggingFaceToken => "hugging_face_token",
            SecretKind::NpmToken => "npm_token",
            SecretKind::MemgateKey => "memgate_key",
            SecretKind::WebhookSecret => "webhook_secret",
            SecretKind::BearerToken => "bearer_token",
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
            SecretKind::GitlabToken => "a GitLab access token",
            SecretKind::SlackToken => "a Slack token or webhook URL",
            SecretKind::StripeKey => "a Stripe secret or restricted key",
            SecretKind::GoogleApiKey => "a Google API key",
            SecretKind::HuggingFaceToken => "a Hugging Face token",
            SecretKind::NpmToken => "an npm access token",
            SecretKind::MemgateKey => "a memgate gateway key",
            SecretKind::WebhookSecret => "a webhook signing secret",
            SecretKind::BearerToken => "a bearer token in an Authorization header",
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
    let mut findings = Findings::default();
    walk(value, base, &mut findings);
    findings.list
}

/// Findings in the order they were found, each (path, kind) once. Paths repeat: a secret key
/// and its value share one, and every secret key of an object is `<redacted>` in its path. The
/// set answers "seen already?" in constant time; a search of the list made a value with many
/// findings (`{"pwd": [0, 0, …]}`) quadratic.
#[derive(Default)]
struct Findings {
    list: Vec<SecretFinding>,
    seen: HashSet<(String, SecretKind)>,
}

impl Findings {
    fn push(&mut self, path: &str, kind: SecretKind) {
        if self.seen.insert((path.to_owned(), kind)) {
            self.list.push(SecretFinding { path: path.to_owned(), kind });
        }
    }
}

fn walk(value: &Value, path: &str, out: &mut Findings) {
    match value {
        Value::String(text) => {
            for kind in text_secrets(text) {
                out.push(path, kind);
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
                    out.push(&child_path, kind);
                }
                if let Some(kind) = sensitive_key(key) {
                    flag_values_under_key(child, &child_path, kind, out);
                }
                walk(child, &child_path, out);
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// A value under a key named like a credential is one, whatever it looks like, unless it is a
/// placeholder (`"********"`, `"<redacted>"`, `"${DB_PASSWORD}"`) or says where the secret is
/// kept (`"https://vault.example.com/…"`). Strings in which a specific
/// detector already found something are left to that detector, so the finding says more.
fn flag_values_under_key(value: &Value, path: &str, kind: SecretKind, out: &mut Findings) {
    match value {
        Value::String(text)
            if !is_placeholder(text) && !is_reference(text) && text_secrets(text).is_empty() =>
        {
            out.push(path, kind);
        }
        Value::Number(_) => out.push(path, kind),
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

/// The kinds of secret found in one string. Specific shapes first; the free-text password
/// detector only speaks when none of them did, since `api_key=sk-ant-…` is better reported as
/// the Anthropic key it is.
fn text_secrets(text: &str) -> Vec<SecretKind> {
    let bytes = text.as_bytes();
    let lower = text.to_ascii_lowercase();
    let lower = lower.as_bytes();
    let mut kinds = Vec::new();
    let detectors: [(SecretKind, bool); 17] = [
        (SecretKind::PrivateKey, has_private_key(lower)),
        (SecretKind::Jwt, has_jwt(bytes)),
        (SecretKind::AnthropicKey, has_anthropic_key(bytes)),
        (SecretKind::OpenAiKey, has_openai_key(bytes)),
        (SecretKind::GithubToken, has_github_token(bytes)),
        (SecretKind::GitlabToken, has_gitlab_token(bytes)),
        (SecretKind::SlackToken, has_slack_token(bytes, lower)),
        (SecretKind::StripeKey, has_stripe_key(bytes)),
        (SecretKind::GoogleApiKey, has_google_api_key(bytes)),
        (SecretKind::HuggingFaceToken, has_hugging_face_token(bytes)),
        (SecretKind::NpmToken, has_npm_token(bytes)),
        (SecretKind::MemgateKey, has_memgate_key(bytes)),
        (SecretKind::WebhookSecret, has_webhook_secret(bytes)),
        (SecretKind::BearerToken, has_bearer_token(bytes, lower)),
        (SecretKind::AwsAccessKey, has_aws_access_key(bytes)),
        (SecretKind::AwsSecretKey, has_aws_secret_key(bytes, lower)),
        (SecretKind::ConnectionStringCredential, has_connection_string_credential(bytes)),
    ];
    for (kind, found) in detectors {
        if found {
            kinds.push(kind);
        }
    }
    if kinds.is_empty() && has_password_assignment(text, lower) {
        kinds.push(SecretKind::Password);
    }
    kinds
}
