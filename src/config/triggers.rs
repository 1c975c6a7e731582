//! The `[triggers]` section: where actions go and how hard delivery tries.
//!
//! ```toml
//! [triggers]
//! max_attempts = 12            # then the action is dead (replayable)
//! cooldown_seconds = 600       # a record fires once per subject (or key) per ten minutes
//! max_waiting_per_tenant = 1000
//!
//! [triggers.endpoints.ticketing]
//! url = "https://tickets.example.com/hooks/memgate"
//! secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]   # two during a rotation: both sign
//! timeout_ms = 5000
//! include_conversation = false # the person's words stay out of the body
//! allow_private = false        # refuse private, loopback, link-local addresses
//! max_per_minute = 60          # attempts, all replicas together
//! ```
//!
//! A record names an endpoint (`"service": "ticketing"`), never a URL: what memgate may call is
//! the operator's choice alone. Secrets and URLs are checked while the file is read, so a bad one
//! fails startup with its key's path (`serde_path_to_error`); `TriggersConfig::validate` checks
//! what spans fields. Defaults sit beside their fields. A body template is checked by the triggers
//! themselves (`triggers::body`), which alone know what a template sees.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use secrecy::{ExposeSecret, SecretSlice};
use serde::{Deserialize, Deserializer};
use std::collections::BTreeMap;
use std::fmt;

/// Standard Webhooks: a symmetric secret is 24 to 64 random bytes, base64, after `whsec_`.
pub const MIN_SECRET_BYTES: usize = 24;
pub const MAX_SECRET_BYTES: usize = 64;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TriggersConfig {
    /// Off: no condition is evaluated and the worker does not start.
    #[serde(default = "default_enabled")]
    pub enabled: bool,
    #[serde(default)]
    pub endpoints: BTreeMap<String, EndpointConfig>,
    /// Attempts before an action is dead. With the default backoff, 12 attempts span about
    /// three hours on average (full jitter) and at most about six.
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    /// The first retry waits up to this long; each later one up to twice the one before.
    #[serde(default = "default_backoff_base_ms")]
    pub backoff_base_ms: u64,
    /// No retry waits longer, `Retry-After` included.
    #[serde(default = "default_backoff_max_ms")]
    pub backoff_max_ms: u64,
    /// How long a claimed action is reserved for the replica delivering it. A replica that dies
    /// mid-delivery leaves it due again after this; must exceed every endpoint's timeout.
    #[serde(default = "default_lease_ms")]
    pub lease_ms: u64,
    /// How often the worker looks for due actions when nothing woke it (a local decision wakes
    /// it at once; other replicas' decisions and retries are found by this poll).
    #[serde(default = "default_poll_interval_ms")]
    pub poll_interval_ms: u64,
    /// Actions claimed per round.
    #[serde(default = "default_batch_size")]
    pub batch_size: u32,
    /// Deliveries in flight at once, per replica.
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    /// Delivered actions are kept this long for the admin list, then pruned. Dead ones stay until
    /// replayed or pruned by `dead_retention_hours`.
    #[serde(default = "default_delivered_retention_hours")]
    pub delivered_retention_hours: u64,
    #[serde(default = "default_dead_retention_hours")]
    pub dead_retention_hours: u64,
    /// After a record fires for a subject (or, without one, for the caller's key), it does not
    /// fire for them again for this long, however the words change; a record may set its own
    /// (`trigger_cooldown_seconds`). 0: no cooldown. Kept in the database: it holds across
    /// replicas.
    #[serde(default = "default_cooldown_seconds")]
    pub cooldown_seconds: u64,
    /// The most actions a tenant may have waiting (pending or retrying); past it new ones are
    /// refused, counted and logged.
    #[serde(default = "default_max_waiting_per_tenant")]
    pub max_waiting_per_tenant: u64,
}

fn default_enabled() -> bool {
    true
}
fn default_max_attempts() -> u32 {
    12
}
fn default_backoff_base_ms() -> u64 {
    10_000
}
fn default_backoff_max_ms() -> u64 {
    6 * 60 * 60 * 1000
}
fn default_lease_ms() -> u64 {
    60_000
}
fn default_poll_interval_ms() -> u64 {
    1_000
}
fn default_batch_size() -> u32 {
    32
}
fn default_concurrency() -> usize {
    8
}
fn default_delivered_retention_hours() -> u64 {
    7 * 24
}
fn default_dead_retention_hours() -> u64 {
    30 * 24
}
fn default_cooldown_seconds() -> u64 {
    10 * 60
}
fn default_max_waiting_per_tenant() -> u64 {
    1_000
}

/// The longest cooldown, globally or on a record: a week.
pub const MAX_COOLDOWN_SECONDS: u64 = 7 * 24 * 60 * 60;

impl Default for TriggersConfig {
    fn default() -> Self {
        TriggersConfig {
            enabled: default_enabled(),
            endpoints: BTreeMap::new(),
            max_attempts: default_max_attempts(),
            backoff_base_ms: default_backoff_base_ms(),
            backoff_max_ms: default_backoff_max_ms(),
            lease_ms: default_lease_ms(),
            poll_interval_ms: default_poll_interval_ms(),
            batch_size: default_batch_size(),
            concurrency: default_concurrency(),
            delivered_retention_hours: default_delivered_retention_hours(),
            dead_retention_hours: default_dead_retention_hours(),
            cooldown_seconds: default_cooldown_seconds(),
            max_waiting_per_tenant: default_max_waiting_per_tenant(),
        }
    }
}

/// `[triggers.endpoints.<name>]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointConfig {
    pub url: EndpointUrl,
    /// `whsec_…` secrets; every one signs each delivery (the `webhook-signature` header lists a
    /// signature per secret), so a rotation adds the new secret, waits for the receiver to
    /// switch, and removes the old one.
    pub secrets: Vec<WebhookSecret>,
    /// The whole attempt: connect, send, answer's headers, the answer's first KiB.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Send the person's words (the excerpt that matched, and the text conditions read) in the
    /// body. Off by default: a webhook is not a copy of the conversation.
    #[serde(default)]
    pub include_conversation: bool,
    /// Allow private, loopback, link-local and unique-local addresses (a receiver on the same
    /// host or network). Off by default: a misconfigured or rebinding name cannot reach inside.
    #[serde(default)]
    pub allow_private: bool,
    /// A minijinja template for the body, which must render JSON; the default is
    /// `body::DEFAULT_TEMPLATE`. Variables: docs/triggers.md.
    #[serde(default)]
    pub template: Option<String>,
    /// Attempts per minute to this endpoint, all replicas together, in bursts of up to as many:
    /// what waits beyond stays queued and goes as the pace allows.
    #[serde(default = "default_max_per_minute")]
    pub max_per_minute: u32,
}

fn default_timeout_ms() -> u64 {
    5_000
}
fn default_max_per_minute() -> u32 {
    60
}

impl EndpointConfig {
    pub fn url(&self) -> &url::Url {
        self.url.url()
    }
}

/// An endpoint's URL: absolute, `http` or `https`, with a host, no credentials, no fragment.
#[derive(Clone, PartialEq, Eq)]
pub struct EndpointUrl(url::Url);

impl EndpointUrl {
    pub fn parse(text: &str) -> Result<EndpointUrl, String> {
        let url = url::Url::parse(text).map_err(|err| format!("not an absolute URL ({err})"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!("an endpoint URL is http:// or https:// (got {}://)", url.scheme()));
        }
        if url.host().is_none() {
            return Err("an endpoint URL names a host".to_owned());
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err("an endpoint URL carries no credentials; receivers verify the signature".to_owned());
        }
        if url.fragment().is_some() {
            return Err("an endpoint URL has no #fragment".to_owned());
        }
        Ok(EndpointUrl(url))
    }

    pub fn url(&self) -> &url::Url {
        &self.0
    }
}

impl fmt::Debug for EndpointUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl<'de> Deserialize<'de> for EndpointUrl {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        EndpointUrl::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// A Standard Webhooks signing secret: `whsec_` + base64 of 24 to 64 bytes. Holds the decoded
/// key; never printed. Reading a malformed one does not fail (the file reader's error would quote
/// the line, secret and all): `TriggersConfig::validate` reports it by key, without the value.
#[derive(Clone)]
pub struct WebhookSecret(Result<SecretSlice<u8>, String>);

impl WebhookSecret {
    pub fn parse(text: &str) -> Result<WebhookSecret, String> {
        let secret = WebhookSecret::read(text);
        match &secret.0 {
            Ok(_) => Ok(secret),
            Err(message) => Err(message.clone()),
        }
    }

    fn read(text: &str) -> WebhookSecret {
        let Some(encoded) = text.strip_prefix("whsec_") else {
            return WebhookSecret(Err(
                "a webhook secret starts with `whsec_` (Standard Webhooks), then base64".to_owned(),
            ));
        };
        let Ok(key) = STANDARD.decode(encoded.trim()) else {
            return WebhookSecret(Err(
                "the part after `whsec_` is not base64 (A–Z a–z 0–9 + /, = padding)".to_owned()
            ));
        };
        if !(MIN_SECRET_BYTES..=MAX_SECRET_BYTES).contains(&key.len()) {
            return WebhookSecret(Err(format!(
                "a webhook secret holds {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} random bytes (got {}); \
                 make one with `echo whsec_$(openssl rand -base64 32)`",
                key.len()
            )));
        }
        WebhookSecret(Ok(SecretSlice::from(key)))
    }

    /// Why the secret is unusable, if it is.
    pub fn problem(&self) -> Option<&str> {
        self.0.as_ref().err().map(String::as_str)
    }

    /// The HMAC key: the decoded bytes (empty for a malformed secret, which `validate` refuses).
    pub fn key(&self) -> &[u8] {
        match &self.0 {
            Ok(key) => key.expose_secret(),
            Err(_) => &[],
        }
    }
}

impl fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("whsec_[redacted]")
    }
}

impl<'de> Deserialize<'de> for WebhookSecret {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Ok(WebhookSecret::read(&text))
    }
}

/// An endpoint name: what `service` may say and what `[triggers.endpoints.<name>]` may be called.
pub fn valid_service(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && name.len() <= 64
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// A `[triggers]` setting that cannot work, named by its key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct TriggersConfigError {
    pub key: String,
    pub message: String,
}

impl TriggersConfig {
    /// Checks what the types alone cannot: names, counts and ranges. Every problem, each naming
    /// its key. Body templates are the triggers' own language: `triggers::body` compiles and
    /// checks them when the triggers are built.
    pub fn validate(&self) -> Result<(), Vec<TriggersConfigError>> {
        let mut errors = Vec::new();
        let mut fail = |key: String, message: String| errors.push(TriggersConfigError { key, message });
        if !(1..=100).contains(&self.max_attempts) {
            fail("triggers.max_attempts".into(), format!("1 to 100 (got {})", self.max_attempts));
        }
        if self.backoff_base_ms == 0 || self.backoff_base_ms > self.backoff_max_ms {
            fail(
                "triggers.backoff_base_ms".into(),
                format!(
                    "above 0 and at most backoff_max_ms (got {} and {})",
                    self.backoff_base_ms, self.backoff_max_ms
                ),
            );
        }
        if self.poll_interval_ms == 0 || self.poll_interval_ms > 60_000 {
            fail("triggers.poll_interval_ms".into(), format!("1 to 60000 (got {})", self.poll_interval_ms));
        }
        if !(1..=1000).contains(&self.batch_size) {
            fail("triggers.batch_size".into(), format!("1 to 1000 (got {})", self.batch_size));
        }
        if !(1..=256).contains(&self.concurrency) {
            fail("triggers.concurrency".into(), format!("1 to 256 (got {})", self.concurrency));
        }
        if self.cooldown_seconds > MAX_COOLDOWN_SECONDS {
            fail(
                "triggers.cooldown_seconds".into(),
                format!("0 (none) to {MAX_COOLDOWN_SECONDS} (a week) (got {})", self.cooldown_seconds),
            );
        }
        if !(1..=1_000_000).contains(&self.max_waiting_per_tenant) {
            fail(
                "triggers.max_waiting_per_tenant".into(),
                format!("1 to 1000000 (got {})", self.max_waiting_per_tenant),
            );
        }
        let longest = self.endpoints.values().map(|e| e.timeout_ms).max().unwrap_or(0);
        if self.lease_ms < longest + 5_000 {
            fail(
                "triggers.lease_ms".into(),
                format!(
                    "must exceed the longest endpoint timeout by 5000 at least (got {} with a {longest} ms \
                     timeout): a lease that ends mid-delivery lets another replica send it again",
                    self.lease_ms
                ),
            );
        }
        for (name, endpoint) in &self.endpoints {
            let key = |field: &str| format!("triggers.endpoints.{name}.{field}");
            if !valid_service(name) {
                fail(
                    format!("triggers.endpoints.{name}"),
                    "an endpoint name is a letter, then letters, digits, `_` or `-` (64 at most): records \
                     name it as their `service`"
                        .into(),
                );
            }
            for (i, secret) in endpoint.secrets.iter().enumerate() {
                if let Some(problem) = secret.problem() {
                    fail(format!("triggers.endpoints.{name}.secrets[{i}]"), problem.to_owned());
                }
            }
            if endpoint.secrets.is_empty() || endpoint.secrets.len() > 2 {
                fail(
                    key("secrets"),
                    format!(
                        "one secret, or two while rotating (got {}); every delivery is signed",
                        endpoint.secrets.len()
                    ),
                );
            }
            if !(100..=60_000).contains(&endpoint.timeout_ms) {
                fail(key("timeout_ms"), format!("100 to 60000 (got {})", endpoint.timeout_ms));
            }
            if !(1..=60_000).contains(&endpoint.max_per_minute) {
                fail(key("max_per_minute"), format!("1 to 60000 (got {})", endpoint.max_per_minute));
            }
        }
        if errors.is_empty() { Ok(()) } else { Err(errors) }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn read(toml_text: &str) -> Result<TriggersConfig, String> {
        let de = toml::Deserializer::parse(toml_text).map_err(|e| e.to_string())?;
        serde_path_to_error::deserialize(de).map_err(|e| format!("{}: {}", e.path(), e.inner()))
    }

    #[test]
    fn defaults_and_an_endpoint() {
        let config = read(
            r#"
            [endpoints.ticketing]
            url = "https://tickets.example.com/hooks/memgate"
            secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
            "#,
        )
        .unwrap();
        assert!(config.enabled);
        assert_eq!((config.max_attempts, config.lease_ms), (12, 60_000));
        assert_eq!((config.cooldown_seconds, config.max_waiting_per_tenant), (600, 1_000));
        assert_eq!(config.endpoints["ticketing"].max_per_minute, 60);
        let endpoint = &config.endpoints["ticketing"];
        assert_eq!(endpoint.timeout_ms, 5_000);
        assert!(!endpoint.include_conversation && !endpoint.allow_private);
        assert_eq!(endpoint.secrets[0].key().len(), 24);
        assert_eq!(format!("{:?}", endpoint.secrets), "[whsec_[redacted]]");
        config.validate().unwrap();
    }

    #[test]
    fn bad_urls_and_secrets_name_their_key() {
        let error = read(
            r#"
            [endpoints.t]
            url = "ftp://example.com/x"
            secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
            "#,
        )
        .unwrap_err();
        assert!(error.starts_with("endpoints.t.url:") && error.contains("http://"), "{error}");
        for (secret, says) in [
            ("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_"),
            ("whsec_not base64!", "base64"),
            ("whsec_c2hvcnQ=", "24 to 64"),
        ] {
            let config =
                read(&format!("[endpoints.t]\nurl = \"https://x.example\"\nsecrets = [\"{secret}\"]"))
                    .unwrap();
            let errors = config.validate().unwrap_err();
            assert_eq!(errors.len(), 1, "{errors:?}");
            assert_eq!(errors[0].key, "triggers.endpoints.t.secrets[0]");
            assert!(errors[0].message.contains(says), "{errors:?}");
            assert!(!errors[0].to_string().contains(secret), "the secret is not echoed: {errors:?}");
            assert!(WebhookSecret::parse(secret).is_err());
        }
        assert!(EndpointUrl::parse("https://user:pw@example.com/").is_err());
        assert!(EndpointUrl::parse("https://example.com/#x").is_err());
        assert!(EndpointUrl::parse("/relative").is_err());
        assert!(read("[endpoints.t]\nurl = \"https://x.example\"\nsecrets = []\nsurprise = 1").is_err());
    }

    #[test]
    fn validation_spans_fields() {
        let mut config = read(
            r#"
            max_attempts = 0
            lease_ms = 10000
            cooldown_seconds = 604801
            max_waiting_per_tenant = 0
            [endpoints.t]
            url = "https://x.example"
            secrets = []
            timeout_ms = 30000
            max_per_minute = 0
            "#,
        )
        .unwrap();
        let keys: Vec<String> = config.validate().unwrap_err().into_iter().map(|e| e.key).collect();
        assert_eq!(
            keys,
            [
                "triggers.max_attempts",
                "triggers.cooldown_seconds",
                "triggers.max_waiting_per_tenant",
                "triggers.lease_ms",
                "triggers.endpoints.t.secrets",
                "triggers.endpoints.t.max_per_minute",
            ]
        );
        config.endpoints.clear();
        config.max_attempts = 3;
        config.cooldown_seconds = 0;
        config.max_waiting_per_tenant = 1;
        config.validate().unwrap();
    }
}
