//! Where deliveries may go. An endpoint's host is resolved by memgate and every address it
//! resolves to is checked before a connection is made to one of those same addresses: the
//! resolver below is the HTTP client's only resolver, so a name that answers a public address to
//! a first lookup and a private one to a second (DNS rebinding) is checked on the address actually
//! used. An IP-literal URL has no lookup; `check_literal` checks it before sending.
//!
//! Refused unless the endpoint sets `allow_private`: loopback, private (RFC 1918), carrier-grade
//! NAT (100.64/10), link-local (169.254/16, fe80::/10, where cloud metadata services live),
//! unique-local (fc00::/7), unspecified, broadcast, multicast, documentation, benchmarking,
//! the 6to4 relay anycast (192.88.99/24) and reserved ranges — IANA's special-purpose registries,
//! entry by entry. IPv6 outside global unicast (2000::/3) is refused whatever it is; inside it,
//! Teredo and the rest of 2001::/23, 2001:db8::/32 and 3fff::/20. The IPv4 address inside an IPv6
//! form that reaches IPv4 (mapped, NAT64's 64:ff9b::/96, 6to4) is checked by the IPv4 rule; the
//! forms whose IPv4 end is a translator's choice (local-use NAT64 64:ff9b:1::/48, IPv4-translated,
//! IPv4-compatible, Teredo) are refused whole. A name with any refused address is refused whole.

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
        // A relay that forwards 6to4 traffic to whatever IPv4 address it carries.
        (192, 88, 99) => "6to4 relay anycast",
        (198, 18..=19, _) => "benchmarking",
        (224..=239, _, _) => "multicast",
        (240..=255, _, _) => "reserved",
        _ => return None,
    })
}

/// IPv6 is checked as an allow-list: only global unicast (2000::/3) may be called, less the
/// special-purpose ranges inside it; the IPv4 address inside a form that reaches IPv4 (mapped,
/// NAT64's well-known prefix, 6to4) is checked by the IPv4 rule. A range IANA adds later outside
/// 2000::/3 is refused without a change here.
fn refused_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let s = ip.segments();
    if ip.is_unspecified() {
        return Some("unspecified");
    }
    if ip.is_loopback() {
        return Some("loopback");
    }
    let embedded = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    Some(match s {
        // IPv4-mapped (::ffff:a.b.c.d): a dual-stack socket connects to the IPv4 address.
        [0, 0, 0, 0, 0, 0xffff, hi, lo] => return refused_v4(embedded(hi, lo)),
        // IPv4-compatible (::a.b.c.d): deprecated, no one routes it.
        [0, 0, 0, 0, 0, 0, _, _] => "IPv4-compatible",
        // IPv4-translated (::ffff:0:a.b.c.d, SIIT): a translator's, never a receiver's.
        [0, 0, 0, 0, 0xffff, 0, _, _] => "IPv4-translated",
        // NAT64's well-known prefix reaches the IPv4 address in its last 32 bits.
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => return refused_v4(embedded(hi, lo)),
        // The local-use NAT64 prefix: a translator inside the network, to addresses it chooses.
        [0x64, 0xff9b, 1, ..] => "local-use NAT64",
        // 6to4 carries an IPv4 address in its second and third segments.
        [0x2002, hi, lo, ..] => return refused_v4(embedded(hi, lo)),
        // 2001::/23, IETF protocol assignments: Teredo carries an IPv4 address (obscured),
        // the others are anycast services, benchmarking and identifiers, never a receiver.
        [0x2001, 0, ..] => "Teredo",
        [0x2001, 2, 0, ..] => "benchmarking",
        [0x2001, x, ..] if x & 0xfff0 == 0x10 || x & 0xfff0 == 0x20 => "ORCHID",
        [0x2001, x, ..] if x < 0x200 => "IETF protocol assignments",
        [0x2001, 0x0db8, ..] => "documentation",
        [0x3fff, x, ..] if x & 0xf000 == 0 => "documentation",
        [x, ..] if x & 0xe000 == 0x2000 => return None,
        // Outside global unicast: named where IANA names it, reserved otherwise.
        [0x100, 0, 0, 0 | 1, ..] => "discard-only",
        [0x5f00, ..] => "segment routing",
        [x, ..] if x & 0xfe00 == 0xfc00 => "unique-local",
        [x, ..] if x & 0xffc0 == 0xfe80 => "link-local",
        [x, ..] if x & 0xffc0 == 0xfec0 => "site-local",
        [x, ..] if x & 0xff00 == 0xff00 => "multicast",
        _ => "reserved",
    })
}

/// A refused endpoint address: the delivery is dead, not retried (the operator must change the
/// URL or allow private addresses). Its message names neither the host nor the address: it goes
/// into `last_error`, which viewers read, and an endpoint's URL may carry a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "its host resolves to a {reason} address, which is refused; set allow_private = true for this \
     endpoint if that is intended"
)]
pub struct AddressRefused {
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
        Some(reason) => Err(AddressRefused { ip, reason }),
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
                    Box::new(AddressRefused { ip, reason }) as Box<dyn std::error::Error + Send + Sync>
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

    /// IANA's special-purpose registries (IPv4 and IPv6), entry by entry: every range that is not
    /// globally reachable, or that carries an IPv4 address to a translator or relay, is refused.
    #[test]
    fn the_special_purpose_registries_are_refused() {
        for (ip, reason) in [
            // IPv4: 6to4 relay anycast (RFC 7526, deprecated): a relay forwards to any IPv4 address.
            ("192.88.99.1", "6to4 relay anycast"),
            ("192.88.99.255", "6to4 relay anycast"),
            ("192.0.0.8", "IETF protocol assignments"),
            ("203.0.113.7", "documentation"),
            ("198.51.100.7", "documentation"),
            ("192.0.2.7", "documentation"),
            ("198.19.255.255", "benchmarking"),
            ("240.0.0.1", "reserved"),
            // Local-use NAT64 (RFC 8215): a translator inside the network.
            ("64:ff9b:1::a00:1", "local-use NAT64"),
            ("64:ff9b:1:ffff::8.8.8.8", "local-use NAT64"),
            // NAT64 well-known prefix: by the IPv4 address it reaches.
            ("64:ff9b::7f00:1", "loopback"),
            ("64:ff9b::10.0.0.1", "private"),
            ("64:ff9b::192.168.0.1", "private"),
            // IPv4-mapped (every form): by the IPv4 rule.
            ("::ffff:169.254.169.254", "link-local"),
            ("::ffff:0:0", "unspecified"),
            ("::ffff:192.88.99.1", "6to4 relay anycast"),
            // IPv4-translated (RFC 2765 SIIT, ::ffff:0:0:0/96) and IPv4-compatible (::/96).
            ("::ffff:0:7f00:1", "IPv4-translated"),
            ("::ffff:0:808:808", "IPv4-translated"),
            ("::127.0.0.1", "IPv4-compatible"),
            ("::8.8.8.8", "IPv4-compatible"),
            // Teredo (2001::/32): the client's IPv4 address is inside, obscured.
            ("2001::1", "Teredo"),
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo"),
            // The rest of 2001::/23, IETF protocol assignments.
            ("2001:1::1", "IETF protocol assignments"),
            ("2001:2::1", "benchmarking"),
            ("2001:3::1", "IETF protocol assignments"),
            ("2001:10::1", "ORCHID"),
            ("2001:20::1", "ORCHID"),
            ("2001:1ff::1", "IETF protocol assignments"),
            // 6to4 (2002::/16): by the IPv4 address it embeds.
            ("2002:7f00:1::1", "loopback"),
            ("2002:a9fe:a9fe::1", "link-local"),
            ("2002:0a00:0001::1", "private"),
            // Documentation (RFC 3849, RFC 9637).
            ("2001:db8:ffff::1", "documentation"),
            ("3fff::1", "documentation"),
            ("3fff:fff:ffff::1", "documentation"),
            // Discard-only (RFC 6666), dummy prefix (RFC 9780), segment routing SIDs (RFC 9602).
            ("100::1", "discard-only"),
            ("100:0:0:1::1", "discard-only"),
            ("5f00::1", "segment routing"),
            // Outside global unicast (2000::/3), IANA's unassigned or reserved space.
            ("4000::1", "reserved"),
            ("e000::1", "reserved"),
            ("1::1", "reserved"),
            ("fec0::1", "site-local"),
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
            "64:ff9b::808:808",
            "2001:4860:4860::8888",
            "2001:200::1",
            "2400:cb00::1",
            "2a00:1450:4001::200e",
            "3ffe::1",
            "192.88.98.1",
            "192.88.100.1",
        ] {
            assert_eq!(check(ip), None, "{ip}");
        }
    }

    #[test]
    fn literal_urls_are_checked_and_names_are_left_to_the_resolver() {
        let url = |s: &str| url::Url::parse(s).unwrap();
        let refused = check_literal(&url("http://127.0.0.1:9000/hook"), false).unwrap_err();
        assert!(refused.to_string().contains("loopback") && refused.to_string().contains("allow_private"));
        assert!(!refused.to_string().contains("127.0.0.1"), "no part of the URL: {refused}");
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
