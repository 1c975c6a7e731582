//! Per-release figures on this replica: totals since start for `stats`, and a sliding window of
//! per-second buckets for the guard. Everything is behind one short-held mutex per release.

use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

const WINDOW_MAX_SECS: usize = 3600;
const LATENCY_SAMPLES: usize = 2048;

/// One request's outcome, as far as its release is concerned.
pub struct Outcome {
    /// The upstream answered 5xx (529 included) or could not be reached.
    pub upstream_error: bool,
    /// Memory failed for this request (template, funnel timeout, embedder, placement).
    pub memory_error: bool,
    pub injected_records: usize,
    pub injected_tokens: usize,
    pub added_latency: Duration,
}

#[derive(Default)]
struct Totals {
    calls: u64,
    upstream_errors: u64,
    memory_errors: u64,
    injected_records: u64,
    injected_tokens: u64,
    added_latency_sum_us: u64,
    latencies_us: VecDeque<u64>,
    /// (second, calls, errors), oldest first.
    window: VecDeque<(u64, u64, u64)>,
    shadow: ShadowTotals,
}

#[derive(Default, Clone, Serialize)]
pub struct ShadowTotals {
    pub sampled: u64,
    /// Ids the candidate would have injected that the active release did not.
    pub ids_added: u64,
    /// Ids the active release injected that the candidate would not have.
    pub ids_dropped: u64,
    pub tokens_delta: i64,
    /// The last few differences, newest last.
    pub recent: VecDeque<ShadowDiff>,
}

#[derive(Clone, Serialize)]
pub struct ShadowDiff {
    pub added: Vec<String>,
    pub dropped: Vec<String>,
    pub tokens_delta: i64,
}

#[derive(Default)]
pub struct ReleaseStats {
    releases: Mutex<BTreeMap<String, Totals>>,
}

/// What `GET /admin/v1/releases/{name}/stats` shows.
#[derive(Serialize)]
pub struct Snapshot {
    pub calls: u64,
    pub share: f64,
    pub upstream_errors: u64,
    pub memory_errors: u64,
    pub error_rate: f64,
    pub injected_records: u64,
    pub injected_tokens: u64,
    pub added_latency_ms: LatencySummary,
    pub window: WindowSummary,
    pub shadow: ShadowTotals,
}

#[derive(Serialize)]
pub struct LatencySummary {
    pub mean: f64,
    pub p50: f64,
    pub p99: f64,
}

#[derive(Serialize)]
pub struct WindowSummary {
    pub secs: u64,
    pub calls: u64,
    pub errors: u64,
    pub error_rate: f64,
}

impl ReleaseStats {
    fn with<T>(&self, f: impl FnOnce(&mut BTreeMap<String, Totals>) -> T) -> T {
        f(&mut self.releases.lock().unwrap_or_else(|p| p.into_inner()))
    }

    pub fn record(&self, release: &str, now_secs: u64, outcome: &Outcome) {
        self.with(|all| {
            let t = all.entry(release.to_owned()).or_default();
            t.calls += 1;
            t.upstream_errors += u64::from(outcome.upstream_error);
            t.memory_errors += u64::from(outcome.memory_error);
            t.injected_records += outcome.injected_records as u64;
            t.injected_tokens += outcome.injected_tokens as u64;
            let us = outcome.added_latency.as_micros() as u64;
            t.added_latency_sum_us += us;
            if t.latencies_us.len() == LATENCY_SAMPLES {
                t.latencies_us.pop_front();
            }
            t.latencies_us.push_back(us);
            let error = u64::from(outcome.upstream_error || outcome.memory_error);
            match t.window.back_mut() {
                Some((second, calls, errors)) if *second == now_secs => {
                    *calls += 1;
                    *errors += error;
                }
                _ => t.window.push_back((now_secs, 1, error)),
            }
            while t.window.len() > WINDOW_MAX_SECS {
                t.window.pop_front();
            }
        });
    }

    pub fn record_shadow(&self, release: &str, diff: ShadowDiff) {
        self.with(|all| {
            let shadow = &mut all.entry(release.to_owned()).or_default().shadow;
            shadow.sampled += 1;
            shadow.ids_added += diff.added.len() as u64;
            shadow.ids_dropped += diff.dropped.len() as u64;
            shadow.tokens_delta += diff.tokens_delta;
            if shadow.recent.len() == 20 {
                shadow.recent.pop_front();
            }
            shadow.recent.push_back(diff);
        });
    }

    /// (calls, errors) over the last `secs` seconds up to `now_secs`.
    pub fn window(&self, release: &str, now_secs: u64, secs: u64) -> (u64, u64) {
        self.with(|all| {
            all.get(release).map_or((0, 0), |t| {
                t.window
                    .iter()
                    .filter(|(second, _, _)| *second + secs > now_secs)
                    .fold((0, 0), |(c, e), (_, calls, errors)| (c + calls, e + errors))
            })
        })
    }

    /// Forgets the window (after a rollback or promotion the old verdict no longer applies).
    pub fn reset_window(&self, release: &str) {
        self.with(|all| {
            if let Some(t) = all.get_mut(release) {
                t.window.clear();
            }
        });
    }

    pub fn snapshot(&self, release: &str, now_secs: u64, window_secs: u64) -> Snapshot {
        let (window_calls, window_errors) = self.window(release, now_secs, window_secs);
        self.with(|all| {
            let total_calls: u64 = all.values().map(|t| t.calls).sum();
            let empty = Totals::default();
            let t = all.get(release).unwrap_or(&empty);
            let mut sorted: Vec<u64> = t.latencies_us.iter().copied().collect();
            sorted.sort_unstable();
            let pick = |q: f64| {
                if sorted.is_empty() {
                    0.0
                } else {
                    sorted[((sorted.len() - 1) as f64 * q).round() as usize] as f64 / 1000.0
                }
            };
            let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
            Snapshot {
                calls: t.calls,
                share: ratio(t.calls, total_calls),
                upstream_errors: t.upstream_errors,
                memory_errors: t.memory_errors,
                error_rate: ratio(t.upstream_errors + t.memory_errors, t.calls),
                injected_records: t.injected_records,
                injected_tokens: t.injected_tokens,
                added_latency_ms: LatencySummary {
                    mean: ratio(t.added_latency_sum_us, t.calls) / 1000.0,
                    p50: pick(0.5),
                    p99: pick(0.99),
                },
                window: WindowSummary {
                    secs: window_secs,
                    calls: window_calls,
                    errors: window_errors,
                    error_rate: ratio(window_errors, window_calls),
                },
                shadow: t.shadow.clone(),
            }
        })
    }
}
