//! A bounded cache of query embeddings, keyed by the SHA-256 of the query text (so a long user
//! turn costs 32 bytes of key, not its length).
//!
//! LRU-ish with two generations: lookups go to `recent`, then `older` (a hit there is moved back
//! into `recent`); when `recent` holds half the capacity it becomes `older` and the previous
//! `older` is dropped. So at most `capacity` entries are kept, every operation is O(1), and what
//! was used within the last half-capacity insertions always survives.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use sha2::{Digest, Sha256};

type Key = [u8; 32];

pub(super) struct QueryCache {
    half: usize,
    generations: Mutex<Generations>,
}

#[derive(Default)]
struct Generations {
    recent: HashMap<Key, Arc<[f32]>>,
    older: HashMap<Key, Arc<[f32]>>,
}

impl QueryCache {
    /// `capacity` 0 turns the cache off.
    pub(super) fn new(capacity: usize) -> Self {
        QueryCache { half: capacity.div_ceil(2), generations: Mutex::new(Generations::default()) }
    }

    pub(super) fn get(&self, text: &str) -> Option<Arc<[f32]>> {
        if self.half == 0 {
            return None;
        }
        let key = key(text);
        let mut g = self.lock();
        if let Some(hit) = g.recent.get(&key) {
            return Some(hit.clone());
        }
        let hit = g.older.remove(&key)?;
        self.put(&mut g, key, hit.clone());
        Some(hit)
    }

    /// Stores `vector` for `text` and returns the cached value: the one already there if a
    /// concurrent caller stored it first, so every caller sees the same `Arc`.
    pub(super) fn insert(&self, text: &str, vector: Arc<[f32]>) -> Arc<[f32]> {
        if self.half == 0 {
            return vector;
        }
        let key = key(text);
        let mut g = self.lock();
        if let Some(existing) = g.recent.get(&key) {
            return existing.clone();
        }
        let value = g.older.remove(&key).unwrap_or(vector);
        self.put(&mut g, key, value.clone());
        value
    }

    fn put(&self, g: &mut Generations, key: Key, value: Arc<[f32]>) {
        if g.recent.len() >= self.half {
            g.older = std::mem::take(&mut g.recent);
        }
        g.recent.insert(key, value);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Generations> {
        // The maps hold no invariant a panic could break halfway.
        self.generations.lock().unwrap_or_else(PoisonError::into_inner)
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        let g = self.lock();
        g.recent.len() + g.older.len()
    }
}

fn key(text: &str) -> Key {
    Sha256::digest(text.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(x: f32) -> Arc<[f32]> {
        Arc::from(vec![x])
    }

    #[test]
    fn bounded_and_keeps_recent_entries() {
        let cache = QueryCache::new(4);
        for i in 0..100 {
            cache.insert(&format!("q{i}"), v(i as f32));
            assert!(cache.len() <= 4);
        }
        assert_eq!(cache.get("q99").as_deref(), Some(&[99.0][..]));
        assert_eq!(cache.get("q98").as_deref(), Some(&[98.0][..]));
        assert!(cache.get("q0").is_none());
    }

    #[test]
    fn a_hit_in_the_older_generation_survives_the_next_swap() {
        let cache = QueryCache::new(4);
        cache.insert("a", v(1.0));
        cache.insert("b", v(2.0));
        cache.insert("c", v(3.0)); // a, b move to the older generation
        assert!(cache.get("a").is_some()); // back into the recent one
        cache.insert("d", v(4.0));
        cache.insert("e", v(5.0));
        assert!(cache.get("a").is_some());
        assert!(cache.get("b").is_none());
    }

    #[test]
    fn concurrent_inserts_agree_on_one_arc() {
        let cache = QueryCache::new(8);
        let first = cache.insert("q", v(1.0));
        let second = cache.insert("q", v(1.0));
        assert!(Arc::ptr_eq(&first, &second));
    }

    #[test]
    fn capacity_zero_is_off() {
        let cache = QueryCache::new(0);
        cache.insert("q", v(1.0));
        assert!(cache.get("q").is_none());
    }
}
