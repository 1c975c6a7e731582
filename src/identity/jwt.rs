//! JWT callers: `Authorization: Bearer <jwt>`.
//!
//! The key is chosen by the token's algorithm family before anything is verified, and the
//! verification accepts exactly that one algorithm — so the classic confusions fail: `alg: none`
//! is no algorithm at all, an HS256 token is checked only against the HMAC secret (never against
//! an RSA public key used as an HMAC secret), and a `kid` that names no key is refused.
//! Keys come from a secret, a PEM file and/or a JWKS file; the files are re-read when they change
//! (checked at most once a second, on the request path, so no background task is needed).

use arc_swap::ArcSwap;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, AlgorithmFamily, DecodingKey, Header, Validation};
use secrecy::ExposeSecret;
use serde_json::{Map, Value};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use super::token_cache::{self, TokenCache};

const RELOAD_CHECK_EVERY: Duration = Duration::from_secs(1);

fn unix_now() -> i64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

pub use crate::config::auth::JwtConfig;

/// Why a token was refused; the message is safe to show the caller.
#[derive(Debug, thiserror::Error)]
pub enum JwtError {
    #[error("the token is malformed or uses an unsupported algorithm")]
    Malformed,
    #[error("tokens signed with {0:?} are not accepted here")]
    AlgorithmNotAccepted(Algorithm),
    #[error("the token's kid names no known key")]
    UnknownKid,
    #[error("the token has expired")]
    Expired,
    #[error("the token is not valid yet (nbf)")]
    NotYetValid,
    #[error("the token's issuer is missing or not accepted")]
    WrongIssuer,
    #[error("the token's audience is missing or not accepted")]
    WrongAudience,
    #[error("the token's signature does not verify")]
    BadSignature,
    #[error("the token was refused: {0}")]
    Other(String),
}

/// Keys in force, swapped whole when a file changes.
#[derive(Default)]
struct KeySet {
    hmac: Option<DecodingKey>,
    pem: Option<DecodingKey>,
    jwks: HashMap<String, DecodingKey>,
}

pub struct JwtVerifier {
    config: JwtConfig,
    keys: ArcSwap<KeySet>,
    /// Bumped whenever `keys` is replaced: cached verifications of older keys stop counting.
    generation: AtomicU64,
    verified: TokenCache,
    /// When files were last checked, and their modification times then.
    watch: Mutex<(Instant, Vec<Option<SystemTime>>)>,
}

impl JwtVerifier {
    /// Loads every configured key; a file that cannot be read or parsed is a startup error.
    pub fn new(config: JwtConfig) -> Result<JwtVerifier, String> {
        let keys = load_keys(&config)?;
        let mtimes = file_mtimes(&config);
        Ok(JwtVerifier {
            config,
            keys: ArcSwap::from_pointee(keys),
            generation: AtomicU64::new(0),
            verified: TokenCache::new(token_cache::CAPACITY),
            watch: Mutex::new((Instant::now(), mtimes)),
        })
    }

    /// Verifies a token and returns its claims; a token verified before with the same keys and
    /// not expired since comes from the cache (`token_cache`).
    pub fn verify(&self, token: &str) -> Result<Map<String, Value>, JwtError> {
        self.reload_if_changed();
        let now = unix_now();
        // Read before verifying: a reload meanwhile makes this entry stale, never the reverse.
        let generation = self.generation.load(Ordering::SeqCst);
        let digest = token_cache::digest(token);
        if let Some(claims) = self.verified.get(&digest, now, generation) {
            return Ok(claims);
        }
        let claims = self.verify_signature(token)?;
        if let Some(exp) = claims.get("exp").and_then(Value::as_i64) {
            let good_until = exp.saturating_add(self.config.leeway_secs as i64);
            self.verified.put(digest, claims.clone(), good_until, now, generation);
        }
        Ok(claims)
    }

    /// The full check: key choice, signature, and the time, issuer and audience claims.
    fn verify_signature(&self, token: &str) -> Result<Map<String, Value>, JwtError> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| JwtError::Malformed)?;
        let keys = self.keys.load();
        let key = select_key(&keys, &header)?;
        let mut validation = Validation::new(header.alg);
        validation.algorithms = vec![header.alg];
        validation.leeway = self.config.leeway_secs;
        validation.validate_exp = true;
        validation.validate_nbf = true;
        // A configured issuer or audience must be present, not merely match when present: a
        // token minted without `aud` for some other service must not pass here.
        let mut required = HashSet::from(["exp".to_owned()]);
        if self.config.issuer.is_some() {
            required.insert("iss".to_owned());
        }
        if self.config.audience.is_some() {
            required.insert("aud".to_owned());
        }
        validation.required_spec_claims = required;
        if let Some(issuer) = &self.config.issuer {
            validation.set_issuer(&[issuer]);
        }
        match &self.config.audience {
            Some(audience) => validation.set_audience(&[audience]),
            None => validation.validate_aud = false,
        }
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, key, &validation).map_err(|err| {
            use jsonwebtoken::errors::ErrorKind as K;
            match err.kind() {
                K::ExpiredSignature => JwtError::Expired,
                K::ImmatureSignature => JwtError::NotYetValid,
                K::InvalidIssuer => JwtError::WrongIssuer,
                K::InvalidAudience => JwtError::WrongAudience,
                K::InvalidSignature => JwtError::BadSignature,
                K::InvalidAlgorithm => JwtError::AlgorithmNotAccepted(header.alg),
                K::MissingRequiredClaim(claim) if claim == "iss" => JwtError::WrongIssuer,
                K::MissingRequiredClaim(claim) if claim == "aud" => JwtError::WrongAudience,
                K::MissingRequiredClaim(claim) => JwtError::Other(format!("the `{claim}` claim is required")),
                _ => JwtError::Malformed,
            }
        })?;
        Ok(data.claims)
    }

    fn reload_if_changed(&self) {
        let mut watch = self.watch.lock().unwrap_or_else(|p| p.into_inner());
        if watch.0.elapsed() < RELOAD_CHECK_EVERY {
            return;
        }
        watch.0 = Instant::now();
        let mtimes = file_mtimes(&self.config);
        if mtimes == watch.1 {
            return;
        }
        // A key file that was removed takes its keys out of force: deleting the JWKS is how an
        // operator withdraws every key in it. One that is there but unreadable is likely being
        // rewritten: the keys in force stay until it reads.
        let mut present = self.config.clone();
        for (path, mtime) in [&mut present.public_key_file, &mut present.jwks_file].into_iter().zip(&mtimes) {
            if path.as_ref().is_some_and(|p| mtime.is_none() && !p.exists()) {
                tracing::error!(file = %path.as_ref().map(|p| p.display().to_string()).unwrap_or_default(),
                    "a JWT key file is gone: tokens signed with its keys are refused until it is back");
                *path = None;
            }
        }
        match load_keys(&present) {
            Ok(keys) => {
                self.keys.store(Arc::new(keys));
                self.generation.fetch_add(1, Ordering::SeqCst);
                watch.1 = mtimes;
                tracing::info!("JWT verification keys reloaded");
            }
            // A half-written file: keep the keys in force and try again on the next check.
            Err(err) => {
                tracing::warn!(error = %err, "JWT key file changed but could not be loaded; keeping the old keys")
            }
        }
    }
}

fn select_key<'a>(keys: &'a KeySet, header: &Header) -> Result<&'a DecodingKey, JwtError> {
    let family = header.alg.family();
    if family == AlgorithmFamily::Hmac {
        return keys.hmac.as_ref().ok_or(JwtError::AlgorithmNotAccepted(header.alg));
    }
    let fits = |key: &DecodingKey| key.family() == family;
    if let Some(kid) = &header.kid {
        return match keys.jwks.get(kid) {
            Some(key) if fits(key) => Ok(key),
            Some(_) => Err(JwtError::AlgorithmNotAccepted(header.alg)),
            // Without a JWKS, keys have no ids: the PEM key is the one key, whatever kid says.
            None if keys.jwks.is_empty() => keys.pem.as_ref().filter(|k| fits(k)).ok_or(JwtError::UnknownKid),
            None => Err(JwtError::UnknownKid),
        };
    }
    if let Some(key) = keys.pem.as_ref().filter(|k| fits(k)) {
        return Ok(key);
    }
    let mut candidates = keys.jwks.values().filter(|k| fits(k));
    match (candidates.next(), candidates.next()) {
        (Some(only), None) => Ok(only),
        (Some(_), Some(_)) => Err(JwtError::UnknownKid),
        _ => Err(JwtError::AlgorithmNotAccepted(header.alg)),
    }
}

fn file_mtimes(config: &JwtConfig) -> Vec<Option<SystemTime>> {
    [&config.public_key_file, &config.jwks_file]
        .into_iter()
        .map(|path| path.as_ref().and_then(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok()))
        .collect()
}

fn load_keys(config: &JwtConfig) -> Result<KeySet, String> {
    let mut keys = KeySet::default();
    if let Some(secret) = &config.hmac_secret {
        if secret.expose_secret().len() < 32 {
            return Err("MEMGATE_JWT_HS256_SECRET must be at least 32 bytes".into());
        }
        keys.hmac = Some(
            DecodingKey::from_secret(secret.expose_secret().as_bytes())
                .map_err(|err| format!("the HMAC secret: {err}"))?,
        );
    }
    if let Some(path) = &config.public_key_file {
        let pem = std::fs::read(path).map_err(|err| format!("cannot read {}: {err}", path.display()))?;
        let key = DecodingKey::from_rsa_pem(&pem)
            .or_else(|_| DecodingKey::from_ec_pem(&pem))
            .or_else(|_| DecodingKey::from_ed_pem(&pem))
            .map_err(|_| format!("{} holds no RSA, EC or Ed25519 public key in PEM", path.display()))?;
        keys.pem = Some(key);
    }
    if let Some(path) = &config.jwks_file {
        let text =
            std::fs::read_to_string(path).map_err(|err| format!("cannot read {}: {err}", path.display()))?;
        let set: JwkSet =
            serde_json::from_str(&text).map_err(|err| format!("{} is not a JWKS: {err}", path.display()))?;
        for jwk in &set.keys {
            let Some(kid) = &jwk.common.key_id else {
                return Err(format!("{}: every key needs a `kid`", path.display()));
            };
            let key = DecodingKey::from_jwk(jwk)
                .map_err(|err| format!("{}: key `{kid}`: {err}", path.display()))?;
            keys.jwks.insert(kid.clone(), key);
        }
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{EncodingKey, encode};
    use serde_json::json;

    const SECRET: &str = "a-test-secret-that-is-long-enough-for-hs256";

    fn verifier(issuer: Option<&str>, audience: Option<&str>) -> JwtVerifier {
        JwtVerifier::new(JwtConfig {
            hmac_secret: Some(SECRET.to_owned().into()),
            public_key_file: None,
            jwks_file: None,
            issuer: issuer.map(str::to_owned),
            audience: audience.map(str::to_owned),
            leeway_secs: 5,
        })
        .unwrap()
    }

    fn now() -> i64 {
        jsonwebtoken::get_current_timestamp() as i64
    }

    fn token(alg: Algorithm, claims: Value) -> String {
        encode(&Header::new(alg), &claims, &EncodingKey::from_secret(SECRET.as_bytes()).unwrap()).unwrap()
    }

    #[test]
    fn hmac_tokens_of_each_size_verify() {
        let v = verifier(Some("idp"), Some("memgate"));
        for alg in [Algorithm::HS256, Algorithm::HS384, Algorithm::HS512] {
            let t = token(alg, json!({"sub": "u1", "exp": now() + 60, "iss": "idp", "aud": "memgate"}));
            assert_eq!(v.verify(&t).unwrap()["sub"], "u1");
        }
    }

    #[test]
    fn a_verified_token_is_remembered_for_its_keys_only_and_a_tampered_one_never() {
        let v = verifier(None, None);
        let t = token(Algorithm::HS256, json!({"sub": "u1", "exp": now() + 60}));
        assert_eq!(v.verify(&t).unwrap()["sub"], "u1");
        assert_eq!(v.verified.len(), 1, "a good token is remembered");
        assert_eq!(v.verify(&t).unwrap()["sub"], "u1", "and answered again");
        // The same header and payload with a changed signature is another token.
        let mut forged = t.clone();
        let last = forged.pop().unwrap();
        forged.push(if last == 'A' { 'B' } else { 'A' });
        assert!(v.verify(&forged).is_err(), "a tampered signature passed");
        // New keys: what was verified with the old ones is checked again, not taken on trust.
        v.generation.fetch_add(1, Ordering::SeqCst);
        let generation = v.generation.load(Ordering::SeqCst);
        assert!(v.verified.get(&token_cache::digest(&t), now(), generation).is_none());
        assert_eq!(v.verify(&t).unwrap()["sub"], "u1");
        assert!(v.verified.get(&token_cache::digest(&t), now(), generation).is_some());
        // A token without `exp` is refused anyway (`exp` is required), so never remembered.
        let no_exp = token(Algorithm::HS256, json!({"sub": "u2"}));
        assert!(v.verify(&no_exp).is_err());
    }

    #[test]
    fn bad_tokens_are_refused_for_the_right_reason() {
        let v = verifier(Some("idp"), Some("memgate"));
        let ok = json!({"sub": "u1", "exp": now() + 60, "iss": "idp", "aud": "memgate"});
        let with = |k: &str, val: Value| {
            let mut c = ok.clone();
            c[k] = val;
            token(Algorithm::HS256, c)
        };
        assert!(matches!(v.verify(&with("exp", json!(now() - 60))), Err(JwtError::Expired)));
        assert!(matches!(v.verify(&with("nbf", json!(now() + 60))), Err(JwtError::NotYetValid)));
        assert!(matches!(v.verify(&with("iss", json!("evil"))), Err(JwtError::WrongIssuer)));
        assert!(matches!(v.verify(&with("aud", json!("other"))), Err(JwtError::WrongAudience)));
        let mut no_exp = ok.clone();
        no_exp.as_object_mut().unwrap().remove("exp");
        assert!(v.verify(&token(Algorithm::HS256, no_exp)).is_err());

        let good = token(Algorithm::HS256, ok.clone());
        let (head_payload, _sig) = good.rsplit_once('.').unwrap();
        let (head, _) = head_payload.split_once('.').unwrap();
        let forged_payload = base64url(
            &json!({"sub": "admin", "exp": now() + 60, "iss": "idp", "aud": "memgate"}).to_string(),
        );
        let tampered = format!("{head}.{forged_payload}.{}", good.rsplit_once('.').unwrap().1);
        assert!(matches!(v.verify(&tampered), Err(JwtError::BadSignature)));

        let none = format!("{}.{}.", base64url(r#"{"alg":"none","typ":"JWT"}"#), base64url(&ok.to_string()));
        assert!(matches!(v.verify(&none), Err(JwtError::Malformed)));
    }

    #[test]
    fn leeway_tolerates_small_clock_skew() {
        let v = verifier(None, None);
        let t = token(Algorithm::HS256, json!({"sub": "u1", "exp": now() - 2}));
        assert!(v.verify(&t).is_ok());
    }

    fn base64url(text: &str) -> String {
        use base64::Engine as _;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text)
    }
}
