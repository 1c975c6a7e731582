//! memgate's memory tools as a service (`tools::MemoryTools::execute`), on a real store and the
//! real embedding model, without a model or HTTP: where writes go and as whom, what each caller
//! can read, who may change what, and what hostile input gets back.

use crate::support::TestDb;
use memgate::config::{Config, ConfigFlags};
use memgate::identity::{Caller, Permissions};
use memgate::inject::Templates;
use memgate::memory::MemoryService;
use memgate::observability::metrics::Metrics;
use memgate::record::{Status, WriterKind};
use memgate::rollout::Release;
use memgate::tools::{Level, MemoryTools, ToolCaller, ToolResult};
use serde_json::{Value, json};
use std::sync::Arc;

pub(crate) struct Bench {
    pub(crate) tools: MemoryTools,
    pub(crate) memories: MemoryService,
    pub(crate) release: Release,
    _db: TestDb,
}

impl Bench {
    pub(crate) async fn start(release_toml: &str) -> Bench {
        let db = TestDb::sqlite();
        let memories = crate::support::memory_service(&db.url).await;
        let dir = crate::support::TempDir::new("tools-config");
        let file = dir.path.join("memgate.toml");
        std::fs::write(&file, release_toml).unwrap();
        let flags = ConfigFlags { config: Some(file), ..ConfigFlags::default() };
        let config = Config::load(&flags, |_| None).unwrap();
        let templates = Templates::builtin_with(None).unwrap();
        let release =
            memgate::rollout::release::load_releases(&config, &templates).unwrap().remove("v1").unwrap();
        let tools = MemoryTools::new(memories.clone(), Arc::new(Metrics::new()));
        Bench { tools, memories, release, _db: db }
    }

    async fn call(&self, caller: &ToolCaller, name: &str, input: Value) -> ToolResult {
        self.tools.execute(caller, &self.release, name, &input).await
    }
}

/// A key's caller: `key:<id>` with these scopes and permissions, answering for `subject`.
fn key_caller(tenant: &str, key_id: &str, subject: Option<&str>, permissions: &[&str]) -> ToolCaller {
    let mut caller = Caller::new(tenant, []);
    caller.rate_key = format!("key:{key_id}");
    caller.credential = Some(format!("key:{key_id}"));
    caller.permissions = Permissions::from_names(permissions.iter().copied());
    if let Some(subject) = subject {
        caller.subject = Some(subject.to_owned());
        caller.scopes.insert(format!("user:{subject}"));
    }
    let level = Level::permitted(&caller);
    ToolCaller::new(&caller, level)
}

fn saved_id(result: &ToolResult) -> String {
    assert!(!result.is_error, "{result:?}");
    let rest = result.content.split("as ").nth(1).unwrap_or_else(|| panic!("no id in {result:?}"));
    rest.split([' ', ';', '.']).next().unwrap().to_owned()
}

const WRITE: &[&str] = &["memory_write_tools"];

#[tokio::test]
async fn an_agents_write_lands_in_its_own_scope_with_its_author_and_is_found_again() {
    let bench = Bench::start("").await;
    let agent = key_caller("acme", "k1", Some("u-1"), WRITE);
    let result = bench
        .call(
            &agent,
            "memory_add",
            json!({"type": "fact", "content": {"statement": "This repo uses pnpm, not npm."}}),
        )
        .await;
    let id = saved_id(&result);
    let record = bench.memories.get("acme", &id).await.unwrap();
    assert_eq!(record.scope, vec!["user:u-1"]);
    assert_eq!(record.author.as_deref(), Some("agent:k1"));
    assert_eq!(record.status, Status::Active);
    let history = bench.memories.history("acme", &id).await.unwrap();
    assert_eq!(history[0].actor, "agent:k1");

    let found = bench
        .call(&agent, "memory_search", json!({"query": "which package manager does the repo use?"}))
        .await;
    assert!(found.content.contains(&id), "{found:?}");
    assert!(found.content.contains("not instructions"), "{found:?}");
    let got = bench.call(&agent, "memory_get", json!({"id": id})).await;
    assert!(got.content.contains("pnpm") && got.content.contains("agent:k1"), "{got:?}");
    let listed = bench.call(&agent, "memory_list", json!({"mine": true})).await;
    assert!(listed.content.contains(&id), "{listed:?}");

    // Without a subject the key writes into its own agent scope, which it then sees.
    let bare = key_caller("acme", "k2", None, WRITE);
    let id = saved_id(
        &bench
            .call(
                &bare,
                "memory_add",
                json!({"type": "fact", "content": {"statement": "Staging deploys on Fridays."}}),
            )
            .await,
    );
    assert_eq!(bench.memories.get("acme", &id).await.unwrap().scope, vec!["agent:k2"]);
    assert!(bench.call(&bare, "memory_get", json!({"id": id})).await.content.contains("Fridays"));
}

/// Isolation as a property: whatever one subject's or tenant's agent writes, the others' tools
/// never read, list, find, change or delete.
#[tokio::test]
async fn no_agent_reads_or_touches_what_another_subject_or_tenant_wrote() {
    let bench = Bench::start("").await;
    let writers = [
        key_caller("acme", "k1", Some("alice"), WRITE),
        key_caller("acme", "k1", Some("bob"), WRITE),
        key_caller("acme", "k2", None, WRITE),
        key_caller("globex", "k3", Some("alice"), WRITE),
    ];
    let topics = ["likes green tea", "prefers email over phone", "deploys on Fridays", "uses pnpm"];
    let mut written: Vec<(usize, String, String)> = Vec::new();
    for (w, writer) in writers.iter().enumerate() {
        for (t, topic) in topics.iter().enumerate() {
            let statement = format!("Person {w} {topic} (note {t})");
            let result = bench
                .call(writer, "memory_add", json!({"type": "fact", "content": {"statement": statement}}))
                .await;
            written.push((w, saved_id(&result), statement));
        }
    }
    for (r, reader) in writers.iter().enumerate() {
        let listed = bench.call(reader, "memory_list", json!({"limit": 50})).await.content;
        for topic in topics {
            let found =
                bench.call(reader, "memory_search", json!({"query": topic, "limit": 20})).await.content;
            for (w, id, statement) in &written {
                if *w != r {
                    assert!(
                        !found.contains(id) && !found.contains(statement),
                        "{r} found {w}'s {id}: {found}"
                    );
                }
            }
        }
        for (w, id, statement) in &written {
            let mine = *w == r;
            assert_eq!(listed.contains(id), mine, "{r} listing {w}'s {id}: {listed}");
            let got = bench.call(reader, "memory_get", json!({"id": id})).await;
            assert_eq!(got.content.contains(statement.as_str()), mine, "{r} get {w}'s {id}: {got:?}");
            if !mine {
                let changed = bench
                    .call(reader, "memory_update", json!({"id": id, "content": {"statement": "overwritten"}}))
                    .await;
                assert!(changed.is_error, "{r} updated {w}'s {id}: {changed:?}");
                let deleted = bench.call(reader, "memory_delete", json!({"id": id})).await;
                assert!(deleted.is_error, "{r} deleted {w}'s {id}: {deleted:?}");
                // The refusal reads as for a record that does not exist: nothing is told.
                assert_eq!(got.content, format!("memory_get: no record {id:?} that you can read"));
            }
        }
    }
    for (w, id, statement) in &written {
        let record = bench.memories.get(&writers[*w].caller.tenant, id).await.unwrap();
        assert_eq!(record.content["statement"], statement.as_str(), "{id} changed");
    }
}

#[tokio::test]
async fn an_agent_changes_only_what_it_wrote_unless_it_holds_write_any() {
    let bench = Bench::start("").await;
    // An operator's record in the subject's scope, which the agent sees.
    let admin = memgate::memory::Writer::operator("ops", Some("admin:ops"), WriterKind::Operator);
    let operator = bench
        .memories
        .create_as(
            "acme",
            &json!({"id": "op-1", "type": "fact", "scope": ["user:u-1"], "key": "shipping",
                    "content": {"statement": "Ships only on weekdays."}}),
            &admin,
        )
        .await
        .unwrap();
    assert!(matches!(operator, memgate::store::memories::Created::New(_)));
    let agent = key_caller("acme", "k1", Some("u-1"), WRITE);
    assert!(bench.call(&agent, "memory_get", json!({"id": "op-1"})).await.content.contains("weekdays"));
    let update = bench.call(&agent, "memory_update", json!({"id": "op-1", "priority": 5})).await;
    assert!(update.is_error && update.content.contains("written by someone else"), "{update:?}");
    let delete = bench.call(&agent, "memory_delete", json!({"id": "op-1"})).await;
    assert!(delete.is_error, "{delete:?}");
    // Nor by writing its key again (a supersede), nor by writing its near twin (a dedup).
    let supersede = bench
        .call(
            &agent,
            "memory_add",
            json!({"type": "fact", "key": "shipping", "content": {"statement": "Ships daily."}}),
        )
        .await;
    assert!(supersede.is_error, "{supersede:?}");
    let twin = bench
        .call(
            &agent,
            "memory_add",
            json!({"type": "fact", "content": {"statement": "Ships only on weekdays."}}),
        )
        .await;
    assert!(!twin.content.contains("updated instead"), "{twin:?}");
    let record = bench.memories.get("acme", "op-1").await.unwrap();
    assert_eq!((record.revision, record.author.as_deref()), (1, Some("admin:ops")));

    // Its own record it changes and deletes.
    let mine = saved_id(
        &bench
            .call(
                &agent,
                "memory_add",
                json!({"type": "fact", "content": {"statement": "Prefers calls after 5pm."}}),
            )
            .await,
    );
    let changed = bench
        .call(
            &agent,
            "memory_update",
            json!({"id": mine, "content": {"statement": "Prefers calls after 6pm."}}),
        )
        .await;
    assert!(!changed.is_error, "{changed:?}");
    assert_eq!(
        bench.memories.get("acme", &mine).await.unwrap().content["statement"],
        "Prefers calls after 6pm."
    );
    assert!(!bench.call(&agent, "memory_delete", json!({"id": mine})).await.is_error);
    assert!(bench.memories.get("acme", &mine).await.is_err());

    // With memory_write_any it changes another agent's record in its scope, never the operator's.
    let trusted = key_caller("acme", "k9", Some("u-1"), &["memory_write_tools", "memory_write_any"]);
    let update = bench.call(&trusted, "memory_update", json!({"id": "op-1", "priority": 4})).await;
    assert!(update.is_error && update.content.contains("an operator wrote this record"), "{update:?}");
    assert!(bench.call(&trusted, "memory_delete", json!({"id": "op-1"})).await.is_error);
    assert_eq!(bench.memories.get("acme", "op-1").await.unwrap().revision, 1);
    let theirs = saved_id(
        &bench
            .call(&agent, "memory_add", json!({"type": "fact", "content": {"statement": "Prefers tea."}}))
            .await,
    );
    let update = bench.call(&trusted, "memory_update", json!({"id": theirs, "priority": 4})).await;
    assert!(!update.is_error, "{update:?}");
    let record = bench.memories.get("acme", &theirs).await.unwrap();
    assert_eq!(record.priority, 4);
    // The record's words are now k9's, and its provenance says so; it stays k1's to own.
    let provenance = record.provenance.unwrap();
    assert_eq!((provenance.writer, provenance.credential.as_deref()), (WriterKind::Agent, Some("key:k9")));
    assert_eq!(record.author.as_deref(), Some("agent:k1"));
    // Priority 5 is an operator's word, even with write_any.
    let update = bench.call(&trusted, "memory_update", json!({"id": theirs, "priority": 5})).await;
    assert!(update.is_error && update.content.contains("$.priority"), "{update:?}");
}

#[tokio::test]
async fn a_secret_is_refused_by_its_kind_and_never_echoed() {
    let bench = Bench::start("").await;
    let agent = key_caller("acme", "k1", Some("u-1"), WRITE);
    let secrets = [
        "sk-ant-api03-Zx8bQ2vN7mK4pL9wR3tY6uI1oP5aS0dF2gH8jK4lZ7xC9vB1nM3qW5eR7tY9uI0oP2aS4dF6gH8jK0lZ2xC4vB6n-AAAAAAAA",
        "postgres://admin:Hunter2SuperSecret@db.internal:5432/prod",
        "ghp_1a2B3c4D5e6F7g8H9i0J1k2L3m4N5o6P7q8R",
    ];
    for secret in secrets {
        let statement = format!("The deploy credential is {secret}");
        let result = bench
            .call(&agent, "memory_add", json!({"type": "fact", "content": {"statement": statement}}))
            .await;
        assert!(result.is_error, "{result:?}");
        assert_eq!(result.outcome, "refused");
        assert!(result.content.contains("Secrets never go into memory"), "{result:?}");
        assert!(result.content.contains("$.content.statement"), "{result:?}");
        for piece in [secret, &secret[8..24]] {
            assert!(!result.content.contains(piece), "echoed: {result:?}");
        }
    }
    let listed = bench.call(&agent, "memory_list", json!({})).await;
    assert_eq!(listed.content, "No memory records.");
}

#[tokio::test]
async fn malformed_inputs_get_clear_errors_and_change_nothing() {
    let bench = Bench::start("").await;
    let agent = key_caller("acme", "k1", Some("u-1"), WRITE);
    let cases: Vec<(&str, Value, &str)> = vec![
        ("memory_add", json!("remember this"), "must be a JSON object"),
        ("memory_add", json!({}), "type is required"),
        ("memory_add", json!({"type": "fact"}), "content is required"),
        ("memory_add", json!({"type": "fact", "content": "text"}), "content must be a JSON object"),
        ("memory_add", json!({"type": "fact", "content": {"text": "x"}}), "$.content"),
        ("memory_add", json!({"type": "nope", "content": {"statement": "x"}}), "$.type"),
        (
            "memory_add",
            json!({"type": "fact", "content": {"statement": "x"}, "scope": ["public"]}),
            "unknown field",
        ),
        ("memory_add", json!({"type": "fact", "content": {"statement": "x"}, "priority": 9}), "$.priority"),
        ("memory_search", json!({"query": ""}), "query must be"),
        ("memory_search", json!({"query": "x", "limit": 1000}), "limit must be"),
        ("memory_search", json!({"query": 42}), "query must be a string"),
        ("memory_get", json!({"id": "x".repeat(5000)}), "id must be"),
        ("memory_get", json!({"id": "\u{0}\u{7}nope"}), "no record"),
        ("memory_list", json!({"offset": -1}), "offset must be"),
        ("memory_update", json!({"id": "x"}), "give content"),
        ("memory_delete", json!({"id": ["x"]}), "id must be a string"),
    ];
    for (tool, input, says) in cases {
        let result = bench.call(&agent, tool, input.clone()).await;
        assert!(result.is_error, "{tool} {input}: {result:?}");
        assert!(result.content.contains(says), "{tool} {input}: {result:?}");
    }
    assert_eq!(bench.call(&agent, "memory_list", json!({})).await.content, "No memory records.");
    // A tool the caller was not offered is refused, whatever it is called.
    let reader = key_caller("acme", "k2", Some("u-1"), &["memory_read_tools"]);
    let refused =
        bench.call(&reader, "memory_add", json!({"type": "fact", "content": {"statement": "x"}})).await;
    assert!(refused.is_error && refused.content.contains("not one of the memory tools"), "{refused:?}");
}

#[tokio::test]
async fn a_proposed_release_keeps_agent_writes_for_review() {
    let bench = Bench::start("[releases.v1]\nagent_writes = \"proposed\"\n").await;
    let agent = key_caller("acme", "k1", Some("u-1"), WRITE);
    let result = bench
        .call(&agent, "memory_add", json!({"type": "fact", "content": {"statement": "Likes oolong."}}))
        .await;
    assert!(result.content.contains("awaits review"), "{result:?}");
    let id = saved_id(&result);
    assert_eq!(bench.memories.get("acme", &id).await.unwrap().status, Status::Proposed);
    // Not found by tools until approved.
    assert!(bench.call(&agent, "memory_get", json!({"id": id})).await.is_error);
    bench.memories.set_status("acme", &id, Status::Active, "ops").await.unwrap();
    assert!(!bench.call(&agent, "memory_get", json!({"id": id})).await.is_error);
}
