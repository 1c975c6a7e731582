//! A record's `actions`, and the decisions a firing record makes: one per action, each with an
//! idempotency id that is the same however often the same request fires the same record.
//!
//! The id is `evt_` + 32 hex digits of SHA-256 over (tenant, request id, record id, action
//! index), length-prefixed so no two tuples share an encoding. It is the outbox row's primary key
//! (a second insert of the same decision is a no-op: exactly-once intent) and the `webhook-id`
//! every attempt and replay carries (receivers dedupe on it, as Standard Webhooks asks).

use super::conditions::{ConditionProblem, Matched};
use crate::config::triggers::valid_service;
use serde::Serialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

pub const MAX_ACTIONS: usize = 10;
pub const MAX_PARAMS: usize = 30;

/// One entry of a record's `actions`, checked.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ActionSpec {
    /// The name of a configured endpoint (`[triggers.endpoints.<service>]`).
    pub service: String,
    /// What the receiver should do; sent in the body (deliveries are always POST).
    pub method: String,
    pub params: Map<String, Value>,
}

/// A record's `actions` (the array at `path`), or every problem with it.
pub fn parse_actions(value: &Value, path: &str) -> Result<Vec<ActionSpec>, Vec<ConditionProblem>> {
    let Value::Array(list) = value else {
        return Err(vec![ConditionProblem::new(path, "actions is a list of {service, method, params}")]);
    };
    let mut problems = Vec::new();
    if list.is_empty() || list.len() > MAX_ACTIONS {
        problems.push(ConditionProblem::new(
            path,
            format!("actions holds 1 to {MAX_ACTIONS} actions (got {})", list.len()),
        ));
    }
    // Past the limit the list is refused anyway: what follows it is not read.
    let mut actions = Vec::with_capacity(list.len().min(MAX_ACTIONS));
    for (i, item) in list.iter().enumerate().take(MAX_ACTIONS) {
        let here = format!("{path}[{i}]");
        let Value::Object(map) = item else {
            problems.push(ConditionProblem::new(here, "an action is an object {service, method, params}"));
            continue;
        };
        let before = problems.len();
        let unknown = |key: &str| !["service", "method", "params"].contains(&key);
        super::conditions::unknown_fields(map, &here, unknown, &mut problems, |_| {
            "an action has service, method and params only; the URL, secret and timeout are the \
             operator's ([triggers.endpoints.<service>])"
                .to_owned()
        });
        let service = map.get("service").and_then(Value::as_str).filter(|s| valid_service(s));
        if service.is_none() {
            problems.push(ConditionProblem::new(
                format!("{here}.service"),
                "service names an endpoint the operator configured: a letter, then letters, digits, `_` \
                 or `-` (64 at most)",
            ));
        }
        let method = map.get("method").and_then(Value::as_str).filter(|m| valid_method(m));
        if method.is_none() {
            problems.push(ConditionProblem::new(
                format!("{here}.method"),
                "method says what the receiver should do (create_ticket): a letter, then letters, digits \
                 or _ . : / - (100 at most)",
            ));
        }
        let params = match map.get("params") {
            None => Some(Map::new()),
            Some(Value::Object(params)) if params.len() <= MAX_PARAMS => Some(params.clone()),
            Some(_) => {
                problems.push(ConditionProblem::new(
                    format!("{here}.params"),
                    format!("params is an object of at most {MAX_PARAMS} fields"),
                ));
                None
            }
        };
        if let (Some(service), Some(method), Some(params), true) =
            (service, method, params, problems.len() == before)
        {
            actions.push(ActionSpec { service: service.to_owned(), method: method.to_owned(), params });
        }
    }
    if problems.is_empty() { Ok(actions) } else { Err(problems) }
}

fn valid_method(method: &str) -> bool {
    let mut chars = method.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && method.len() <= 100
        && chars.all(|c| c.is_ascii_alphanumeric() || "_.:/-".contains(c))
}

/// What a firing record decided: one action to perform for one request. Written to the outbox in
/// the step that decides it; delivered later by the worker.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    /// The idempotency id: `event_id(tenant, request_id, record_id, action_index)`.
    pub id: String,
    pub tenant: String,
    pub request_id: String,
    pub record_id: String,
    pub record_revision: i64,
    pub action_index: usize,
    /// The endpoint's name (the action's `service`).
    pub endpoint: String,
    pub method: String,
    pub params: Map<String, Value>,
    pub matched_condition: Matched,
    /// The end user the request was about (`X-Memory-Subject`, a JWT's subject), if known.
    pub subject: Option<String>,
    /// Why it cannot be delivered as decided (no such endpoint): it is written to the outbox
    /// dead, with this reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub undeliverable: Option<String>,
    /// The cooldown this firing starts for its subject (or key), if its record has one.
    #[serde(skip)]
    pub cooldown: Option<crate::store::trigger_limits::NewCooldown>,
    /// What the body is rendered from (when the decision is written, off the request's path).
    /// Without the person's words unless the endpoint opted in.
    #[serde(skip)]
    pub body: Box<super::body::BodyContext>,
}

/// The idempotency id of action `action_index` of record `record_id` fired by request
/// `request_id`: stable across replicas, restarts and versions.
pub fn event_id(tenant: &str, request_id: &str, record_id: &str, action_index: usize) -> String {
    let mut hash = Sha256::new();
    hash.update(b"memgate-trigger-v1");
    for part in [tenant.as_bytes(), request_id.as_bytes(), record_id.as_bytes()] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part);
    }
    hash.update((action_index as u64).to_be_bytes());
    let digest = hash.finalize();
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("evt_{hex}")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn the_seed_actions_parse() {
        let actions = parse_actions(
            &json!([
                {"service": "ticketing", "method": "create_ticket", "params": {"priority": "urgent"}},
                {"service": "ops-chat", "method": "post_message"},
            ]),
            "$.content.actions",
        )
        .unwrap();
        assert_eq!(actions[0].service, "ticketing");
        assert_eq!(actions[0].params["priority"], "urgent");
        assert!(actions[1].params.is_empty());
    }

    #[test]
    fn a_record_cannot_name_a_url() {
        let found = parse_actions(
            &json!([
                {"service": "https://evil.example/hook", "method": "x"},
                {"service": "ok", "method": "", "url": "http://10.0.0.1/"},
                {"service": "ok", "method": "m", "params": [1]},
                "ticketing",
            ]),
            "$.content.actions",
        )
        .unwrap_err();
        let paths: Vec<&str> = found.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "$.content.actions[0].service",
                "$.content.actions[1].url",
                "$.content.actions[1].method",
                "$.content.actions[2].params",
                "$.content.actions[3]",
            ]
        );
        assert!(parse_actions(&json!([]), "$.a").is_err());
    }

    #[test]
    fn event_ids_are_stable_and_distinct() {
        let id = event_id("t", "req-1", "sop-1", 0);
        assert_eq!(id, event_id("t", "req-1", "sop-1", 0));
        assert!(id.starts_with("evt_") && id.len() == 36, "{id}");
        assert_ne!(id, event_id("t", "req-1", "sop-1", 1));
        assert_ne!(id, event_id("t", "req-2", "sop-1", 0));
        assert_ne!(id, event_id("u", "req-1", "sop-1", 0));
        // Length prefixes: moving a character between fields changes the id.
        assert_ne!(event_id("t", "ab", "c", 0), event_id("t", "a", "bc", 0));
        // Pinned (computed independently, in Python's hashlib): stored ids and the ids receivers
        // have seen must not change between versions.
        assert_eq!(event_id("default", "req-1", "sop-1", 0), "evt_476c53e27fa51671dd02bcd20028d94e");
    }
}
