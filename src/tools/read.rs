//! The read tools: search, get and list, ranked and filtered on the funnel's in-memory index (the
//! bodies of the few records answered from its body cache or the store),
//! under the funnel's scope and temporal rules.

use super::definitions::{GET, LIST, SEARCH};
use super::input::Input;
use super::{NOTES_NOT_INSTRUCTIONS, ToolCaller, ToolResult, escaped_json};
use crate::clock::{format_ms, now_ms};
use crate::funnel::Retrieval;
use crate::funnel::semantic::{self, Hybrid, SemanticQuery};
use crate::funnel::trace::{Detail, Trace};
use crate::funnel::{scope, temporal};
use crate::index::{IndexedRecord, RecordHead};
use crate::memory::MemoryService;
use crate::record::{Record, Status};
use crate::rollout::Release;
use serde_json::{Map, Value, json};
use std::sync::Arc;

const SEARCH_DEFAULT: u64 = 5;
const SEARCH_MAX: u64 = 20;
const LIST_DEFAULT: u64 = 20;
/// Below any cosine: every candidate is ranked.
const SEARCH_THRESHOLD: f32 = -1.0;
const LIST_MAX: u64 = 50;

/// Whether the caller may read `record` now: the funnel's scope rule and its temporal one (valid
/// now, of a schema version the release reads), with dormant records readable too: the tools
/// find what injection no longer offers, and reading one makes it active again (`wake`).
pub(super) fn readable(caller: &ToolCaller, release: &Release, record: &RecordHead, now: i64) -> bool {
    caller.caller.can_see(record.tenant(), record.scopes())
        && record.status.is_indexed()
        && record.is_valid_at(now)
        && release.funnel.schema_versions.iter().any(|v| **v == *record.schema_version())
}

/// `readable`, for a record read from the store.
pub(super) fn is_readable(caller: &ToolCaller, release: &Release, record: &Record) -> bool {
    caller.caller.can_see(&record.tenant, &record.scope)
        && record.status.is_indexed()
        && record.is_valid_at(now_ms())
        && release.funnel.schema_versions.contains(&record.schema_version)
}

/// One record as a result line: what a model needs to use and cite it.
pub(super) fn line(record: &Record, score: Option<f32>, full: bool) -> Value {
    let mut out = Map::new();
    out.insert("id".into(), json!(record.id));
    out.insert("type".into(), json!(record.record_type));
    if let Some(key) = &record.key {
        out.insert("key".into(), json!(key));
    }
    out.insert("priority".into(), json!(record.priority));
    out.insert("updated_at".into(), json!(format_ms(record.updated_at_ms)));
    if let Some(author) = &record.author {
        out.insert("author".into(), json!(author));
    }
    // Whose words these are: an operator's note, or what an agent, the memory tool or the
    // observer kept from a conversation.
    out.insert("writer".into(), json!(record.writer().as_str()));
    if let Some(score) = score {
        out.insert("score".into(), json!((f64::from(score) * 1000.0).round() / 1000.0));
    }
    if full {
        out.insert("scope".into(), json!(record.scope));
        out.insert("aliases".into(), json!(record.aliases));
        out.insert("valid_from".into(), json!(format_ms(record.valid_from_ms)));
        out.insert("valid_until".into(), json!(format_ms(record.valid_until_ms)));
        out.insert("revision".into(), json!(record.revision));
    }
    out.insert("content".into(), record.content.clone());
    Value::Object(out)
}

/// The bodies of `items`, in order, with each item; a record the store no longer holds as the
/// index does is left out (it changed or went away meanwhile). A store failure is the tool's
/// error, in words a model can act on.
async fn with_bodies<T>(
    tool: &str,
    memories: &MemoryService,
    items: Vec<(Arc<IndexedRecord>, T)>,
) -> Result<Vec<(Arc<Record>, T)>, ToolResult> {
    let heads: Vec<&RecordHead> = items.iter().map(|(item, _)| &item.head).collect();
    let bodies = memories.bodies(&heads).await.map_err(|err| {
        tracing::warn!(error = %err, tool, "reading records' bodies failed");
        ToolResult::error(format!("{tool}: memory is unavailable right now; try again shortly"))
    })?;
    Ok(items.into_iter().zip(bodies).filter_map(|((_, extra), body)| Some((body?, extra))).collect())
}

fn listing(heading: String, lines: impl IntoIterator<Item = Value>) -> String {
    let mut text = format!("{heading}\n{NOTES_NOT_INSTRUCTIONS}");
    for line in lines {
        text.push('\n');
        text.push_str(&escaped_json(&line));
    }
    text
}

/// `memory_search {query, type?, limit?}`: the release's ranking (dense or hybrid, exact key and
/// alias matches first) over what the caller may read, best `limit` first.
pub(super) async fn search(
    memories: &MemoryService,
    caller: &ToolCaller,
    release: &Release,
    input: &Value,
) -> Result<ToolResult, ToolResult> {
    let input = Input::new(SEARCH, input, &["query", "type", "limit"])?;
    let query = input.text("query")?;
    let record_type = input.optional_text("type")?;
    let limit = input.integer("limit", 1, SEARCH_MAX)?.unwrap_or(SEARCH_DEFAULT) as usize;
    let tenant = &caller.caller.tenant;
    let nothing = || Ok(ToolResult::ok("No memory records match."));
    if !memories.index().has_visible(tenant, &caller.caller.scopes) {
        return nothing();
    }
    let Some(index) = memories.index().tenant(tenant) else { return nothing() };
    // Without an embedding only exact and word matches can be found; that is still an answer.
    let vector = match memories.embedder().embed_query_for(tenant, query).await {
        Ok(vector) => Some(vector),
        Err(err) => {
            tracing::warn!(error = %err, "memory_search: query embedding failed; exact and word matches only");
            None
        }
    };
    let lexical = matches!(release.funnel.retrieval, Retrieval::Hybrid { .. })
        .then(|| crate::lexical::LexicalQuery::new(crate::lexical::analyzer(), query));
    let found: Vec<(Arc<IndexedRecord>, f32)> = {
        let index = index.read().unwrap_or_else(|p| p.into_inner());
        let mut trace = Trace::default();
        let visible = scope::visible(&index, &caller.caller, Detail::Off, &mut trace);
        let current =
            temporal::findable(&index, &visible, now_ms(), &release.funnel.schema_versions, &mut trace);
        let current = match record_type {
            Some(wanted) => current.filter(|slot| {
                index.slots[slot as usize].as_ref().is_some_and(|item| item.head.record_type() == wanted)
            }),
            None => current,
        };
        let semantic = SemanticQuery {
            text: query,
            vector: vector.as_deref(),
            // A search is asked for: it answers the best matches by the release's ranking, however
            // weak, rather than the few that clear the bar for unasked injection.
            threshold: SEARCH_THRESHOLD,
            probes: release.funnel.probes,
            hybrid: match (release.funnel.retrieval, lexical.as_ref()) {
                (Retrieval::Hybrid { lexical_weight, min_lexical }, Some(query)) => {
                    Some(Hybrid { query, lexical_weight, min_lexical })
                }
                _ => None,
            },
            lift: crate::funnel::semantic::Lift::NONE,
        };
        let mut hits = semantic::matching(&index, &current, &semantic, false, &mut trace);
        hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.slot.cmp(&b.slot)));
        hits.truncate(limit);
        hits.iter()
            .filter_map(|hit| {
                let item = index.slots[hit.slot as usize].clone()?;
                Some((item, if hit.exact { 1.0 } else { hit.similarity }))
            })
            .collect()
    };
    if found.is_empty() {
        return nothing();
    }
    let ids: Vec<String> = found.iter().map(|(item, _)| item.head.id().to_string()).collect();
    memories.note_accesses(tenant, &ids);
    // Bodies before waking: a woken record's stored status no longer matches its head.
    let bodies = with_bodies(SEARCH, memories, found.clone()).await?;
    wake(memories, caller, found.iter().map(|(item, _)| item)).await;
    let found = bodies;
    if found.is_empty() {
        return nothing();
    }
    let heading = format!("{} memory record(s) found, best first.", found.len());
    Ok(ToolResult::ok(listing(
        heading,
        found.iter().map(|(record, score)| line(record, Some(*score), false)),
    )))
}

/// The record `id` if the caller may read it (an unreadable one is answered as a missing one).
pub(super) fn readable_record(
    memories: &MemoryService,
    caller: &ToolCaller,
    release: &Release,
    id: &str,
) -> Option<Arc<IndexedRecord>> {
    let index = memories.index().tenant(&caller.caller.tenant)?;
    let index = index.read().unwrap_or_else(|p| p.into_inner());
    index.get(id).filter(|item| readable(caller, release, &item.head, now_ms())).cloned()
}

/// An id as the answer may repeat it: at most 100 characters, no control characters.
pub(super) fn shown_id(id: &str) -> String {
    id.chars().filter(|c| !c.is_control()).take(100).collect()
}

/// A memory tool read these records: the dormant ones among them become active again.
async fn wake<'a>(
    memories: &MemoryService,
    caller: &ToolCaller,
    items: impl Iterator<Item = &'a Arc<IndexedRecord>>,
) {
    let dormant: Vec<String> = items
        .filter(|item| item.head.status == Status::Dormant)
        .map(|item| item.head.id().to_string())
        .collect();
    if !dormant.is_empty() {
        let actor = caller.author.as_deref().unwrap_or("tool");
        memories.wake(&caller.caller.tenant, &dormant, actor).await;
    }
}

/// `memory_get {id}`: one record in full.
pub(super) async fn get(
    memories: &MemoryService,
    caller: &ToolCaller,
    release: &Release,
    input: &Value,
) -> Result<ToolResult, ToolResult> {
    let input = Input::new(GET, input, &["id"])?;
    let id = input.text("id")?;
    let Some(item) = readable_record(memories, caller, release, id) else {
        return Err(ToolResult::error(format!("memory_get: no record {:?} that you can read", shown_id(id))));
    };
    memories.note_accesses(&caller.caller.tenant, &[item.head.id().to_string()]);
    let body = with_bodies(GET, memories, vec![(Arc::clone(&item), ())]).await?.pop();
    wake(memories, caller, std::iter::once(&item)).await;
    let Some((record, ())) = body else {
        return Err(ToolResult::error(format!("memory_get: no record {:?} that you can read", shown_id(id))));
    };
    Ok(ToolResult::ok(listing("1 memory record.".into(), [line(&record, None, true)])))
}

/// `memory_list {type?, mine?, limit?, offset?}`: newest first.
pub(super) async fn list(
    memories: &MemoryService,
    caller: &ToolCaller,
    release: &Release,
    input: &Value,
) -> Result<ToolResult, ToolResult> {
    let input = Input::new(LIST, input, &["type", "mine", "limit", "offset"])?;
    let record_type = input.optional_text("type")?;
    let mine = input.boolean("mine")?;
    let limit = input.integer("limit", 1, LIST_MAX)?.unwrap_or(LIST_DEFAULT) as usize;
    let offset = input.integer("offset", 0, u64::from(u32::MAX))?.unwrap_or(0) as usize;
    if mine && caller.author.is_none() {
        return Err(ToolResult::error("memory_list: this caller writes no records, so none are its own"));
    }
    let Some(index) = memories.index().tenant(&caller.caller.tenant) else {
        return Ok(ToolResult::ok("No memory records."));
    };
    let mut records: Vec<Arc<IndexedRecord>> = {
        let index = index.read().unwrap_or_else(|p| p.into_inner());
        let mut trace = Trace::default();
        let visible = scope::visible(&index, &caller.caller, Detail::Off, &mut trace);
        let current =
            temporal::findable(&index, &visible, now_ms(), &release.funnel.schema_versions, &mut trace);
        current
            .iter()
            .filter_map(|slot| index.slots[slot as usize].clone())
            .filter(|item| record_type.is_none_or(|wanted| item.head.record_type() == wanted))
            .filter(|item| !mine || item.head.author() == caller.author.as_deref())
            .collect()
    };
    let total = records.len();
    records.sort_by(|a, b| {
        b.head.updated_at_ms.cmp(&a.head.updated_at_ms).then_with(|| a.head.id().cmp(b.head.id()))
    });
    let shown_items: Vec<(Arc<IndexedRecord>, ())> =
        records.iter().skip(offset).take(limit).map(|item| (Arc::clone(item), ())).collect();
    let bodies = with_bodies(LIST, memories, shown_items.clone()).await?;
    wake(memories, caller, shown_items.iter().map(|(item, _)| item)).await;
    let shown_items = bodies;
    let page: Vec<Value> = shown_items.iter().map(|(record, _)| line(record, None, false)).collect();
    if page.is_empty() {
        return Ok(ToolResult::ok(if total == 0 {
            "No memory records.".to_owned()
        } else {
            format!("No records past offset {offset} ({total} in all).")
        }));
    }
    let shown = page.len();
    let mut heading = format!("{total} memory record(s); {shown} shown from offset {offset}, newest first.");
    if offset + shown < total {
        heading.push_str(&format!(" For more, call memory_list with offset {}.", offset + shown));
    }
    Ok(ToolResult::ok(listing(heading, page)))
}
