//! What a candidate that passed the gates becomes: a record in the exchange's scope (the
//! caller's own write scope, `NewExchange::scope`) and nowhere else, through the checks every
//! write passes (`MemoryService`, `memory::writers`), with its provenance, under the exchange's
//! claim (`store::observer::Claim`: once a forget of the scope removed the exchange, nothing is
//! written).
//!
//! - Its id is derived from the exchange, its position and content (`record_id`): a run of the same
//!   exchange again (its replica died before finishing it) finds the record it wrote, and writes
//!   nothing twice.
//! - Dedup: a live record of the scope that it repeats (the same content, or nearly: the
//!   dedupe threshold, as any write) is refreshed when the observer wrote it — `metadata.observed`
//!   counts the sightings and names the last request — instead of getting a twin; a repeat of
//!   another writer's record is dropped and that record left as it is.
//! - Supersede: a candidate with a `key` that a live record of the observer's own holds (same
//!   type) replaces it in place under `write` (revision + 1, the old revision kept in the
//!   record's history, the new revision valid from now). Otherwise — under `propose`, or when the
//!   record holding the key is anyone else's (an operator's profile, an agent's note), under
//!   `write` too — the live record stays as it is until a person decides: the candidate is
//!   proposed beside it without the key, naming the record it would replace
//!   (`metadata.observer.supersedes`), and approving it (`POST …/activate`) supersedes then. The
//!   store checks the same ownership rule on the record a key supersedes, in the write's
//!   transaction (`writers::admit`), so a record written meanwhile is not taken over either.

use super::gates::{Candidate, Dropped};
use crate::clock::{format_ms, now_ms};
use crate::memory::{Bounds, MemoryError, MemoryService, Writer};
use crate::record::{Provenance, Status, WriterKind, canonical_json};
use crate::store::StoreError;
use crate::store::memories::{Created, ListFilter};
use crate::store::observer::{Claim, NewExchange};
use serde_json::{Map, Value, json};

/// Who the observer's records name as author and actor.
pub const AUTHOR: &str = "observer";

/// The types the observer writes: those an agent may (`memory::writers`).
static TYPES: std::sync::LazyLock<Vec<String>> =
    std::sync::LazyLock::new(|| crate::record::AGENT_TYPES.map(str::to_owned).to_vec());

/// The observer as a writer: bounded like an agent to `scope` and the agents' types (nothing it
/// writes acts, or is priority 5), changing only its own records, with the exchange's
/// provenance (the request, the person, the words it rests on), while `claim` holds.
fn observer_writer<'a>(
    exchange: &NewExchange,
    scope: &'a str,
    evidence: Option<&str>,
    claim: &'a Claim,
) -> Writer<'a> {
    let provenance = Provenance::new(WriterKind::Observer, None)
        .with_request(Some(exchange.request_id.clone()))
        .with_subject(Some(exchange.subject.clone()))
        .with_evidence(evidence.map(|e| Value::String(e.to_owned())));
    Writer {
        actor: AUTHOR,
        author: Some(AUTHOR),
        provenance,
        write_any: false,
        bounds: Some(Bounds { scope, types: &TYPES }),
        claim: Some(claim),
    }
}

/// A written candidate: what happened, and to which record.
#[derive(Debug, Clone, PartialEq)]
pub struct Kept {
    /// `written`, `refreshed` or `superseded`.
    pub verdict: &'static str,
    /// `kept`, `dedup` or `supersede`.
    pub gate: &'static str,
    pub reason: String,
    pub record_id: String,
}

/// Why writing failed: a gate refused it (the envelope check), memory was unavailable (the
/// exchange is tried again later), or the exchange's claim was gone (its scope was forgotten
/// meanwhile: nothing more is written for it).
pub enum Failed {
    Dropped(Dropped),
    Unavailable(String),
    Fenced,
}

/// The record id the candidate at `position` of `exchange` gets.
pub fn record_id(exchange: &NewExchange, position: i64, candidate: &Candidate) -> String {
    let text =
        format!("{}\u{0}{}\u{0}{position}\u{0}{}", exchange.tenant, exchange.id, candidate.record_type);
    let digest = crate::hash::sha256_hex(format!("{text}\u{0}{}", canonical_json(&candidate.content)));
    format!("obs-{}", &digest[..24])
}

/// The envelope a candidate is written as.
pub fn envelope(
    exchange: &NewExchange,
    position: i64,
    candidate: &Candidate,
    schema_version: &str,
    model: &str,
) -> Value {
    let status = if exchange.mode == "write" { Status::Active } else { Status::Proposed };
    let mut metadata = Map::new();
    metadata.insert("source".into(), json!("observer"));
    metadata.insert(
        "observer".into(),
        json!({
            "request_id": exchange.request_id,
            "release": exchange.release,
            "model": model,
            "evidence": candidate.evidence,
            "confidence": candidate.confidence,
            "exchange_id": exchange.id,
        }),
    );
    let mut envelope = json!({
        "id": record_id(exchange, position, candidate),
        "type": candidate.record_type,
        "schema_version": schema_version,
        "scope": [exchange.scope],
        "content": candidate.content,
        "status": status.as_str(),
        "valid_from": format_ms(now_ms()),
        "metadata": metadata,
    });
    if let Some(key) = &candidate.key {
        envelope["key"] = json!(key);
    }
    envelope
}

fn unavailable(err: MemoryError) -> Failed {
    match err {
        MemoryError::Invalid(problems) => Failed::Dropped(super::gates::envelope_problems(&problems)),
        MemoryError::Store(StoreError::Fenced) => Failed::Fenced,
        other => Failed::Unavailable(other.to_string()),
    }
}

/// Writes one candidate that passed the gates, while `claim` holds.
pub async fn write(
    memories: &MemoryService,
    exchange: &NewExchange,
    position: i64,
    candidate: &Candidate,
    schema_version: &str,
    model: &str,
    claim: &Claim,
) -> Result<Kept, Failed> {
    let tenant = &exchange.tenant;
    let scope = exchange.scope.as_str();
    let writer = observer_writer(exchange, scope, Some(&candidate.evidence), claim);
    let mut input = envelope(exchange, position, candidate, schema_version, model);
    let id = record_id(exchange, position, candidate);
    let checked = memories.check_write(&input).map_err(unavailable)?;
    // Written by an earlier run of this exchange.
    if let Ok(record) = memories.get(tenant, &id).await {
        return Ok(Kept {
            verdict: "written",
            gate: "kept",
            reason: format!(
                "written as {} {} (by an earlier run of this exchange)",
                record.status.as_str(),
                record.record_type
            ),
            record_id: record.id,
        });
    }
    if let Some(key) = &candidate.key {
        let filter =
            ListFilter { key: Some(key.clone()), scope: Some(scope.to_owned()), ..ListFilter::default() };
        let holders = memories.list(tenant, &filter, None, 10).await.map_err(unavailable)?;
        if let Some(holder) = holders.into_iter().find(|r| r.scope == [scope]) {
            if holder.content == candidate.content && holder.record_type == candidate.record_type {
                return repeat(memories, exchange, &holder, "it repeats the live record with its key", claim)
                    .await;
            }
            // In place only over its own record of the same type, never one an operator withdrew;
            // under `propose` only over its own proposal.
            let replaces = is_own(&holder)
                && holder.record_type == candidate.record_type
                && !matches!(holder.status, Status::Paused | Status::Archived)
                && (exchange.mode == "write" || holder.status == Status::Proposed);
            if !replaces {
                // The live record stays until a person approves the replacement.
                if let Some(object) = input.as_object_mut() {
                    object.remove("key");
                }
                input["status"] = json!(Status::Proposed.as_str());
                input["metadata"]["observer"]["supersedes"] = json!({"id": holder.id, "key": key});
                let created = memories.create_as(tenant, &input, &writer).await.map_err(unavailable)?;
                if let Created::ExactRepeat(existing) = &created {
                    return repeat(
                        memories,
                        exchange,
                        existing,
                        "it repeats a proposal waiting for review",
                        claim,
                    )
                    .await;
                }
                let record = created_record(created);
                return Ok(Kept {
                    verdict: "written",
                    gate: "supersede",
                    reason: format!("proposed to replace {} (key {key}) once approved", holder.id),
                    record_id: record.id,
                });
            }
            let created = memories.create_as(tenant, &input, &writer).await.map_err(unavailable)?;
            let record = created_record(created);
            return Ok(Kept {
                verdict: "superseded",
                gate: "supersede",
                reason: format!(
                    "replaced revision {} of {} (key {key}); the old revision is in its history",
                    holder.revision, holder.id
                ),
                record_id: record.id,
            });
        }
    }
    if let Some((twin, _)) = memories.twin_of(tenant, &checked).await.map_err(unavailable)? {
        return repeat(memories, exchange, &twin, "it repeats a live record of this person", claim).await;
    }
    match memories.create_as(tenant, &input, &writer).await {
        Ok(created) => {
            let record = created_record(created);
            Ok(Kept {
                verdict: "written",
                gate: "kept",
                reason: format!("written as {} {}", record.status.as_str(), record.record_type),
                record_id: record.id,
            })
        }
        Err(MemoryError::IdTaken(id)) => Ok(Kept {
            verdict: "written",
            gate: "kept",
            reason: "written by an earlier run of this exchange".to_owned(),
            record_id: id,
        }),
        Err(err) => Err(unavailable(err)),
    }
}

/// Whether the observer wrote `record`'s live version.
fn is_own(record: &crate::record::Record) -> bool {
    record.author.as_deref() == Some(AUTHOR)
}

/// A candidate that repeats `existing`: the observer's own record is refreshed; anyone else's
/// is left as it is (the observer changes only what it wrote), and the candidate dropped.
async fn repeat(
    memories: &MemoryService,
    exchange: &NewExchange,
    existing: &crate::record::Record,
    why: &str,
    claim: &Claim,
) -> Result<Kept, Failed> {
    if !is_own(existing) {
        return Err(Failed::Dropped(Dropped {
            gate: "dedup",
            reason: format!("{why}, which another writer wrote: {} is left as it is", existing.id),
        }));
    }
    refresh(memories, exchange, &existing.id, why, claim).await
}

fn created_record(created: Created) -> crate::record::Record {
    match created {
        Created::New(record)
        | Created::Superseded(record)
        | Created::ExactRepeat(record)
        | Created::Deduplicated { record, .. } => record,
    }
}

/// A repeat: the existing record's `metadata.observed` says it was seen again (how often, and
/// the last request), and its `updated_at` moves; its content and status stay.
async fn refresh(
    memories: &MemoryService,
    exchange: &NewExchange,
    id: &str,
    why: &str,
    claim: &Claim,
) -> Result<Kept, Failed> {
    let current = memories.get(&exchange.tenant, id).await.map_err(unavailable)?;
    let seen =
        current.metadata.get("observed").and_then(|o| o.get("count")).and_then(Value::as_u64).unwrap_or(0);
    // A patch replaces `metadata` whole: the rest of it goes along unchanged.
    let mut metadata = current.metadata.clone();
    metadata.insert(
        "observed".into(),
        json!({"count": seen + 1, "last_request_id": exchange.request_id, "last_seen": format_ms(now_ms())}),
    );
    let patch = json!({"metadata": metadata});
    let writer = observer_writer(exchange, &exchange.scope, None, claim);
    let record = memories
        .update_as(&exchange.tenant, id, &patch, Some(current.revision), &writer)
        .await
        .map_err(unavailable)?;
    Ok(Kept {
        verdict: "refreshed",
        gate: "dedup",
        reason: format!("{why}: refreshed {}", record.id),
        record_id: record.id,
    })
}
