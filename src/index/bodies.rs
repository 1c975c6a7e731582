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

/// About how many bytes of memory `record` holds in the cache, as the allocator hands them out:
/// its strings, its JSON trees and the cache entry around it. An estimate for the bound, not an
/// account; measured against a heap profile (valgrind massif, docs/benchmarks.md) a small
/// knowledge-base record holds ~1 KB, most of it the one B-tree node its content object takes
/// however few fields it has: counting each node as 32 bytes made a 64 MB bound hold ~160 MB.
pub fn weight(record: &Record) -> u64 {
    let strings = [&record.tenant, &record.id, &record.record_type, &record.schema_version]
        .into_iter()
        .chain(&record.key)
        .chain(&record.author)
        .map(|s| allocation(s.len()))
        .sum::<u64>()
        + list(&record.scope)
        + list(&record.aliases);
    let metadata = object(record.metadata.iter());
    // The entry: the record behind its `Arc`, the key's own copies of tenant and id, and moka's
    // bookkeeping (its node in the access order and the frequency sketch), about 100 bytes.
    let entry = std::mem::size_of::<Record>() as u64
        + 16
        + allocation(record.tenant.len())
        + allocation(record.id.len())
        + 100;
    entry + strings + tree(&record.content) + metadata
}

/// What the allocator hands out for `len` bytes: a 16-byte-aligned chunk with its header, at
/// least 32 bytes (glibc); nothing for an empty string or vector.
fn allocation(len: usize) -> u64 {
    if len == 0 { 0 } else { (len as u64 + 8).next_multiple_of(16).max(32) }
}

/// A `Vec<String>`'s buffer and its strings.
fn list(items: &[String]) -> u64 {
    allocation(std::mem::size_of_val(items)) + items.iter().map(|s| allocation(s.len())).sum::<u64>()
}

/// Heap under a JSON value (the value itself sits in its parent).
fn tree(value: &Value) -> u64 {
    match value {
        Value::String(s) => allocation(s.len()),
        Value::Array(items) => {
            allocation(std::mem::size_of_val(items.as_slice())) + items.iter().map(tree).sum::<u64>()
        }
        Value::Object(map) => object(map.iter()),
        _ => 0,
    }
}

/// A `serde_json::Map` (a `BTreeMap<String, Value>`): empty, it allocates nothing; one leaf node
/// holds up to 11 entries and takes the same ~632 bytes with one; past that, nodes are between
/// half and wholly full.
fn object<'a>(entries: impl ExactSizeIterator<Item = (&'a String, &'a Value)>) -> u64 {
    const NODE: u64 = 11 * (std::mem::size_of::<String>() + std::mem::size_of::<Value>()) as u64 + 16;
    let nodes = match entries.len() {
        0 => 0,
        1..=11 => 1,
        len => len.div_ceil(8),
    } as u64;
    let inner: u64 = entries.map(|(k, v)| allocation(k.len()) + tree(v)).sum();
    allocation(NODE as usize) * nodes + inner
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_small_records_weight_counts_the_node_its_content_object_takes() {
        let small = weight(&Record::test_fact("kb-1", json!({"statement": "Refunds take 5 days."})));
        // The B-tree leaf alone is 11 entries of 56 bytes, whatever the object holds.
        assert!(small >= 616 + std::mem::size_of::<Record>() as u64, "{small}");
        let twelve: serde_json::Map<String, Value> = (0..12).map(|i| (format!("f{i}"), json!(i))).collect();
        assert!(weight(&Record::test_fact("kb-2", Value::Object(twelve))) > small + 616);
    }

    #[test]
    fn the_cache_holds_about_its_bound_in_records() {
        let one = weight(&Record::test_fact("kb-0000", json!({"statement": "Refunds take 5 days."})));
        let bodies = Bodies::with_capacity(10 * one);
        for i in 0..100 {
            bodies.insert(Arc::new(Record::test_fact(
                &format!("kb-{i:04}"),
                json!({"statement": "Refunds take 5 days."}),
            )));
        }
        assert!(bodies.len() <= 10, "{}", bodies.len());
    }
}
