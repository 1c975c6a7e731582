//! Query embeddings shared between replicas through Redis.
//!
//! Each replica keeps its own cache of query vectors (`cache.rs`); with Redis configured, a
//! replica that misses its own cache asks Redis before running the model, and puts what it
//! computed there for the others. A support bot's users ask the same questions on every replica,
//! and a Redis read (well under a millisecond on a LAN) is cheaper than a model run (10–20 ms).
//!
//! Keys are `<prefix>:qvec:<model id>:<sha256 of the text>`, so a model change never mixes
//! vectors; values are the vector as little-endian f32, kept for a day. A read waits at most
//! `READ_TIMEOUT`; a missing, slow or unreachable Redis means the model runs, as without it
//! (fail-open). A value of the wrong length is ignored.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use redis::AsyncCommands;
use redis::aio::ConnectionManager;
use sha2::{Digest, Sha256};

/// The longest a replica waits for Redis before running the model itself.
const READ_TIMEOUT: Duration = Duration::from_millis(10);
const WRITE_TIMEOUT: Duration = Duration::from_millis(500);
/// How long a shared vector is kept.
const TTL_SECS: u64 = 24 * 60 * 60;

pub struct SharedVectors {
    connection: Arc<ArcSwapOption<ConnectionManager>>,
    prefix: String,
}

impl SharedVectors {
    /// Over `connection`, the replica's one Redis connection (`Fanout::connection`), which may
    /// not be there yet.
    pub fn new(connection: Arc<ArcSwapOption<ConnectionManager>>, key_prefix: &str) -> SharedVectors {
        SharedVectors { connection, prefix: key_prefix.to_owned() }
    }

    fn key(&self, model_id: &str, text: &str) -> String {
        let digest: String = Sha256::digest(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
        format!("{}:qvec:{model_id}:{digest}", self.prefix)
    }

    /// Another replica's vector for this query text, if Redis has one and answers in time.
    pub async fn get(&self, model_id: &str, text: &str, dims: usize) -> Option<Vec<f32>> {
        let mut connection = (*self.connection.load_full()?).clone();
        let key = self.key(model_id, text);
        let read = tokio::time::timeout(READ_TIMEOUT, connection.get::<_, Option<Vec<u8>>>(key)).await;
        decode(&read.ok()?.ok()??, dims)
    }

    /// Offers a computed vector to the other replicas, in the background.
    pub fn put(&self, model_id: &str, text: &str, vector: &[f32]) {
        let Some(connection) = self.connection.load_full() else { return };
        let mut connection = (*connection).clone();
        let key = self.key(model_id, text);
        let bytes = encode(vector);
        tokio::spawn(async move {
            let written =
                tokio::time::timeout(WRITE_TIMEOUT, connection.set_ex::<_, _, ()>(key, bytes, TTL_SECS));
            if !matches!(written.await, Ok(Ok(()))) {
                tracing::debug!("could not share a query embedding through redis");
            }
        });
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
    vector.iter().all(|x| x.is_finite()).then_some(vector)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_round_trip_and_wrong_or_broken_values_are_ignored() {
        let v = vec![0.25f32, -1.5, 3.0];
        assert_eq!(decode(&encode(&v), 3), Some(v.clone()));
        assert_eq!(decode(&encode(&v), 4), None, "another model's length");
        assert_eq!(decode(&encode(&v)[..11], 3), None, "a truncated value");
        assert_eq!(decode(&encode(&[f32::NAN, 0.0, 0.0]), 3), None, "not a vector");
    }
}
