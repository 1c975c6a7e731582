//! The metrics history (rows of `metric_buckets`, through `store::history`), and the two answers
//! the console's charts read: `GET /admin/v1/metrics/history` and `GET /admin/v1/metrics/releases`
//! (`console/API.md` §3.1–3.2).
//!
//! Rows are per tenant, release and time bucket, never per request, so their number depends on
//! time, replicas and releases, not on traffic: a million calls a day or a thousand make the same
//! rows. Each flush of a replica (`MetricsRecorder::flush`) adds its figures to two rows:
//! - a minute row keyed `(tenant, 60 s, minute, release, replica)`: each replica's own, so
//!   replicas never write the same row; the 1 h view sums the replicas' rows per minute;
//! - a 5-minute row keyed `(tenant, 300 s, 5-minute, release, "")`: every replica adds into the
//!   same row, so the 24 h view reads 288 rows per release whatever the number of replicas.
//!
//! Figures are added (`ON CONFLICT … DO UPDATE SET x = x + excluded.x`), never replaced, so
//! flushes may come at any interval and the newest bucket grows as traffic comes. The latency
//! histogram is 40 counts per row (`lat_00`…`lat_39`), which sum like the rest; p50/p99 come from the
//! summed histogram (quantiles themselves cannot be added). All rows of a flush go in one
//! transaction, in one order (5-minute rows, shared between replicas, in key order), so two
//! replicas' flushes never deadlock; a flush that fails is retried whole by the next one.
//!
//! Minute rows are kept `HistoryRetention::minute_rows` (48 h), 5-minute rows
//! `HistoryRetention::five_minute_rows` (8 days); `prune` deletes older ones.

use super::counters::{Counters, MinuteKey, quantile_ms};
use crate::clock::format_ms;
use crate::error::ApiError;
use crate::store::history::{BucketFigures, BucketRow};
use crate::store::{Store, StoreError};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

pub const MINUTE_MS: i64 = 60_000;
pub const FIVE_MINUTES_MS: i64 = 300_000;

/// How long history is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryRetention {
    /// Minute rows (the 1 h view). Default 48 h.
    pub minute_rows: Duration,
    /// 5-minute rows (the 24 h view). Default 8 days (`metrics.history_retention_days`).
    pub five_minute_rows: Duration,
}

impl Default for HistoryRetention {
    fn default() -> Self {
        HistoryRetention {
            minute_rows: Duration::from_secs(48 * 3600),
            five_minute_rows: Duration::from_secs(8 * 24 * 3600),
        }
    }
}

impl HistoryRetention {
    /// `metrics.history_retention_days` days of 5-minute rows and `metrics.minute_history_hours`
    /// hours of minute rows (at most as long as the 5-minute rows).
    pub fn new(days: u32, minute_hours: u32) -> HistoryRetention {
        let five = Duration::from_secs(u64::from(days) * 24 * 3600);
        HistoryRetention {
            five_minute_rows: five,
            minute_rows: Duration::from_secs(u64::from(minute_hours) * 3600).min(five),
        }
    }
}

pub(crate) fn ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

impl Counters {
    fn figures(&self) -> BucketFigures {
        BucketFigures { scalars: self.scalars(), latency: self.latency }
    }
}

impl From<BucketFigures> for Counters {
    fn from(figures: BucketFigures) -> Counters {
        Counters::from_parts(figures.scalars, figures.latency)
    }
}

/// Adds `minutes` (this replica's figures) to the store: a minute row each, and their sums into
/// the 5-minute rows. One transaction; nothing is written if it fails.
pub async fn write(
    store: &Store,
    replica: &str,
    minutes: &BTreeMap<MinuteKey, Counters>,
) -> Result<usize, StoreError> {
    let mut five: BTreeMap<(&str, i64, &str), Counters> = BTreeMap::new();
    for (key, counters) in minutes {
        let start = key.minute_ms - key.minute_ms.rem_euclid(FIVE_MINUTES_MS);
        five.entry((key.tenant.as_str(), start, key.release.as_str())).or_default().merge(counters);
    }
    // The shared 5-minute rows first, in key order: every replica locks them in the same order.
    let mut rows: Vec<BucketRow<'_>> = five
        .into_iter()
        .map(|((tenant, bucket_start, release), counters)| BucketRow {
            tenant,
            release,
            bucket_secs: 300,
            bucket_start,
            replica: "",
            figures: counters.figures(),
        })
        .collect();
    rows.extend(minutes.iter().map(|(key, counters)| BucketRow {
        tenant: &key.tenant,
        release: &key.release,
        bucket_secs: 60,
        bucket_start: key.minute_ms,
        replica,
        figures: counters.figures(),
    }));
    store.add_to_metric_buckets(&rows).await
}

/// Deletes minute and 5-minute rows past their retention; returns how many.
pub async fn prune(store: &Store, retention: &HistoryRetention, now_ms: i64) -> Result<u64, StoreError> {
    let mut deleted = 0;
    for (secs, keep) in [(60_i64, retention.minute_rows), (300, retention.five_minute_rows)] {
        deleted += store.delete_metric_buckets_before(secs, now_ms.saturating_sub(ms(keep))).await?;
    }
    Ok(deleted)
}

/// The time a chart spans.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Window {
    /// 60 buckets of 60 s, from the minute rows.
    #[serde(rename = "1h")]
    Hour,
    /// 288 buckets of 300 s, from the 5-minute rows.
    #[serde(rename = "24h")]
    Day,
}

impl Window {
    pub fn parse(text: &str) -> Option<Window> {
        match text {
            "1h" => Some(Window::Hour),
            "24h" => Some(Window::Day),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Window::Hour => "1h",
            Window::Day => "24h",
        }
    }

    pub fn bucket_ms(self) -> i64 {
        match self {
            Window::Hour => MINUTE_MS,
            Window::Day => FIVE_MINUTES_MS,
        }
    }

    pub fn buckets(self) -> i64 {
        match self {
            Window::Hour => 60,
            Window::Day => 288,
        }
    }

    /// `[from, to)`: the buckets ending with the one `now_ms` falls in.
    pub fn span(self, now_ms: i64) -> (i64, i64) {
        let size = self.bucket_ms();
        let last = now_ms - now_ms.rem_euclid(size);
        (last - (self.buckets() - 1) * size, last + size)
    }
}

/// The query of `GET /admin/v1/metrics/history` and `…/releases`: `window` and, for history,
/// `release`. Anything else is a 400 naming the parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryParams {
    pub window: Window,
    pub release: Option<String>,
}

impl HistoryParams {
    /// Parses a raw query string. `allow_release`: whether `release=` is a parameter here (history:
    /// yes; releases: no). `default`: the window when absent (history `1h`, releases `24h`).
    pub fn parse(
        query: Option<&str>,
        allow_release: bool,
        default: Window,
    ) -> Result<HistoryParams, ApiError> {
        let mut params = HistoryParams { window: default, release: None };
        let mut seen: Vec<String> = Vec::new();
        for (name, value) in url::form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            if seen.contains(&name.to_string()) {
                return Err(ApiError::invalid_request(format!("`{name}` is given twice")));
            }
            seen.push(name.to_string());
            match name.as_ref() {
                "window" => {
                    params.window = Window::parse(&value)
                        .ok_or_else(|| ApiError::invalid_request("`window` must be `1h` or `24h`"))?;
                }
                "release" if allow_release => {
                    if value.is_empty() {
                        return Err(ApiError::invalid_request("`release` must name a release"));
                    }
                    params.release = Some(value.into_owned());
                }
                other => {
                    let known = if allow_release { "`window` and `release`" } else { "`window`" };
                    let shown: String = other.chars().take(64).collect();
                    return Err(ApiError::invalid_request(format!(
                        "unknown parameter `{shown}`; this endpoint takes {known}"
                    )));
                }
            }
        }
        Ok(params)
    }
}

/// Error counts by kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Errors {
    pub upstream: u64,
    pub memory: u64,
    pub rate_limited: u64,
    pub client: u64,
    /// memgate's own 5xx that are neither upstream nor memory failures (an addition to API.md's
    /// four kinds; the console ignores it).
    pub internal: u64,
}

/// `X-Memory-Status` counts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MemoryCounts {
    pub ok: u64,
    pub skipped: u64,
    pub degraded: u64,
}

/// Added latency quantiles in milliseconds (0 without calls).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Latency {
    pub p50: f64,
    pub p99: f64,
}

/// The figures of a bucket or a window, as API.md shapes them.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Figures {
    pub calls: u64,
    pub errors: Errors,
    pub memory: MemoryCounts,
    pub injected_records: u64,
    pub injected_tokens: u64,
    pub visible_tokens: u64,
    pub added_latency_ms: Latency,
}

impl From<&Counters> for Figures {
    fn from(c: &Counters) -> Figures {
        Figures {
            calls: c.calls,
            errors: Errors {
                upstream: c.err_upstream,
                memory: c.err_memory,
                rate_limited: c.err_rate_limited,
                client: c.err_client,
                internal: c.err_internal,
            },
            memory: MemoryCounts { ok: c.mem_ok, skipped: c.mem_skipped, degraded: c.mem_degraded },
            injected_records: c.injected_records,
            injected_tokens: c.injected_tokens,
            visible_tokens: c.visible_tokens,
            added_latency_ms: Latency {
                p50: quantile_ms(&c.latency, 0.5),
                p99: quantile_ms(&c.latency, 0.99),
            },
        }
    }
}

/// One bucket of a chart.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bucket {
    /// The bucket's start.
    pub t: String,
    #[serde(flatten)]
    pub figures: Figures,
}

/// The answer of `GET /admin/v1/metrics/history`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct History {
    pub window: Window,
    pub bucket_secs: i64,
    pub release: Option<String>,
    pub from: String,
    pub to: String,
    pub buckets: Vec<Bucket>,
    pub totals: Figures,
}

fn unknown_release(name: &str, known: &[String]) -> ApiError {
    ApiError::not_found(format!("no release `{name}`; known: {}", known.join(", ")))
}

/// `GET /admin/v1/metrics/history`: the tenant's buckets over the window, every replica summed,
/// oldest first, with zeros where there were no calls. `known_releases`: the defined releases
/// (a `release` not among them is a 404).
pub async fn history(
    store: &Store,
    tenant: &str,
    params: &HistoryParams,
    known_releases: &[String],
    now_ms: i64,
) -> Result<History, ApiError> {
    if let Some(release) = &params.release
        && !known_releases.contains(release)
    {
        return Err(unknown_release(release, known_releases));
    }
    let window = params.window;
    let (from, to) = window.span(now_ms);
    let sums = store
        .metric_sums_by_start(tenant, window.bucket_ms() / 1000, (from, to), params.release.as_deref())
        .await?;
    let by_start: HashMap<i64, Counters> =
        sums.into_iter().map(|(start, figures)| (start, Counters::from(figures))).collect();
    let mut totals = Counters::default();
    let empty = Counters::default();
    let buckets = (0..window.buckets())
        .map(|i| {
            let start = from + i * window.bucket_ms();
            let counters = by_start.get(&start).unwrap_or(&empty);
            totals.merge(counters);
            Bucket { t: format_ms(start), figures: Figures::from(counters) }
        })
        .collect();
    Ok(History {
        window,
        bucket_secs: window.bucket_ms() / 1000,
        release: params.release.clone(),
        from: format_ms(from),
        to: format_ms(to),
        buckets,
        totals: Figures::from(&totals),
    })
}

/// One release's figures over a window, with its share and token savings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReleaseFigures {
    pub release: String,
    pub calls: u64,
    /// calls / the calls of every listed release.
    pub share: f64,
    pub errors: Errors,
    /// (upstream + memory) / calls, the guard's error rate; 0 without calls.
    pub error_rate: f64,
    pub memory: MemoryCounts,
    pub injected_records: u64,
    pub injected_tokens: u64,
    pub injected_tokens_per_call: f64,
    pub visible_tokens: u64,
    /// visible − injected: what injecting the whole visible store would have cost more.
    pub saved_tokens: u64,
    /// saved / visible; 0 when nothing was visible.
    pub saved_share: f64,
    pub added_latency_ms: Latency,
}

/// The answer of `GET /admin/v1/metrics/releases`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReleasesAnswer {
    pub window: Window,
    pub data: Vec<ReleaseFigures>,
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

/// `GET /admin/v1/metrics/releases`: per defined release (`known_releases`, ordered by name, zeros
/// for one without calls), its figures over the window, every replica summed. Calls refused
/// before a release was chosen (recorded under `""`) count in the history's totals, not here.
pub async fn releases(
    store: &Store,
    tenant: &str,
    window: Window,
    known_releases: &[String],
    now_ms: i64,
) -> Result<ReleasesAnswer, ApiError> {
    let sums = store.metric_sums_by_release(tenant, window.bucket_ms() / 1000, window.span(now_ms)).await?;
    let by_release: HashMap<String, Counters> =
        sums.into_iter().map(|(release, figures)| (release, Counters::from(figures))).collect();
    let mut names: Vec<&String> = known_releases.iter().collect();
    names.sort();
    names.dedup();
    let empty = Counters::default();
    let all_calls: u64 = names.iter().filter_map(|n| by_release.get(*n)).map(|c| c.calls).sum();
    let data = names
        .into_iter()
        .map(|name| {
            let c = by_release.get(name).unwrap_or(&empty);
            let figures = Figures::from(c);
            let saved = c.visible_tokens.saturating_sub(c.injected_tokens);
            ReleaseFigures {
                release: name.clone(),
                calls: c.calls,
                share: ratio(c.calls, all_calls),
                error_rate: ratio(c.err_upstream + c.err_memory, c.calls),
                injected_tokens_per_call: ratio(c.injected_tokens, c.calls),
                saved_tokens: saved,
                saved_share: ratio(saved, c.visible_tokens),
                errors: figures.errors,
                memory: figures.memory,
                injected_records: c.injected_records,
                injected_tokens: c.injected_tokens,
                visible_tokens: c.visible_tokens,
                added_latency_ms: figures.added_latency_ms,
            }
        })
        .collect();
    Ok(ReleasesAnswer { window, data })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn windows_end_with_the_current_bucket() {
        let now = 1_750_000_123_456; // 2025-06-15T15:08:43.456Z
        let (from, to) = Window::Hour.span(now);
        assert_eq!(to - from, 3_600_000);
        assert_eq!(to, now - now % 60_000 + 60_000);
        let (from, to) = Window::Day.span(now);
        assert_eq!(to - from, 288 * 300_000);
        assert_eq!(from % 300_000, 0);
        assert!(from <= now && now < to);
    }

    #[test]
    fn params_name_what_is_wrong() {
        let ok = HistoryParams::parse(Some("window=24h&release=v2"), true, Window::Hour).unwrap();
        assert_eq!(ok, HistoryParams { window: Window::Day, release: Some("v2".into()) });
        assert_eq!(HistoryParams::parse(None, false, Window::Day).unwrap().window, Window::Day);
        let message = |q: &str, release: bool| {
            HistoryParams::parse(Some(q), release, Window::Hour).unwrap_err().message().to_owned()
        };
        assert!(message("window=2h", true).contains("`window`"));
        assert!(message("release=v2", false).contains("unknown parameter `release`"));
        assert!(message("limit=3", true).contains("`limit`"));
        assert!(message("window=1h&window=24h", true).contains("twice"));
    }
}
