//! `[client_ip]`: which peers are trusted proxies, the header they name the client in, and how
//! IPv6 clients are grouped for per-address limits. Settles into `client_addr::ClientAddrs`.

use super::invalid;
use crate::client_addr::{ClientAddrs, DEFAULT_IPV6_LIMIT_PREFIX};
use crate::error::StartupError;
use serde::Deserialize;

/// The header trusted proxies name the client in, unless configured.
const DEFAULT_HEADER: &str = "x-forwarded-for";

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawClientIp {
    /// Default: none (every peer is the client).
    pub trusted_proxies: Option<Vec<String>>,
    /// Default `x-forwarded-for`.
    pub header: Option<String>,
    /// Default `client_addr::DEFAULT_IPV6_LIMIT_PREFIX`.
    pub ipv6_limit_prefix: Option<u8>,
}

impl RawClientIp {
    pub fn settle(self) -> Result<ClientAddrs, StartupError> {
        ClientAddrs::new(
            self.trusted_proxies.as_deref().unwrap_or_default(),
            self.header.as_deref().unwrap_or(DEFAULT_HEADER),
        )
        .map_err(|message| invalid("client_ip", message))?
        .with_ipv6_limit_prefix(self.ipv6_limit_prefix.unwrap_or(DEFAULT_IPV6_LIMIT_PREFIX))
        .map_err(|message| invalid("client_ip.ipv6_limit_prefix", message))
    }
}
