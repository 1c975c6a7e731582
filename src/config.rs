//! Configuration: parse, then validate, then run.
//!
//! Sources in rising precedence: the TOML file (`--config`), environment variables, command-line
//! flags. `RawConfig` mirrors the file with every key optional and unknown keys refused; the
//! environment and flags are laid over it; `RawConfig::validate` turns the result into a `Config`
//! whose fields are known good, or fails naming the key. `memgate.example.toml` documents every key.

use crate::error::StartupError;
use crate::fanout::RedisConfig;
use crate::identity::jwt::JwtConfig;
use crate::identity::{AuthMode, ClaimMapping, IdentityConfig};
use secrecy::SecretString;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The semantic threshold calibrated for memgate's int8 multilingual-e5-small with language
/// centering, the default (docs/embedding.md, "Calibration"): int8 scores run about 0.01 below
/// the float32 model's, and 0.19 keeps LoCoMo's recall and records per question where 0.20 kept
/// them for float32 (which should set `embedding.similarity_threshold = 0.20`).
pub const DEFAULT_SIMILARITY: f32 = 0.19;
/// A near-duplicate write, same model and centering (docs/embedding.md). A twin must also keep
/// the same figures and negations (`memory`), since different short facts can score high too.
pub const DEFAULT_DEDUPE: f32 = 0.90;
/// The same two thresholds for the model's raw cosines (`language_centering = false`), which
/// bunch in 0.7–0.9 even for unrelated texts.
pub const RAW_SIMILARITY: f32 = 0.80;
pub const RAW_DEDUPE: f32 = 0.96;

/// Anthropic's own limit for a Messages request body.
pub const DEFAULT_MAX_BODY_BYTES: u64 = 32 * 1024 * 1024;
/// Messages bodies held at once: four of the largest with their injected copies.
pub const DEFAULT_INFLIGHT_BODY_BYTES: u64 = 8 * DEFAULT_MAX_BODY_BYTES;
/// What one client address, or one caller, may hold of that: two of the largest bodies, half of
/// the whole.
pub const DEFAULT_INFLIGHT_BODY_BYTES_PER_HOLDER: u64 = 4 * DEFAULT_MAX_BODY_BYTES;

/// The file's shape: every key optional, unknown keys refused with their path.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    pub listen: Option<String>,
    pub allowed_hosts: Option<Vec<String>>,
    #[serde(default)]
    pub upstream: RawUpstream,
    #[serde(default)]
    pub auth: RawAuth,
    #[serde(default)]
    pub limits: RawLimits,
    #[serde(default)]
    pub client_ip: RawClientIp,
    #[serde(default)]
    pub shutdown: RawShutdown,
    #[serde(default)]
    pub log: RawLog,
    #[serde(default)]
    pub database: RawDatabase,
    #[serde(default)]
    pub redis: RawRedis,
    #[serde(default)]
    pub admin: RawAdmin,
    #[serde(default)]
    pub records: RawRecords,
    #[serde(default)]
    pub embedding: RawEmbedding,
    #[serde(default)]
    pub memory: RawMemory,
    #[serde(default)]
    pub releases: std::collections::BTreeMap<String, RawRelease>,
    #[serde(default)]
    pub metrics: RawMetrics,
    #[serde(default)]
    pub console: RawConsole,
    /// Validated by `TriggersConfig::validate`; its keys are docs/triggers.md's.
    #[serde(default)]
    pub triggers: crate::triggers::TriggersConfig,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMetrics {
    pub history_retention_days: Option<u32>,
    pub minute_history_hours: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConsole {
    pub recent_requests: Option<usize>,
    pub recent_request_ttl_secs: Option<u64>,
    pub replica: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEmbedding {
    pub model_dir: Option<PathBuf>,
    pub ort_dylib_path: Option<PathBuf>,
    pub model_name: Option<String>,
    pub query_prefix: Option<String>,
    pub passage_prefix: Option<String>,
    pub threads: Option<usize>,
    pub max_batch: Option<usize>,
    pub cache_entries: Option<usize>,
    pub language_centering: Option<bool>,
    pub similarity_threshold: Option<f32>,
    pub dedupe_threshold: Option<f32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMemory {
    pub funnel_timeout_ms: Option<u64>,
    pub fail_closed: Option<bool>,
    pub templates_dir: Option<PathBuf>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRelease {
    pub schema_versions: Option<Vec<String>>,
    pub similarity_threshold: Option<f32>,
    pub budget_tokens: Option<usize>,
    pub max_items: Option<usize>,
    pub max_stubs: Option<usize>,
    pub placement: Option<String>,
    pub empty_block: Option<bool>,
    /// `hybrid` (meaning and words fused) or `dense` (meaning alone).
    pub retrieval: Option<String>,
    pub lexical_weight: Option<f32>,
    pub min_lexical: Option<f32>,
    /// How the person's words are found (`query`); absent keys keep the defaults.
    pub query: Option<RawQuery>,
    /// memgate's memory tools for this release's callers: `off`, `read` or `write` (the default;
    /// a caller still needs the key permission).
    pub memory_tools: Option<String>,
    /// What the write tools' records start as: `active` (the default) or `proposed`.
    pub agent_writes: Option<String>,
    /// Upstream rounds of one request whose tool calls memgate answers (default 4).
    pub max_tool_rounds: Option<u32>,
    /// The time memgate's tool rounds may take in all, in ms (default 60000).
    pub tool_time_budget_ms: Option<u64>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawQuery {
    pub harness_tags: Option<Vec<String>>,
    pub unwrap_tags: Option<Vec<String>>,
    pub follow_up_words: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDatabase {
    pub url: Option<String>,
    pub poll_interval_ms: Option<u64>,
    pub tombstone_retention_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRedis {
    pub url: Option<String>,
    pub key_prefix: Option<String>,
    pub shared_read_timeout_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdmin {
    pub token: Option<String>,
    pub viewer_token: Option<String>,
    pub listen: Option<String>,
    pub max_import_bytes: Option<u64>,
    pub rate_limit_per_minute: Option<u32>,
    pub session_secret: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRecords {
    pub schemas_dir: Option<PathBuf>,
    pub max_content_bytes: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpstream {
    pub url: Option<String>,
    pub api_key: Option<String>,
    pub connect_timeout_ms: Option<u64>,
    pub first_byte_timeout_ms: Option<u64>,
    pub stream_idle_timeout_ms: Option<u64>,
    pub pool_idle_timeout_ms: Option<u64>,
    pub pool_max_idle_per_host: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAuth {
    pub mode: Option<String>,
    pub rate_limit_per_minute: Option<u32>,
    pub passthrough_rate_limit_per_minute: Option<u32>,
    pub preauth_rate_limit_per_minute: Option<u32>,
    pub stale_key_grace_secs: Option<u64>,
    #[serde(default)]
    pub jwt: RawJwt,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawJwt {
    pub hs256_secret: Option<String>,
    pub public_key_file: Option<PathBuf>,
    pub jwks_file: Option<PathBuf>,
    pub issuer: Option<String>,
    pub audience: Option<String>,
    pub leeway_secs: Option<u64>,
    pub tenant_claim: Option<String>,
    pub subject_scope_prefix: Option<String>,
    pub team_claim: Option<String>,
    pub scopes_claim: Option<String>,
    pub permissions_claim: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    pub max_body_bytes: Option<u64>,
    pub body_read_timeout_ms: Option<u64>,
    pub max_inflight_body_bytes: Option<u64>,
    pub max_inflight_requests: Option<usize>,
    pub inflight_wait_ms: Option<u64>,
    pub body_idle_timeout_ms: Option<u64>,
    pub max_inflight_body_bytes_per_address: Option<u64>,
    pub max_inflight_body_bytes_per_caller: Option<u64>,
    pub header_read_timeout_ms: Option<u64>,
    pub connection_idle_timeout_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawClientIp {
    pub trusted_proxies: Option<Vec<String>>,
    pub header: Option<String>,
    pub ipv6_limit_prefix: Option<u8>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawShutdown {
    pub grace_ms: Option<u64>,
    pub drain_delay_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLog {
    pub format: Option<String>,
    pub level: Option<String>,
}

/// Values given on the command line; each, when present, beats the file and the environment.
#[derive(Debug, Default, Clone, clap::Args)]
pub struct ConfigFlags {
    /// TOML configuration file (see memgate.example.toml).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address to listen on, e.g. 127.0.0.1:8080 (port 0 picks a free port).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// The Anthropic API base URL.
    #[arg(long, value_name = "URL")]
    pub upstream_url: Option<String>,
    /// `passthrough` (callers' own Anthropic keys go upstream) or `managed` (memgate's key does).
    #[arg(long, value_name = "MODE")]
    pub auth_mode: Option<String>,
    /// `text` or `json`.
    #[arg(long, value_name = "FORMAT")]
    pub log_format: Option<String>,
    /// `sqlite://FILE` or `postgres://…`.
    #[arg(long, value_name = "URL")]
    pub database_url: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// A validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    /// The `Host` names memgate answers for; the default depends on the listener
    /// (`allowed_hosts::HostList::for_listener`).
    pub allowed_hosts: crate::allowed_hosts::HostList,
    pub upstream: UpstreamConfig,
    pub auth_mode: AuthMode,
    pub identity: IdentityConfig,
    pub limits: Limits,
    pub client_addrs: crate::client_addr::ClientAddrs,
    pub shutdown_grace: Duration,
    /// After SIGTERM, how long memgate goes on accepting (answering `/readyz` 503 and closing each
    /// connection after its answer) before it stops accepting: time for load balancers to notice.
    pub drain_delay: Duration,
    pub log_format: LogFormat,
    pub log_level: String,
    pub database_url: String,
    /// How often a replica looks in the store for other replicas' changes (records, releases),
    /// lets the canary guards judge, and writes access counts.
    pub poll_interval: Duration,
    /// How long the ids of removed records are kept for other replicas to take in; a replica
    /// that was away longer reloads every record.
    pub tombstone_retention: Duration,
    /// Change fan-out between replicas (`fanout`); `None` runs on the poll alone.
    pub redis: Option<RedisConfig>,
    pub admin: AdminConfig,
    pub records: RecordsConfig,
    pub embedding: EmbeddingConfig,
    pub memory: MemoryConfig,
    /// Release definitions from the file; built-in `v1` and `v2` fill in what is absent.
    pub releases: std::collections::BTreeMap<String, RawRelease>,
    pub console: ConsoleConfig,
    /// `[triggers]`: endpoints and the outbox's delivery schedule (docs/triggers.md).
    pub triggers: crate::triggers::TriggersConfig,
}

/// What the console keeps: the metrics history behind its charts and the recent requests its
/// explain picker lists (docs/console.md).
#[derive(Debug, Clone)]
pub struct ConsoleConfig {
    /// 5-minute rows (the 24 h view) are kept this many days.
    pub history_retention_days: u32,
    /// Minute rows (the 1 h view) are kept this many hours.
    pub minute_history_hours: u32,
    /// Requests kept per tenant for the explain picker; 0 keeps none.
    pub recent_requests: usize,
    pub recent_request_ttl: Duration,
    /// This replica's name in the history; `None`: `HOSTNAME`, else a random id per start.
    pub replica: Option<String>,
}

#[derive(Debug, Clone)]
pub struct EmbeddingConfig {
    pub model: crate::embed::EmbedConfig,
    /// Default semantic threshold for releases that set none; calibrated per model.
    pub similarity_threshold: f32,
    /// Cosine at or above which a write of the same type and scope updates its near twin.
    pub dedupe_threshold: f32,
}

#[derive(Debug, Clone)]
pub struct MemoryConfig {
    /// Time allowed for the query embedding and the funnel; past it the request goes on without
    /// memory (`degraded`), or fails when `fail_closed`.
    pub funnel_timeout: Duration,
    pub fail_closed: bool,
    /// Releases' templates added to or replacing the built-in ones; `None`: the built-ins only.
    pub templates_dir: Option<PathBuf>,
}

#[derive(Debug, Clone)]
pub struct AdminConfig {
    /// Bearer token of the admin API; `None` turns the admin API off.
    pub token: Option<SecretString>,
    /// The read-only token (the console's viewer role); `None`: no viewer role.
    pub viewer_token: Option<SecretString>,
    /// A listener of its own for `/admin` and `/metrics`, off the public one; `None` serves them
    /// on `listen`.
    pub listen: Option<SocketAddr>,
    pub max_import_bytes: u64,
    /// Failed admin authentications allowed per client address and minute.
    pub rate_limit_per_minute: u32,
    /// The key console sessions are bound to their token under (`console::AdminTokens`); `None`:
    /// a random one the store keeps, shared by every replica on the database.
    pub session_secret: Option<SecretString>,
}

#[derive(Debug, Clone)]
pub struct RecordsConfig {
    /// Extra or overriding schema files (`<dir>/<schema_version>/<type>.json`); built-ins always load.
    pub schemas_dir: Option<PathBuf>,
    pub max_content_bytes: usize,
}

/// Bounds on what a client may send.
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_body_bytes: u64,
    /// How long a client may take to send a Messages body it has started.
    pub body_read_timeout: Duration,
    /// Bytes of Messages bodies held at once, across requests (each counts twice: see
    /// `body::budget`).
    pub max_inflight_body_bytes: u64,
    /// Messages requests being read, recalled and sent at once.
    pub max_inflight_requests: usize,
    /// How long a request waits for its share before a 529.
    pub inflight_wait: Duration,
    /// The longest silence allowed between two chunks of a Messages body.
    pub body_idle_timeout: Duration,
    /// What one client address, and one caller, may hold of `max_inflight_body_bytes`.
    pub max_inflight_body_bytes_per_address: u64,
    pub max_inflight_body_bytes_per_caller: u64,
    /// From a request's first byte to the end of its headers (HTTP/1), on a connection.
    pub header_read_timeout: Duration,
    /// How long a connection with nothing in flight is kept open for a next request.
    pub connection_idle_timeout: Duration,
}

#[derive(Debug, Clone)]
pub struct UpstreamConfig {
    /// Base URL without a trailing slash; request paths are appended to it.
    pub base_url: String,
    pub api_key: Option<SecretString>,
    pub connect_timeout: Duration,
    pub first_byte_timeout: Duration,
    pub stream_idle_timeout: Duration,
    pub pool_idle_timeout: Duration,
    pub pool_max_idle_per_host: usize,
}

impl Config {
    /// Reads the file named by `flags.config` (if any), lays the environment and then the flags
    /// over it, and validates the result.
    pub fn load(flags: &ConfigFlags, env: impl Fn(&str) -> Option<String>) -> Result<Config, StartupError> {
        let mut raw = match &flags.config {
            Some(path) => RawConfig::from_file(path)?,
            None => RawConfig::default(),
        };
        raw.apply_env(env);
        raw.apply_flags(flags);
        raw.validate()
    }
}

impl RawConfig {
    pub fn from_file(path: &Path) -> Result<RawConfig, StartupError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| StartupError::ConfigRead { path: path.to_owned(), source })?;
        Self::from_toml(&text).map_err(|message| StartupError::ConfigParse { path: path.to_owned(), message })
    }

    /// Parses TOML text; the error names the key's path (`upstream.url: invalid type …`).
    pub fn from_toml(text: &str) -> Result<RawConfig, String> {
        let deserializer = toml::Deserializer::parse(text).map_err(|err| err.to_string())?;
        serde_path_to_error::deserialize(deserializer).map_err(|err| {
            let path = err.path().to_string();
            format!("{path}: {}", err.into_inner())
        })
    }

    fn apply_env(&mut self, env: impl Fn(&str) -> Option<String>) {
        let set = |slot: &mut Option<String>, name: &str| {
            if let Some(value) = env(name).filter(|v| !v.is_empty()) {
                *slot = Some(value);
            }
        };
        set(&mut self.listen, "MEMGATE_LISTEN");
        if let Some(list) = env("MEMGATE_ALLOWED_HOSTS").filter(|v| !v.is_empty()) {
            self.allowed_hosts =
                Some(list.split(',').map(str::trim).filter(|h| !h.is_empty()).map(str::to_owned).collect());
        }
        set(&mut self.upstream.url, "MEMGATE_UPSTREAM_URL");
        set(&mut self.upstream.api_key, "ANTHROPIC_API_KEY");
        set(&mut self.auth.mode, "MEMGATE_AUTH_MODE");
        set(&mut self.log.format, "MEMGATE_LOG_FORMAT");
        set(&mut self.log.level, "MEMGATE_LOG_LEVEL");
        set(&mut self.database.url, "MEMGATE_DATABASE_URL");
        set(&mut self.redis.url, "MEMGATE_REDIS_URL");
        set(&mut self.admin.token, "MEMGATE_ADMIN_TOKEN");
        set(&mut self.admin.viewer_token, "MEMGATE_ADMIN_VIEWER_TOKEN");
        set(&mut self.admin.listen, "MEMGATE_ADMIN_LISTEN");
        set(&mut self.admin.session_secret, "MEMGATE_ADMIN_SESSION_SECRET");
        if let Some(dir) = env("MEMGATE_MODEL_DIR").filter(|v| !v.is_empty()) {
            self.embedding.model_dir = Some(dir.into());
        }
        if let Some(path) = env("ORT_DYLIB_PATH").filter(|v| !v.is_empty()) {
            self.embedding.ort_dylib_path = Some(path.into());
        }
        set(&mut self.auth.jwt.hs256_secret, "MEMGATE_JWT_HS256_SECRET");
        set(&mut self.auth.jwt.issuer, "MEMGATE_JWT_ISSUER");
        set(&mut self.auth.jwt.audience, "MEMGATE_JWT_AUDIENCE");
        if let Some(path) = env("MEMGATE_JWT_PUBLIC_KEY_FILE").filter(|v| !v.is_empty()) {
            self.auth.jwt.public_key_file = Some(path.into());
        }
        if let Some(path) = env("MEMGATE_JWKS_FILE").filter(|v| !v.is_empty()) {
            self.auth.jwt.jwks_file = Some(path.into());
        }
        // Comma-separated, for containers configured by environment alone.
        if let Some(list) = env("MEMGATE_TRUSTED_PROXIES").filter(|v| !v.is_empty()) {
            self.client_ip.trusted_proxies =
                Some(list.split(',').map(str::trim).filter(|p| !p.is_empty()).map(str::to_owned).collect());
        }
    }

    fn apply_flags(&mut self, flags: &ConfigFlags) {
        let set = |slot: &mut Option<String>, flag: &Option<String>| {
            if let Some(value) = flag {
                *slot = Some(value.clone());
            }
        };
        set(&mut self.listen, &flags.listen);
        set(&mut self.upstream.url, &flags.upstream_url);
        set(&mut self.auth.mode, &flags.auth_mode);
        set(&mut self.log.format, &flags.log_format);
        set(&mut self.database.url, &flags.database_url);
    }

    pub fn validate(self) -> Result<Config, StartupError> {
        let invalid =
            |key: &str, message: String| StartupError::ConfigInvalid { key: key.to_owned(), message };

        let listen_text = self.listen.unwrap_or_else(|| "127.0.0.1:8080".to_owned());
        let listen = listen_text.parse::<SocketAddr>().map_err(|_| {
            invalid(
                "listen",
                format!("`{listen_text}` is not an address like 127.0.0.1:8080 (MEMGATE_LISTEN)"),
            )
        })?;

        let allowed_hosts =
            crate::allowed_hosts::HostList::parse(self.allowed_hosts.as_deref().unwrap_or_default())
                .map_err(|message| invalid("allowed_hosts", message))?;

        let url_text = self.upstream.url.unwrap_or_else(|| "https://api.anthropic.com".to_owned());
        let base_url =
            validate_upstream_url(&url_text).map_err(|message| invalid("upstream.url", message))?;

        let api_key = self.upstream.api_key.map(SecretString::from);
        let auth_mode = match self.auth.mode.as_deref().unwrap_or("passthrough") {
            "passthrough" => AuthMode::Passthrough,
            "managed" => AuthMode::Managed,
            other => {
                return Err(invalid(
                    "auth.mode",
                    format!("`{other}` is not a mode; use `passthrough` or `managed` (MEMGATE_AUTH_MODE)"),
                ));
            }
        };
        if auth_mode == AuthMode::Managed && api_key.is_none() {
            return Err(invalid(
                "upstream.api_key",
                "auth.mode `managed` sends memgate's own key upstream; set ANTHROPIC_API_KEY".into(),
            ));
        }

        let millis = |key: &str, value: Option<u64>, default: u64| -> Result<Duration, StartupError> {
            match value.unwrap_or(default) {
                0 => Err(invalid(key, "must be at least 1 millisecond".into())),
                ms => Ok(Duration::from_millis(ms)),
            }
        };
        let upstream = UpstreamConfig {
            base_url,
            api_key,
            connect_timeout: millis("upstream.connect_timeout_ms", self.upstream.connect_timeout_ms, 5_000)?,
            first_byte_timeout: millis(
                "upstream.first_byte_timeout_ms",
                self.upstream.first_byte_timeout_ms,
                600_000,
            )?,
            stream_idle_timeout: millis(
                "upstream.stream_idle_timeout_ms",
                self.upstream.stream_idle_timeout_ms,
                300_000,
            )?,
            pool_idle_timeout: millis(
                "upstream.pool_idle_timeout_ms",
                self.upstream.pool_idle_timeout_ms,
                90_000,
            )?,
            pool_max_idle_per_host: self.upstream.pool_max_idle_per_host.unwrap_or(256),
        };

        let max_body_bytes = self.limits.max_body_bytes.unwrap_or(DEFAULT_MAX_BODY_BYTES);
        if max_body_bytes < 1024 {
            return Err(invalid(
                "limits.max_body_bytes",
                format!("{max_body_bytes} is too small for any Messages request; use at least 1024"),
            ));
        }

        let limits = Limits {
            max_body_bytes,
            body_read_timeout: millis(
                "limits.body_read_timeout_ms",
                self.limits.body_read_timeout_ms,
                60_000,
            )?,
            max_inflight_body_bytes: self
                .limits
                .max_inflight_body_bytes
                .unwrap_or(DEFAULT_INFLIGHT_BODY_BYTES),
            max_inflight_requests: self.limits.max_inflight_requests.unwrap_or(1024),
            inflight_wait: millis("limits.inflight_wait_ms", self.limits.inflight_wait_ms, 5_000)?,
            body_idle_timeout: millis(
                "limits.body_idle_timeout_ms",
                self.limits.body_idle_timeout_ms,
                10_000,
            )?,
            max_inflight_body_bytes_per_address: self
                .limits
                .max_inflight_body_bytes_per_address
                .unwrap_or(DEFAULT_INFLIGHT_BODY_BYTES_PER_HOLDER),
            max_inflight_body_bytes_per_caller: self
                .limits
                .max_inflight_body_bytes_per_caller
                .unwrap_or(DEFAULT_INFLIGHT_BODY_BYTES_PER_HOLDER),
            header_read_timeout: millis(
                "limits.header_read_timeout_ms",
                self.limits.header_read_timeout_ms,
                30_000,
            )?,
            connection_idle_timeout: millis(
                "limits.connection_idle_timeout_ms",
                self.limits.connection_idle_timeout_ms,
                75_000,
            )?,
        };
        if limits.max_inflight_body_bytes < 2 * max_body_bytes {
            return Err(invalid(
                "limits.max_inflight_body_bytes",
                format!(
                    "{} cannot hold one request of limits.max_body_bytes ({max_body_bytes}) and its copy; \
                     use at least twice that",
                    limits.max_inflight_body_bytes
                ),
            ));
        }
        for (key, value) in [
            ("limits.max_inflight_body_bytes_per_address", limits.max_inflight_body_bytes_per_address),
            ("limits.max_inflight_body_bytes_per_caller", limits.max_inflight_body_bytes_per_caller),
        ] {
            if value < 2 * max_body_bytes {
                return Err(invalid(
                    key,
                    format!(
                        "{value} cannot hold one request of limits.max_body_bytes ({max_body_bytes}) and its copy; \
                         use at least twice that"
                    ),
                ));
            }
        }
        if limits.max_inflight_requests == 0 {
            return Err(invalid("limits.max_inflight_requests", "use at least 1".into()));
        }
        let client_addrs = crate::client_addr::ClientAddrs::new(
            self.client_ip.trusted_proxies.as_deref().unwrap_or_default(),
            self.client_ip.header.as_deref().unwrap_or("x-forwarded-for"),
        )
        .map_err(|message| invalid("client_ip", message))?
        .with_ipv6_limit_prefix(
            self.client_ip.ipv6_limit_prefix.unwrap_or(crate::client_addr::DEFAULT_IPV6_LIMIT_PREFIX),
        )
        .map_err(|message| invalid("client_ip.ipv6_limit_prefix", message))?;

        let shutdown_grace = Duration::from_millis(self.shutdown.grace_ms.unwrap_or(30_000));
        let drain_delay = Duration::from_millis(self.shutdown.drain_delay_ms.unwrap_or(5_000));

        let log_format = match self.log.format.as_deref().unwrap_or("text") {
            "text" => LogFormat::Text,
            "json" => LogFormat::Json,
            other => {
                return Err(invalid(
                    "log.format",
                    format!("`{other}` is not a format; use `text` or `json` (MEMGATE_LOG_FORMAT)"),
                ));
            }
        };
        let log_level = self.log.level.unwrap_or_else(|| "info".to_owned());
        if tracing_subscriber::EnvFilter::try_new(&log_level).is_err() {
            return Err(invalid(
                "log.level",
                format!("`{log_level}` is not a level or filter; use e.g. `info` or `memgate=debug`"),
            ));
        }

        let database_url = self.database.url.unwrap_or_else(|| "sqlite://memgate.db".to_owned());
        if !["sqlite:", "postgres:", "postgresql:"].iter().any(|p| database_url.starts_with(p)) {
            return Err(invalid(
                "database.url",
                "use sqlite://FILE or postgres://USER@HOST/DB (MEMGATE_DATABASE_URL)".into(),
            ));
        }
        let poll_interval = Duration::from_millis(self.database.poll_interval_ms.unwrap_or(1000));
        if poll_interval < Duration::from_millis(100) {
            return Err(invalid("database.poll_interval_ms", "use at least 100 (ms)".into()));
        }
        let tombstone_retention =
            Duration::from_millis(self.database.tombstone_retention_ms.unwrap_or(10 * 60 * 1000));
        if tombstone_retention < Duration::from_secs(10) {
            return Err(invalid(
                "database.tombstone_retention_ms",
                "keep tombstones at least 10000 ms, so that replicas have time to take them in".into(),
            ));
        }
        let redis = match self.redis.url.filter(|u| !u.is_empty()) {
            None => None,
            Some(url) => {
                if !url.starts_with("redis://") && !url.starts_with("rediss://") {
                    return Err(invalid(
                        "redis.url",
                        "use redis://HOST:PORT or rediss://HOST:PORT (MEMGATE_REDIS_URL)".into(),
                    ));
                }
                let key_prefix = self.redis.key_prefix.unwrap_or_else(|| "memgate".to_owned());
                if key_prefix.is_empty() || key_prefix.chars().any(|c| c.is_whitespace()) {
                    return Err(invalid("redis.key_prefix", "use a non-empty prefix without spaces".into()));
                }
                let shared_read_timeout =
                    millis("redis.shared_read_timeout_ms", self.redis.shared_read_timeout_ms, 10)?;
                Some(RedisConfig { url, key_prefix, shared_read_timeout })
            }
        };
        let admin_token = self.admin.token.filter(|t| !t.is_empty());
        if admin_token.as_ref().is_some_and(|t| t.len() < 16) {
            return Err(invalid(
                "admin.token",
                "the admin token must be at least 16 characters (MEMGATE_ADMIN_TOKEN)".into(),
            ));
        }
        let admin_listen = match self.admin.listen.filter(|l| !l.is_empty()) {
            None => None,
            Some(text) => Some(text.parse::<SocketAddr>().map_err(|_| {
                invalid(
                    "admin.listen",
                    format!("`{text}` is not an address like 127.0.0.1:9091 (MEMGATE_ADMIN_LISTEN)"),
                )
            })?),
        };
        let viewer_token = self.admin.viewer_token.filter(|t| !t.is_empty());
        if viewer_token.as_ref().is_some_and(|t| t.len() < 16) {
            return Err(invalid(
                "admin.viewer_token",
                "the viewer token must be at least 16 characters (MEMGATE_ADMIN_VIEWER_TOKEN)".into(),
            ));
        }
        if viewer_token.is_some() && viewer_token == admin_token {
            return Err(invalid(
                "admin.viewer_token",
                "the viewer token must differ from the admin token: one token cannot be both roles".into(),
            ));
        }
        let session_secret = self.admin.session_secret.filter(|s| !s.is_empty());
        if session_secret.as_ref().is_some_and(|s| s.len() < 32) {
            return Err(invalid(
                "admin.session_secret",
                "the session secret must be at least 32 characters, the same on every replica \
                 (MEMGATE_ADMIN_SESSION_SECRET); unset, the store keeps one"
                    .into(),
            ));
        }
        let admin = AdminConfig {
            session_secret: session_secret.map(SecretString::from),
            token: admin_token.map(SecretString::from),
            viewer_token: viewer_token.map(SecretString::from),
            listen: admin_listen,
            max_import_bytes: self.admin.max_import_bytes.unwrap_or(64 * 1024 * 1024),
            rate_limit_per_minute: self.admin.rate_limit_per_minute.unwrap_or(30),
        };
        let jwt = self.auth.jwt;
        let identity = IdentityConfig {
            mode: auth_mode,
            upstream_key: upstream.api_key.clone(),
            jwt: JwtConfig {
                hmac_secret: jwt.hs256_secret.filter(|s| !s.is_empty()).map(SecretString::from),
                public_key_file: jwt.public_key_file,
                jwks_file: jwt.jwks_file,
                issuer: jwt.issuer,
                audience: jwt.audience,
                leeway_secs: jwt.leeway_secs.unwrap_or(30),
            },
            claims: {
                let defaults = ClaimMapping::default();
                let optional = |value: Option<String>, default: Option<String>| match value {
                    Some(v) if v.is_empty() => None,
                    Some(v) => Some(v),
                    None => default,
                };
                ClaimMapping {
                    tenant_claim: jwt.tenant_claim.unwrap_or(defaults.tenant_claim),
                    subject_scope_prefix: jwt.subject_scope_prefix.unwrap_or(defaults.subject_scope_prefix),
                    team_claim: optional(jwt.team_claim, defaults.team_claim),
                    scopes_claim: optional(jwt.scopes_claim, defaults.scopes_claim),
                    permissions_claim: optional(jwt.permissions_claim, defaults.permissions_claim),
                }
            },
            default_rate_limit_per_minute: self.auth.rate_limit_per_minute.unwrap_or(600),
            passthrough_rate_limit_per_minute: self.auth.passthrough_rate_limit_per_minute.unwrap_or(0),
            preauth_rate_limit_per_minute: self.auth.preauth_rate_limit_per_minute.unwrap_or(120),
            stale_key_grace: Duration::from_secs(
                self.auth
                    .stale_key_grace_secs
                    .unwrap_or(crate::identity::keys::DEFAULT_STALE_GRACE.as_secs()),
            ),
        };
        if identity.stale_key_grace < Duration::from_secs(5)
            || identity.stale_key_grace > Duration::from_secs(3600)
        {
            return Err(invalid(
                "auth.stale_key_grace_secs",
                "use 5 to 3600 seconds: a verified key's cache lasts 5 s anyway, and a replica cut off \
                 from the database honours a key revoked elsewhere for this long"
                    .into(),
            ));
        }
        if identity
            .jwt
            .hmac_secret
            .as_ref()
            .is_some_and(|s| secrecy::ExposeSecret::expose_secret(s).len() < 32)
        {
            return Err(invalid(
                "auth.jwt.hs256_secret",
                "must be at least 32 bytes (MEMGATE_JWT_HS256_SECRET)".into(),
            ));
        }
        for (key, path) in [
            ("auth.jwt.public_key_file", &identity.jwt.public_key_file),
            ("auth.jwt.jwks_file", &identity.jwt.jwks_file),
        ] {
            if let Some(path) = path {
                if !path.is_file() {
                    return Err(invalid(key, format!("{} is not a readable file", path.display())));
                }
            }
        }
        let records = RecordsConfig {
            schemas_dir: self.records.schemas_dir,
            max_content_bytes: self.records.max_content_bytes.unwrap_or(64 * 1024),
        };
        if records.max_content_bytes < 256 {
            return Err(invalid("records.max_content_bytes", "use at least 256 bytes".into()));
        }

        // The model and its runtime by the search order of `assets`; a configured model folder
        // inside an assets folder brings the runtime beside it.
        let assets = crate::assets::find().unwrap_or_else(|| PathBuf::from(".assets"));
        let defaults = crate::embed::EmbedConfig::default_for(&assets);
        let e = self.embedding;
        let ort_beside = e.model_dir.as_deref().and_then(crate::assets::runtime_beside);
        let model = crate::embed::EmbedConfig {
            model_dir: e.model_dir.unwrap_or(defaults.model_dir),
            ort_dylib_path: e.ort_dylib_path.or(ort_beside).or(defaults.ort_dylib_path),
            model_name: e.model_name.filter(|n| !n.is_empty()),
            query_prefix: e.query_prefix.unwrap_or(defaults.query_prefix),
            passage_prefix: e.passage_prefix.unwrap_or(defaults.passage_prefix),
            threads: e.threads.unwrap_or(defaults.threads),
            max_batch: e.max_batch.unwrap_or(defaults.max_batch),
            cache_entries: e.cache_entries.unwrap_or(defaults.cache_entries),
            language_centering: e.language_centering.unwrap_or(defaults.language_centering),
        };
        let (default_similarity, default_dedupe) = if model.language_centering {
            (DEFAULT_SIMILARITY, DEFAULT_DEDUPE)
        } else {
            (RAW_SIMILARITY, RAW_DEDUPE)
        };
        if model.threads == 0 || model.max_batch == 0 {
            return Err(invalid("embedding.threads", "threads and max_batch must be at least 1".into()));
        }
        let unit = |key: &str, value: f32| {
            if (0.0..=1.0).contains(&value) {
                Ok(value)
            } else {
                Err(invalid(key, format!("{value} is not a cosine between 0 and 1")))
            }
        };
        let embedding = EmbeddingConfig {
            model,
            similarity_threshold: unit(
                "embedding.similarity_threshold",
                e.similarity_threshold.unwrap_or(default_similarity),
            )?,
            dedupe_threshold: unit(
                "embedding.dedupe_threshold",
                e.dedupe_threshold.unwrap_or(default_dedupe),
            )?,
        };
        let memory = MemoryConfig {
            funnel_timeout: millis("memory.funnel_timeout_ms", self.memory.funnel_timeout_ms, 50)?,
            fail_closed: self.memory.fail_closed.unwrap_or(false),
            templates_dir: self.memory.templates_dir,
        };
        for (name, release) in &self.releases {
            if !crate::identity::is_valid_tenant(name) {
                return Err(invalid(
                    &format!("releases.{name}"),
                    "a release name is 1 to 64 characters of A-Z a-z 0-9 . _ : -".into(),
                ));
            }
            if let Some(t) = release.similarity_threshold {
                unit(&format!("releases.{name}.similarity_threshold"), t)?;
            }
            if let Some(r) = &release.retrieval {
                if !["hybrid", "dense"].contains(&r.as_str()) {
                    return Err(invalid(
                        &format!("releases.{name}.retrieval"),
                        format!("`{r}`: use hybrid or dense"),
                    ));
                }
            }
            for (key, value) in
                [("lexical_weight", release.lexical_weight), ("min_lexical", release.min_lexical)]
            {
                if value.is_some_and(|v| !(0.0..=10.0).contains(&v)) {
                    return Err(invalid(
                        &format!("releases.{name}.{key}"),
                        "use a number between 0 and 10".into(),
                    ));
                }
            }
            if let Some(p) = &release.placement {
                if !["auto", "system", "last_user_turn"].contains(&p.as_str()) {
                    return Err(invalid(
                        &format!("releases.{name}.placement"),
                        format!("`{p}`: use auto, system or last_user_turn"),
                    ));
                }
            }
        }

        let history_retention_days = self.metrics.history_retention_days.unwrap_or(8);
        let minute_history_hours = self.metrics.minute_history_hours.unwrap_or(48);
        if history_retention_days == 0 {
            return Err(invalid("metrics.history_retention_days", "keep at least 1 day".into()));
        }
        if minute_history_hours == 0
            || u64::from(minute_history_hours) > u64::from(history_retention_days) * 24
        {
            return Err(invalid(
                "metrics.minute_history_hours",
                "keep at least 1 hour, and at most metrics.history_retention_days".into(),
            ));
        }
        let console = ConsoleConfig {
            history_retention_days,
            minute_history_hours,
            recent_requests: self.console.recent_requests.unwrap_or(200),
            recent_request_ttl: Duration::from_secs(self.console.recent_request_ttl_secs.unwrap_or(900)),
            replica: self.console.replica.filter(|r| !r.trim().is_empty()),
        };
        if console.recent_requests > 10_000 {
            return Err(invalid("console.recent_requests", "keep at most 10000 requests per tenant".into()));
        }
        if let Err(errors) = self.triggers.validate()
            && let Some(first) = errors.into_iter().next()
        {
            return Err(invalid(&first.key, first.message));
        }
        Ok(Config {
            console,
            triggers: self.triggers,
            embedding,
            memory,
            releases: self.releases,
            database_url,
            poll_interval,
            tombstone_retention,
            redis,
            admin,
            records,
            listen,
            allowed_hosts,
            upstream,
            auth_mode,
            identity,
            limits,
            client_addrs,
            shutdown_grace,
            drain_delay,
            log_format,
            log_level,
        })
    }
}

fn validate_upstream_url(text: &str) -> Result<String, String> {
    let url = url::Url::parse(text)
        .map_err(|err| format!("`{text}` is not a URL ({err}); use e.g. https://api.anthropic.com"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("`{text}` must be an http or https URL"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!("`{text}` must not carry a query or fragment"));
    }
    if url.username() != "" || url.password().is_some() {
        return Err("the upstream URL must not carry credentials; set ANTHROPIC_API_KEY".into());
    }
    Ok(text.trim_end_matches('/').to_owned())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use secrecy::ExposeSecret;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> =
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |name| map.get(name).cloned()
    }

    fn load_toml(text: &str, env: &[(&str, &str)], flags: ConfigFlags) -> Result<Config, StartupError> {
        let mut raw = RawConfig::from_toml(text)
            .map_err(|message| StartupError::ConfigParse { path: "test.toml".into(), message })?;
        raw.apply_env(env_of(env));
        raw.apply_flags(&flags);
        raw.validate()
    }

    #[test]
    fn defaults_are_the_contracts() {
        let config = load_toml("", &[], ConfigFlags::default()).unwrap();
        assert_eq!(config.listen, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(config.upstream.base_url, "https://api.anthropic.com");
        assert_eq!(config.auth_mode, AuthMode::Passthrough);
        assert_eq!(config.limits.max_body_bytes, 32 * 1024 * 1024);
        assert_eq!(config.identity.stale_key_grace, Duration::from_secs(60));
        assert!(config.admin.session_secret.is_none());
        let v6 = Some("2001:db8:1:2::9".parse().unwrap());
        assert_eq!(config.client_addrs.limit_key(v6), "2001:db8:1:2::/64");
    }

    #[test]
    fn trusted_proxies_come_from_the_environment_too() {
        let config =
            load_toml("", &[("MEMGATE_TRUSTED_PROXIES", "10.0.0.0/8, 192.168.1.7")], ConfigFlags::default())
                .unwrap();
        let headers = [Some("203.0.113.9")];
        assert_eq!(config.client_addrs.header(), "x-forwarded-for");
        let via_proxy = config.client_addrs.resolve(Some("10.1.2.3".parse().unwrap()), headers);
        assert_eq!(via_proxy, Some("203.0.113.9".parse().unwrap()));
        let direct = config.client_addrs.resolve(Some("198.51.100.1".parse().unwrap()), headers);
        assert_eq!(direct, Some("198.51.100.1".parse().unwrap()), "an untrusted peer's header is ignored");
        let bad = load_toml("", &[("MEMGATE_TRUSTED_PROXIES", "10.0.0.0/33")], ConfigFlags::default());
        assert!(bad.unwrap_err().to_string().contains("client_ip"));
    }

    /// memgate.example.toml is the reference of every key: what it sets must be the default, so
    /// a default changed in code without the file (or the other way round) fails here.
    #[test]
    fn the_example_file_sets_exactly_the_defaults() {
        let example = include_str!("../memgate.example.toml");
        let mut from_example = load_toml(example, &[], ConfigFlags::default()).unwrap();
        let defaults = load_toml("", &[], ConfigFlags::default()).unwrap();
        // The file spells out the built-in releases' tables; what they load to is compared in
        // `rollout::release` (releases are settled there, with their templates).
        from_example.releases.clear();
        let (example, defaults) = (format!("{from_example:#?}"), format!("{defaults:#?}"));
        let differences: Vec<String> = example
            .lines()
            .zip(defaults.lines())
            .filter(|(a, b)| a != b)
            .map(|(a, b)| format!("example: {}\ndefault: {}", a.trim(), b.trim()))
            .collect();
        assert!(
            differences.is_empty(),
            "memgate.example.toml differs from the defaults:\n{}",
            differences.join("\n")
        );
        assert_eq!(example.lines().count(), defaults.lines().count());
    }

    #[test]
    fn thresholds_default_to_the_ones_calibrated_for_the_centering_in_use() {
        let centered = load_toml("", &[], ConfigFlags::default()).unwrap();
        assert!(centered.embedding.model.language_centering);
        assert_eq!(centered.embedding.similarity_threshold, DEFAULT_SIMILARITY);
        assert_eq!(centered.embedding.dedupe_threshold, DEFAULT_DEDUPE);
        let raw =
            load_toml("[embedding]\nlanguage_centering = false\n", &[], ConfigFlags::default()).unwrap();
        assert!(!raw.embedding.model.language_centering);
        assert_eq!(raw.embedding.similarity_threshold, RAW_SIMILARITY);
        assert_eq!(raw.embedding.dedupe_threshold, RAW_DEDUPE);
        let set = "[embedding]\nlanguage_centering = false\nsimilarity_threshold = 0.5\n";
        let set = load_toml(set, &[], ConfigFlags::default()).unwrap();
        assert_eq!(set.embedding.similarity_threshold, 0.5, "a value in the file wins");
    }

    #[test]
    fn flags_beat_environment_which_beats_the_file() {
        let file = "listen = \"127.0.0.1:1000\"\n[upstream]\nurl = \"http://file.example\"\n";
        let env = [("MEMGATE_LISTEN", "127.0.0.1:2000"), ("MEMGATE_UPSTREAM_URL", "http://env.example/")];
        let config = load_toml(file, &env, ConfigFlags::default()).unwrap();
        assert_eq!(config.listen.port(), 2000);
        assert_eq!(config.upstream.base_url, "http://env.example");

        let flags = ConfigFlags { listen: Some("127.0.0.1:3000".into()), ..Default::default() };
        let config = load_toml(file, &env, flags).unwrap();
        assert_eq!(config.listen.port(), 3000);
    }

    #[test]
    fn unknown_keys_are_refused_with_their_path() {
        let err = RawConfig::from_toml("[upstream]\nurll = \"x\"\n").unwrap_err();
        assert!(err.contains("upstream"), "{err}");
        assert!(err.contains("urll"), "{err}");
    }

    #[test]
    fn wrong_types_name_the_key() {
        let err = RawConfig::from_toml("[upstream]\nconnect_timeout_ms = \"soon\"\n").unwrap_err();
        assert!(err.starts_with("upstream.connect_timeout_ms"), "{err}");
    }

    #[test]
    fn invalid_values_name_the_key() {
        let cases = [
            ("listen = \"nowhere\"", "listen"),
            ("[upstream]\nurl = \"ftp://x\"", "upstream.url"),
            ("[auth]\nmode = \"open\"", "auth.mode"),
            ("[auth]\nmode = \"managed\"", "upstream.api_key"),
            ("[limits]\nmax_body_bytes = 10", "limits.max_body_bytes"),
            (
                "[limits]\nmax_inflight_body_bytes_per_address = 1024",
                "limits.max_inflight_body_bytes_per_address",
            ),
            (
                "[limits]\nmax_inflight_body_bytes_per_caller = 1024",
                "limits.max_inflight_body_bytes_per_caller",
            ),
            ("[limits]\nbody_idle_timeout_ms = 0", "limits.body_idle_timeout_ms"),
            ("[limits]\nheader_read_timeout_ms = 0", "limits.header_read_timeout_ms"),
            ("allowed_hosts = [\"localhost:8080\"]", "allowed_hosts"),
            ("[log]\nformat = \"xml\"", "log.format"),
            ("[upstream]\nconnect_timeout_ms = 0", "upstream.connect_timeout_ms"),
            ("[database]\npoll_interval_ms = 5", "database.poll_interval_ms"),
            ("[redis]\nurl = \"http://cache:6379\"", "redis.url"),
            ("[redis]\nurl = \"redis://cache\"\nkey_prefix = \"\"", "redis.key_prefix"),
            ("[client_ip]\nipv6_limit_prefix = 16", "client_ip.ipv6_limit_prefix"),
            ("[auth]\nstale_key_grace_secs = 1", "auth.stale_key_grace_secs"),
            ("[auth]\nstale_key_grace_secs = 86400", "auth.stale_key_grace_secs"),
            ("[admin]\nsession_secret = \"short\"", "admin.session_secret"),
        ];
        for (text, key) in cases {
            match load_toml(text, &[], ConfigFlags::default()) {
                Err(StartupError::ConfigInvalid { key: got, .. }) => assert_eq!(got, key, "{text}"),
                other => panic!("{text}: expected an error naming {key}, got {other:?}"),
            }
        }
    }

    #[test]
    fn managed_mode_takes_the_key_from_the_environment() {
        let env = [("ANTHROPIC_API_KEY", "sk-ant-configured"), ("MEMGATE_AUTH_MODE", "managed")];
        let config = load_toml("", &env, ConfigFlags::default()).unwrap();
        assert_eq!(config.auth_mode, AuthMode::Managed);
        assert_eq!(config.upstream.api_key.unwrap().expose_secret(), "sk-ant-configured");
    }

    #[test]
    fn redis_comes_from_the_environment_with_the_default_prefix() {
        let none = load_toml("", &[], ConfigFlags::default()).unwrap();
        assert!(none.redis.is_none(), "no Redis unless configured");
        assert_eq!(none.poll_interval, Duration::from_secs(1));
        let env = [("MEMGATE_REDIS_URL", "redis://cache:6379/0")];
        let config = load_toml("[database]\npoll_interval_ms = 250\n", &env, ConfigFlags::default()).unwrap();
        let redis = config.redis.unwrap();
        assert_eq!((redis.url.as_str(), redis.key_prefix.as_str()), ("redis://cache:6379/0", "memgate"));
        assert_eq!(config.poll_interval, Duration::from_millis(250));
    }

    #[test]
    fn the_example_file_is_valid_and_complete() {
        let text = include_str!("../memgate.example.toml");
        let raw = RawConfig::from_toml(text).unwrap();
        assert!(raw.upstream.url.is_some() && raw.listen.is_some());
    }
}
