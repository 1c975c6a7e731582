//! Per-caller rate limits with governor. Callers with the same quota share one keyed limiter
//! (keyed by the caller's rate key), so there are as many limiters as distinct quotas, not callers.
//! Idle keys are pruned every few thousand checks, which bounds memory without a background task.

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

const PRUNE_EVERY: u64 = 4096;

#[derive(Default)]
pub struct RateLimits {
    limiters: Mutex<HashMap<u32, Arc<DefaultKeyedRateLimiter<String>>>>,
    checks: AtomicU64,
}

impl RateLimits {
    /// `Ok` if `key` may make one more request under `per_minute`; otherwise the seconds to wait.
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
    }
}
