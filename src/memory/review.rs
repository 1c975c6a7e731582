//! Review: records written as `proposed` (agents under `agent_writes = "proposed"`, the observer
//! under `observe = "propose"`) wait for an operator, who approves them as they are, edits then
//! approves them in one write (every write check applies), or rejects them (deleted; the history
//! keeps what was proposed and who rejected it). Bulk calls take a bounded list and answer each
//! id on its own: one bad id does not stop the others.
//!
//! Bulk approval takes only what awaits review (`proposed`) or sleeps (`dormant`), compared and
//! set in the store: a selection made before someone paused or archived a record must not bring
//! it back. One record's own approval (`POST …/{id}/activate`, `approve`) is an operator naming
//! it, and is also how a paused or archived record comes back (the contract's status changes).

use super::{MemoryError, MemoryService};
use crate::record::{Record, Status};
use serde_json::Value;

/// The most ids one bulk review call takes.
pub const MAX_BULK: usize = 100;

/// What an operator decided about proposed records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Make active a `proposed` or `dormant` record; any other is refused (`StatusConflict`).
    Approve,
    /// Delete, only if the record is still `proposed`: a stale list cannot delete a live record.
    Reject,
}

impl MemoryService {
    /// Approves one record, with `edits` (a partial envelope, as a PATCH takes) applied in the
    /// same write when given. `if_match` guards the edit as it guards a PATCH. From any status:
    /// an operator naming one record also resumes it from a pause or an archive.
    pub async fn approve(
        &self,
        tenant: &str,
        id: &str,
        edits: Option<&Value>,
        if_match: Option<i64>,
        actor: &str,
    ) -> Result<Record, MemoryError> {
        let Some(edits) = edits.filter(|edits| !edits.is_null()) else {
            return self.set_status(tenant, id, Status::Active, actor).await;
        };
        let Value::Object(patch) = edits else {
            return Err(MemoryError::Invalid(vec![super::checks::envelope::Problem::new(
                "$",
                "invalid_type",
                "the edits are a JSON object of the fields to change, as PATCH takes",
            )]));
        };
        let mut patch = patch.clone();
        patch.insert("status".into(), Value::String(Status::Active.as_str().into()));
        self.update(tenant, id, &Value::Object(patch), if_match, actor).await
    }

    /// Approves `id` only if it awaits review or sleeps; a paused or archived one keeps its
    /// status, and the error says how an operator brings it back on purpose.
    async fn approve_awaiting(&self, tenant: &str, id: &str, actor: &str) -> Result<Record, MemoryError> {
        self.change_status(tenant, id, &[Status::Proposed, Status::Dormant], Status::Active, actor)
            .await
            .map_err(|err| match err {
                MemoryError::StatusConflict { id, actual, .. } => MemoryError::StatusConflict {
                    expected: format!(
                        "proposed or dormant (bulk activation approves what awaits review or sleeps; a {actual} record comes back with its own POST /admin/v1/memories/{id}/activate)"
                    ),
                    id,
                    actual,
                },
                other => other,
            })
    }

    /// Rejects one proposed record: deletes it, its history kept.
    pub async fn reject(&self, tenant: &str, id: &str, actor: &str) -> Result<Record, MemoryError> {
        let current = self.get(tenant, id).await?;
        if current.status != Status::Proposed {
            return Err(MemoryError::NotProposed { id: id.to_owned(), status: current.status.as_str() });
        }
        self.delete(tenant, id, actor).await
    }

    /// Decides about each of `ids` (at most `MAX_BULK`, checked by the caller), in order; each
    /// answered on its own.
    pub async fn review(
        &self,
        tenant: &str,
        ids: &[String],
        decision: Decision,
        actor: &str,
    ) -> Vec<(String, Result<Record, MemoryError>)> {
        let mut results = Vec::with_capacity(ids.len());
        for id in ids {
            let result = match decision {
                Decision::Approve => self.approve_awaiting(tenant, id, actor).await,
                Decision::Reject => self.reject(tenant, id, actor).await,
            };
            results.push((id.clone(), result));
        }
        results
    }
}
