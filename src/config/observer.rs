//! `[observer]`: how memgate learns from conversations it relays, where a release turns
//! observation on (`[releases.<name>] observe = "propose" | "write"`) and a caller holds the
//! `observe` permission (docs/observation.md).
//!
//! ```toml
//! [observer]
//! model = "claude-haiku-4-5"      # the extraction model
//! # extraction_key = "sk-ant-…"   # passthrough mode: the only key extraction calls use
//! daily_calls_per_tenant = 2000   # extraction calls a tenant may cause per UTC day
//! daily_tokens_per_tenant = 2000000
//! min_confidence = 0.7            # a candidate below it is dropped (a release may set its own)
//! max_age_hours = 72              # a queued exchange not extracted by then is purged
//! outcomes_retention_days = 30    # what the gates decided, for the admin API
//! concurrency = 2                 # extraction calls in flight per replica
//! batch_size = 8                  # exchanges claimed per round
//! ```
//!
//! An exchange is deleted as soon as it is processed: the person's words and the answer are kept
//! only while they wait for extraction, and never longer than `max_age_hours`.

use super::invalid;
use crate::error::StartupError;
use secrecy::SecretString;
use serde::Deserialize;
use std::time::Duration;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawObserver {
    pub model: Option<String>,
    pub extraction_key: Option<String>,
    pub max_tokens: Option<u32>,
    pub daily_calls_per_tenant: Option<u64>,
    pub daily_tokens_per_tenant: Option<u64>,
    pub min_confidence: Option<f64>,
    pub max_age_hours: Option<u64>,
    pub outcomes_retention_days: Option<u64>,
    pub concurrency: Option<usize>,
    pub batch_size: Option<u32>,
    pub lease_ms: Option<u64>,
    pub poll_interval_ms: Option<u64>,
    pub backoff_base_ms: Option<u64>,
    pub backoff_max_ms: Option<u64>,
    pub max_attempts: Option<u32>,
    pub timeout_ms: Option<u64>,
    pub max_text_chars: Option<usize>,
    pub max_candidates: Option<usize>,
    pub max_queued_per_tenant: Option<u64>,
}

/// The settled `[observer]`.
#[derive(Debug, Clone)]
pub struct ObserverConfig {
    /// The model extraction calls name.
    pub model: String,
    /// Passthrough mode's only extraction credential (callers' keys are never used for it); in
    /// managed mode it replaces memgate's upstream key for extraction when set.
    pub extraction_key: Option<SecretString>,
    /// `max_tokens` of an extraction call.
    pub max_tokens: u32,
    pub daily_calls_per_tenant: u64,
    /// Input and output tokens together, as the upstream counts them.
    pub daily_tokens_per_tenant: u64,
    /// Candidates below it are dropped; `[releases.<name>] observe_min_confidence` overrides it.
    pub min_confidence: f64,
    /// A queued exchange older than this is purged without extraction.
    pub max_age: Duration,
    /// The gates' decisions (no record text) are kept this long.
    pub outcomes_retention: Duration,
    pub concurrency: usize,
    pub batch_size: u32,
    /// How long a claimed exchange is reserved for the replica extracting it; must exceed
    /// `timeout_ms`, so a live extraction is never claimed twice.
    pub lease_ms: u64,
    pub poll_interval_ms: u64,
    pub backoff_base_ms: u64,
    pub backoff_max_ms: u64,
    /// Failed calls (429, 529, 5xx, unreachable) before an exchange is given up on.
    pub max_attempts: u32,
    /// The extraction call's whole time.
    pub timeout: Duration,
    /// The person's words and the answer are each kept up to this many characters.
    pub max_text_chars: usize,
    /// Candidates one extraction may return; the rest are ignored.
    pub max_candidates: usize,
    /// Exchanges a tenant may have queued; past it new ones are not queued (counted).
    pub max_queued_per_tenant: u64,
}

impl Default for ObserverConfig {
    fn default() -> Self {
        ObserverConfig {
            model: "claude-haiku-4-5".to_owned(),
            extraction_key: None,
            max_tokens: 1024,
            daily_calls_per_tenant: 2000,
            daily_tokens_per_tenant: 2_000_000,
            min_confidence: 0.7,
            max_age: Duration::from_secs(72 * 3600),
            outcomes_retention: Duration::from_secs(30 * 86_400),
            concurrency: 2,
            batch_size: 8,
            lease_ms: 120_000,
            poll_interval_ms: 1000,
            backoff_base_ms: 2000,
            backoff_max_ms: 300_000,
            max_attempts: 12,
            timeout: Duration::from_secs(60),
            max_text_chars: 8000,
            max_candidates: 20,
            max_queued_per_tenant: 10_000,
        }
    }
}

impl RawObserver {
    pub fn settle(self) -> Result<ObserverConfig, StartupError> {
        let d = ObserverConfig::default();
        let model = self.model.unwrap_or(d.model);
        if model.trim().is_empty() || model.len() > 200 {
            return Err(invalid("observer.model", "name a model, e.g. claude-haiku-4-5"));
        }
        let min_confidence = self.min_confidence.unwrap_or(d.min_confidence);
        if !(0.0..=1.0).contains(&min_confidence) {
            return Err(invalid("observer.min_confidence", "use a number between 0 and 1"));
        }
        let positive = |key: &str, value: Option<u64>, default: u64| match value {
            Some(0) => Err(invalid(&format!("observer.{key}"), "use at least 1")),
            Some(v) => Ok(v),
            None => Ok(default),
        };
        let timeout_ms = positive("timeout_ms", self.timeout_ms, d.timeout.as_millis() as u64)?;
        let lease_ms = positive("lease_ms", self.lease_ms, d.lease_ms)?;
        if lease_ms <= timeout_ms {
            return Err(invalid(
                "observer.lease_ms",
                format!(
                    "must exceed observer.timeout_ms ({timeout_ms}), or a live extraction could be claimed twice"
                ),
            ));
        }
        let backoff_base_ms = positive("backoff_base_ms", self.backoff_base_ms, d.backoff_base_ms)?;
        let backoff_max_ms = positive("backoff_max_ms", self.backoff_max_ms, d.backoff_max_ms)?;
        if backoff_max_ms < backoff_base_ms {
            return Err(invalid("observer.backoff_max_ms", "must be at least observer.backoff_base_ms"));
        }
        let concurrency = self.concurrency.unwrap_or(d.concurrency);
        if !(1..=64).contains(&concurrency) {
            return Err(invalid("observer.concurrency", "use 1 to 64"));
        }
        let batch_size = self.batch_size.unwrap_or(d.batch_size);
        if !(1..=100).contains(&batch_size) {
            return Err(invalid("observer.batch_size", "use 1 to 100"));
        }
        let max_text_chars = self.max_text_chars.unwrap_or(d.max_text_chars);
        if !(100..=100_000).contains(&max_text_chars) {
            return Err(invalid("observer.max_text_chars", "use 100 to 100000"));
        }
        let max_candidates = self.max_candidates.unwrap_or(d.max_candidates);
        if !(1..=100).contains(&max_candidates) {
            return Err(invalid("observer.max_candidates", "use 1 to 100"));
        }
        let max_tokens = self.max_tokens.unwrap_or(d.max_tokens);
        if !(64..=32_000).contains(&max_tokens) {
            return Err(invalid("observer.max_tokens", "use 64 to 32000"));
        }
        Ok(ObserverConfig {
            model,
            extraction_key: self.extraction_key.filter(|k| !k.is_empty()).map(SecretString::from),
            max_tokens,
            daily_calls_per_tenant: self.daily_calls_per_tenant.unwrap_or(d.daily_calls_per_tenant),
            daily_tokens_per_tenant: self.daily_tokens_per_tenant.unwrap_or(d.daily_tokens_per_tenant),
            min_confidence,
            max_age: Duration::from_secs(positive("max_age_hours", self.max_age_hours, 72)? * 3600),
            outcomes_retention: Duration::from_secs(
                positive("outcomes_retention_days", self.outcomes_retention_days, 30)? * 86_400,
            ),
            concurrency,
            batch_size,
            lease_ms,
            poll_interval_ms: positive("poll_interval_ms", self.poll_interval_ms, d.poll_interval_ms)?,
            backoff_base_ms,
            backoff_max_ms,
            max_attempts: u32::try_from(positive(
                "max_attempts",
                self.max_attempts.map(u64::from),
                u64::from(d.max_attempts),
            )?)
            .unwrap_or(u32::MAX),
            timeout: Duration::from_millis(timeout_ms),
            max_text_chars,
            max_candidates,
            max_queued_per_tenant: positive(
                "max_queued_per_tenant",
                self.max_queued_per_tenant,
                d.max_queued_per_tenant,
            )?,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn defaults_settle_and_bad_values_name_their_key() {
        let settled = RawObserver::default().settle().unwrap();
        assert_eq!(settled.model, "claude-haiku-4-5");
        assert!(settled.lease_ms > settled.timeout.as_millis() as u64);
        let bad = RawObserver { min_confidence: Some(1.5), ..RawObserver::default() };
        assert!(bad.settle().unwrap_err().to_string().contains("observer.min_confidence"));
        let bad = RawObserver { lease_ms: Some(1000), timeout_ms: Some(5000), ..RawObserver::default() };
        assert!(bad.settle().unwrap_err().to_string().contains("observer.lease_ms"));
    }
}
