//! The triggers' metrics. Cheap to clone (each metric is shared); the server registers them once
//! in its registry (`register`), whose `memgate` prefix makes `memgate_trigger_…`.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug)]
pub struct TriggerMetrics {
    /// Decisions written to the outbox (new ones; a repeat of the same decision is not counted).
    pub queued: Counter,
    /// Attempts that delivered (2xx).
    pub delivered: Counter,
    /// Attempts that failed and will be retried.
    pub failed: Counter,
    /// Actions given up on.
    pub dead: Counter,
    /// Firings not decided, or not written, because the record's cooldown for that subject (or
    /// key) still ran.
    pub cooled_down: Counter,
    /// Actions refused when written: their tenant had `max_waiting_per_tenant` waiting.
    pub refused: Counter,
    /// Deliveries put off (not attempted) because their endpoint was at its pace.
    pub deferred: Counter,
    /// From the decision to the receiver's 2xx, retries included.
    pub delivery_latency: Histogram,
    /// One attempt: connect, send, answer.
    pub attempt_latency: Histogram,
}

impl Default for TriggerMetrics {
    fn default() -> Self {
        TriggerMetrics {
            queued: Counter::default(),
            delivered: Counter::default(),
            failed: Counter::default(),
            dead: Counter::default(),
            cooled_down: Counter::default(),
            refused: Counter::default(),
            deferred: Counter::default(),
            // 1 ms .. ~9 h: a local receiver answers in milliseconds, a retried one hours later.
            delivery_latency: Histogram::new(exponential_buckets(0.001, 4.0, 13)),
            // 1 ms .. ~65 s: bounded by the endpoint timeout.
            attempt_latency: Histogram::new(exponential_buckets(0.001, 2.0, 17)),
        }
    }
}

impl TriggerMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "trigger_actions_queued",
            "Trigger actions decided and written to the outbox",
            self.queued.clone(),
        );
        registry.register(
            "trigger_deliveries",
            "Trigger action deliveries answered 2xx",
            self.delivered.clone(),
        );
        registry.register(
            "trigger_delivery_failures",
            "Trigger action attempts that failed and will be retried",
            self.failed.clone(),
        );
        registry.register(
            "trigger_actions_dead",
            "Trigger actions given up on (dead-lettered)",
            self.dead.clone(),
        );
        registry.register(
            "trigger_firings_cooled_down",
            "Trigger firings not acted on: the record's cooldown for that subject or key still ran",
            self.cooled_down.clone(),
        );
        registry.register(
            "trigger_actions_refused",
            "Trigger actions refused: their tenant had its cap of waiting actions",
            self.refused.clone(),
        );
        registry.register(
            "trigger_deliveries_deferred",
            "Trigger deliveries put off because their endpoint was at its pace (they stay queued)",
            self.deferred.clone(),
        );
        registry.register(
            "trigger_delivery_latency_seconds",
            "Time from deciding a trigger action to its delivery, retries included",
            self.delivery_latency.clone(),
        );
        registry.register(
            "trigger_attempt_seconds",
            "Time of one delivery attempt of a trigger action",
            self.attempt_latency.clone(),
        );
    }
}
