//! Verified JWTs, remembered until they expire, so a caller's tenth request with the same token
//! costs a hash and a lookup instead of a signature check (RS256 ~0.14 ms, ES256 ~0.4 ms on the
//! development machine; docs/benchmarks.md).
//!
//! Keyed by the SHA-256 of the whole token, so only the very token that verified hits. An entry
//! is good until the token's `exp` (plus the configured leeway, as the full check allows) and
//! only for the key set it was verified with: every key reload bumps the generation, and older
//! entries stop counting, so a rotated-out key stops working at once. Only successes are kept.
//! Bounded: when full, expired entries go; if that frees nothing, everything goes.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;

/// Enough for every active user of a large deployment; ~1 KB each.
pub const CAPACITY: usize = 10_000;

pub type TokenDigest = [u8; 32];

pub fn digest(token: &str) -> TokenDigest {
    Sha256::digest(token.as_bytes()).into()
}

struct Entry {
    claims: Map<String, Value>,
    /// Unix seconds until which the token still verifies (its `exp` plus the leeway).
    good_until: i64,
    generation: u64,
}

pub struct TokenCache {
    entries: Mutex<HashMap<TokenDigest, Entry>>,
    capacity: usize,
}

impl TokenCache {
    pub fn new(capacity: usize) -> TokenCache {
        TokenCache { entries: Mutex::new(HashMap::new()), capacity }
    }

    /// The claims of a token verified earlier with key set `generation`, if still good at `now`.
    pub fn get(&self, digest: &TokenDigest, now: i64, generation: u64) -> Option<Map<String, Value>> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries
            .get(digest)
            .filter(|e| e.generation == generation && now < e.good_until)
            .map(|e| e.claims.clone())
    }

    pub fn put(
        &self,
        digest: TokenDigest,
        claims: Map<String, Value>,
        good_until: i64,
        now: i64,
        generation: u64,
    ) {
        if self.capacity == 0 || good_until <= now {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() >= self.capacity {
            entries.retain(|_, e| e.generation == generation && now < e.good_until);
            if entries.len() >= self.capacity {
                entries.clear();
            }
        }
        entries.insert(digest, Entry { claims, good_until, generation });
    }

    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn claims(sub: &str) -> Map<String, Value> {
        serde_json::json!({"sub": sub}).as_object().unwrap().clone()
    }

    #[test]
    fn a_token_is_good_until_it_expires_and_only_for_its_key_set() {
        let cache = TokenCache::new(10);
        let token = digest("header.payload.signature");
        cache.put(token, claims("u-1"), 1_000, 900, 7);
        assert_eq!(cache.get(&token, 999, 7), Some(claims("u-1")));
        assert_eq!(cache.get(&token, 1_000, 7), None, "expired");
        assert_eq!(cache.get(&token, 999, 8), None, "the keys changed since");
        assert_eq!(cache.get(&digest("header.payload.signaturf"), 999, 7), None, "another token");
    }

    #[test]
    fn expired_tokens_are_not_kept_and_a_full_cache_makes_room() {
        let cache = TokenCache::new(3);
        cache.put(digest("old"), claims("old"), 100, 100, 1);
        assert!(cache.is_empty(), "a token already expired is not kept");
        for (i, good_until) in [(0, 150), (1, 5_000), (2, 5_000)] {
            cache.put(digest(&format!("t{i}")), claims("u"), good_until, 100, 1);
        }
        // Full: the entry that expired by now goes, the live ones stay.
        cache.put(digest("t3"), claims("u"), 5_000, 200, 1);
        assert_eq!(cache.len(), 3);
        assert!(cache.get(&digest("t1"), 200, 1).is_some() && cache.get(&digest("t3"), 200, 1).is_some());
        // Full of live entries: everything goes rather than the cache growing.
        cache.put(digest("t4"), claims("u"), 5_000, 200, 1);
        assert_eq!(cache.len(), 1);
        assert!(cache.get(&digest("t4"), 200, 1).is_some());
    }
}
