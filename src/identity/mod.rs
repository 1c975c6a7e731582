//! Who is calling. Today two modes: `passthrough` (the caller's own Anthropic key goes upstream;
//! the caller sees only `public` records of the default tenant) and `managed` (memgate's key goes
//! upstream, the caller's credential never does). Gateway keys and JWTs plug in here: they will
//! turn `authenticate` into a lookup that can refuse, and give callers their own tenant and scopes.

use crate::config::AuthMode;
use crate::error::ApiError;
use crate::proxy::headers::UpstreamCredential;
use axum::http::HeaderMap;
use secrecy::SecretString;

pub const DEFAULT_TENANT: &str = "default";

/// The principal a request acts for.
#[derive(Clone)]
pub struct Caller {
    pub tenant: String,
    /// Scopes this caller may read; always includes `public`.
    pub scopes: Vec<String>,
    pub upstream_credential: UpstreamCredential,
}

pub struct Identity {
    mode: AuthMode,
    upstream_key: Option<SecretString>,
}

impl Identity {
    pub fn new(mode: AuthMode, upstream_key: Option<SecretString>) -> Identity {
        Identity { mode, upstream_key }
    }

    pub fn authenticate(&self, _headers: &HeaderMap) -> Result<Caller, ApiError> {
        let upstream_credential = match (self.mode, &self.upstream_key) {
            (AuthMode::Managed, Some(key)) => UpstreamCredential::Replace(key.clone()),
            // Config validation refuses managed mode without a key; forwarding would leak the
            // caller's credential, so fail loudly instead of falling back.
            (AuthMode::Managed, None) => {
                return Err(ApiError::internal("managed auth mode without an upstream key"));
            }
            (AuthMode::Passthrough, _) => UpstreamCredential::Forward,
        };
        Ok(Caller {
            tenant: DEFAULT_TENANT.to_owned(),
            scopes: vec!["public".to_owned()],
            upstream_credential,
        })
    }
}
