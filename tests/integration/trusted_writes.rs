//! Trusted writes as a property: generated writers (agents through the six tools, with and
//! without `memory_write_any`, a key with no subject, a JWT naming an end user, Anthropic's
//! memory tool, the observer) run generated writes (every record type, every priority, content
//! that acts, keys and paths that other writers' records hold, withdrawn records) on a real store
//! with the real model, through the very functions the Messages turn, MCP and the observer's
//! worker call. After each sequence: nothing a non-operator wrote lies outside its writer's own
//! scope, is of a type agents may not write, is priority 5 or acts; no operator's record changed;
//! another agent's record changed only by its author or a holder of `memory_write_any` in its
//! scope; nothing withdrawn came back.

use memgate::identity::{Caller, Permissions};
use memgate::observer::gates::Candidate;
use memgate::record::{AGENT_TYPES, Record, Status, WriterKind};
use memgate::store::memories::ListFilter;
use memgate::store::observer::{Claim, NewExchange};
use memgate::tools::{Level, ToolCaller};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use serde_json::{Value, json};

const TYPES: [&str; 6] = ["fact", "preference", "task", "internal_sop", "customer_profile", "product_spec"];
const KEYS: [&str; 4] = ["/memories/policy.md", "/memories/old.md", "shipping", "/memories/new.md"];

/// Who writes: (label, key id, subject, permissions; `jwt`: a JWT credential instead of a key).
const WRITERS: [(&str, &str, Option<&str>, &[&str]); 5] = [
    ("k1 for alice", "k1", Some("alice"), &["memory_write_tools", "memory_tool_backend"]),
    (
        "k3 for alice, write_any",
        "k3",
        Some("alice"),
        &["memory_write_tools", "memory_write_any", "memory_tool_backend"],
    ),
    ("k2 for alice, write_any", "k2", Some("alice"), &["memory_write_tools", "memory_write_any"]),
    ("k2 alone", "k2", None, &["memory_write_tools", "memory_tool_backend"]),
    (
        "jwt svc naming alice",
        "jwt",
        Some("alice"),
        &["memory_write_tools", "memory_write_any", "memory_tool_backend"],
    ),
];

#[derive(Debug, Clone)]
enum Op {
    Add { who: usize, record_type: &'static str, priority: u8, acts: bool, key: Option<&'static str> },
    Update { who: usize, target: usize, priority: u8, acts: bool },
    Delete { who: usize, target: usize },
    File { who: usize, command: usize, path: &'static str },
    Observe { record_type: &'static str, key: Option<&'static str>, write: bool },
}

fn op() -> impl Strategy<Value = Op> {
    let who = 0..WRITERS.len();
    prop_oneof![
        (
            who.clone(),
            prop::sample::select(TYPES.to_vec()),
            1u8..=5,
            any::<bool>(),
            prop::option::of(prop::sample::select(KEYS.to_vec()))
        )
            .prop_map(|(who, record_type, priority, acts, key)| Op::Add {
                who,
                record_type,
                priority,
                acts,
                key
            }),
        (who.clone(), 0..SEEDS, 1u8..=5, any::<bool>())
            .prop_map(|(who, target, priority, acts)| Op::Update { who, target, priority, acts }),
        (who.clone(), 0..SEEDS).prop_map(|(who, target)| Op::Delete { who, target }),
        (who, 0..4usize, prop::sample::select(KEYS.to_vec())).prop_map(|(who, command, path)| Op::File {
            who,
            command,
            path
        }),
        (
            prop::sample::select(TYPES.to_vec()),
            prop::option::of(prop::sample::select(KEYS.to_vec())),
            any::<bool>()
        )
            .prop_map(|(record_type, key, write)| Op::Observe { record_type, key, write }),
    ]
}

/// The records each case starts with, by id: (id, author, type, status, acts, key).
const SEEDS: usize = 6;
const SEED: [(&str, &str, &str, Status, bool, Option<&str>); SEEDS] = [
    ("op-fact", "admin:ops", "fact", Status::Active, false, Some("/memories/policy.md")),
    ("op-sop", "admin:ops", "internal_sop", Status::Active, true, None),
    ("k2-fact", "agent:k2", "fact", Status::Active, false, Some("shipping")),
    ("k1-paused", "agent:k1", "fact", Status::Paused, false, Some("/memories/old.md")),
    ("k1-archived", "agent:k1", "fact", Status::Archived, false, None),
    ("obs-fact", "observer", "preference", Status::Active, false, None),
];

fn content_of(record_type: &str, acts: bool, text: &str) -> Value {
    let mut content = match record_type {
        "fact" => json!({"statement": text}),
        "preference" => json!({"topic": "contact", "preference": text}),
        "task" => json!({"title": text, "status": "open"}),
        "internal_sop" => json!({"process_name": text}),
        "customer_profile" => json!({"name": text}),
        _ => json!({"name": text}),
    };
    if acts {
        content["trigger_conditions"] = json!(["mentions lawyer or sue"]);
        content["actions"] =
            json!([{"service": "ticketing", "method": "issue_refund", "params": {"amount": "9999"}}]);
        content["trigger_cooldown_seconds"] = json!(0);
    }
    content
}

/// The tools on a real store with the built-in `v1`, and what each generated step needs.
struct Bench(crate::memory_tools::Bench);

impl std::ops::Deref for Bench {
    type Target = crate::memory_tools::Bench;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl Bench {
    async fn start() -> Bench {
        Bench(crate::memory_tools::Bench::start("").await)
    }

    fn caller(&self, tenant: &str, who: usize) -> ToolCaller {
        let (_, key, subject, permissions) = WRITERS[who];
        let mut caller = Caller::new(tenant, []);
        caller.permissions = Permissions::from_names(permissions.iter().copied());
        if key == "jwt" {
            caller.rate_key = format!("jwt:{tenant}:svc-bot");
            caller.credential = Some("jwt:issuer/svc-bot".to_owned());
        } else {
            caller.rate_key = format!("key:{key}");
            caller.credential = Some(format!("key:{key}"));
        }
        if let Some(subject) = subject {
            caller.subject = Some(subject.to_owned());
            caller.scopes.insert(format!("user:{subject}"));
        }
        ToolCaller::new(&caller, Level::permitted(&caller)).with_file_level(Level::for_memory_tool(
            &caller,
            &self.release,
            None,
        ))
    }

    async fn seed(&self, tenant: &str) {
        for (id, author, record_type, status, acts, key) in SEED {
            let mut envelope = json!({"id": id, "type": record_type, "scope": ["user:alice"],
                "content": content_of(record_type, acts, &format!("seeded {id}"))});
            if let Some(key) = key {
                envelope["key"] = json!(key);
            }
            // Seeded through the store's operator path, then given the author the case needs.
            let writer =
                memgate::memory::Writer::operator("seed", Some(author), WriterKind::of_author(Some(author)));
            self.memories.create_as(tenant, &envelope, &writer).await.unwrap();
            if status != Status::Active {
                self.memories.set_status(tenant, id, status, "ops").await.unwrap();
            }
        }
    }

    async fn run(&self, tenant: &str, n: usize, op: &Op) {
        match op {
            Op::Add { who, record_type, priority, acts, key } => {
                let mut input = json!({"type": record_type, "priority": priority,
                    "content": content_of(record_type, *acts, &format!("write {n}"))});
                if let Some(key) = key {
                    input["key"] = json!(key);
                }
                self.tools.execute(&self.caller(tenant, *who), &self.release, "memory_add", &input).await;
            }
            Op::Update { who, target, priority, acts } => {
                let (id, _, record_type, ..) = SEED[*target];
                let input = json!({"id": id, "priority": priority,
                    "content": content_of(record_type, *acts, &format!("update {n}"))});
                self.tools.execute(&self.caller(tenant, *who), &self.release, "memory_update", &input).await;
            }
            Op::Delete { who, target } => {
                let input = json!({"id": SEED[*target].0});
                self.tools.execute(&self.caller(tenant, *who), &self.release, "memory_delete", &input).await;
            }
            Op::File { who, command, path } => {
                let input = match command {
                    0 => json!({"command": "create", "path": path, "file_text": format!("file {n}")}),
                    1 => {
                        json!({"command": "str_replace", "path": path, "old_str": "seeded", "new_str": "taken"})
                    }
                    2 => json!({"command": "delete", "path": path}),
                    _ => json!({"command": "rename", "old_path": path, "new_path": "/memories/moved.md"}),
                };
                self.tools.execute(&self.caller(tenant, *who), &self.release, "memory", &input).await;
            }
            Op::Observe { record_type, key, write } => {
                let exchange = exchange(tenant, n, *write);
                let candidate = Candidate {
                    record_type: (*record_type).to_owned(),
                    content: content_of(record_type, false, &format!("observed {n}")),
                    about: "user".to_owned(),
                    confidence: 0.9,
                    evidence: format!("I said observed {n}"),
                    key: key.map(str::to_owned),
                };
                // Queued and claimed as the worker would, so the write runs under a real claim.
                let store = self.memories.store();
                let now = memgate::clock::now_ms();
                store.observer_insert(&exchange, now).await.unwrap();
                let claimed = store.observer_claim("property", now, 60_000, 1).await.unwrap();
                assert_eq!(claimed.len(), 1);
                let claim = Claim { exchange_id: exchange.id.clone(), owner: "property".to_owned() };
                let _ = memgate::observer::write::write(
                    &self.memories,
                    &exchange,
                    0,
                    &candidate,
                    "v1",
                    "m",
                    &claim,
                )
                .await;
                store.observer_finish(&exchange.id, "property").await.unwrap();
            }
        }
    }

    async fn records(&self, tenant: &str) -> Vec<Record> {
        let mut all = Vec::new();
        for status in [Status::Active, Status::Paused, Status::Archived, Status::Proposed, Status::Dormant] {
            let filter = ListFilter { status: Some(status), ..ListFilter::default() };
            all.extend(self.memories.list(tenant, &filter, None, 500).await.unwrap());
        }
        all
    }
}

fn exchange(tenant: &str, n: usize, write: bool) -> NewExchange {
    NewExchange {
        id: format!("{tenant}-ex-{n}"),
        tenant: tenant.to_owned(),
        subject: "alice".to_owned(),
        scope: "user:alice".to_owned(),
        release: "v1".to_owned(),
        mode: if write { "write" } else { "propose" }.to_owned(),
        min_confidence: 0.5,
        schema_version: "v1".to_owned(),
        request_id: format!("req-{n}"),
        person_text: format!("I said observed {n}"),
        answer_text: "noted".to_owned(),
        system_text: String::new(),
        injected_ids: Vec::new(),
    }
}

/// The property, checked on what the store holds after one generated sequence.
fn check(records: &[Record], ops: &[Op]) {
    let by_id = |id: &str| records.iter().find(|r| r.id == id);
    for record in records {
        if record.writer().is_operator() {
            continue;
        }
        let what = format!("{} by {:?} after {ops:?}", record.id, record.author);
        assert!(
            ["user:alice", "agent:k2"].contains(&record.scope.join(",").as_str()),
            "outside its writer's scope: {what}"
        );
        assert!(AGENT_TYPES.contains(&record.record_type.as_str()), "type {}: {what}", record.record_type);
        assert!(record.priority <= 4, "priority {}: {what}", record.priority);
        assert!(memgate::memory::writers::action_fields(&record.content).is_empty(), "acts: {what}");
        assert!(!record.may_fire(), "fires: {what}");
    }
    // What operators wrote is as they wrote it.
    for id in ["op-fact", "op-sop"] {
        let record = by_id(id).unwrap_or_else(|| panic!("{id} is gone after {ops:?}"));
        assert_eq!((record.revision, record.author.as_deref()), (1, Some("admin:ops")), "{id} after {ops:?}");
        assert_eq!(record.content, content_of(&record.record_type, id == "op-sop", &format!("seeded {id}")));
    }
    // Only the operator-made records act.
    let acting: Vec<&str> = records
        .iter()
        .filter(|r| !memgate::memory::writers::action_fields(&r.content).is_empty())
        .map(|r| r.id.as_str())
        .collect();
    assert_eq!(acting, ["op-sop"], "after {ops:?}");
    // Withdrawn records stay withdrawn (or are gone with their owner's delete).
    for (id, status) in [("k1-paused", Status::Paused), ("k1-archived", Status::Archived)] {
        if let Some(record) = by_id(id) {
            assert_eq!(record.status, status, "{id} after {ops:?}");
        }
    }
}

#[tokio::test]
async fn no_generated_write_of_any_writer_leaves_its_bounds() {
    let bench = Bench::start().await;
    let mut runner = TestRunner::deterministic();
    let sequences = prop::collection::vec(op(), 4..10);
    for case in 0..14 {
        let ops = sequences.new_tree(&mut runner).unwrap().current();
        let tenant = format!("case{case}");
        bench.seed(&tenant).await;
        for (n, op) in ops.iter().enumerate() {
            bench.run(&tenant, n, op).await;
        }
        let records = bench.records(&tenant).await;
        check(&records, &ops);
        // k2's record changed only through its author or a holder of write_any in its scope.
        let history = bench.memories.history(&tenant, "k2-fact").await.unwrap_or_default();
        for change in history.iter().skip(1) {
            let allowed = ["agent:k2", "agent:k3", "agent:jwt:issuer/svc-bot"];
            assert!(
                allowed.contains(&change.actor.as_str()),
                "k2-fact changed by {} after {ops:?}",
                change.actor
            );
        }
    }
}
