//! The client's address, for rate limits that count per address and for canary allow-lists.
//!
//! By default it is the TCP peer. Behind a load balancer every request comes from the balancer,
//! so one noisy client would lock out everyone (and an allow-list by CIDR would match nobody):
//! with `client_ip.trusted_proxies` set, a request whose peer is one of those proxies is taken to
//! come from the address the proxy wrote in `client_ip.header` (`X-Forwarded-For` by default),
//! read right to left, skipping the trusted proxies' own addresses. A header from any other peer
//! is ignored: a client cannot choose its own address by sending the header itself.
//!
//! The per-address limits count an IPv6 client by its network, not its address
//! (`limit_key`, `client_ip.ipv6_limit_prefix`, /64 by default): a single host or customer line
//! is handed a /64 and can take any of its 2^64 addresses, so limits keyed by the full address
//! would give it as many fresh allowances as it cares to use.
//!
//! Nothing here reads a request: the edge hands `resolve` the peer and the header's values.

use std::net::{IpAddr, Ipv6Addr};

/// The IPv6 network a client is counted by in the per-address limits: what one host or one
/// customer line is handed.
pub const DEFAULT_IPV6_LIMIT_PREFIX: u8 = 64;

#[derive(Debug, Clone)]
pub struct ClientAddrs {
    trusted: Vec<Cidr>,
    /// The header the proxies set, lower case.
    header: String,
    ipv6_limit_prefix: u8,
}

impl Default for ClientAddrs {
    fn default() -> Self {
        ClientAddrs {
            trusted: Vec::new(),
            header: "x-forwarded-for".to_owned(),
            ipv6_limit_prefix: DEFAULT_IPV6_LIMIT_PREFIX,
        }
    }
}

impl ClientAddrs {
    /// `trusted`: CIDR blocks of the proxies in front; `header`: the header they set.
    pub fn new(trusted: &[String], header: &str) -> Result<ClientAddrs, String> {
        let trusted = trusted
            .iter()
            .map(|text| Cidr::parse(text).ok_or_else(|| format!("`{text}` is not an address or CIDR block")))
            .collect::<Result<_, _>>()?;
        if !is_header_name(header) {
            return Err(format!("`{header}` is not a header name"));
        }
        Ok(ClientAddrs {
            trusted,
            header: header.to_ascii_lowercase(),
            ipv6_limit_prefix: DEFAULT_IPV6_LIMIT_PREFIX,
        })
    }

    /// Counts IPv6 clients by their first `prefix` bits (32 to 128; 128: each address alone).
    pub fn with_ipv6_limit_prefix(mut self, prefix: u8) -> Result<ClientAddrs, String> {
        if !(32..=128).contains(&prefix) {
            return Err(format!("{prefix} is not an IPv6 prefix length from 32 to 128"));
        }
        self.ipv6_limit_prefix = prefix;
        Ok(self)
    }

    /// What the per-address limits count `client` under: an IPv4 address as it is, an IPv6 one
    /// as its network (`2001:db8:1:2::/64`), and `unknown` without an address.
    pub fn limit_key(&self, client: Option<IpAddr>) -> String {
        match client.map(canonical) {
            None => "unknown".to_owned(),
            Some(IpAddr::V4(v4)) => v4.to_string(),
            Some(IpAddr::V6(v6)) if self.ipv6_limit_prefix >= 128 => v6.to_string(),
            Some(IpAddr::V6(v6)) => {
                let mask = u128::MAX << (128 - u32::from(self.ipv6_limit_prefix));
                format!("{}/{}", Ipv6Addr::from(u128::from(v6) & mask), self.ipv6_limit_prefix)
            }
        }
    }

    pub fn is_trusted(&self, addr: IpAddr) -> bool {
        self.trusted.iter().any(|cidr| cidr.contains(addr))
    }

    /// The header the trusted proxies name the client in (lower case).
    pub fn header(&self) -> &str {
        &self.header
    }

    /// The client behind `peer`: the peer itself unless it is a trusted proxy that named one in
    /// `forwarded`, the values of its `header` in order (`None` for a value that is not text).
    pub fn resolve<'a>(
        &self,
        peer: Option<IpAddr>,
        forwarded: impl IntoIterator<Item = Option<&'a str>>,
    ) -> Option<IpAddr> {
        let peer = peer.map(canonical)?;
        if !self.is_trusted(peer) {
            return Some(peer);
        }
        // Several header lines read as one list, in order; the proxy nearest us appended last.
        let values = forwarded;
        let mut forwarded: Vec<IpAddr> = Vec::new();
        for value in values {
            let Some(text) = value else { return Some(peer) };
            for item in text.split(',') {
                match parse_item(item) {
                    Some(addr) => forwarded.push(canonical(addr)),
                    // A list we cannot read names no one we can trust.
                    None => return Some(peer),
                }
            }
        }
        let mut nearest = peer;
        for addr in forwarded.into_iter().rev() {
            nearest = addr;
            if !self.is_trusted(addr) {
                break;
            }
        }
        Some(nearest)
    }
}

/// RFC 9110's token characters: what a header name is made of.
fn is_header_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// One entry of `X-Forwarded-For`: an address, maybe with a port (`1.2.3.4:5678`, `[::1]:80`).
fn parse_item(item: &str) -> Option<IpAddr> {
    let item = item.trim();
    if let Ok(addr) = item.parse() {
        return Some(addr);
    }
    if let Ok(socket) = item.parse::<std::net::SocketAddr>() {
        return Some(socket.ip());
    }
    item.strip_prefix('[').and_then(|rest| rest.strip_suffix(']')).and_then(|inner| inner.parse().ok())
}

/// `::ffff:1.2.3.4` is 1.2.3.4: a dual-stack listener reports IPv4 peers that way.
fn canonical(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
        v4 => v4,
    }
}

/// A parsed CIDR block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    network: std::net::IpAddr,
    prefix: u8,
}

impl Cidr {
    pub fn parse(text: &str) -> Option<Cidr> {
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (a, p.parse::<u8>().ok()?),
            None => (text, if text.contains(':') { 128 } else { 32 }),
        };
        let network: std::net::IpAddr = addr.parse().ok()?;
        let max = if network.is_ipv4() { 32 } else { 128 };
        (prefix <= max).then_some(Cidr { network, prefix })
    }

    pub fn contains(&self, ip: std::net::IpAddr) -> bool {
        // An IPv4 client may arrive as an IPv4-mapped IPv6 address on a dual-stack socket.
        let ip = match ip {
            std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, std::net::IpAddr::V4),
            v4 => v4,
        };
        match (self.network, ip) {
            (std::net::IpAddr::V4(net), std::net::IpAddr::V4(ip)) => {
                let mask = if self.prefix == 0 { 0 } else { u32::MAX << (32 - u32::from(self.prefix)) };
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (std::net::IpAddr::V6(net), std::net::IpAddr::V6(ip)) => {
                let mask = if self.prefix == 0 { 0 } else { u128::MAX << (128 - u32::from(self.prefix)) };
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// The values of the header, as the edge hands them over.
    fn headers<'a>(values: &'a [&'a str]) -> Vec<Option<&'a str>> {
        values.iter().map(|v| Some(*v)).collect()
    }

    const NONE: [Option<&str>; 0] = [];

    fn ip(text: &str) -> Option<IpAddr> {
        Some(text.parse().unwrap())
    }

    #[test]
    fn limits_count_an_ipv6_client_by_its_network() {
        let addrs = ClientAddrs::default();
        let key = |text: &str| addrs.limit_key(ip(text));
        assert_eq!(key("2001:db8:1:2::1"), "2001:db8:1:2::/64");
        // Every address of one /64 is one client...
        assert_eq!(key("2001:db8:1:2:ffff:ffff:ffff:ffff"), key("2001:db8:1:2::1"));
        assert_eq!(key("2001:db8:1:2:dead:beef:0:7"), key("2001:db8:1:2::1"));
        // ...the next /64 another.
        assert_ne!(key("2001:db8:1:3::1"), key("2001:db8:1:2::1"));
        // IPv4, also as a dual-stack socket reports it, is its address.
        assert_eq!(key("203.0.113.9"), "203.0.113.9");
        assert_eq!(key("::ffff:203.0.113.9"), "203.0.113.9");
        assert_eq!(addrs.limit_key(None), "unknown");

        let per_address = ClientAddrs::default().with_ipv6_limit_prefix(128).unwrap();
        assert_ne!(per_address.limit_key(ip("2001:db8::1")), per_address.limit_key(ip("2001:db8::2")));
        let per_48 = ClientAddrs::default().with_ipv6_limit_prefix(48).unwrap();
        assert_eq!(per_48.limit_key(ip("2001:db8:1:ffff::1")), "2001:db8:1::/48");
        assert!(ClientAddrs::default().with_ipv6_limit_prefix(0).unwrap_err().contains("32 to 128"));
        assert!(ClientAddrs::default().with_ipv6_limit_prefix(129).is_err());
    }

    #[test]
    fn without_trusted_proxies_the_peer_is_the_client_whatever_the_header_says() {
        let addrs = ClientAddrs::default();
        assert_eq!(addrs.resolve(ip("10.0.0.9"), headers(&["1.2.3.4"])), ip("10.0.0.9"));
        assert_eq!(addrs.resolve(ip("::ffff:10.0.0.9"), NONE), ip("10.0.0.9"));
        assert_eq!(addrs.resolve(None, headers(&["1.2.3.4"])), None);
    }

    #[test]
    fn a_trusted_proxy_names_the_client_read_from_the_right() {
        let addrs = ClientAddrs::new(&["127.0.0.1".into(), "10.0.0.0/8".into()], "X-Forwarded-For").unwrap();
        // The client may prepend anything; the entry our own proxy appended is what counts.
        assert_eq!(addrs.resolve(ip("127.0.0.1"), headers(&["6.6.6.6, 203.0.113.7"])), ip("203.0.113.7"));
        // Chains of trusted proxies are skipped.
        assert_eq!(
            addrs.resolve(ip("127.0.0.1"), headers(&["198.51.100.2", "203.0.113.7:4444, 10.1.2.3"])),
            ip("203.0.113.7")
        );
        assert_eq!(addrs.resolve(ip("127.0.0.1"), headers(&["[2001:db8::1]:443"])), ip("2001:db8::1"));
        // No header, or one we cannot read: the proxy itself.
        assert_eq!(addrs.resolve(ip("127.0.0.1"), NONE), ip("127.0.0.1"));
        assert_eq!(addrs.resolve(ip("127.0.0.1"), headers(&["not-an-ip, 1.2.3.4"])), ip("127.0.0.1"));
        // A peer that is not trusted cannot speak for anyone.
        assert_eq!(addrs.resolve(ip("192.0.2.1"), headers(&["1.2.3.4"])), ip("192.0.2.1"));
    }

    #[test]
    fn configuration_errors_name_the_value() {
        assert!(
            ClientAddrs::new(&["10.0.0.0/99".into()], "x-forwarded-for").unwrap_err().contains("10.0.0.0/99")
        );
        assert!(ClientAddrs::new(&[], "bad header").unwrap_err().contains("bad header"));
    }

    #[test]
    fn cidrs_match_their_addresses_only() {
        let net = Cidr::parse("10.1.0.0/16").unwrap();
        assert!(net.contains("10.1.200.3".parse().unwrap()));
        assert!(!net.contains("10.2.0.1".parse().unwrap()));
        assert!(net.contains("::ffff:10.1.0.9".parse().unwrap()));
        assert!(Cidr::parse("127.0.0.1").unwrap().contains("127.0.0.1".parse().unwrap()));
        assert!(Cidr::parse("::1/128").unwrap().contains("::1".parse().unwrap()));
        for bad in ["10.0.0.0/33", "nonsense", "10.0.0/8"] {
            assert!(Cidr::parse(bad).is_none(), "{bad}");
        }
    }
}
