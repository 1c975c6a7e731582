//! Who is calling, and what they may see.
//!
//! `Authenticator::authenticate` turns what a request presents (`Credentials`, read from its
//! headers by the edge) into a `Caller`: tenant, subject,
//! scopes (always including `public`) and permissions. Deny by default: outside `passthrough`
//! mode a request needs a gateway key (`x-api-key: mgk_…`) or a JWT (`Authorization: Bearer`).
//! In `passthrough` mode the caller's own Anthropic key goes upstream and the caller sees only
//! `public` records of the default tenant. Rate limits are checked here too, per caller.
//!
//! Work before authentication is bounded per client address: in managed mode, failed
//! credentials count against the address (`Strikes`), and past the limit it is refused before
//! any key or token is checked; in passthrough mode, where only the upstream can judge a key,
//! requests with a key the upstream has not yet accepted count against the address and get no
//! memory work (`accepted`).

pub mod accepted;
pub mod fleet;
pub mod jwt;
pub mod keys;
pub mod rate_limit;
pub mod token_cache;

pub use crate::config::auth::{AuthMode, ClaimMapping, IdentityConfig};
pub use crate::record::is_valid_tenant;

use crate::error::{ApiError, Code, ErrorKind};
use crate::record::is_valid_scope;
use crate::store::Store;
use accepted::{AcceptedKeys, KeyDigest};
use jwt::JwtVerifier;
use keys::GatewayKeys;
use rate_limit::{RateLimits, Strikes};
use secrecy::SecretString;
use serde_json::{Map, Value};
use std::collections::BTreeSet;

pub const DEFAULT_TENANT: &str = "default";

/// A credential header as the edge read it: its text, or `Unreadable` for a value that is not
/// visible ASCII (which no key, token or subject is).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presented<'a> {
    Text(&'a str),
    Unreadable,
}

impl<'a> Presented<'a> {
    fn text(self) -> Option<&'a str> {
        match self {
            Presented::Text(text) => Some(text),
            Presented::Unreadable => None,
        }
    }
}

/// What a request presents to say who is calling: the first `x-api-key`, `Authorization` and
/// `X-Memory-Subject` it carries, each `None` when absent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Credentials<'a> {
    pub api_key: Option<Presented<'a>>,
    pub authorization: Option<Presented<'a>>,
    pub subject: Option<Presented<'a>>,
}

/// How the upstream learns who pays for a request.
#[derive(Clone)]
pub enum UpstreamCredential {
    /// Forward whatever `x-api-key` / `authorization` the caller sent (passthrough mode).
    Forward,
    /// Drop the caller's credential and send memgate's own key.
    Replace(SecretString),
}

/// What a caller may do beyond reading its own scopes' records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Permissions {
    /// May choose a release with `X-Memory-Version`.
    pub pin_release: bool,
    /// May name the end user with `X-Memory-Subject`.
    pub assert_subject: bool,
    /// May ask for the funnel trace with `X-Memory-Debug: 1`.
    pub debug: bool,
    /// Managed mode: may use `/v1/messages/batches…` with memgate's upstream key.
    pub batches: bool,
    /// Managed mode: may use `/v1/files…` with memgate's upstream key.
    pub files: bool,
    /// Managed mode: may use any other `/v1/*` path with memgate's upstream key.
    pub upstream_other: bool,
    /// Gets memgate's read tools (`memory_search`, `memory_get`, `memory_list`) in its Messages
    /// requests, executed by memgate (`tools`).
    pub memory_read_tools: bool,
    /// Gets the write tools too (`memory_add`, `memory_update`, `memory_delete`), which write
    /// into the caller's own scope.
    pub memory_write_tools: bool,
    /// The write tools may change and delete records other authors wrote (that the caller sees).
    pub memory_write_any: bool,
    /// memgate may execute Anthropic's memory tool (`memory_20250818`) for the caller, on its
    /// subject's `/memories` tree, when a request also asks with `X-Memory-Tool-Backend: memgate`.
    pub memory_tool_backend: bool,
    /// memgate may learn from the caller's finished exchanges, where its release observes
    /// (`observer`): the person's words and the answer are queued for extraction.
    pub observe: bool,
}

impl Permissions {
    pub fn from_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Permissions {
        let mut p = Permissions::default();
        for name in names {
            match name {
                "pin_release" => p.pin_release = true,
                "assert_subject" => p.assert_subject = true,
                "debug" => p.debug = true,
                "batches" => p.batches = true,
                "files" => p.files = true,
                "upstream_other" => p.upstream_other = true,
                "memory_read_tools" => p.memory_read_tools = true,
                "memory_write_tools" => p.memory_write_tools = true,
                "memory_write_any" => p.memory_write_any = true,
                "memory_tool_backend" => p.memory_tool_backend = true,
                "observe" => p.observe = true,
                _ => {}
            }
        }
        p
    }
}

/// The principal a request acts for.
#[derive(Clone)]
pub struct Caller {
    pub tenant: String,
    /// The end user, when known (a JWT's `sub`, or an asserted `X-Memory-Subject`).
    pub subject: Option<String>,
    /// Scopes this caller may read; always includes `public`.
    pub scopes: BTreeSet<String>,
    pub permissions: Permissions,
    /// What the rate limit counts against: the key, the JWT subject, or the passthrough key.
    pub rate_key: String,
    pub rate_limit_per_minute: u32,
    pub upstream_credential: UpstreamCredential,
    /// Whether memory may be recalled for this caller: always in managed mode (memgate checked
    /// the credential); in passthrough mode only once the upstream has accepted the key.
    pub memory_allowed: bool,
    /// Passthrough mode: the digest of the caller's key, remembered when the upstream accepts it.
    pub passthrough_key: Option<KeyDigest>,
    /// The gateway key's name (a label for people, e.g. `support-bot`), for the console.
    pub key_name: Option<String>,
    /// The credential that authenticated, as writes name it: `key:<key id>`, or a JWT's
    /// `jwt:<issuer>/<sub>` (the token's own claims, never an asserted subject). `None` for a
    /// caller no credential of memgate's vouches for (passthrough, a JWT without `sub`).
    pub credential: Option<String>,
    /// memgate's id of the request (`X-Memory-Request-Id`), kept in the provenance of what it writes.
    pub request_id: Option<String>,
}

impl Caller {
    /// A caller that is no request's (an admin's `explain`, tests, benchmarks): these scopes in
    /// `tenant` (plus `public`), no permissions, no rate limit, the upstream credential untouched.
    pub fn new(tenant: &str, scopes: impl IntoIterator<Item = String>) -> Caller {
        let mut scopes: BTreeSet<String> = scopes.into_iter().collect();
        scopes.insert("public".to_owned());
        Caller {
            tenant: tenant.to_owned(),
            subject: None,
            scopes,
            permissions: Permissions::default(),
            rate_key: String::new(),
            rate_limit_per_minute: 0,
            upstream_credential: UpstreamCredential::Forward,
            memory_allowed: true,
            passthrough_key: None,
            key_name: None,
            credential: None,
            request_id: None,
        }
    }

    /// The gateway key's id, for a caller that presented one.
    pub fn key_id(&self) -> Option<&str> {
        self.rate_key.strip_prefix("key:")
    }

    /// Where this caller's own writes go (memgate's write tools): the end user's scope
    /// (`user:<subject>`) when one is known and among the caller's scopes, else the key's own
    /// `agent:<key id>`. `None` for a caller with neither (a JWT without `sub`, passthrough).
    pub fn own_scope(&self) -> Option<String> {
        if let Some(scope) = self.subject_scope()
            && self.scopes.contains(&scope)
        {
            return Some(scope);
        }
        self.key_id().map(|id| format!("agent:{id}"))
    }

    /// The end user's own scope, `user:<subject>`, when a subject is known.
    pub fn subject_scope(&self) -> Option<String> {
        self.subject.as_ref().map(|subject| format!("user:{subject}"))
    }

    /// Who this caller's writes are by (its records' author and its changes' actor): the
    /// credential that wrote, `agent:<key id>` for a key, `agent:jwt:<issuer>/<sub>` for a JWT.
    /// Never the subject a caller asserts: two JWTs that name the same end user are two writers,
    /// and one cannot change what the other wrote by naming that user.
    pub fn author(&self) -> Option<String> {
        let credential = self.credential.as_deref()?;
        match credential.strip_prefix("key:") {
            Some(id) => Some(format!("agent:{id}")),
            None => Some(format!("agent:{credential}")),
        }
    }

    /// The scope rule of the funnel: same tenant, and at least one scope in common.
    pub fn can_see<S: AsRef<str>>(&self, tenant: &str, record_scopes: impl IntoIterator<Item = S>) -> bool {
        tenant == self.tenant && record_scopes.into_iter().any(|scope| self.scopes.contains(scope.as_ref()))
    }
}

pub struct Authenticator {
    config: IdentityConfig,
    keys: GatewayKeys,
    jwt: Option<JwtVerifier>,
    limits: RateLimits,
    strikes: Strikes,
    accepted: AcceptedKeys,
    /// With Redis, callers' limits hold across the fleet (`fleet`); unset: per replica.
    fleet: std::sync::OnceLock<std::sync::Arc<fleet::FleetLimits>>,
}

impl Authenticator {
    pub fn new(config: IdentityConfig, store: Store) -> Result<Authenticator, String> {
        let jwt = if config.jwt.is_enabled() { Some(JwtVerifier::new(config.jwt.clone())?) } else { None };
        Ok(Authenticator {
            keys: GatewayKeys::new(store).with_stale_grace(config.stale_key_grace),
            jwt,
            limits: RateLimits::default(),
            strikes: Strikes::new(config.preauth_rate_limit_per_minute),
            accepted: AcceptedKeys::default(),
            fleet: std::sync::OnceLock::new(),
            config,
        })
    }

    /// Counts callers' requests across every replica through Redis (once; later calls change
    /// nothing).
    pub fn share_limits_through(
        &self,
        connection: std::sync::Arc<arc_swap::ArcSwapOption<redis::aio::ConnectionManager>>,
        key_prefix: &str,
    ) {
        let _ = self.fleet.set(fleet::FleetLimits::start(connection, key_prefix));
    }

    /// How rate limits were checked (fleet-wide or the local share), for metrics.
    pub fn fleet_stats(&self) -> Option<fleet::FleetStats> {
        self.fleet.get().map(|f| f.stats())
    }

    pub fn keys(&self) -> &GatewayKeys {
        &self.keys
    }

    pub fn limits(&self) -> &RateLimits {
        &self.limits
    }

    /// The caller behind `presented`, from the client `address` (its key in the per-address
    /// limits before authentication: `ClientAddrs::limit_key`), with its rate limits charged.
    pub async fn authenticate(&self, presented: Credentials<'_>, address: &str) -> Result<Caller, ApiError> {
        let mut caller = match self.config.mode {
            AuthMode::Passthrough => self.passthrough_caller(presented, address)?,
            AuthMode::Managed => {
                self.strikes.check(address).map_err(too_many_failures)?;
                match self.managed_caller(presented).await {
                    Ok(caller) => caller,
                    Err(err) if err.kind() == ErrorKind::Authentication => {
                        return Err(match self.strikes.fail(address) {
                            Ok(()) => err,
                            Err(wait) => too_many_failures(wait),
                        });
                    }
                    Err(err) => return Err(err),
                }
            }
        };
        if let Some(value) = presented.subject {
            if !caller.permissions.assert_subject {
                return Err(ApiError::new(
                    ErrorKind::Permission,
                    "this caller may not assert X-Memory-Subject; issue a key with the assert_subject permission",
                ));
            }
            let subject = value.text().filter(|s| is_valid_subject(s)).ok_or_else(|| {
                ApiError::coded(
                    Code::InvalidHeader,
                    "X-Memory-Subject must be 1 to 128 printable characters without spaces or commas",
                )
            })?;
            caller.scopes.insert(format!("user:{subject}"));
            // The subject has a bucket of its own, and the key's is charged as well: naming a
            // new subject on every request must not buy a fresh allowance.
            let subject_key = format!("{}/subject:{subject}", caller.rate_key);
            self.charge(&subject_key, caller.rate_limit_per_minute).await?;
            caller.subject = Some(subject.to_owned());
        }
        self.charge(&caller.rate_key, caller.rate_limit_per_minute).await?;
        Ok(caller)
    }

    /// One request against `rate_key`'s limit: this replica's own count first (the fast path: a
    /// caller over its limit here is over it everywhere), then the fleet's, when Redis is there.
    async fn charge(&self, rate_key: &str, per_minute: u32) -> Result<(), ApiError> {
        let refused = |wait: u64| {
            ApiError::new(
                ErrorKind::RateLimited,
                format!("rate limit of {per_minute} requests a minute reached; retry in {wait} s"),
            )
            .with_retry_after(wait)
        };
        self.limits.check(rate_key, per_minute).map_err(refused)?;
        match self.fleet.get() {
            Some(fleet) => fleet.check(rate_key, per_minute).await.map_err(refused),
            None => Ok(()),
        }
    }

    /// The upstream answered a passthrough caller: a 2xx makes its key one memory may be
    /// recalled for, a 401 makes it one it may not.
    pub fn upstream_answered(&self, caller: &Caller, status: u16) {
        let Some(digest) = &caller.passthrough_key else { return };
        match status {
            200..=299 if !caller.memory_allowed => self.accepted.accept(*digest),
            401 => self.accepted.forget(digest),
            _ => {}
        }
    }

    fn passthrough_caller(&self, presented: Credentials<'_>, address: &str) -> Result<Caller, ApiError> {
        // The caller's Anthropic key is its identity for rate limiting; only a digest is kept.
        let presented = presented.api_key.or(presented.authorization).and_then(Presented::text).unwrap_or("");
        let digest = KeyDigest::of(presented);
        let accepted = self.accepted.contains(&digest);
        if !accepted {
            // Until the upstream has accepted this key, the request is unauthenticated work: it
            // counts against the client's address.
            let limit = self.config.preauth_rate_limit_per_minute;
            self.limits.check(&format!("preauth:{address}"), limit).map_err(|wait| {
                ApiError::new(
                    ErrorKind::RateLimited,
                    format!(
                        "too many requests with keys the upstream has not accepted yet from this address \
                         ({limit} a minute); retry in {wait} s"
                    ),
                )
                .with_retry_after(wait)
            })?;
        }
        Ok(Caller {
            tenant: DEFAULT_TENANT.to_owned(),
            subject: None,
            scopes: BTreeSet::from(["public".to_owned()]),
            permissions: Permissions::default(),
            rate_key: format!("passthrough:{}", digest.hex()),
            rate_limit_per_minute: self.config.passthrough_rate_limit_per_minute,
            upstream_credential: UpstreamCredential::Forward,
            memory_allowed: accepted,
            passthrough_key: Some(digest),
            key_name: None,
            credential: None,
            request_id: None,
        })
    }

    async fn managed_caller(&self, presented: Credentials<'_>) -> Result<Caller, ApiError> {
        let Some(upstream_key) = self.config.upstream_key.clone() else {
            return Err(ApiError::internal("managed auth mode without an upstream key"));
        };
        let unauthorized = |message: &str| ApiError::new(ErrorKind::Authentication, message);
        let bearer = presented
            .authorization
            .and_then(Presented::text)
            .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")));
        // SDKs send a key either as `x-api-key` or as `Authorization: Bearer` (the official
        // Python SDK does the latter): a bearer value shaped like a gateway key is one.
        let presented_key = match presented.api_key {
            Some(value) => {
                Some(value.text().ok_or_else(|| unauthorized("x-api-key is not a memgate gateway key"))?)
            }
            None => bearer.filter(|b| b.starts_with(keys::KEY_PREFIX)),
        };
        if let Some(presented) = presented_key {
            let key =
                self.keys.verify(presented).await.map_err(ApiError::from)?.ok_or_else(|| {
                    unauthorized("the gateway key is not valid (unknown, revoked or mistyped)")
                })?;
            let mut scopes: BTreeSet<String> = key.scopes.iter().cloned().collect();
            scopes.insert("public".into());
            return Ok(Caller {
                tenant: key.tenant.clone(),
                subject: None,
                scopes,
                permissions: Permissions::from_names(key.permissions.iter().map(String::as_str)),
                rate_key: format!("key:{}", key.id),
                rate_limit_per_minute: key
                    .rate_limit_per_minute
                    .unwrap_or(self.config.default_rate_limit_per_minute),
                upstream_credential: UpstreamCredential::Replace(upstream_key),
                memory_allowed: true,
                passthrough_key: None,
                key_name: Some(key.name.clone()),
                credential: Some(format!("key:{}", key.id)),
                request_id: None,
            });
        }
        let Some(token) = bearer else {
            return Err(unauthorized(
                "authentication required: send a memgate gateway key as x-api-key or a JWT as Authorization: Bearer",
            ));
        };
        let Some(verifier) = &self.jwt else {
            return Err(unauthorized(
                "JWT authentication is not configured on this gateway; use a gateway key",
            ));
        };
        let claims = verifier.verify(token).map_err(|err| unauthorized(&err.to_string()))?;
        let mut caller = self.caller_from_claims(&claims).map_err(|msg| unauthorized(&msg))?;
        caller.upstream_credential = UpstreamCredential::Replace(upstream_key);
        Ok(caller)
    }

    /// Maps verified claims to a caller as configured.
    pub fn caller_from_claims(&self, claims: &Map<String, Value>) -> Result<Caller, String> {
        let mapping = &self.config.claims;
        let tenant = match claims.get(&mapping.tenant_claim) {
            None | Some(Value::Null) => DEFAULT_TENANT.to_owned(),
            Some(Value::String(t)) if is_valid_tenant(t) => t.clone(),
            Some(_) => {
                return Err(format!("the `{}` claim is not a valid tenant name", mapping.tenant_claim));
            }
        };
        let subject = match claims.get("sub") {
            Some(Value::String(s)) if is_valid_subject(s) => Some(s.clone()),
            None => None,
            Some(_) => return Err("the `sub` claim is not a valid subject".into()),
        };
        let mut scopes = BTreeSet::from(["public".to_owned()]);
        if let Some(sub) = &subject {
            scopes.insert(format!("{}{sub}", mapping.subject_scope_prefix));
        }
        let strings = |claim: &Option<String>| -> Vec<String> {
            match claim.as_ref().and_then(|c| claims.get(c)) {
                Some(Value::String(s)) => vec![s.clone()],
                Some(Value::Array(items)) => {
                    items.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect()
                }
                _ => Vec::new(),
            }
        };
        for team in strings(&mapping.team_claim) {
            scopes.insert(format!("team:{team}"));
        }
        scopes.extend(strings(&mapping.scopes_claim));
        scopes.retain(|s| is_valid_scope(s));
        let permissions =
            Permissions::from_names(strings(&mapping.permissions_claim).iter().map(String::as_str));
        // The token's issuer and subject name the writer (`jwt:<sub>` for a token without `iss`,
        // as records written before issuers were named); a token without `sub` writes as nobody.
        let credential = subject.as_ref().map(|sub| match claims.get("iss").and_then(Value::as_str) {
            Some(issuer) => format!("jwt:{issuer}/{sub}"),
            None => format!("jwt:{sub}"),
        });
        Ok(Caller {
            credential,
            request_id: None,
            rate_key: format!("jwt:{tenant}:{}", subject.as_deref().unwrap_or("-")),
            tenant,
            subject,
            scopes,
            permissions,
            rate_limit_per_minute: self.config.default_rate_limit_per_minute,
            upstream_credential: UpstreamCredential::Forward,
            memory_allowed: true,
            passthrough_key: None,
            key_name: None,
        })
    }
}

fn too_many_failures(wait: u64) -> ApiError {
    ApiError::coded(
        Code::TooManyFailures,
        format!("too many failed authentications from this address; retry in {wait} s"),
    )
    .with_retry_after(wait)
}

/// A subject becomes part of a scope (`user:<subject>`): printable, no spaces, no commas.
pub fn is_valid_subject(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 128
        && !text.chars().any(|c| c.is_whitespace() || c.is_control() || c == ',')
}
