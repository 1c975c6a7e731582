//! Recall: the memory step of a Messages request, between reading the body and sending it
//! upstream. It finds the person's words (`query`: the last user turn without harness text),
//! embeds them, runs the funnel on the caller's tenant index, renders the release's block and
//! places it where the prompt cache stays intact.
//!
//! Fail-open: the whole step has a time budget (`memory.funnel_timeout_ms`). When it overruns, or
//! the embedder, a template or placement fails, the request goes upstream as the client sent it,
//! marked `X-Memory-Status: degraded` and counted; with `memory.fail_closed` it fails instead.

use crate::clock::now_ms;
use crate::config::MemoryConfig;
use crate::error::{ApiError, Code};
use crate::funnel::Retrieval;
use crate::funnel::semantic::{Hybrid, SemanticQuery};
use crate::funnel::trace::{Detail, Trace};
use crate::identity::Caller;
use crate::inject::Templates;
use crate::inject::{RenderItem, inject};
use crate::memory::MemoryService;
use crate::observability::metrics::Metrics;
use crate::query::Query;
use crate::rollout::Release;
use crate::triggers::{Fired, TriggerInput, Triggers};
use bytes::Bytes;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

pub mod shadow;

/// What recall works with: the records and their index, the embedder (both in `memories`), the
/// releases' templates, the metrics and the memory settings. Shared by the proxy, `explain` and
/// shadow runs; cheap to clone.
#[derive(Clone)]
pub struct Recaller {
    inner: Arc<Parts>,
}

struct Parts {
    memories: MemoryService,
    templates: Templates,
    metrics: Arc<Metrics>,
    config: MemoryConfig,
    /// Records' trigger conditions, evaluated on the scope and temporal layers' survivors.
    triggers: Triggers,
    /// Shadow runs in flight (`shadow`).
    shadow_slots: Arc<tokio::sync::Semaphore>,
}

/// `X-Memory-Status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryStatus {
    Ok,
    Skipped,
    Degraded,
}

impl MemoryStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            MemoryStatus::Ok => "ok",
            MemoryStatus::Skipped => "skipped",
            MemoryStatus::Degraded => "degraded",
        }
    }
}

/// What recall did to one request.
pub struct Recalled {
    /// The body to send upstream: the client's own, or with the block injected.
    pub body: Bytes,
    pub status: MemoryStatus,
    pub injected_ids: Vec<String>,
    pub stub_ids: Vec<String>,
    pub tokens: usize,
    pub block: Option<String>,
    pub placed_in: Option<&'static str>,
    pub trace: Option<Trace>,
    /// The person's words memory was matched against, and where they came from (with a trace).
    pub query: Option<Query>,
    /// Why it degraded, for logs and metrics.
    pub degraded_reason: Option<&'static str>,
    /// Records the caller may see whose trigger conditions the person's newest words met (when
    /// the wish asked for triggers); nothing is decided yet.
    pub fired: Vec<Fired>,
    /// The words the conditions read and their turn's index, when something fired: what the
    /// decisions carry and what names the turn across a client's retries (`triggers::turn_id`).
    pub trigger_words: Option<(String, usize)>,
    /// What the caller's visible, valid records would cost injected in full, in tokens.
    pub visible_tokens: u64,
}

impl Recalled {
    fn untouched(body: Bytes, status: MemoryStatus, reason: Option<&'static str>) -> Recalled {
        Recalled {
            body,
            status,
            injected_ids: Vec::new(),
            stub_ids: Vec::new(),
            tokens: 0,
            block: None,
            placed_in: None,
            trace: None,
            query: None,
            degraded_reason: reason,
            fired: Vec::new(),
            trigger_words: None,
            visible_tokens: 0,
        }
    }

    /// A compact trace for the `X-Memory-Trace` header.
    pub fn trace_json(&self) -> Value {
        json!({"query": self.query, "injected": self.injected_ids, "stubs": self.stub_ids, "tokens": self.tokens,
            "trace": self.trace})
    }

    /// The trace as a header value of at most `max` bytes: the lists of removed and kept records
    /// go first when it is too long (the counts stay), then the layers, marked `"truncated": true`.
    pub fn trace_header(&self, max: usize) -> String {
        let full = self.trace_json().to_string();
        if full.len() <= max {
            return full;
        }
        let mut trace = self.trace.clone().unwrap_or_default();
        for layer in &mut trace.layers {
            layer.removed.clear();
            layer.kept.clear();
        }
        let counts = json!({"query": self.query, "injected": self.injected_ids, "stubs": self.stub_ids,
            "tokens": self.tokens, "trace": trace, "truncated": true})
        .to_string();
        if counts.len() <= max {
            return counts;
        }
        json!({"injected": self.injected_ids.len(), "stubs": self.stub_ids.len(), "tokens": self.tokens,
            "truncated": true})
        .to_string()
    }
}

/// What the request asked of memory.
pub struct Wish {
    pub off: bool,
    /// What the trace may tell: `Visible` for the caller's own `X-Memory-Debug`, `Full` for an
    /// admin's `explain`.
    pub trace: Detail,
    /// Overrides `memory.funnel_timeout_ms`: diagnostics (`explain`) and shadow runs, which
    /// nobody waits on, take the time they need.
    pub budget: Option<std::time::Duration>,
    /// A shadow or explain run: nothing of it is sent, so it counts in no injection or latency
    /// metric.
    pub shadow: bool,
    /// Evaluate records' trigger conditions (the proxy and `explain`; not shadow runs).
    pub triggers: bool,
    /// `X-Memory-Values`: numbers and strings the client passes for trigger comparisons
    /// (`satisfaction < 2`).
    pub values: BTreeMap<String, Value>,
}

impl Recaller {
    pub fn new(
        memories: MemoryService,
        templates: Templates,
        metrics: Arc<Metrics>,
        config: MemoryConfig,
        triggers: Triggers,
    ) -> Recaller {
        let shadow_slots = Arc::new(tokio::sync::Semaphore::new(shadow::MAX_RUNNING));
        Recaller { inner: Arc::new(Parts { memories, templates, metrics, config, triggers, shadow_slots }) }
    }

    pub fn triggers(&self) -> &Triggers {
        &self.inner.triggers
    }

    pub fn memories(&self) -> &MemoryService {
        &self.inner.memories
    }

    pub fn templates(&self) -> &Templates {
        &self.inner.templates
    }

    fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    pub fn config(&self) -> &MemoryConfig {
        &self.inner.config
    }

    /// Runs recall for one request within the time budget.
    pub async fn recall(
        &self,
        caller: &Caller,
        release: &Release,
        body: Bytes,
        wish: &Wish,
    ) -> Result<Recalled, ApiError> {
        if wish.off {
            return Ok(Recalled::untouched(body, MemoryStatus::Skipped, None));
        }
        let budget = wish.budget.unwrap_or(self.config().funnel_timeout);
        let started = Instant::now();
        let attempt = tokio::time::timeout(budget, self.run(caller, release, &body, wish)).await;
        let took = started.elapsed();
        if !wish.shadow {
            self.metrics().record_funnel(&release.name, took);
        }
        let reason = match attempt {
            Ok(Ok(recalled)) if took <= budget => return Ok(recalled),
            // Back after its budget: late all the same. When the thread did not run for a while
            // (a loaded machine), the step and the timer that should have cut it can both be
            // ready when it next runs, and the step is polled first; whether memory counts must
            // not depend on which of the two the scheduler let finish.
            Ok(Ok(_)) => "timeout",
            Ok(Err(reason)) => reason,
            Err(_) => "timeout",
        };
        if !wish.shadow {
            self.metrics().record_degraded(&release.name, reason);
        }
        tracing::warn!(reason, release = %release.name, "memory degraded; the request goes on without it");
        if self.config().fail_closed {
            return Err(ApiError::coded(
                Code::MemoryUnavailable,
                format!("memory is unavailable ({reason}) and this gateway is set to fail closed"),
            ));
        }
        Ok(Recalled::untouched(body, MemoryStatus::Degraded, Some(reason)))
    }

    async fn run(
        &self,
        caller: &Caller,
        release: &Release,
        body: &Bytes,
        wish: &Wish,
    ) -> Result<Recalled, &'static str> {
        let detailed = wish.trace.is_on();
        // Nothing this caller could see: the body is not even read (a trace, when asked for,
        // still shows the layers). A client's text is read only for a caller memory can serve.
        if !detailed && !self.memories().index().has_visible(&caller.tenant, &caller.scopes) {
            return Ok(Recalled::untouched(body.clone(), MemoryStatus::Ok, None));
        }
        let (read, rule) = (body.clone(), release.query.clone());
        let extracted = crate::cpu::run(body.len(), move || crate::query::extract(&read, &rule)).await;
        let Some(matched) = extracted else {
            return Ok(Recalled::untouched(body.clone(), MemoryStatus::Ok, None));
        };
        let query = matched.text.clone();
        let Some(tenant) = self.memories().index().tenant(&caller.tenant) else {
            return Ok(Recalled::untouched(body.clone(), MemoryStatus::Ok, None));
        };
        let vector =
            self.memories().embedder().embed_query_for(&caller.tenant, &query).await.map_err(|err| {
                tracing::warn!(error = %err, "query embedding failed");
                "embedder"
            })?;
        // The query's words, for hybrid releases: analyzed before the tenant's lock is taken.
        let lexical = matches!(release.funnel.retrieval, Retrieval::Hybrid { .. })
            .then(|| crate::lexical::LexicalQuery::new(crate::lexical::analyzer(), &query));
        let (items, stub_items, trace, visible_tokens, triggerable) = {
            let index = tenant.read().unwrap_or_else(|p| p.into_inner());
            let semantic = SemanticQuery {
                hybrid: match (release.funnel.retrieval, lexical.as_ref()) {
                    (Retrieval::Hybrid { lexical_weight, min_lexical }, Some(query)) => {
                        Some(Hybrid { query, lexical_weight, min_lexical })
                    }
                    _ => None,
                },
                text: &query,
                vector: Some(&vector),
                threshold: release.funnel.threshold,
                probes: release.funnel.probes,
                lift: crate::funnel::semantic::Lift::NONE,
            };
            let output = crate::funnel::run(&index, caller, &semantic, &release.funnel, now_ms(), wish.trace);
            // The few records with trigger conditions among what this caller may see now: taken
            // out under the lock, evaluated after it.
            let triggerable: Vec<Arc<crate::record::Record>> = if wish.triggers {
                index
                    .triggered
                    .iter()
                    .filter(|(slot, _)| output.current.contains(**slot))
                    .map(|(_, body)| Arc::clone(body))
                    .collect()
            } else {
                Vec::new()
            };
            let packed = output.packed;
            (packed.injected, packed.stubs, output.trace, output.visible_tokens, triggerable)
        };
        // The index ranked heads; the few injected records' bodies come from its cache or the
        // store. One that changed meanwhile in a way the funnel would judge again (deleted,
        // moved, paused) is left out rather than shown as it was.
        let bodies = {
            let heads: Vec<&crate::index::RecordHead> =
                items.iter().chain(&stub_items).map(|c| &c.item.head).collect();
            self.memories().bodies(&heads).await.map_err(|err| {
                tracing::warn!(error = %err, "reading the injected records' bodies failed");
                "store"
            })?
        };
        let mut bodies = bodies.into_iter();
        let (items, item_bodies) = with_bodies(items, &mut bodies);
        let (stub_items, stub_bodies) = with_bodies(stub_items, &mut bodies);
        let tokens: usize = items.iter().map(|c| c.item.tokens).sum();
        // On the newest turn's words only: one threatening message must not fire again on every
        // short reply after it (a follow-up's query also carries the previous words).
        let input = TriggerInput::new(&matched.newest, &wish.values);
        let fired = self.triggers().evaluate(&input, triggerable.iter().map(|record| &**record));
        let trigger_words = (!fired.is_empty()).then(|| (matched.newest.clone(), matched.turn));
        if items.is_empty() && stub_items.is_empty() && !release.empty_block {
            let mut recalled = Recalled::untouched(body.clone(), MemoryStatus::Ok, None);
            recalled.trace = detailed.then_some(trace);
            recalled.query = detailed.then_some(matched);
            recalled.fired = fired;
            recalled.trigger_words = trigger_words;
            recalled.visible_tokens = visible_tokens;
            return Ok(recalled);
        }
        let render_items: Vec<RenderItem> = item_bodies
            .iter()
            .map(|record| render_item(record, None, release.frame_writers))
            .chain(
                stub_bodies
                    .iter()
                    .map(|record| render_item(record, Some(stub_summary(record)), release.frame_writers)),
            )
            .collect();
        let block = self.templates().render(&release.name, &render_items).map_err(|err| {
            tracing::error!(error = %err, release = %release.name, "template failed");
            "template"
        })?;
        let (into, placement) = (body.clone(), release.placement);
        let rendered = block.clone();
        let placed = crate::cpu::run(body.len(), move || inject(&into, &rendered, placement)).await;
        let injected = placed.map_err(|err| {
            tracing::warn!(error = %err, "placement failed");
            "placement"
        })?;
        if !wish.shadow {
            self.metrics().record_injection(&release.name, items.len(), tokens);
        }
        Ok(Recalled {
            body: Bytes::from(injected.body),
            status: MemoryStatus::Ok,
            injected_ids: items.iter().map(|c| c.item.head.id().to_string()).collect(),
            stub_ids: stub_items.iter().map(|c| c.item.head.id().to_string()).collect(),
            tokens,
            block: Some(block),
            placed_in: Some(injected.placed_in),
            trace: detailed.then_some(trace),
            query: detailed.then_some(matched),
            degraded_reason: None,
            fired,
            trigger_words,
            visible_tokens,
        })
    }
}

/// The records of `chosen` whose bodies `bodies` (in the same order) has, with them.
fn with_bodies(
    chosen: Vec<crate::funnel::density::Chosen>,
    bodies: &mut impl Iterator<Item = Option<Arc<crate::record::Record>>>,
) -> (Vec<crate::funnel::density::Chosen>, Vec<Arc<crate::record::Record>>) {
    chosen.into_iter().zip(bodies).filter_map(|(c, body)| Some((c, body?))).unzip()
}

fn render_item(record: &crate::record::Record, stub: Option<String>, frame: bool) -> RenderItem<'_> {
    let item = RenderItem { stub, ..RenderItem::of(record) };
    if frame { item.framed(record.writer()) } else { item }
}

/// One line saying what a record that did not fit is about: its type, key and first words.
fn stub_summary(record: &crate::record::Record) -> String {
    let mut text = String::new();
    crate::record::collect_text(&record.content, &mut text);
    let words: String = text.split_whitespace().collect::<Vec<_>>().join(" ").chars().take(80).collect();
    match &record.key {
        Some(key) => format!("{} {key}: {words}", record.record_type),
        None => format!("{}: {words}", record.record_type),
    }
}
