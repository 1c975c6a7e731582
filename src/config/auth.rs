//! `[auth]` and `[auth.jwt]`: who holds the upstream credential, how JWTs are checked and how
//! their claims become a caller, and callers' limits. `identity` takes the settled
//! `IdentityConfig`; the key files named here are read and parsed there, when it is built.

use super::invalid;
use crate::error::StartupError;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAuth {
    pub mode: Option<String>,
    pub rate_limit_per_minute: Option<u32>,
    pub passthrough_rate_limit_per_minute: Option<u32>,
    pub preauth_rate_limit_per_minute: Option<u32>,
    pub stale_key_grace_secs: Option<u64>,
    #[serde(default)]
    pub jwt: RawJwt,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawJwt {
    pub hs256_secret: Option<String>,
    pub public_key_file: Option<PathBuf>,
    pub jwks_file: Option<PathBuf>,
    pub issuer: Option<String>,
    pub audience: Option<String>,
    pub leeway_secs: Option<u64>,
    pub tenant_claim: Option<String>,
    pub subject_scope_prefix: Option<String>,
    pub team_claim: Option<String>,
    pub scopes_claim: Option<String>,
    pub permissions_claim: Option<String>,
}

/// Who holds the upstream credential.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AuthMode {
    /// Callers send their own Anthropic key; memgate forwards it and shows them only `public`
    /// records of the default tenant.
    #[default]
    Passthrough,
    /// memgate sends its configured `ANTHROPIC_API_KEY`; callers' credentials never go upstream.
    Managed,
}

/// How long a verified gateway key stays usable while the database is unreachable, unless
/// configured (`identity::keys`).
pub const DEFAULT_STALE_GRACE: Duration = Duration::from_secs(60);

#[derive(Debug, Clone)]
pub struct IdentityConfig {
    pub mode: AuthMode,
    pub upstream_key: Option<SecretString>,
    pub jwt: JwtConfig,
    pub claims: ClaimMapping,
    /// Per gateway key or JWT subject (managed mode), unless the key sets its own.
    pub default_rate_limit_per_minute: u32,
    /// Per caller key in passthrough mode; 0 (the default) leaves passthrough callers to the
    /// upstream's own limits.
    pub passthrough_rate_limit_per_minute: u32,
    /// Per client address: failed credentials (managed mode), requests with a key the upstream
    /// has not yet accepted (passthrough mode).
    pub preauth_rate_limit_per_minute: u32,
    /// How long a gateway key verified here goes on working while the database cannot be
    /// reached (`identity::keys`): a revocation made meanwhile elsewhere is not seen for up to
    /// this long.
    pub stale_key_grace: Duration,
}

impl Default for IdentityConfig {
    fn default() -> Self {
        IdentityConfig {
            mode: AuthMode::default(),
            upstream_key: None,
            jwt: JwtConfig::default(),
            claims: ClaimMapping::default(),
            default_rate_limit_per_minute: 600,
            passthrough_rate_limit_per_minute: 0,
            preauth_rate_limit_per_minute: 120,
            stale_key_grace: DEFAULT_STALE_GRACE,
        }
    }
}

#[derive(Debug, Clone)]
pub struct JwtConfig {
    pub hmac_secret: Option<SecretString>,
    pub public_key_file: Option<PathBuf>,
    pub jwks_file: Option<PathBuf>,
    pub issuer: Option<String>,
    pub audience: Option<String>,
    pub leeway_secs: u64,
}

impl Default for JwtConfig {
    fn default() -> Self {
        JwtConfig {
            hmac_secret: None,
            public_key_file: None,
            jwks_file: None,
            issuer: None,
            audience: None,
            leeway_secs: 30,
        }
    }
}

impl JwtConfig {
    pub fn is_enabled(&self) -> bool {
        self.hmac_secret.is_some() || self.public_key_file.is_some() || self.jwks_file.is_some()
    }
}

/// How JWT claims become a caller.
#[derive(Debug, Clone)]
pub struct ClaimMapping {
    /// Claim naming the tenant; absent → the default tenant.
    pub tenant_claim: String,
    /// `sub` becomes `<subject_scope_prefix><sub>` (default `user:`).
    pub subject_scope_prefix: String,
    /// A claim (string or list) whose values become `team:<value>`.
    pub team_claim: Option<String>,
    /// A claim holding a list of raw scopes (`role:admin`, …).
    pub scopes_claim: Option<String>,
    /// A claim holding a list of permissions (`pin_release`, `assert_subject`, `debug`,
    /// `memory_read_tools`, …: the names keys take).
    pub permissions_claim: Option<String>,
}

impl Default for ClaimMapping {
    fn default() -> Self {
        ClaimMapping {
            tenant_claim: "tenant".into(),
            subject_scope_prefix: "user:".into(),
            team_claim: Some("team".into()),
            scopes_claim: Some("scopes".into()),
            permissions_claim: Some("memgate_permissions".into()),
        }
    }
}

impl RawAuth {
    /// The settled `[auth]`, with the upstream key (`[upstream]`) that managed mode needs.
    pub fn settle(self, upstream_key: Option<SecretString>) -> Result<IdentityConfig, StartupError> {
        let default = IdentityConfig::default();
        let mode = match self.mode.as_deref() {
            None => default.mode,
            Some("passthrough") => AuthMode::Passthrough,
            Some("managed") => AuthMode::Managed,
            Some(other) => {
                return Err(invalid(
                    "auth.mode",
                    format!("`{other}` is not a mode; use `passthrough` or `managed` (MEMGATE_AUTH_MODE)"),
                ));
            }
        };
        if mode == AuthMode::Managed && upstream_key.is_none() {
            return Err(invalid(
                "upstream.api_key",
                "auth.mode `managed` sends memgate's own key upstream; set ANTHROPIC_API_KEY",
            ));
        }
        let stale_key_grace = self.stale_key_grace_secs.map_or(default.stale_key_grace, Duration::from_secs);
        if stale_key_grace < Duration::from_secs(5) || stale_key_grace > Duration::from_secs(3600) {
            return Err(invalid(
                "auth.stale_key_grace_secs",
                "use 5 to 3600 seconds: a verified key's cache lasts 5 s anyway, and a replica cut off \
                 from the database honours a key revoked elsewhere for this long",
            ));
        }
        let (jwt, claims) = self.jwt.settle(default.jwt, default.claims)?;
        Ok(IdentityConfig {
            mode,
            upstream_key,
            jwt,
            claims,
            default_rate_limit_per_minute: self
                .rate_limit_per_minute
                .unwrap_or(default.default_rate_limit_per_minute),
            passthrough_rate_limit_per_minute: self
                .passthrough_rate_limit_per_minute
                .unwrap_or(default.passthrough_rate_limit_per_minute),
            preauth_rate_limit_per_minute: self
                .preauth_rate_limit_per_minute
                .unwrap_or(default.preauth_rate_limit_per_minute),
            stale_key_grace,
        })
    }
}

impl RawJwt {
    fn settle(
        self,
        default: JwtConfig,
        claims: ClaimMapping,
    ) -> Result<(JwtConfig, ClaimMapping), StartupError> {
        // An empty string turns an optional claim off.
        let optional = |value: Option<String>, default: Option<String>| match value {
            Some(v) if v.is_empty() => None,
            Some(v) => Some(v),
            None => default,
        };
        let jwt = JwtConfig {
            hmac_secret: self.hs256_secret.filter(|s| !s.is_empty()).map(SecretString::from),
            public_key_file: self.public_key_file,
            jwks_file: self.jwks_file,
            issuer: self.issuer,
            audience: self.audience,
            leeway_secs: self.leeway_secs.unwrap_or(default.leeway_secs),
        };
        if jwt.hmac_secret.as_ref().is_some_and(|s| s.expose_secret().len() < 32) {
            return Err(invalid(
                "auth.jwt.hs256_secret",
                "must be at least 32 bytes (MEMGATE_JWT_HS256_SECRET)",
            ));
        }
        for (key, path) in
            [("auth.jwt.public_key_file", &jwt.public_key_file), ("auth.jwt.jwks_file", &jwt.jwks_file)]
        {
            if let Some(path) = path
                && !path.is_file()
            {
                return Err(invalid(key, format!("{} is not a readable file", path.display())));
            }
        }
        let claims = ClaimMapping {
            tenant_claim: self.tenant_claim.unwrap_or(claims.tenant_claim),
            subject_scope_prefix: self.subject_scope_prefix.unwrap_or(claims.subject_scope_prefix),
            team_claim: optional(self.team_claim, claims.team_claim),
            scopes_claim: optional(self.scopes_claim, claims.scopes_claim),
            permissions_claim: optional(self.permissions_claim, claims.permissions_claim),
        };
        Ok((jwt, claims))
    }
}
