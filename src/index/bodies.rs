//! Record bodies beside the index. The index keeps what the four layers, the tools' filters and
//! the sync read of each record (`RecordHead`), not its content, aliases and metadata: at a
//! million customer profiles the bodies as `serde_json::Value` trees were most of a replica's
//! memory, and a request renders only the few records it injects. Those come from this cache,
//! and what it does not hold from the store (`MemoryService::bodies`).
//!
//! Entries are keyed by (tenant, id, revision): a body is only ever served for the revision the
//! index ranked, so an update can never be answered with the old content from here, and another
//! tenant's record of the same id is another key. The cache is bounded by an estimate of the
//! bytes its records hold (`[memory] body_cache_mb`), least-recently-used entries go first
//! (moka's TinyLFU); a removal from the index drops the removed revision's body at once, so a
//! forgotten record's content does not outlive it here.

use crate::record::Record;
use moka::sync::Cache;
use serde_json::Value;
use std::sync::Arc;

/// The default bound (`[memory] body_cache_mb`'s).
pub const DEFAULT_BYTES: u64 = crate::config::memory::DEFAULT_BODY_CACHE_BYTES;

type Key = (String, String, i64);

/// The bounded cache of record bodies; cheap to clone (one cache).
#[derive(Clone)]
pub struct Bodies {
    cache: Cache<Key, Arc<Record>>,
    capacity: u64,
}

impl Default for Bodies {
    fn default() -> Self {
        Bodies::with_capacity(DEFAULT_BYTES)
    }
}

impl Bodies {
    /// A cache holding records up to about `bytes` of memory (0: none is kept).
    pub fn with_capacity(bytes: u64) -> Bodies {
        let cache = Cache::builder()
            .max_capacity(bytes)
            .weigher(|_key: &Key, record: &Arc<Record>| u32::try_from(weight(record)).unwrap_or(u32::MAX))
            .build();
        Bodies { cache, capacity: bytes }
    }

    /// The bound it was built with, in bytes.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The body of `record`'s revision, if held.
    pub fn get(&self, tenant: &str, id: &str, revision: i64) -> Option<Arc<Record>> {
        self.cache.get(&(tenant.to_owned(), id.to_owned(), revision))
    }

    pub fn insert(&self, record: Arc<Record>) {
        if self.capacity == 0 {
            return;
        }
        let key = (record.tenant.clone(), record.id.clone(), record.revision);
        self.cache.insert(key, record);
    }

    pub fn remove(&self, tenant: &str, id: &str, revision: i64) {
        self.cache.invalidate(&(tenant.to_owned(), id.to_owned(), revision));
    }

    /// Drops everything (a full reload replaces the index, and with it what the bodies belong to).
    pub fn clear(&self) {
        self.cache.invalidate_all();
    }

    /// How many bodies it holds (after pending evictions are applied).
    pub fn len(&self) -> u64 {
        self.cache.run_pending_tasks();
        self.cache.entry_count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// About how many bytes of heap `record` holds: its strings, and its JSON trees at a node's
/// size (32 B, `serde_json::Value`) plus their text. An estimate for the bound, not an account.
pub fn weight(record: &Record) -> u64 {
    const NODE: u64 = 32;
    fn tree(value: &Value) -> u64 {
        NODE + match value {
            Value::String(s) => s.len() as u64,
            Value::Array(items) => items.iter().map(tree).sum(),
            Value::Object(map) => map.iter().map(|(k, v)| NODE + k.len() as u64 + tree(v)).sum(),
            _ => 0,
        }
    }
    let strings = [&record.tenant, &record.id, &record.record_type, &record.schema_version]
        .iter()
        .map(|s| s.len() as u64)
        .sum::<u64>()
        + record.key.as_ref().map_or(0, |k| k.len() as u64)
        + record.author.as_ref().map_or(0, |a| a.len() as u64)
        + record.scope.iter().chain(&record.aliases).map(|s| NODE + s.len() as u64).sum::<u64>();
    let metadata: u64 = record.metadata.iter().map(|(k, v)| NODE + k.len() as u64 + tree(v)).sum();
    std::mem::size_of::<Record>() as u64 + strings + tree(&record.content) + metadata
}
