//! `[admin]`: the admin API's tokens and listener, imports, and the console's session key.

use super::invalid;
use crate::error::StartupError;
use secrecy::SecretString;
use serde::Deserialize;
use std::net::SocketAddr;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdmin {
    pub token: Option<String>,
    pub viewer_token: Option<String>,
    pub listen: Option<String>,
    pub max_import_bytes: Option<u64>,
    pub rate_limit_per_minute: Option<u32>,
    pub session_secret: Option<String>,
}

#[derive(Debug, Clone)]
pub struct AdminConfig {
    /// Bearer token of the admin API; `None` turns the admin API off.
    pub token: Option<SecretString>,
    /// The read-only token (the console's viewer role); `None`: no viewer role.
    pub viewer_token: Option<SecretString>,
    /// A listener of its own for `/admin` and `/metrics`, off the public one; `None` serves them
    /// on `listen`.
    pub listen: Option<SocketAddr>,
    pub max_import_bytes: u64,
    /// Failed admin authentications allowed per client address and minute.
    pub rate_limit_per_minute: u32,
    /// The key console sessions are bound to their token under (`console::AdminTokens`); `None`:
    /// a random one the store keeps, shared by every replica on the database.
    pub session_secret: Option<SecretString>,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            token: None,
            viewer_token: None,
            listen: None,
            max_import_bytes: 64 * 1024 * 1024,
            rate_limit_per_minute: 30,
            session_secret: None,
        }
    }
}

impl RawAdmin {
    pub fn settle(self) -> Result<AdminConfig, StartupError> {
        let default = AdminConfig::default();
        let token = self.token.filter(|t| !t.is_empty());
        if token.as_ref().is_some_and(|t| t.len() < 16) {
            return Err(invalid(
                "admin.token",
                "the admin token must be at least 16 characters (MEMGATE_ADMIN_TOKEN)",
            ));
        }
        let listen = match self.listen.filter(|l| !l.is_empty()) {
            None => None,
            Some(text) => Some(text.parse::<SocketAddr>().map_err(|_| {
                invalid(
                    "admin.listen",
                    format!("`{text}` is not an address like 127.0.0.1:9091 (MEMGATE_ADMIN_LISTEN)"),
                )
            })?),
        };
        let viewer_token = self.viewer_token.filter(|t| !t.is_empty());
        if viewer_token.as_ref().is_some_and(|t| t.len() < 16) {
            return Err(invalid(
                "admin.viewer_token",
                "the viewer token must be at least 16 characters (MEMGATE_ADMIN_VIEWER_TOKEN)",
            ));
        }
        if viewer_token.is_some() && viewer_token == token {
            return Err(invalid(
                "admin.viewer_token",
                "the viewer token must differ from the admin token: one token cannot be both roles",
            ));
        }
        let session_secret = self.session_secret.filter(|s| !s.is_empty());
        if session_secret.as_ref().is_some_and(|s| s.len() < 32) {
            return Err(invalid(
                "admin.session_secret",
                "the session secret must be at least 32 characters, the same on every replica \
                 (MEMGATE_ADMIN_SESSION_SECRET); unset, the store keeps one",
            ));
        }
        Ok(AdminConfig {
            token: token.map(SecretString::from),
            viewer_token: viewer_token.map(SecretString::from),
            listen,
            max_import_bytes: self.max_import_bytes.unwrap_or(default.max_import_bytes),
            rate_limit_per_minute: self.rate_limit_per_minute.unwrap_or(default.rate_limit_per_minute),
            session_secret: session_secret.map(SecretString::from),
        })
    }
}
