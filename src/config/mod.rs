//! Configuration: parse, then validate, then run.
//!
//! Sources in rising precedence: the TOML file (`--config`), environment variables, command-line
//! flags. `RawConfig` mirrors the file with every key optional and unknown keys refused; the
//! environment and flags are laid over it; `RawConfig::validate` turns the result into a `Config`
//! whose fields are known good, or fails naming the key. `memgate.example.toml` documents every key.
//!
//! One file per section (`[upstream]` is `upstream.rs`, …): its raw struct, the settled struct it
//! becomes with its defaults (`impl Default`) beside its fields, and its own `settle`, which
//! checks the section. What spans sections is checked here. Config sits below every domain
//! module: the domains take the settled values (`identity` its `IdentityConfig`, `embed` its
//! `EmbedConfig`, …), and config uses none of them. What only a domain can check (a template
//! that must compile, a key file that must parse) it checks when it is built, naming the key.

pub mod admin;
pub mod auth;
pub mod client_ip;
pub mod console;
pub mod database;
pub mod embedding;
pub mod limits;
pub mod log;
pub mod memory;
pub mod observer;
pub mod records;
pub mod redis;
pub mod releases;
pub mod shutdown;
pub mod triggers;
pub mod upstream;

pub use admin::{AdminConfig, RawAdmin};
pub use auth::{AuthMode, ClaimMapping, IdentityConfig, JwtConfig, RawAuth, RawJwt};
pub use client_ip::RawClientIp;
pub use console::{ConsoleConfig, RawConsole, RawMetrics};
pub use database::{DatabaseConfig, RawDatabase};
pub use embedding::{
    DEFAULT_DEDUPE, DEFAULT_SIMILARITY, EmbedConfig, EmbeddingConfig, RAW_DEDUPE, RAW_SIMILARITY,
    RawEmbedding,
};
pub use limits::{
    DEFAULT_INFLIGHT_BODY_BYTES, DEFAULT_INFLIGHT_BODY_BYTES_PER_HOLDER, DEFAULT_MAX_BODY_BYTES, Limits,
    RawLimits,
};
pub use log::{LogConfig, LogFormat, RawLog};
pub use memory::{MemoryConfig, RawMemory};
pub use observer::{ObserverConfig, RawObserver};
pub use records::{RawRecords, RecordsConfig};
pub use redis::{RawRedis, RedisConfig};
pub use releases::{QueryConfig, RawQuery, RawRelease, ReleaseConfig};
pub use shutdown::{RawShutdown, ShutdownConfig};
pub use triggers::{EndpointConfig, TriggersConfig, TriggersConfigError};
pub use upstream::{RawUpstream, UpstreamConfig};

use crate::error::StartupError;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The file's shape: every key optional, unknown keys refused with their path.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// Default `127.0.0.1:8080`.
    pub listen: Option<String>,
    /// Default: empty (`allowed_hosts::HostList::for_listener` decides by the listener).
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
    pub releases: BTreeMap<String, RawRelease>,
    #[serde(default)]
    pub metrics: RawMetrics,
    #[serde(default)]
    pub console: RawConsole,
    /// Read with its defaults and validated by `TriggersConfig::validate`; its keys are
    /// docs/triggers.md's.
    #[serde(default)]
    pub triggers: TriggersConfig,
    #[serde(default)]
    pub observer: RawObserver,
}

const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

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

/// A validated configuration: settled values only, one field per section.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    /// The `Host` names memgate answers for; the default depends on the listener
    /// (`allowed_hosts::HostList::for_listener`).
    pub allowed_hosts: crate::allowed_hosts::HostList,
    pub upstream: UpstreamConfig,
    /// `[auth]`: the mode, the upstream key it sends, JWTs, caller limits.
    pub identity: IdentityConfig,
    pub limits: Limits,
    /// `[client_ip]`: who the client is behind trusted proxies.
    pub client_addrs: crate::client_addr::ClientAddrs,
    pub shutdown: ShutdownConfig,
    pub log: LogConfig,
    pub database: DatabaseConfig,
    /// Change fan-out between replicas (`fanout`); `None` runs on the poll alone.
    pub redis: Option<RedisConfig>,
    pub admin: AdminConfig,
    pub records: RecordsConfig,
    pub embedding: EmbeddingConfig,
    pub memory: MemoryConfig,
    /// Release definitions from the file; built-in `v1` and `v2` fill in what is absent
    /// (`rollout::release`).
    pub releases: BTreeMap<String, ReleaseConfig>,
    /// `[console]` and `[metrics]`.
    pub console: ConsoleConfig,
    /// `[triggers]`: endpoints and the outbox's delivery schedule (docs/triggers.md).
    pub triggers: TriggersConfig,
    /// `[observer]`: learning from conversations (docs/observation.md).
    pub observer: ObserverConfig,
}

/// A value refused, named by its key.
fn invalid(key: &str, message: impl Into<String>) -> StartupError {
    StartupError::ConfigInvalid { key: key.to_owned(), message: message.into() }
}

/// A duration in milliseconds that must not be 0.
fn millis(key: &str, value: Option<u64>, default: Duration) -> Result<Duration, StartupError> {
    match value {
        None => Ok(default),
        Some(0) => Err(invalid(key, "must be at least 1 millisecond")),
        Some(ms) => Ok(Duration::from_millis(ms)),
    }
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
        set(&mut self.observer.extraction_key, "MEMGATE_OBSERVER_KEY");
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

    /// Settles every section in turn; one that depends on another is handed that one's settled
    /// value (`[auth]` the upstream key that managed mode sends).
    pub fn validate(self) -> Result<Config, StartupError> {
        let listen_text = self.listen.unwrap_or_else(|| DEFAULT_LISTEN.to_owned());
        let listen = listen_text.parse::<SocketAddr>().map_err(|_| {
            invalid(
                "listen",
                format!("`{listen_text}` is not an address like 127.0.0.1:8080 (MEMGATE_LISTEN)"),
            )
        })?;
        let allowed_hosts =
            crate::allowed_hosts::HostList::parse(self.allowed_hosts.as_deref().unwrap_or_default())
                .map_err(|message| invalid("allowed_hosts", message))?;
        let upstream = self.upstream.settle()?;
        let identity = self.auth.settle(upstream.api_key.clone())?;
        let limits = self.limits.settle()?;
        let client_addrs = self.client_ip.settle()?;
        let shutdown = self.shutdown.settle();
        let log = self.log.settle()?;
        let database = self.database.settle()?;
        let redis = self.redis.settle()?;
        let admin = self.admin.settle()?;
        let records = self.records.settle()?;
        let embedding = self.embedding.settle()?;
        let memory = self.memory.settle()?;
        let releases = releases::settle(self.releases)?;
        let console = console::settle(self.metrics, self.console)?;
        let observer = self.observer.settle()?;
        if let Err(errors) = self.triggers.validate()
            && let Some(first) = errors.into_iter().next()
        {
            return Err(invalid(&first.key, first.message));
        }
        Ok(Config {
            listen,
            allowed_hosts,
            upstream,
            identity,
            limits,
            client_addrs,
            shutdown,
            log,
            database,
            redis,
            admin,
            records,
            embedding,
            memory,
            releases,
            console,
            triggers: self.triggers,
            observer,
        })
    }
}

/// A cosine threshold: between 0 and 1.
fn cosine(key: &str, value: f32) -> Result<f32, StartupError> {
    if (0.0..=1.0).contains(&value) {
        Ok(value)
    } else {
        Err(invalid(key, format!("{value} is not a cosine between 0 and 1")))
    }
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
        assert_eq!(config.identity.mode, AuthMode::Passthrough);
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
        let example = include_str!("../../memgate.example.toml");
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
            ("[releases.v4]\ncut_standout = -1", "releases.v4.cut_standout"),
            ("[releases.v4]\nsubject_boost = 2", "releases.v4.subject_boost"),
            ("[releases.v4]\nneighbour_weight = 3", "releases.v4.neighbour_weight"),
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
        assert_eq!(config.identity.mode, AuthMode::Managed);
        assert_eq!(config.upstream.api_key.unwrap().expose_secret(), "sk-ant-configured");
    }

    #[test]
    fn redis_comes_from_the_environment_with_the_default_prefix() {
        let none = load_toml("", &[], ConfigFlags::default()).unwrap();
        assert!(none.redis.is_none(), "no Redis unless configured");
        assert_eq!(none.database.poll_interval, Duration::from_secs(1));
        let env = [("MEMGATE_REDIS_URL", "redis://cache:6379/0")];
        let config = load_toml("[database]\npoll_interval_ms = 250\n", &env, ConfigFlags::default()).unwrap();
        let redis = config.redis.unwrap();
        assert_eq!((redis.url.as_str(), redis.key_prefix.as_str()), ("redis://cache:6379/0", "memgate"));
        assert_eq!(config.database.poll_interval, Duration::from_millis(250));
    }

    #[test]
    fn the_example_file_is_valid_and_complete() {
        let text = include_str!("../../memgate.example.toml");
        let raw = RawConfig::from_toml(text).unwrap();
        assert!(raw.upstream.url.is_some() && raw.listen.is_some());
    }
}
