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

/// The most blocked addresses remembered; beyond it, expired entries are dropped first and new
/// blocks wait for room (the failure limiter itself still counts them).
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
        let mut blocked = self.blocked.lock().unwrap_or_else(|p| p.into_inner());
        if blocked.len() >= MAX_BLOCKED {
            let now = Instant::now();
            blocked.retain(|_, until| *until > now);
        }
        if blocked.len() < MAX_BLOCKED {
            blocked.insert(key.to_owned(), Instant::now() + Duration::from_secs(wait.max(1)));
        }
        Err(wait.max(1))
    }
}

#[cfg(test)]
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
}
