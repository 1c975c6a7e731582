//! Per-caller rate limits with governor. Callers with the same quota share one keyed limiter
//! (keyed by the caller's rate key), so there are as many limiters as distinct quotas, not callers.
//! Idle keys are pruned every few thousand checks, which bounds memory without a background task.
//!
//! `Strikes` limits failures rather than requests: a client address that fails to authenticate
//! too often is refused for a while before any credential is checked. Counting failures only
//! means that admins and callers with good credentials are never locked out by volume, even when
//! every client shares one load balancer address.

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const PRUNE_EVERY: u64 = 4096;

#[derive(Default)]
pub struct RateLimits {
    limiters: Mutex<HashMap<u32, Arc<DefaultKeyedRateLimiter<String>>>>,
    checks: AtomicU64,
}

impl RateLimits {
    /// `Ok` if `key` may make one more request under `per_minute`; otherwise the seconds to wait.
    /// A limit of 0 is no limit.
    pub fn check(&self, key: &str, per_minute: u32) -> Result<(), u64> {
        let Some(rate) = NonZeroU32::new(per_minute) else { return Ok(()) };
        let limiter = {
            let mut limiters = self.limiters.lock().unwrap_or_else(|p| p.into_inner());
            limiters
                .entry(per_minute)
                .or_insert_with(|| Arc::new(RateLimiter::keyed(Quota::per_minute(rate))))
                .clone()
        };
        if self.checks.fetch_add(1, Ordering::Relaxed) % PRUNE_EVERY == PRUNE_EVERY - 1 {
            limiter.retain_recent();
        }
        limiter.check_key(&key.to_owned()).map_err(|not_until| {
            let wait = not_until.wait_time_from(DefaultClock::default().now());
            wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
        })
    }
}

/// The most blocked keys remembered. A new block always goes in: when the table is full, the
/// blocks that ran out are dropped, and if that frees nothing, the tenth that would end soonest
/// (one O(n) pass per n/10 new blocks). A flood of addresses thus shortens the blocks nearest
/// their end instead of leaving every address after the 100,000th unlimited.
const MAX_BLOCKED: usize = 100_000;

/// Failures per key (a client address), `per_minute` of them allowed; past that the key is
/// blocked until its bucket refills.
pub struct Strikes {
    failures: RateLimits,
    per_minute: u32,
    blocked: Mutex<HashMap<String, Instant>>,
}

impl Strikes {
    pub fn new(per_minute: u32) -> Strikes {
        Strikes { failures: RateLimits::default(), per_minute, blocked: Mutex::new(HashMap::new()) }
    }

    /// `Err(seconds)` while `key` is blocked.
    pub fn check(&self, key: &str) -> Result<(), u64> {
        let mut blocked = self.blocked.lock().unwrap_or_else(|p| p.into_inner());
        match blocked.get(key) {
            Some(until) if *until > Instant::now() => {
                let wait = until.saturating_duration_since(Instant::now());
                Err(wait.as_secs() + u64::from(wait.subsec_nanos() > 0))
            }
            Some(_) => {
                blocked.remove(key);
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// Counts one failure for `key`; `Err(seconds)` when that one went over the limit.
    pub fn fail(&self, key: &str) -> Result<(), u64> {
        let Err(wait) = self.failures.check(key, self.per_minute) else { return Ok(()) };
        let wait = wait.max(1);
        let now = Instant::now();
        let mut blocked = self.blocked.lock().unwrap_or_else(|p| p.into_inner());
        if blocked.len() >= MAX_BLOCKED && !blocked.contains_key(key) {
            blocked.retain(|_, until| *until > now);
            if blocked.len() >= MAX_BLOCKED {
                evict_soonest(&mut blocked, MAX_BLOCKED / 10);
            }
        }
        blocked.insert(key.to_owned(), now + Duration::from_secs(wait));
        Err(wait)
    }

    /// How many keys are blocked or were until lately.
    pub fn blocked_len(&self) -> usize {
        self.blocked.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// Drops at least `count` of the blocks that end soonest.
fn evict_soonest(blocked: &mut HashMap<String, Instant>, count: usize) {
    let mut ends: Vec<Instant> = blocked.values().copied().collect();
    if count >= ends.len() {
        blocked.clear();
        return;
    }
    let (_, threshold, _) = ends.select_nth_unstable(count.max(1) - 1);
    let threshold = *threshold;
    blocked.retain(|_, until| *until > threshold);
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_over_its_limit_waits_and_others_are_unaffected() {
        let limits = RateLimits::default();
        for _ in 0..3 {
            assert_eq!(limits.check("a", 3), Ok(()));
        }
        let wait = limits.check("a", 3).unwrap_err();
        assert!((1..=20).contains(&wait), "{wait}");
        assert_eq!(limits.check("b", 3), Ok(()));
        assert_eq!(limits.check("c", 0), Ok(()), "0 is no limit");
    }

    #[test]
    fn only_failures_count_and_past_the_limit_the_key_is_blocked() {
        let strikes = Strikes::new(2);
        for _ in 0..100 {
            assert_eq!(strikes.check("10.0.0.1"), Ok(()), "checks alone never block");
        }
        assert_eq!(strikes.fail("10.0.0.1"), Ok(()));
        assert_eq!(strikes.fail("10.0.0.1"), Ok(()));
        assert!(strikes.fail("10.0.0.1").is_err());
        assert!(strikes.check("10.0.0.1").is_err());
        assert_eq!(strikes.check("10.0.0.2"), Ok(()));
    }

    /// Once the table of blocked keys is full, a new key past its limit is blocked all the same
    /// (older blocks make room), and the table stays bounded.
    #[test]
    fn a_full_table_still_blocks_new_keys() {
        let strikes = Strikes::new(1);
        for i in 0..MAX_BLOCKED {
            let key = format!("2001:db8:{:x}:{:x}::/64", i >> 16, i & 0xffff);
            assert_eq!(strikes.fail(&key), Ok(()));
            assert!(strikes.fail(&key).is_err());
        }
        assert_eq!(strikes.blocked_len(), MAX_BLOCKED);
        assert_eq!(strikes.fail("198.51.100.7"), Ok(()));
        assert!(strikes.fail("198.51.100.7").is_err());
        assert!(strikes.check("198.51.100.7").is_err(), "a new key past its limit went unblocked");
        assert!(strikes.blocked_len() <= MAX_BLOCKED);
    }

    #[test]
    fn eviction_drops_the_blocks_that_end_soonest() {
        let now = Instant::now();
        let mut blocked: HashMap<String, Instant> =
            (0..10u64).map(|i| (format!("k{i}"), now + Duration::from_secs(i + 1))).collect();
        evict_soonest(&mut blocked, 3);
        let mut left: Vec<&str> = blocked.keys().map(String::as_str).collect();
        left.sort_unstable();
        assert_eq!(left, ["k3", "k4", "k5", "k6", "k7", "k8", "k9"]);
        evict_soonest(&mut blocked, 7);
        assert!(blocked.is_empty());
    }
}
