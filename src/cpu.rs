//! CPU-bound work on the request path: off the async workers, and under a budget.
//!
//! Reading a client's body (checking its JSON, finding the person's words, placing the memory
//! block) is linear in its size but synchronous: on a 32 MiB body it takes tens of milliseconds,
//! and on an async worker those milliseconds stall every other connection the worker serves,
//! `/healthz` included. Small inputs run where they are (a hop to another thread costs more than
//! the work); large ones run on tokio's blocking pool, at most `slots()` at a time, so however
//! many large bodies arrive together the async workers keep a core for everyone else. The slot
//! travels with the work: a request that gives up waiting (recall's time budget) does not free
//! it before the work ends.

use std::sync::{Arc, OnceLock};
use tokio::sync::Semaphore;

/// Inputs up to this many bytes are worked on in place.
pub const INLINE_BYTES: usize = 64 * 1024;

/// Large inputs worked on at once: half the cores, at least one.
fn slots() -> Arc<Semaphore> {
    static SLOTS: OnceLock<Arc<Semaphore>> = OnceLock::new();
    SLOTS
        .get_or_init(|| {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            Arc::new(Semaphore::new((cores / 2).max(1)))
        })
        .clone()
}

/// Runs `work` over an input of `bytes` bytes: in place when it is small, otherwise on the
/// blocking pool once a slot is free. A panic in `work` resumes in the caller, as it would have
/// in place.
pub async fn run<T: Send + 'static>(bytes: usize, work: impl FnOnce() -> T + Send + 'static) -> T {
    if bytes <= INLINE_BYTES {
        return work();
    }
    // The semaphore is never closed, so acquiring fails never; were it closed, work runs unslotted.
    let slot = slots().acquire_owned().await.ok();
    let job = tokio::task::spawn_blocking(move || {
        let _slot = slot;
        work()
    });
    match job.await {
        Ok(value) => value,
        Err(err) => std::panic::resume_unwind(err.into_panic()),
    }
}

/// Fewer items than this per thread are mapped in place: starting a thread costs more than a
/// few dozen small items do.
const IN_PLACE_BELOW: usize = 32;

/// `items` mapped by `work` on every core (at most 16 threads), in the order given. Blocking:
/// call it from the blocking pool (`run`, `spawn_blocking`) or at startup. A panic in `work`
/// resumes in the caller.
pub fn map_on_cores<T: Send, U: Send>(items: Vec<T>, work: impl Fn(T) -> U + Sync) -> Vec<U> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 16);
    if threads == 1 || items.len() < 2 * IN_PLACE_BELOW {
        return items.into_iter().map(work).collect();
    }
    let chunk = items.len().div_ceil(threads);
    let mut parts: Vec<Vec<T>> = Vec::with_capacity(threads);
    let mut items = items.into_iter();
    loop {
        let part: Vec<T> = items.by_ref().take(chunk).collect();
        if part.is_empty() {
            break;
        }
        parts.push(part);
    }
    let work = &work;
    std::thread::scope(|scope| {
        let handles: Vec<_> = parts
            .into_iter()
            .map(|part| scope.spawn(move || part.into_iter().map(work).collect::<Vec<U>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn large_work_runs_off_the_calling_thread_and_small_work_in_place() {
        let here = std::thread::current().id();
        let small = run(10, move || std::thread::current().id()).await;
        assert_eq!(small, here);
        let large = run(INLINE_BYTES + 1, move || std::thread::current().id()).await;
        assert_ne!(large, here);
    }

    #[test]
    fn work_on_every_core_keeps_the_order_given() {
        let items: Vec<u32> = (0..10_001).collect();
        let doubled = map_on_cores(items, |x| x * 2);
        assert_eq!(doubled, (0..10_001).map(|x| x * 2).collect::<Vec<_>>());
        assert!(map_on_cores(Vec::<u32>::new(), |x| x).is_empty());
    }

    #[tokio::test]
    async fn a_panic_in_the_work_reaches_the_caller() {
        let tasks = tokio_util::task::TaskTracker::new();
        let outcome = tasks.spawn(run(INLINE_BYTES + 1, || -> u8 { panic!("boom") })).await;
        assert!(outcome.is_err_and(|err| err.is_panic()));
    }
}
