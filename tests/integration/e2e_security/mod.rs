//! Security review findings, each end to end against the real binary: one tenant never reaches
//! another, a caller's trace names only what it may see, limits cannot be walked around, no
//! input hurts the process or costs more than its size, and no credential shape slips through.
//! Each test failed before its fix.

mod admin_limits;
mod bodies;
mod connections;
mod guard;
mod hosts;
mod imports;
mod passthrough;
mod paths;
mod rate_limits;
mod record_sizes;
mod replicas;
mod secrets;
mod stall;
mod trace;

use crate::e2e_identity::ADMIN_TOKEN;
use crate::support::{Proc, TempDir, client};
use serde_json::Value;

/// A config file of its own for one gateway.
pub fn config_file(text: &str) -> (TempDir, String) {
    let dir = TempDir::new("security-config");
    let path = dir.path.join("memgate.toml");
    std::fs::write(&path, format!("[memory]\nfunnel_timeout_ms = 10000\ndefault_release = \"v1\"\n{text}"))
        .unwrap();
    let path = path.to_str().unwrap().to_owned();
    (dir, path)
}

/// Writes a record through the admin API (default tenant unless `tenant`); asserts it was taken.
pub async fn put_record(gateway: &Proc, tenant: &str, record: Value) {
    let response = client()
        .post(gateway.url("/admin/v1/memories"))
        .bearer_auth(ADMIN_TOKEN)
        .header("x-memory-tenant", tenant)
        .json(&record)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    assert!(status == 201 || status == 200, "{status}: {}", response.text().await.unwrap());
}

/// The `error` object of an answer, with its status.
pub async fn error_of(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["type"], "error", "{body}");
    (status, body["error"].clone())
}

/// Every `x-memory-*` header of an answer that says anything about records (the request id, for
/// correlating logs, and the release that served are on every answer).
pub fn memory_headers(response: &reqwest::Response) -> Vec<String> {
    response
        .headers()
        .keys()
        .map(|k| k.as_str().to_owned())
        .filter(|k| k.starts_with("x-memory-") && k != "x-memory-request-id" && k != "x-memory-version")
        .collect()
}
