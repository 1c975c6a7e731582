//! Canary: a sticky share of subjects, and allow-lists.

use super::*;

/// Sends one request per subject (asserted with `X-Memory-Subject`), 16 at a time, on a pooled
/// client; returns each subject's release, in order.
async fn releases_of(rig: &Rig, key: &str, subjects: &[String]) -> Vec<String> {
    let http = reqwest::Client::new();
    let url = rig.gw.url("/v1/messages");
    let body = serde_json::to_vec(&asking(UNRELATED)).unwrap();
    stream::iter(subjects.iter().cloned())
        .map(|subject| {
            let request = http
                .post(&url)
                .header("x-api-key", key)
                .header("x-memory-subject", &subject)
                .header("content-type", "application/json")
                .header("anthropic-version", "2023-06-01")
                .body(body.clone());
            async move {
                let response = request.send().await.unwrap();
                assert_eq!(response.status(), 200, "{subject}");
                response.headers()["x-memory-version"].to_str().unwrap().to_owned()
            }
        })
        .buffered(16)
        .collect()
        .await
}

#[tokio::test]
async fn a_ten_percent_canary_serves_about_a_tenth_of_subjects_and_each_always_the_same_release() {
    let rig = Rig::start(&[]);
    let key = rig.key(&[], &["assert_subject"]).await;
    let state = rig.patch("v2", "ops", json!({"stage": "canary", "canary_percent": 10})).await;
    assert_eq!((state["stage"].clone(), state["canary_percent"].clone()), (json!("canary"), json!(10.0)));

    // Every one of 10,000 subjects goes through the real HTTP path, twice: measured on the 2-core
    // debug build with other tests running, a pass of 10,000 requests takes about 10 s, so no
    // sampling is needed. Each answer must also be what the stable hash predicts.
    let subjects: Vec<String> = (0..10_000).map(|i| format!("subject-{i:05}")).collect();
    let started = Instant::now();
    let first = releases_of(&rig, &key, &subjects).await;
    eprintln!("10,000 requests through the gateway took {:?}", started.elapsed());
    let second = releases_of(&rig, &key, &subjects).await;

    let mut on_v2 = 0;
    for ((subject, a), b) in subjects.iter().zip(&first).zip(&second) {
        assert_eq!(a, b, "{subject} flipped between two requests");
        let predicted = if sticky_bucket(subject) < 1000 { "v2" } else { "v1" };
        assert_eq!(a, predicted, "{subject}: bucket {}", sticky_bucket(subject));
        on_v2 += usize::from(a == "v2");
    }
    assert!((800..=1200).contains(&on_v2), "{on_v2} of 10,000 subjects got the 10% canary");
    let stats = rig.stats("v2").await;
    assert_eq!(stats["calls"], 2 * on_v2, "{stats}");
    let share = stats["share"].as_f64().unwrap();
    assert!((share - on_v2 as f64 / 10_000.0).abs() < 1e-9, "{stats}");
}

/// What a caller is, the headers it sends, and the release it should get.
type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, &'a str);

#[tokio::test]
async fn allow_listed_subjects_teams_and_cidrs_get_the_canary_even_at_zero_percent() {
    let rig = Rig::start(&[]);
    let asserting = rig.key(&[], &["assert_subject"]).await;
    let beta = rig.key(&["team:beta"], &[]).await;
    let alpha = rig.key(&["team:alpha"], &[]).await;
    let jwt_beta =
        format!("Bearer {}", jwt(json!({"sub": "jwt-user-1", "team": "beta", "exp": in_an_hour()})));
    let jwt_alpha =
        format!("Bearer {}", jwt(json!({"sub": "jwt-user-2", "team": "alpha", "exp": in_an_hour()})));
    let jwt_vip = format!("Bearer {}", jwt(json!({"sub": "vip-7", "exp": in_an_hour()})));

    rig.patch(
        "v2",
        "ops",
        json!({"stage": "canary", "canary_percent": 0, "allow": {"subjects": ["vip-7"], "teams": ["beta"]}}),
    )
    .await;
    let cases: [Case; 7] = [
        ("an allow-listed subject", vec![("x-api-key", &asserting), ("x-memory-subject", "vip-7")], "v2"),
        ("another subject", vec![("x-api-key", &asserting), ("x-memory-subject", "vip-8")], "v1"),
        ("a key of an allow-listed team", vec![("x-api-key", &beta)], "v2"),
        ("a key of another team", vec![("x-api-key", &alpha)], "v1"),
        ("a JWT of an allow-listed team", vec![("authorization", &jwt_beta)], "v2"),
        ("a JWT of another team", vec![("authorization", &jwt_alpha)], "v1"),
        ("a JWT of an allow-listed subject", vec![("authorization", &jwt_vip)], "v2"),
    ];
    for (what, headers, expected) in &cases {
        for _ in 0..3 {
            assert_eq!(rig.routed(headers).await, *expected, "{what}");
        }
    }
    // At 0% nobody else gets it.
    for i in 0..200 {
        let subject = format!("someone-{i}");
        let headers = [("x-api-key", asserting.as_str()), ("x-memory-subject", subject.as_str())];
        assert_eq!(rig.routed(&headers).await, "v1", "{subject} got a 0% canary");
    }

    // The tests connect from loopback: a CIDR holding it sends every caller to the canary.
    rig.patch("v2", "ops", json!({"allow": {"subjects": [], "teams": [], "cidrs": ["127.0.0.1/32"]}})).await;
    for (what, headers, _) in &cases {
        assert_eq!(rig.routed(headers).await, "v2", "{what}, from an allow-listed address");
    }
    rig.patch(
        "v2",
        "ops",
        json!({"allow": {"subjects": [], "teams": [], "cidrs": ["10.0.0.0/8", "::1/128"]}}),
    )
    .await;
    for (what, headers, _) in &cases {
        assert_eq!(rig.routed(headers).await, "v1", "{what}, from an address not listed");
    }
    // Rolled back, the allow-lists no longer route anyone there.
    rig.patch(
        "v2",
        "ops",
        json!({"allow": {"subjects": ["vip-7"], "teams": ["beta"], "cidrs": ["127.0.0.0/8"]}}),
    )
    .await;
    assert_eq!(rig.routed(&cases[0].1).await, "v2");
    let (status, answer) = rig.admin("POST", "/releases/v2/rollback", None, None).await;
    assert_eq!(status, 200, "{answer}");
    for (what, headers, _) in &cases {
        assert_eq!(rig.routed(headers).await, "v1", "{what}, after the rollback");
    }
}
