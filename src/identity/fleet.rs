//! Rate limits for the whole fleet: with Redis, a caller's limit holds across every replica, not
//! per replica (three replicas would otherwise let a key through three times its rate).
//!
//! Each check is one pipelined round trip: a sliding window made of two fixed one-minute windows
//! in Redis (`INCR` the current one, read the previous one; the count is the current window plus
//! the previous one weighted by how much of it still falls in the last minute), within ~2% of a
//! true sliding window. The replica's own governor limiter stays in front as the fast path: a
//! caller over its limit on this replica alone is refused without asking Redis.
//!
//! When Redis is away or slower than `REDIS_TIMEOUT`, each replica limits on its own to its share
//! of the limit (the limit divided by the replicas seen alive in the last `ALIVE_FOR`, counted
//! through heartbeats in Redis), and counts the fallback (`memgate_rate_limit_checks_total{mode}`).
//! It goes back to fleet counting by itself when Redis answers again.

use super::rate_limit::RateLimits;
use arc_swap::ArcSwapOption;
use redis::aio::ConnectionManager;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const WINDOW_SECS: u64 = 60;
/// The longest a check waits for Redis before limiting locally.
const REDIS_TIMEOUT: Duration = Duration::from_millis(25);
/// A replica that sent no heartbeat for this long is no longer counted.
const ALIVE_FOR: Duration = Duration::from_secs(15);
const HEARTBEAT_EVERY: Duration = Duration::from_secs(5);

/// Counts, for metrics: checks answered by Redis, and by the local share while Redis was away.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FleetStats {
    pub fleet: u64,
    pub local: u64,
}

pub struct FleetLimits {
    connection: Arc<ArcSwapOption<ConnectionManager>>,
    prefix: String,
    replica: String,
    /// Replicas seen alive at the last heartbeat (at least 1).
    replicas: AtomicUsize,
    /// The local share's limiter while Redis is away.
    fallback: RateLimits,
    fleet_checks: AtomicU64,
    local_checks: AtomicU64,
}

impl FleetLimits {
    /// Over the replica's Redis connection (which may not be there yet); starts the heartbeat.
    pub fn start(connection: Arc<ArcSwapOption<ConnectionManager>>, key_prefix: &str) -> Arc<FleetLimits> {
        let limits = Arc::new(FleetLimits {
            connection,
            prefix: key_prefix.to_owned(),
            replica: uuid::Uuid::new_v4().simple().to_string(),
            replicas: AtomicUsize::new(1),
            fallback: RateLimits::default(),
            fleet_checks: AtomicU64::new(0),
            local_checks: AtomicU64::new(0),
        });
        crate::tasks::detached("fleet heartbeat", heartbeat(Arc::downgrade(&limits)));
        limits
    }

    pub fn stats(&self) -> FleetStats {
        FleetStats {
            fleet: self.fleet_checks.load(Ordering::Relaxed),
            local: self.local_checks.load(Ordering::Relaxed),
        }
    }

    /// `Ok` if `key` may make one more request under `per_minute` across the fleet; otherwise the
    /// seconds to wait.
    pub async fn check(&self, key: &str, per_minute: u32) -> Result<(), u64> {
        if per_minute == 0 {
            return Ok(());
        }
        if let Some(connection) = self.connection.load_full() {
            let mut connection = (*connection).clone();
            match tokio::time::timeout(REDIS_TIMEOUT, self.count(&mut connection, key, per_minute)).await {
                Ok(Ok(answer)) => {
                    self.fleet_checks.fetch_add(1, Ordering::Relaxed);
                    return answer;
                }
                Ok(Err(err)) => tracing::debug!(error = %err, "rate limit: redis failed; limiting locally"),
                Err(_) => tracing::debug!("rate limit: redis too slow; limiting locally"),
            }
        }
        self.local_checks.fetch_add(1, Ordering::Relaxed);
        let share = (per_minute as usize).div_ceil(self.replicas.load(Ordering::Relaxed).max(1));
        self.fallback.check(key, u32::try_from(share).unwrap_or(per_minute).max(1))
    }

    /// The sliding-window count in Redis, this request included; a refused request is taken
    /// back out, so that refusals do not keep a caller refused.
    async fn count(
        &self,
        connection: &mut ConnectionManager,
        key: &str,
        per_minute: u32,
    ) -> redis::RedisResult<Result<(), u64>> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let window = now.as_secs() / WINDOW_SECS;
        let into =
            (now.as_millis() % (u128::from(WINDOW_SECS) * 1000)) as f64 / (WINDOW_SECS as f64 * 1000.0);
        // Keys carry a digest of the caller's rate key, never the key itself.
        let digest: String =
            Sha256::digest(key.as_bytes())[..12].iter().map(|b| format!("{b:02x}")).collect();
        let current = format!("{}:rl:{digest}:{window}", self.prefix);
        let previous = format!("{}:rl:{digest}:{}", self.prefix, window.saturating_sub(1));
        let (count, earlier): (u64, Option<u64>) = redis::pipe()
            .incr(&current, 1)
            .expire(&current, (2 * WINDOW_SECS) as i64)
            .ignore()
            .get(&previous)
            .query_async(connection)
            .await?;
        let earlier = earlier.unwrap_or(0) as f64;
        let weighted = earlier * (1.0 - into) + count as f64;
        if weighted <= f64::from(per_minute) {
            return Ok(Ok(()));
        }
        let _: redis::RedisResult<i64> = redis::cmd("DECR").arg(&current).query_async(connection).await;
        // Until enough of the previous window has slid out, or this one ends.
        let over = weighted - f64::from(per_minute);
        let wait = if earlier > 0.0 {
            over / earlier * WINDOW_SECS as f64
        } else {
            (1.0 - into) * WINDOW_SECS as f64
        };
        Ok(Err(wait.clamp(1.0, WINDOW_SECS as f64).ceil() as u64))
    }
}

/// Every `HEARTBEAT_EVERY`, says this replica is alive and counts the others (a sorted set of
/// replica ids by last heartbeat). Ends when the limits are dropped.
async fn heartbeat(limits: std::sync::Weak<FleetLimits>) {
    loop {
        let Some(strong) = limits.upgrade() else { return };
        if let Some(connection) = strong.connection.load_full() {
            let mut connection = (*connection).clone();
            let key = format!("{}:replicas", strong.prefix);
            let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64();
            let mut pipe = redis::pipe();
            pipe.zadd(&key, &strong.replica, now)
                .ignore()
                .zrembyscore(&key, "-inf", now - ALIVE_FOR.as_secs_f64())
                .ignore()
                .zcard(&key);
            let beat = pipe.query_async::<(usize,)>(&mut connection);
            if let Ok(Ok((alive,))) = tokio::time::timeout(Duration::from_secs(1), beat).await {
                strong.replicas.store(alive.max(1), Ordering::Relaxed);
            }
        }
        drop(strong);
        tokio::time::sleep(HEARTBEAT_EVERY).await;
    }
}
