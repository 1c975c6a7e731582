//! In managed mode every tenant's requests share memgate's one upstream key. Batches,
//! files and every other path beyond Messages and models need a permission, so one tenant's key
//! cannot list, read, cancel or delete another tenant's batches and files.

use super::error_of;
use crate::e2e_identity::{issue_key, managed_gateway};
use crate::support::{Proc, client};
use reqwest::Method;
use serde_json::json;

#[tokio::test]
async fn a_tenants_key_reaches_batches_and_files_only_with_their_permission() {
    let mock = Proc::mock(&[]);
    let gateway = managed_gateway(&mock, &[]);
    let (plain, _) = issue_key(&gateway, "acme", json!({"name": "support-bot"})).await;
    let (trusted, _) =
        issue_key(&gateway, "globex", json!({"name": "batch-bot", "permissions": ["batches", "files"]}))
            .await;
    let http = client();
    let cases = [
        (Method::GET, "/v1/messages/batches", "batches"),
        (Method::POST, "/v1/messages/batches", "batches"),
        (Method::GET, "/v1/messages/batches/msgbatch_013Zva2CMHLNnXjNJJKqJ2EF/results", "batches"),
        (Method::POST, "/v1/messages/batches/msgbatch_013Zva2CMHLNnXjNJJKqJ2EF/cancel", "batches"),
        (Method::DELETE, "/v1/messages/batches/msgbatch_013Zva2CMHLNnXjNJJKqJ2EF", "batches"),
        (Method::GET, "/v1/files", "files"),
        (Method::GET, "/v1/files/file_011CNha8iCJcU1wXNR6q4V8w/content", "files"),
        (Method::DELETE, "/v1/files/file_011CNha8iCJcU1wXNR6q4V8w", "files"),
        (Method::GET, "/v1/skills", "upstream_other"),
    ];
    for (method, path, permission) in &cases {
        let refused =
            http.request(method.clone(), gateway.url(path)).header("x-api-key", &plain).send().await.unwrap();
        let (status, error) = error_of(refused).await;
        assert_eq!((status, error["type"].as_str().unwrap()), (403, "permission_error"), "{method} {path}");
        assert_eq!(error["code"], "path_not_allowed", "{method} {path}");
        let message = error["message"].as_str().unwrap();
        assert!(message.contains(permission) && message.contains("shared upstream workspace"), "{message}");
    }
    assert!(mock.recorded().await.is_empty(), "a refused request reached the upstream");

    for (method, path, permission) in &cases[..8] {
        let allowed = http
            .request(method.clone(), gateway.url(path))
            .header("x-api-key", &trusted)
            .send()
            .await
            .unwrap();
        assert_eq!(allowed.status(), 200, "{method} {path} with {permission}");
    }
    // Messages and the model list stay open to every key.
    let models = http.get(gateway.url("/v1/models")).header("x-api-key", &plain).send().await.unwrap();
    assert_eq!(models.status(), 200);
    assert_eq!(mock.recorded().await.len(), 9);
}

#[tokio::test]
async fn no_path_walks_out_of_an_open_one() {
    let mock = Proc::mock(&[]);
    let gateway = managed_gateway(&mock, &[]);
    let (plain, _) = issue_key(&gateway, "acme", json!({"name": "bot"})).await;
    let http = client();
    for sneaky in
        ["/v1/models/../files", "/v1/models/%2e%2e/files", "/v1/models/%2E%2E%2Ffiles", "/v1/models//files"]
    {
        let response = http.get(gateway.url(sneaky)).header("x-api-key", &plain).send().await.unwrap();
        let (status, _) = error_of(response).await;
        assert!(status == 400 || status == 403, "{sneaky}: {status}");
    }
    assert!(mock.recorded().await.iter().all(|r| r["path"] != "/v1/files"), "{:?}", mock.recorded().await);
}
