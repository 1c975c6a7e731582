//! Who may call the admin API: the bearer token (admin or viewer) or a console session cookie,
//! the CSRF rule for cookie-authenticated requests, and what the viewer role may do
//! (`console/API.md` §2).
//!
//! `authorize` is the one check; the admin auth middleware (`http::admin::require_admin`) calls it
//! for every `/admin/v1/…` request, counts a strike when the refusal says so
//! (`Refusal::is_strike`), and answers the refusal as it is (`IntoResponse`). The CSRF rule holds
//! only for the cookie: a browser never attaches an `Authorization` header by itself, so a bearer
//! request cannot be forged by a page. What a token and a session are (roles, fingerprints,
//! lifetimes) is the console's (`console::tokens`, `console::session`); this is how a request
//! shows them.

use crate::console::Role;
use crate::console::session::{self, ConsoleAuth};
use crate::error::{ApiError, Code, ErrorCode};
use crate::store::{Store, StoreError};
use axum::http::{HeaderMap, Method, Uri};
use axum::response::{IntoResponse, Response};

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "memgate_console";
/// The header the console sends on every call; its presence is the CSRF proof.
pub const CONSOLE_HEADER: &str = "x-memgate-console";

/// How a request proved who it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    Bearer,
    Session,
}

/// Who is calling the admin API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub role: Role,
    pub via: Via,
    /// For a session: its actor (`console:alice`), which replaces `X-Memory-Actor` so that the
    /// history says who was logged in. `None` for a bearer token (the header decides).
    pub actor: Option<String>,
}

/// Why a request was refused. `IntoResponse` answers it in the API's error shape.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error("the admin API is off")]
    AdminOff,
    #[error("no admin credential")]
    NoCredential,
    #[error("wrong admin token")]
    WrongToken,
    #[error("the console session has ended")]
    SessionEnded,
    #[error("the CSRF rule refused the request")]
    Csrf,
    #[error("the viewer role may not do this")]
    ReadOnly,
    #[error("session store: {0}")]
    Store(#[from] StoreError),
}

impl Refusal {
    /// Whether this refusal counts as a failed admin authentication from the client's address
    /// (`admin.rate_limit_per_minute`): a credential was presented and it was wrong — a bearer
    /// token that is neither token, or a session cookie that opens no live session. A request
    /// with no credential at all is not one: any page on any site can make a browser send such
    /// requests, and counting them would let that page lock the address's admins out.
    pub fn is_strike(&self) -> bool {
        matches!(self, Refusal::WrongToken | Refusal::SessionEnded)
    }
}

impl ErrorCode for Refusal {
    fn error_code(&self) -> Code {
        match self {
            Refusal::AdminOff => Code::AdminApiOff,
            Refusal::NoCredential | Refusal::WrongToken => Code::AdminTokenInvalid,
            Refusal::SessionEnded => Code::SessionEnded,
            Refusal::Csrf => Code::CsrfRefused,
            Refusal::ReadOnly => Code::ReadOnlyRole,
            Refusal::Store(err) => err.error_code(),
        }
    }

    fn public_message(&self) -> String {
        match self {
            Refusal::AdminOff => "the admin API is off; set MEMGATE_ADMIN_TOKEN to turn it on".into(),
            Refusal::NoCredential | Refusal::WrongToken => {
                "the admin API needs `Authorization: Bearer <MEMGATE_ADMIN_TOKEN>` or a console session"
                    .into()
            }
            Refusal::SessionEnded => "the console session has ended; log in again".into(),
            Refusal::Csrf => "console requests must come from the console itself".into(),
            Refusal::ReadOnly => {
                "this session is read-only (viewer); log in with the admin token to change anything".into()
            }
            Refusal::Store(err) => err.public_message(),
        }
    }

    fn retry_after_secs(&self) -> Option<u64> {
        match self {
            Refusal::Store(err) => err.retry_after_secs(),
            _ => None,
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        ApiError::from(self).into_response()
    }
}

/// The answer once a client address has failed to authenticate too often
/// (`admin.rate_limit_per_minute`), at the admin API and at login alike.
pub(crate) fn too_many_failures(wait: u64) -> ApiError {
    ApiError::coded(
        Code::TooManyFailures,
        format!("too many failed admin authentications from this address; retry in {wait} s"),
    )
    .with_retry_after(wait)
}

/// The admin API's check, for every `/admin/v1/…` request, at `now_ms` (sessions expire): the
/// bearer token if the request has an `Authorization` header (no CSRF rule), else the session
/// cookie (then the CSRF rule), then the viewer's limits. `https`: the request came over TLS or
/// through a trusted proxy that said so (`http::client::forwarded_https`); it decides the scheme of the
/// request's own origin.
pub async fn authorize(
    headers: &HeaderMap,
    method: &Method,
    uri: &Uri,
    https: bool,
    store: &Store,
    auth: &ConsoleAuth,
    now_ms: i64,
) -> Result<Principal, Refusal> {
    if !auth.tokens.admin_api_on() {
        return Err(Refusal::AdminOff);
    }
    let principal = if let Some(value) = headers.get(axum::http::header::AUTHORIZATION) {
        let presented = value.to_str().ok().and_then(|v| v.strip_prefix("Bearer ")).unwrap_or("");
        let role = auth.tokens.role_of(presented).ok_or(Refusal::WrongToken)?;
        Principal { role, via: Via::Bearer, actor: None }
    } else {
        let cookie = session_cookie(headers).ok_or(Refusal::NoCredential)?;
        let session = session::find(store, cookie, auth, now_ms).await?.ok_or(Refusal::SessionEnded)?;
        check_csrf(headers, uri, https)?;
        session::touch(store, cookie, &session, &auth.policy, now_ms).await?;
        Principal { role: session.role, via: Via::Session, actor: Some(session.actor) }
    };
    if principal.role == Role::Viewer && !viewer_may(method, uri) {
        return Err(Refusal::ReadOnly);
    }
    Ok(principal)
}

/// The viewer's share of the admin API: every `GET`/`HEAD`, `POST /admin/v1/explain`, and
/// `POST /admin/v1/import?dry_run=true`.
pub fn viewer_may(method: &Method, uri: &Uri) -> bool {
    if method == Method::GET || method == Method::HEAD {
        return true;
    }
    if method != Method::POST {
        return false;
    }
    match uri.path().trim_end_matches('/') {
        "/admin/v1/explain" => true,
        "/admin/v1/import" => {
            let mut dry_run = None;
            for pair in uri.query().unwrap_or("").split('&') {
                if let Some(value) = pair.strip_prefix("dry_run=") {
                    // Repeated: the import handler reads the first; so does this.
                    dry_run.get_or_insert(value);
                }
            }
            dry_run == Some("true")
        }
        _ => false,
    }
}

/// The CSRF rule (API.md §2), for every cookie-authenticated request and every login: the
/// `X-Memgate-Console: 1` header; an `Origin`, when present, equal to the request's own origin
/// (`Origin: null` refused); a `Sec-Fetch-Site`, when present, `same-origin`.
pub fn check_csrf(headers: &HeaderMap, uri: &Uri, https: bool) -> Result<(), Refusal> {
    let marked = headers.get_all(CONSOLE_HEADER).iter().map(|v| v.as_bytes()).eq([b"1".as_slice()]);
    if !marked {
        return Err(Refusal::Csrf);
    }
    let mut origins = headers.get_all(axum::http::header::ORIGIN).iter();
    if let Some(origin) = origins.next() {
        let own = own_origin(headers, uri, https).ok_or(Refusal::Csrf)?;
        let origin = origin.to_str().map_err(|_| Refusal::Csrf)?;
        if origins.next().is_some() || origin == "null" || normalize_origin(origin) != normalize_origin(&own)
        {
            return Err(Refusal::Csrf);
        }
    }
    let mut sites = headers.get_all("sec-fetch-site").iter();
    if let Some(site) = sites.next()
        && (site.as_bytes() != b"same-origin" || sites.next().is_some())
    {
        return Err(Refusal::Csrf);
    }
    Ok(())
}

/// The request's own origin: `http` or `https` + `://` + the `Host` header (or, in HTTP/2, the
/// request's authority).
pub fn own_origin(headers: &HeaderMap, uri: &Uri, https: bool) -> Option<String> {
    let host = match headers.get(axum::http::header::HOST) {
        Some(value) => value.to_str().ok()?.to_owned(),
        None => uri.authority()?.as_str().to_owned(),
    };
    let scheme = if https { "https" } else { "http" };
    Some(format!("{scheme}://{host}"))
}

/// Lower case, and without the scheme's default port.
fn normalize_origin(origin: &str) -> String {
    let lower = origin.trim().to_ascii_lowercase();
    let default_port = if lower.starts_with("http://") {
        ":80"
    } else if lower.starts_with("https://") {
        ":443"
    } else {
        return lower;
    };
    match lower.strip_suffix(default_port) {
        Some(rest) => rest.to_owned(),
        None => lower,
    }
}

/// The `memgate_console` cookie's value, if the request carries one that could be a session
/// (43 characters of base64url); anything else is no session at all, without a store lookup.
pub fn session_cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == SESSION_COOKIE)
        .map(|(_, value)| value.trim())
        .filter(|value| session::is_cookie_value(value))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_static(value));
        }
        map
    }

    fn uri(text: &str) -> Uri {
        text.parse().unwrap()
    }

    #[test]
    fn the_viewer_reads_explains_and_previews_only() {
        let may = |method: Method, path: &str| viewer_may(&method, &uri(path));
        assert!(may(Method::GET, "/admin/v1/memories?q=x"));
        assert!(may(Method::HEAD, "/admin/v1/export"));
        assert!(may(Method::POST, "/admin/v1/explain"));
        assert!(may(Method::POST, "/admin/v1/import?dry_run=true"));
        assert!(may(Method::POST, "/admin/v1/import?scope=x&dry_run=true"));
        assert!(!may(Method::POST, "/admin/v1/import?dry_run=false"));
        assert!(!may(Method::POST, "/admin/v1/import"));
        assert!(!may(Method::POST, "/admin/v1/import?dry_run=false&dry_run=true"));
        assert!(!may(Method::POST, "/admin/v1/import?dry_run=TRUE"));
        assert!(!may(Method::POST, "/admin/v1/memories"));
        assert!(!may(Method::PATCH, "/admin/v1/releases/v2"));
        assert!(!may(Method::DELETE, "/admin/v1/keys/k1"));
        assert!(!may(Method::POST, "/admin/v1/explain/../keys"));
    }

    #[test]
    fn the_csrf_rule_needs_the_header_and_the_same_origin() {
        let u = uri("/admin/v1/memories");
        let ok = |pairs: &[(&'static str, &'static str)], https: bool| {
            check_csrf(&headers(pairs), &u, https).is_ok()
        };
        let host = ("host", "memgate.example:8080");
        assert!(ok(&[("x-memgate-console", "1"), host], false));
        assert!(!ok(&[host], false), "no header");
        assert!(!ok(&[("x-memgate-console", "true"), host], false), "header not exactly 1");
        assert!(!ok(&[("x-memgate-console", "1"), ("x-memgate-console", "1"), host], false), "header twice");
        assert!(ok(&[("x-memgate-console", "1"), host, ("origin", "http://memgate.example:8080")], false));
        assert!(ok(&[("x-memgate-console", "1"), host, ("origin", "HTTP://MemGate.Example:8080")], false));
        assert!(!ok(&[("x-memgate-console", "1"), host, ("origin", "https://memgate.example:8080")], false));
        assert!(!ok(&[("x-memgate-console", "1"), host, ("origin", "http://memgate.example:8081")], false));
        assert!(!ok(&[("x-memgate-console", "1"), host, ("origin", "http://evil.example:8080")], false));
        assert!(!ok(&[("x-memgate-console", "1"), host, ("origin", "null")], false));
        // Default ports are the same origin as none.
        assert!(ok(
            &[("x-memgate-console", "1"), ("host", "m.example"), ("origin", "http://m.example:80")],
            false
        ));
        assert!(ok(
            &[("x-memgate-console", "1"), ("host", "m.example:443"), ("origin", "https://m.example")],
            true
        ));
        assert!(!ok(
            &[("x-memgate-console", "1"), ("host", "m.example"), ("origin", "http://m.example")],
            true
        ));
        // Sec-Fetch-Site.
        assert!(ok(&[("x-memgate-console", "1"), host, ("sec-fetch-site", "same-origin")], false));
        assert!(!ok(&[("x-memgate-console", "1"), host, ("sec-fetch-site", "same-site")], false));
        assert!(!ok(&[("x-memgate-console", "1"), host, ("sec-fetch-site", "cross-site")], false));
        assert!(!ok(&[("x-memgate-console", "1"), host, ("sec-fetch-site", "none")], false));
        // An Origin without a Host to compare with is refused.
        assert!(!ok(&[("x-memgate-console", "1"), ("origin", "http://m.example")], false));
    }

    #[test]
    fn the_cookie_is_found_among_others_and_must_look_like_a_session() {
        let value = "A".repeat(43);
        let mut h = HeaderMap::new();
        h.append("cookie", HeaderValue::from_str(&format!("a=b; memgate_console={value}; c=d")).unwrap());
        assert_eq!(session_cookie(&h), Some(value.as_str()));
        let bad = headers(&[("cookie", "memgate_console=short")]);
        assert_eq!(session_cookie(&bad), None);
        let other = headers(&[("cookie", "memgate_consolex=AAAA")]);
        assert_eq!(session_cookie(&other), None);
    }

    #[tokio::test]
    async fn refusals_answer_the_documented_statuses_and_codes() {
        let cases = [
            (Refusal::AdminOff, 404, Some("admin_api_off")),
            (Refusal::NoCredential, 401, Some("admin_token_invalid")),
            (Refusal::WrongToken, 401, Some("admin_token_invalid")),
            (Refusal::SessionEnded, 401, Some("no_session")),
            (Refusal::Csrf, 403, Some("csrf_refused")),
            (Refusal::ReadOnly, 403, Some("read_only_role")),
        ];
        for (refusal, status, code) in cases {
            let response = refusal.into_response();
            assert_eq!(response.status().as_u16(), status);
            let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
            let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(body["error"]["code"].as_str(), code, "{body}");
        }
        assert!(Refusal::WrongToken.is_strike() && Refusal::SessionEnded.is_strike());
        assert!(!Refusal::NoCredential.is_strike() && !Refusal::Csrf.is_strike());
        assert!(!Refusal::ReadOnly.is_strike() && !Refusal::AdminOff.is_strike());
    }
}
