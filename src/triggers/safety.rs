//! Where deliveries may go. An endpoint's host is resolved by memgate and every address it
//! resolves to is checked before a connection is made to one of those same addresses: the
//! resolver below is the HTTP client's only resolver, so a name that answers a public address to
//! a first lookup and a private one to a second (DNS rebinding) is checked on the address actually
//! used. An IP-literal URL has no lookup; `check_literal` checks it before sending.
//!
//! Refused unless the endpoint sets `allow_private`: loopback, private (RFC 1918), carrier-grade
//! NAT (100.64/10), link-local (169.254/16, fe80::/10, where cloud metadata services live),
//! unique-local (fc00::/7), unspecified, broadcast, multicast, documentation, benchmarking and
//! reserved ranges; IPv4 addresses inside IPv6 (mapped, compatible, NAT64, 6to4) by the IPv4 rule.
//! A name with any refused address is refused whole.

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Why an address may not be called, or `None` when it may.
pub fn refused(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => refused_v4(v4),
        IpAddr::V6(v6) => refused_v6(v6),
    }
}

fn refused_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        (0, _, _) => "unspecified",
        (127, _, _) => "loopback",
        (10, _, _) | (192, 168, _) => "private",
        (172, 16..=31, _) => "private",
        (100, 64..=127, _) => "carrier-grade NAT",
        (169, 254, _) => "link-local",
        (192, 0, 0) => "IETF protocol assignments",
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => "documentation",
        (198, 18..=19, _) => "benchmarking",
        (224..=239, _, _) => "multicast",
        (240..=255, _, _) => "reserved",
        _ => return None,
    })
}

fn refused_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let s = ip.segments();
    if ip.is_unspecified() {
        return Some("unspecified");
    }
    if ip.is_loopback() {
        return Some("loopback");
    }
    if let Some(v4) = ip.to_ipv4_mapped() {
        return refused_v4(v4);
    }
    let embedded = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    // IPv4-compatible (::a.b.c.d): deprecated, no one routes it.
    if s[..6] == [0, 0, 0, 0, 0, 0] {
        return Some("IPv4-compatible");
    }
    // NAT64 (64:ff9b::/96) reaches the IPv4 address in its last 32 bits.
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return refused_v4(embedded(s[6], s[7]));
    }
    // 6to4 (2002::/16) carries an IPv4 address in its second and third segments.
    if s[0] == 0x2002 {
        return refused_v4(embedded(s[1], s[2]));
    }
    Some(match s[0] {
        x if x & 0xfe00 == 0xfc00 => "unique-local",
        x if x & 0xffc0 == 0xfe80 => "link-local",
        x if x & 0xffc0 == 0xfec0 => "site-local",
        x if x & 0xff00 == 0xff00 => "multicast",
        0x2001 if s[1] == 0x0db8 => "documentation",
        _ => return None,
    })
}

/// A refused endpoint address: the delivery is dead, not retried (the operator must change the
/// URL or allow private addresses).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "refused to call {host}: it resolves to {ip}, a {reason} address; set allow_private = true for \
     this endpoint if that is intended"
)]
pub struct AddressRefused {
    pub host: String,
    pub ip: IpAddr,
    pub reason: &'static str,
}

/// Checks a URL whose host is an IP address (no lookup will check it).
pub fn check_literal(url: &url::Url, allow_private: bool) -> Result<(), AddressRefused> {
    if allow_private {
        return Ok(());
    }
    let ip = match url.host() {
        Some(url::Host::Ipv4(ip)) => IpAddr::V4(ip),
        Some(url::Host::Ipv6(ip)) => IpAddr::V6(ip),
        _ => return Ok(()),
    };
    match refused(ip) {
        Some(reason) => Err(AddressRefused { host: ip.to_string(), ip, reason }),
        None => Ok(()),
    }
}

/// The delivery client's resolver: the system's lookup, then the check above on every address.
#[derive(Debug, Clone, Copy)]
pub struct CheckedResolver {
    pub allow_private: bool,
}

impl Resolve for CheckedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        let allow_private = self.allow_private;
        Box::pin(async move {
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let first_refused = addrs.iter().find_map(|a| refused(a.ip()).map(|r| (a.ip(), r)));
            if let (false, Some((ip, reason))) = (allow_private, first_refused) {
                return Err(
                    Box::new(AddressRefused { host, ip, reason }) as Box<dyn std::error::Error + Send + Sync>
                );
            }
            let addrs: Addrs = Box::new(addrs.into_iter());
            Ok(addrs)
        })
    }
}

/// The `AddressRefused` somewhere in an error's chain of sources, if it is there.
pub fn refusal_in<'e>(error: &'e (dyn std::error::Error + 'static)) -> Option<&'e AddressRefused> {
    let mut current: Option<&'e (dyn std::error::Error + 'static)> = Some(error);
    while let Some(err) = current {
        if let Some(refused) = err.downcast_ref::<AddressRefused>() {
            return Some(refused);
        }
        current = err.source();
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn check(text: &str) -> Option<&'static str> {
        refused(text.parse().unwrap())
    }

    #[test]
    fn private_and_special_addresses_are_refused() {
        for (ip, reason) in [
            ("127.0.0.1", "loopback"),
            ("127.8.9.10", "loopback"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("100.64.0.1", "carrier-grade NAT"),
            ("169.254.169.254", "link-local"),
            ("0.0.0.0", "unspecified"),
            ("255.255.255.255", "reserved"),
            ("224.0.0.1", "multicast"),
            ("198.18.0.1", "benchmarking"),
            ("::1", "loopback"),
            ("::", "unspecified"),
            ("fe80::1", "link-local"),
            ("fd12:3456::1", "unique-local"),
            ("fc00::1", "unique-local"),
            ("ff02::1", "multicast"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:10.0.0.1", "private"),
            ("64:ff9b::a9fe:a9fe", "link-local"),
            ("2002:c0a8:0101::1", "private"),
            ("2001:db8::1", "documentation"),
        ] {
            assert_eq!(check(ip), Some(reason), "{ip}");
        }
    }

    #[test]
    fn public_addresses_pass() {
        for ip in [
            "8.8.8.8",
            "1.1.1.1",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "2002:0808:0808::1",
        ] {
            assert_eq!(check(ip), None, "{ip}");
        }
    }

    #[test]
    fn literal_urls_are_checked_and_names_are_left_to_the_resolver() {
        let url = |s: &str| url::Url::parse(s).unwrap();
        let refused = check_literal(&url("http://127.0.0.1:9000/hook"), false).unwrap_err();
        assert!(refused.to_string().contains("loopback") && refused.to_string().contains("allow_private"));
        assert!(check_literal(&url("http://[::1]/hook"), false).is_err());
        assert!(check_literal(&url("http://127.0.0.1:9000/hook"), true).is_ok());
        assert!(check_literal(&url("https://example.com/hook"), false).is_ok());
    }

    #[tokio::test]
    async fn the_resolver_refuses_names_that_resolve_inside() {
        let name: Name = "localhost".parse().unwrap();
        let error = match (CheckedResolver { allow_private: false }).resolve(name).await {
            Ok(_) => panic!("localhost must be refused"),
            Err(error) => error,
        };
        let refused = refusal_in(error.as_ref()).unwrap();
        assert_eq!(refused.reason, "loopback");
        let name: Name = "localhost".parse().unwrap();
        let addrs: Vec<SocketAddr> =
            (CheckedResolver { allow_private: true }).resolve(name).await.unwrap().collect();
        assert!(addrs.iter().all(|a| a.ip().is_loopback()), "{addrs:?}");
    }
}
