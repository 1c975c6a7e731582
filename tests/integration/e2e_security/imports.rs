//! An import reads no line past its length limit and lists a bounded number of invalid lines,
//! while every valid line is classified (and on apply, imported) as before. A body of many short
//! invalid lines once came back with one problem listed per line, and a line of any length was
//! parsed whole.

use crate::e2e_identity::{ADMIN_TOKEN, managed_gateway};
use crate::support::{Proc, client};
use serde_json::{Value, json};

/// Invalid lines a report lists (`transfer::MAX_LISTED_INVALID`).
const LISTED: usize = 100;

async fn import(gateway: &Proc, body: String, dry_run: bool) -> (u16, usize, Value) {
    let path = if dry_run { "/admin/v1/import?dry_run=true" } else { "/admin/v1/import" };
    let response =
        client().post(gateway.url(path)).bearer_auth(ADMIN_TOKEN).body(body).send().await.expect("an answer");
    let status = response.status().as_u16();
    let bytes = response.bytes().await.unwrap();
    (status, bytes.len(), serde_json::from_slice(&bytes).unwrap())
}

fn fact(id: &str) -> String {
    json!({"id": id, "type": "fact", "scope": ["public"], "content": {"statement": format!("note {id}")}})
        .to_string()
}

#[tokio::test]
async fn a_line_over_the_length_limit_is_invalid_unread_and_the_rest_import() {
    let mock = Proc::mock(&[]);
    let gateway = managed_gateway(&mock, &[]);
    // 2 MiB: over the 1 MiB a line may hold with the default content limit. A record that would
    // parse, so only the length can refuse it before parsing.
    let huge = json!({"type": "fact", "scope": ["public"], "content": {"statement": "x".repeat(2 << 20)}});
    let body = [fact("imp-a"), huge.to_string(), fact("imp-b")].join("\n");
    let (status, _, report) = import(&gateway, body.clone(), true).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["counts"], json!({"new": 2, "existing": 0, "invalid": 1}), "{report}");
    let line = &report["lines"][1];
    assert_eq!(line["line"], 2);
    let problems = line["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{line}");
    assert_eq!((problems[0]["path"].as_str(), problems[0]["kind"].as_str()), (Some("$"), Some("too_large")));
    assert!(problems[0]["message"].as_str().unwrap().contains("1048576"), "{line}");
    // Without the long line, the valid ones import.
    let body = [fact("imp-a"), fact("imp-b")].join("\n");
    let (status, _, report) = import(&gateway, body, false).await;
    assert_eq!((status, report["counts"]["new"].as_u64()), (201, Some(2)), "{report}");
}

#[tokio::test]
async fn a_report_lists_the_first_hundred_invalid_lines_and_counts_the_rest() {
    let mock = Proc::mock(&[]);
    let gateway = managed_gateway(&mock, &[]);
    let mut lines = vec![fact("imp-first")];
    lines.extend((0..20_000).map(|i| format!("x{i}")));
    lines.push(fact("imp-last"));
    let (status, size, report) = import(&gateway, lines.join("\n"), true).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["counts"], json!({"new": 2, "existing": 0, "invalid": 20_000}), "{size} bytes");
    assert_eq!(report["invalid_not_listed"], 20_000 - LISTED);
    let listed = report["lines"].as_array().unwrap();
    let invalid: Vec<u64> =
        listed.iter().filter(|l| l["status"] == "invalid").map(|l| l["line"].as_u64().unwrap()).collect();
    assert_eq!(invalid, (2..2 + LISTED as u64).collect::<Vec<_>>());
    // Every valid line is still listed, the one after all the invalid ones included.
    let valid: Vec<&str> =
        listed.iter().filter(|l| l["status"] == "new").map(|l| l["id"].as_str().unwrap()).collect();
    assert_eq!(valid, ["imp-first", "imp-last"]);
    assert!(size < 50_000, "a {size}-byte report");

    // An apply answers the same bounded report in its 422.
    let (status, size, body) = import(&gateway, lines.join("\n"), false).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["report"]["invalid_not_listed"], 20_000 - LISTED);
    assert!(size < 50_000, "a {size}-byte answer");
}

async fn admin(gateway: &Proc, method: reqwest::Method, path: &str, body: Option<&Value>) -> (u16, String) {
    let mut request = client().request(method, gateway.url(path)).bearer_auth(ADMIN_TOKEN);
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request.send().await.expect("an answer");
    (response.status().as_u16(), response.text().await.unwrap())
}

/// A hostile file can carry the running model's vector of one text on a line of another: a
/// note about a bird census with a refund question's vector would be injected for refund
/// questions (and push the real refund record out). The model embeds the line's text and
/// refuses the line, in the dry run as in the apply, and the answer says what it checked.
#[tokio::test]
async fn an_imported_vector_that_is_not_its_lines_text_is_refused_and_never_injected() {
    let mock = Proc::mock(&[]);
    let gateway = managed_gateway(&mock, &[]);
    let refund = json!({"type": "fact", "scope": ["public"],
        "content": {"statement": "Refunds are paid back to the original card within five working days."}});
    let (status, created) = admin(&gateway, reqwest::Method::POST, "/admin/v1/memories", Some(&refund)).await;
    assert_eq!(status, 201, "{created}");
    let refund_id = serde_json::from_str::<Value>(&created).unwrap()["id"].as_str().unwrap().to_owned();
    let exported =
        crate::support::eventually(std::time::Duration::from_secs(30), "the refund's vector", || async {
            let (status, text) =
                admin(&gateway, reqwest::Method::GET, "/admin/v1/export?embeddings=true", None).await;
            assert_eq!(status, 200, "{text}");
            let line: Value = serde_json::from_str(text.lines().next()?).unwrap();
            line.get("embedding").is_some().then_some(line)
        })
        .await;
    let census = json!({"id": "imp-census", "type": "fact", "scope": ["public"],
        "content": {"statement": "Volunteers counted 412 lapwings and 38 curlews at the estuary bird census."},
        "embedding": exported["embedding"]});
    let body = format!("{census}\n{}\n", fact("imp-plain"));

    let (status, _, report) = import(&gateway, body.clone(), true).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["counts"], json!({"new": 1, "existing": 0, "invalid": 1}), "{report}");
    let problem = &report["lines"][0]["problems"][0];
    assert_eq!(problem["kind"], "vector_mismatch", "{report}");
    assert_eq!(
        (&report["embeddings"]["sampled"], &report["embeddings"]["matched"]),
        (&json!(1), &json!(0)),
        "{report}"
    );
    let (status, _, answer) = import(&gateway, body, false).await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["error"]["report"]["lines"][0]["problems"][0]["kind"], "vector_mismatch", "{answer}");

    // A refund question gets the refund record, and nothing of the file.
    let question = json!({"request": {"model": "claude-test", "max_tokens": 64,
        "messages": [{"role": "user", "content": "How long until my refund is back on my card?"}]},
        "caller": {"scopes": ["public"]}});
    let (status, explained) =
        admin(&gateway, reqwest::Method::POST, "/admin/v1/explain", Some(&question)).await;
    assert_eq!(status, 200, "{explained}");
    let explained: Value = serde_json::from_str(&explained).unwrap();
    let injected: Vec<&str> =
        explained["injected"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert_eq!(injected, [refund_id.as_str()], "{explained}");
}
