//! The threads that serve connections: one single-threaded Tokio runtime per core, each
//! connection on one of them for its whole life, the way nginx's worker processes (and
//! Pingora's "no steal" runtimes) hold theirs.
//!
//! Why not the multi-threaded runtime the rest of memgate runs on: a request there is a server
//! connection task, a handler, and the upstream client's connection task, and each wake-up of
//! one by another could land on the other worker thread, which the runtime then wakes from
//! sleep to steal it (a futex and a context switch). At 1,000 pass-through requests a second on
//! 2 cores that was a sixth to a quarter of memgate's CPU per request: 226 → 186 µs (medians,
//! alternating with nginx's 76; docs/benchmarks.md, "One runtime per core"). On its own thread,
//! with its own pool of upstream connections (`Upstream`, by `current`), a request wakes only
//! the thread it is on.
//!
//! The price: a connection never moves. A client that sends everything over one connection
//! (HTTP/2 multiplexing, or a pool that hands most requests to its most recent connection) is
//! served by one core; many connections, as load balancers and SDK pools open, spread evenly.
//!
//! What runs here: the connections, their requests, and what a request starts (its tasks,
//! timers, and connections to the upstream, the store or Redis opened while it runs). The
//! server's loops, the embedding thread and startup stay on the main runtime.
//!
//! Lifecycle: `start` spawns the threads; each runs its runtime until `Workers` is dropped,
//! then drops it there, which cancels what is still on it. `http::server::run` drops them last,
//! after the connections have closed and every tracked task has been waited for, so only
//! detached work that ends with what it serves (`tasks::detached`) can be cut.

use std::cell::Cell;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub struct Workers {
    handles: Vec<Handle>,
    next: AtomicUsize,
    stop: CancellationToken,
}

thread_local! {
    /// On a worker's thread, its position in `Workers`; `None` elsewhere.
    static CURRENT: Cell<Option<usize>> = const { Cell::new(None) };
}

/// How many workers `start` runs: one per core the process may use (cgroup quotas included).
pub fn count() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// The position of the worker this thread is (`0..count()`), if it is one.
pub fn current() -> Option<usize> {
    CURRENT.with(Cell::get)
}

impl Workers {
    /// Starts `count()` workers, each a thread named `memgate-worker-N` running its own runtime.
    /// If one cannot start, those already running stop (`Drop`) and the error is returned.
    /// Each runtime is built, run and dropped on its own thread: a runtime cannot be dropped
    /// inside another one's task, where this is called.
    pub fn start() -> std::io::Result<Workers> {
        let mut workers =
            Workers { handles: Vec::new(), next: AtomicUsize::new(0), stop: CancellationToken::new() };
        for index in 0..count() {
            let (started, handle) = std::sync::mpsc::sync_channel(1);
            let stop = workers.stop.clone();
            std::thread::Builder::new().name(format!("memgate-worker-{index}")).spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(runtime) => runtime,
                    Err(err) => {
                        let _ = started.send(Err(err));
                        return;
                    }
                };
                let _ = started.send(Ok(runtime.handle().clone()));
                CURRENT.with(|current| current.set(Some(index)));
                runtime.block_on(stop.cancelled());
            })?;
            let handle =
                handle.recv().map_err(|_| std::io::Error::other("a worker thread ended as it started"))?;
            workers.handles.push(handle?);
        }
        Ok(workers)
    }

    /// Runs `task` on the next worker, in turn, tracked by `tracker`.
    pub fn spawn(&self, tracker: &TaskTracker, task: impl Future<Output = ()> + Send + 'static) {
        let next = self.next.fetch_add(1, Ordering::Relaxed) % self.handles.len();
        tracker.spawn_on(task, &self.handles[next]);
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn tasks_run_on_each_worker_in_turn_and_know_which_they_are_on() {
        let workers = Workers::start().unwrap();
        let tracker = TaskTracker::new();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for _ in 0..count() * 2 {
            let tx = tx.clone();
            workers.spawn(&tracker, async move {
                let name = std::thread::current().name().map(str::to_owned);
                tx.send((current(), name)).unwrap();
            });
        }
        tracker.close();
        tracker.wait().await;
        drop(tx);
        let mut seen = Vec::new();
        while let Some(entry) = rx.recv().await {
            seen.push(entry);
        }
        for index in 0..count() {
            let on_it = seen.iter().filter(|(current, _)| *current == Some(index)).collect::<Vec<_>>();
            assert_eq!(on_it.len(), 2, "worker {index} ran {on_it:?} of {seen:?}");
            let name = format!("memgate-worker-{index}");
            assert!(on_it.iter().all(|(_, thread)| thread.as_deref() == Some(name.as_str())));
        }
        assert_eq!(current(), None, "the test's own thread is no worker");
    }
}
