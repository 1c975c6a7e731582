//! Change fan-out between replicas through Redis pub/sub.
//!
//! Every replica keeps the records and the rollout state in memory and takes in other replicas'
//! changes from the store on a poll (`database.poll_interval_ms`, 1 s by default). With Redis
//! configured (`MEMGATE_REDIS_URL`), a replica that commits a change also publishes one word —
//! `memories`, `releases` or `keys` (a revocation) — with its own id on the channel `<key_prefix>:changes`, and every
//! other replica listening looks in the store at once.
//!
//! The store stays the truth: a message carries no data, only "look now". So a lost message, a
//! replica that was disconnected, or Redis being down costs at most the poll interval, never a
//! wrong answer (fail-open). Bursts coalesce: while a look is running, any number of messages
//! make one more look.
//!
//! Lifecycle: [`Fanout::start`] returns at once; one task connects the replica's one Redis
//! connection (publishing here, and the shared query embeddings, `embed::shared`),
//! another (re)subscribes, each retrying every `RETRY` while Redis is away, and after every
//! (re)subscription the replica looks once, for what it may have missed meanwhile.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use futures_util::StreamExt;
use redis::AsyncCommands;
use redis::aio::ConnectionManager;
use tokio::sync::Notify;

pub use crate::config::RedisConfig;

/// How long a publish may take before it is given up (the poll catches up).
const PUBLISH_TIMEOUT: Duration = Duration::from_millis(500);
/// How long a connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Pause between connection attempts while Redis is away.
const RETRY: Duration = Duration::from_secs(1);

/// What changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topic {
    Memories,
    Releases,
    /// A gateway key was revoked: every replica drops its cached keys.
    Keys,
}

impl Topic {
    pub const ALL: [Topic; 3] = [Topic::Memories, Topic::Releases, Topic::Keys];

    fn as_str(self) -> &'static str {
        match self {
            Topic::Memories => "memories",
            Topic::Releases => "releases",
            Topic::Keys => "keys",
        }
    }

    fn parse(word: &str) -> Option<Topic> {
        Topic::ALL.into_iter().find(|topic| topic.as_str() == word)
    }
}

/// Publishes this replica's changes and wakes it for other replicas'. Cheap to clone; without
/// Redis every call does nothing.
#[derive(Clone, Default)]
pub struct Fanout {
    inner: Option<Arc<Inner>>,
}

struct Inner {
    client: redis::Client,
    channel: String,
    /// Tells this replica's own messages apart.
    replica: String,
    publisher: Arc<ArcSwapOption<ConnectionManager>>,
    memories: Notify,
    releases: Notify,
    keys: Notify,
}

impl Fanout {
    /// Without Redis: publishing and waiting do nothing.
    pub fn disabled() -> Fanout {
        Fanout::default()
    }

    /// Starts connecting in the background; never fails on an unreachable Redis (the replica
    /// runs on its poll until Redis answers), only on a malformed URL (which config refuses first).
    pub fn start(config: &RedisConfig) -> Result<Fanout, String> {
        let client = redis::Client::open(config.url.as_str())
            .map_err(|e| format!("redis.url: {e} (use redis://HOST:PORT or rediss://HOST:PORT)"))?;
        let publisher = keep_connected(client.clone());
        let inner = Arc::new(Inner {
            client,
            channel: format!("{}:changes", config.key_prefix),
            replica: uuid::Uuid::new_v4().simple().to_string(),
            publisher,
            memories: Notify::new(),
            releases: Notify::new(),
            keys: Notify::new(),
        });
        crate::tasks::detached("fanout listener", listen(Arc::downgrade(&inner)));
        Ok(Fanout { inner: Some(inner) })
    }

    /// The connection this replica publishes on, for its other uses of Redis (the shared query
    /// embeddings): one connection per replica, empty while Redis is away.
    pub fn connection(&self) -> Option<Arc<ArcSwapOption<ConnectionManager>>> {
        self.inner.as_ref().map(|inner| inner.publisher.clone())
    }

    pub fn is_enabled(&self) -> bool {
        self.inner.is_some()
    }

    /// Tells the other replicas, in the background, that `topic` changed in the store.
    pub fn notify(&self, topic: Topic) {
        if self.inner.is_some() {
            let fanout = self.clone();
            crate::tasks::detached("fanout publish", async move { fanout.publish(topic).await });
        }
    }

    /// Tells the other replicas that `topic` changed, and waits until Redis took the message
    /// (or gave up). For one-shot commands that exit right after.
    pub async fn publish(&self, topic: Topic) {
        let Some(inner) = &self.inner else { return };
        let connection = match inner.publisher.load_full() {
            Some(connection) => (*connection).clone(),
            // Not connected (yet): a command that runs once connects itself.
            None => {
                match tokio::time::timeout(CONNECT_TIMEOUT, inner.client.get_connection_manager()).await {
                    Ok(Ok(connection)) => connection,
                    _ => {
                        tracing::debug!(
                            topic = topic.as_str(),
                            "redis unavailable; other replicas see the change at their next poll"
                        );
                        return;
                    }
                }
            }
        };
        let mut connection = connection;
        let message = format!("{} {}", topic.as_str(), inner.replica);
        let sent =
            tokio::time::timeout(PUBLISH_TIMEOUT, connection.publish::<_, _, usize>(&inner.channel, message))
                .await;
        if !matches!(sent, Ok(Ok(_))) {
            tracing::warn!(
                topic = topic.as_str(),
                "could not publish a change to redis; other replicas see it at their next poll"
            );
        }
    }

    /// Waits until another replica says `topic` changed (never, without Redis).
    pub async fn changed(&self, topic: Topic) {
        match &self.inner {
            Some(inner) => inner.notify_for(topic).notified().await,
            None => std::future::pending().await,
        }
    }
}

impl Inner {
    fn notify_for(&self, topic: Topic) -> &Notify {
        match topic {
            Topic::Memories => &self.memories,
            Topic::Releases => &self.releases,
            Topic::Keys => &self.keys,
        }
    }

    fn wake(&self, topic: Topic) {
        // `notify_one` keeps one permit when nobody waits: a burst makes one more look.
        self.notify_for(topic).notify_one();
    }
}

/// A Redis connection that appears once Redis answers: a task tries every `RETRY` until it
/// does, then the connection manager reconnects by itself. Empty until then (and for good if
/// every holder is gone first), so users must cope with no connection: they fail open.
fn keep_connected(client: redis::Client) -> Arc<ArcSwapOption<ConnectionManager>> {
    let slot = Arc::new(ArcSwapOption::empty());
    let weak = Arc::downgrade(&slot);
    crate::tasks::detached("redis connect", async move {
        let mut warned = false;
        loop {
            match tokio::time::timeout(CONNECT_TIMEOUT, client.get_connection_manager()).await {
                Ok(Ok(connection)) => {
                    if let Some(slot) = weak.upgrade() {
                        slot.store(Some(Arc::new(connection)));
                    }
                    return;
                }
                Ok(Err(err)) if !warned => {
                    tracing::warn!(error = %err, "redis unavailable; retrying")
                }
                Err(_) if !warned => tracing::warn!("redis did not answer in time; retrying"),
                _ => {}
            }
            warned = true;
            if weak.strong_count() == 0 {
                return;
            }
            tokio::time::sleep(RETRY).await;
        }
    });
    slot
}

/// Subscribes, wakes the replica for every other replica's message, and resubscribes after a
/// lost connection. Ends when the last `Fanout` clone is gone.
async fn listen(inner: std::sync::Weak<Inner>) {
    let mut was_lost = false;
    loop {
        let Some(strong) = inner.upgrade() else { return };
        let subscribed = async {
            let mut pubsub = strong.client.get_async_pubsub().await?;
            pubsub.subscribe(&strong.channel).await?;
            Ok::<_, redis::RedisError>(pubsub)
        };
        let mut pubsub = match tokio::time::timeout(CONNECT_TIMEOUT, subscribed).await {
            Ok(Ok(pubsub)) => pubsub,
            Ok(Err(err)) => {
                if !std::mem::replace(&mut was_lost, true) {
                    tracing::warn!(error = %err, "redis unavailable for change fan-out; replicas sync on their poll until it is back");
                }
                drop(strong);
                tokio::time::sleep(RETRY).await;
                continue;
            }
            Err(_) => {
                drop(strong);
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        tracing::info!(channel = %strong.channel, "listening for other replicas' changes on redis");
        // Whatever changed while this replica was not listening.
        for topic in Topic::ALL {
            strong.wake(topic);
        }
        let replica = strong.replica.clone();
        drop(strong);
        let mut messages = pubsub.on_message();
        while let Some(message) = messages.next().await {
            let Some(strong) = inner.upgrade() else { return };
            let Ok(payload) = message.get_payload::<String>() else { continue };
            let mut words = payload.split_whitespace();
            let (Some(topic), from) = (words.next().and_then(Topic::parse), words.next()) else { continue };
            if from != Some(replica.as_str()) {
                strong.wake(topic);
            }
        }
        tracing::warn!("lost the redis subscription; reconnecting");
        was_lost = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_round_trip_and_unknown_words_are_ignored() {
        for topic in Topic::ALL {
            assert_eq!(Topic::parse(topic.as_str()), Some(topic));
        }
        assert_eq!(Topic::parse("flushall"), None);
    }

    #[test]
    fn a_malformed_url_is_refused_and_no_redis_means_nothing_happens() {
        let bad = RedisConfig {
            url: "redis://[::1".into(),
            key_prefix: "memgate".into(),
            shared_read_timeout: Duration::from_millis(10),
        };
        assert!(Fanout::start(&bad).is_err());
        assert!(!Fanout::disabled().is_enabled());
    }
}
