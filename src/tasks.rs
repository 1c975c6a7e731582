//! Where memgate starts its tasks. Work that shutdown must wait for (trigger inserts and
//! deliveries, background embedding, shadow runs, the server's loops and connections) runs on a
//! `TaskTracker` its owner closes and waits on. What is left are tasks that live exactly as long
//! as what they serve, and end when it is dropped: a Redis listener or heartbeat holding a weak
//! reference to its owner, a message handed to Redis under a timeout. Those start here, by name,
//! so a new one is a decision and not an accident: `tokio::spawn` is refused anywhere else
//! (`clippy.toml`, `disallowed-methods`).

use futures_util::FutureExt;
use std::future::Future;
use std::panic::AssertUnwindSafe;

/// Starts `task`, which ends by itself when what it serves is gone or its timeout passes;
/// `what` names it in the logs if it panics (nobody awaits it, so a panic would otherwise vanish).
#[allow(clippy::disallowed_methods)]
pub fn detached(what: &'static str, task: impl Future<Output = ()> + Send + 'static) {
    tokio::spawn(async move {
        if AssertUnwindSafe(task).catch_unwind().await.is_err() {
            tracing::error!(task = what, "a background task panicked");
        }
    });
}
