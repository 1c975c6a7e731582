//! `GET /admin/v1/requests/recent` (`console/API.md` §3.4): this replica's last Messages requests
//! per tenant, for the explain screen's picker.
//!
//! In memory only, bounded three ways: `per_tenant` requests per tenant (a ring: the oldest goes
//! when a new one comes), entries older than `ttl` not listed and dropped, and at most
//! `MAX_TENANTS` tenants (the one quiet the longest goes first). What is kept is what the picker
//! shows — id, time, release, caller, outcome, injected ids — and never a request body: these are
//! conversations (so `explainable` is false, and explain by `request_id` is not offered yet; see
//! docs/console.md). `query_preview` is kept only when the caller of `push` passes it.

use crate::clock::format_ms;
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// At most this many tenants have a ring at once.
const MAX_TENANTS: usize = 1000;
/// `query_preview` is cut to this many characters.
const PREVIEW_CHARS: usize = 120;

/// Who made a request, as resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecentCaller {
    /// `key`, `jwt` or `passthrough`.
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub subject: Option<String>,
    pub scopes: Vec<String>,
}

/// One request as the picker lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecentRequest {
    pub request_id: String,
    #[serde(skip)]
    pub at_ms: i64,
    pub release: String,
    pub caller: RecentCaller,
    pub model: Option<String>,
    pub stream: bool,
    /// `ok`, `skipped` or `degraded`.
    pub memory_status: &'static str,
    /// Ids of the injected records (stubs included).
    pub injected_ids: Vec<String>,
    /// Tokens of the block.
    pub tokens: u64,
    /// The HTTP status answered.
    pub status: u16,
    /// The matched text, when the caller of `push` chose to keep it; cut to 120 characters.
    pub query_preview: Option<String>,
}

struct TenantRing {
    last_push_ms: i64,
    ring: VecDeque<RecentRequest>,
}

/// The rings of this replica.
pub struct RecentRequests {
    replica: String,
    per_tenant: usize,
    ttl: Duration,
    rings: Mutex<HashMap<String, TenantRing>>,
}

impl RecentRequests {
    /// `per_tenant`: `console.recent_requests` (default 200; 0 keeps nothing). `ttl`:
    /// `console.recent_request_ttl_secs` (default 900 s).
    pub fn new(replica: impl Into<String>, per_tenant: usize, ttl: Duration) -> RecentRequests {
        RecentRequests { replica: replica.into(), per_tenant, ttl, rings: Mutex::new(HashMap::new()) }
    }

    /// Keeps `request` of `tenant`.
    pub fn push(&self, tenant: &str, mut request: RecentRequest) {
        if self.per_tenant == 0 {
            return;
        }
        if let Some(preview) = &mut request.query_preview
            && let Some((cut, _)) = preview.char_indices().nth(PREVIEW_CHARS)
        {
            preview.truncate(cut);
        }
        let mut rings = self.rings.lock().unwrap_or_else(PoisonError::into_inner);
        if !rings.contains_key(tenant) && rings.len() >= MAX_TENANTS {
            let quietest = rings.iter().min_by_key(|(_, r)| r.last_push_ms).map(|(t, _)| t.clone());
            if let Some(quietest) = quietest {
                rings.remove(&quietest);
            }
        }
        let entry = rings.entry(tenant.to_owned()).or_insert_with(|| TenantRing {
            last_push_ms: 0,
            ring: VecDeque::with_capacity(self.per_tenant.min(64)),
        });
        entry.last_push_ms = entry.last_push_ms.max(request.at_ms);
        if entry.ring.len() >= self.per_tenant {
            entry.ring.pop_front();
        }
        entry.ring.push_back(request);
    }

    /// The answer for `tenant`: at most `limit` (1–200) requests younger than the TTL, newest
    /// first, with this replica's name.
    pub fn list(&self, tenant: &str, limit: usize, now_ms: i64) -> Value {
        let oldest = now_ms.saturating_sub(i64::try_from(self.ttl.as_millis()).unwrap_or(i64::MAX));
        let mut rings = self.rings.lock().unwrap_or_else(PoisonError::into_inner);
        let data: Vec<Value> = match rings.get_mut(tenant) {
            Some(entry) => {
                while entry.ring.front().is_some_and(|r| r.at_ms < oldest) {
                    entry.ring.pop_front();
                }
                entry
                    .ring
                    .iter()
                    .rev()
                    .take(limit.clamp(1, 200))
                    .map(|r| {
                        let mut value = json!(r);
                        if let Value::Object(map) = &mut value {
                            map.insert("at".into(), json!(format_ms(r.at_ms)));
                            map.insert("injected".into(), json!(r.injected_ids.len()));
                            map.insert("explainable".into(), json!(false));
                        }
                        value
                    })
                    .collect()
            }
            None => Vec::new(),
        };
        json!({"replica": self.replica, "data": data})
    }

    /// Parses `limit` of `GET /admin/v1/requests/recent?limit=N` (1–200, default 50).
    pub fn parse_limit(query: Option<&str>) -> Result<usize, crate::error::ApiError> {
        let mut limit = 50;
        for (name, value) in url::form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            match name.as_ref() {
                "limit" => {
                    limit =
                        value.parse::<usize>().ok().filter(|n| (1..=200).contains(n)).ok_or_else(|| {
                            crate::error::ApiError::invalid_request("`limit` must be 1 to 200")
                        })?;
                }
                _ => {
                    return Err(crate::error::ApiError::invalid_request(
                        "unknown parameter; this endpoint takes `limit`",
                    ));
                }
            }
        }
        Ok(limit)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn request(id: &str, at_ms: i64) -> RecentRequest {
        RecentRequest {
            request_id: id.into(),
            at_ms,
            release: "v1".into(),
            caller: RecentCaller {
                kind: "key",
                key_id: Some("k1".into()),
                name: Some("bot".into()),
                subject: Some("u-1".into()),
                scopes: vec!["public".into()],
            },
            model: Some("claude-sonnet-4-5".into()),
            stream: false,
            memory_status: "ok",
            injected_ids: vec!["m1".into(), "m2".into()],
            tokens: 96,
            status: 200,
            query_preview: Some("x".repeat(300)),
        }
    }

    #[test]
    fn newest_first_bounded_and_expiring() {
        let recent = RecentRequests::new("r-1", 3, Duration::from_secs(900));
        for i in 0..5 {
            recent.push("t", request(&format!("req_{i}"), 1_000_000 + i * 1000));
        }
        let listed = recent.list("t", 50, 1_010_000);
        assert_eq!(listed["replica"], "r-1");
        let ids: Vec<&str> =
            listed["data"].as_array().unwrap().iter().map(|r| r["request_id"].as_str().unwrap()).collect();
        assert_eq!(ids, ["req_4", "req_3", "req_2"]);
        let first = &listed["data"][0];
        assert_eq!(first["injected"], 2);
        assert_eq!(first["explainable"], false);
        assert_eq!(first["caller"]["key_id"], "k1");
        assert_eq!(first["query_preview"].as_str().unwrap().chars().count(), 120);
        assert!(first.get("body").is_none());
        assert_eq!(recent.list("t", 1, 1_010_000)["data"].as_array().unwrap().len(), 1);
        // Past the TTL nothing is listed; other tenants have nothing.
        assert_eq!(recent.list("t", 50, 1_004_000 + 900_001)["data"].as_array().unwrap().len(), 0);
        assert_eq!(recent.list("other", 50, 1_010_000)["data"].as_array().unwrap().len(), 0);
        let off = RecentRequests::new("r-1", 0, Duration::from_secs(900));
        off.push("t", request("req", 1));
        assert_eq!(off.list("t", 50, 1)["data"].as_array().unwrap().len(), 0);
    }

    #[test]
    fn limits_parse() {
        assert_eq!(RecentRequests::parse_limit(None).unwrap(), 50);
        assert_eq!(RecentRequests::parse_limit(Some("limit=200")).unwrap(), 200);
        assert!(RecentRequests::parse_limit(Some("limit=0")).is_err());
        assert!(RecentRequests::parse_limit(Some("limit=201")).is_err());
        assert!(RecentRequests::parse_limit(Some("n=3")).is_err());
    }
}
