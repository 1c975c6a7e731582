//! Hashes that are stored or compared between replicas, so they must be the same in every
//! process and version (unlike std's hasher). A leaf: it uses no other module of the crate.

use sha2::{Digest, Sha256};

/// 64-bit FNV-1a: stable across processes, machines and versions (unlike std's hasher), for
/// hashes that are stored or must agree between replicas.
pub fn fnv1a64(text: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// The SHA-256 of `bytes` (a text's UTF-8), hex.
pub fn sha256_hex(bytes: impl AsRef<[u8]>) -> String {
    Sha256::digest(bytes.as_ref()).iter().map(|b| format!("{b:02x}")).collect()
}
