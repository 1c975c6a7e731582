//! How much of the machine Messages requests may hold at once: a count of requests being read,
//! recalled and sent, and the bytes of their bodies, in three pools: all requests
//! (`limits.max_inflight_body_bytes`), one client address (`…_per_address`) and one caller
//! (`…_per_caller`: a gateway key, a JWT subject, a passthrough key). A body is held twice at
//! worst (the client's bytes and the copy with memory injected), so every byte counts twice.
//!
//! Bytes are reserved as they arrive, never from a declared `content-length`: a connection that
//! declares 32 MiB and sends nothing holds nothing. (Reserving the declared length once let four
//! such connections hold the whole default budget for the read deadline, and every other caller
//! waited 5 s for a 529.) The request's slot among `limits.max_inflight_requests` is taken with
//! its first bytes too.
//!
//! Lifecycle of a permit: made when the body starts to be read, grown chunk by chunk, held while
//! memory is recalled and the request is sent, released when the upstream's answer starts (the
//! body has left by then; a streamed answer is relayed chunk by chunk and holds nothing). A turn
//! with memgate's tools keeps it (`Hold`) while its rounds go on: each round's body is the last
//! one and more, built and kept by memgate, so each is covered as it is built, and the permit is
//! freed once the last round is known. A chunk
//! that does not fit waits, older requests first, up to `limits.inflight_wait_ms`; then the
//! request is answered 529 `overloaded_error` with `retry-after`, which the SDKs retry.
//!
//! Waiting while holding part of a body can deadlock: twenty 32 MB bodies that each hold a
//! twentieth of a pool all wait for one another, and would all time out together. So when every
//! request holding bytes of a full pool is itself waiting, the youngest of them is shed at once
//! (its bytes are counted free at once; it drops them as it wakes), and the oldest finish.

use crate::error::{ApiError, ErrorKind};
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};
use tokio::time::Instant;

/// The body and its injected copy.
const COPIES: u64 = 2;
const MIB: u64 = 1024 * 1024;

/// The bytes each pool may hold, every body byte counting twice.
#[derive(Debug, Clone, Copy)]
pub struct Caps {
    pub total: u64,
    pub per_address: u64,
    pub per_caller: u64,
}

/// Whose bytes a request holds: the client's address and the caller (its rate-limit key), when
/// known. A request with neither is held against the whole budget alone.
#[derive(Debug, Clone, Default)]
pub struct Holder {
    address: Option<IpAddr>,
    caller: Option<Arc<str>>,
}

impl Holder {
    pub fn new(address: Option<IpAddr>, caller: &str) -> Holder {
        Holder { address, caller: (!caller.is_empty()).then(|| Arc::from(caller)) }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Pool {
    All,
    Address(IpAddr),
    Caller(Arc<str>),
}

/// Cheap to clone: the clones draw on one budget.
#[derive(Clone)]
pub struct BodyBudget {
    shared: Arc<Shared>,
    requests: Arc<Semaphore>,
    max_requests: usize,
    wait: Duration,
}

struct Shared {
    caps: Caps,
    ledger: Mutex<Ledger>,
    next_seq: AtomicU64,
}

#[derive(Default)]
struct Ledger {
    held: HashMap<Pool, u64>,
    /// Requests holding or waiting for bytes, by age (oldest first).
    entries: BTreeMap<u64, Entry>,
}

struct Entry {
    pools: Vec<Pool>,
    held: u64,
    waiting: Option<Waiting>,
}

struct Waiting {
    more: u64,
    /// The pool the request waits on (full, or with an older request waiting on it first).
    blocked: Pool,
    wake: oneshot::Sender<Outcome>,
}

enum Outcome {
    Granted,
    Shed(Pool),
}

/// A request's share of the budget; released when dropped.
pub struct BudgetPermit {
    shared: Option<Arc<Shared>>,
    seq: u64,
    pools: Vec<Pool>,
    held: u64,
    request: Option<OwnedSemaphorePermit>,
}

impl BudgetPermit {
    /// A permit that holds nothing (a caller with no budget to charge).
    pub fn none() -> BudgetPermit {
        BudgetPermit { shared: None, seq: 0, pools: Vec::new(), held: 0, request: None }
    }
}

impl Drop for BudgetPermit {
    fn drop(&mut self) {
        if let Some(shared) = &self.shared {
            let mut ledger = shared.lock();
            ledger.release(self.seq);
            ledger.settle(&shared.caps);
        }
    }
}

/// A request's permit with the budget it draws on, for work past the edge that builds bodies of
/// its own: the tool rounds (`turn::rounds`) build each round's body from the one before and
/// more, and hold it until the next is built, so each is covered here as it is built, and the
/// hold is freed once the last round is known.
pub struct Hold {
    budget: Option<BodyBudget>,
    permit: BudgetPermit,
}

impl Hold {
    pub fn new(budget: &BodyBudget, permit: BudgetPermit) -> Hold {
        Hold { budget: Some(budget.clone()), permit }
    }

    /// Makes the hold cover a body of `len` bytes (counted twice, as every body), waiting as a
    /// body's chunk waits (`limits.inflight_wait_ms`), then the 529 the edge would answer.
    pub async fn cover(&mut self, len: u64) -> Result<(), ApiError> {
        let Some(budget) = &self.budget else { return Ok(()) };
        budget.grow(&mut self.permit, len, Instant::now() + budget.wait()).await
    }

    /// Frees what the hold covers (and its request's slot).
    pub fn release(&mut self) {
        self.budget = None;
        self.permit = BudgetPermit::none();
    }
}

impl BodyBudget {
    pub fn new(caps: Caps, max_requests: usize, wait: Duration) -> BodyBudget {
        let caps = Caps {
            total: caps.total.max(1),
            per_address: caps.per_address.clamp(1, caps.total.max(1)),
            per_caller: caps.per_caller.clamp(1, caps.total.max(1)),
        };
        let max_requests = max_requests.max(1);
        BodyBudget {
            shared: Arc::new(Shared { caps, ledger: Mutex::default(), next_seq: AtomicU64::new(0) }),
            requests: Arc::new(Semaphore::new(max_requests)),
            max_requests,
            wait,
        }
    }

    /// How long a request waits for its share before a 529.
    pub fn wait(&self) -> Duration {
        self.wait
    }

    /// A permit for a request that starts reading its body now; it holds nothing yet.
    pub fn permit(&self, holder: Holder) -> BudgetPermit {
        let mut pools = vec![Pool::All];
        pools.extend(holder.address.map(Pool::Address));
        pools.extend(holder.caller.map(Pool::Caller));
        BudgetPermit {
            shared: Some(self.shared.clone()),
            seq: self.shared.next_seq.fetch_add(1, Ordering::Relaxed),
            pools,
            held: 0,
            request: None,
        }
    }

    /// Makes `permit` cover a body of `len` bytes (and its request's slot), waiting until `until`
    /// at most.
    pub async fn grow(&self, permit: &mut BudgetPermit, len: u64, until: Instant) -> Result<(), ApiError> {
        let Some(shared) = permit.shared.clone() else { return Ok(()) };
        if permit.request.is_none() {
            let slot = tokio::time::timeout_at(until, self.requests.clone().acquire_owned()).await;
            match slot {
                Ok(Ok(slot)) => permit.request = Some(slot),
                _ => return Err(self.overloaded_requests()),
            }
        }
        // Never more than a whole pool: one body the size of a pool still goes, alone.
        let want = (len.saturating_mul(COPIES)).min(shared.caps.smallest(&permit.pools));
        if want <= permit.held {
            return Ok(());
        }
        let more = want - permit.held;
        let mut woken = {
            let mut ledger = shared.lock();
            let entry = ledger.entries.entry(permit.seq).or_insert_with(|| Entry {
                pools: permit.pools.clone(),
                held: 0,
                waiting: None,
            });
            entry.waiting = None;
            match ledger.blocked_pool(permit.seq, &permit.pools, more, &shared.caps) {
                None => {
                    ledger.take(permit.seq, more);
                    permit.held = want;
                    return Ok(());
                }
                Some(blocked) => {
                    let (wake, woken) = oneshot::channel();
                    if let Some(entry) = ledger.entries.get_mut(&permit.seq) {
                        entry.waiting = Some(Waiting { more, blocked, wake });
                    }
                    ledger.settle(&shared.caps);
                    woken
                }
            }
        };
        let outcome = match tokio::time::timeout_at(until, &mut woken).await {
            Ok(outcome) => outcome.ok(),
            Err(_) => {
                let mut ledger = shared.lock();
                // A grant may have come as the wait ended: then it stands.
                let gave_up = ledger.entries.get_mut(&permit.seq).and_then(|entry| entry.waiting.take());
                match gave_up {
                    Some(waiting) => {
                        ledger.settle(&shared.caps);
                        return Err(self.overloaded(&waiting.blocked));
                    }
                    None => woken.try_recv().ok(),
                }
            }
        };
        match outcome {
            Some(Outcome::Granted) => {
                permit.held = want;
                Ok(())
            }
            Some(Outcome::Shed(pool)) => Err(self.overloaded(&pool)),
            None => Err(self.overloaded(&Pool::All)),
        }
    }

    /// Bytes held now (every body byte counting twice), and requests waiting for bytes.
    pub fn usage(&self) -> (u64, usize) {
        let ledger = self.shared.lock();
        let waiting = ledger.entries.values().filter(|e| e.waiting.is_some()).count();
        (ledger.held_in(&Pool::All), waiting)
    }

    fn overloaded(&self, pool: &Pool) -> ApiError {
        let caps = &self.shared.caps;
        let what = match pool {
            Pool::All => format!(
                "memgate is holding its limit of {} MiB of request bodies in flight (limits.max_inflight_body_bytes)",
                caps.total / MIB
            ),
            Pool::Address(_) => format!(
                "this client address has {} MiB of request bodies in flight, its limit (limits.max_inflight_body_bytes_per_address)",
                caps.per_address / MIB
            ),
            Pool::Caller(_) => format!(
                "this caller has {} MiB of request bodies in flight, its limit (limits.max_inflight_body_bytes_per_caller)",
                caps.per_caller / MIB
            ),
        };
        ApiError::new(ErrorKind::Overloaded, format!("{what}; retry shortly")).with_retry_after(1)
    }

    fn overloaded_requests(&self) -> ApiError {
        ApiError::new(
            ErrorKind::Overloaded,
            format!(
                "memgate is holding its limit of {} requests in flight (limits.max_inflight_requests); retry shortly",
                self.max_requests
            ),
        )
        .with_retry_after(1)
    }
}

impl Caps {
    fn of(&self, pool: &Pool) -> u64 {
        match pool {
            Pool::All => self.total,
            Pool::Address(_) => self.per_address,
            Pool::Caller(_) => self.per_caller,
        }
    }

    fn smallest(&self, pools: &[Pool]) -> u64 {
        pools.iter().map(|pool| self.of(pool)).min().unwrap_or(self.total)
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Ledger {
    fn held_in(&self, pool: &Pool) -> u64 {
        self.held.get(pool).copied().unwrap_or(0)
    }

    /// The pool that keeps request `seq` from taking `more` bytes now: one without room, or one
    /// an older request is already waiting on (older requests go first).
    fn blocked_pool(&self, seq: u64, pools: &[Pool], more: u64, caps: &Caps) -> Option<Pool> {
        pools
            .iter()
            .find(|pool| {
                self.held_in(pool) + more > caps.of(pool)
                    || self
                        .entries
                        .range(..seq)
                        .any(|(_, e)| e.waiting.as_ref().is_some_and(|w| &w.blocked == *pool))
            })
            .cloned()
    }

    fn take(&mut self, seq: u64, more: u64) {
        let Some(entry) = self.entries.get_mut(&seq) else { return };
        entry.held += more;
        for pool in &entry.pools {
            *self.held.entry(pool.clone()).or_default() += more;
        }
    }

    /// Frees what request `seq` holds and forgets it.
    fn release(&mut self, seq: u64) -> Option<Waiting> {
        let entry = self.entries.remove(&seq)?;
        for pool in &entry.pools {
            if let Some(held) = self.held.get_mut(pool) {
                *held = held.saturating_sub(entry.held);
                if *held == 0 {
                    self.held.remove(pool);
                }
            }
        }
        entry.waiting
    }

    /// Grants what now fits, oldest first, and sheds the youngest of a deadlocked pool until
    /// none is.
    fn settle(&mut self, caps: &Caps) {
        loop {
            let waiting: Vec<u64> =
                self.entries.iter().filter(|(_, e)| e.waiting.is_some()).map(|(seq, _)| *seq).collect();
            for seq in waiting {
                let Some(entry) = self.entries.get(&seq) else { continue };
                let Some(more) = entry.waiting.as_ref().map(|w| w.more) else { continue };
                let pools = entry.pools.clone();
                match self.blocked_pool(seq, &pools, more, caps) {
                    None => {
                        self.take(seq, more);
                        let granted = self.entries.get_mut(&seq).and_then(|e| e.waiting.take());
                        if let Some(waiting) = granted {
                            let _ = waiting.wake.send(Outcome::Granted);
                        }
                    }
                    Some(pool) => {
                        if let Some(waiting) = self.entries.get_mut(&seq).and_then(|e| e.waiting.as_mut()) {
                            waiting.blocked = pool;
                        }
                    }
                }
            }
            let Some((victim, pool)) = self.deadlocked() else { return };
            if let Some(waiting) = self.release(victim) {
                let _ = waiting.wake.send(Outcome::Shed(pool));
            }
        }
    }

    /// A pool someone waits on whose bytes are all held by waiting requests: nothing it holds
    /// will be freed unless one of them gives up. Returns the youngest of them.
    fn deadlocked(&self) -> Option<(u64, Pool)> {
        let mut waited: Vec<&Pool> = Vec::new();
        for entry in self.entries.values() {
            if let Some(w) = &entry.waiting
                && !waited.contains(&&w.blocked)
            {
                waited.push(&w.blocked);
            }
        }
        waited.into_iter().find_map(|pool| {
            let holders = || self.entries.iter().filter(|(_, e)| e.held > 0 && e.pools.contains(pool));
            let held_by_waiting: u64 =
                holders().filter(|(_, e)| e.waiting.is_some()).map(|(_, e)| e.held).sum();
            if held_by_waiting == 0 || held_by_waiting < self.held_in(pool) {
                return None;
            }
            holders().rev().find(|(_, e)| e.waiting.is_some()).map(|(seq, _)| (*seq, pool.clone()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: u64 = 1024;

    fn budget(total: u64, per_address: u64, per_caller: u64, wait_ms: u64) -> BodyBudget {
        BodyBudget::new(Caps { total, per_address, per_caller }, 100, Duration::from_millis(wait_ms))
    }

    fn soon(budget: &BodyBudget) -> Instant {
        Instant::now() + budget.wait()
    }

    fn from(address: [u8; 4], caller: &str) -> Holder {
        Holder::new(Some(IpAddr::from(address)), caller)
    }

    #[tokio::test]
    async fn a_permit_holds_only_the_bytes_that_arrived() {
        let budget = budget(4 * MIB, 4 * MIB, 4 * MIB, 50);
        // Four requests that started reading and got nothing yet hold nothing, nor a slot.
        let idle: Vec<BudgetPermit> = (0..4).map(|_| budget.permit(Holder::default())).collect();
        let mut full = budget.permit(Holder::default());
        budget.grow(&mut full, 2 * MIB, soon(&budget)).await.unwrap();
        assert_eq!(budget.usage(), (4 * MIB, 0));
        drop(full);
        assert_eq!(budget.usage(), (0, 0));
        drop(idle);
    }

    #[tokio::test]
    async fn a_chunk_that_does_not_fit_waits_then_sheds_with_retry_after() {
        let budget = budget(4 * MIB, 4 * MIB, 4 * MIB, 50);
        let mut first = budget.permit(Holder::default());
        budget.grow(&mut first, 2 * MIB, soon(&budget)).await.unwrap();
        let mut second = budget.permit(Holder::default());
        let err = budget.grow(&mut second, KIB, soon(&budget)).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Overloaded);
        assert!(err.message().contains("limits.max_inflight_body_bytes"), "{}", err.message());
        // Room made while it waits is taken at once.
        let mut third = budget.permit(Holder::default());
        let (grown, ()) =
            tokio::join!(budget.grow(&mut third, KIB, Instant::now() + Duration::from_secs(10)), async {
                tokio::task::yield_now().await;
                drop(first);
            });
        grown.unwrap();
    }

    #[tokio::test]
    async fn one_address_or_one_caller_cannot_hold_the_whole_budget() {
        let budget = budget(8 * MIB, 2 * MIB, 4 * MIB, 50);
        let mut a = budget.permit(from([192, 0, 2, 1], "key:a"));
        budget.grow(&mut a, MIB, soon(&budget)).await.unwrap();
        let mut a_again = budget.permit(from([192, 0, 2, 1], "key:b"));
        let err = budget.grow(&mut a_again, KIB, soon(&budget)).await.unwrap_err();
        assert!(err.message().contains("per_address"), "{}", err.message());
        let mut other_address = budget.permit(from([192, 0, 2, 2], "key:a"));
        budget.grow(&mut other_address, MIB, soon(&budget)).await.unwrap();
        // key:a now holds 4 MiB (two bodies of 1 MiB, counted twice): its cap.
        let mut third_address = budget.permit(from([192, 0, 2, 3], "key:a"));
        let err = budget.grow(&mut third_address, KIB, soon(&budget)).await.unwrap_err();
        assert!(err.message().contains("per_caller"), "{}", err.message());
        let mut someone_else = budget.permit(from([192, 0, 2, 3], "key:c"));
        budget.grow(&mut someone_else, MIB, soon(&budget)).await.unwrap();
    }

    #[tokio::test]
    async fn requests_that_all_wait_on_each_other_shed_the_youngest_at_once() {
        // A wait long enough that only shedding can end it within the test.
        let budget = budget(4 * MIB, 4 * MIB, 4 * MIB, 60_000);
        let until = soon(&budget);
        let (mut old, mut young) = (budget.permit(Holder::default()), budget.permit(Holder::default()));
        budget.grow(&mut old, MIB, until).await.unwrap();
        budget.grow(&mut young, MIB, until).await.unwrap();
        let started = std::time::Instant::now();
        let (old_grown, young_grown) =
            tokio::join!(budget.grow(&mut old, 2 * MIB, until), budget.grow(&mut young, 2 * MIB, until));
        old_grown.unwrap();
        assert_eq!(young_grown.unwrap_err().kind(), ErrorKind::Overloaded);
        assert!(started.elapsed() < Duration::from_secs(10), "the deadlock waited for the timeout");
        drop(young);
        assert_eq!(budget.usage(), (4 * MIB, 0));
    }

    #[tokio::test]
    async fn a_body_larger_than_a_pool_still_goes_alone() {
        let budget = budget(MIB, MIB, MIB, 50);
        let mut permit = budget.permit(Holder::default());
        budget.grow(&mut permit, 100 * KIB, soon(&budget)).await.unwrap();
        assert_eq!(budget.usage().0, 200 * KIB);
        budget.grow(&mut permit, 50 * MIB, soon(&budget)).await.unwrap();
        assert_eq!(budget.usage().0, MIB);
        let mut other = budget.permit(Holder::default());
        assert!(budget.grow(&mut other, 1, soon(&budget)).await.is_err(), "the budget is all held");
        drop(permit);
        budget.grow(&mut other, 1, soon(&budget)).await.unwrap();
    }

    #[tokio::test]
    async fn a_hold_covers_each_body_built_past_the_edge_until_released() {
        let budget = budget(4 * MIB, 4 * MIB, 4 * MIB, 50);
        let mut permit = budget.permit(Holder::default());
        budget.grow(&mut permit, 100 * KIB, soon(&budget)).await.unwrap();
        let mut hold = Hold::new(&budget, permit);
        hold.cover(MIB).await.unwrap();
        assert_eq!(budget.usage().0, 2 * MIB, "the next round's body, counted twice");
        let mut other = budget.permit(Holder::default());
        assert!(budget.grow(&mut other, MIB + 1, soon(&budget)).await.is_err(), "the hold takes its share");
        hold.release();
        assert_eq!(budget.usage().0, 0);
        hold.cover(MIB).await.unwrap();
        assert_eq!(budget.usage().0, 0, "a released hold charges nothing");
    }

    #[tokio::test]
    async fn the_request_count_is_bounded_too_once_bytes_arrive() {
        let budget = BodyBudget::new(
            Caps { total: 1 << 30, per_address: 1 << 30, per_caller: 1 << 30 },
            2,
            Duration::from_millis(50),
        );
        let mut idle = budget.permit(Holder::default());
        let mut held = (budget.permit(Holder::default()), budget.permit(Holder::default()));
        budget.grow(&mut held.0, 10, soon(&budget)).await.unwrap();
        budget.grow(&mut held.1, 0, soon(&budget)).await.unwrap();
        let err = budget.grow(&mut idle, 10, soon(&budget)).await.unwrap_err();
        assert!(err.message().contains("max_inflight_requests"), "{}", err.message());
        drop(held);
        budget.grow(&mut idle, 10, soon(&budget)).await.unwrap();
    }
}
