//! The in-memory side of the metrics history: every answered Messages request adds its outcome to
//! a per-minute accumulator (`MetricsRecorder::record`), and the server's ticker writes the
//! accumulated figures to the store once a minute (`flush`, in `history`).
//!
//! `record` sits on the request path, so it must cost well under a microsecond: no allocation
//! (except the first time a tenant and release are seen in a flush interval), no shared cache line
//! between threads. The accumulator is split into shards, each a `Mutex` on its own cache line; a
//! thread always takes the same shard (given out round-robin on its first call), so with one
//! shard per thread the mutex is never contended and costs one uncontended atomic exchange.
//! Measured in `loadtest/bench/console_bench.rs` (docs/console.md).
//!
//! Lifecycle: `record` adds to `shards`; `flush` takes each shard's map out (the shard is locked
//! only for the swap), merges them with what an earlier failed flush left in `pending`, and writes
//! everything in one transaction. On failure the figures go back to `pending` (bounded: the
//! oldest minutes are dropped first past `MAX_PENDING_ROWS`), so a database outage loses nothing
//! short of that. Flushes are serialized by `flushing`.

use super::history::{self, HistoryRetention};
use crate::store::{Store, StoreError};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex, PoisonError};
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
    /// The scalar counters in the order of `history::COUNTER_COLUMNS`.
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

/// tenant → release → the minutes seen since the last flush (usually one or two).
type ShardMap = HashMap<String, HashMap<String, Vec<(i64, Counters)>>>;

/// A shard on a cache line of its own, so two threads' shards never share one.
#[repr(align(128))]
#[derive(Default)]
struct Shard(Mutex<ShardMap>);

/// Past this many (tenant, release, minute) rows kept for a later flush (the store unreachable
/// for a long time), the oldest minutes are dropped: ~500 bytes each, ~50 MB at most.
const MAX_PENDING_ROWS: usize = 100_000;

/// How often a flush also deletes history past its retention.
const PRUNE_EVERY_MS: i64 = 10 * 60_000;

static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's shard number (modulo the shard count), given out round-robin.
    static SHARD_SEED: usize = NEXT_SHARD.fetch_add(1, Ordering::Relaxed);
}

/// What one flush did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlushReport {
    /// (tenant, release, minute) rows written (each as a minute row and into a 5-minute row).
    pub minutes: usize,
    /// Calls in them.
    pub calls: u64,
    /// History rows deleted past retention (when this flush pruned).
    pub pruned: u64,
}

/// This replica's accumulator of request outcomes; see the module comment.
pub struct MetricsRecorder {
    replica: String,
    retention: HistoryRetention,
    shards: Box<[Shard]>,
    pending: Mutex<BTreeMap<MinuteKey, Counters>>,
    flushing: tokio::sync::Mutex<()>,
    last_prune_ms: AtomicI64,
}

impl MetricsRecorder {
    /// `replica`: this process's name in the history (a host name, or a random id per start;
    /// empty becomes `replica`, since `''` names the shared 5-minute rows).
    pub fn new(replica: impl Into<String>, retention: HistoryRetention) -> MetricsRecorder {
        let replica = Some(replica.into()).filter(|r| !r.is_empty()).unwrap_or_else(|| "replica".to_owned());
        let threads = std::thread::available_parallelism().map_or(4, |n| n.get());
        let shards = (0..(threads * 2).clamp(8, 128)).map(|_| Shard::default()).collect();
        MetricsRecorder {
            replica,
            retention,
            shards,
            pending: Mutex::new(BTreeMap::new()),
            flushing: tokio::sync::Mutex::new(()),
            last_prune_ms: AtomicI64::new(i64::MIN),
        }
    }

    pub fn replica(&self) -> &str {
        &self.replica
    }

    pub fn retention(&self) -> &HistoryRetention {
        &self.retention
    }

    /// Adds one answered Messages request of `tenant`, served by `release` (`""` when it was
    /// refused before a release was chosen), to the current minute.
    pub fn record(&self, tenant: &str, release: &str, outcome: &CallOutcome) {
        self.record_at(crate::clock::now_ms(), tenant, release, outcome);
    }

    /// `record` at a given time (tests, benchmarks, backfills).
    pub fn record_at(&self, at_ms: i64, tenant: &str, release: &str, outcome: &CallOutcome) {
        let minute = at_ms - at_ms.rem_euclid(history::MINUTE_MS);
        let shard = SHARD_SEED.with(|seed| *seed) % self.shards.len();
        let mut map = self.shards[shard].0.lock().unwrap_or_else(PoisonError::into_inner);
        // Early returns rather than `entry`: a lookup by `&str` allocates nothing; only a tenant
        // or release new to this shard since the last flush allocates its key.
        if let Some(releases) = map.get_mut(tenant) {
            if let Some(minutes) = releases.get_mut(release) {
                if let Some((_, counters)) = minutes.iter_mut().rev().find(|(m, _)| *m == minute) {
                    counters.add(outcome);
                    return;
                }
                minutes.push((minute, one(outcome)));
                return;
            }
            releases.insert(release.to_owned(), vec![(minute, one(outcome))]);
            return;
        }
        let mut releases = HashMap::new();
        releases.insert(release.to_owned(), vec![(minute, one(outcome))]);
        map.insert(tenant.to_owned(), releases);
    }

    /// Everything recorded and not yet written, by minute (drains the shards into `pending`).
    fn take_all(&self) -> BTreeMap<MinuteKey, Counters> {
        let mut all = std::mem::take(&mut *self.pending.lock().unwrap_or_else(PoisonError::into_inner));
        for shard in self.shards.iter() {
            let map = std::mem::take(&mut *shard.0.lock().unwrap_or_else(PoisonError::into_inner));
            for (tenant, releases) in map {
                for (release, minutes) in releases {
                    for (minute_ms, counters) in minutes {
                        let key = MinuteKey { tenant: tenant.clone(), release: release.clone(), minute_ms };
                        all.entry(key).or_default().merge(&counters);
                    }
                }
            }
        }
        all
    }

    /// Puts figures a failed flush could not write back for the next one, oldest dropped past
    /// `MAX_PENDING_ROWS` or past the minute rows' retention.
    fn put_back(&self, mut rows: BTreeMap<MinuteKey, Counters>, now_ms: i64) {
        let oldest = now_ms.saturating_sub(history::ms(self.retention.minute_rows));
        rows.retain(|key, _| key.minute_ms >= oldest);
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        for (key, counters) in rows {
            pending.entry(key).or_default().merge(&counters);
        }
        if pending.len() > MAX_PENDING_ROWS {
            let mut minutes: Vec<i64> = pending.keys().map(|k| k.minute_ms).collect();
            minutes.sort_unstable();
            let cut = minutes[pending.len() - MAX_PENDING_ROWS];
            let before = pending.len();
            pending.retain(|key, _| key.minute_ms >= cut);
            tracing::warn!(
                dropped = before - pending.len(),
                "metrics history: the store has been unreachable for long; the oldest unwritten minutes were dropped"
            );
        }
    }

    /// Writes everything recorded since the last flush to the store (added to the rows there), and
    /// every ten minutes deletes history past its retention. Call it from the server's ticker once
    /// a minute (any interval works: figures are added, never replaced), and once at shutdown.
    pub async fn flush(&self, store: &Store) -> Result<FlushReport, StoreError> {
        self.flush_at(store, crate::clock::now_ms()).await
    }

    /// `flush` at a given time (the time decides only what is pruned).
    pub async fn flush_at(&self, store: &Store, now_ms: i64) -> Result<FlushReport, StoreError> {
        let _one_at_a_time = self.flushing.lock().await;
        let rows = self.take_all();
        let mut report =
            FlushReport { minutes: rows.len(), calls: rows.values().map(|c| c.calls).sum(), pruned: 0 };
        if !rows.is_empty()
            && let Err(err) = history::write(store, &self.replica, &rows).await
        {
            self.put_back(rows, now_ms);
            return Err(err);
        }
        let last = self.last_prune_ms.load(Ordering::Relaxed);
        if now_ms.saturating_sub(last) >= PRUNE_EVERY_MS {
            report.pruned = history::prune(store, &self.retention, now_ms).await?;
            self.last_prune_ms.store(now_ms, Ordering::Relaxed);
        }
        Ok(report)
    }

    /// Rows waiting for a flush (recorded, or put back after a failed one).
    pub fn unwritten(&self) -> usize {
        let pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner).len();
        let recorded: usize = self
            .shards
            .iter()
            .map(|s| {
                let map = s.0.lock().unwrap_or_else(PoisonError::into_inner);
                map.values().flat_map(|r| r.values()).map(Vec::len).sum::<usize>()
            })
            .sum();
        pending + recorded
    }
}

fn one(outcome: &CallOutcome) -> Counters {
    let mut counters = Counters::default();
    counters.add(outcome);
    counters
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

    #[test]
    fn records_add_up_by_tenant_release_and_minute_across_threads() {
        let recorder = std::sync::Arc::new(MetricsRecorder::new("r1", HistoryRetention::default()));
        let minute = 1_750_000_020_000; // a minute's start
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let recorder = recorder.clone();
                std::thread::spawn(move || {
                    for i in 0..1000 {
                        let release = if i % 4 == 0 { "v2" } else { "v1" };
                        recorder.record_at(minute + (t * 1000 + i) % 60_000, "acme", release, &outcome(1.0));
                    }
                    recorder.record_at(minute + 60_000, "acme", "v1", &outcome(1.0));
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let all = recorder.take_all();
        let get = |release: &str, minute_ms: i64| {
            all.get(&MinuteKey { tenant: "acme".into(), release: release.into(), minute_ms }).map(|c| c.calls)
        };
        assert_eq!(get("v1", minute), Some(3000));
        assert_eq!(get("v2", minute), Some(1000));
        assert_eq!(get("v1", minute + 60_000), Some(4));
        assert_eq!(all.len(), 3);
        let v1 = &all[&MinuteKey { tenant: "acme".into(), release: "v1".into(), minute_ms: minute }];
        assert_eq!((v1.injected_records, v1.injected_tokens, v1.visible_tokens), (6000, 300_000, 3_000_000));
        assert_eq!(recorder.unwritten(), 0);
    }

    #[test]
    fn put_back_keeps_what_could_not_be_written_within_bounds() {
        let recorder = MetricsRecorder::new("r1", HistoryRetention::default());
        let now = 1_750_000_000_000;
        recorder.record_at(now, "t", "v1", &outcome(1.0));
        let rows = recorder.take_all();
        recorder.put_back(rows, now);
        recorder.record_at(now, "t", "v1", &outcome(1.0));
        let rows = recorder.take_all();
        assert_eq!(rows.values().map(|c| c.calls).sum::<u64>(), 2);
        // Too old to be kept.
        let mut old = BTreeMap::new();
        old.insert(MinuteKey { tenant: "t".into(), release: "v1".into(), minute_ms: 0 }, one(&outcome(1.0)));
        recorder.put_back(old, now);
        assert_eq!(recorder.unwritten(), 0);
    }
}
