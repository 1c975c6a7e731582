//! Prometheus metrics. Every label takes values from a fixed enum, so the number of series is
//! bounded whatever paths or statuses clients send.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::fmt::Write as _;
use std::time::Duration;

/// The route a request matched, as a bounded label.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum Route {
    messages,
    count_tokens,
    passthrough,
    /// `POST /mcp`: memgate's memory tools for MCP clients.
    mcp,
    admin,
    health,
    metrics,
    unmatched,
}

impl Route {
    /// Maps a request path to its label (before routing, so unmatched paths count too).
    pub fn from_path(path: &str) -> Route {
        match path {
            "/v1/messages" => Route::messages,
            "/v1/messages/count_tokens" => Route::count_tokens,
            "/healthz" | "/readyz" => Route::health,
            "/metrics" => Route::metrics,
            "/mcp" => Route::mcp,
            p if p.starts_with("/v1/") => Route::passthrough,
            p if p.starts_with("/admin/") => Route::admin,
            _ => Route::unmatched,
        }
    }
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct StatusClass(&'static str);

impl StatusClass {
    pub fn of(status: u16) -> StatusClass {
        StatusClass(match status {
            200..=299 => "2xx",
            300..=399 => "3xx",
            400..=499 => "4xx",
            500..=599 => "5xx",
            _ => "other",
        })
    }
}

impl EncodeLabelValue for StatusClass {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.0)
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    route: Route,
    status_class: StatusClass,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: Route,
}

type HistogramFamily = Family<RouteLabels, Histogram, fn() -> Histogram>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReleaseLabels {
    release: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReleaseOutcomeLabels {
    release: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RollbackLabels {
    release: String,
    by: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DegradedLabels {
    release: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    release: String,
    tool: &'static str,
    outcome: &'static str,
}

pub struct Metrics {
    registry: Registry,
    /// memgate's memory tools: calls by release, tool and outcome, and upstream rounds per
    /// Messages request that offered them.
    tool_calls: Family<ToolLabels, Counter>,
    tool_rounds: Family<ReleaseLabels, Histogram, fn() -> Histogram>,
    requests: Family<RequestLabels, Counter>,
    upstream_latency: HistogramFamily,
    added_latency: HistogramFamily,
    funnel_latency: Family<ReleaseLabels, Histogram, fn() -> Histogram>,
    degraded: Family<DegradedLabels, Counter>,
    injected_records: Family<ReleaseLabels, Counter>,
    injected_tokens: Family<ReleaseLabels, Counter>,
    release_requests: Family<ReleaseOutcomeLabels, Counter>,
    release_added_latency: Family<ReleaseLabels, Histogram, fn() -> Histogram>,
    release_rollbacks: Family<RollbackLabels, Counter>,
    embedding_runs: Counter,
    embedding_texts: Counter,
    query_embeddings: Family<SourceLabels, Counter>,
    shared_query_puts: Family<OutcomeLabels, Counter>,
    /// The embedder's counters as last copied into the three above (`sync_embedding`).
    embedding_seen: std::sync::Mutex<crate::embed::EmbedStats>,
    rate_limit_checks: Family<ModeLabels, Counter>,
    /// The fleet limiter's counters as last copied (`sync_fleet`).
    fleet_seen: std::sync::Mutex<crate::identity::fleet::FleetStats>,
    /// Seconds since the in-memory index last took in the store's changes.
    index_age: prometheus_client::metrics::gauge::Gauge,
    /// The Messages body budget as last read (`set_body_budget`).
    body_bytes_held: prometheus_client::metrics::gauge::Gauge,
    bodies_waiting: prometheus_client::metrics::gauge::Gauge,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModeLabels {
    mode: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabels {
    source: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

impl Metrics {
    /// For parts that keep metrics of their own (`triggers`) to register them at start.
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("memgate");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register("requests", "Requests answered, by route and status class", requests.clone());
        // 1 ms .. ~65 s: upstream answers range from cached errors to long generations.
        let upstream_latency: HistogramFamily =
            Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.001, 2.0, 17)));
        registry.register(
            "upstream_latency_seconds",
            "Time from sending a request upstream to receiving the answer's headers",
            upstream_latency.clone(),
        );
        // 25 µs .. ~1.6 s: memgate's own share is meant to stay well under a millisecond.
        let added_latency: HistogramFamily =
            Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.000025, 2.0, 17)));
        registry.register(
            "added_latency_seconds",
            "Time memgate itself adds before the answer's headers (total minus upstream)",
            added_latency.clone(),
        );
        let funnel_latency: Family<ReleaseLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.000025, 2.0, 17)));
        registry.register(
            "memory_recall_seconds",
            "Time of the memory step (query embedding, funnel, rendering, placement), by release",
            funnel_latency.clone(),
        );
        let degraded = Family::<DegradedLabels, Counter>::default();
        registry.register(
            "memory_degraded",
            "Requests sent on without memory because memory failed, by release and reason",
            degraded.clone(),
        );
        let injected_records = Family::<ReleaseLabels, Counter>::default();
        registry.register(
            "memory_injected_records",
            "Records injected, by release",
            injected_records.clone(),
        );
        let injected_tokens = Family::<ReleaseLabels, Counter>::default();
        registry.register(
            "memory_injected_tokens",
            "Tokens of injected records, by release",
            injected_tokens.clone(),
        );
        let release_requests = Family::<ReleaseOutcomeLabels, Counter>::default();
        registry.register(
            "release_requests",
            "Messages requests by release and outcome (ok, upstream_error, memory_error)",
            release_requests.clone(),
        );
        let release_added_latency: Family<ReleaseLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.000025, 2.0, 17)));
        registry.register(
            "release_added_latency_seconds",
            "Time memgate adds before the answer's headers, by release",
            release_added_latency.clone(),
        );
        let release_rollbacks = Family::<RollbackLabels, Counter>::default();
        registry.register(
            "release_rollbacks",
            "Canary rollbacks, by release and by whom (guard or person)",
            release_rollbacks.clone(),
        );
        let embedding_runs = Counter::default();
        registry.register(
            "embedding_model_runs",
            "Runs of the embedding model (each embeds a batch of texts)",
            embedding_runs.clone(),
        );
        let embedding_texts = Counter::default();
        registry.register("embedding_texts", "Texts the embedding model embedded", embedding_texts.clone());
        let query_embeddings = Family::<SourceLabels, Counter>::default();
        registry.register(
            "query_embeddings",
            "Query embeddings by where they came from: local_cache, shared_cache (another replica, through Redis) or model",
            query_embeddings.clone(),
        );
        let shared_query_puts = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "shared_query_embedding_puts",
            "Query embeddings this replica's model made and offered to the others through Redis, by outcome: written, failed (an error or no answer in time) or no_connection (Redis not connected)",
            shared_query_puts.clone(),
        );
        let rate_limit_checks = Family::<ModeLabels, Counter>::default();
        registry.register(
            "rate_limit_checks",
            "Fleet-wide rate-limit checks (Redis): mode=fleet when Redis answered, mode=local when each replica fell back to its share",
            rate_limit_checks.clone(),
        );
        let index_age = prometheus_client::metrics::gauge::Gauge::default();
        registry.register(
            "memory_index_age_seconds",
            "Seconds since this replica's memory index last took in the store's changes (grows while the database is unreachable)",
            index_age.clone(),
        );
        let body_bytes_held = prometheus_client::metrics::gauge::Gauge::default();
        registry.register(
            "request_body_bytes_held",
            "Bytes of Messages bodies held against limits.max_inflight_body_bytes (each body byte counts twice: the body and its copy with memory)",
            body_bytes_held.clone(),
        );
        let bodies_waiting = prometheus_client::metrics::gauge::Gauge::default();
        registry.register(
            "request_bodies_waiting",
            "Messages requests waiting for their share of the body budget (they get 529 when the wait ends)",
            bodies_waiting.clone(),
        );
        for mode in ["fleet", "local"] {
            let _ = rate_limit_checks.get_or_create(&ModeLabels { mode });
        }
        let tool_calls = Family::<ToolLabels, Counter>::default();
        registry.register(
            "memory_tool_calls",
            "Memory tool calls memgate executed, by release, tool and outcome (ok, error, refused, limit)",
            tool_calls.clone(),
        );
        let tool_rounds: Family<ReleaseLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(|| Histogram::new([1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 16.0, 32.0]));
        registry.register(
            "memory_tool_rounds",
            "Upstream rounds of Messages requests that offered memgate's memory tools, by release",
            tool_rounds.clone(),
        );
        Metrics {
            tool_calls,
            tool_rounds,
            rate_limit_checks,
            fleet_seen: std::sync::Mutex::default(),
            index_age,
            body_bytes_held,
            bodies_waiting,
            registry,
            requests,
            upstream_latency,
            added_latency,
            funnel_latency,
            degraded,
            injected_records,
            injected_tokens,
            release_requests,
            release_added_latency,
            release_rollbacks,
            embedding_runs,
            embedding_texts,
            query_embeddings,
            shared_query_puts,
            embedding_seen: std::sync::Mutex::default(),
        }
    }

    pub fn record_request(&self, route: Route, status: u16) {
        let labels = RequestLabels { route, status_class: StatusClass::of(status) };
        self.requests.get_or_create(&labels).inc();
    }

    pub fn record_upstream(&self, route: Route, upstream: Duration, total: Duration) {
        let labels = RouteLabels { route };
        self.upstream_latency.get_or_create(&labels).observe(upstream.as_secs_f64());
        let added = total.saturating_sub(upstream);
        self.added_latency.get_or_create(&labels).observe(added.as_secs_f64());
    }

    pub fn record_funnel(&self, release: &str, took: Duration) {
        self.funnel_latency
            .get_or_create(&ReleaseLabels { release: release.to_owned() })
            .observe(took.as_secs_f64());
    }

    /// `reason` is one of a fixed set (`timeout`, `embedder`, `store`, `template`, `placement`).
    pub fn record_degraded(&self, release: &str, reason: &str) {
        self.degraded
            .get_or_create(&DegradedLabels { release: release.to_owned(), reason: reason.to_owned() })
            .inc();
    }

    pub fn record_injection(&self, release: &str, records: usize, tokens: usize) {
        let labels = ReleaseLabels { release: release.to_owned() };
        self.injected_records.get_or_create(&labels).inc_by(records as u64);
        self.injected_tokens.get_or_create(&labels).inc_by(tokens as u64);
    }

    pub fn record_release(&self, release: &str, upstream_error: bool, memory_error: bool, added: Duration) {
        let outcome = if upstream_error {
            "upstream_error"
        } else if memory_error {
            "memory_error"
        } else {
            "ok"
        };
        self.release_requests
            .get_or_create(&ReleaseOutcomeLabels { release: release.to_owned(), outcome })
            .inc();
        self.release_added_latency
            .get_or_create(&ReleaseLabels { release: release.to_owned() })
            .observe(added.as_secs_f64());
    }

    /// One memory tool call; `tool` and `outcome` come from fixed sets (`tools::metric_name`).
    pub fn record_tool_call(&self, release: &str, tool: &'static str, outcome: &'static str) {
        self.tool_calls.get_or_create(&ToolLabels { release: release.to_owned(), tool, outcome }).inc();
    }

    /// How many upstream rounds a request that offered the tools took.
    pub fn record_tool_rounds(&self, release: &str, rounds: u32) {
        self.tool_rounds
            .get_or_create(&ReleaseLabels { release: release.to_owned() })
            .observe(f64::from(rounds));
    }

    pub fn record_rollback(&self, release: &str, by_guard: bool) {
        let by = if by_guard { "guard" } else { "person" };
        self.release_rollbacks.get_or_create(&RollbackLabels { release: release.to_owned(), by }).inc();
    }

    /// Brings the embedding counters up to the embedder's own (it counts without knowing about
    /// metrics); called before each render.
    pub fn sync_embedding(&self, now: crate::embed::EmbedStats) {
        let mut seen = self.embedding_seen.lock().unwrap_or_else(|p| p.into_inner());
        self.embedding_runs.inc_by(now.runs.saturating_sub(seen.runs));
        self.embedding_texts.inc_by(now.texts.saturating_sub(seen.texts));
        let by_source = [
            ("local_cache", now.cache_hits, seen.cache_hits),
            ("shared_cache", now.shared_hits, seen.shared_hits),
            (
                "model",
                now.cache_misses.saturating_sub(now.shared_hits),
                seen.cache_misses.saturating_sub(seen.shared_hits),
            ),
        ];
        for (source, now, before) in by_source {
            self.query_embeddings.get_or_create(&SourceLabels { source }).inc_by(now.saturating_sub(before));
        }
        let (puts, put_before) = (now.shared_puts, seen.shared_puts);
        for (outcome, now, before) in [
            ("written", puts.written, put_before.written),
            ("failed", puts.failed, put_before.failed),
            ("no_connection", puts.no_connection, put_before.no_connection),
        ] {
            self.shared_query_puts
                .get_or_create(&OutcomeLabels { outcome })
                .inc_by(now.saturating_sub(before));
        }
        *seen = now;
    }

    /// Brings the rate-limit mode counters up to the fleet limiter's own; called before a render.
    pub fn sync_fleet(&self, now: Option<crate::identity::fleet::FleetStats>) {
        let Some(now) = now else { return };
        let mut seen = self.fleet_seen.lock().unwrap_or_else(|p| p.into_inner());
        self.rate_limit_checks
            .get_or_create(&ModeLabels { mode: "fleet" })
            .inc_by(now.fleet.saturating_sub(seen.fleet));
        self.rate_limit_checks
            .get_or_create(&ModeLabels { mode: "local" })
            .inc_by(now.local.saturating_sub(seen.local));
        *seen = now;
    }

    pub fn set_index_age(&self, age: Duration) {
        self.index_age.set(i64::try_from(age.as_secs()).unwrap_or(i64::MAX));
    }

    pub fn set_body_budget(&self, (held, waiting): (u64, usize)) {
        self.body_bytes_held.set(i64::try_from(held).unwrap_or(i64::MAX));
        self.bodies_waiting.set(i64::try_from(waiting).unwrap_or(i64::MAX));
    }

    /// The OpenMetrics text exposition.
    pub fn render(&self) -> Result<String, std::fmt::Error> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)?;
        Ok(text)
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_map_to_a_bounded_set_of_labels() {
        assert_eq!(Route::from_path("/v1/messages"), Route::messages);
        assert_eq!(Route::from_path("/v1/files/abc"), Route::passthrough);
        assert_eq!(Route::from_path("/mcp"), Route::mcp);
        assert_eq!(Route::from_path("/wp-login.php"), Route::unmatched);
    }

    #[test]
    fn rendered_metrics_carry_route_and_status_class() {
        let metrics = Metrics::new();
        metrics.record_request(Route::messages, 529);
        metrics.record_upstream(Route::messages, Duration::from_millis(3), Duration::from_millis(4));
        let text = metrics.render().unwrap();
        assert!(text.contains(r#"memgate_requests_total{route="messages",status_class="5xx"} 1"#), "{text}");
        assert!(text.contains("memgate_added_latency_seconds_bucket"), "{text}");
    }
}
