//! What one answered Messages request adds to the console's history, and the sums of such: the
//! outcome the turn reports (`CallOutcome`), the counters a minute, a bucket or a window adds up to
//! (`Counters`), and the added-latency histogram those counters carry, from which p50 and p99 come
//! (quantiles themselves cannot be added; histograms can). Plain data: the recorder accumulates
//! it, the history writes and reads it.

use std::sync::LazyLock;
use std::time::Duration;

/// Bins of the added-latency histogram: 40 log-spaced bins from 0.05 ms to 10 s (each ~36% wider
/// than the one before), the first also taking everything faster and the last everything
/// slower. The same bins as the console's mock (`console/dev/mock/metrics.mjs`).
pub const LATENCY_BINS: usize = 40;
const LATENCY_LOW_MS: f64 = 0.05;
const LATENCY_HIGH_MS: f64 = 10_000.0;

/// The lower edge of bin `i` in milliseconds (`i` in 0..=40; 40 is the upper edge of the last).
pub fn bin_edge_ms(i: usize) -> f64 {
    let step = (LATENCY_HIGH_MS / LATENCY_LOW_MS).ln() / LATENCY_BINS as f64;
    LATENCY_LOW_MS * (step * i as f64).exp()
}

/// Upper edges of bins 0..39, in nanoseconds: `bin_of` is a binary search over 39 integers.
static EDGES_NS: LazyLock<[u64; LATENCY_BINS - 1]> = LazyLock::new(|| {
    let mut edges = [0u64; LATENCY_BINS - 1];
    for (i, edge) in edges.iter_mut().enumerate() {
        *edge = (bin_edge_ms(i + 1) * 1e6) as u64;
    }
    edges
});

/// The histogram bin of a latency.
pub fn latency_bin(latency: Duration) -> usize {
    let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
    EDGES_NS.partition_point(|&edge| edge <= ns)
}

/// The `q`-quantile (0..=1) of a histogram in milliseconds, interpolated geometrically inside its
/// bin, rounded to the microsecond; 0 for an empty histogram. The estimate lies in the bin that
/// holds the true value, so it is off by at most the bin's factor (1.357), and by much less when
/// the values spread over several bins.
pub fn quantile_ms(bins: &[u64; LATENCY_BINS], q: f64) -> f64 {
    let total: u64 = bins.iter().sum();
    if total == 0 {
        return 0.0;
    }
    let rank = (q.clamp(0.0, 1.0) * total as f64).max(1.0);
    let mut below = 0u64;
    for (i, &count) in bins.iter().enumerate() {
        if count > 0 && (below + count) as f64 >= rank {
            let within = ((rank - below as f64) / count as f64).clamp(0.0, 1.0);
            let (low, high) = (bin_edge_ms(i), bin_edge_ms(i + 1));
            let value = low * (high / low).powf(within);
            return (value * 1000.0).round() / 1000.0;
        }
        below += count;
    }
    LATENCY_HIGH_MS
}

/// What memory did for a request (`X-Memory-Status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryOutcome {
    Ok,
    /// Mode off or read, memory not allowed, or nothing to match.
    Skipped,
    /// Memory failed and the request went on without it (fail-open), or was refused (fail-closed).
    Degraded,
}

/// Which error count a request adds to (at most one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallError {
    /// The upstream answered 5xx (529 included), or could not be reached or timed out (memgate's
    /// 502 and 504).
    Upstream,
    /// Memory failed for the request (`X-Memory-Status: degraded`, or refused when fail-closed).
    Memory,
    /// memgate's own 429 (rate limits); the upstream's 429s are `Client`.
    RateLimited,
    /// Any other 4xx, memgate's refusals and the upstream's.
    Client,
    /// memgate's own 5xx that is neither of the above (its internal errors, its own overload).
    Internal,
}

impl CallError {
    /// The class of an answered request. `upstream_answered`: the status is the upstream's (it
    /// answered); false when memgate answered by itself. `memory`: what memory did.
    pub fn classify(status: u16, upstream_answered: bool, memory: MemoryOutcome) -> Option<CallError> {
        let degraded = memory == MemoryOutcome::Degraded;
        match status {
            500..=599 if upstream_answered => Some(CallError::Upstream),
            502 | 504 => Some(CallError::Upstream),
            500..=599 if degraded => Some(CallError::Memory),
            500..=599 => Some(CallError::Internal),
            _ if degraded => Some(CallError::Memory),
            429 if !upstream_answered => Some(CallError::RateLimited),
            400..=499 => Some(CallError::Client),
            _ => None,
        }
    }
}

/// One answered `POST /v1/messages` (not count_tokens, not passthrough paths), as the proxy
/// knows it when the answer's headers go out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CallOutcome {
    pub error: Option<CallError>,
    pub memory: MemoryOutcome,
    /// Records in the block, stubs included.
    pub injected_records: u32,
    /// Tokens of the block's records (the funnel's count).
    pub injected_tokens: u32,
    /// Tokens, in full, of the records this caller could see now: those that passed the scope and
    /// temporal layers (the funnel's per-record token estimate, summed). 0 when memory was skipped.
    pub visible_tokens: u64,
    /// memgate's own share of the time to the answer's headers (total minus upstream).
    pub added_latency: Duration,
}

/// Sums of outcomes: one minute of one tenant and release, or any sum of such.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counters {
    pub calls: u64,
    pub err_upstream: u64,
    pub err_memory: u64,
    pub err_rate_limited: u64,
    pub err_client: u64,
    pub err_internal: u64,
    pub mem_ok: u64,
    pub mem_skipped: u64,
    pub mem_degraded: u64,
    pub injected_records: u64,
    pub injected_tokens: u64,
    pub visible_tokens: u64,
    pub latency: [u64; LATENCY_BINS],
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            calls: 0,
            err_upstream: 0,
            err_memory: 0,
            err_rate_limited: 0,
            err_client: 0,
            err_internal: 0,
            mem_ok: 0,
            mem_skipped: 0,
            mem_degraded: 0,
            injected_records: 0,
            injected_tokens: 0,
            visible_tokens: 0,
            latency: [0; LATENCY_BINS],
        }
    }
}

impl Counters {
    /// The scalar counters in the order of the store's columns (`store::history::COUNTER_COLUMNS`).
    pub fn scalars(&self) -> [u64; 12] {
        [
            self.calls,
            self.err_upstream,
            self.err_memory,
            self.err_rate_limited,
            self.err_client,
            self.err_internal,
            self.mem_ok,
            self.mem_skipped,
            self.mem_degraded,
            self.injected_records,
            self.injected_tokens,
            self.visible_tokens,
        ]
    }

    /// The inverse of `scalars` plus the histogram.
    pub fn from_parts(scalars: [u64; 12], latency: [u64; LATENCY_BINS]) -> Counters {
        let [
            calls,
            err_upstream,
            err_memory,
            err_rate_limited,
            err_client,
            err_internal,
            mem_ok,
            mem_skipped,
            mem_degraded,
            injected_records,
            injected_tokens,
            visible_tokens,
        ] = scalars;
        Counters {
            calls,
            err_upstream,
            err_memory,
            err_rate_limited,
            err_client,
            err_internal,
            mem_ok,
            mem_skipped,
            mem_degraded,
            injected_records,
            injected_tokens,
            visible_tokens,
            latency,
        }
    }

    pub fn add(&mut self, outcome: &CallOutcome) {
        self.calls += 1;
        match outcome.error {
            Some(CallError::Upstream) => self.err_upstream += 1,
            Some(CallError::Memory) => self.err_memory += 1,
            Some(CallError::RateLimited) => self.err_rate_limited += 1,
            Some(CallError::Client) => self.err_client += 1,
            Some(CallError::Internal) => self.err_internal += 1,
            None => {}
        }
        match outcome.memory {
            MemoryOutcome::Ok => self.mem_ok += 1,
            MemoryOutcome::Skipped => self.mem_skipped += 1,
            MemoryOutcome::Degraded => self.mem_degraded += 1,
        }
        self.injected_records += u64::from(outcome.injected_records);
        self.injected_tokens += u64::from(outcome.injected_tokens);
        self.visible_tokens += outcome.visible_tokens;
        self.latency[latency_bin(outcome.added_latency)] += 1;
    }

    pub fn merge(&mut self, other: &Counters) {
        let mut mine = self.scalars();
        for (a, b) in mine.iter_mut().zip(other.scalars()) {
            *a = a.saturating_add(b);
        }
        let mut latency = self.latency;
        for (a, b) in latency.iter_mut().zip(other.latency) {
            *a = a.saturating_add(b);
        }
        *self = Counters::from_parts(mine, latency);
    }

    pub fn is_empty(&self) -> bool {
        self.calls == 0
    }
}

/// A minute of one tenant and release: what a flush writes one row (per replica) for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MinuteKey {
    pub tenant: String,
    pub release: String,
    /// The minute's start, milliseconds since the epoch.
    pub minute_ms: i64,
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn outcome(ms: f64) -> CallOutcome {
        CallOutcome {
            error: None,
            memory: MemoryOutcome::Ok,
            injected_records: 2,
            injected_tokens: 100,
            visible_tokens: 1000,
            added_latency: Duration::from_secs_f64(ms / 1000.0),
        }
    }

    #[test]
    fn latency_bins_cover_50_microseconds_to_10_seconds() {
        assert_eq!(latency_bin(Duration::ZERO), 0);
        assert_eq!(latency_bin(Duration::from_micros(50)), 0);
        assert_eq!(latency_bin(Duration::from_micros(70)), 1);
        assert_eq!(latency_bin(Duration::from_secs(10)), LATENCY_BINS - 1);
        assert_eq!(latency_bin(Duration::from_secs(3600)), LATENCY_BINS - 1);
        assert!((bin_edge_ms(LATENCY_BINS) - 10_000.0).abs() < 1e-6);
        // Monotone, one bin per edge.
        let mut last = 0;
        for us in (0..2_000_000).step_by(997) {
            let bin = latency_bin(Duration::from_micros(us));
            assert!(bin >= last);
            last = bin;
        }
    }

    #[test]
    fn quantiles_come_back_within_a_bin() {
        let mut counters = Counters::default();
        for i in 0..1000 {
            // 1.000 .. 1.999 ms, then a slow tail.
            let ms = if i < 990 { 1.0 + i as f64 / 1000.0 } else { 50.0 };
            counters.add(&outcome(ms));
        }
        // True p50 1.5 ms, p99 1.99 ms: estimates stay within the bin that holds them (a bin
        // spans a factor of 1.357).
        let p50 = quantile_ms(&counters.latency, 0.5);
        let p99 = quantile_ms(&counters.latency, 0.99);
        assert!((1.5 / 1.357..=1.5 * 1.357).contains(&p50), "{p50}");
        assert!((1.99 / 1.357..=1.99 * 1.357).contains(&p99), "{p99}");
        assert!(quantile_ms(&counters.latency, 1.0) > 40.0);
        assert_eq!(quantile_ms(&[0; LATENCY_BINS], 0.5), 0.0);
    }

    #[test]
    fn errors_are_classified_once() {
        use CallError::*;
        use MemoryOutcome::{Degraded, Ok as MemOk, Skipped};
        let cases = [
            (200, true, MemOk, None),
            (200, true, Degraded, Some(Memory)),
            (529, true, MemOk, Some(Upstream)),
            (500, true, Degraded, Some(Upstream)),
            (502, false, MemOk, Some(Upstream)),
            (504, false, Skipped, Some(Upstream)),
            (529, false, Degraded, Some(Memory)),
            (500, false, MemOk, Some(Internal)),
            (429, false, Skipped, Some(RateLimited)),
            (429, true, MemOk, Some(Client)),
            (400, false, Skipped, Some(Client)),
            (401, true, Skipped, Some(Client)),
        ];
        for (status, upstream, memory, expected) in cases {
            assert_eq!(
                CallError::classify(status, upstream, memory),
                expected,
                "{status} {upstream} {memory:?}"
            );
        }
    }
}
