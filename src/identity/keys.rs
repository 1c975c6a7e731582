//! Gateway keys: `mgk_<id>_<secret>`. The id is public and indexes the key; the secret (256 random
//! bits) is stored only as its SHA-256 and compared in constant time. Verified keys are cached for
//! a few seconds so the request path does not touch the database on every call.
//!
//! Revocation: the revoking replica drops its cache entry at once and tells the others through
//! the change fan-out (`Topic::Keys`), which drop their whole cache; without Redis they see it
//! within `CACHE_TTL`. While the database is unreachable a key verified here goes on working for
//! `stale_grace` after it was last read (`auth.stale_key_grace_secs`, 60 s by default, never less
//! than `CACHE_TTL`): a replica cut off from the database and from Redis cannot learn of a
//! revocation made elsewhere, so this is how long it may honour a revoked key, and how long its
//! callers ride out a database outage. The cache carries an epoch that every revocation bumps, and a lookup that
//! read the store before a revocation may not put its (now stale) answer into the cache after
//! it: otherwise a verification racing a revocation could bring the revoked key back for
//! another `CACHE_TTL`.

use crate::clock::now_ms;
use crate::error::{Code, ErrorCode};
use crate::hash::sha256_hex;
use crate::record::is_valid_scope;
use crate::store::keys::KeyRecord;
use crate::store::{Store, StoreError};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use subtle::ConstantTimeEq;

/// Every gateway key starts with this.
pub const KEY_PREFIX: &str = "mgk_";
const CACHE_TTL: Duration = Duration::from_secs(5);
pub use crate::config::auth::DEFAULT_STALE_GRACE;
const CACHE_MAX: usize = 10_000;

/// What a key may do beyond reading its own scopes' records. `batches`, `files` and
/// `upstream_other` open `/v1/*` paths beyond Messages and models in managed mode, where every
/// tenant's requests share memgate's one upstream key and so its workspace (docs/operations.md).
/// `memory_read_tools`, `memory_write_tools` and `memory_write_any` give the key memgate's memory
/// tools, and `memory_tool_backend` lets memgate execute Anthropic's memory tool for the key
/// (docs/memory-tools.md). `observe` lets memgate learn from the key's finished exchanges where
/// the release observes (docs/observation.md).
pub const PERMISSIONS: [&str; 11] = [
    "pin_release",
    "assert_subject",
    "debug",
    "batches",
    "files",
    "upstream_other",
    "memory_read_tools",
    "memory_write_tools",
    "memory_write_any",
    "memory_tool_backend",
    "observe",
];

/// A request to issue a key.
#[derive(Debug, Clone)]
pub struct NewKey {
    pub tenant: String,
    pub name: String,
    pub scopes: Vec<String>,
    pub permissions: Vec<String>,
    pub rate_limit_per_minute: Option<u32>,
}

/// Why a key could not be issued: named so the admin can fix it.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl ErrorCode for KeyError {
    fn error_code(&self) -> Code {
        match self {
            KeyError::Invalid(_) => Code::InvalidRequest,
            KeyError::Store(err) => err.error_code(),
        }
    }

    fn public_message(&self) -> String {
        match self {
            KeyError::Invalid(message) => message.clone(),
            KeyError::Store(err) => err.public_message(),
        }
    }

    fn retry_after_secs(&self) -> Option<u64> {
        match self {
            KeyError::Invalid(_) => None,
            KeyError::Store(err) => err.retry_after_secs(),
        }
    }
}

pub struct GatewayKeys {
    store: Store,
    cache: Mutex<KeyCache>,
    /// How long after it was read from the store a cached answer still counts while the store
    /// is unreachable (see the module comment).
    stale_grace: Duration,
}

#[derive(Default)]
struct KeyCache {
    entries: HashMap<String, (Option<KeyRecord>, Instant)>,
    /// Bumped by every revocation seen here; see the module comment.
    epoch: u64,
    /// Until when the store is taken as unreachable: stale entries answer without asking it, so
    /// an outage costs each caller one failed lookup, not one per request.
    store_down_until: Option<Instant>,
}

/// How long a lookup that found the store unreachable makes the next ones skip it.
const STORE_RETRY_AFTER: Duration = Duration::from_secs(2);

impl GatewayKeys {
    pub fn new(store: Store) -> GatewayKeys {
        GatewayKeys { store, cache: Mutex::new(KeyCache::default()), stale_grace: DEFAULT_STALE_GRACE }
    }

    /// How long a verified key keeps working while the database is unreachable (at least
    /// `CACHE_TTL`, for which any cached answer counts anyway).
    pub fn with_stale_grace(mut self, grace: Duration) -> GatewayKeys {
        self.stale_grace = grace.max(CACHE_TTL);
        self
    }

    /// Issues a key; the returned secret is shown once and never stored.
    pub async fn issue(&self, new: &NewKey) -> Result<(KeyRecord, String), KeyError> {
        for scope in &new.scopes {
            if !is_valid_scope(scope) {
                return Err(KeyError::Invalid(format!("scope `{scope}` is not `public` or `kind:value`")));
            }
        }
        for permission in &new.permissions {
            if !PERMISSIONS.contains(&permission.as_str()) {
                return Err(KeyError::Invalid(format!(
                    "permission `{permission}` is unknown; use {}",
                    PERMISSIONS.join(", ")
                )));
            }
        }
        if new.name.is_empty() || new.name.len() > 128 {
            return Err(KeyError::Invalid("name must be 1 to 128 characters".into()));
        }
        if new.rate_limit_per_minute == Some(0) {
            return Err(KeyError::Invalid("rate_limit_per_minute must be at least 1".into()));
        }
        let id = uuid::Uuid::new_v4().simple().to_string()[..16].to_owned();
        let secret = format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple());
        let mut scopes = new.scopes.clone();
        scopes.sort();
        scopes.dedup();
        let record = KeyRecord {
            tenant: new.tenant.clone(),
            id: id.clone(),
            name: new.name.clone(),
            secret_sha256: sha256_hex(&secret),
            scopes,
            permissions: new.permissions.clone(),
            rate_limit_per_minute: new.rate_limit_per_minute,
            created_at_ms: now_ms(),
            revoked_at_ms: None,
        };
        self.store.insert_key(&record).await?;
        Ok((record, format!("{KEY_PREFIX}{id}_{secret}")))
    }

    /// Revokes a key in the store and drops it from this replica's cache; the caller tells the
    /// other replicas (`Topic::Keys`).
    pub async fn revoke(&self, tenant: &str, id: &str) -> Result<(), StoreError> {
        self.store.revoke_key(tenant, id, now_ms()).await?;
        let mut cache = self.lock_cache();
        cache.epoch += 1;
        cache.entries.remove(id);
        Ok(())
    }

    /// Another replica revoked a key: forget every cached key.
    pub fn forget_cached(&self) {
        let mut cache = self.lock_cache();
        cache.epoch += 1;
        cache.entries.clear();
    }

    /// The live key this presented value names, or `None` (unknown, wrong secret, revoked).
    pub async fn verify(&self, presented: &str) -> Result<Option<KeyRecord>, StoreError> {
        let Some((id, secret)) = presented.strip_prefix(KEY_PREFIX).and_then(|rest| rest.split_once('_'))
        else {
            return Ok(None);
        };
        if id.len() != 16 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Ok(None);
        }
        let store_down = self.lock_cache().store_down_until.is_some_and(|until| until > Instant::now());
        let record = match self.cached(id).or_else(|| store_down.then(|| self.stale(id)).flatten()) {
            Some(record) => record,
            None => {
                let epoch = self.lock_cache().epoch;
                match self.store.find_key(id).await {
                    Ok(record) => {
                        self.lock_cache().store_down_until = None;
                        self.remember(id, record.clone(), epoch);
                        record
                    }
                    // The database is down: a key this replica verified within the last
                    // `stale_grace` keeps working, so callers go on being served from the
                    // in-memory index through a short outage.
                    Err(err) if err.is_unavailable() => {
                        self.lock_cache().store_down_until = Some(Instant::now() + STORE_RETRY_AFTER);
                        match self.stale(id) {
                            Some(record) => record,
                            None => return Err(err),
                        }
                    }
                    Err(err) => return Err(err),
                }
            }
        };
        Ok(record.filter(|key| {
            key.revoked_at_ms.is_none()
                && bool::from(sha256_hex(secret).as_bytes().ct_eq(key.secret_sha256.as_bytes()))
        }))
    }

    fn lock_cache(&self) -> std::sync::MutexGuard<'_, KeyCache> {
        // A panic while holding this lock leaves only a cache behind; carry on with it.
        self.cache.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn cached(&self, id: &str) -> Option<Option<KeyRecord>> {
        let cache = self.lock_cache();
        cache.entries.get(id).filter(|(_, at)| at.elapsed() < CACHE_TTL).map(|(record, _)| record.clone())
    }

    /// A cached answer past its TTL but within `stale_grace`, for when the store is unreachable.
    fn stale(&self, id: &str) -> Option<Option<KeyRecord>> {
        let cache = self.lock_cache();
        cache
            .entries
            .get(id)
            .filter(|(_, at)| at.elapsed() < self.stale_grace)
            .map(|(record, _)| record.clone())
    }

    /// Caches what the store said at `epoch`, unless a revocation came in between.
    fn remember(&self, id: &str, record: Option<KeyRecord>, epoch: u64) {
        let mut cache = self.lock_cache();
        if cache.epoch != epoch {
            return;
        }
        if cache.entries.len() >= CACHE_MAX {
            cache.entries.retain(|_, (_, at)| at.elapsed() < CACHE_TTL);
        }
        if cache.entries.len() < CACHE_MAX {
            cache.entries.insert(id.to_owned(), (record, Instant::now()));
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    async fn keys() -> GatewayKeys {
        let dir = std::env::temp_dir().join(format!("memgate-keys-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let store = Store::connect(&format!("sqlite://{}", dir.join("t.db").display())).await.unwrap();
        store.migrate().await.unwrap();
        GatewayKeys::new(store)
    }

    fn new_key() -> NewKey {
        NewKey {
            tenant: "t".into(),
            name: "bot".into(),
            scopes: vec![],
            permissions: vec![],
            rate_limit_per_minute: None,
        }
    }

    /// A verification that read the store before a revocation, and finishes after it, must not
    /// put the key back into the cache.
    #[tokio::test]
    async fn a_lookup_racing_a_revocation_cannot_revive_the_key() {
        let keys = keys().await;
        let (record, secret) = keys.issue(&new_key()).await.unwrap();
        // The racing lookup's first half: the epoch, then the store's answer (not yet revoked).
        let epoch = keys.lock_cache().epoch;
        let stale = keys.store.find_key(&record.id).await.unwrap();
        keys.revoke("t", &record.id).await.unwrap();
        // Its second half, after the revocation.
        keys.remember(&record.id, stale, epoch);
        assert!(keys.verify(&secret).await.unwrap().is_none(), "the revoked key came back from the cache");
    }

    /// Makes the cached answer for `id` as old as `age`, as if read from the store that long ago.
    fn age_entry(keys: &GatewayKeys, id: &str, age: Duration) {
        let mut cache = keys.lock_cache();
        let entry = cache.entries.get_mut(id).unwrap();
        entry.1 = Instant::now().checked_sub(age).unwrap();
    }

    /// Cut off from the database (and so from any revocation written meanwhile), a replica
    /// honours a key it verified for the grace and not beyond: 60 s unless configured.
    #[tokio::test]
    async fn a_cut_off_replica_honours_a_cached_key_for_the_grace_only() {
        let keys = keys().await;
        let (record, secret) = keys.issue(&new_key()).await.unwrap();
        assert!(keys.verify(&secret).await.unwrap().is_some());
        // Revoked elsewhere, then the database goes away from this replica.
        keys.store.revoke_key("t", &record.id, now_ms()).await.unwrap();
        keys.store.pool().close().await;
        age_entry(&keys, &record.id, Duration::from_secs(50));
        assert!(keys.verify(&secret).await.unwrap().is_some(), "within the grace, the cached answer");
        age_entry(&keys, &record.id, Duration::from_secs(61));
        let err = keys.verify(&secret).await.unwrap_err();
        assert!(err.is_unavailable(), "{err}");

        let keys = self::keys().await.with_stale_grace(Duration::from_secs(10));
        let (record, secret) = keys.issue(&new_key()).await.unwrap();
        assert!(keys.verify(&secret).await.unwrap().is_some());
        keys.store.pool().close().await;
        age_entry(&keys, &record.id, Duration::from_secs(9));
        assert!(keys.verify(&secret).await.unwrap().is_some());
        age_entry(&keys, &record.id, Duration::from_secs(11));
        assert!(keys.verify(&secret).await.is_err(), "past the configured grace");
        // Never below the cache's own TTL: a grace of 0 still serves what was read 4 s ago.
        let keys = self::keys().await.with_stale_grace(Duration::ZERO);
        let (record, secret) = keys.issue(&new_key()).await.unwrap();
        assert!(keys.verify(&secret).await.unwrap().is_some());
        keys.store.pool().close().await;
        age_entry(&keys, &record.id, Duration::from_secs(4));
        assert!(keys.verify(&secret).await.unwrap().is_some());
        age_entry(&keys, &record.id, Duration::from_secs(6));
        assert!(keys.verify(&secret).await.is_err());
    }

    #[tokio::test]
    async fn another_replicas_revocation_empties_the_cache() {
        let keys = keys().await;
        let (record, secret) = keys.issue(&new_key()).await.unwrap();
        assert!(keys.verify(&secret).await.unwrap().is_some());
        // Revoked behind this replica's back, as another replica would.
        keys.store.revoke_key("t", &record.id, now_ms()).await.unwrap();
        assert!(keys.verify(&secret).await.unwrap().is_some(), "cached for CACHE_TTL");
        keys.forget_cached();
        assert!(keys.verify(&secret).await.unwrap().is_none());
    }
}
