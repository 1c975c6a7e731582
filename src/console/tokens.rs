//! The admin token and the viewer token: the role a presented token gives, and the fingerprint of
//! each that a console session is bound to (`session`). How a request presents a token, and the
//! admin API's check around it, is the edge's (`http::console::auth`).

use secrecy::{ExposeSecret, SecretString};
use serde::Serialize;
use subtle::ConstantTimeEq;

/// What a credential may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Everything the admin API allows.
    Admin,
    /// Reads, explain, and import dry runs (`viewer_may`).
    Viewer,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Viewer => "viewer",
        }
    }

    pub fn parse(text: &str) -> Option<Role> {
        match text {
            "admin" => Some(Role::Admin),
            "viewer" => Some(Role::Viewer),
            _ => None,
        }
    }
}

/// The admin token (`admin.token`, `MEMGATE_ADMIN_TOKEN`) and the optional viewer token
/// (`admin.viewer_token`, `MEMGATE_ADMIN_VIEWER_TOKEN`). Without an admin token the admin API and
/// console logins are off (the console's files are still served).
///
/// Each token also has a fingerprint, the HMAC-SHA256 of the token under the deployment's session
/// key (`with_session_key`): a session stores the fingerprint of the token that opened it, and is
/// live only while that is the fingerprint of the token configured now for its role, so a rotated
/// token takes its sessions with it (`session`). The key keeps the fingerprint from being a plain
/// hash of the token that a copy of the sessions table could be tested against.
pub struct AdminTokens {
    admin: Option<SecretString>,
    viewer: Option<SecretString>,
    admin_fingerprint: Option<String>,
    viewer_fingerprint: Option<String>,
}

impl AdminTokens {
    /// The tokens, with fingerprints under an empty key until `with_session_key` gives the real one.
    pub fn new(admin: Option<SecretString>, viewer: Option<SecretString>) -> AdminTokens {
        let set = |t: Option<SecretString>| t.filter(|t| !t.expose_secret().is_empty());
        AdminTokens {
            admin: set(admin),
            viewer: set(viewer),
            admin_fingerprint: None,
            viewer_fingerprint: None,
        }
        .with_session_key(b"")
    }

    /// Fingerprints the tokens under `key`: the same on every replica, and across restarts.
    pub fn with_session_key(mut self, key: &[u8]) -> AdminTokens {
        let print = |role: Role, token: &Option<SecretString>| {
            token.as_ref().map(|token| fingerprint(key, role, token.expose_secret()))
        };
        self.admin_fingerprint = print(Role::Admin, &self.admin);
        // Without an admin token no role is on, the viewer's included.
        self.viewer_fingerprint = print(Role::Viewer, &self.viewer).filter(|_| self.admin.is_some());
        self
    }

    /// The fingerprint a live session of `role` carries; `None` while that role is off.
    pub fn fingerprint(&self, role: Role) -> Option<&str> {
        match role {
            Role::Admin => self.admin_fingerprint.as_deref(),
            Role::Viewer => self.viewer_fingerprint.as_deref(),
        }
    }

    pub fn admin_api_on(&self) -> bool {
        self.admin.is_some()
    }

    /// The role `presented` is the token of, compared in constant time against both tokens (so
    /// the time taken does not say which one came closer). `None` while the admin API is off.
    pub fn role_of(&self, presented: &str) -> Option<Role> {
        let admin = self.admin.as_ref()?;
        let is = |token: &SecretString| -> bool {
            presented.as_bytes().ct_eq(token.expose_secret().as_bytes()).into()
        };
        let is_admin = is(admin);
        let is_viewer = self.viewer.as_ref().is_some_and(is);
        if is_admin {
            Some(Role::Admin)
        } else if is_viewer {
            Some(Role::Viewer)
        } else {
            None
        }
    }
}

/// HMAC-SHA256 of `role` and `token` under `key`, hex. The role is in it so that a token moved
/// from one role to the other does not carry the sessions of the first along.
fn fingerprint(key: &[u8], role: Role, token: &str) -> String {
    use hmac::Mac as _;
    // HMAC takes a key of any length; `new_from_slice` cannot fail for it.
    let Ok(mut mac) = hmac::Hmac::<sha2::Sha256>::new_from_slice(key) else { return String::new() };
    mac.update(b"memgate console session\0");
    mac.update(role.as_str().as_bytes());
    mac.update(b"\0");
    mac.update(token.as_bytes());
    mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn tokens_give_their_role_and_nothing_without_an_admin_token() {
        let tokens =
            AdminTokens::new(Some("admin-token-0123456789".into()), Some("viewer-token-0123456789".into()));
        assert_eq!(tokens.role_of("admin-token-0123456789"), Some(Role::Admin));
        assert_eq!(tokens.role_of("viewer-token-0123456789"), Some(Role::Viewer));
        assert_eq!(tokens.role_of("viewer-token-012345678"), None);
        assert_eq!(tokens.role_of(""), None);
        let off = AdminTokens::new(None, Some("viewer-token-0123456789".into()));
        assert!(!off.admin_api_on());
        assert_eq!(off.role_of("viewer-token-0123456789"), None);
        let no_viewer = AdminTokens::new(Some("admin-token-0123456789".into()), Some("".into()));
        assert_eq!(no_viewer.role_of(""), None);
    }

    #[test]
    fn fingerprints_follow_the_token_the_role_and_the_session_key() {
        let tokens = |admin: &str, viewer: Option<&str>, key: &[u8]| {
            AdminTokens::new(Some(admin.into()), viewer.map(Into::into)).with_session_key(key)
        };
        let a = tokens("admin-token-0123456789", Some("viewer-token-0123456789"), b"key-1");
        let admin = a.fingerprint(Role::Admin).unwrap();
        let viewer = a.fingerprint(Role::Viewer).unwrap();
        assert_eq!(admin.len(), 64);
        assert!(!admin.contains("admin-token"), "the fingerprint is not the token");
        assert_ne!(admin, viewer);
        // The same token and key on another replica, or after a restart: the same fingerprint.
        let again = tokens("admin-token-0123456789", None, b"key-1");
        assert_eq!(again.fingerprint(Role::Admin), Some(admin));
        assert_eq!(again.fingerprint(Role::Viewer), None, "no viewer token, no viewer sessions");
        // Another token, another key, or the same token in the other role: another fingerprint.
        assert_ne!(tokens("admin-token-9876543210", None, b"key-1").fingerprint(Role::Admin), Some(admin));
        assert_ne!(tokens("admin-token-0123456789", None, b"key-2").fingerprint(Role::Admin), Some(admin));
        let swapped = tokens("viewer-token-0123456789", Some("admin-token-0123456789"), b"key-1");
        assert_ne!(swapped.fingerprint(Role::Viewer), Some(admin));
        // With the admin API off, no session of either role is live.
        let off = AdminTokens::new(None, Some("viewer-token-0123456789".into())).with_session_key(b"key-1");
        assert_eq!((off.fingerprint(Role::Admin), off.fingerprint(Role::Viewer)), (None, None));
    }
}
