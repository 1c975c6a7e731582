//! Who sent a request, as the edge sees it: the client's address (the TCP peer, or whom a trusted
//! proxy names: `client_addr`), what its per-address limits count it under, and whether it came
//! over HTTPS (a trusted proxy's `X-Forwarded-Proto`).

use crate::state::AppState;
use axum::extract::ConnectInfo;
use axum::http::HeaderMap;
use axum::http::request::Parts;
use std::net::{IpAddr, SocketAddr};

/// What the edge reads of a request's origin from the application's state.
pub trait RequestOrigin {
    /// The client's address: the peer, or whom a trusted proxy names.
    fn client_addr(&self, parts: &Parts) -> Option<IpAddr>;
    /// What the client's per-address limits count under (`ClientAddrs::limit_key`): its
    /// address, an IPv6 one by its network.
    fn client_limit_key(&self, parts: &Parts) -> String;
    /// Whether the request came over HTTPS: a trusted proxy's `X-Forwarded-Proto: https` (memgate
    /// itself serves plain HTTP). Decides the console cookie's `Secure` and the CSRF origin.
    fn is_https(&self, parts: &Parts) -> bool;
}

fn peer(parts: &Parts) -> Option<IpAddr> {
    parts.extensions.get::<ConnectInfo<SocketAddr>>().map(|ConnectInfo(addr)| addr.ip())
}

impl RequestOrigin for AppState {
    fn client_addr(&self, parts: &Parts) -> Option<IpAddr> {
        let addrs = self.client_addrs();
        let forwarded = parts.headers.get_all(addrs.header()).iter().map(|value| value.to_str().ok());
        addrs.resolve(peer(parts), forwarded)
    }

    fn client_limit_key(&self, parts: &Parts) -> String {
        self.client_addrs().limit_key(self.client_addr(parts))
    }

    fn is_https(&self, parts: &Parts) -> bool {
        let trusted = peer(parts).is_some_and(|p| self.client_addrs().is_trusted(p));
        forwarded_https(&parts.headers, trusted)
    }
}

/// Whether a request came over HTTPS, for a memgate that does not terminate TLS itself: its peer
/// is a trusted proxy (`client_ip.trusted_proxies`) that said `X-Forwarded-Proto: https`.
/// A header from any other peer is ignored, as `client_addr` ignores `X-Forwarded-For`.
pub fn forwarded_https(headers: &HeaderMap, peer_is_trusted_proxy: bool) -> bool {
    peer_is_trusted_proxy
        && headers
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            // A chain of proxies may list several; the first is what the client used.
            .and_then(|v| v.split(',').next())
            .is_some_and(|proto| proto.trim().eq_ignore_ascii_case("https"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn headers(proto: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-proto", proto.parse().unwrap());
        h
    }

    #[test]
    fn only_a_trusted_proxy_says_https() {
        let h = headers("HTTPS, http");
        assert!(forwarded_https(&h, true));
        assert!(!forwarded_https(&h, false));
        assert!(!forwarded_https(&headers("http"), true));
        assert!(!forwarded_https(&HeaderMap::new(), true));
    }
}
