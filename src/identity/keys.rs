//! Gateway keys: `mgk_<id>_<secret>`. The id is public and indexes the key; the secret (256 random
//! bits) is stored only as its SHA-256 and compared in constant time. Verified keys are cached for
//! a few seconds so the request path does not touch the database on every call; a revocation on
//! this replica drops its cache entry at once, other replicas see it within `CACHE_TTL`.

use crate::memory::envelope::is_valid_scope;
use crate::memory::record::now_ms;
use crate::store::keys::KeyRecord;
use crate::store::{Store, StoreError};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use subtle::ConstantTimeEq;

/// Every gateway key starts with this.
pub const KEY_PREFIX: &str = "mgk_";
const CACHE_TTL: Duration = Duration::from_secs(5);
const CACHE_MAX: usize = 10_000;

/// What a key may do beyond reading its own scopes' records.
pub const PERMISSIONS: [&str; 3] = ["pin_release", "assert_subject", "debug"];

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

pub struct GatewayKeys {
    store: Store,
    cache: Mutex<HashMap<String, (Option<KeyRecord>, Instant)>>,
}

impl GatewayKeys {
    pub fn new(store: Store) -> GatewayKeys {
        GatewayKeys { store, cache: Mutex::new(HashMap::new()) }
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

    pub async fn revoke(&self, tenant: &str, id: &str) -> Result<(), StoreError> {
        self.store.revoke_key(tenant, id, now_ms()).await?;
        self.lock_cache().remove(id);
        Ok(())
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
        let record = match self.cached(id) {
            Some(record) => record,
            None => {
                let record = self.store.find_key(id).await?;
                self.remember(id, record.clone());
                record
            }
        };
        Ok(record.filter(|key| {
            key.revoked_at_ms.is_none()
                && bool::from(sha256_hex(secret).as_bytes().ct_eq(key.secret_sha256.as_bytes()))
        }))
    }

    fn lock_cache(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Option<KeyRecord>, Instant)>> {
        // A panic while holding this lock leaves only a cache behind; carry on with it.
        self.cache.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn cached(&self, id: &str) -> Option<Option<KeyRecord>> {
        let cache = self.lock_cache();
        cache.get(id).filter(|(_, at)| at.elapsed() < CACHE_TTL).map(|(record, _)| record.clone())
    }

    fn remember(&self, id: &str, record: Option<KeyRecord>) {
        let mut cache = self.lock_cache();
        if cache.len() >= CACHE_MAX {
            cache.retain(|_, (_, at)| at.elapsed() < CACHE_TTL);
        }
        if cache.len() < CACHE_MAX {
            cache.insert(id.to_owned(), (record, Instant::now()));
        }
    }
}

pub fn sha256_hex(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}
