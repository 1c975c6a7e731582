//! Query embeddings shared between replicas through Redis.
//!
//! Each replica keeps its own cache of query vectors (`cache.rs`); with Redis configured, a
//! replica that misses its own cache asks Redis before running the model, and puts what it
//! computed there for the others. A support bot's users ask the same questions on every replica,
//! and a Redis read (well under a millisecond on a LAN) is cheaper than a model run (10–20 ms).
//!
//! Keys are `<prefix>:qvec:<HMAC-SHA256 of model id, tenant and text>`, under a secret the
//! deployment keeps in its database (`Store::shared_secret`): a model change never mixes
//! vectors, Redis holds no readable question, and one tenant's questions never answer (or time)
//! another's — the cache is per tenant, as the replica's own is. Values are the vector as
//! little-endian f32, kept for a day. A read waits at most `READ_TIMEOUT`; a missing, slow or
//! unreachable Redis means the model runs, as without it (fail-open). A value read back must have
//! the model's length, finite components and unit length (what the embedder writes), or it is
//! ignored: whoever can write to Redis cannot steer retrieval with a crafted vector's scale.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use hmac::{Hmac, Mac};
use redis::AsyncCommands;
use redis::aio::ConnectionManager;
use sha2::Sha256;

const WRITE_TIMEOUT: Duration = Duration::from_millis(500);
/// How long a shared vector is kept.
const TTL_SECS: u64 = 24 * 60 * 60;

pub struct SharedVectors {
    connection: Arc<ArcSwapOption<ConnectionManager>>,
    prefix: String,
    secret: Vec<u8>,
    /// The longest a replica waits for Redis before running the model itself
    /// (`redis.shared_read_timeout_ms`).
    read_timeout: Duration,
    puts: Arc<PutCounters>,
}

/// What became of the vectors this replica offered (`SharedVectors::put`): an operator's sign
/// that replicas do share their questions, and a test's that an offer is over.
#[derive(Debug, Default)]
struct PutCounters {
    written: AtomicU64,
    failed: AtomicU64,
    no_connection: AtomicU64,
}

/// `SharedVectors::puts`: offers by outcome, since start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SharedPuts {
    /// Stored in Redis.
    pub written: u64,
    /// Redis answered with an error or not within `WRITE_TIMEOUT`.
    pub failed: u64,
    /// The replica had no Redis connection (not yet, or lost): nothing was sent.
    pub no_connection: u64,
}

impl SharedVectors {
    /// Over `connection`, the replica's one Redis connection (`Fanout::connection`), which may
    /// not be there yet; keys made with `secret` (the same on every replica of the deployment).
    pub fn new(
        connection: Arc<ArcSwapOption<ConnectionManager>>,
        key_prefix: &str,
        secret: &str,
        read_timeout: Duration,
    ) -> SharedVectors {
        SharedVectors {
            connection,
            prefix: key_prefix.to_owned(),
            secret: secret.as_bytes().to_vec(),
            read_timeout,
            puts: Arc::default(),
        }
    }

    fn key(&self, model_id: &str, tenant: &str, text: &str) -> String {
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(&self.secret) else {
            return String::new();
        };
        // Lengths first, so that no split of the three fields can collide with another.
        for part in [model_id, tenant, text] {
            mac.update(&(part.len() as u64).to_le_bytes());
            mac.update(part.as_bytes());
        }
        let digest: String = mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect();
        format!("{}:qvec:{digest}", self.prefix)
    }

    /// Another replica's vector for this tenant's query text, if Redis has one and answers in time.
    pub async fn get(&self, model_id: &str, tenant: &str, text: &str, dims: usize) -> Option<Vec<f32>> {
        let mut connection = (*self.connection.load_full()?).clone();
        let key = self.key(model_id, tenant, text);
        let read = tokio::time::timeout(self.read_timeout, connection.get::<_, Option<Vec<u8>>>(key)).await;
        decode(&read.ok()?.ok()??, dims)
    }

    /// Offers a computed vector to the other replicas, in the background; `puts` counts what
    /// became of it once that is known.
    pub fn put(&self, model_id: &str, tenant: &str, text: &str, vector: &[f32]) {
        let Some(connection) = self.connection.load_full() else {
            self.puts.no_connection.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let mut connection = (*connection).clone();
        let key = self.key(model_id, tenant, text);
        let bytes = encode(vector);
        let puts = Arc::clone(&self.puts);
        crate::tasks::detached("shared embedding put", async move {
            let written =
                tokio::time::timeout(WRITE_TIMEOUT, connection.set_ex::<_, _, ()>(key, bytes, TTL_SECS));
            if matches!(written.await, Ok(Ok(()))) {
                puts.written.fetch_add(1, Ordering::Relaxed);
            } else {
                puts.failed.fetch_add(1, Ordering::Relaxed);
                tracing::debug!("could not share a query embedding through redis");
            }
        });
    }

    pub fn puts(&self) -> SharedPuts {
        SharedPuts {
            written: self.puts.written.load(Ordering::Relaxed),
            failed: self.puts.failed.load(Ordering::Relaxed),
            no_connection: self.puts.no_connection.load(Ordering::Relaxed),
        }
    }
}

fn encode(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn decode(bytes: &[u8], dims: usize) -> Option<Vec<f32>> {
    if bytes.len() != dims * 4 {
        return None;
    }
    let vector: Vec<f32> =
        bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    (vector.iter().all(|x| x.is_finite()) && (norm - 1.0).abs() < 1e-3).then_some(vector)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_round_trip_and_wrong_or_broken_values_are_ignored() {
        let v = vec![0.6f32, -0.8, 0.0];
        assert_eq!(decode(&encode(&v), 3), Some(v.clone()));
        assert_eq!(decode(&encode(&v), 4), None, "another model's length");
        assert_eq!(decode(&encode(&v)[..11], 3), None, "a truncated value");
        assert_eq!(decode(&encode(&[f32::NAN, 0.0, 0.0]), 3), None, "not a vector");
        assert_eq!(decode(&encode(&[6.0, -8.0, 0.0]), 3), None, "not unit length: a crafted scale");
    }

    /// Keys name no question, differ per tenant and per secret, and the three fields cannot be
    /// shifted into one another.
    #[test]
    fn keys_are_an_hmac_of_model_tenant_and_text() {
        let slot = Arc::new(ArcSwapOption::empty());
        let a = SharedVectors::new(slot.clone(), "memgate", "secret-one", Duration::from_millis(10));
        let key = a.key("e5", "acme", "where is my parcel");
        assert!(
            key.starts_with("memgate:qvec:") && !key.contains("parcel") && !key.contains("acme"),
            "{key}"
        );
        assert_ne!(key, a.key("e5", "globex", "where is my parcel"), "another tenant");
        assert_ne!(
            key,
            SharedVectors::new(slot, "memgate", "secret-two", Duration::from_millis(10)).key(
                "e5",
                "acme",
                "where is my parcel"
            )
        );
        assert_ne!(a.key("e5", "ab", "c"), a.key("e5", "a", "bc"));
        assert_eq!(key, a.key("e5", "acme", "where is my parcel"));
    }
}
