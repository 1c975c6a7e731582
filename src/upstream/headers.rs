//! Which headers cross the gateway. Everything is forwarded verbatim (`anthropic-*` is an open
//! list, never an allow-list) except what belongs to one connection, what the HTTP client sets
//! itself, memgate's own `x-memory-*` control headers, and — outside passthrough mode — the
//! caller's credential.

use crate::identity::UpstreamCredential;
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use secrecy::ExposeSecret;

/// Hop-by-hop headers (RFC 9110 §7.6.1): they describe one connection and are never forwarded.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Headers for the upstream request, built from the caller's.
pub fn upstream_request_headers(incoming: &HeaderMap, credential: &UpstreamCredential) -> HeaderMap {
    let mut headers = HeaderMap::with_capacity(incoming.len());
    for (name, value) in incoming {
        if is_connection_specific(incoming, name)
            || name == "host"
            || name == "content-length"
            || name.as_str().starts_with("x-memory-")
        {
            continue;
        }
        if matches!(credential, UpstreamCredential::Replace(_))
            && (name == "x-api-key" || name == "authorization")
        {
            continue;
        }
        headers.append(name.clone(), value.clone());
    }
    if let UpstreamCredential::Replace(key) = credential {
        // A key that is not a valid header value was already refused at startup; if one slipped
        // through, sending no key gets a clear 401 from the upstream rather than a panic here.
        if let Ok(mut value) = HeaderValue::from_str(key.expose_secret()) {
            value.set_sensitive(true);
            headers.insert("x-api-key", value);
        }
    }
    headers
}

/// Headers for the answer to the caller: the upstream's, minus the hop-by-hop ones.
pub fn downstream_response_headers(upstream: &HeaderMap) -> HeaderMap {
    let mut headers = HeaderMap::with_capacity(upstream.len() + 1);
    for (name, value) in upstream {
        if !is_connection_specific(upstream, name) {
            headers.append(name.clone(), value.clone());
        }
    }
    headers
}

/// Hop-by-hop by the fixed list, or named in this message's own `Connection` header.
fn is_connection_specific(headers: &HeaderMap, name: &HeaderName) -> bool {
    if HOP_BY_HOP.contains(&name.as_str()) {
        return true;
    }
    headers.get_all("connection").iter().any(|value| {
        value
            .to_str()
            .map(|list| list.split(',').any(|token| token.trim().eq_ignore_ascii_case(name.as_str())))
            .unwrap_or(false)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(HeaderName::from_bytes(k.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap());
        }
        map
    }

    #[test]
    fn anthropic_headers_go_up_verbatim_and_hop_by_hop_ones_do_not() {
        let incoming = headers(&[
            ("anthropic-version", "2023-06-01"),
            ("anthropic-beta", "a-2025,b-2026"),
            ("anthropic-some-future-header", "x"),
            ("connection", "keep-alive, x-secret-hop"),
            ("x-secret-hop", "1"),
            ("transfer-encoding", "chunked"),
            ("host", "memgate"),
            ("content-length", "10"),
            ("x-memory-subject", "u-1"),
            ("x-api-key", "sk-ant-caller"),
        ]);
        let out = upstream_request_headers(&incoming, &UpstreamCredential::Forward);
        assert_eq!(out["anthropic-version"], "2023-06-01");
        assert_eq!(out["anthropic-beta"], "a-2025,b-2026");
        assert_eq!(out["anthropic-some-future-header"], "x");
        assert_eq!(out["x-api-key"], "sk-ant-caller");
        for gone in
            ["connection", "x-secret-hop", "transfer-encoding", "host", "content-length", "x-memory-subject"]
        {
            assert!(out.get(gone).is_none(), "{gone} was forwarded");
        }
    }

    #[test]
    fn managed_mode_replaces_every_caller_credential() {
        let incoming = headers(&[("x-api-key", "sk-ant-caller"), ("authorization", "Bearer caller-jwt")]);
        let out = upstream_request_headers(
            &incoming,
            &UpstreamCredential::Replace("sk-ant-memgate".to_owned().into()),
        );
        assert_eq!(out.get_all("x-api-key").iter().count(), 1);
        assert_eq!(out["x-api-key"], "sk-ant-memgate");
        assert!(out.get("authorization").is_none());
    }
}
