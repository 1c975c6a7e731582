//! Passthrough mode: which callers' Anthropic keys the upstream has accepted.
//!
//! memgate cannot check an Anthropic key itself, and the memory step (an embedding run, the
//! funnel) comes before the upstream sees the key. Spending that work on any string sent as
//! `x-api-key` would let a flood of made-up keys and unique texts saturate the embedder, and the
//! answer's memory headers would tell an unauthenticated prober whether a public record matches
//! a text. So memory is recalled only for a key that earned a 2xx from the upstream: a key seen
//! for the first time is checked with one cheap upstream call (`proxy::verify`), and any 2xx
//! answer to the caller's own requests counts too. Only a digest of the key is kept, for
//! `ACCEPTED_FOR`, in a bounded map; a 401 from the upstream forgets the key at once.

use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long an accepted key counts as accepted without a new 2xx.
const ACCEPTED_FOR: Duration = Duration::from_secs(3600);
/// The most keys remembered.
const CAPACITY: usize = 100_000;

/// The first 16 bytes of the key's SHA-256: enough to tell keys apart, useless to recover one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyDigest([u8; 16]);

impl KeyDigest {
    pub fn of(key: &str) -> KeyDigest {
        let full = Sha256::digest(key.as_bytes());
        let mut digest = [0u8; 16];
        digest.copy_from_slice(&full[..16]);
        KeyDigest(digest)
    }

    /// Hex, for rate-limit keys.
    pub fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

#[derive(Default)]
pub struct AcceptedKeys {
    seen: Mutex<HashMap<KeyDigest, Instant>>,
}

impl AcceptedKeys {
    pub fn contains(&self, key: &KeyDigest) -> bool {
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.get(key).is_some_and(|at| at.elapsed() < ACCEPTED_FOR)
    }

    /// The upstream answered this key with a 2xx.
    pub fn accept(&self, key: KeyDigest) {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.len() >= CAPACITY && !seen.contains_key(&key) {
            seen.retain(|_, at| at.elapsed() < ACCEPTED_FOR);
            if seen.len() >= CAPACITY {
                // Still full of live keys: drop the oldest tenth rather than refuse new ones.
                let mut ages: Vec<Instant> = seen.values().copied().collect();
                ages.sort_unstable();
                let cutoff = ages[ages.len() / 10];
                seen.retain(|_, at| *at > cutoff);
            }
        }
        seen.insert(key, Instant::now());
    }

    /// The upstream refused this key (401): forget it.
    pub fn forget(&self, key: &KeyDigest) {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_counts_once_accepted_and_until_refused() {
        let keys = AcceptedKeys::default();
        let digest = KeyDigest::of("sk-ant-real");
        assert!(!keys.contains(&digest));
        keys.accept(digest);
        assert!(keys.contains(&digest));
        assert!(!keys.contains(&KeyDigest::of("sk-ant-other")));
        keys.forget(&digest);
        assert!(!keys.contains(&digest));
    }

    #[test]
    fn the_map_stays_bounded() {
        let keys = AcceptedKeys::default();
        for i in 0..(CAPACITY + 5_000) {
            keys.accept(KeyDigest::of(&i.to_string()));
        }
        assert!(keys.seen.lock().unwrap().len() <= CAPACITY);
        assert!(keys.contains(&KeyDigest::of(&(CAPACITY + 4_999).to_string())), "the newest stays");
    }
}
