//! Neighbours through the real binary and model, under the default release (v4): a conversation
//! imported one turn a record, each saying where it sits (`metadata.thread`, `position`). The
//! turn that answers a question says little the question says; the turn before it names the
//! topic. The topic's turn lifts the answer into the block, a turn the caller may not see in the
//! same thread is neither injected nor named, and explain says which record came as a neighbour.

use super::*;

/// The default release (v4), not the v1 the other memory tests pin; and v3 set up as v4 without
/// neighbours, to compare with.
fn config() -> String {
    let without_neighbours = "\n[releases.v3]\nstandout_floor = 0.10\ncut_standout = 1.0\nsubject_boost = 0.1\n\
        cut_relative = 0\nbudget_tokens = 919\nmax_items = 64\nlexical_weight = 1.5\nneighbour_weight = 0\n";
    CONFIG.replace("default_release = \"v1\"\n", "") + without_neighbours
}

const TURNS: [&str; 6] = [
    "Caroline: Morning! The weather finally cleared up here.",
    "Melanie: I signed up for the pottery class at the community centre last weekend.",
    "Caroline: Oh nice, what did you end up making there?",
    "Melanie: A small blue bowl with a wavy rim, for my mom's birthday.",
    "Caroline: She will love it. Are you going back next month?",
    "Melanie: Probably, they have a glazing workshop in March.",
];

#[tokio::test]
async fn a_turn_that_matches_brings_the_turns_beside_it_and_nothing_the_caller_may_not_see() {
    let memgate = Memgate::start(&config());
    let mut ids = Vec::new();
    for (position, text) in TURNS.iter().enumerate() {
        let record = json!({"type": "fact", "scope": ["user:mel"], "content": {"statement": text},
            "metadata": {"thread": "chat-2024-03-02", "position": position * 2}});
        ids.push(memgate.remember(TENANT, &record).await);
    }
    // Another person's note filed in the same thread, between the topic and the answer.
    let hidden = memgate
        .remember(
            TENANT,
            &json!({"type": "fact", "scope": ["user:other"],
            "content": {"statement": "Melanie's pottery teacher keeps the kiln schedule for the class."},
            "metadata": {"thread": "chat-2024-03-02", "position": 3}}),
        )
        .await;
    // Unrelated knowledge, so the caller has something to stand out from.
    for statement in [
        "Refunds are paid back to the original card within five working days.",
        "The Novosibirsk office moves to Lenina street in September.",
        "Password reset links expire after thirty minutes.",
        "The GRND-200 grinder has forty grind settings and a 250 g hopper.",
        "Standing desks ship from the Hamburg warehouse.",
    ] {
        memgate
            .remember(
                TENANT,
                &json!({"type": "fact", "scope": ["public"], "content": {"statement": statement}}),
            )
            .await;
    }

    let request = messages(None, "What did Melanie make in the pottery class?");
    let caller = json!({"scopes": ["user:mel"], "subject": "mel"});
    let explained = eventually(Duration::from_secs(30), "the turns to be embedded", || async {
        let answer = memgate.explain(TENANT, &request, caller.clone(), None).await;
        (answer["injected"].as_array().is_some_and(|got| got.iter().any(|id| id == ids[1].as_str())))
            .then_some(answer)
    })
    .await;
    let injected: Vec<&str> =
        explained["injected"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    // The answer (turn 3) came with the topic (turn 1), and so did the question between them.
    for turn in 1..=3 {
        assert!(injected.contains(&ids[turn].as_str()), "turn {turn} missing from {injected:?}: {explained}");
    }
    assert!(!injected.contains(&hidden.as_str()), "another user's record was injected: {explained}");

    // The subject's own bot, with its trace: the block holds what explain said, the trace shows
    // who was lifted and who came as a neighbour, and never names the other user's note.
    let key = memgate.key(TENANT, &["user:mel"], &["assert_subject", "debug"]).await;
    let answer = memgate.ask(&key, &[("x-memory-subject", "mel"), ("x-memory-debug", "1")], &request).await;
    answer.assert_ok(injected.len(), "neighbours");
    let got = injected_ids(&memgate.last_upstream().await["body"]);
    assert_eq!(got, injected.iter().map(|s| (*s).to_owned()).collect(), "the block holds what explain said");
    let header = answer.trace.expect("a trace for a caller with the debug permission");
    assert!(!header.contains(&hidden), "the caller's trace names a record it may not see: {header}");
    let trace: Value = serde_json::from_str(&header).unwrap();
    // Each layer's output is the next one's input: the neighbours let in count as the semantic
    // layer's survivors.
    let layers = trace["trace"]["layers"].as_array().unwrap();
    for pair in layers.windows(2) {
        assert_eq!(pair[0]["output"], pair[1]["input"], "{layers:?}");
    }
    let ranked = trace["trace"]["ranked"].as_array().unwrap();
    let lifted = ranked.iter().filter(|r| r["neighbours"]["lift"].as_f64().unwrap_or(0.0) > 0.0).count();
    assert!(lifted > 0, "no survivor shows a neighbour's lift: {ranked:?}");
    let admitted: Vec<&str> = ranked
        .iter()
        .filter(|r| r["neighbours"]["admitted"] == json!(true))
        .filter_map(|r| r["id"].as_str())
        .collect();
    assert!(!admitted.is_empty(), "no turn came as a neighbour: {ranked:?}");
    assert!(
        admitted.iter().all(|id| ids.iter().any(|i| i == id)),
        "only the conversation's turns: {admitted:?}"
    );

    // The same rules without neighbours (v3 set up as v4 with neighbour_weight 0): the turns that
    // came as neighbours are not there, and nothing else changed but their order.
    let alone = explain_as(&memgate, &request, &caller, "v3").await;
    for id in &admitted {
        assert!(!alone.iter().any(|a| a == id), "{id} passes without its neighbours too: {alone:?}");
    }
    let mut with: Vec<&str> = injected.iter().copied().filter(|id| !admitted.contains(id)).collect();
    let mut without: Vec<&str> = alone.iter().map(String::as_str).collect();
    with.sort_unstable();
    without.sort_unstable();
    assert_eq!(with, without, "neighbours only add their turns");
}

async fn explain_as(memgate: &Memgate, request: &Value, caller: &Value, release: &str) -> Vec<String> {
    let answer = memgate.explain(TENANT, request, caller.clone(), Some(release)).await;
    answer["injected"].as_array().unwrap().iter().filter_map(Value::as_str).map(str::to_owned).collect()
}

/// Thread metadata is the writer's to set: a note about something else, filed between two turns
/// of a conversation that answers the question, is not let in as their neighbour. A neighbour
/// passes only on the release's own score floor (v4: `standout_floor`), as any record on its
/// meaning would; the turns that do answer still come.
#[tokio::test]
async fn a_record_filed_in_a_matching_thread_passes_as_a_neighbour_only_on_its_own_floor() {
    let memgate = Memgate::start(&config());
    let thread = |position: usize, statement: &str| {
        json!({"type": "fact", "scope": ["public"], "content": {"statement": statement},
            "metadata": {"thread": "kb-refunds", "position": position}})
    };
    let policy = memgate
        .remember(TENANT, &thread(0, "Refunds are paid back to the original card within five working days."))
        .await;
    let census = memgate
        .remember(
            TENANT,
            &thread(1, "Volunteers counted 412 lapwings and 38 curlews at the estuary bird census."),
        )
        .await;
    let gift = memgate
        .remember(TENANT, &thread(2, "A refund for a gift card purchase goes back onto a new gift card."))
        .await;
    for statement in [
        "The Novosibirsk office moves to Lenina street in September.",
        "Password reset links expire after thirty minutes.",
        "The GRND-200 grinder has forty grind settings and a 250 g hopper.",
        "Standing desks ship from the Hamburg warehouse.",
        "Premium support answers the phone from 8 am to 8 pm on weekdays.",
    ] {
        memgate
            .remember(
                TENANT,
                &json!({"type": "fact", "scope": ["public"], "content": {"statement": statement}}),
            )
            .await;
    }
    let request = messages(None, "How long does a refund take to reach my card?");
    let caller = json!({"scopes": ["public"]});
    let explained = eventually(Duration::from_secs(30), "the records to be embedded", || async {
        let answer = memgate.explain(TENANT, &request, caller.clone(), None).await;
        (answer["injected"].as_array().is_some_and(|got| got.iter().any(|id| id == policy.as_str())))
            .then_some(answer)
    })
    .await;
    let injected: Vec<&str> =
        explained["injected"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(!injected.contains(&census.as_str()), "the census note came as a neighbour: {explained}");
    // The other refund turn of the thread, which is about the question, is there.
    assert!(injected.contains(&gift.as_str()), "{explained}");
}
