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

use super::counters::{CallOutcome, Counters, MinuteKey};
use super::history::{self, HistoryRetention};
use crate::store::{Store, StoreError};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

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
    use crate::console::counters::MemoryOutcome;
    use std::time::Duration;

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
