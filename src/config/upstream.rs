//! `[upstream]`: where Messages requests go, and how long each step of a call may take.

use super::millis;
use crate::error::StartupError;
use secrecy::SecretString;
use serde::Deserialize;
use std::time::Duration;

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

impl Default for UpstreamConfig {
    fn default() -> Self {
        UpstreamConfig {
            base_url: "https://api.anthropic.com".to_owned(),
            api_key: None,
            connect_timeout: Duration::from_millis(5_000),
            // A non-streaming answer arrives whole: this covers the longest generation.
            first_byte_timeout: Duration::from_millis(600_000),
            stream_idle_timeout: Duration::from_millis(300_000),
            pool_idle_timeout: Duration::from_millis(90_000),
            pool_max_idle_per_host: 256,
        }
    }
}

impl RawUpstream {
    pub fn settle(self) -> Result<UpstreamConfig, StartupError> {
        let default = UpstreamConfig::default();
        let base_url = match self.url {
            Some(text) => {
                validate_upstream_url(&text).map_err(|message| super::invalid("upstream.url", message))?
            }
            None => default.base_url,
        };
        Ok(UpstreamConfig {
            base_url,
            api_key: self.api_key.map(SecretString::from),
            connect_timeout: millis(
                "upstream.connect_timeout_ms",
                self.connect_timeout_ms,
                default.connect_timeout,
            )?,
            first_byte_timeout: millis(
                "upstream.first_byte_timeout_ms",
                self.first_byte_timeout_ms,
                default.first_byte_timeout,
            )?,
            stream_idle_timeout: millis(
                "upstream.stream_idle_timeout_ms",
                self.stream_idle_timeout_ms,
                default.stream_idle_timeout,
            )?,
            pool_idle_timeout: millis(
                "upstream.pool_idle_timeout_ms",
                self.pool_idle_timeout_ms,
                default.pool_idle_timeout,
            )?,
            pool_max_idle_per_host: self.pool_max_idle_per_host.unwrap_or(default.pool_max_idle_per_host),
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
