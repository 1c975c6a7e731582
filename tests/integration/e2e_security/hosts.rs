//! DNS rebinding. A page on `evil.example` that makes its name resolve to 127.0.0.1
//! could read a loopback-bound memgate's `/metrics`, and in passthrough mode its public records,
//! from a visitor's browser; the browser still says `Host: evil.example`. A loopback listener now
//! answers only for the loopback names, unless `allowed_hosts` says otherwise.

use super::error_of;
use crate::support::{Proc, client, messages_body};

/// What a rebinding page's request looks like to memgate: the attacker's name, memgate's port.
async fn get_as(gateway: &Proc, host: &str, path: &str) -> reqwest::Response {
    client().get(gateway.url(path)).header("host", host).send().await.unwrap()
}

async fn post_as(gateway: &Proc, host: &str) -> reqwest::Response {
    client()
        .post(gateway.url("/v1/messages"))
        .header("host", host)
        .header("x-api-key", "sk-ant-visitor")
        .json(&messages_body("claude-test", false))
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_loopback_memgate_refuses_a_rebound_host_and_answers_its_own_names() {
    let mock = Proc::mock(&[]);
    let gateway = Proc::gateway(&mock, &[], &[]);
    let port = gateway.base.rsplit(':').next().unwrap().to_owned();
    let evil = format!("evil.example:{port}");

    for response in [get_as(&gateway, &evil, "/metrics").await, post_as(&gateway, &evil).await] {
        let (status, error) = error_of(response).await;
        assert_eq!((status, error["type"].as_str()), (403, Some("permission_error")), "{error}");
        assert_eq!(error["code"], "host_not_allowed", "{error}");
    }
    assert!(mock.recorded().await.is_empty(), "a refused host reached the upstream");

    // The names memgate is reached by, on any port.
    for host in [format!("127.0.0.1:{port}"), format!("localhost:{port}"), "localhost".to_owned()] {
        assert_eq!(get_as(&gateway, &host, "/metrics").await.status(), 200, "{host}");
    }
    assert_eq!(client().get(gateway.url("/metrics")).send().await.unwrap().status(), 200);
    assert_eq!(post_as(&gateway, &format!("localhost:{port}")).await.status(), 200);
    // Health probes tell nothing and often name the IP: answered whatever the host.
    assert_eq!(get_as(&gateway, &evil, "/healthz").await.status(), 200);
}

#[tokio::test]
async fn allowed_hosts_lists_the_names_and_a_public_listener_answers_any_by_default() {
    let mock = Proc::mock(&[]);
    let listed = Proc::gateway(&mock, &[], &[("MEMGATE_ALLOWED_HOSTS", "memgate.internal, .corp.example")]);
    for (host, status) in
        [("memgate.internal:8080", 200), ("api.corp.example", 200), ("evil.example", 403), ("127.0.0.1", 403)]
    {
        assert_eq!(get_as(&listed, host, "/metrics").await.status(), status, "{host}");
    }

    // Bound to every interface and told nothing: whoever is in front decides the names.
    let public = Proc::gateway(&mock, &["--listen", "0.0.0.0:0"], &[]);
    let port = public.base.rsplit(':').next().unwrap().to_owned();
    let local = format!("http://127.0.0.1:{port}/metrics");
    let response = client().get(&local).header("host", "evil.example").send().await.unwrap();
    assert_eq!(response.status(), 200);
}
