//! Which `Host` a request may name: protection against DNS rebinding. A web page on
//! `evil.example` can make its own name resolve to 127.0.0.1 and then read, from the visitor's
//! browser, what a memgate bound to loopback answers (`/metrics`, and in passthrough mode the
//! public records); the browser still sends `Host: evil.example`. Answering only for the names
//! memgate is reached by closes that.
//!
//! `allowed_hosts` lists them. Left empty, a loopback listener answers for the loopback names
//! (`localhost` and the loopback addresses, `127.0.0.1` and `[::1]` among them, on any port) and
//! for single-label names (`memgate`, the name a proxy on the same host gives its upstream by
//! default): rebinding needs a name the page's owner controls in public DNS, and such a name has
//! a dot. Any other listener answers for every host: behind a load balancer or an ingress, which names reach
//! memgate is theirs to decide. Ports are not matched: the port is the listener's.
//!
//! `/healthz` and `/readyz` answer whatever the host: they tell nothing a page could use, and
//! load balancers and orchestrators probe them by IP (a kubelet sends `Host: <pod IP>:<port>`),
//! so a list made for the public names must not turn a healthy replica unhealthy.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// The validated `allowed_hosts` list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostList {
    entries: Vec<Entry>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    /// `*`: every host.
    Any,
    /// A name or an address (IPv6 in brackets), lowercase, without a trailing dot.
    Exact(String),
    /// `.example.com`: the domain and every name under it.
    Domain(String),
}

/// The hosts one listener answers for; put in each request's extensions by the server, judged
/// by `http::allowed_hosts::refuse_other_hosts`.
#[derive(Debug, Clone)]
pub struct AllowedHosts(Rule);

#[derive(Debug, Clone)]
enum Rule {
    Any,
    Loopback,
    Only(Arc<[Entry]>),
}

impl HostList {
    pub fn parse(items: &[String]) -> Result<HostList, String> {
        let entries = items.iter().map(|item| parse_entry(item)).collect::<Result<_, _>>()?;
        Ok(HostList { entries })
    }

    /// What a listener on `addr` answers for: the list when one is given, else the loopback
    /// names on a loopback address and every host on any other.
    pub fn for_listener(&self, addr: SocketAddr) -> AllowedHosts {
        let rule = if self.entries.contains(&Entry::Any) {
            Rule::Any
        } else if !self.entries.is_empty() {
            Rule::Only(self.entries.clone().into())
        } else if addr.ip().is_loopback() {
            Rule::Loopback
        } else {
            Rule::Any
        };
        AllowedHosts(rule)
    }
}

impl AllowedHosts {
    /// Whether a request naming `host` (a `Host` header's value) is answered. A request that
    /// names none cannot come from a browser, which always does.
    pub fn allows(&self, host: Option<&str>) -> bool {
        let (Some(host), false) = (host, matches!(self.0, Rule::Any)) else { return true };
        let Some(name) = host_name(host) else { return false };
        match &self.0 {
            Rule::Any => true,
            Rule::Loopback => is_loopback_name(&name) || is_single_label(&name),
            Rule::Only(entries) => entries.iter().any(|entry| match entry {
                Entry::Any => true,
                Entry::Exact(exact) => *exact == name,
                Entry::Domain(domain) => {
                    name == *domain
                        || name.strip_suffix(domain.as_str()).is_some_and(|sub| sub.ends_with('.'))
                }
            }),
        }
    }
}

fn parse_entry(item: &str) -> Result<Entry, String> {
    let text = item.trim().to_ascii_lowercase();
    if text == "*" {
        return Ok(Entry::Any);
    }
    let refused = |why: &str| format!("`{item}` {why}");
    if let Some(domain) = text.strip_prefix('.') {
        let domain = domain.trim_end_matches('.');
        if !is_dns_name(domain) {
            return Err(refused("is not a domain; use e.g. .example.com (the domain and its subdomains)"));
        }
        return Ok(Entry::Domain(domain.to_owned()));
    }
    if let Ok(ip) = text.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
        return Ok(Entry::Exact(address_name(ip)));
    }
    if text.contains(':') {
        return Err(refused(
            "has a port; ports are not matched, list the name alone (e.g. memgate.example.com)",
        ));
    }
    let name = text.trim_end_matches('.');
    if !is_dns_name(name) {
        return Err(refused("is not a host name, an address, `.domain` or `*`"));
    }
    Ok(Entry::Exact(name.to_owned()))
}

/// The name in a `Host` value, without its port, lowercase and without a trailing dot; `None`
/// when it is not a name or an address.
fn host_name(host: &str) -> Option<String> {
    let host = host.trim().to_ascii_lowercase();
    if let Some(rest) = host.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        if !(after.is_empty() || after.strip_prefix(':').is_some_and(is_port)) {
            return None;
        }
        return inside.parse::<IpAddr>().ok().map(address_name);
    }
    let name = match host.rsplit_once(':') {
        Some((name, port)) if is_port(port) => name,
        Some(_) => return None,
        None => host.as_str(),
    };
    let name = name.trim_end_matches('.');
    if let Ok(ip) = name.parse::<IpAddr>() {
        return Some(address_name(ip));
    }
    is_dns_name(name).then(|| name.to_owned())
}

fn address_name(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    }
}

fn is_loopback_name(name: &str) -> bool {
    name == "localhost"
        || name
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// A name of one label: no dot, and not an address (an IPv6 one has colons).
fn is_single_label(name: &str) -> bool {
    !name.contains(['.', ':', '[']) && is_dns_name(name)
}

fn is_port(text: &str) -> bool {
    !text.is_empty() && text.len() <= 5 && text.bytes().all(|b| b.is_ascii_digit())
}

fn is_dns_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(items: &[&str]) -> HostList {
        HostList::parse(&items.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    fn on(addr: &str, hosts: &HostList) -> AllowedHosts {
        hosts.for_listener(addr.parse().unwrap())
    }

    #[test]
    fn a_loopback_listener_answers_for_loopback_names_on_any_port() {
        let allowed = on("127.0.0.1:8080", &HostList::default());
        for host in [
            "localhost",
            "localhost:8080",
            "LOCALHOST.:1",
            "127.0.0.1:9",
            "[::1]:8080",
            "[0:0::1]",
            "127.0.0.2",
            // What nginx on the same host sends by default: its upstream block's name.
            "memgate",
            "memgate:8080",
        ] {
            assert!(allowed.allows(Some(host)), "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:8080",
            "localhost.evil.example",
            "10.0.0.1",
            "evil.example.",
            "",
            "a b",
            "[::1",
            "x:y",
        ] {
            assert!(!allowed.allows(Some(host)), "{host}");
        }
        assert!(allowed.allows(None), "no Host: not a browser");
        assert!(matches!(on("[::1]:8080", &HostList::default()).0, Rule::Loopback));
    }

    #[test]
    fn any_other_listener_answers_for_every_host_unless_a_list_is_given() {
        assert!(on("0.0.0.0:8080", &HostList::default()).allows(Some("evil.example")));
        assert!(on("10.1.2.3:8080", &HostList::default()).allows(Some("10.1.2.3:8080")));
        let hosts = list(&["memgate.example.com", ".internal.example", "10.1.2.3", "::1"]);
        for addr in ["0.0.0.0:8080", "127.0.0.1:8080"] {
            let allowed = on(addr, &hosts);
            for host in [
                "memgate.example.com:443",
                "internal.example",
                "a.b.internal.example",
                "10.1.2.3:8080",
                "[::1]:1",
            ] {
                assert!(allowed.allows(Some(host)), "{host}");
            }
            for host in ["evil.example", "xinternal.example", "localhost", "memgate.example.com.evil"] {
                assert!(!allowed.allows(Some(host)), "{host}");
            }
        }
        assert!(on("127.0.0.1:8080", &list(&["*"])).allows(Some("evil.example")));
    }

    #[test]
    fn entries_that_cannot_match_are_refused() {
        for bad in ["localhost:8080", "http://x", "a b", "", ".", "*.example.com", "x/y"] {
            assert!(HostList::parse(&[bad.to_string()]).is_err(), "{bad}");
        }
    }
}
