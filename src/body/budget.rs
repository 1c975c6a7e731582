//! How much of the machine Messages requests may hold at once: a count of requests being read,
//! recalled and sent, and the bytes of their bodies. A body is held twice at worst (the client's
//! bytes and the copy with memory injected), so a request reserves twice its length.
//!
//! Lifecycle of a permit: reserved when the body starts to arrive (its declared length at once,
//! or chunk by chunk when undeclared), held while memory is recalled and the request is sent,
//! released when the upstream's answer starts (the body has left by then; a streamed answer is
//! relayed chunk by chunk and holds nothing). A request that cannot get its share within
//! `limits.inflight_wait_ms` is answered 529 `overloaded_error` with `retry-after`, which the
//! SDKs retry: concurrent large bodies queue, then shed, and never exhaust memory.

use crate::error::{ApiError, ErrorKind};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Bytes are counted in KiB so that a budget of gigabytes fits the semaphore's `u32` requests.
const UNIT: u64 = 1024;
/// The body and its injected copy.
const COPIES: u64 = 2;

pub struct BodyBudget {
    bytes: Arc<Semaphore>,
    requests: Arc<Semaphore>,
    total_units: u32,
    max_requests: usize,
    wait: Duration,
}

/// A request's share of the budget; released when dropped.
pub struct BudgetPermit {
    #[expect(dead_code, reason = "held, never read: dropping it frees the request's slot")]
    request: Option<OwnedSemaphorePermit>,
    bytes: Option<OwnedSemaphorePermit>,
    units: u32,
}

impl BudgetPermit {
    /// A permit that holds nothing (a caller with no budget to charge).
    pub fn none() -> BudgetPermit {
        BudgetPermit { request: None, bytes: None, units: 0 }
    }
}

impl BodyBudget {
    pub fn new(max_bytes: u64, max_requests: usize, wait: Duration) -> BodyBudget {
        let total_units = u32::try_from(max_bytes.div_ceil(UNIT)).unwrap_or(u32::MAX).max(1);
        let max_requests = max_requests.max(1);
        BodyBudget {
            bytes: Arc::new(Semaphore::new(total_units as usize)),
            requests: Arc::new(Semaphore::new(max_requests)),
            total_units,
            max_requests,
            wait,
        }
    }

    /// A request's slot and the bytes of a body of `declared` length (0 when undeclared).
    pub async fn reserve(&self, declared: u64) -> Result<BudgetPermit, ApiError> {
        let request = tokio::time::timeout(self.wait, self.requests.clone().acquire_owned())
            .await
            .map_err(|_| self.overloaded(format!("{} requests", self.max_requests)))?
            .map_err(|_| self.overloaded("requests".into()))?;
        let mut permit = BudgetPermit { request: Some(request), bytes: None, units: 0 };
        self.grow(&mut permit, declared).await?;
        Ok(permit)
    }

    /// Makes `permit` cover a body of `len` bytes.
    pub async fn grow(&self, permit: &mut BudgetPermit, len: u64) -> Result<(), ApiError> {
        // Never more than the whole budget: one body the size of the budget still goes, alone.
        let want = u32::try_from((len * COPIES).div_ceil(UNIT)).unwrap_or(u32::MAX).min(self.total_units);
        if want <= permit.units {
            return Ok(());
        }
        let more =
            tokio::time::timeout(self.wait, self.bytes.clone().acquire_many_owned(want - permit.units))
                .await
                .map_err(|_| self.overloaded(format!("{} MiB of request bodies", self.total_units / 1024)))?
                .map_err(|_| self.overloaded("bytes".into()))?;
        match &mut permit.bytes {
            Some(held) => held.merge(more),
            None => permit.bytes = Some(more),
        }
        permit.units = want;
        Ok(())
    }

    fn overloaded(&self, what: String) -> ApiError {
        ApiError::new(
            ErrorKind::Overloaded,
            format!(
                "memgate is holding its limit of {what} in flight (limits.max_inflight_*); retry shortly"
            ),
        )
        .with_retry_after(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn requests_queue_for_bytes_and_shed_when_the_wait_ends() {
        let budget = BodyBudget::new(4 * 1024 * 1024, 10, Duration::from_millis(50));
        let first = budget.reserve(1024 * 1024).await.unwrap(); // 2 MiB with its copy
        let second = budget.reserve(1024 * 1024).await.unwrap();
        let err = budget.reserve(1024 * 1024).await.err().unwrap();
        assert_eq!(err.kind(), ErrorKind::Overloaded);
        drop(first);
        let third = budget.reserve(1024 * 1024).await.unwrap();
        drop((second, third));
    }

    #[tokio::test]
    async fn a_permit_grows_with_an_undeclared_body_and_never_past_the_whole_budget() {
        let budget = BodyBudget::new(1024 * 1024, 10, Duration::from_millis(50));
        let mut permit = budget.reserve(0).await.unwrap();
        budget.grow(&mut permit, 100 * 1024).await.unwrap();
        assert_eq!(permit.units, 200);
        budget.grow(&mut permit, 50 * 1024 * 1024).await.unwrap();
        assert_eq!(permit.units, 1024);
        assert!(budget.reserve(1).await.is_err(), "the budget is all held");
        drop(permit);
        budget.reserve(1).await.unwrap();
    }

    #[tokio::test]
    async fn the_request_count_is_bounded_too() {
        let budget = BodyBudget::new(1 << 30, 2, Duration::from_millis(50));
        let held = (budget.reserve(10).await.unwrap(), budget.reserve(10).await.unwrap());
        assert!(budget.reserve(10).await.is_err());
        drop(held);
    }
}
