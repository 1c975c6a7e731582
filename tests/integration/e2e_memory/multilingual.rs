//! Multilingual recall and precision: records and questions in English, Chinese and Russian.

use super::*;

/// The support knowledge of one tenant: four topics, each written in one language, and three
/// records about nothing a customer asks (shared with the SDK test, `tests/sdk/test_memory.py`).
fn support_records() -> Vec<Value> {
    serde_json::from_str(include_str!("../../data/support_records.json")).unwrap()
}

/// Queries a customer might send, in three languages, and the record that answers each.
const QUERIES: &[(&str, &str)] = &[
    ("Hi, my standing desk still hasn't arrived. When will it be delivered?", "conv-desk-delay"),
    ("我的升降桌怎么还没送到？什么时候能到货？", "conv-desk-delay"),
    ("Здравствуйте, мой стол до сих пор не доставили. Когда его привезут?", "conv-desk-delay"),
    ("I want to return the lamp I bought last week. How long does the refund take?", "sop-refund-zh"),
    ("我想退货，退款多久能到账？", "sop-refund-zh"),
    ("Я хочу вернуть товар. Как быстро мне вернут деньги?", "sop-refund-zh"),
    ("I forgot my password and can't log in to my account. How do I reset it?", "sop-password-ru"),
    ("我忘记密码了，登录不了账户，怎么重置？", "sop-password-ru"),
    ("Я забыл пароль и не могу войти в личный кабинет. Как его сбросить?", "sop-password-ru"),
    ("Which language should I use when replying to this customer?", "profile-li-wei"),
    ("这位客户希望我们用什么语言回复？", "profile-li-wei"),
    ("На каком языке лучше отвечать этому клиенту?", "profile-li-wei"),
];

/// What one support query got.
struct Outcome {
    query: &'static str,
    relevant: &'static str,
    /// The ids the upstream received in the block.
    got: BTreeSet<String>,
    /// Every record's similarity to the query, best first.
    scores: Vec<(String, f32)>,
}

/// Sends every query of `QUERIES` as customer u-789 of a support bot, against `support_records`,
/// and measures each query's similarities on the side.
async fn ask_the_support_queries() -> Vec<Outcome> {
    // The release memgate ships as the default (v3: compact lines and the cut), not the v1 the
    // other memory tests pin.
    let gate = Memgate::start(&CONFIG.replace("default_release = \"v1\"\n", ""));
    for record in support_records() {
        gate.remember(TENANT, &record).await;
    }
    let key = gate.key(TENANT, &["team:support"], &["assert_subject"]).await;
    let caller = json!({"scopes": ["team:support"], "subject": "u-789"});
    let mut outcomes = Vec::new();
    for (query, relevant) in QUERIES {
        let body = support_bot(query);
        let answer = gate.ask(&key, &[("x-memory-subject", "u-789")], &body).await;
        let got = injected_ids(&gate.last_upstream().await["body"]);
        answer.assert_ok(got.len(), query);
        let scores = similarity_table(&gate, TENANT, &body, caller.clone()).await;
        outcomes.push(Outcome { query, relevant, got, scores });
    }
    outcomes
}

/// The outcomes as a table, for failure messages and the test log.
fn similarity_report(outcomes: &[Outcome]) -> String {
    let mut report = String::from(
        "cosine to each record (default threshold, multilingual-e5-small, language centering):\n",
    );
    for o in outcomes {
        let row: Vec<String> = o.scores.iter().map(|(id, s)| format!("{id} {s:.3}")).collect();
        report.push_str(&format!(
            "{}\n    wanted {}; got {:?}\n    {}\n",
            o.query,
            o.relevant,
            o.got,
            row.join(", ")
        ));
    }
    report
}

/// The records no customer question is about.
const OFF_TOPIC: [&str; 3] = ["fact-party-zh", "fact-office-ru", "spec-grinder"];

/// Multilingual retrieval as the support bot sees it: with language centering (on by default) and
/// its calibrated threshold, measured on this sample with the int8 model, 10 of the 12 queries get
/// exactly their record; "Which language should I use…" also gets the Chinese refund policy, which
/// scores a hair above its own record (0.208 against 0.200; 0.210 against 0.211 with float32
/// weights); the Russian question about the late desk gets nothing (its record scores 0.132, below
/// two SOPs at 0.18). An int8 model quantized afresh by scripts/fetch-assets on another machine
/// (2026-12-02) gives the Russian form of the language question the Chinese refund policy too, at
/// 0.191 against the 0.19 threshold: 9 exact. The bars below sit at that: a query that gets anything gets its own record,
/// scoring within 0.02 of the best. Without centering the same sample gave 2
/// of 12 exact, and the office move, the staff party and the grinder were injected for some
/// queries: this test fails then.
#[tokio::test]
async fn queries_in_english_chinese_and_russian_get_their_record_and_no_off_topic_one() {
    let outcomes = ask_the_support_queries().await;
    let report = similarity_report(&outcomes);
    eprintln!("{report}");
    let off_topic: Vec<String> = outcomes
        .iter()
        .filter(|o| OFF_TOPIC.iter().any(|id| o.got.contains(*id)))
        .map(|o| format!("{}: got {:?}", o.query, o.got))
        .collect();
    assert!(off_topic.is_empty(), "off-topic records were injected:\n{}\n\n{report}", off_topic.join("\n"));
    let exact = outcomes.iter().filter(|o| o.got == set(&[o.relevant])).count();
    let found = outcomes.iter().filter(|o| o.got.contains(o.relevant)).count();
    assert!(exact >= 9, "{exact} of {} queries got exactly their record\n\n{report}", outcomes.len());
    assert!(found >= 11, "{found} of {} queries got their record\n\n{report}", outcomes.len());
    for o in outcomes.iter().filter(|o| !o.got.is_empty()) {
        let best = o.scores.first().map_or(0.0, |(_, score)| *score);
        let own = o.scores.iter().find(|(id, _)| id == o.relevant).map_or(f32::MIN, |(_, score)| *score);
        assert!(
            o.got.contains(o.relevant) && best - own <= 0.02,
            "{}: its record is not among the best matches\n\n{report}",
            o.query
        );
    }
}
