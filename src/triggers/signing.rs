//! Signing as the Standard Webhooks specification says, so that every verifier library accepts
//! memgate's deliveries unchanged (spec/standard-webhooks.md, "Signature scheme" and "Webhook
//! headers"):
//!
//! - `webhook-id`: the action's idempotency id (`evt_…`), the same for every attempt and replay;
//! - `webhook-timestamp`: the attempt's time, integer seconds since the epoch (new per attempt);
//! - `webhook-signature`: `v1,<base64 of HMAC-SHA256(key, "{id}.{timestamp}.{body}")>`, where
//!   the key is the base64-decoded part of the `whsec_…` secret. With two secrets (a rotation)
//!   there are two signatures, separated by a space; a receiver accepts any one it can verify.

use crate::config::triggers::WebhookSecret;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

pub const HEADER_ID: &str = "webhook-id";
pub const HEADER_TIMESTAMP: &str = "webhook-timestamp";
pub const HEADER_SIGNATURE: &str = "webhook-signature";

fn mac(key: &[u8], msg_id: &str, timestamp: i64, body: &[u8]) -> HmacSha256 {
    // HMAC takes a key of any length; `new_from_slice` cannot fail for it.
    let mut mac = match HmacSha256::new_from_slice(key) {
        Ok(mac) => mac,
        Err(_) => unreachable!("HMAC accepts keys of every length"),
    };
    mac.update(msg_id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// One `v1,<base64>` signature.
pub fn sign(key: &[u8], msg_id: &str, timestamp: i64, body: &[u8]) -> String {
    format!("v1,{}", STANDARD.encode(mac(key, msg_id, timestamp, body).finalize().into_bytes()))
}

/// The `webhook-signature` value: one signature per secret, space-separated, in the order the
/// secrets are configured.
pub fn signature_header(secrets: &[WebhookSecret], msg_id: &str, timestamp: i64, body: &[u8]) -> String {
    secrets.iter().map(|secret| sign(secret.key(), msg_id, timestamp, body)).collect::<Vec<_>>().join(" ")
}

/// Why a delivery did not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("the timestamp is not an integer")]
    BadTimestamp,
    #[error("the timestamp is more than {0} seconds away from now")]
    OutOfTolerance(i64),
    #[error("no signature matches")]
    NoMatch,
}

/// Verifies a delivery as a receiver would: the timestamp within `tolerance_secs` of `now_secs`,
/// and any one `v1` signature of the header valid for `secret` (compared in constant time).
pub fn verify(
    secret: &WebhookSecret,
    msg_id: &str,
    timestamp: &str,
    signatures: &str,
    body: &[u8],
    now_secs: i64,
    tolerance_secs: i64,
) -> Result<(), VerifyError> {
    let timestamp: i64 = timestamp.trim().parse().map_err(|_| VerifyError::BadTimestamp)?;
    if (now_secs - timestamp).abs() > tolerance_secs {
        return Err(VerifyError::OutOfTolerance(tolerance_secs));
    }
    let expected = mac(secret.key(), msg_id, timestamp, body);
    let valid = signatures.split(' ').filter_map(|entry| entry.strip_prefix("v1,")).any(|encoded| {
        STANDARD.decode(encoded).is_ok_and(|bytes| expected.clone().verify_slice(&bytes).is_ok())
    });
    if valid { Ok(()) } else { Err(VerifyError::NoMatch) }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The Standard Webhooks test vector, as the specification's reference libraries pin it
    /// (standard-webhooks/standard-webhooks, libraries/*: "sign function works").
    const SPEC_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const SPEC_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const SPEC_TIMESTAMP: i64 = 1_614_265_330;
    const SPEC_BODY: &[u8] = br#"{"test": 2432232314}"#;
    const SPEC_SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    fn secret(text: &str) -> WebhookSecret {
        WebhookSecret::parse(text).unwrap()
    }

    #[test]
    fn reproduces_the_specifications_test_vector() {
        let key = secret(SPEC_SECRET);
        assert_eq!(sign(key.key(), SPEC_ID, SPEC_TIMESTAMP, SPEC_BODY), SPEC_SIGNATURE);
        assert_eq!(
            verify(&key, SPEC_ID, "1614265330", SPEC_SIGNATURE, SPEC_BODY, SPEC_TIMESTAMP, 300),
            Ok(())
        );
    }

    #[test]
    fn a_rotation_signs_with_both_secrets() {
        let old = secret(SPEC_SECRET);
        let new = secret("whsec_dGhpcyBpcyB0aGUgbmV3IHNlY3JldCwgMzIgYnl0ZXM=");
        let header = signature_header(&[old.clone(), new.clone()], SPEC_ID, SPEC_TIMESTAMP, SPEC_BODY);
        let parts: Vec<&str> = header.split(' ').collect();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0], SPEC_SIGNATURE);
        for key in [&old, &new] {
            assert_eq!(verify(key, SPEC_ID, "1614265330", &header, SPEC_BODY, SPEC_TIMESTAMP, 300), Ok(()));
        }
    }

    #[test]
    fn tampering_and_stale_timestamps_fail() {
        let key = secret(SPEC_SECRET);
        let at = "1614265330";
        let other_body = br#"{"test": 2432232315}"#;
        assert_eq!(
            verify(&key, SPEC_ID, at, SPEC_SIGNATURE, other_body, SPEC_TIMESTAMP, 300),
            Err(VerifyError::NoMatch)
        );
        assert_eq!(
            verify(&key, "msg_other", at, SPEC_SIGNATURE, SPEC_BODY, SPEC_TIMESTAMP, 300),
            Err(VerifyError::NoMatch)
        );
        assert_eq!(
            verify(&key, SPEC_ID, at, SPEC_SIGNATURE, SPEC_BODY, SPEC_TIMESTAMP + 301, 300),
            Err(VerifyError::OutOfTolerance(300))
        );
        assert_eq!(
            verify(&key, SPEC_ID, "1614265330.5", SPEC_SIGNATURE, SPEC_BODY, SPEC_TIMESTAMP, 300),
            Err(VerifyError::BadTimestamp)
        );
        assert_eq!(
            verify(&key, SPEC_ID, at, "v1a,xyz v2,abc", SPEC_BODY, SPEC_TIMESTAMP, 300),
            Err(VerifyError::NoMatch)
        );
    }
}
