//! The admin limit counts failed attempts per client address, not requests, so an admin
//! with the right token is never locked out; behind a trusted proxy the client's own address is
//! counted; and `/admin` with `/metrics` can live on a listener of their own.

use super::config_file;
use crate::e2e_identity::{ADMIN_TOKEN, managed_gateway};
use crate::support::{Proc, client};

async fn keys_status(gateway: &Proc, token: &str, forwarded_for: Option<&str>) -> u16 {
    let mut request = client().get(gateway.url("/admin/v1/keys")).bearer_auth(token);
    if let Some(addr) = forwarded_for {
        request = request.header("x-forwarded-for", addr);
    }
    request.send().await.unwrap().status().as_u16()
}

#[tokio::test]
async fn only_failed_attempts_count_and_the_right_token_is_never_locked_out_by_volume() {
    let mock = Proc::mock(&[]);
    let (_dir, config) = config_file("[admin]\nrate_limit_per_minute = 5\n");
    let gateway = managed_gateway(&mock, &["--config", &config]);
    for _ in 0..20 {
        assert_eq!(keys_status(&gateway, ADMIN_TOKEN, None).await, 200);
    }
    let mut guesses = Vec::new();
    for i in 0..7 {
        guesses.push(keys_status(&gateway, &format!("wrong-token-guess-{i:06}"), None).await);
    }
    assert_eq!(guesses, [401, 401, 401, 401, 401, 429, 429]);
    // While the address is blocked even the right token waits: otherwise a guess that hit would
    // stand out from the 429s and the limit would be no limit.
    assert_eq!(keys_status(&gateway, ADMIN_TOKEN, None).await, 429);
}

#[tokio::test]
async fn behind_a_trusted_proxy_each_client_counts_for_itself() {
    let mock = Proc::mock(&[]);
    let (_dir, config) =
        config_file("[admin]\nrate_limit_per_minute = 3\n[client_ip]\ntrusted_proxies = [\"127.0.0.1\"]\n");
    let gateway = managed_gateway(&mock, &["--config", &config]);
    let guesser = Some("203.0.113.7");
    for _ in 0..3 {
        assert_eq!(keys_status(&gateway, "wrong-token-guess-0000", guesser).await, 401);
    }
    assert_eq!(keys_status(&gateway, "wrong-token-guess-0000", guesser).await, 429);
    // Another client behind the same proxy is not locked out with the guesser.
    assert_eq!(keys_status(&gateway, ADMIN_TOKEN, Some("198.51.100.9")).await, 200);
}

#[tokio::test]
async fn a_header_from_an_untrusted_peer_changes_nothing() {
    let mock = Proc::mock(&[]);
    let (_dir, config) = config_file("[admin]\nrate_limit_per_minute = 3\n");
    let gateway = managed_gateway(&mock, &["--config", &config]);
    for i in 0..3 {
        let spoofed = format!("192.0.2.{i}");
        assert_eq!(keys_status(&gateway, "wrong-token-guess-0000", Some(&spoofed)).await, 401);
    }
    assert_eq!(keys_status(&gateway, "wrong-token-guess-0000", Some("192.0.2.99")).await, 429);
}

#[tokio::test]
async fn the_admin_api_and_metrics_can_leave_the_public_listener() {
    let mock = Proc::mock(&[]);
    let gateway = Proc::gateway(
        &mock,
        &["--auth-mode", "managed"],
        &[
            ("ANTHROPIC_API_KEY", crate::e2e_identity::UPSTREAM_KEY),
            ("MEMGATE_ADMIN_TOKEN", ADMIN_TOKEN),
            ("MEMGATE_ADMIN_LISTEN", "127.0.0.1:0"),
        ],
    );
    let admin_base = gateway.next_addr();
    let http = client();
    let public_keys = http.get(gateway.url("/admin/v1/keys")).bearer_auth(ADMIN_TOKEN).send().await.unwrap();
    assert_eq!(public_keys.status(), 404);
    assert_eq!(http.get(gateway.url("/metrics")).send().await.unwrap().status(), 404);
    assert_eq!(http.get(gateway.url("/healthz")).send().await.unwrap().status(), 200);
    let admin_keys =
        http.get(format!("{admin_base}/admin/v1/keys")).bearer_auth(ADMIN_TOKEN).send().await.unwrap();
    assert_eq!(admin_keys.status(), 200);
    let metrics = http.get(format!("{admin_base}/metrics")).send().await.unwrap();
    assert_eq!(metrics.status(), 200);
    assert!(metrics.text().await.unwrap().contains("memgate_requests_total"));
    // The proxy is not on the admin listener.
    let proxied = http
        .post(format!("{admin_base}/v1/messages"))
        .json(&crate::support::messages_body("m", false))
        .send()
        .await
        .unwrap();
    assert_eq!(proxied.status(), 404);
}
