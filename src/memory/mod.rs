//! Memory records: their shape (`record`), the checks on the way in (`envelope`), and the write
//! paths the admin API and the CLI share (`MemoryService`). The store keeps them; this module
//! decides what may be written.

pub mod envelope;
pub mod record;
pub mod transfer;

use crate::records::schemas::SchemaSet;
use crate::store::memories::{Change, Created, ListFilter};
use crate::store::{Store, StoreError};
use envelope::{Problem, Rules};
use record::{Record, Status, now_ms};
use serde_json::Value;
use std::sync::Arc;

/// Why a memory operation failed; the admin layer maps each to a status.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error("the record has {} problem(s)", .0.len())]
    Invalid(Vec<Problem>),
    #[error("no record `{0}` in this tenant")]
    NotFound(String),
    #[error(
        "revision conflict: If-Match said {expected}, the record is at revision {actual}; read it again and retry"
    )]
    Conflict { expected: i64, actual: i64 },
    #[error("a record with id `{0}` already exists; PATCH it to change it")]
    IdTaken(String),
    #[error(transparent)]
    Store(StoreError),
}

impl MemoryError {
    fn from_store(err: StoreError, id: &str) -> MemoryError {
        match err {
            StoreError::NotFound => MemoryError::NotFound(id.to_owned()),
            StoreError::RevisionConflict { expected, actual } => MemoryError::Conflict { expected, actual },
            StoreError::IdTaken(id) => MemoryError::IdTaken(id),
            other => MemoryError::Store(other),
        }
    }
}

#[derive(Clone)]
pub struct MemoryService {
    store: Store,
    schemas: Arc<SchemaSet>,
    max_content_bytes: usize,
}

impl MemoryService {
    pub fn new(store: Store, schemas: Arc<SchemaSet>, max_content_bytes: usize) -> MemoryService {
        MemoryService { store, schemas, max_content_bytes }
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    fn check(&self, input: &Value, now: i64) -> Result<record::Envelope, MemoryError> {
        let rules = Rules { schemas: &self.schemas, max_content_bytes: self.max_content_bytes, now_ms: now };
        envelope::check(input, &rules).map_err(MemoryError::Invalid)
    }

    pub async fn create(&self, tenant: &str, input: &Value, actor: &str) -> Result<Created, MemoryError> {
        let now = now_ms();
        let envelope = self.check(input, now)?;
        let new_id = format!("mem-{}", uuid::Uuid::new_v4().simple());
        self.store
            .create_memory(tenant, &envelope, &new_id, actor, now)
            .await
            .map_err(|err| MemoryError::from_store(err, envelope.id.as_deref().unwrap_or(&new_id)))
    }

    pub async fn get(&self, tenant: &str, id: &str) -> Result<Record, MemoryError> {
        self.store.get_memory(tenant, id).await.map_err(|err| MemoryError::from_store(err, id))
    }

    /// Applies a partial envelope; `if_match` is the revision the writer read.
    pub async fn update(
        &self,
        tenant: &str,
        id: &str,
        patch: &Value,
        if_match: Option<i64>,
        actor: &str,
    ) -> Result<Record, MemoryError> {
        let current = self.get(tenant, id).await?;
        if let Some(expected) = if_match {
            if expected != current.revision {
                return Err(MemoryError::Conflict { expected, actual: current.revision });
            }
        }
        let merged = envelope::merge_patch(&current.envelope_json(), patch).map_err(MemoryError::Invalid)?;
        let now = now_ms();
        let envelope = self.check(&merged, now)?;
        // The read revision guards the write too: a writer that slipped in between loses here.
        let expected = Some(if_match.unwrap_or(current.revision));
        self.store
            .update_memory(tenant, id, &envelope, expected, actor, now)
            .await
            .map_err(|err| MemoryError::from_store(err, id))
    }

    pub async fn set_status(
        &self,
        tenant: &str,
        id: &str,
        status: Status,
        actor: &str,
    ) -> Result<Record, MemoryError> {
        self.store
            .set_memory_status(tenant, id, status, actor, now_ms())
            .await
            .map_err(|err| MemoryError::from_store(err, id))
    }

    pub async fn delete(&self, tenant: &str, id: &str, actor: &str) -> Result<Record, MemoryError> {
        self.store
            .delete_memory(tenant, id, actor, now_ms())
            .await
            .map_err(|err| MemoryError::from_store(err, id))
    }

    pub async fn history(&self, tenant: &str, id: &str) -> Result<Vec<Change>, MemoryError> {
        let changes = self.store.memory_history(tenant, id).await.map_err(MemoryError::Store)?;
        if changes.is_empty() {
            // No history: either no such record, or `forget` erased every entry of a live one.
            self.get(tenant, id).await?;
        }
        Ok(changes)
    }

    pub async fn list(
        &self,
        tenant: &str,
        filter: &ListFilter,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Record>, MemoryError> {
        self.store.list_memories(tenant, filter, cursor, limit).await.map_err(MemoryError::Store)
    }

    /// Erases a scope's records and their history for good.
    pub async fn forget(&self, tenant: &str, scope: &str) -> Result<(u64, u64), MemoryError> {
        if !envelope::is_valid_scope(scope) {
            return Err(MemoryError::Invalid(vec![Problem::new(
                "$.scope",
                "invalid_value",
                "a scope is `public` or `kind:value`, e.g. `user:u-789`",
            )]));
        }
        self.store.forget_scope(tenant, scope).await.map_err(MemoryError::Store)
    }
}
