//! Anthropic's memory tool backed by memgate, end to end: a request that declares
//! `memory_20250818` and sends `X-Memory-Tool-Backend: memgate`, from a key holding
//! `memory_tool_backend`, has the mock model's `memory` commands executed by memgate on the
//! subject's `/memories` tree (one record per file); without the header or the permission the
//! request is the client's, byte for byte.

use super::streaming::{coherent, events};
use super::{Answer, Gate, Key, direct, last_tool_results, tool_names};
use crate::support::{client, without_request_seq};
use serde_json::{Value, json};

const BACKEND: (&str, &str) = ("x-memory-tool-backend", "memgate");

fn memory_body(text: &str, stream: bool) -> Value {
    json!({
        "model": "claude-mock",
        "max_tokens": 256,
        "stream": stream,
        "tools": [{"type": "memory_20250818", "name": "memory"}],
        "messages": [{"role": "user", "content": text}],
    })
}

async fn backend_key(gate: &Gate) -> Key {
    gate.key(&["memory_tool_backend", "assert_subject"]).await
}

/// One request through memgate as the backend, for `subject`.
async fn say(gate: &Gate, key: &Key, subject: &str, text: &str, stream: bool) -> Answer {
    let body = serde_json::to_vec(&memory_body(text, stream)).unwrap();
    gate.send(key, &[("x-memory-subject", subject), BACKEND], &body).await
}

/// The message the client got, streamed or not, checked to hold no `memory` call.
fn message(answer: &Answer, stream: bool) -> Value {
    assert_eq!(answer.status, 200, "{}", answer.text);
    let message = if stream { coherent(&events(&answer.text)) } else { answer.json() };
    let content = message["content"].as_array().unwrap();
    assert!(content.iter().all(|b| b["type"] == "text"), "the memory call reached the client: {message}");
    assert_eq!(message["stop_reason"], "end_turn", "{message}");
    message
}

/// The result memgate gave the model's last `memory` call, and whether it was an error.
async fn last_result(gate: &Gate) -> (String, bool) {
    let bodies = gate.upstream_bodies().await;
    let result = &last_tool_results(bodies.last().unwrap())[0];
    (result["content"].as_str().unwrap().to_owned(), result["is_error"] == true)
}

/// `memory command: {…}`: the mock calls `memory` with that input.
fn command(input: Value) -> String {
    format!("memory command: {input}")
}

/// Done when: the commands run in memgate, each file is a record of the subject with the key's
/// author, and `view /memories` in a later request of the same subject lists what earlier ones
/// created; streaming and not, the client sees one coherent message.
#[tokio::test]
async fn e2e_memory_tool_commands_run_in_memgate_and_a_later_view_lists_the_files() {
    let gate = Gate::start("", &[]);
    let key = backend_key(&gate).await;
    let answer = say(&gate, &key, "u-1", "Remember that my cat is called Miso.", false).await;
    let told = message(&answer, false);
    assert_eq!(told["content"][0]["text"], "I'll remember that.");
    assert_eq!(
        told["content"][1]["text"],
        "From memory: File created successfully at: /memories/my-cat-is-called-miso.md"
    );
    let bodies = gate.upstream_bodies().await;
    assert_eq!(bodies.len(), 2, "{bodies:#?}");
    assert_eq!(
        tool_names(&bodies[0]),
        ["memory"],
        "only the client's tool: no memgate tools without their permission"
    );
    assert_eq!(bodies[1]["messages"][1]["content"][1]["name"], "memory");
    let records = gate.records("user:u-1").await;
    assert_eq!(records.len(), 1, "{records:#?}");
    let file = &records[0];
    assert_eq!(file["type"], "fact");
    assert_eq!(file["key"], "/memories/my-cat-is-called-miso.md");
    assert_eq!(file["scope"], json!(["user:u-1"]));
    assert_eq!(file["author"], format!("agent:{}", key.id));
    assert_eq!(file["content"]["statement"], "my cat is called Miso");

    say(&gate, &key, "u-1", "Remember that the standup is at 9.", true).await;
    // A later request of the same subject, streamed: the view lists both files.
    let answer = say(&gate, &key, "u-1", "What do you remember about me?", true).await;
    let told = message(&answer, true);
    assert_eq!(told["content"][0]["text"], "Let me look at my memory.");
    assert_eq!(
        told["content"][1]["text"],
        "From memory: Here're the files and directories up to 2 levels deep in /memories, excluding hidden items:\n\
         40B\t/memories\n\
         21B\t/memories/my-cat-is-called-miso.md\n\
         19B\t/memories/the-standup-is-at-9.md"
    );

    // Edits: each answered in the reference's words, each a change of the record.
    let file = "/memories/my-cat-is-called-miso.md";
    say(
        &gate,
        &key,
        "u-1",
        &command(json!({"command": "str_replace", "path": file, "old_str": "Miso", "new_str": "Mochi"})),
        false,
    )
    .await;
    assert_eq!(
        last_result(&gate).await,
        ("The memory file has been edited. Here is the snippet showing the change (with line numbers):\n     1\tmy cat is called Mochi".to_owned(), false)
    );
    say(&gate, &key, "u-1", &command(json!({"command": "view", "path": file})), false).await;
    assert_eq!(
        last_result(&gate).await.0,
        format!("Here's the content of {file} with line numbers:\n     1\tmy cat is called Mochi")
    );
    say(
        &gate,
        &key,
        "u-1",
        &command(json!({"command": "rename", "old_path": file, "new_path": "/memories/pets/cat.md"})),
        true,
    )
    .await;
    assert_eq!(last_result(&gate).await.0, format!("Successfully renamed {file} to /memories/pets/cat.md"));
    let keys: Vec<Value> = gate.records("user:u-1").await.iter().map(|r| r["key"].clone()).collect();
    assert!(keys.contains(&json!("/memories/pets/cat.md")) && !keys.contains(&json!(file)), "{keys:?}");
    say(&gate, &key, "u-1", &command(json!({"command": "delete", "path": "/memories/pets"})), false).await;
    assert_eq!(last_result(&gate).await.0, "Successfully deleted /memories/pets");
    assert_eq!(gate.records("user:u-1").await.len(), 1);

    // Another subject of the same key has a tree of its own, empty.
    say(&gate, &key, "u-2", "What do you remember?", false).await;
    assert_eq!(
        last_result(&gate).await.0,
        "Here're the files and directories up to 2 levels deep in /memories, excluding hidden items:\n0B\t/memories"
    );
    let metrics = gate.metrics().await;
    assert!(
        metrics.contains(r#"memgate_memory_tool_calls_total{release="v1",tool="memory",outcome="ok"}"#),
        "{metrics}"
    );
}

/// Paths that leave `/memories` are refused with the reference's words; a secret is refused by
/// its kind and never echoed; a file too big is refused clearly. Nothing is written.
#[tokio::test]
async fn e2e_memory_tool_refuses_traversal_secrets_and_huge_files() {
    let gate = Gate::start("", &[]);
    let key = backend_key(&gate).await;
    for (path, said) in [
        ("/memories/../../etc/passwd", "Path /memories/../../etc/passwd would escape /memories directory"),
        ("/memories/a/../../x", "Path /memories/a/../../x would escape /memories directory"),
        ("/etc/passwd", "Path must start with /memories, got: /etc/passwd"),
        ("/memories_evil/x", "Path must start with /memories, got: /memories_evil/x"),
    ] {
        for input in [
            json!({"command": "create", "path": path, "file_text": "x"}),
            json!({"command": "view", "path": path}),
        ] {
            let answer = say(&gate, &key, "u-1", &command(input), false).await;
            message(&answer, false);
            assert_eq!(last_result(&gate).await, (said.to_owned(), true));
        }
    }
    let rename = json!({"command": "rename", "old_path": "/memories/a", "new_path": "/memories/../../tmp/a"});
    say(&gate, &key, "u-1", &command(rename), false).await;
    assert_eq!(last_result(&gate).await.0, "Path /memories/../../tmp/a would escape /memories directory");

    let secret = "sk-ant-api03-Zx8bQ2vN7mK4pL9wR3tY6uI1oP5aS0dF2gH8jK4lZ7xC9vB1nM3qW5eR7tY9uI0oP2aS4dF6gH8jK0lZ2xC4vB6n-AAAAAAAA";
    let create = json!({"command": "create", "path": "/memories/deploy.md", "file_text": format!("deploy key: {secret}")});
    let answer = say(&gate, &key, "u-1", &command(create), true).await;
    let told = message(&answer, true);
    let (result, is_error) = last_result(&gate).await;
    assert!(is_error && result.contains("Secrets never go into memory"), "{result}");
    assert!(!result.contains(&secret[..24]), "the secret was echoed: {result}");
    assert!(!told["content"][1]["text"].as_str().unwrap().contains(&secret[..24]));

    let create = json!({"command": "create", "path": "/memories/huge.md", "file_text": "x".repeat(50_000)});
    say(&gate, &key, "u-1", &command(create), false).await;
    let (result, is_error) = last_result(&gate).await;
    assert!(
        is_error && result.contains("at most 2000 characters") && result.contains("Nothing was written"),
        "{result}"
    );
    assert!(gate.records("user:u-1").await.is_empty());
}

/// Without the header, or without the permission, the memory tool is the client's: the upstream
/// gets the client's bytes, and the client gets the model's `memory` call exactly as the
/// upstream answered it, streamed and not.
#[tokio::test]
async fn e2e_memory_tool_without_the_header_or_the_permission_passes_through_byte_for_byte() {
    let gate = Gate::start("", &[]);
    let opted = backend_key(&gate).await;
    let plain = gate.key(&["assert_subject"]).await;
    for stream in [false, true] {
        let text = format!(
            r#"{{ "tools" : [{{"type":"memory_20250818","name":"memory"}}], "messages":[{{"role":"user","content":"Remember that I like tea."}}],"model":"claude-mock","max_tokens":64, "stream":{stream}}}"#
        );
        let cases: [(&Key, &[(&str, &str)]); 3] = [
            (&opted, &[("x-memory-subject", "u-1")]),
            (&opted, &[("x-memory-subject", "u-1"), ("x-memory-tool-backend", "client")]),
            (&plain, &[("x-memory-subject", "u-1"), BACKEND]),
        ];
        for (key, headers) in cases {
            let before = gate.mock.recorded().await.len();
            let answer = gate.send(key, headers, text.as_bytes()).await;
            assert_eq!(answer.status, 200, "{}", answer.text);
            let recorded = gate.mock.recorded().await;
            assert_eq!(recorded.len(), before + 1, "one upstream call");
            assert_eq!(recorded[before]["body_bytes"], text.len(), "the upstream got other bytes");
            assert!(
                answer.text.contains(r#""name":"memory""#),
                "the client gets the model's call: {}",
                answer.text
            );
            assert_eq!(
                without_request_seq(&answer.text),
                direct(&gate, text.as_bytes()).await,
                "stream={stream}"
            );
        }
    }
    assert!(gate.records("user:u-1").await.is_empty());
    let answer = gate.send(&opted, &[("x-memory-tool-backend", "server")], b"{}").await;
    assert_eq!(answer.status, 400, "{}", answer.text);
}

/// Isolation as a property: whatever paths one subject's requests create, another subject's
/// view of `/memories` and of those very paths never shows them, while the first subject's does.
#[test]
fn e2e_memory_tool_trees_are_isolated_between_generated_subjects_and_paths() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let gate = Gate::start("", &[]);
    let key = runtime.block_on(backend_key(&gate));
    let strategy = (
        "[a-z0-9]{1,10}",
        "[a-z0-9]{1,10}",
        proptest::collection::vec("[a-z][a-z0-9_-]{0,12}", 1..3),
        "[a-z][a-z0-9]{0,8}",
    )
        .prop_filter("two subjects", |(a, b, _, _)| a != b);
    let mut runner = TestRunner::new(Config { cases: 6, failure_persistence: None, ..Config::default() });
    let result = runner.run(&strategy, |(a, b, dirs, name)| {
        let (a, b) = (format!("s-{a}"), format!("s-{b}"));
        // The file's name carries its subject: no other subject's own file can have this path.
        let file = format!("{name}-{a}.md");
        let path = format!("/memories/{}/{file}", dirs.join("/"));
        let marker = format!("marker {a} {name}");
        runtime.block_on(async {
            let create = json!({"command": "create", "path": path, "file_text": marker});
            say(&gate, &key, &a, &command(create), false).await;
            let (created, _) = last_result(&gate).await;
            prop_assert!(
                created == format!("File created successfully at: {path}")
                    || created == format!("File {path} already exists"),
                "{created}"
            );
            say(&gate, &key, &a, &command(json!({"command": "view", "path": path})), false).await;
            prop_assert!(last_result(&gate).await.0.contains(&marker));
            say(&gate, &key, &b, &command(json!({"command": "view", "path": "/memories"})), false).await;
            let (seen, _) = last_result(&gate).await;
            prop_assert!(!seen.contains(&marker) && !seen.contains(&file), "{b} saw {a}'s file: {seen}");
            say(&gate, &key, &b, &command(json!({"command": "view", "path": path})), false).await;
            let missing = format!("The path {path} does not exist. Please provide a valid path.");
            prop_assert_eq!(last_result(&gate).await, (missing, true));
            let escape = format!("/memories/../user:{a}{}", &path["/memories".len()..]);
            say(&gate, &key, &b, &command(json!({"command": "view", "path": escape})), false).await;
            prop_assert_eq!(
                last_result(&gate).await,
                (format!("Path {escape} would escape /memories directory"), true)
            );
            Ok(())
        })
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
}

/// A JWT's permission claim gives the backend as a key's permission does: the file goes into the
/// token's `user:<sub>` tree with `agent:jwt:<sub>` as author.
#[tokio::test]
async fn e2e_memory_tool_a_jwt_permission_claim_opts_in() {
    use crate::e2e_identity::{hs256, in_a_minute};
    let gate = Gate::start("", &[]);
    let claims = json!({"sub": "u-9", "tenant": super::TENANT, "exp": in_a_minute(), "memgate_permissions": ["memory_tool_backend"]});
    let body = serde_json::to_vec(&memory_body("Remember that I work nights.", false)).unwrap();
    let response = client()
        .post(gate.gw.url("/v1/messages"))
        .bearer_auth(hs256(claims))
        .header("content-type", "application/json")
        .header(BACKEND.0, BACKEND.1)
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let records = gate.records("user:u-9").await;
    assert_eq!(records.len(), 1, "{records:#?}");
    assert_eq!(records[0]["key"], "/memories/i-work-nights.md");
    assert_eq!(records[0]["author"], "agent:jwt:u-9");
}

/// A caller with memgate's tools and the backend gets both in one loop: memgate's six after the
/// client's `memory`, and the model's `memory` call executed.
#[tokio::test]
async fn e2e_memory_tool_and_memgates_tools_work_in_one_loop() {
    let gate = Gate::start("", &[]);
    let key = gate.key(&["memory_write_tools", "memory_tool_backend", "assert_subject"]).await;
    let answer = say(&gate, &key, "u-1", "Remember that the office is in Lyon.", false).await;
    let told = message(&answer, false);
    assert_eq!(
        told["content"][1]["text"],
        "From memory: File created successfully at: /memories/the-office-is-in-lyon.md"
    );
    let mut expected = vec!["memory".to_owned()];
    expected.extend(super::MEMGATE_TOOLS.iter().map(|s| (*s).to_owned()));
    assert_eq!(tool_names(&gate.upstream_bodies().await[0]), expected);
    assert_eq!(gate.records("user:u-1").await[0]["key"], "/memories/the-office-is-in-lyon.md");
}

/// Files are memory like any other: exported with their scope, and gone from the tree once the
/// scope is forgotten.
#[tokio::test]
async fn e2e_memory_tool_files_are_exported_and_forgotten_with_their_scope() {
    use crate::e2e_identity::ADMIN_TOKEN;
    let gate = Gate::start("", &[]);
    let key = backend_key(&gate).await;
    say(&gate, &key, "u-1", "Remember that my plan is the pro tier.", false).await;
    let admin = |request: reqwest::RequestBuilder| {
        request.bearer_auth(ADMIN_TOKEN).header("x-memory-tenant", super::TENANT).send()
    };
    let export = admin(client().get(gate.gw.url("/admin/v1/export?scope=user:u-1"))).await.unwrap();
    let lines = export.text().await.unwrap();
    assert!(lines.contains(r#""key":"/memories/my-plan-is-the-pro.md""#), "{lines}");
    let forget =
        admin(client().post(gate.gw.url("/admin/v1/memories/forget")).json(&json!({"scope": "user:u-1"})))
            .await
            .unwrap();
    assert_eq!(forget.status(), 200);
    say(&gate, &key, "u-1", "What do you remember?", false).await;
    assert_eq!(
        last_result(&gate).await.0,
        "Here're the files and directories up to 2 levels deep in /memories, excluding hidden items:\n0B\t/memories"
    );
}

/// Under a release whose agent writes await review, a file is `proposed`: in the tree at once
/// (the model finds what it wrote), its result says it awaits review, and an edit keeps it so.
#[tokio::test]
async fn e2e_memory_tool_files_await_review_under_a_proposing_release() {
    let gate = Gate::start("[releases.v1]\nagent_writes = \"proposed\"\n", &[]);
    let key = backend_key(&gate).await;
    say(&gate, &key, "u-1", "Remember that my desk is 4B.", false).await;
    let (created, _) = last_result(&gate).await;
    assert!(created.starts_with("File created successfully at: /memories/my-desk-is-4b.md"), "{created}");
    assert!(created.contains("awaits review"), "{created}");
    let records = gate.records("user:u-1").await;
    assert_eq!(records[0]["status"], "proposed");
    let edit = json!({"command": "insert", "path": "/memories/my-desk-is-4b.md", "insert_line": 1, "insert_text": "second floor"});
    say(&gate, &key, "u-1", &command(edit), false).await;
    let (edited, _) = last_result(&gate).await;
    assert!(edited.starts_with("The file /memories/my-desk-is-4b.md has been edited."), "{edited}");
    let records = gate.records("user:u-1").await;
    assert_eq!(
        (records[0]["status"].as_str(), records[0]["content"]["statement"].as_str()),
        (Some("proposed"), Some("my desk is 4B\nsecond floor\n"))
    );
    say(&gate, &key, "u-1", "What do you remember?", false).await;
    assert!(last_result(&gate).await.0.contains("/memories/my-desk-is-4b.md"));
}
